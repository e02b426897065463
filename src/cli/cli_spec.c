/* cli_spec: turning --mode / --drafter / --max-draft / --confidence-threshold
 * into a drafter and a draft cap for `run`, `chat` and `bench`.
 *
 * Modes: baseline (no drafter), lookup (n-gram), dspark and dflash (a
 * neural drafter from --drafter DIR or, for a registered target, a local
 * copy of its published drafter), auto (the given or registered drafter,
 * DSpark preferred, else lookup).
 *
 * Caps: --max-draft N pins the cap. Otherwise the pair is calibrated once
 * (the target's verify cost per width and the drafter's round cost, cached
 * in calibration.json, see calib.h) and the cap is the one with the best
 * expected speed under the default acceptance prior; when that is 0
 * (drafting loses at the prior), the adaptive cap takes over, so observed
 * acceptance decides. --max-draft auto adapts every round (calib_ctl). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "spec/registry.h"
#include "base/util.h"

static int mode_of(const char *m) {
    if (!strcmp(m, "baseline")) return CLI_MODE_BASELINE;
    if (!strcmp(m, "lookup")) return CLI_MODE_LOOKUP;
    if (!strcmp(m, "dspark")) return CLI_MODE_DSPARK;
    if (!strcmp(m, "dflash")) return CLI_MODE_DFLASH;
    if (!strcmp(m, "auto")) return CLI_MODE_AUTO;
    cli_die("--mode expects auto, dspark, dflash, lookup or baseline, got \"%s\"", m);
}

const char *cli_mode_name(int mode) {
    static const char *names[] = {"baseline", "lookup", "dspark", "dflash", "auto"};
    return mode >= 0 && mode <= CLI_MODE_AUTO ? names[mode] : "?";
}

/* The drafter directory for a neural mode: --drafter, else the registry's
   local copy; NULL when there is none (want: the repo field). */
static const char *find_drafter(const opts *o, const model *m, int want_dspark, char *buf, size_t n,
                                const char **repo) {
    *repo = NULL;
    if (o->drafter) return o->drafter;
    const registry_entry *r = registry_match(model_cfg(m));
    if (!r) return NULL;
    *repo = want_dspark ? r->dspark : r->dflash;
    if (*repo && registry_find_local(*repo, o->model, buf, n)) return buf;
    return NULL;
}

static void open_neural(cli_spec *sp, const opts *o, const cli_engine *e, seq *s, sampler *smp, const char *dir) {
    char err[1024];
    model_load_opts lo = {.use_mmap = o->use_mmap};
    if (dmodel_load(&sp->dm, dir, e->m, &lo, err, sizeof err) != 0) cli_die("%s", err);
    const drafter_config *c = dmodel_cfg(sp->dm);
    if (sp->mode == CLI_MODE_DSPARK && c->kind != DRAFTER_DSPARK)
        cli_die("--mode dspark: %s is a z-lab DFlash drafter (use --mode dflash)", dir);
    if (sp->mode == CLI_MODE_DFLASH && c->kind == DRAFTER_DSPARK && c->markov_rank > 0)
        cli_die("--mode dflash: %s is a DSpark drafter with a Markov head (use --mode dspark)", dir);
    if (sp->mode == CLI_MODE_AUTO) sp->mode = c->kind == DRAFTER_DSPARK ? CLI_MODE_DSPARK : CLI_MODE_DFLASH;
    if (o->has_conf && !c->confidence)
        cli_die("--confidence-threshold: the drafter in %s has no confidence head", dir);
    if (dstate_create(&sp->ds, sp->dm, seq_capacity(s), e->tp, smp, err, sizeof err) != 0) cli_die("%s", err);
    dstate_set_confidence_threshold(sp->ds, o->conf_threshold);
    sp->d = dstate_drafter(sp->ds);
    snprintf(sp->drafter_dir, sizeof sp->drafter_dir, "%s", dir);
    /* DSpark drafts positions s+1..s+B, DFlash s+1..s+B-1 */
    sp->block_cap = c->kind == DRAFTER_DSPARK ? c->block_size : c->block_size - 1;
}

static double min5(const double *t) {
    double m = t[0];
    for (int i = 1; i < 5; i++) m = t[i] < m ? t[i] : m;
    return m;
}

/* A drafter round's cost on a dummy context (features zero), as a fixed
   part (the block forward) plus a part per drafted token (LM head rows and
   DSpark's Markov steps): the fastest of 5 rounds at cap 1 and at the full
   block, after a warm-up (other processes only ever add time). */
static void measure_drafter(cli_spec *sp, int ctx_len, calib_costs *c) {
    const drafter_config *dc = dmodel_cfg(sp->dm);
    int H = dc->base.hidden_size, B = sp->block_cap;
    int *ids = xcalloc((size_t)ctx_len + 1, sizeof(int));
    for (int i = 0; i <= ctx_len; i++) ids[i] = (i * 7919) % dc->base.vocab_size;
    float *taps = xcalloc((size_t)dc->n_taps * (size_t)ctx_len * (size_t)H, sizeof(float));
    drafter *d = &sp->d;
    d->reset(d->self, ids, ctx_len + 1);
    d->features(d->self, 0, ctx_len, taps, ctx_len, 0);
    int draft[DRAFTER_MAX_BLOCK];
    double t1[5], tb[5];
    d->propose(d->self, B, draft, NULL);
    for (int r = 0; r < 5; r++) {
        double t0 = ds_now();
        d->propose(d->self, 1, draft, NULL);
        t1[r] = ds_now() - t0;
        t0 = ds_now();
        d->propose(d->self, B, draft, NULL);
        tb[r] = ds_now() - t0;
    }
    d->reset(d->self, ids, 0);
    free(ids);
    free(taps);
    double a = min5(t1), b = min5(tb);
    c->draft_tok_s = B > 1 && b > a ? (b - a) / (B - 1) : 0;
    c->draft_s = a - c->draft_tok_s > 0 ? a - c->draft_tok_s : 0;
}

static void calibrate(cli_spec *sp, const opts *o, const cli_engine *e, seq *s) {
    char path[4096], key[CALIB_KEY_MAX], warn[1024] = "", err[1024], mid[PATH_MAX + 64], did[PATH_MAX + 16];
    char *rp = realpath(o->model, NULL);
    snprintf(mid, sizeof mid, "%s|%zu", rp ? rp : o->model, model_weight_bytes(e->m));
    free(rp);
    if (sp->dm) {
        rp = realpath(sp->drafter_dir, NULL);
        snprintf(did, sizeof did, "%s:%s", dmodel_kind_name(sp->dm), rp ? rp : sp->drafter_dir);
        free(rp);
    } else {
        snprintf(did, sizeof did, "%s", cli_mode_name(sp->mode));
    }
    /* the backend is where the model runs ("cpu", or the GPU with its name
       and driver): a GPU's costs are nothing like the CPU's; nor are the
       CPU's the same with the weights in the rows8 layout or row-major
       (mapped), nor with the model split over emulated ranks */
    char dt[48], tpn[16] = "";
    if (model_tensor_parallel(e->m) > 1) snprintf(tpn, sizeof tpn, " tp%d", model_tensor_parallel(e->m));
    snprintf(dt, sizeof dt, "%s%s%s", dtype_name(model_embed(e->m)->dtype), model_rows8(e->m) ? " rows8" : "", tpn);
    calib_key(key, sizeof key, model_device(e->m), mid, did, dt, tp_size(e->tp));
    int have_path = calib_default_path(path, sizeof path) == 0;
    int n_w = sp->block_cap + 1 < CALIB_MAX_W ? sp->block_cap + 1 : CALIB_MAX_W;
    int r = have_path ? calib_load(path, key, &sp->costs, warn, sizeof warn) : 0;
    if (r < 0) fprintf(stderr, "dspark: warning: %s\n", warn);
    if (r == 1 && sp->costs.n_w >= n_w) {
        sp->have_costs = 1;
        return;
    }
    int ctx = CALIB_DEFAULT_CTX;
    if (ctx + n_w + 8 > seq_capacity(s)) ctx = seq_capacity(s) - n_w - 8;
    if (ctx < 1) return; /* window too small to measure: keep the fallback cap */
    fprintf(stderr, "dspark: calibrating %s on this machine (once; cached in %s)\n", cli_mode_name(sp->mode),
            have_path ? path : "memory only");
    if (calib_measure_verify(s, n_w, ctx, CALIB_DEFAULT_REPS, &sp->costs, err, sizeof err) != 0) {
        fprintf(stderr, "dspark: warning: calibration failed (%s); using cap %d\n", err, sp->max_draft);
        return;
    }
    if (sp->dm) measure_drafter(sp, ctx, &sp->costs);
    sp->have_costs = 1;
    if (have_path && calib_store(path, key, &sp->costs, err, sizeof err) != 0)
        fprintf(stderr, "dspark: warning: cannot save calibration: %s\n", err);
}

static void open_lookup(cli_spec *sp) {
    sp->lk = lookup_create(3, 1);
    sp->d = lookup_drafter(sp->lk);
    sp->block_cap = 15;
}

/* lookup with this machine's verify costs sizes each draft by its match
   (lookup_set_costs; n-gram matches draft 8 at most, copy runs more); the
   cap then only bounds it */
#define LOOKUP_SIZED_CAP 15
static void lookup_costs(cli_spec *sp) {
    double t[CALIB_MAX_W];
    int n = sp->costs.n_w < CALIB_MAX_W ? sp->costs.n_w : CALIB_MAX_W;
    for (int w = 1; w <= n; w++) t[w - 1] = calib_verify_time(&sp->costs, w);
    lookup_set_costs(sp->lk, t, n);
}

/* the cap calibration gives at the prior acceptance (the fallback when it
   cannot measure): 0 when drafting does not pay on this machine */
static void calibrated_cap(cli_spec *sp, const opts *o, const cli_engine *e, seq *s) {
    sp->max_draft = sp->mode == CLI_MODE_LOOKUP ? 6 : sp->mode == CLI_MODE_DSPARK ? 2 : sp->block_cap;
    sp->cap_source = "fallback";
    calibrate(sp, o, e, s);
    if (!sp->have_costs) return;
    if (sp->lk) {
        lookup_costs(sp);
        sp->max_draft = sp->costs.n_w - 1 < LOOKUP_SIZED_CAP ? sp->costs.n_w - 1 : LOOKUP_SIZED_CAP;
        sp->cap_source = "calibrated, sized by match";
        return;
    }
    double alpha[CALIB_MAX_K];
    calib_prior(alpha, sp->block_cap, CALIB_PRIOR_A1, CALIB_PRIOR_DECAY);
    sp->max_draft = calib_best_cap(&sp->costs, alpha, sp->block_cap, NULL);
    sp->cap_source = "calibrated";
}

/* DSpark / DFlash: lookup's copy runs replace the drafter's block in the
   rounds they start (unless --no-lookup-drafts) */
static void hybrid(cli_spec *sp, const opts *o, const cli_engine *e) {
    if (!sp->ds || o->no_lookup_drafts) return;
    sp->hy = lookup_hybrid_create(sp->d, model_cfg(e->m)->vocab_size);
    sp->hy_cap = o->max_draft ? o->max_draft : sp->block_cap;
    sp->d = lookup_hybrid_drafter(sp->hy);
}

void cli_spec_open(cli_spec *sp, const opts *o, const char *mode, const cli_engine *e, seq *s, sampler *smp) {
    memset(sp, 0, sizeof *sp);
    sp->mode = mode_of(mode ? mode : o->mode ? o->mode : "baseline");
    const int picked = sp->mode == CLI_MODE_AUTO; /* auto chooses the mode: it may still settle on lookup */
    if (sp->mode == CLI_MODE_BASELINE) {
        if (o->max_draft || o->max_draft_auto || o->drafter || o->has_conf)
            cli_die("--max-draft, --drafter and --confidence-threshold need a speculative --mode");
        return;
    }
    if (sp->mode == CLI_MODE_LOOKUP && o->drafter) cli_die("--mode lookup uses no --drafter");
    if (o->has_conf && (o->conf_threshold < 0 || o->conf_threshold > 1))
        cli_die("--confidence-threshold expects a number in [0, 1]");
    char buf[4096];
    const char *repo = NULL, *dir = NULL;
    if (sp->mode == CLI_MODE_DSPARK || sp->mode == CLI_MODE_DFLASH) {
        dir = find_drafter(o, e->m, sp->mode == CLI_MODE_DSPARK, buf, sizeof buf, &repo);
        if (!dir) {
            char hint[4096];
            const char *rpath, *rerr;
            registry_source(&rpath, &rerr);
            if (!repo)
                cli_die("--mode %s needs --drafter DIR (no published %s drafter is registered for this target%s%s)",
                        cli_mode_name(sp->mode), cli_mode_name(sp->mode), *rerr ? "; " : "", rerr);
            registry_search_hint(repo, hint, sizeof hint);
            cli_die("--mode %s: the drafter %s is not on this machine: %s", cli_mode_name(sp->mode), repo, hint);
        }
    } else if (sp->mode == CLI_MODE_AUTO) {
        dir = find_drafter(o, e->m, 1, buf, sizeof buf, &repo);
        const char *ds_repo = repo;
        if (!dir && !o->drafter) dir = find_drafter(o, e->m, 0, buf, sizeof buf, &repo);
        if (!dir) {
            sp->mode = CLI_MODE_LOOKUP;
            if (ds_repo) {
                char hint[4096];
                registry_search_hint(ds_repo, hint, sizeof hint);
                fprintf(stderr, "dspark: note: --mode auto uses lookup: this target's drafter %s is not on this "
                                "machine (%s)\n", ds_repo, hint);
            }
        }
    }
    if (sp->mode == CLI_MODE_LOOKUP) {
        if (o->has_conf) cli_die("--confidence-threshold needs a DSpark drafter");
        open_lookup(sp);
    } else {
        open_neural(sp, o, e, s, smp, dir);
    }
    if (o->max_draft) {
        sp->max_draft = o->max_draft;
        sp->cap_source = "pinned";
        hybrid(sp, o, e);
        return;
    }
    calibrated_cap(sp, o, e, s);
    int losing = sp->have_costs && sp->max_draft == 0;
    /* auto with the registry's drafter: when that drafter does not pay on
       this machine even at the published acceptance (a target small enough
       to be compute-bound, whose drafter costs most of a step), lookup,
       which drafts for free, is the faster lossless mode */
    if (losing && picked && sp->dm && !o->drafter && !o->max_draft_auto && !o->has_conf) {
        fprintf(stderr,
                "dspark: note: --mode auto uses lookup: %s drafting does not pay on this machine even at the "
                "published acceptance (calibrated cap 0); --mode %s runs it with an adaptive cap\n",
                cli_mode_name(sp->mode), cli_mode_name(sp->mode));
        dstate_free(sp->ds);
        dmodel_free(sp->dm);
        sp->ds = NULL;
        sp->dm = NULL;
        sp->drafter_dir[0] = '\0';
        memset(&sp->costs, 0, sizeof sp->costs);
        sp->have_costs = 0;
        sp->mode = CLI_MODE_LOOKUP;
        open_lookup(sp);
        calibrated_cap(sp, o, e, s);
        losing = sp->have_costs && sp->max_draft == 0;
    }
    /* When drafting does not pay at the prior acceptance on this machine,
       only observed acceptance can say otherwise: the adaptive cap starts
       parked, probes, and drafts only while drafting wins. */
    if (o->max_draft_auto || losing) {
        calib_ctl_init(&sp->ctl, sp->have_costs ? &sp->costs : NULL, sp->block_cap);
        sp->adaptive = 1;
        sp->max_draft = sp->block_cap;
        sp->cap_source = o->max_draft_auto ? "auto" : "calibrated 0: auto";
    }
    hybrid(sp, o, e);
}

void cli_spec_close(cli_spec *sp) {
    lookup_hybrid_free(sp->hy);
    lookup_free(sp->lk);
    dstate_free(sp->ds);
    if (!sp->borrowed_dm) dmodel_free(sp->dm);
    memset(sp, 0, sizeof *sp);
}

void cli_spec_clone(cli_spec *dst, const cli_spec *src, const opts *o, const cli_engine *e, seq *s, sampler *smp) {
    char err[1024];
    *dst = *src;
    dst->lk = NULL;
    dst->ds = NULL;
    dst->hy = NULL;
    dst->borrowed_dm = src->dm != NULL;
    if (src->mode == CLI_MODE_LOOKUP) {
        open_lookup(dst);
        if (dst->have_costs) lookup_costs(dst); /* calibrated (not pinned): sized by match */
    } else if (src->dm) {
        if (dstate_create(&dst->ds, src->dm, seq_capacity(s), e->tp, smp, err, sizeof err) != 0) cli_die("%s", err);
        dstate_set_confidence_threshold(dst->ds, o->conf_threshold);
        dst->d = dstate_drafter(dst->ds);
        if (src->hy) hybrid(dst, o, e);
    }
    if (dst->adaptive) calib_ctl_init(&dst->ctl, dst->have_costs ? &dst->costs : NULL, dst->block_cap);
}

drafter *cli_spec_drafter(cli_spec *sp) { return sp && sp->mode != CLI_MODE_BASELINE ? &sp->d : NULL; }

int cli_spec_ctx_len(const cli_spec *sp) { return sp && sp->ds ? dstate_ctx_len(sp->ds) : -1; }

int cli_spec_copy_prefix(cli_spec *dst, const cli_spec *src, int n, char *err, size_t errlen) {
    if (!dst->ds || !src->ds) return n;
    const int have = dstate_ctx_len(src->ds), m = n < have ? n : have;
    return dstate_copy_prefix(dst->ds, src->ds, m, err, errlen) != 0 ? -1 : m;
}

dstate *cli_spec_dstate(const cli_spec *sp) { return sp ? sp->ds : NULL; }

/* The cap of the coming round: hy_cap (a whole block, or the pinned cap)
   when lookup has a copy run to draft (free, parked or not), else the
   adaptive controller's or the fixed cap; lookup's rounds say nothing
   about the drafter's acceptance, so the controller does not see them. */
static int ctl_next(void *p) {
    cli_spec *sp = p;
    if (sp->hy && lookup_hybrid_ready(sp->hy)) return sp->hy_cap;
    return sp->adaptive ? calib_ctl_next(&sp->ctl) : sp->max_draft;
}
static void ctl_observe(void *p, int proposed, int accepted) {
    cli_spec *sp = p;
    if (sp->hy && lookup_hybrid_last_was_lookup(sp->hy)) return;
    if (sp->adaptive) calib_ctl_observe(&sp->ctl, proposed, accepted);
}

void cli_spec_apply(cli_spec *sp, spec_opts *so) {
    if (!sp || sp->mode == CLI_MODE_BASELINE) return;
    so->max_draft = sp->hy ? sp->hy_cap : sp->max_draft; /* hy_cap >= max_draft */
    if (sp->adaptive || sp->hy) {
        so->next_cap = ctl_next;
        so->observe = ctl_observe;
        so->ctl = sp;
    }
}

void cli_spec_describe(const cli_spec *sp, const spec_stats *st, char *out, size_t n) {
    if (!sp || sp->mode == CLI_MODE_BASELINE) {
        snprintf(out, n, ", mode baseline");
        return;
    }
    size_t o = (size_t)snprintf(out, n, ", mode %s, cap %d (%s), tokens/round %.2f, drafter %.0f%% of decode time, "
                                "accepted drafts per round",
                                cli_mode_name(sp->mode), sp->max_draft, sp->cap_source,
                                st->n_rounds ? (double)st->n_round_tok / st->n_rounds : 0.0,
                                st->t_decode > 0 ? 100.0 * st->t_draft / st->t_decode : 0.0);
    for (int a = 0; a <= SPEC_MAX_DRAFT && o + 16 < n; a++)
        if (st->accept_hist[a]) o += (size_t)snprintf(out + o, n - o, " %d:%d", a, st->accept_hist[a]);
    if (sp->hy && o < n) snprintf(out + o, n - o, ", lookup drafted %d of %d rounds", lookup_hybrid_rounds(sp->hy),
                                  st->n_rounds);
}
