/* Server conformance tests: each starts a real `dspark serve` on a free
 * loopback port, waits for GET /health, runs one node script of
 * tests/server/ that drives it with the official OpenAI and Anthropic SDK
 * clients (installed by scripts/fetch-test-clients into $DSPARK_NODE_DIR,
 * default ~/.cache/dspark/node), then stops the server with SIGTERM and
 * checks it exits with status 0.
 *
 *   server_openai     chat completions, completions, models (scripted model)
 *   server_anthropic  messages, streaming, count_tokens (scripted model)
 *   server_responses  the Responses API (scripted model)
 *   server_errors     auth, error shapes, context and body limits, CORS
 *   server_bundled    the bundled model: dspark vs baseline outputs,
 *                     keep-alives, disconnects, /tokenize, /metrics, /events
 *   server_load       the bundled model under 32 requests in flight (all
 *                     32 at once, their KV pages bounded by --kv-ram), RSS
 *   server_drain      shutdown on the bundled model (drain.mjs, which sends
 *                     the signals): SIGTERM lets the running and queued
 *                     answers of every dialect finish whole; past a short
 *                     --drain-timeout, or on a second signal, each ends with
 *                     its dialect's error; new requests get 503; exit 0
 *   server_gemma3     other families served (family.mjs): a random gemma3
 *   server_qwen3_moe  and a random qwen3_moe with their real tokenizers and
 *                     templates, every route alike
 *   server_conc       concurrent requests (conc.mjs): each equal to its
 *                     answer alone, a long prefill between the others'
 *                     rounds, the batch in /health and /metrics, a drain
 *                     with a full batch; tool calls on the scripted model
 *   server_web        the web interface (GET /) in headless Chromium:
 *                     reasoning, tool calls, Markdown (web_tools.mjs, the
 *                     scripted model); chat, stop, reload, race (web.mjs),
 *                     engine view, no request off the machine; then again
 *                     behind --api-key. Screenshots and the page's size and
 *                     first paint go to build/test-artifacts/web/. The
 *                     browser: $DSPARK_CHROMIUM, else chromium on PATH
 *                     (missing: the test fails, saying how to install it).
 *
 * The scripted model (tests/scripted.c) answers with known text, so the
 * scripts check exact content, reasoning, tool calls and usage.
 * DSPARK_TEST_VERBOSE=1 prints each script's report also when it passes;
 * a script runs alone as DSPARK_URL=http://HOST:PORT node tests/server/X.mjs
 * (DSPARK_ONLY=substring picks its checks). */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "spec/registry.h"
#include "test.h"
#include "base/util.h"

#define HEALTH_WAIT_S 30.0
#define STOP_WAIT_S 10.0
/* A sanitizer build runs the model several times slower: the node scripts'
   client, stream and test timeouts (tests/server/common.mjs) are five times
   longer there, and so is the whole script's limit. A keep-alive test whose four
   streams queue behind a 64-token request took over 60 s under ASan. */
#if defined(__SANITIZE_ADDRESS__)
#define NODE_TIMEOUT_S 1500.0
#define NODE_CALL_TIMEOUT "DSPARK_TEST_TIMEOUT_SCALE=5"
#else
#define NODE_TIMEOUT_S 300.0
#define NODE_CALL_TIMEOUT "DSPARK_TEST_TIMEOUT_SCALE=1"
#endif

typedef struct {
    pid_t pid;
    int port;
    char log[600];
} server;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static const char *node_dir(void) {
    static char buf[1024];
    const char *d = getenv("DSPARK_NODE_DIR");
    if (d && *d) return d;
    const char *home = getenv("HOME");
    snprintf(buf, sizeof buf, "%s/.cache/dspark/node", home ? home : ".");
    return buf;
}

static const char *server_dir(void) {
    static char buf[600];
    snprintf(buf, sizeof buf, "%s/../server", test_data_dir());
    return buf;
}

/* 1 when an executable `name` is in a directory of PATH */
static int on_path(const char *name) {
    const char *path = getenv("PATH");
    int found = 0;
    if (path) {
        char *p = xstrdup(path), *save = NULL;
        for (char *d = strtok_r(p, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
            char f[1200];
            snprintf(f, sizeof f, "%s/%s", *d ? d : ".", name);
            found = access(f, X_OK) == 0;
        }
        free(p);
    }
    return found;
}

/* node on PATH and both SDKs installed; otherwise a failure that says how
   to get them (make test installs them through the test-clients step) */
static int clients_ready(void) {
    int node = on_path("node");
    CHECK_MSG(node, "node not found on PATH: install Node.js 20 (the server tests run the official SDK clients)");
    const char *pk[2] = {"openai", "@anthropic-ai/sdk"};
    int ok = node;
    for (int i = 0; i < 2; i++) {
        char f[1200];
        snprintf(f, sizeof f, "%s/node_modules/%s/package.json", node_dir(), pk[i]);
        int have = access(f, R_OK) == 0;
        CHECK_MSG(have, "%s is not installed in %s/node_modules: run scripts/fetch-test-clients (make test does)",
                  pk[i], node_dir());
        ok &= have;
    }
    return ok;
}

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* A tiny blocking HTTP/1.1 client: sends METHOD path (Connection: close),
   reads the whole reply into body (cap bytes, NUL-terminated, headers
   included). Returns the status code, or -1 when there is no answer. */
static int http_call(int port, const char *method, const char *path, char *body, size_t cap, double timeout_s) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct timeval tv = {(time_t)timeout_s, (suseconds_t)((timeout_s - (double)(time_t)timeout_s) * 1e6)};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    char req[1024];
    int n = snprintf(req, sizeof req, "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n", method, path,
                     port);
    if (send(fd, req, (size_t)n, MSG_NOSIGNAL) != n) {
        close(fd);
        return -1;
    }
    size_t got = 0;
    for (;;) {
        if (got + 1 >= cap) break;
        ssize_t r = recv(fd, body + got, cap - 1 - got, 0);
        if (r <= 0) break;
        got += (size_t)r;
    }
    body[got] = 0;
    close(fd);
    int status = -1;
    if (sscanf(body, "HTTP/1.%*d %d", &status) != 1) return -1;
    return status;
}

static void print_tail(const char *what, const char *path, size_t max) {
    char err[256];
    size_t len = 0;
    char *s = ds_read_file(path, &len, err, sizeof err);
    if (!s) return;
    const char *p = len > max ? s + len - max : s;
    fprintf(stderr, "  ---- %s (%s)%s ----\n%s%s  ---- end ----\n", what, path, len > max ? ", tail" : "", p,
            len && s[len - 1] != '\n' ? "\n" : "");
    free(s);
}

/* Starts argv (argv[0] looked up on PATH) with the "KEY=VALUE" strings of
   env added to its environment, stdout and stderr to the file out, stdin
   from /dev/null. Returns the pid, or -1 (reported). */
static pid_t spawn(const char *const *argv, const char *const *env, const char *out) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        test_fail(__FILE__, __LINE__, "fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        for (int i = 0; env && env[i]; i++) putenv((char *)env[i]);
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0) dup2(nul, 0);
        execvp(argv[0], (char *const *)argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    return pid;
}

/* 1 with its status in *st once pid exited within timeout seconds, else 0. */
static int wait_exit(pid_t pid, double timeout, int *st) {
    double t0 = now_s();
    while (now_s() - t0 < timeout) {
        if (waitpid(pid, st, WNOHANG) == pid) return 1;
        sleep_ms(20);
    }
    return 0;
}

/* argv for the child: bin serve --model DIR --host 127.0.0.1 --port P extra...;
   env: "KEY=VALUE" strings added to the environment. */
static int start_server(server *s, const char *model_dir, const char *const *extra, const char *const *env) {
    static int seq;
    memset(s, 0, sizeof *s);
    s->pid = -1;
    s->port = free_port();
    if (s->port <= 0) {
        test_fail(__FILE__, __LINE__, "no free port");
        return -1;
    }
    snprintf(s->log, sizeof s->log, "%s/server-%d.log", test_tmp_dir(), seq++);
    const char *bin = getenv("DSPARK_BIN");
    if (!bin || !*bin) bin = "./dspark";
    char port[16];
    snprintf(port, sizeof port, "%d", s->port);
    const char *argv[48];
    int ac = 0;
    argv[ac++] = bin;
    argv[ac++] = "serve";
    argv[ac++] = "--model";
    argv[ac++] = model_dir;
    argv[ac++] = "--host";
    argv[ac++] = "127.0.0.1";
    argv[ac++] = "--port";
    argv[ac++] = port;
    for (int i = 0; extra && extra[i] && ac < 47; i++) argv[ac++] = extra[i];
    argv[ac] = NULL;
    pid_t pid = spawn(argv, env, s->log);
    if (pid < 0) return -1;
    s->pid = pid;
    char buf[8192];
    double t0 = now_s();
    while (now_s() - t0 < HEALTH_WAIT_S) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            s->pid = -1;
            test_fail(__FILE__, __LINE__, "dspark serve exited before answering /health (status %d)",
                      WIFEXITED(st) ? WEXITSTATUS(st) : -1);
            print_tail("server log", s->log, 4000);
            return -1;
        }
        if (http_call(s->port, "GET", "/health", buf, sizeof buf, 2.0) == 200) {
            /* the listener answers as soon as it is up; the line follows it
               to the log (a loaded machine may take a moment) */
            char err[256], want[128];
            snprintf(want, sizeof want, "dspark serve: listening on http://127.0.0.1:%d", s->port);
            int found = 0;
            for (double t1 = now_s(); !found && now_s() - t1 < 10.0; sleep_ms(50)) {
                size_t len;
                char *log = ds_read_file(s->log, &len, err, sizeof err);
                found = log && strstr(log, want);
                free(log);
            }
            CHECK_MSG(found, "the server log lacks \"%s\"", want);
            return 0;
        }
        sleep_ms(50);
    }
    test_fail(__FILE__, __LINE__, "GET /health did not answer 200 within %.0f s", HEALTH_WAIT_S);
    print_tail("server log", s->log, 4000);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    s->pid = -1;
    return -1;
}

/* whether the server's log so far holds needle */
static int log_has(const server *s, const char *needle) {
    char err[256];
    size_t len;
    char *log = ds_read_file(s->log, &len, err, sizeof err);
    int has = log && strstr(log, needle) != NULL;
    free(log);
    return has;
}

/* The server must exit with status 0 within `seconds` (it was sent SIGTERM). */
static void expect_exit(server *s, double seconds) {
    if (s->pid <= 0) return;
    int st = 0;
    if (!wait_exit(s->pid, seconds, &st)) {
        test_fail(__FILE__, __LINE__, "dspark serve did not exit within %.0f s of SIGTERM", seconds);
        kill(s->pid, SIGKILL);
        waitpid(s->pid, &st, 0);
        print_tail("server log", s->log, 3000);
    } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        if (WIFSIGNALED(st))
            test_fail(__FILE__, __LINE__, "dspark serve died of signal %d after SIGTERM", WTERMSIG(st));
        else
            test_fail(__FILE__, __LINE__, "dspark serve exited with status %d after SIGTERM", WEXITSTATUS(st));
        print_tail("server log", s->log, 3000);
    }
    s->pid = -1;
}

/* SIGTERM; the server must exit with status 0 within STOP_WAIT_S. */
static void stop_server(server *s) {
    if (s->pid <= 0) return;
    kill(s->pid, SIGTERM);
    expect_exit(s, STOP_WAIT_S);
}

/* Runs `node tests/server/SCRIPT` against the server with env (KEY=VALUE
   strings) added; fails, printing its output and the server log, unless it
   exits 0. */
static int run_node(const server *s, const char *script, const char *const *env) {
    static int seq;
    char out[600], path[700];
    snprintf(out, sizeof out, "%s/node-%d.out", test_tmp_dir(), seq++);
    snprintf(path, sizeof path, "%s/%s", server_dir(), script);
    char url_env[96], node_env[700];
    snprintf(url_env, sizeof url_env, "DSPARK_URL=http://127.0.0.1:%d", s->port);
    snprintf(node_env, sizeof node_env, "DSPARK_NODE_DIR=%s", node_dir());
    const char *envs[40] = {url_env, node_env, NODE_CALL_TIMEOUT};
    for (int i = 0; env && env[i] && i < 36; i++) envs[3 + i] = env[i];
    const char *argv[] = {"node", path, NULL};
    pid_t pid = spawn(argv, envs, out);
    if (pid < 0) return -1;
    int st = 0;
    if (!wait_exit(pid, NODE_TIMEOUT_S, &st)) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        test_fail(__FILE__, __LINE__, "node %s ran past %.0f s", script, NODE_TIMEOUT_S);
    } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        test_fail(__FILE__, __LINE__, "node %s failed (exit %d)", script, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    } else {
        if (getenv("DSPARK_TEST_VERBOSE")) print_tail(script, out, 12000);
        return 0;
    }
    print_tail(script, out, 12000);
    print_tail("server log", s->log, 3000);
    return -1;
}

/* VmRSS of a process in bytes, or -1. */
static long long rss_bytes(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %lld kB", &kb) == 1) break;
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

static const char *bundled_dir(void) {
    static char buf[600];
    snprintf(buf, sizeof buf, "%s/../../models/%s", test_data_dir(), DSPARK_DEFAULT_MODEL);
    return buf;
}

/* Starts a server on the scripted model with extra args / env, runs one
   script with env, stops the server. */
static void scripted_case(const char *script, const char *const *args, const char *const *senv,
                          const char *const *nenv) {
    if (!clients_ready()) return;
    const char *dir = test_scripted_model_dir();
    CHECK_MSG(dir != NULL, "could not write the scripted model");
    if (!dir) return;
    server s;
    if (start_server(&s, dir, args, senv) != 0) return;
    const char *env[16] = {"DSPARK_MODEL_ID=scripted-qwen3"};
    int n = 1;
    for (int i = 0; nenv && nenv[i] && n < 15; i++) env[n++] = nenv[i];
    env[n] = NULL;
    run_node(&s, script, env);
    stop_server(&s);
}

static const char *const THREADS[] = {"-t", "2", NULL};

TEST(server_openai) { scripted_case("openai.mjs", THREADS, NULL, NULL); }

TEST(server_anthropic) { scripted_case("anthropic.mjs", THREADS, NULL, NULL); }

TEST(server_responses) { scripted_case("responses.mjs", THREADS, NULL, NULL); }

TEST(server_errors) {
    const char *args[] = {"-t", "2", "--api-key", "sk-dspark-test", "--context-window", "512", NULL};
    const char *senv[] = {"DSPARK_MAX_BODY_BYTES=65536", NULL};
    const char *nenv[] = {"DSPARK_API_KEY=sk-dspark-test", "DSPARK_CONTEXT_WINDOW=512", "DSPARK_MAX_BODY=65536", NULL};
    scripted_case("errors.mjs", args, senv, nenv);
}

/* Request fields (tests/server/fields.mjs): tool calls enforced on the
   scripted model, output formats, n, logit_bias and penalties on the
   bundled one (its default mode: speculative rows under every processor). */
TEST(server_fields) {
    const char *nenv[] = {"DSPARK_FIELDS_PHASE=scripted", NULL};
    scripted_case("fields.mjs", THREADS, NULL, nenv);
    if (!clients_ready()) return;
    server s;
    if (start_server(&s, bundled_dir(), THREADS, NULL) != 0) return;
    const char *env[] = {"DSPARK_MODEL_ID=" DSPARK_DEFAULT_MODEL, "DSPARK_FIELDS_PHASE=bundled", NULL};
    run_node(&s, "fields.mjs", env);
    stop_server(&s);
}

/* Other families served (tests/server/family.mjs): a random checkpoint
   written by make (tests/test_families.c) with its family's real tokenizer
   and chat template answers alike through every route, alone or beside
   another request, cold or cached; the template renders "Hi there" into
   prompt_tokens tokens. */
static void family_case(int (*make)(char *, size_t), const char *id, int prompt_tokens) {
    if (!clients_ready()) return;
    char dir[700], e_id[128], e_pt[64];
    if (make(dir, sizeof dir) != 0) return;
    const char *args[] = {"-t", "2", "--mode", "baseline", "--no-warmup", NULL};
    server s;
    if (start_server(&s, dir, args, NULL) != 0) return;
    snprintf(e_id, sizeof e_id, "DSPARK_MODEL_ID=%s", id);
    snprintf(e_pt, sizeof e_pt, "DSPARK_FAMILY_PROMPT_TOKENS=%d", prompt_tokens);
    const char *env[] = {e_id, e_pt, NULL};
    run_node(&s, "family.mjs", env);
    stop_server(&s);
}

/* gemma3: a prompt far past its sliding window, too */
TEST(server_gemma3) { family_case(test_gemma3_tok_model, "fam-gemma3-tok", 11); }

/* a mixture of experts */
TEST(server_qwen3_moe) { family_case(test_moe_tok_model, "fam-moe-tok", 10); }

/* The bundled model with its DSpark drafter (cap pinned so drafts are made)
   and then plain decoding: both must give the same greedy answers. */
TEST(server_bundled) {
    if (!clients_ready()) return;
    char res_spec[700], res_base[700], e_spec[720], e_base[720], e_cmp[720];
    snprintf(res_spec, sizeof res_spec, "%s/bundled-dspark.json", test_tmp_dir());
    snprintf(res_base, sizeof res_base, "%s/bundled-baseline.json", test_tmp_dir());
    snprintf(e_spec, sizeof e_spec, "DSPARK_RESULTS=%s", res_spec);
    snprintf(e_base, sizeof e_base, "DSPARK_RESULTS=%s", res_base);
    snprintf(e_cmp, sizeof e_cmp, "DSPARK_COMPARE=%s", res_spec);
    const char *senv[] = {"DSPARK_STREAM_KEEPALIVE_S=0.05", NULL};
    server s;
    const char *spec_args[] = {"-t", "2", "--mode", "dspark", "--max-draft", "7", NULL};
    if (start_server(&s, bundled_dir(), spec_args, senv) != 0) return;
    CHECK_MSG(log_has(&s, "dspark serve: warmed up 4 cache slots in "), "no warm-up line in the server log");
    const char *env1[] = {"DSPARK_MODEL_ID=" DSPARK_DEFAULT_MODEL, "DSPARK_EXPECT_MODE=dspark", e_spec, NULL};
    int rc = run_node(&s, "bundled.mjs", env1);
    stop_server(&s);
    if (rc != 0) return;
    /* without the warm-up: the same answers (DSPARK_COMPARE) */
    const char *base_args[] = {"-t", "2", "--mode", "baseline", "--no-warmup", NULL};
    if (start_server(&s, bundled_dir(), base_args, senv) != 0) return;
    CHECK_MSG(!log_has(&s, "warmed up"), "a warm-up line despite --no-warmup");
    const char *env2[] = {"DSPARK_MODEL_ID=" DSPARK_DEFAULT_MODEL, "DSPARK_EXPECT_MODE=baseline", e_base, e_cmp, NULL};
    run_node(&s, "bundled.mjs", env2);
    stop_server(&s);
}

/* 200 mixed requests with 32 in flight on the default mode; the server's RSS
   may not grow by more than 64 MB over the load after a warm-up. */
TEST(server_load) {
    if (!clients_ready()) return;
    char file[700], e_file[720];
    snprintf(file, sizeof file, "%s/load-expected.json", test_tmp_dir());
    snprintf(e_file, sizeof e_file, "DSPARK_LOAD_FILE=%s", file);
    /* an ASan build's quarantine would count as growth: keep it small */
    char asan[600];
    const char *ao = getenv("ASAN_OPTIONS");
    snprintf(asan, sizeof asan, "ASAN_OPTIONS=%s%squarantine_size_mb=8", ao ? ao : "", ao && *ao ? ":" : "");
    const char *senv[] = {asan, NULL};
    server s;
    /* 32 at once, in a pool of 128 pages (16 MiB): the bundled model's 6
       layers, a page each and one each to spare for a request's reservation,
       hold about ten of these requests (load.mjs) */
    const char *args[] = {"-t", "2", "--max-batch", "32", "--kv-ram", "16", NULL};
    if (start_server(&s, bundled_dir(), args, senv) != 0) return;
    const char *warm[] = {"DSPARK_MODEL_ID=" DSPARK_DEFAULT_MODEL, "DSPARK_LOAD_PHASE=warm", e_file, NULL};
    if (run_node(&s, "load.mjs", warm) == 0) {
        long long before = rss_bytes(s.pid);
        const char *load[] = {"DSPARK_MODEL_ID=" DSPARK_DEFAULT_MODEL, "DSPARK_LOAD_PHASE=load", "DSPARK_LOAD_N=200",
                              e_file, NULL};
        int rc = run_node(&s, "load.mjs", load);
        long long after = rss_bytes(s.pid);
        CHECK_MSG(before > 0 && after > 0, "cannot read the server's VmRSS");
        if (rc == 0 && before > 0 && after > 0) {
            printf("     server RSS %.1f MB after warm-up, %.1f MB after 200 requests\n", (double)before / 1048576.0,
                   (double)after / 1048576.0);
            CHECK_MSG(after - before <= 64LL * 1024 * 1024, "server RSS grew by %.1f MB under load (%.1f -> %.1f MB)",
                      (double)(after - before) / 1048576.0, (double)before / 1048576.0, (double)after / 1048576.0);
        }
    }
    stop_server(&s);
}

/* Shutdown: one server per phase of drain.mjs, which signals the server
   itself; each must then exit with status 0 (the script has already seen
   its listener close). */
TEST(server_drain) {
    const char *bad[] = {"-1", "x", "1e9"};
    for (int i = 0; i < 3; i++) {
        char args[64], *err = NULL;
        snprintf(args, sizeof args, "serve --drain-timeout %s", bad[i]);
        CHECK(test_run_cli(args, NULL, &err) != 0);
        CHECK_MSG(err && strstr(err, "--drain-timeout"), "serve --drain-timeout %s: %s", bad[i], err ? err : "");
        free(err);
    }
    if (!clients_ready()) return;
    static const struct {
        const char *phase, *drain;
    } phases[] = {{"whole", NULL}, {"cut", "0.5"}, {"second", NULL}};
    for (size_t i = 0; i < sizeof phases / sizeof phases[0]; i++) {
        const char *args[] = {"-t", "2", "--no-warmup", phases[i].drain ? "--drain-timeout" : NULL, phases[i].drain,
                              NULL};
        server s;
        if (start_server(&s, bundled_dir(), args, NULL) != 0) return;
        char e_pid[64], e_phase[64];
        snprintf(e_pid, sizeof e_pid, "DSPARK_SERVER_PID=%d", (int)s.pid);
        snprintf(e_phase, sizeof e_phase, "DSPARK_DRAIN_PHASE=%s", phases[i].phase);
        const char *env[] = {"DSPARK_MODEL_ID=" DSPARK_DEFAULT_MODEL, e_pid, e_phase, NULL};
        int rc = run_node(&s, "drain.mjs", env);
        if (rc != 0) { /* the script may have failed before its signal */
            stop_server(&s);
            return;
        }
        expect_exit(&s, STOP_WAIT_S);
        CHECK_MSG(log_has(&s, phases[i].drain ? "drain timeout: cutting" : i == 0 ? "drained, exiting" : "second signal"),
                  "phase %s: the server log lacks its shutdown line", phases[i].phase);
    }
}

/* Concurrent requests (tests/server/conc.mjs): on the bundled model with
   DSpark drafts and --max-batch 4, mixed requests sent together each equal
   their answer alone, a long prompt's prefill goes between the others'
   rounds, /health and /metrics show the batch, and SIGTERM (sent by the
   script) with a full batch drains every answer whole; then the same for
   tool calls on the scripted model. --max-batch above --cache-slots is
   refused, and so are a --kv-ram below one window's pages and --kv-ram
   where the caches are not one pool. */
TEST(server_conc) {
    char *err = NULL;
    CHECK(test_run_cli("serve --max-batch 6 --cache-slots 4", NULL, &err) != 0);
    CHECK_MSG(err && strstr(err, "--max-batch 6 needs 6 cache slots"), "%s", err ? err : "");
    free(err);
    err = NULL;
    CHECK(test_run_cli("serve --max-batch 0", NULL, &err) != 0);
    CHECK_MSG(err && strstr(err, "--max-batch expects an integer in [1, 32]"), "%s", err ? err : "");
    free(err);
    /* the KV pool holds at least one window; no pool, no --kv-ram */
    err = NULL;
    CHECK(test_run_cli("serve --kv-ram 1 --no-warmup", NULL, &err) != 0);
    CHECK_MSG(err && strstr(err, "--kv-ram 1 MiB holds 8 KV pages") && strstr(err, "2048-position window needs 102"),
              "%s", err ? err : "");
    free(err);
    err = NULL;
    CHECK(test_run_cli("serve --kv-ram 64 --tensor-parallel 2 --no-warmup", NULL, &err) != 0);
    CHECK_MSG(err && strstr(err, "--kv-ram: the caches here (cpu, tensor-parallel ranks) are not pages of one pool"),
              "%s", err ? err : "");
    free(err);
    if (!clients_ready()) return;
    const char *args[] = {"-t", "2", "--mode", "dspark", "--max-draft", "7", "--max-batch", "4", "--no-warmup", NULL};
    server s;
    if (start_server(&s, bundled_dir(), args, NULL) != 0) return;
    char e_pid[64];
    snprintf(e_pid, sizeof e_pid, "DSPARK_SERVER_PID=%d", (int)s.pid);
    const char *env[] = {"DSPARK_MODEL_ID=" DSPARK_DEFAULT_MODEL, e_pid, "DSPARK_CONC_PHASE=bundled", NULL};
    if (run_node(&s, "conc.mjs", env) != 0) { /* the script may have failed before its signal */
        stop_server(&s);
        return;
    }
    expect_exit(&s, STOP_WAIT_S);
    CHECK_MSG(log_has(&s, "drained, exiting"), "the server log lacks its drain line");
    const char *nenv[] = {"DSPARK_CONC_PHASE=scripted", NULL};
    const char *sargs[] = {"-t", "2", "--max-batch", "4", NULL};
    scripted_case("conc.mjs", sargs, NULL, nenv);
}

/* --model as a Hugging Face id (a cache laid out here): the server names
   the model by the id, not by the snapshot's commit, and GET /doctor
   answers doctor's JSON (docs/doctor-schema.md) with the models. */
TEST(server_model_id_and_doctor) {
    char hub[700], snaps[800], cmd[PATH_MAX + 3000], env_hub[720];
    snprintf(hub, sizeof hub, "%s/server-hub", test_tmp_dir());
    snprintf(snaps, sizeof snaps, "%s/models--acme--coder/snapshots", hub);
    char *b = realpath(bundled_dir(), NULL);
    CHECK(b != NULL);
    if (!b) return;
    const char *c1 = "4444444444444444444444444444444444444444";
    snprintf(cmd, sizeof cmd, "mkdir -p %s %s/models--acme--coder/refs && ln -sfn %s %s/%s && echo %s > %s/models--acme--coder/refs/main",
             snaps, hub, b, snaps, c1, c1, hub);
    free(b);
    CHECK_EQ_INT(system(cmd), 0);
    snprintf(env_hub, sizeof env_hub, "HF_HUB_CACHE=%s", hub);
    const char *senv[] = {env_hub, NULL};
    const char *args[] = {"-t", "2", "--mode", "baseline", "--no-warmup", NULL};
    server s;
    if (start_server(&s, "acme/coder", args, senv) != 0) return;
    static char body[1 << 17];
    CHECK_EQ_INT(http_call(s.port, "GET", "/health", body, sizeof body, 5.0), 200);
    CHECK_MSG(strstr(body, "\"model\":\"coder\"") != NULL, "%s", body);
    CHECK_EQ_INT(http_call(s.port, "GET", "/doctor", body, sizeof body, 30.0), 200);
    const char *json = strstr(body, "\r\n\r\n");
    cJSON *j = json ? cJSON_Parse(json + 4) : NULL;
    CHECK_MSG(j != NULL, "GET /doctor: not JSON: %.300s", body);
    if (j) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "schema_version");
        CHECK(cJSON_IsNumber(v) && v->valueint == 1);
        CHECK(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(j, "models")));
        CHECK(cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(j, "ok")));
        CHECK(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(j, "cpu")));
    }
    cJSON_Delete(j);
    stop_server(&s);
}

/* the Chromium the web test drives: $DSPARK_CHROMIUM, else chromium on PATH */
static int chromium_ready(void) {
    const char *c = getenv("DSPARK_CHROMIUM");
    if (c && *c) {
        CHECK_MSG(access(c, X_OK) == 0, "DSPARK_CHROMIUM=%s is not an executable", c);
        return access(c, X_OK) == 0;
    }
    int found = on_path("chromium");
    CHECK_MSG(found, "chromium not found on PATH: the web interface test drives headless Chromium "
                     "(apt-get install chromium; scripts/install-deps installs it)");
    return found;
}

/* The web interface on the bundled model with its DSpark drafter, in headless
   Chromium: first open, then behind --api-key (the page asks for the key).
   The artifacts stay after the run (the scratch directory does not). */
TEST(server_web) {
    if (!chromium_ready()) return;
    /* reasoning, tool calls and Markdown on the scripted model's known answers */
    scripted_case("web_tools.mjs", THREADS, NULL, NULL);
    if (!clients_ready()) return;
    char art[700], e_art[760];
    snprintf(art, sizeof art, "%s/../../build/test-artifacts/web", test_data_dir());
    char cmd[800];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", art);
    CHECK_EQ_INT(system(cmd), 0);
    char *abs = realpath(art, NULL);
    if (abs) {
        snprintf(art, sizeof art, "%s", abs);
        free(abs);
    }
    snprintf(e_art, sizeof e_art, "DSPARK_ARTIFACTS=%s", art);
    server s;
    const char *args[] = {"-t", "2", "--mode", "dspark", "--max-draft", "7", NULL};
    if (start_server(&s, bundled_dir(), args, NULL) != 0) return;
    const char *env[] = {e_art, NULL};
    int rc = run_node(&s, "web.mjs", env);
    stop_server(&s);
    if (rc != 0) return;
    printf("     web interface screenshots in %s\n", art);
    snprintf(e_art, sizeof e_art, "DSPARK_ARTIFACTS=%s/with-key", art);
    const char *kargs[] = {"-t", "2", "--mode", "dspark", "--max-draft", "7", "--api-key", "sk-web-test",
                           "--no-warmup", NULL};
    if (start_server(&s, bundled_dir(), kargs, NULL) != 0) return;
    const char *kenv[] = {e_art, "DSPARK_API_KEY=sk-web-test", NULL};
    run_node(&s, "web.mjs", kenv);
    stop_server(&s);
}
