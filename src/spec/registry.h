/* registry: the targets dspark knows published drafters for, read from
 * models/registry.json (the one source of truth; its format is described
 * in registry.c), and where a local copy of a model may be. A target is
 * recognised by its shape, so any repo name or re-save of the same weights
 * matches (Qwen3-4B/8B/14B, April 2025 release: rope theta 1e6; the 2507
 * refresh uses 5e6 and is not the model the drafters were trained on), as
 * is the bundled default model, whose drafters are found beside it. */
#ifndef DS_REGISTRY_H
#define DS_REGISTRY_H

#include <stddef.h>

#include "engine/config.h"

/* The bundled default model (models/ in the source tree). */
#define DSPARK_DEFAULT_MODEL "dspark-coder-6m"

#define REGISTRY_MAX_BUILDS 8

typedef struct {
    const char *kind; /* "bf16", "mlx-8bit", "mlx-4bit" or "gguf" */
    const char *id;   /* its Hugging Face repo */
} registry_build;

typedef struct {
    const char *id;               /* Hugging Face repo of the drafter (NULL: none published) */
    const struct cJSON *acceptance; /* the published tokens per round (an object), or NULL */
} registry_drafter;

typedef struct {
    const char *target; /* e.g. "Qwen3-4B" */
    const char *hf_id;  /* e.g. "Qwen/Qwen3-4B"; NULL for the bundled model */
    const char *note;   /* or NULL */
    int bundled;        /* the model in models/ beside the binary */
    const char *dspark; /* Hugging Face repo of its DSpark drafter */
    const char *dflash; /* ... of its z-lab DFlash drafter (NULL: none published) */
    registry_drafter dspark_d, dflash_d;
    /* the shape (config.json's names) */
    char model_type[32];
    int vocab, hidden, intermediate, layers, heads, kv_heads, head_dim, tied, max_pos;
    double rope_theta;
    int n_builds;
    registry_build builds[REGISTRY_MAX_BUILDS];
} registry_entry;

/* The entries (loaded on first use, once per process); *n gets the count.
 * An unreadable or malformed registry file leaves none: registry_source
 * says why. */
const registry_entry *registry_entries(int *n);
/* The registry file read (or "" when none was found) and the error that
 * left the registry empty ("" when none). */
void registry_source(const char **path, const char **error);
/* Loads a registry file at path in place of the one found beside the
 * binary (tests). 0, or -1 with err filled; the previous one is kept on
 * error. Not thread-safe: call before other threads use the registry. */
int registry_load_file(const char *path, char *err, size_t errlen);

/* The entry for a target config, or NULL. */
const registry_entry *registry_match(const model_config *c);

/* Looks for a local copy of drafter repo ("owner/name") holding a
 * config.json, in the order modelref.h gives for drafters (DSPARK_MODEL_DIRS,
 * DSPARK_DRAFTERS, the dspark cache, the Hugging Face cache, LM Studio,
 * beside the target model_dir). Returns 1 and the directory in out, or 0. */
int registry_find_local(const char *repo, const char *model_dir, char *out, size_t n);

/* The model used when no --model is given: $DSPARK_MODEL, else the bundled
 * DSPARK_DEFAULT_MODEL under models/ beside the dspark binary (the source
 * tree; ../../models/ for a build/<kind>/ binary), ../share/dspark/models/
 * or ../models/. 1 with the directory (or $DSPARK_MODEL's spec) in out,
 * or 0. */
int registry_default_model(char *out, size_t n);
/* The bundled model's folder beside the binary (as above, ignoring
 * $DSPARK_MODEL): 1 with it in out, or 0. */
int registry_bundled_dir(char *out, size_t n);

/* How to get a missing drafter, for messages. */
void registry_search_hint(const char *repo, char *out, size_t n);

#endif
