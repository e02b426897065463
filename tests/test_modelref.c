/* modelref tests: model ids found in each documented layout (a
 * DSPARK_MODEL_DIRS folder in its three forms, the Hugging Face cache
 * through refs/ and @revision, LM Studio's MLX folders and GGUF files), the
 * order of those places, a local path winning, GGUF choice and ambiguity,
 * the message of a miss, and the remote-code rule. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spec/modelref.h"
#include "test.h"

static void mkdirs(const char *path) {
    char tmp[2048];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(tmp, 0755);
            *p = '/';
        }
    mkdir(tmp, 0755);
}

static void write_file(const char *dir, const char *name, const char *text) {
    char p[2300];
    mkdirs(dir);
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    CHECK_MSG(f != NULL, "cannot write %s", p);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* the variables modelref reads, saved and cleared; restored by env_restore */
static const char *const VARS[] = {"DSPARK_MODEL_DIRS", "DSPARK_DRAFTERS", "DSPARK_CACHE_DIR", "HF_HUB_CACHE", "HF_HOME",
                             "XDG_CACHE_HOME", "HOME", "DSPARK_TRUST_REMOTE_CODE"};
#define NVARS (int)(sizeof VARS / sizeof VARS[0])
static char *saved[NVARS];

static void env_isolate(const char *root) {
    char p[1200];
    test_env_save(VARS, NVARS, saved);
    snprintf(p, sizeof p, "%s/home", root);
    mkdirs(p);
    setenv("HOME", p, 1);
    snprintf(p, sizeof p, "%s/hub", root);
    setenv("HF_HUB_CACHE", p, 1);
}

static void env_restore(void) { test_env_restore(VARS, NVARS, saved); }

static const char *C1 = "1111111111111111111111111111111111111111";
static const char *C2 = "2222222222222222222222222222222222222222";

/* ROOT/models--ORG--NAME with a snapshot per commit holding config.json
   and refs/REF naming ref_commit */
static void hub_repo(const char *root, const char *org, const char *name, const char *commit, const char *ref,
                     const char *ref_commit) {
    char p[1600];
    snprintf(p, sizeof p, "%s/models--%s--%s/snapshots/%s", root, org, name, commit);
    write_file(p, "config.json", "{}");
    if (ref) {
        snprintf(p, sizeof p, "%s/models--%s--%s/refs", root, org, name);
        char line[64];
        snprintf(line, sizeof line, "%s\n", ref_commit);
        write_file(p, ref, line);
    }
}

TEST(modelref_hf_cache_and_revision) {
    char root[700], hub[800], out[4096], err[8192], want[1600];
    snprintf(root, sizeof root, "%s/mref-hub", test_tmp_dir());
    env_isolate(root);
    snprintf(hub, sizeof hub, "%s/hub", root);
    hub_repo(hub, "Qwen", "Qwen3-0.6B", C1, "main", C1);
    hub_repo(hub, "Qwen", "Qwen3-0.6B", C2, "v2", C2);
    CHECK_EQ_INT(modelref_resolve("Qwen/Qwen3-0.6B", MODELREF_TARGET, NULL, out, sizeof out, err, sizeof err), 0);
    snprintf(want, sizeof want, "%s/models--Qwen--Qwen3-0.6B/snapshots/%s", hub, C1);
    CHECK_MSG(!strcmp(out, want), "got %s, want %s", out, want);
    /* @revision: a branch through refs/, a commit as is */
    CHECK_EQ_INT(modelref_resolve("Qwen/Qwen3-0.6B@v2", MODELREF_TARGET, NULL, out, sizeof out, err, sizeof err), 0);
    CHECK(strstr(out, C2) != NULL);
    char spec[200];
    snprintf(spec, sizeof spec, "Qwen/Qwen3-0.6B@%s", C2);
    CHECK_EQ_INT(modelref_resolve(spec, MODELREF_TARGET, NULL, out, sizeof out, err, sizeof err), 0);
    CHECK(strstr(out, C2) != NULL);
    /* a revision not downloaded is a miss that names it */
    CHECK_EQ_INT(modelref_resolve("Qwen/Qwen3-0.6B@v3", MODELREF_TARGET, NULL, out, sizeof out, err, sizeof err), -1);
    CHECK_MSG(strstr(err, "at revision v3") && strstr(err, "dspark pull Qwen/Qwen3-0.6B@v3"), "%s", err);
    /* no refs/main: the newest snapshot */
    hub_repo(hub, "org", "only", C1, NULL, NULL);
    CHECK_EQ_INT(modelref_resolve("org/only", MODELREF_TARGET, NULL, out, sizeof out, err, sizeof err), 0);
    CHECK(strstr(out, "models--org--only/snapshots/") != NULL);
    env_restore();
}

TEST(modelref_model_dirs_order_and_local_path) {
    char root[700], d1[800], d2[800], p[1600], out[4096], err[8192], list[1700];
    snprintf(root, sizeof root, "%s/mref-dirs", test_tmp_dir());
    env_isolate(root);
    snprintf(d1, sizeof d1, "%s/d1", root);
    snprintf(d2, sizeof d2, "%s/d2", root);
    mkdirs(d1);
    /* the Hugging Face cache has it; DSPARK_MODEL_DIRS is searched first */
    char hub[800];
    snprintf(hub, sizeof hub, "%s/hub", root);
    hub_repo(hub, "acme", "m", C1, "main", C1);
    snprintf(p, sizeof p, "%s/m", d2); /* DIR/NAME in the second folder */
    write_file(p, "config.json", "{}");
    snprintf(list, sizeof list, "%s:%s", d1, d2);
    setenv("DSPARK_MODEL_DIRS", list, 1);
    CHECK_EQ_INT(modelref_resolve("acme/m", MODELREF_TARGET, NULL, out, sizeof out, err, sizeof err), 0);
    CHECK_MSG(!strcmp(out, p), "got %s, want %s", out, p);
    /* DIR/ORG/NAME in the first folder wins over the second folder */
    snprintf(p, sizeof p, "%s/acme/m", d1);
    write_file(p, "config.json", "{}");
    CHECK_EQ_INT(modelref_resolve("acme/m", MODELREF_TARGET, NULL, out, sizeof out, err, sizeof err), 0);
    CHECK_MSG(!strcmp(out, p), "got %s, want %s", out, p);
    /* the hub layout inside a DSPARK_MODEL_DIRS folder; with @revision only hub layouts answer */
    hub_repo(d2, "acme", "m", C2, "dev", C2);
    CHECK_EQ_INT(modelref_resolve("acme/m@dev", MODELREF_TARGET, NULL, out, sizeof out, err, sizeof err), 0);
    CHECK_MSG(strstr(out, "d2/models--acme--m/snapshots/") && strstr(out, C2), "got %s", out);
    /* a folder without config.json or GGUF files is passed over */
    snprintf(p, sizeof p, "%s/d3", root);
    setenv("DSPARK_MODEL_DIRS", p, 1);
    snprintf(p, sizeof p, "%s/d3/acme/m", root);
    mkdirs(p);
    CHECK_EQ_INT(modelref_resolve("acme/m", MODELREF_TARGET, NULL, out, sizeof out, err, sizeof err), 0);
    CHECK(strstr(out, "hub/models--acme--m/snapshots/") != NULL);
    /* an existing local path wins over any id lookup */
    char cwd[1024];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    CHECK_EQ_INT(chdir(root), 0);
    write_file("acme/m", "config.json", "{}");
    CHECK_EQ_INT(modelref_resolve("acme/m", MODELREF_TARGET, NULL, out, sizeof out, err, sizeof err), 0);
    CHECK_MSG(!strcmp(out, "acme/m"), "got %s", out);
    CHECK_EQ_INT(chdir(cwd), 0);
    /* the places, in order, as doctor lists them */
    snprintf(list, sizeof list, "%s:~/models", d1);
    setenv("DSPARK_MODEL_DIRS", list, 1);
    modelref_place pl[MODELREF_MAX_PLACES];
    int n = modelref_places(MODELREF_DRAFTER, d1, pl, MODELREF_MAX_PLACES);
    CHECK_EQ_INT(n, 7);
    if (n == 7) {
        CHECK(!strcmp(pl[0].what, "DSPARK_MODEL_DIRS") && !strcmp(pl[0].path, d1));
        CHECK(!strcmp(pl[1].what, "DSPARK_MODEL_DIRS") && strstr(pl[1].path, "/home/models") && pl[1].path[0] == '/');
        CHECK(!strcmp(pl[2].what, "dspark cache") && pl[2].drafters_only);
        CHECK(!strcmp(pl[3].what, "Hugging Face cache") && !strcmp(pl[3].path, hub));
        CHECK(!strcmp(pl[4].what, "LM Studio") && strstr(pl[4].path, "/.lmstudio/models"));
        CHECK(!strcmp(pl[5].what, "LM Studio") && strstr(pl[5].path, "/.cache/lm-studio/models"));
        CHECK(!strcmp(pl[6].what, "beside the model") && pl[6].drafters_only);
    }
    CHECK_EQ_INT(modelref_places(MODELREF_TARGET, NULL, pl, MODELREF_MAX_PLACES), 5);
    env_restore();
}

TEST(modelref_lmstudio_gguf) {
    char root[700], p[1600], out[4096], err[8192];
    snprintf(root, sizeof root, "%s/mref-lms", test_tmp_dir());
    env_isolate(root);
    /* an MLX folder under ~/.lmstudio/models */
    snprintf(p, sizeof p, "%s/home/.lmstudio/models/mlx-community/Qwen3-8B-4bit", root);
    write_file(p, "config.json", "{}");
    CHECK_EQ_INT(
        modelref_resolve("mlx-community/Qwen3-8B-4bit", MODELREF_TARGET, NULL, out, sizeof out, err, sizeof err), 0);
    CHECK_MSG(!strcmp(out, p), "got %s", out);
    /* the older ~/.cache/lm-studio/models: one GGUF (and a vision projector, which is not a model) */
    snprintf(p, sizeof p, "%s/home/.cache/lm-studio/models/lmstudio-community/Qwen3-4B-GGUF", root);
    write_file(p, "Qwen3-4B-Q4_K_M.gguf", "GGUF");
    write_file(p, "mmproj-Qwen3-4B-F16.gguf", "GGUF");
    CHECK_EQ_INT(
        modelref_resolve("lmstudio-community/Qwen3-4B-GGUF", MODELREF_TARGET, NULL, out, sizeof out, err, sizeof err),
        0);
    CHECK_MSG(strstr(out, "Qwen3-4B-GGUF/Qwen3-4B-Q4_K_M.gguf") != NULL, "got %s", out);
    /* two: ambiguous, the error lists them and says how to choose */
    write_file(p, "Qwen3-4B-Q8_0.gguf", "GGUF");
    CHECK_EQ_INT(
        modelref_resolve("lmstudio-community/Qwen3-4B-GGUF", MODELREF_TARGET, NULL, out, sizeof out, err, sizeof err),
        -1);
    CHECK_MSG(strstr(err, "2 GGUF files") && strstr(err, "Qwen3-4B-Q4_K_M.gguf, Qwen3-4B-Q8_0.gguf") &&
                  strstr(err, "lmstudio-community/Qwen3-4B-GGUF/FILE.gguf"),
              "%s", err);
    CHECK_EQ_INT(modelref_find_id("lmstudio-community/Qwen3-4B-GGUF", MODELREF_TARGET, NULL, out, sizeof out), -1);
    CHECK_MSG(!strcmp(out, p), "got %s", out); /* the folder, for "downloaded" */
    /* ORG/NAME/FILE.gguf picks one */
    CHECK_EQ_INT(modelref_resolve("lmstudio-community/Qwen3-4B-GGUF/Qwen3-4B-Q8_0.gguf", MODELREF_TARGET, NULL, out,
                                  sizeof out, err, sizeof err),
                 0);
    CHECK_MSG(strstr(out, "Qwen3-4B-GGUF/Qwen3-4B-Q8_0.gguf") != NULL, "got %s", out);
    CHECK_EQ_INT(modelref_resolve("lmstudio-community/Qwen3-4B-GGUF/nope.gguf", MODELREF_TARGET, NULL, out,
                                  sizeof out, err, sizeof err),
                 -1);
    /* a local folder of several GGUF files is ambiguous too */
    CHECK_EQ_INT(modelref_resolve(p, MODELREF_TARGET, NULL, out, sizeof out, err, sizeof err), -1);
    /* a split set counts as its first shard */
    snprintf(p, sizeof p, "%s/split", root);
    write_file(p, "big-00001-of-00003.gguf", "GGUF");
    write_file(p, "big-00002-of-00003.gguf", "GGUF");
    write_file(p, "big-00003-of-00003.gguf", "GGUF");
    CHECK_EQ_INT(modelref_resolve(p, MODELREF_TARGET, NULL, out, sizeof out, err, sizeof err), 0);
    CHECK_MSG(strstr(out, "split/big-00001-of-00003.gguf") != NULL, "got %s", out);
    /* a local folder of one GGUF file takes that file */
    snprintf(p, sizeof p, "%s/one-gguf", root);
    write_file(p, "m.gguf", "GGUF");
    CHECK_EQ_INT(modelref_resolve(p, MODELREF_TARGET, NULL, out, sizeof out, err, sizeof err), 0);
    CHECK(strstr(out, "one-gguf/m.gguf") != NULL);
    /* drafters are checkpoints with config.json: a GGUF folder is not one */
    CHECK_EQ_INT(modelref_find_id("lmstudio-community/Qwen3-4B-GGUF", MODELREF_DRAFTER, NULL, out, sizeof out), 0);
    env_restore();
}

TEST(modelref_miss_message) {
    char root[700], out[4096], err[8192], d1[800];
    snprintf(root, sizeof root, "%s/mref-miss", test_tmp_dir());
    env_isolate(root);
    snprintf(d1, sizeof d1, "%s/mine", root);
    setenv("DSPARK_MODEL_DIRS", d1, 1);
    CHECK_EQ_INT(modelref_resolve("Qwen/Qwen3-0.6B", MODELREF_TARGET, NULL, out, sizeof out, err, sizeof err), -1);
    /* every place, every path, and the way to download */
    const char *want[] = {"model \"Qwen/Qwen3-0.6B\"", "mine/Qwen/Qwen3-0.6B", "mine/Qwen3-0.6B",
                          "mine/models--Qwen--Qwen3-0.6B", "hub/models--Qwen--Qwen3-0.6B",
                          ".lmstudio/models/Qwen/Qwen3-0.6B", ".cache/lm-studio/models/Qwen/Qwen3-0.6B",
                          "dspark pull Qwen/Qwen3-0.6B", "HF_TOKEN"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) CHECK_MSG(strstr(err, want[i]), "no \"%s\" in: %s", want[i], err);
    /* not an id and not a path */
    CHECK_EQ_INT(modelref_resolve("/no/such/dir", MODELREF_TARGET, NULL, out, sizeof out, err, sizeof err), -1);
    CHECK_MSG(strstr(err, "no such file or folder") != NULL, "%s", err);
    CHECK_EQ_INT(modelref_resolve("bare-name", MODELREF_TARGET, NULL, out, sizeof out, err, sizeof err), -1);
    CHECK_EQ_INT(modelref_resolve("", MODELREF_TARGET, NULL, out, sizeof out, err, sizeof err), -1);
    CHECK_EQ_INT(modelref_resolve("a/b@..", MODELREF_TARGET, NULL, out, sizeof out, err, sizeof err), -1);
    /* a drafter's miss names it as one, and the drafter-only places */
    CHECK_EQ_INT(modelref_resolve("z-lab/x", MODELREF_DRAFTER, NULL, out, sizeof out, err, sizeof err), -1);
    CHECK_MSG(strstr(err, "drafter \"z-lab/x\"") && strstr(err, "dspark cache"), "%s", err);
    env_restore();
}

TEST(modelref_remote_code) {
    char root[700], p[1600], err[2048];
    snprintf(root, sizeof root, "%s/mref-remote", test_tmp_dir());
    env_isolate(root);
    snprintf(p, sizeof p, "%s/plain", root);
    write_file(p, "config.json", "{\"model_type\": \"qwen3\", \"auto_map\": {}}"); /* empty: no code */
    CHECK_EQ_INT(modelref_check_remote_code(p, 0, err, sizeof err), 0);
    snprintf(p, sizeof p, "%s/automap", root);
    write_file(p, "config.json", "{\"model_type\": \"qwen3\", \"auto_map\": {\"AutoModel\": \"m.Model\"}}");
    CHECK_EQ_INT(modelref_check_remote_code(p, 0, err, sizeof err), -1);
    CHECK_MSG(strstr(err, "config.json has \"auto_map\"") && strstr(err, "never runs") &&
                  strstr(err, "--trust-remote-code") && strstr(err, "DSPARK_TRUST_REMOTE_CODE=1"),
              "%s", err);
    CHECK_EQ_INT(modelref_check_remote_code(p, 1, err, sizeof err), 0);
    snprintf(p, sizeof p, "%s/modelfile", root);
    write_file(p, "config.json", "{\"text_config\": {\"model_file\": \"modeling.py\"}}");
    CHECK_EQ_INT(modelref_check_remote_code(p, 0, err, sizeof err), -1);
    CHECK_MSG(strstr(err, "\"model_file\" in \"text_config\"") != NULL, "%s", err);
    snprintf(p, sizeof p, "%s/tok", root);
    write_file(p, "config.json", "{}");
    write_file(p, "tokenizer_config.json", "{\"auto_map\": {\"AutoTokenizer\": [\"t.Tok\", null]}}");
    CHECK_EQ_INT(modelref_check_remote_code(p, 0, err, sizeof err), -1);
    CHECK(strstr(err, "tokenizer_config.json") != NULL);
    /* a malformed file is left to the loader's own error */
    snprintf(p, sizeof p, "%s/bad", root);
    write_file(p, "config.json", "{not json");
    CHECK_EQ_INT(modelref_check_remote_code(p, 0, err, sizeof err), 0);
    /* the switch: flag or variable */
    CHECK_EQ_INT(modelref_trust_remote_code(0), 0);
    CHECK_EQ_INT(modelref_trust_remote_code(1), 1);
    setenv("DSPARK_TRUST_REMOTE_CODE", "1", 1);
    CHECK_EQ_INT(modelref_trust_remote_code(0), 1);
    setenv("DSPARK_TRUST_REMOTE_CODE", "0", 1);
    CHECK_EQ_INT(modelref_trust_remote_code(0), 0);
    env_restore();
}
