/* pull: a model and its drafters from the Hugging Face hub (base/hub) into
 * the hub cache. Once the target's config.json is in the snapshot, the
 * registry matches it and each published drafter (DSpark, DFlash) is
 * pulled too, so `--mode auto` finds them (registry_find_local reads the
 * same cache). */
#ifndef DS_PULL_H
#define DS_PULL_H

#include <stddef.h>

#include "base/hub.h"

typedef struct {
    hub_opts hub;    /* revision, --include, jobs, retries, log: for the target */
    int no_drafters; /* pull the target only */
} pull_opts;

/* Pulls spec ("org/name" or "org/name@rev"; a rev there overrides
 * o->hub.revision) and, unless o->no_drafters, the registered drafters of
 * the target (their default files at main). The target's snapshot folder
 * goes to snapshot. 0 when the target is complete, -1 with err otherwise.
 * A drafter that fails does not fail the pull: it is reported to
 * o->hub.log and counted in *drafter_failures (may be NULL). */
int pull_model(const char *spec, const pull_opts *o, char *snapshot, size_t n, int *drafter_failures, char *err,
               size_t errlen);

/* A --model / --drafter argument for a command given --pull: an existing
 * path is returned as it is; an id ("org/name[@rev]") is looked up in the
 * hub cache and pulled when its snapshot is absent (drafters along when
 * with_drafters). out gets the snapshot folder, or its one .gguf file when
 * the snapshot has no config.json (a GGUF repo). 0, or -1 with err. */
int pull_resolve(const char *arg, int with_drafters, const pull_opts *o, char *out, size_t n, char *err,
                 size_t errlen);

#endif
