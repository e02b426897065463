/* modelref: what --model, --drafter and DSPARK_MODEL name, turned into a
 * folder or a .gguf file on this machine, and whether that checkpoint asks
 * to run code of its own.
 *
 * A spec is a local path (a folder or a .gguf file), or a Hugging Face id
 * ORG/NAME, optionally @REVISION, optionally /FILE.gguf (one file of a repo
 * holding several). An existing local path always wins. An id is looked up
 * in these places, in this order (modelref_places lists them):
 *
 *   1. each folder of $DSPARK_MODEL_DIRS (colon-separated, "~/" expanded):
 *      DIR/ORG/NAME, DIR/NAME, and the hub layout DIR/models--ORG--NAME;
 *   2. drafters only: each folder of $DSPARK_DRAFTERS as DIR/NAME, then
 *      the dspark cache's drafters/NAME ($DSPARK_CACHE_DIR, else
 *      $XDG_CACHE_HOME/dspark, else ~/.cache/dspark);
 *   3. the Hugging Face cache (base/hfcache.h): the snapshot refs/REVISION
 *      names (main by default); without a revision and without refs/main,
 *      the newest snapshot;
 *   4. LM Studio's folders: ~/.lmstudio/models/ORG/NAME, then
 *      ~/.cache/lm-studio/models/ORG/NAME;
 *   5. drafters only: beside the target (its folder's parent, or the folder
 *      holding a target .gguf).
 *
 * With @REVISION only the hub layouts (1 and 3) can answer: a plain folder
 * does not say which revision it holds. A found folder is a checkpoint when
 * it has config.json; else (targets only) when it holds GGUF files: the one
 * named by /FILE.gguf, or its only one (mmproj-*.gguf vision projectors do
 * not count, and a split set NAME-0000K-of-0000N.gguf counts as its first
 * shard); several are an error listing them. A folder that is neither is
 * passed over, as is one without the named file. */
#ifndef DS_MODELREF_H
#define DS_MODELREF_H

#include <stddef.h>

typedef enum { MODELREF_TARGET = 0, MODELREF_DRAFTER } modelref_kind;

#define MODELREF_MAX_PLACES 64

typedef struct {
    const char *what; /* "DSPARK_MODEL_DIRS", "DSPARK_DRAFTERS", "dspark cache", "Hugging Face cache",
                         "LM Studio", "beside the model" (static strings) */
    char path[2048];  /* the folder ids are looked up under */
    int drafters_only;
} modelref_place;

/* The places an id is looked up in, in order, for kind (model_dir: the
 * target, for "beside the model"; may be NULL). Returns the count written
 * (at most cap). */
int modelref_places(modelref_kind kind, const char *model_dir, modelref_place *out, int cap);

/* spec -> a folder or a .gguf file in out. 0 on success; -1 with err saying
 * what is wrong: a malformed spec, an ambiguous folder, or a miss, which
 * lists every path looked at and how to download the model. */
int modelref_resolve(const char *spec, modelref_kind kind, const char *model_dir, char *out, size_t n, char *err,
                     size_t errlen);

/* The id search alone (no local path, errors not reported): 1 and the path
 * in out when id (ORG/NAME) is found, 0 when not (or id is malformed), -1
 * when a folder was found that leaves the choice open (several GGUF
 * files; out holds that folder). For the registry's drafters and "is it
 * downloaded" checks. */
int modelref_find_id(const char *id, modelref_kind kind, const char *model_dir, char *out, size_t n);

/* Whether remote code is accepted: trust_flag (--trust-remote-code) or
 * $DSPARK_TRUST_REMOTE_CODE set to 1 / true / yes. */
int modelref_trust_remote_code(int trust_flag);

/* A checkpoint folder whose config.json, tokenizer_config.json or
 * generation_config.json (or a *_config object nested in one) carries a
 * non-empty "auto_map" or "model_file" expects its own Python code to be
 * imported. dspark never runs it; such a checkpoint is refused unless
 * trusted (it then loads only when its architecture is one dspark
 * implements). 0 when path is a .gguf file, has no such marker, or trusted;
 * -1 with err naming the file and the marker otherwise. Unreadable or
 * malformed files are left to the loader's own errors. */
int modelref_check_remote_code(const char *path, int trusted, char *err, size_t errlen);

#endif
