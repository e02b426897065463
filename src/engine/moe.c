#include "engine/moe.h"

#include <math.h>

void moe_route(float *p, int E, int K, int norm, int *sel, float *w) {
    float mx = -INFINITY, sum = 0.0f;
    for (int j = 0; j < E; j++) mx = p[j] > mx ? p[j] : mx;
    for (int j = 0; j < E; j++) sum += (p[j] = expf(p[j] - mx));
    for (int j = 0; j < E; j++) p[j] = p[j] / sum;
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int j = 0; j < E; j++) {
            int taken = 0;
            for (int u = 0; u < k; u++) taken |= sel[u] == j;
            if (!taken && (best < 0 || p[j] > p[best])) best = j;
        }
        sel[k] = best, w[k] = p[best];
    }
    if (norm) {
        float tot = 0.0f;
        for (int k = 0; k < K; k++) tot += w[k];
        for (int k = 0; k < K; k++) w[k] = w[k] / tot;
    }
}
