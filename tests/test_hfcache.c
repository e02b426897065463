/* hfcache tests: id parsing (what is refused and why), the cache root's
 * order of variables, and a snapshot found through refs/ or by commit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/hfcache.h"
#include "test.h"

TEST(hfcache_parse_id) {
    char id[128], rev[128], err[256];
    CHECK_EQ_INT(hf_parse_id("Qwen/Qwen3-0.6B", id, sizeof id, rev, sizeof rev, err, sizeof err), 0);
    CHECK(!strcmp(id, "Qwen/Qwen3-0.6B") && !strcmp(rev, ""));
    CHECK_EQ_INT(hf_parse_id("mlx-community/Qwen3-8B-4bit@v1.0", id, sizeof id, rev, sizeof rev, err, sizeof err), 0);
    CHECK(!strcmp(id, "mlx-community/Qwen3-8B-4bit") && !strcmp(rev, "v1.0"));
    const char *bad[] = {"Qwen3", "/abs/path", "a/b/c", "./x", "../x", "org/", "org/.hidden", "a b/c", "org/name@",
                         "org/name@../x", "org/name@a b", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        CHECK_EQ_INT(hf_parse_id(bad[i], id, sizeof id, rev, sizeof rev, err, sizeof err), -1);
        CHECK(err[0] != 0);
    }
    char small[8];
    CHECK_EQ_INT(hf_parse_id("Qwen/Qwen3-0.6B", small, sizeof small, rev, sizeof rev, err, sizeof err), -1);
}

static void mk(const char *p) {
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", p);
    for (char *s = tmp + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            mkdir(tmp, 0755);
            *s = '/';
        }
    mkdir(tmp, 0755);
}

TEST(hfcache_root_and_snapshots) {
    const char *vars[4] = {"HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HOME"};
    char *saved[4];
    for (int i = 0; i < 4; i++) saved[i] = getenv(vars[i]) ? strdup(getenv(vars[i])) : NULL;
    char root[1024], dir[1500], out[2048];
    unsetenv("HF_HUB_CACHE");
    unsetenv("HF_HOME");
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", "/h", 1);
    hf_cache_root(root, sizeof root);
    CHECK(!strcmp(root, "/h/.cache/huggingface/hub"));
    setenv("XDG_CACHE_HOME", "/x", 1);
    hf_cache_root(root, sizeof root);
    CHECK(!strcmp(root, "/x/huggingface/hub"));
    setenv("HF_HOME", "/hf", 1);
    hf_cache_root(root, sizeof root);
    CHECK(!strcmp(root, "/hf/hub"));
    snprintf(root, sizeof root, "%s/hfcache", test_tmp_dir());
    setenv("HF_HUB_CACHE", root, 1);
    hf_cache_root(out, sizeof out);
    CHECK(!strcmp(out, root));

    const char *c1 = "0123456789abcdef0123456789abcdef01234567";
    snprintf(dir, sizeof dir, "%s/models--org--name/snapshots/%s", root, c1);
    mk(dir);
    CHECK_EQ_INT(hf_snapshot_dir(root, "org/name", NULL, out, sizeof out), -1); /* no refs/main yet */
    CHECK(strstr(out, "refs/main") != NULL);
    CHECK_EQ_INT(hf_snapshot_dir(root, "org/name", c1, out, sizeof out), 0);
    CHECK(!strcmp(out, dir));
    snprintf(dir, sizeof dir, "%s/models--org--name/refs", root);
    mk(dir);
    snprintf(dir, sizeof dir, "%s/models--org--name/refs/main", root);
    FILE *f = fopen(dir, "w");
    fprintf(f, "%s\n", c1);
    fclose(f);
    CHECK_EQ_INT(hf_snapshot_dir(root, "org/name", "", out, sizeof out), 0);
    CHECK(strstr(out, c1) != NULL);
    CHECK_EQ_INT(hf_snapshot_dir(root, "org/name", "v2", out, sizeof out), -1);
    CHECK_EQ_INT(hf_snapshot_dir(root, "org/other", NULL, out, sizeof out), -1);
    /* a ref that is not a commit is refused */
    f = fopen(dir, "w");
    fprintf(f, "../../etc\n");
    fclose(f);
    CHECK_EQ_INT(hf_snapshot_dir(root, "org/name", NULL, out, sizeof out), -1);
    for (int i = 0; i < 4; i++) {
        if (saved[i]) setenv(vars[i], saved[i], 1);
        else unsetenv(vars[i]);
        free(saved[i]);
    }
}
