/* `dspark claude` tests: the binary runs against a tiny fake /health server
 * started here (a thread answering a fixed status and body on a free local
 * port, optionally chunked, or accepting and never answering), a closed port,
 * and a stand-in `claude` (a shell script printing its arguments and
 * environment), so no real Claude Code or model server is needed. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "base/util.h"

typedef struct {
    int fd, port;
    int status;       /* answered to every request */
    const char *body;
    int chunked;      /* Transfer-Encoding: chunked, in two chunks */
    int silent;       /* accept nothing: the client must time out */
    const char *key;  /* set: 401 for any path but /health without this Bearer key */
    pthread_t th;
    int n_req;
    char req[4][1024]; /* the heads of the first requests */
} fake_server;

static int starts_with(const char *s, const char *prefix) { return !strncmp(s, prefix, strlen(prefix)); }

static int listen_local(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 8) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &al) != 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

static void *serve_loop(void *arg) {
    fake_server *s = arg;
    for (;;) {
        int c = accept(s->fd, NULL, NULL);
        if (c < 0) break; /* shutdown by srv_stop */
        struct timeval tv = {.tv_sec = 5};
        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        char buf[4096];
        size_t n = 0;
        while (n < sizeof buf - 1) {
            ssize_t k = recv(c, buf + n, sizeof buf - 1 - n, 0);
            if (k <= 0) break;
            n += (size_t)k;
            buf[n] = 0;
            if (strstr(buf, "\r\n\r\n")) break;
        }
        buf[n] = 0;
        if (s->n_req < 4) { /* the head of the request is enough for the checks */
            size_t k = n < sizeof s->req[0] - 1 ? n : sizeof s->req[0] - 1;
            memcpy(s->req[s->n_req], buf, k);
            s->req[s->n_req][k] = 0;
        }
        s->n_req++;
        int status = s->status;
        const char *body = s->body;
        char want[300];
        snprintf(want, sizeof want, "\r\nAuthorization: Bearer %s\r\n", s->key ? s->key : "");
        if (s->key && !starts_with(buf, "GET /health ") && !strstr(buf, want)) {
            status = 401;
            body = "{\"error\":{\"message\":\"invalid api key\",\"type\":\"authentication_error\"}}";
        }
        char out[8192];
        size_t bl = strlen(body), h = bl / 2;
        int len;
        if (s->chunked)
            len = snprintf(out, sizeof out,
                           "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                           "%zx\r\n%.*s\r\n%zx;ext=1\r\n%s\r\n0\r\n\r\n",
                           status, h, (int)h, body, bl - h, body + h);
        else
            len = snprintf(out, sizeof out,
                           "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                           "Connection: close\r\n\r\n%s",
                           status, bl, body);
        /* in three writes (inside the status line, 5 bytes before the end),
           so the client has to assemble the answer */
        send(c, out, 20, MSG_NOSIGNAL);
        usleep(20000);
        send(c, out + 20, (size_t)len - 25, MSG_NOSIGNAL);
        usleep(20000);
        send(c, out + len - 5, 5, MSG_NOSIGNAL);
        close(c);
    }
    return NULL;
}

static int srv_start(fake_server *s, int status, const char *body) {
    s->status = status;
    s->body = body;
    s->n_req = 0;
    memset(s->req, 0, sizeof s->req);
    s->fd = listen_local(&s->port);
    if (s->fd < 0) return -1;
    if (!s->silent && pthread_create(&s->th, NULL, serve_loop, s) != 0) return -1;
    return 0;
}

static void srv_stop(fake_server *s) {
    shutdown(s->fd, SHUT_RDWR);
    if (!s->silent) pthread_join(s->th, NULL);
    close(s->fd);
}

/* The variables dspark claude sets or removes, and its own knobs: unset, so
   the expected output does not depend on the caller's environment. */
static void clean_env(void) {
    const char *names[] = {"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "ANTHROPIC_MODEL",
                           "ANTHROPIC_SMALL_FAST_MODEL", "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX",
                           "CLAUDE_CODE_USE_FOUNDRY", "CLAUDE_CODE_USE_MANTLE", "CLAUDE_CODE_USE_ANTHROPIC_AWS",
                           "CLAUDE_CODE_MAX_OUTPUT_TOKENS", "CLAUDE_CODE_AUTO_COMPACT_WINDOW", "DISABLE_TELEMETRY",
                           "DISABLE_AUTOUPDATER", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "DSPARK_URL",
                           "DSPARK_CLAUDE_BIN", "DSPARK_TEST_KEEP"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) unsetenv(names[i]);
    const char *al[] = {"OPUS", "SONNET", "HAIKU"};
    for (int i = 0; i < 3; i++) {
        char k[80];
        snprintf(k, sizeof k, "ANTHROPIC_DEFAULT_%s_MODEL", al[i]);
        unsetenv(k);
        snprintf(k, sizeof k, "ANTHROPIC_DEFAULT_%s_MODEL_NAME", al[i]);
        unsetenv(k);
        snprintf(k, sizeof k, "ANTHROPIC_DEFAULT_%s_MODEL_DESCRIPTION", al[i]);
        unsetenv(k);
    }
}

/* The export lines of --print-env (DISABLE_TELEMETRY left to the caller). */
static void expected_env(char *out, size_t n, const char *base, const char *tok, const char *m, const char *d,
                         const char *compact, const char *max_out) {
    char al[3][700];
    const char *names[] = {"HAIKU", "OPUS", "SONNET"};
    for (int i = 0; i < 3; i++)
        snprintf(al[i], sizeof al[i],
                 "export ANTHROPIC_DEFAULT_%s_MODEL='%s'\n"
                 "export ANTHROPIC_DEFAULT_%s_MODEL_DESCRIPTION='Local %s via dspark'\n"
                 "export ANTHROPIC_DEFAULT_%s_MODEL_NAME='%s (dspark)'\n",
                 names[i], m, names[i], d, names[i], m);
    char c[100] = "", x[100] = "";
    if (compact) snprintf(c, sizeof c, "export CLAUDE_CODE_AUTO_COMPACT_WINDOW='%s'\n", compact);
    if (max_out) snprintf(x, sizeof x, "export CLAUDE_CODE_MAX_OUTPUT_TOKENS='%s'\n", max_out);
    snprintf(out, n,
             "export ANTHROPIC_AUTH_TOKEN='%s'\n"
             "export ANTHROPIC_BASE_URL='%s'\n"
             "%s%s%s"
             "export ANTHROPIC_MODEL='%s'\n"
             "export ANTHROPIC_SMALL_FAST_MODEL='%s'\n"
             "%s"
             "export CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC='1'\n"
             "%s"
             "export DISABLE_AUTOUPDATER='1'\n",
             tok, base, al[0], al[1], al[2], m, m, c, x);
}

#define HEALTH_131K                                                                                        \
    "{\"status\":\"ok\",\"model\":\"coder-6m\",\"mode\":\"dspark\",\"drafter\":\"coder-6m-dspark\","     \
    "\"context_window\":131072,\"max_output_tokens\":8192}"

TEST(claude_print_env_exact) {
    clean_env();
    fake_server s = {0};
    CHECK(srv_start(&s, 200, HEALTH_131K) == 0);
    setenv("ANTHROPIC_API_KEY", "sk-real-key", 1);
    setenv("CLAUDE_CODE_USE_VERTEX", "1", 1);
    setenv("CLAUDE_CODE_USE_BEDROCK", "1", 1);
    setenv("DISABLE_TELEMETRY", "1", 1); /* already as wanted: not printed */
    char args[256], *out = NULL, *err = NULL, want[9000], exp[8192];
    snprintf(args, sizeof args, "claude --url http://127.0.0.1:%d --print-env", s.port);
    CHECK_EQ_INT(test_run_cli(args, &out, &err), 0);
    char base[64];
    snprintf(base, sizeof base, "http://127.0.0.1:%d", s.port);
    expected_env(exp, sizeof exp, base, "dspark", "coder-6m", "dspark", "104857", "8192");
    snprintf(want, sizeof want,
             "%sunset ANTHROPIC_API_KEY\nunset CLAUDE_CODE_USE_BEDROCK\nunset CLAUDE_CODE_USE_VERTEX\n", exp);
    CHECK_MSG(out && !strcmp(out, want), "got:\n%s\nwant:\n%s", out ? out : "(null)", want);
    CHECK_MSG(err && !*err, "stderr: %s", err ? err : "(null)");
    /* /health, then the key check on /v1/models; no key: no Authorization */
    CHECK_EQ_INT(s.n_req, 2);
    CHECK_MSG(starts_with(s.req[0], "GET /health HTTP/1.1\r\n"), "request: %s", s.req[0]);
    CHECK_MSG(starts_with(s.req[1], "GET /v1/models HTTP/1.1\r\n"), "request: %s", s.req[1]);
    for (int i = 0; i < 2; i++)
        CHECK_MSG(strstr(s.req[i], "\r\nHost: 127.0.0.1:") && !strstr(s.req[i], "Authorization"), "request: %s",
                  s.req[i]);
    free(out);
    free(err);
    srv_stop(&s);
    clean_env();
}

TEST(claude_print_env_limits_and_key) {
    clean_env();
    char args[512], *out = NULL, *err = NULL, want[8192];
    /* exactly 100000: 0.8 x window; --api-key is the token and is sent as Bearer; chunked answer */
    fake_server s = {.chunked = 1};
    CHECK(srv_start(&s, 200,
                    "{\"model\":\"m1\",\"mode\":\"lookup\",\"context_window\":100000,\"max_output_tokens\":32000}") == 0);
    snprintf(args, sizeof args, "claude --url http://127.0.0.1:%d/ --api-key sk-local-1 --print-env", s.port);
    CHECK_EQ_INT(test_run_cli(args, &out, &err), 0);
    char base[64];
    snprintf(base, sizeof base, "http://127.0.0.1:%d", s.port);
    expected_env(want, sizeof want, base, "sk-local-1", "m1", "lookup", "80000", "32000");
    strcat(want, "export DISABLE_TELEMETRY='1'\n");
    CHECK_MSG(out && !strcmp(out, want), "got:\n%s\nwant:\n%s\nstderr: %s", out ? out : "", want, err ? err : "");
    for (int i = 0; i < 2; i++)
        CHECK_MSG(strstr(s.req[i], "\r\nAuthorization: Bearer sk-local-1\r\n"), "request: %s", s.req[i]);
    free(out);
    free(err);
    srv_stop(&s);

    /* 99999: no compaction window; no max_output_tokens: no limit; no model: "local"; DSPARK_URL with a path */
    fake_server t = {0};
    CHECK(srv_start(&t, 200, "{\"status\":\"ok\",\"mode\":\"baseline\",\"context_window\":99999}") == 0);
    char purl[64];
    snprintf(purl, sizeof purl, "http://127.0.0.1:%d/pfx/", t.port);
    setenv("DSPARK_URL", purl, 1);
    CHECK_EQ_INT(test_run_cli("claude --print-env", &out, &err), 0);
    /* the base URL keeps the path, without the trailing slash */
    snprintf(base, sizeof base, "http://127.0.0.1:%d/pfx", t.port);
    expected_env(want, sizeof want, base, "dspark", "local", "baseline", NULL, NULL);
    strcat(want, "export DISABLE_TELEMETRY='1'\n");
    CHECK_MSG(out && !strcmp(out, want), "got:\n%s\nwant:\n%s\nstderr: %s", out ? out : "", want, err ? err : "");
    CHECK_MSG(starts_with(t.req[0], "GET /pfx/health HTTP/1.1\r\n"), "request: %s", t.req[0]);
    CHECK_MSG(starts_with(t.req[1], "GET /pfx/v1/models HTTP/1.1\r\n"), "request: %s", t.req[1]);
    free(out);
    free(err);
    unsetenv("DSPARK_URL");
    srv_stop(&t);

    /* single quotes in a value are escaped for the shell */
    fake_server q = {0};
    CHECK(srv_start(&q, 200,
                    "{\"model\":\"it's\",\"mode\":\"dflash\",\"context_window\":4096,\"max_output_tokens\":512}") == 0);
    snprintf(args, sizeof args, "claude --url http://127.0.0.1:%d --print-env", q.port);
    CHECK_EQ_INT(test_run_cli(args, &out, &err), 0);
    CHECK_MSG(out && strstr(out, "\nexport ANTHROPIC_MODEL='it'\\''s'\n") &&
                  strstr(out, "\nexport ANTHROPIC_DEFAULT_OPUS_MODEL_NAME='it'\\''s (dspark)'\n") &&
                  strstr(out, "\nexport CLAUDE_CODE_MAX_OUTPUT_TOKENS='512'\n") &&
                  !strstr(out, "AUTO_COMPACT"),
              "got:\n%s", out ? out : "");
    free(out);
    free(err);
    srv_stop(&q);
    clean_env();
}

TEST(claude_health_errors) {
    clean_env();
    char args[512], *out = NULL, *err = NULL;
    /* 401: pass --api-key */
    fake_server s = {0};
    CHECK(srv_start(&s, 401, "{\"type\":\"error\",\"error\":{\"type\":\"authentication_error\",\"message\":\"no\"}}") ==
          0);
    snprintf(args, sizeof args, "claude --url http://127.0.0.1:%d --print-env", s.port);
    CHECK_EQ_INT(test_run_cli(args, &out, &err), 1);
    CHECK_MSG(err && strstr(err, "HTTP 401") && strstr(err, "--api-key KEY"), "%s", err ? err : "");
    CHECK_MSG(out && !*out, "stdout: %s", out ? out : "");
    free(out);
    free(err);
    srv_stop(&s);
    /* /health open, the key needed elsewhere (as dspark serve --api-key does) */
    fake_server k = {.key = "sk-right"};
    CHECK(srv_start(&k, 200, HEALTH_131K) == 0);
    snprintf(args, sizeof args, "claude --url http://127.0.0.1:%d --print-env", k.port);
    CHECK_EQ_INT(test_run_cli(args, &out, &err), 1);
    CHECK_MSG(err && strstr(err, "requires an API key (HTTP 401)") && strstr(err, "--api-key KEY"), "%s",
              err ? err : "");
    CHECK_MSG(out && !*out, "stdout: %s", out ? out : "");
    free(out);
    free(err);
    snprintf(args, sizeof args, "claude --url http://127.0.0.1:%d --api-key sk-wrong --print-env", k.port);
    CHECK_EQ_INT(test_run_cli(args, NULL, &err), 1);
    CHECK_MSG(err && strstr(err, "refused the API key"), "%s", err ? err : "");
    free(err);
    snprintf(args, sizeof args, "claude --url http://127.0.0.1:%d --api-key sk-right --print-env", k.port);
    CHECK_EQ_INT(test_run_cli(args, &out, NULL), 0);
    CHECK_MSG(out && strstr(out, "export ANTHROPIC_AUTH_TOKEN='sk-right'\n"), "%s", out ? out : "");
    free(out);
    srv_stop(&k);
    /* another status */
    fake_server f = {0};
    CHECK(srv_start(&f, 503, "{\"status\":\"loading\"}") == 0);
    snprintf(args, sizeof args, "claude --url http://127.0.0.1:%d --print-env", f.port);
    CHECK_EQ_INT(test_run_cli(args, NULL, &err), 1);
    char want[200];
    snprintf(want, sizeof want, "server at http://127.0.0.1:%d returned HTTP 503", f.port);
    CHECK_MSG(err && strstr(err, want), "%s", err ? err : "");
    free(err);
    srv_stop(&f);
    /* 200 but not JSON */
    fake_server h = {0};
    CHECK(srv_start(&h, 200, "<html>hello</html>") == 0);
    snprintf(args, sizeof args, "claude --url http://127.0.0.1:%d --print-env", h.port);
    CHECK_EQ_INT(test_run_cli(args, NULL, &err), 1);
    CHECK_MSG(err && strstr(err, "JSON"), "%s", err ? err : "");
    free(err);
    srv_stop(&h);
    /* a closed port: a `dspark serve` example */
    int port = 0, fd = listen_local(&port);
    CHECK(fd >= 0);
    close(fd);
    snprintf(args, sizeof args, "claude --url http://127.0.0.1:%d --print-env", port);
    CHECK_EQ_INT(test_run_cli(args, &out, &err), 1);
    snprintf(want, sizeof want, "dspark serve --port %d", port);
    CHECK_MSG(err && strstr(err, "no dspark server") && strstr(err, want), "%s", err ? err : "");
    CHECK_MSG(out && !*out, "stdout: %s", out ? out : "");
    free(out);
    free(err);
    /* a server that accepts and never answers: 3 s timeout */
    fake_server z = {.silent = 1};
    CHECK(srv_start(&z, 200, "{}") == 0);
    snprintf(args, sizeof args, "claude --url http://127.0.0.1:%d --print-env", z.port);
    double t0 = ds_now();
    CHECK_EQ_INT(test_run_cli(args, NULL, &err), 1);
    double dt = ds_now() - t0;
    CHECK_MSG(dt > 2.5 && dt < 8, "took %.1f s", dt);
    CHECK_MSG(err && strstr(err, "within 3 s"), "%s", err ? err : "");
    free(err);
    srv_stop(&z);
    /* URLs and arguments */
    const char *bad[][2] = {
        {"claude --url https://127.0.0.1:1 --print-env", "https:// URLs are not supported"},
        {"claude --url ftp://x --print-env", "http://HOST"},
        {"claude --url http://127.0.0.1:99999 --print-env", "bad port"},
        {"claude --url http://127.0.0.1:8080 hello", "after --"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(test_run_cli(bad[i][0], NULL, &err), 1);
        CHECK_MSG(err && strstr(err, bad[i][1]), "%s: %s", bad[i][0], err ? err : "");
        free(err);
    }
    CHECK_EQ_INT(test_run_cli("claude --help", &out, NULL), 0);
    CHECK_MSG(out && strstr(out, "usage: dspark claude") && strstr(out, "npm install -g @anthropic-ai/claude-code"),
              "%s", out ? out : "");
    free(out);
    clean_env();
}

/* A stand-in claude: prints its arguments and environment, exits 7. */
static void write_fake_claude(const char *path) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs("#!/bin/sh\nfor a in \"$@\"; do printf 'arg[%s]\\n' \"$a\"; done\nenv | LC_ALL=C sort\nexit 7\n", f);
    fclose(f);
    chmod(path, 0755);
}

static int has_line(const char *text, const char *line) {
    size_t n = strlen(line);
    for (const char *p = text; p && *p;) {
        if (!strncmp(p, line, n) && (p[n] == '\n' || !p[n])) return 1;
        p = strchr(p, '\n');
        if (p) p++;
    }
    return 0;
}

static int has_prefix_line(const char *text, const char *prefix) {
    size_t n = strlen(prefix);
    for (const char *p = text; p && *p;) {
        if (!strncmp(p, prefix, n)) return 1;
        p = strchr(p, '\n');
        if (p) p++;
    }
    return 0;
}

TEST(claude_exec_passes_env_and_args) {
    clean_env();
    fake_server s = {0};
    CHECK(srv_start(&s, 200, HEALTH_131K) == 0);
    char bindir[600], bin[700];
    snprintf(bindir, sizeof bindir, "%s/claude-bin", test_tmp_dir());
    mkdir(bindir, 0755);
    snprintf(bin, sizeof bin, "%s/claude", bindir);
    write_fake_claude(bin);
    setenv("ANTHROPIC_API_KEY", "sk-must-not-leak", 1);
    setenv("CLAUDE_CODE_USE_BEDROCK", "1", 1);
    setenv("DSPARK_TEST_KEEP", "kept", 1);
    setenv("DSPARK_CLAUDE_BIN", bin, 1);
    char args[512], *out = NULL, *err = NULL, line[256];
    snprintf(args, sizeof args,
             "claude --url http://127.0.0.1:%d -- -p 'say hi' --bare --tools \"\" --system-prompt \"You are terse.\"",
             s.port);
    CHECK_EQ_INT(test_run_cli(args, &out, &err), 7); /* the child's exit status */
    CHECK_MSG(out && strstr(out, "arg[-p]\narg[say hi]\narg[--bare]\narg[--tools]\narg[]\narg[--system-prompt]\n"
                                 "arg[You are terse.]\n"),
              "%s", out ? out : "");
    snprintf(line, sizeof line, "ANTHROPIC_BASE_URL=http://127.0.0.1:%d", s.port);
    const char *lines[] = {line,
                           "ANTHROPIC_AUTH_TOKEN=dspark",
                           "ANTHROPIC_MODEL=coder-6m",
                           "ANTHROPIC_SMALL_FAST_MODEL=coder-6m",
                           "ANTHROPIC_DEFAULT_SONNET_MODEL=coder-6m",
                           "ANTHROPIC_DEFAULT_HAIKU_MODEL_NAME=coder-6m (dspark)",
                           "ANTHROPIC_DEFAULT_OPUS_MODEL_DESCRIPTION=Local dspark via dspark",
                           "CLAUDE_CODE_MAX_OUTPUT_TOKENS=8192",
                           "CLAUDE_CODE_AUTO_COMPACT_WINDOW=104857",
                           "DISABLE_TELEMETRY=1",
                           "DISABLE_AUTOUPDATER=1",
                           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
                           "DSPARK_TEST_KEEP=kept"};
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        CHECK_MSG(out && has_line(out, lines[i]), "missing %s in:\n%s", lines[i], out ? out : "");
    CHECK_MSG(out && !has_prefix_line(out, "ANTHROPIC_API_KEY=") && !has_prefix_line(out, "CLAUDE_CODE_USE_BEDROCK="),
              "%s", out ? out : "");
    snprintf(line, sizeof line,
             "claude code -> http://127.0.0.1:%d \xc2\xb7 model coder-6m (dspark) \xc2\xb7 this session only\n", s.port);
    CHECK_MSG(err && !strcmp(err, line), "stderr: %s", err ? err : "");
    free(out);
    free(err);

    /* found as `claude` on PATH when DSPARK_CLAUDE_BIN is not set */
    unsetenv("DSPARK_CLAUDE_BIN");
    const char *old = getenv("PATH");
    char *saved = old ? xstrdup(old) : NULL, path[8192];
    snprintf(path, sizeof path, "%s:%s", bindir, saved ? saved : "/usr/bin:/bin");
    setenv("PATH", path, 1);
    snprintf(args, sizeof args, "claude --url http://127.0.0.1:%d -- --version", s.port);
    CHECK_EQ_INT(test_run_cli(args, &out, NULL), 7);
    CHECK_MSG(out && !strncmp(out, "arg[--version]\n", 15) && has_line(out, "ANTHROPIC_MODEL=coder-6m"), "%s",
              out ? out : "");
    free(out);
    if (saved) setenv("PATH", saved, 1);
    free(saved);
    srv_stop(&s);
    clean_env();
}

TEST(claude_missing_binary_hint) {
    clean_env();
    fake_server s = {0};
    CHECK(srv_start(&s, 200, HEALTH_131K) == 0);
    char args[256], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "claude --url http://127.0.0.1:%d -- -p hi", s.port);
    setenv("DSPARK_CLAUDE_BIN", "/nonexistent/claude", 1);
    CHECK_EQ_INT(test_run_cli(args, &out, &err), 1);
    CHECK_MSG(err && strstr(err, "/nonexistent/claude") && strstr(err, "npm install -g @anthropic-ai/claude-code") &&
                  !strstr(err, "claude code ->"),
              "%s", err ? err : "");
    CHECK_MSG(out && !*out, "stdout: %s", out ? out : "");
    free(out);
    free(err);
    setenv("DSPARK_CLAUDE_BIN", "dspark-test-no-such-claude", 1);
    CHECK_EQ_INT(test_run_cli(args, NULL, &err), 1);
    CHECK_MSG(err && strstr(err, "not found on PATH") && strstr(err, "npm install -g @anthropic-ai/claude-code"), "%s",
              err ? err : "");
    free(err);
    /* a file that is not executable */
    char f[600];
    snprintf(f, sizeof f, "%s/not-exec-claude", test_tmp_dir());
    FILE *fp = fopen(f, "w");
    if (fp) {
        fputs("#!/bin/sh\n", fp);
        fclose(fp);
    }
    setenv("DSPARK_CLAUDE_BIN", f, 1);
    CHECK_EQ_INT(test_run_cli(args, NULL, &err), 1);
    CHECK_MSG(err && strstr(err, "not an executable file"), "%s", err ? err : "");
    free(err);
    srv_stop(&s);
    clean_env();
}
