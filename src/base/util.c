/* util: see util.h. */
#include "base/util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/random.h>

int ds_err(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static void oom(size_t n) {
    fprintf(stderr, "dspark: out of memory allocating %zu bytes\n", n);
    abort();
}

void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) oom(n);
    return p;
}

void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) oom(n * size);
    return p;
}

void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) oom(n);
    return q;
}

char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = xmalloc(n);
    memcpy(p, s, n);
    return p;
}

void *xaligned(size_t n) {
    void *p = NULL;
    size_t sz = (n + 63) & ~(size_t)63;
    if (posix_memalign(&p, 64, sz ? sz : 64) != 0) oom(n);
    return p;
}

char *ds_read_file(const char *path, size_t *len, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        ds_err(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = xmalloc(cap);
    for (;;) {
        if (n + 1 >= cap) {
            cap *= 2;
            buf = xrealloc(buf, cap);
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        ds_err(err, errlen, "%s: read error", path);
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

int ds_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int ds_path_join(char *out, size_t n, const char *dir, const char *name) {
    int r = snprintf(out, n, "%s/%s", dir, name);
    return (r < 0 || (size_t)r >= n) ? -1 : 0;
}

double ds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t ds_fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

int ds_parse_ids(const char *s, int **out, char *err, size_t errlen) {
    int cap = 16, n = 0;
    int *ids = xmalloc(sizeof(int) * (size_t)cap);
    const char *p = s;
    while (*p) {
        while (*p == ' ') p++;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > 0x7fffffff) {
            free(ids);
            return ds_err(err, errlen, "bad token id list at \"%.20s\": expected non-negative integers separated by commas", p);
        }
        if (n == cap) ids = xrealloc(ids, sizeof(int) * (size_t)(cap *= 2));
        ids[n++] = (int)v;
        p = end;
        while (*p == ' ') p++;
        if (*p == ',') p++;
        else if (*p) {
            free(ids);
            return ds_err(err, errlen, "bad token id list at \"%.20s\": expected ','", p);
        }
    }
    if (n == 0) {
        free(ids);
        return ds_err(err, errlen, "empty token id list");
    }
    *out = ids;
    return n;
}

float ds_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    union { uint32_t u; float f; } v;
    if (exp == 0) {
        if (man == 0) {
            v.u = sign;
        } else { /* subnormal: value = man * 2^-24 */
            float f = (float)man * (1.0f / 16777216.0f);
            v.f = f;
            v.u |= sign;
        }
    } else if (exp == 31) {
        v.u = sign | 0x7f800000u | (man << 13);
    } else {
        v.u = sign | ((exp + 112) << 23) | (man << 13);
    }
    return v.f;
}

uint16_t ds_f32_to_f16(float f) {
    union { uint32_t u; float f; } v;
    v.f = f;
    uint32_t sign = (v.u >> 16) & 0x8000;
    uint32_t a = v.u & 0x7fffffff;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* overflow -> inf */
    if (a < 0x38800000u) { /* subnormal or zero in f16 */
        v.u = a;
        float x = v.f * 16777216.0f; /* scale to units of 2^-24 */
        uint32_t m = (uint32_t)x;
        float rem = x - (float)m;
        if (rem > 0.5f || (rem == 0.5f && (m & 1))) m++;
        return (uint16_t)(sign | m);
    }
    uint32_t e = (a >> 23) - 112, m = a & 0x7fffff;
    uint32_t r = (e << 10) | (m >> 13);
    uint32_t rest = m & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (r & 1))) r++;
    return (uint16_t)(sign | r);
}

static pthread_once_t id_once = PTHREAD_ONCE_INIT;
static uint64_t id_key;
static _Atomic uint64_t id_counter;

static void fill_random(void *p, size_t n) {
    if (getrandom(p, n, GRND_NONBLOCK) == (ssize_t)n) return;
    struct timespec ts; /* no kernel randomness: the clock will do */
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t h = ds_fnv1a(DS_FNV_SEED, &ts, sizeof ts);
    h = ds_mix64(h ^ (uint64_t)(uintptr_t)p);
    for (size_t i = 0; i < n; i++, h = ds_mix64(h + i)) ((unsigned char *)p)[i] = (unsigned char)h;
}

static void id_init(void) { fill_random(&id_key, sizeof id_key); }

void ds_unique_id(char *out, size_t n, const char *prefix) {
    pthread_once(&id_once, id_init);
    uint64_t c = atomic_fetch_add(&id_counter, 1);
    uint32_t r;
    fill_random(&r, sizeof r);
    snprintf(out, n, "%s%016llx%08x", prefix, (unsigned long long)ds_mix64(c ^ id_key), (unsigned)r);
}

int ds_utf8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned char b = u[i];
        size_t len = b < 0x80 ? 1 : b >= 0xC2 && b < 0xE0 ? 2 : b >= 0xE0 && b < 0xF0 ? 3 : b >= 0xF0 && b < 0xF5 ? 4 : 0;
        if (!len || i + len > n) return 0;
        for (size_t k = 1; k < len; k++)
            if ((u[i + k] & 0xC0) != 0x80) return 0;
        i += len;
    }
    return 1;
}
