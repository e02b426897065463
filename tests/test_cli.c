/* CLI tests: run the dspark binary (DSPARK_BIN, set by `make test`) the way
 * a user does and check outputs against the golden fixtures, exit codes and
 * error messages. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cjson/cJSON.h>

#include "spec/calib.h"
#include "test.h"
#include "base/util.h"


static char *model_dir(const char *name) {
    static char d[600];
    snprintf(d, sizeof d, "%s/models/%s", test_data_dir(), name);
    return d;
}

TEST(cli_run_greedy_ids_match_transformers) {
    /* qwen3-bf16 golden: prompt and greedy continuation from golden.json */
    const char *prompt = "331,155,390,253,241,130,259,451,332,432,278,49";
    const char *want = "69,310,394,260,322,376,132,262,327,256,50,421,95,338,300,476,92,204,71,343,278,77,202,228";
    char args[2048], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "run --model %s --prompt-ids %s -n 24 --temp 0 --print-ids --ignore-eos -t 2",
             model_dir("qwen3-bf16"), prompt);
    CHECK_EQ_INT(test_run_cli(args, &out, &err), 0);
    CHECK_MSG(out && !strncmp(out, want, strlen(want)) && out[strlen(want)] == '\n', "got %s", out ? out : "(null)");
    CHECK_MSG(err && strstr(err, "stamp: prompt 12 tok") && strstr(err, "generated 24 tok") &&
                  strstr(err, "decode") && strstr(err, "logits fnv1a"),
              "stamp line: %s", err ? err : "(null)");
    free(out);
    free(err);
}

/* the stamp's "logits fnv1a XXXX" field (NULL if absent) */
static const char *stamp_hash(const char *err) {
    const char *h = err ? strstr(err, "logits fnv1a ") : NULL;
    return h ? h + strlen("logits fnv1a ") : NULL;
}

TEST(cli_run_warmup_leaves_output_unchanged) {
    /* the warm-up forward (default) runs in the sequence before the prompt
       and empties it: with --no-warmup, the same ids and the same last
       logits, greedy and under lookup (whose drafter is open by then) */
    const char *modes[] = {"baseline", "lookup"};
    for (int i = 0; i < 2; i++) {
        char *out[2] = {NULL, NULL}, *err[2] = {NULL, NULL};
        for (int w = 0; w < 2; w++) {
            char args[2048];
            snprintf(args, sizeof args,
                     "run --model %s --prompt-ids 331,155,390,253,241,130,259,451,332,432,278,49 -n 24 --temp 0 "
                     "--print-ids --ignore-eos -t 2 --mode %s%s",
                     model_dir("qwen3-bf16"), modes[i], w ? " --no-warmup" : "");
            CHECK_EQ_INT(test_run_cli(args, &out[w], &err[w]), 0);
        }
        const char *h0 = stamp_hash(err[0]), *h1 = stamp_hash(err[1]);
        CHECK_MSG(out[0] && out[1] && !strcmp(out[0], out[1]), "%s: ids %s against %s", modes[i],
                  out[0] ? out[0] : "(null)", out[1] ? out[1] : "(null)");
        CHECK_MSG(h0 && h1 && !strncmp(h0, h1, 16), "%s: logits hash %.16s against %.16s", modes[i],
                  h0 ? h0 : "(none)", h1 ? h1 : "(none)");
        for (int w = 0; w < 2; w++) {
            free(out[w]);
            free(err[w]);
        }
    }
}

TEST(cli_run_stops_at_eos) {
    /* qwen3-bf16's eos ids are 7 and 9; llama3-bf16's are 2 and 3: use a
       model whose greedy output we know contains no eos and check that an
       eos-producing sampled run stops (the last id must be an eos). */
    char args[2048], *out = NULL;
    snprintf(args, sizeof args, "run --model %s --prompt-ids 1,2,3 -n 4000 --temp 5 --seed 3 --print-ids -c 256",
             model_dir("qwen3-bf16"));
    CHECK_EQ_INT(test_run_cli(args, &out, NULL), 0);
    /* 256-position window: either an eos ended it, or the window filled */
    int n = 0, last = -1;
    for (char *p = out; p && *p && *p != '\n';) {
        last = (int)strtol(p, &p, 10);
        n++;
        if (*p == ',') p++;
    }
    CHECK_MSG(last == 7 || last == 9 || n == 256 - 3 + 1, "ended with %d after %d tokens", last, n);
    free(out);
}

TEST(cli_logits_file) {
    char path[600], args[2048], e[256];
    snprintf(path, sizeof path, "%s/logits.bin", test_tmp_dir());
    snprintf(args, sizeof args, "logits --model %s --prompt-ids 331,155,390,253 --out %s", model_dir("qwen3-bf16"),
             path);
    CHECK_EQ_INT(test_run_cli(args, NULL, NULL), 0);
    size_t n = 0, nr = 0;
    float *got = (float *)ds_read_file(path, &n, e, sizeof e);
    char ref_path[700];
    snprintf(ref_path, sizeof ref_path, "%s/logits.bin", model_dir("qwen3-bf16"));
    float *ref = (float *)ds_read_file(ref_path, &nr, e, sizeof e);
    CHECK_EQ_INT(n, 4 * 512 * sizeof(float));
    if (got && ref && n == 4 * 512 * sizeof(float)) {
        double md = 0, mr = 0;
        for (int i = 0; i < 4 * 512; i++) {
            md = fmax(md, fabs(got[i] - ref[i]));
            mr = fmax(mr, fabs(ref[i]));
        }
        CHECK_MSG(md / mr <= 1e-3, "rel err %g", md / mr);
    }
    free(got);
    free(ref);
}

TEST(cli_tokenize_detokenize) {
    const char *tdir = test_tokenizer_dir();
    CHECK_MSG(tdir != NULL, "real tokenizers not available");
    if (!tdir) return;
    char args[2048], *out = NULL;
    snprintf(args, sizeof args, "tokenize --model %s/qwen3 'Hello world, 你好 🌍'", tdir);
    CHECK_EQ_INT(test_run_cli(args, &out, NULL), 0);
    CHECK_MSG(out && !strcmp(out, "[9707,1879,11,220,108386,11162,234,235]\n"), "got %s", out);
    free(out);
    /* --jsonl: one array per line, newline excluded */
    char f[600];
    snprintf(f, sizeof f, "%s/lines.txt", test_tmp_dir());
    FILE *fp = fopen(f, "w");
    fputs("Hello world\n\nfoo\n", fp);
    fclose(fp);
    snprintf(args, sizeof args, "tokenize --model %s/qwen3 --file %s --jsonl", tdir, f);
    CHECK_EQ_INT(test_run_cli(args, &out, NULL), 0);
    CHECK_MSG(out && !strcmp(out, "[9707,1879]\n[]\n[7975]\n"), "got %s", out);
    free(out);
    /* "--" ends the options: a text starting with '-'; a second text is refused */
    snprintf(args, sizeof args, "tokenize --model %s/qwen3 -- '-x'", tdir);
    CHECK_EQ_INT(test_run_cli(args, &out, NULL), 0);
    CHECK_MSG(out && !strcmp(out, "[6558]\n"), "got %s", out); /* "-x" is one token of Qwen3 */
    free(out);
    char *err = NULL;
    snprintf(args, sizeof args, "tokenize --model %s/qwen3 -- a b", tdir);
    CHECK(test_run_cli(args, NULL, &err) != 0);
    CHECK_MSG(err && strstr(err, "unexpected argument \"b\""), "got %s", err);
    free(err);
    snprintf(args, sizeof args, "detokenize --model %s/qwen3 9707,1879,11,220,108386,11162,234,235", tdir);
    CHECK_EQ_INT(test_run_cli(args, &out, NULL), 0);
    CHECK_MSG(out && !strcmp(out, "Hello world, 你好 🌍\n"), "got %s", out);
    free(out);
}

TEST(cli_errors_and_help) {
    char *err = NULL, args[1024];
    /* no --model: the bundled model, or $DSPARK_MODEL */
    CHECK_EQ_INT(test_run_cli("run --prompt-ids 1,2 -n 4", NULL, &err), 0);
    free(err);
    setenv("DSPARK_MODEL", "/nonexistent-default", 1);
    CHECK(test_run_cli("run --prompt-ids 1,2", NULL, &err) != 0);
    CHECK_MSG(err && strstr(err, "/nonexistent-default"), "%s", err);
    unsetenv("DSPARK_MODEL");
    free(err);
    CHECK(test_run_cli("run --model /nonexistent --prompt-ids 1,2", NULL, &err) != 0);
    CHECK_MSG(err && strstr(err, "/nonexistent"), "%s", err);
    free(err);
    snprintf(args, sizeof args, "run --model %s --prompt-ids 1,x", model_dir("qwen3-bf16"));
    CHECK(test_run_cli(args, NULL, &err) != 0);
    CHECK_MSG(err && strstr(err, "token id"), "%s", err);
    free(err);
    snprintf(args, sizeof args, "run --model %s --prompt-ids 1,99999 -n 2", model_dir("qwen3-bf16"));
    CHECK(test_run_cli(args, NULL, &err) != 0);
    CHECK_MSG(err && strstr(err, "outside the vocabulary"), "%s", err);
    free(err);
    snprintf(args, sizeof args, "run --model %s --prompt hello", model_dir("qwen3-bf16"));
    CHECK(test_run_cli(args, NULL, &err) != 0);
    CHECK_MSG(err && strstr(err, "tokenizer.json"), "%s", err);
    free(err);
    CHECK(test_run_cli("run --bogus", NULL, &err) != 0);
    CHECK_MSG(err && strstr(err, "--bogus"), "%s", err);
    free(err);
    CHECK(test_run_cli("frobnicate", NULL, NULL) != 0);
    const char *cmds[] = {"run", "logits", "tokenize", "detokenize"};
    for (int i = 0; i < 4; i++) {
        char *out = NULL;
        snprintf(args, sizeof args, "%s --help", cmds[i]);
        CHECK_EQ_INT(test_run_cli(args, &out, NULL), 0);
        CHECK(out && strstr(out, "usage: dspark"));
        free(out);
    }
}

TEST(cli_run_lookup_equals_baseline) {
    /* a repetitive prompt, so lookup drafts and some drafts are accepted */
    const char *modes[] = {"", "--mode lookup", "--mode lookup --max-draft 3", "--mode lookup --max-draft 16"};
    const char *models[] = {"qwen3-bf16", "llama3-bf16"};
    for (int mi = 0; mi < 2; mi++) {
        char *base = NULL;
        for (int i = 0; i < 4; i++) {
            char args[2048], *out = NULL, *err = NULL;
            snprintf(args, sizeof args, "run --model %s --prompt-ids 5,5,5,5,5,5 -n 150 --print-ids -t 2 %s",
                     model_dir(models[mi]), modes[i]);
            CHECK_EQ_INT(test_run_cli(args, &out, &err), 0);
            if (i == 0) {
                base = out;
                CHECK_MSG(err && !strstr(err, "tokens/round"), "%s", err);
            } else {
                CHECK_MSG(out && base && !strcmp(out, base), "%s: %s vs %s", modes[i], out, base);
                CHECK_MSG(err && strstr(err, "tokens/round ") && strstr(err, "accepted drafts per round "), "%s", err);
                free(out);
            }
            free(err);
        }
        free(base);
    }
    char args[2048], *err = NULL;
    /* a target without a registered drafter: the neural modes need --drafter */
    const char *neural[] = {"dspark", "dflash"};
    for (int i = 0; i < 2; i++) {
        snprintf(args, sizeof args, "run --model %s --prompt-ids 1,2 --mode %s", model_dir("qwen3-bf16"), neural[i]);
        CHECK(test_run_cli(args, NULL, &err) != 0);
        CHECK_MSG(err && strstr(err, "needs --drafter DIR"), "%s", err);
        free(err);
    }
    /* auto without a drafter is lookup */
    snprintf(args, sizeof args, "run --model %s --prompt-ids 5,5,5,5 -n 20 --mode auto", model_dir("qwen3-bf16"));
    CHECK_EQ_INT(test_run_cli(args, NULL, &err), 0);
    CHECK_MSG(err && strstr(err, "mode lookup, cap "), "%s", err);
    free(err);
    snprintf(args, sizeof args, "run --model %s --prompt-ids 1,2 --mode bogus", model_dir("qwen3-bf16"));
    CHECK(test_run_cli(args, NULL, &err) != 0);
    CHECK_MSG(err && strstr(err, "bogus"), "%s", err);
    free(err);
    snprintf(args, sizeof args, "run --model %s --prompt-ids 1,2 --max-draft 4", model_dir("qwen3-bf16"));
    CHECK(test_run_cli(args, NULL, &err) != 0);
    CHECK_MSG(err && strstr(err, "--max-draft"), "%s", err);
    free(err);
    snprintf(args, sizeof args, "run --model %s --prompt-ids 1,2 --mode lookup --confidence-threshold 0.5",
             model_dir("qwen3-bf16"));
    CHECK(test_run_cli(args, NULL, &err) != 0);
    CHECK_MSG(err && strstr(err, "confidence"), "%s", err);
    free(err);
    snprintf(args, sizeof args, "run --model %s --prompt-ids 1,2 --mode lookup --max-draft 0", model_dir("qwen3-bf16"));
    CHECK(test_run_cli(args, NULL, &err) != 0);
    free(err);
}

/* every neural mode gives the baseline's greedy output, with pinned,
   calibrated and adaptive caps; mismatched drafters are refused */
TEST(cli_run_drafter_modes_equal_baseline) {
    char tgt[700], dd[700];
    snprintf(tgt, sizeof tgt, "%s/drafters/target", test_data_dir());
    snprintf(dd, sizeof dd, "%s/drafters", test_data_dir());
    const char *modes[] = {"",
                           "--mode dspark --drafter %s/dspark",
                           "--mode dspark --drafter %s/dspark --max-draft 3",
                           "--mode dspark --drafter %s/dspark --max-draft auto",
                           "--mode dspark --drafter %s/dspark --confidence-threshold 0.2 --max-draft 7",
                           "--mode dflash --drafter %s/dflash --max-draft 15",
                           "--mode dflash --drafter %s/dflash",
                           "--mode dflash --drafter %s/dspark-r0 --max-draft 16",
                           "--mode auto --drafter %s/dflash --max-draft auto",
                           "--mode lookup --max-draft auto",
                           "--mode dspark --drafter %s/dspark --no-lookup-drafts",
                           "--mode dflash --drafter %s/dflash --max-draft 15 --no-lookup-drafts"};
    char *base = NULL;
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        char mode[1024], args[2048], *out = NULL, *err = NULL;
        snprintf(mode, sizeof mode, modes[i], dd);
        /* the prompt ends in a copy run of its first 5 ids: lookup drafts too */
        snprintf(args, sizeof args,
                 "run --model %s --prompt-ids 376,280,119,187,320,11,12,376,280,119,187,320 -n 60 --print-ids -t 2 %s",
                 tgt, mode);
        CHECK_EQ_INT(test_run_cli(args, &out, &err), 0);
        if (i == 0) {
            base = out;
        } else {
            CHECK_MSG(out && base && !strcmp(out, base), "%s: %s vs %s", mode, out, base);
            CHECK_MSG(err && strstr(err, "tokens/round ") && strstr(err, "cap "), "%s", err);
            free(out);
        }
        if (i == 1) CHECK_MSG(err && strstr(err, "mode dspark, cap ") && strstr(err, "(calibrated"), "%s", err);
        if (i == 3 || i == 8) CHECK_MSG(err && strstr(err, "(auto)"), "%s", err);
        if (i == 8) CHECK_MSG(err && strstr(err, "mode dflash"), "%s", err);
        /* the stamp says how many rounds lookup drafted (DSpark / DFlash with lookup drafts) */
        if (i == 1 || i == 6) CHECK_MSG(err && strstr(err, ", lookup drafted "), "%s", err);
        if (i == 10 || i == 11) CHECK_MSG(err && !strstr(err, "lookup drafted"), "%s", err);
        free(err);
    }
    free(base);
    const char *bad[][2] = {
        {"--mode dspark --drafter %s/dflash", "use --mode dflash"},
        {"--mode dflash --drafter %s/dspark", "use --mode dspark"},
        {"--mode dflash --drafter %s/dspark-r0 --confidence-threshold 0.5", "no confidence head"},
        {"--mode dspark --drafter %s/nonexistent", "nonexistent"},
        {"--mode lookup --drafter %s/dspark", "no --drafter"},
        {"--drafter %s/dspark", "speculative --mode"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char mode[1024], args[2048], *err = NULL;
        snprintf(mode, sizeof mode, bad[i][0], dd);
        snprintf(args, sizeof args, "run --model %s --prompt-ids 1,2 %s", tgt, mode);
        CHECK(test_run_cli(args, NULL, &err) != 0);
        CHECK_MSG(err && strstr(err, bad[i][1]), "%s: %s", mode, err ? err : "");
        free(err);
    }
    /* a drafter paired with the wrong target */
    char args[2048], *err = NULL;
    snprintf(args, sizeof args, "run --model %s --prompt-ids 1,2 --mode dspark --drafter %s/dspark",
             model_dir("qwen3-bf16"), dd);
    CHECK(test_run_cli(args, NULL, &err) != 0);
    CHECK_MSG(err && strstr(err, "6-layer target"), "%s", err ? err : "");
    free(err);
}

/* a corrupt calibration cache is reported, ignored and rewritten */
TEST(cli_calibration_cache_corrupt_rewritten) {
    char path[700], args[2048], *err = NULL;
    snprintf(path, sizeof path, "%s/calibration.json", getenv("DSPARK_CACHE_DIR"));
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs("{\"version\": 1, \"entries\": {\"x\": {\"verify_s\": [0.1, \"oops\"]", f);
    fclose(f);
    snprintf(args, sizeof args, "run --model %s/drafters/target --prompt-ids 5,6,7 -n 8 --mode dspark --drafter "
                                "%s/drafters/dspark",
             test_data_dir(), test_data_dir());
    CHECK_EQ_INT(test_run_cli(args, NULL, &err), 0);
    CHECK_MSG(err && strstr(err, "corrupt") && strstr(err, "calibrating"), "%s", err ? err : "");
    free(err);
    char warn[1024];
    calib_costs c;
    char key[CALIB_KEY_MAX];
    calib_key(key, sizeof key, "cpu", "none", "none", "bf16", 1);
    CHECK_EQ_INT(calib_load(path, key, &c, warn, sizeof warn), 0); /* valid file now, other key */
    /* the entry is keyed by where the model runs (DSPARK_DEVICE=cuda in
       make test-cuda: the GPU, named) */
    size_t len;
    char *file = ds_read_file(path, &len, warn, sizeof warn);
    const char *dev = getenv("DSPARK_DEVICE");
    const char *want = dev && !strncmp(dev, "cuda", 4) ? ";backend=cuda:" : ";backend=cpu;";
    CHECK_MSG(file && strstr(file, want), "no \"%s\" in %s", want, file ? file : warn);
    /* and by the weights' layout: on the CPU, read into memory, rows8 */
    if (!(dev && !strncmp(dev, "cuda", 4)))
        CHECK_MSG(file && strstr(file, " rows8;"), "no rows8 layout in the key: %s", file ? file : warn);
    free(file);
    /* the second run finds its entry: no calibration */
    CHECK_EQ_INT(test_run_cli(args, NULL, &err), 0);
    CHECK_MSG(err && !strstr(err, "calibrating") && strstr(err, "(calibrated"), "%s", err ? err : "");
    free(err);
}

/* rewrites every cached calibration entry of a neural drafter: draft_s /
   draft_tok_s as given, and, when flat, every verify width at t(1) */
static int doctor_calibration(const char *path, double draft_s, double draft_tok_s, int flat) {
    char e[256];
    size_t n;
    char *txt = ds_read_file(path, &n, e, sizeof e);
    if (!txt) return -1;
    cJSON *root = cJSON_Parse(txt), *entries = root ? cJSON_GetObjectItem(root, "entries") : NULL;
    free(txt);
    int changed = 0;
    cJSON *it;
    cJSON_ArrayForEach(it, entries) {
        if (!strstr(it->string, "drafter=dspark:")) continue;
        cJSON_ReplaceItemInObject(it, "draft_s", cJSON_CreateNumber(draft_s));
        cJSON_ReplaceItemInObject(it, "draft_tok_s", cJSON_CreateNumber(draft_tok_s));
        cJSON *v = cJSON_GetObjectItem(it, "verify_s"), *w;
        double t1 = cJSON_GetArrayItem(v, 0)->valuedouble;
        if (flat)
            cJSON_ArrayForEach(w, v) cJSON_SetNumberValue(w, t1);
        changed++;
    }
    char *out = root ? cJSON_Print(root) : NULL;
    FILE *f = out && changed ? fopen(path, "w") : NULL;
    int rc = f && fputs(out, f) >= 0 ? 0 : -1;
    if (f && fclose(f) != 0) rc = -1;
    free(out);
    cJSON_Delete(root);
    return rc;
}

/* --mode auto on the bundled model (its drafters registered beside it):
   with a calibration where the DSpark drafter cannot pay even at the
   published acceptance it settles on lookup and says why; where drafting is
   cheap it keeps DSpark. The calibration cache is doctored so the outcome
   does not depend on this machine's speed. */
TEST(cli_run_auto_falls_back_to_lookup) {
    char dir[600], file[800], args[1024], *err = NULL;
    snprintf(dir, sizeof dir, "%s/auto-calib", test_tmp_dir());
    snprintf(file, sizeof file, "%s/calibration.json", dir);
    const char *saved = getenv("DSPARK_CACHE_DIR");
    char *keep = saved ? xstrdup(saved) : NULL;
    setenv("DSPARK_CACHE_DIR", dir, 1);
    snprintf(args, sizeof args, "run --prompt-ids 5,6,7,8 -n 8 -t 2 --mode auto");
    CHECK_EQ_INT(test_run_cli(args, NULL, &err), 0); /* calibrates and caches */
    free(err);
    CHECK(doctor_calibration(file, 1.0, 0.1, 0) == 0);
    CHECK_EQ_INT(test_run_cli(args, NULL, &err), 0);
    CHECK_MSG(err && strstr(err, "uses lookup: dspark drafting does not pay") && strstr(err, "mode lookup, cap "),
              "%s", err);
    free(err);
    CHECK(doctor_calibration(file, 0.0, 0.0, 1) == 0);
    CHECK_EQ_INT(test_run_cli(args, NULL, &err), 0);
    CHECK_MSG(err && !strstr(err, "uses lookup") && strstr(err, "mode dspark, cap "), "%s", err);
    free(err);
    /* an explicit mode keeps its drafter (adaptive cap when it loses) */
    CHECK(doctor_calibration(file, 1.0, 0.1, 0) == 0);
    snprintf(args, sizeof args, "run --prompt-ids 5,6,7,8 -n 8 -t 2 --mode dspark");
    CHECK_EQ_INT(test_run_cli(args, NULL, &err), 0);
    CHECK_MSG(err && strstr(err, "mode dspark, cap ") && strstr(err, "calibrated 0: auto"), "%s", err);
    free(err);
    if (keep) setenv("DSPARK_CACHE_DIR", keep, 1);
    else unsetenv("DSPARK_CACHE_DIR");
    free(keep);
}
