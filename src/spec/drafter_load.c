/* drafter_load: drafter config parsing, weight binding and the pairing
 * checks against the target. See drafter.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "spec/drafter_internal.h"
#include "base/json.h"
#include "base/util.h"
#include "engine/wbind.h"

/* A list of ints under key in obj (absent: 0; else count or -1). */
static int int_list(const cJSON *obj, const char *key, int *out, int cap, int lo, int hi, const char *ctx, char *err,
                    size_t errlen) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!a || cJSON_IsNull(a)) return 0;
    if (!cJSON_IsArray(a)) return ds_err(err, errlen, "%s: \"%s\" must be a list of integers", ctx, key);
    int n = 0;
    for (const cJSON *e = a->child; e; e = e->next) {
        if (!json_is_int(e, lo, hi))
            return ds_err(err, errlen, "%s: \"%s\" entries must be integers in %d..%d", ctx, key, lo, hi);
        if (n == cap) return ds_err(err, errlen, "%s: \"%s\" has more than %d entries", ctx, key, cap);
        out[n++] = e->valueint;
    }
    if (n == 0) return ds_err(err, errlen, "%s: \"%s\" is empty", ctx, key);
    return n;
}

/* Keys that describe drafter variants we do not implement: refuse them by
 * name rather than run a different network. */
static int refuse_variants(const cJSON *root, const cJSON *dfc, const char *ctx, char *err, size_t errlen) {
    int b = 0;
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    if (lt && cJSON_IsArray(lt))
        for (const cJSON *e = lt->child; e; e = e->next)
            if (!cJSON_IsString(e) || strcmp(e->valuestring, "full_attention") != 0)
                return ds_err(err, errlen,
                              "%s: layer_types entry \"%.40s\" is not supported (only full_attention drafter layers)",
                              ctx, cJSON_IsString(e) ? e->valuestring : "?");
    if (json_opt_bool(root, "use_sliding_window", &b, ctx, err, errlen) < 0) return -1;
    if (b) return ds_err(err, errlen, "%s: sliding-window drafters are not supported", ctx);
    if (dfc) {
        b = 0;
        if (json_opt_bool(dfc, "use_swa", &b, ctx, err, errlen) < 0) return -1;
        if (b) return ds_err(err, errlen, "%s: dflash_config.use_swa drafters are not supported", ctx);
        b = 0;
        if (json_opt_bool(dfc, "causal", &b, ctx, err, errlen) < 0) return -1;
        if (b) return ds_err(err, errlen, "%s: causal DFlash drafters are not supported", ctx);
        const cJSON *sink = cJSON_GetObjectItemCaseSensitive(dfc, "attention_sink_bias");
        if (sink && !cJSON_IsNull(sink) && !cJSON_IsFalse(sink))
            return ds_err(err, errlen, "%s: dflash_config.attention_sink_bias is not supported", ctx);
    }
    return 0;
}

int drafter_config_parse(drafter_config *c, const char *text, size_t n, const char *ctx, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    if (config_parse(&c->base, text, n, ctx, err, errlen) != 0) return -1;
    cJSON *root = json_parse(text, n, ctx, err, errlen);
    if (!root) return -1;
    int rc = -1;
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    const char *an = arch && cJSON_IsArray(arch) && arch->child && cJSON_IsString(arch->child)
                         ? arch->child->valuestring
                         : NULL;
    if (!an || (strcmp(an, "DFlashDraftModel") != 0 && strcmp(an, "Qwen3DSparkModel") != 0)) {
        ds_err(err, errlen,
               "%s: not a drafter: \"architectures\" must be [\"DFlashDraftModel\"] (z-lab DFlash) or "
               "[\"Qwen3DSparkModel\"] (DeepSpec DSpark)",
               ctx);
        goto out;
    }
    c->kind = strcmp(an, "DFlashDraftModel") == 0 ? DRAFTER_DFLASH : DRAFTER_DSPARK;
    if (c->base.arch != ARCH_QWEN3) {
        ds_err(err, errlen, "%s: drafters are supported on qwen3 layers only (model_type \"%s\")", ctx,
               c->base.model_type);
        goto out;
    }
    if (c->base.rope_type != ROPE_DEFAULT) {
        ds_err(err, errlen, "%s: rope scaling in a drafter is not supported", ctx);
        goto out;
    }
    if (c->base.attention_bias || c->base.o_bias) {
        ds_err(err, errlen, "%s: attention biases in a drafter are not supported", ctx);
        goto out;
    }
    const cJSON *dfc = cJSON_GetObjectItemCaseSensitive(root, "dflash_config");
    if (dfc && !cJSON_IsObject(dfc) && !cJSON_IsNull(dfc)) {
        ds_err(err, errlen, "%s: \"dflash_config\" must be an object", ctx);
        goto out;
    }
    if (dfc && cJSON_IsNull(dfc)) dfc = NULL;
    if (refuse_variants(root, dfc, ctx, err, errlen) != 0) goto out;
    /* z-lab nests mask_token_id and target_layer_ids under dflash_config;
       DeepSpec keeps them at the top level */
    const cJSON *src = (c->kind == DRAFTER_DFLASH && dfc) ? dfc : root;
    int64_t v = 0;
    if (json_req_int(root, "block_size", 2, DRAFTER_MAX_BLOCK, &v, ctx, err, errlen) < 0) goto out;
    c->block_size = (int)v;
    if (json_req_int(src, "mask_token_id", 0, c->base.vocab_size - 1, &v, ctx, err, errlen) < 0) goto out;
    c->mask_token_id = (int)v;
    v = 0;
    if (json_opt_int(root, "num_target_layers", 1, 1024, &v, ctx, err, errlen) < 0) goto out;
    c->num_target_layers = (int)v;
    /* -1 taps the embedding output (HF hidden_states[0]) */
    int nt = int_list(src, "target_layer_ids", c->tap_layers, DRAFTER_MAX_TAPS, -1, 1023, ctx, err, errlen);
    if (nt < 0) goto out;
    if (nt == 0) {
        /* the published fallback: spread the taps over the target's depth */
        int N = c->num_target_layers, L = c->base.n_layers;
        if (!N) {
            ds_err(err, errlen, "%s: no \"target_layer_ids\" and no \"num_target_layers\" to derive them from", ctx);
            goto out;
        }
        if (L > DRAFTER_MAX_TAPS) L = DRAFTER_MAX_TAPS;
        if (L > 1 && N < 5) {
            ds_err(err, errlen, "%s: no \"target_layer_ids\", and the published rule cannot spread %d taps over a "
                                "%d-layer target; give them explicitly", ctx, L, N);
            goto out;
        }
        if (L == 1) c->tap_layers[nt++] = N / 2;
        else
            for (int i = 0; i < L; i++) c->tap_layers[nt++] = (int)lround(1.0 + (double)i * (N - 4) / (L - 1));
    }
    c->n_taps = nt;
    if (c->kind == DRAFTER_DSPARK) {
        const char *ht = NULL;
        if (json_opt_str(root, "markov_head_type", &ht, ctx, err, errlen) < 0) goto out;
        if (ht && strcmp(ht, "vanilla") != 0) {
            ds_err(err, errlen, "%s: markov_head_type \"%.32s\" is not supported (only \"vanilla\")", ctx, ht);
            goto out;
        }
        v = 0;
        if (json_opt_int(root, "markov_rank", 0, 65536, &v, ctx, err, errlen) < 0) goto out;
        c->markov_rank = (int)v;
        c->confidence = 0;
        if (json_opt_bool(root, "enable_confidence_head", &c->confidence, ctx, err, errlen) < 0) goto out;
        c->confidence_with_markov = c->markov_rank > 0;
        if (json_opt_bool(root, "confidence_head_with_markov", &c->confidence_with_markov, ctx, err, errlen) < 0)
            goto out;
        if (c->confidence_with_markov && c->markov_rank == 0) c->confidence_with_markov = 0;
    }
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}

/* Drops the memory behind a tensor we no longer read (a copy that was
 * aliased to the target's): whole pages inside it only. */
static void release_tensor(const tensor *t) {
    long ps = sysconf(_SC_PAGESIZE);
    if (ps <= 0) return;
    uintptr_t a = ((uintptr_t)t->data + (uintptr_t)ps - 1) & ~((uintptr_t)ps - 1);
    uintptr_t e = ((uintptr_t)t->data + t->nbytes) & ~((uintptr_t)ps - 1);
    if (e > a) madvise((void *)a, e - a, MADV_DONTNEED);
}

static int check_pairing(const drafter_config *c, const model_config *t, const char *dir, char *err, size_t errlen) {
    const model_config *b = &c->base;
    if (b->hidden_size != t->hidden_size)
        return ds_err(err, errlen, "drafter %s: hidden_size %d does not match the target's %d", dir, b->hidden_size,
                      t->hidden_size);
    if (b->vocab_size != t->vocab_size)
        return ds_err(err, errlen, "drafter %s: vocab_size %d does not match the target's %d", dir, b->vocab_size,
                      t->vocab_size);
    if (c->num_target_layers && c->num_target_layers != t->n_layers)
        return ds_err(err, errlen, "drafter %s: trained for a %d-layer target, but the target has %d layers", dir,
                      c->num_target_layers, t->n_layers);
    for (int i = 0; i < c->n_taps; i++)
        if (c->tap_layers[i] >= t->n_layers - 1)
            return ds_err(err, errlen,
                          "drafter %s: target_layer_ids has %d, but taps must be below the target's last layer (%d)",
                          dir, c->tap_layers[i], t->n_layers - 1);
    if (c->mask_token_id >= t->vocab_size)
        return ds_err(err, errlen, "drafter %s: mask_token_id %d is outside the target's vocabulary", dir,
                      c->mask_token_id);
    return 0;
}

/* The drafter runs on its target's backend, beside the target (a GPU
   target's drafter on that GPU, borrowing the target's copies of the
   embedding / LM head it aliases). */
static int open_backend(dmodel *dm, const model *target, char *err, size_t errlen) {
    const drafter_config *c = &dm->cfg;
    for (int l = 0; l < c->base.n_layers; l++) dm->layers[l].attn = ATTN_BLOCK;
    dm->desc = (drafter_desc){.cfg = &c->base,
                              .dspark = c->kind == DRAFTER_DSPARK,
                              .block_size = c->block_size,
                              .mask_token_id = c->mask_token_id,
                              .n_taps = c->n_taps,
                              .markov_rank = c->markov_rank,
                              .conf_markov = c->confidence_with_markov,
                              .fc = dm->fc,
                              .hidden_norm = dm->hidden_norm,
                              .final_norm = dm->final_norm,
                              .inv_freq = dm->inv_freq,
                              .layers = dm->layers,
                              .embed = dm->embed,
                              .lm_head = dm->lm_head,
                              .alias_embed = dm->alias_embed,
                              .alias_head = dm->alias_head,
                              .w1 = dm->w1,
                              .w2 = dm->w2,
                              .conf_w = dm->conf_w,
                              .conf_b = dm->conf_b};
    dm->be = model_backend(target);
    return dm->be->dmodel_create(&dm->bdm, &dm->desc, model_backend_model(target), err, errlen);
}

int dmodel_load(dmodel **out, const char *dir, const model *target, const model_load_opts *opt, char *err,
                size_t errlen) {
    *out = NULL;
    char path[4096], ctx[4200];
    if (ds_path_join(path, sizeof path, dir, "config.json") != 0) return ds_err(err, errlen, "path too long: %s", dir);
    size_t len;
    char *text = ds_read_file(path, &len, err, errlen);
    if (!text) return -1;
    snprintf(ctx, sizeof ctx, "%s", path);
    dmodel *dm = xcalloc(1, sizeof *dm);
    int prc = drafter_config_parse(&dm->cfg, text, len, ctx, err, errlen);
    free(text);
    if (prc != 0) goto fail;
    const drafter_config *c = &dm->cfg;
    const model_config *tc = model_cfg(target);
    if (check_pairing(c, tc, dir, err, errlen) != 0) goto fail;
    dm->target = target;
    st_load mode = opt && opt->use_mmap ? ST_LOAD_MMAP : ST_LOAD_READ;
    if (st_set_open_mode(&dm->st, dir, mode, err, errlen) != 0) goto fail;

    const model_config *b = &c->base;
    int64_t H = b->hidden_size, V = b->vocab_size, hd = b->head_dim;
    int64_t R = c->markov_rank;
    wbind w;
    wbind_init(&w, dm->st, NULL, c->kind == DRAFTER_DFLASH ? "DFlash drafter" : "DSpark drafter", err, errlen);
    char name[256];
    int ok = 1;
    const tensor *hn = NULL, *fn = NULL, *cb = NULL;
    dm->fc = wbind_get(&w, "fc.weight", H, (int64_t)c->n_taps * H);
    ok = dm->fc && (hn = wbind_get(&w, "hidden_norm.weight", H, 0)) && (fn = wbind_get(&w, "norm.weight", H, 0));
    /* DSpark ships its own copies of the target's embedding and LM head, or
       (a checkpoint that leaves both out, as the bundled one does) takes the
       target's, as DFlash always does */
    const int own_tables = c->kind == DRAFTER_DSPARK && (st_set_find(dm->st, "embed_tokens.weight") ||
                                                         st_set_find(dm->st, "lm_head.weight"));
    if (ok && c->kind == DRAFTER_DSPARK) {
        if (own_tables)
            ok = (dm->embed = wbind_get(&w, "embed_tokens.weight", V, H)) &&
                 (dm->lm_head = wbind_get(&w, "lm_head.weight", V, H));
        if (ok && R > 0)
            ok = (dm->w1 = wbind_get(&w, "markov_head.markov_w1.weight", V, R)) &&
                 (dm->w2 = wbind_get(&w, "markov_head.markov_w2.weight", V, R));
        if (ok && c->confidence)
            ok = (dm->conf_w = wbind_get(&w, "confidence_head.proj.weight", 1, H + (c->confidence_with_markov ? R : 0))) &&
                 (cb = wbind_get(&w, "confidence_head.proj.bias", 1, 0));
    }
    dm->owned = xaligned(sizeof(float) *
                         (wbind_layer_floats(b) * (size_t)b->n_layers + 2 * (size_t)H + (size_t)hd + 1));
    float *pool = dm->owned;
    if (ok) {
        dm->hidden_norm = wbind_f32(&pool, hn);
        dm->final_norm = wbind_f32(&pool, fn);
        if (cb) dm->conf_b = *wbind_f32(&pool, cb);
    }
    dm->layers = xcalloc((size_t)b->n_layers, sizeof(wlayer));
    for (int l = 0; ok && l < b->n_layers; l++) {
        snprintf(name, sizeof name, "layers.%d.", l);
        ok = wbind_layer(&w, name, b, l, &pool, &dm->layers[l], NULL) == 0;
    }
    if (ok && wbind_check_leftovers(&w) != 0) ok = 0;
    wbind_done(&w);
    if (!ok) goto fail;
    dm->inv_freq = pool;
    config_rope_inv_freq(b, dm->inv_freq);
    if (c->kind == DRAFTER_DFLASH || !own_tables) {
        dm->embed = model_embed(target);
        dm->lm_head = model_lm_head(target);
        dm->alias_embed = dm->alias_head = 1;
    } else {
        /* DSpark ships copies of the target's tables: use the target's when
           they are the same bytes, and give the copies' memory back */
        const tensor *te = model_embed(target), *th = model_lm_head(target);
        if (tensor_same_values(dm->embed, te)) {
            release_tensor(dm->embed);
            dm->embed = te;
            dm->alias_embed = 1;
        }
        if (tensor_same_values(dm->lm_head, th)) {
            release_tensor(dm->lm_head);
            dm->lm_head = th;
            dm->alias_head = 1;
        }
    }
    if (open_backend(dm, target, err, errlen) != 0) goto fail;
    *out = dm;
    return 0;
fail:
    dmodel_free(dm);
    return -1;
}

void dmodel_free(dmodel *dm) {
    if (!dm) return;
    if (dm->bdm) dm->be->dmodel_free(dm->bdm);
    st_set_close(dm->st);
    free(dm->layers);
    free(dm->owned);
    free(dm);
}

const drafter_config *dmodel_cfg(const dmodel *dm) { return &dm->cfg; }

const char *dmodel_kind_name(const dmodel *dm) {
    if (dm->cfg.kind == DRAFTER_DFLASH) return "dflash";
    return dm->cfg.markov_rank > 0 ? "dspark" : "dspark-r0";
}

int dmodel_aliased(const dmodel *dm, int *embed, int *lm_head) {
    if (embed) *embed = dm->alias_embed;
    if (lm_head) *lm_head = dm->alias_head;
    return dm->alias_embed && dm->alias_head;
}
