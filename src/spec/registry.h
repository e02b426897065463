/* registry: the published drafters of known targets, and where a local
 * copy of one may be. A target is recognised by its shape, so any repo
 * name or re-save of the same weights matches (Qwen3-4B/8B/14B, April 2025
 * release: rope theta 1e6; the 2507 refresh uses 5e6 and is not the model
 * the drafters were trained on), as is the bundled default model, whose
 * drafters are found beside it. */
#ifndef DS_REGISTRY_H
#define DS_REGISTRY_H

#include <stddef.h>

#include "engine/config.h"

/* The bundled default model (models/ in the source tree). */
#define DSPARK_DEFAULT_MODEL "dspark-coder-6m"

typedef struct {
    const char *target; /* e.g. "Qwen3-4B" */
    const char *dspark; /* Hugging Face repo of its DSpark drafter */
    const char *dflash; /* ... of its z-lab DFlash drafter (NULL: none published) */
} registry_entry;

/* The entry for a target config, or NULL. */
const registry_entry *registry_match(const model_config *c);

/* Looks for a local copy of repo ("owner/name") holding a config.json, in
 * order: each directory of $DSPARK_DRAFTERS (colon-separated) as DIR/name;
 * the dspark cache (DIR/drafters/name, DIR = $DSPARK_CACHE_DIR or
 * $XDG_CACHE_HOME/dspark or ~/.cache/dspark); the Hugging Face hub cache
 * ($HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub,
 * models--owner--name/snapshots/ *); beside the target (model_dir/../name,
 * or the folder holding it when model_dir is a file such as a .gguf).
 * Returns 1 and the directory in out, or 0. */
int registry_find_local(const char *repo, const char *model_dir, char *out, size_t n);

/* The model used when no --model is given: $DSPARK_MODEL, else the bundled
 * DSPARK_DEFAULT_MODEL under models/ beside the dspark binary (the source
 * tree; ../../models/ for a build/<kind>/ binary), ../share/dspark/models/
 * or ../models/. 1 with the directory in out,
 * or 0. */
int registry_default_model(char *out, size_t n);

/* The places registry_find_local looks, for messages ("a, b or c"). */
void registry_search_hint(const char *repo, char *out, size_t n);

#endif
