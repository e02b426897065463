/* cli_claude: `dspark claude`: starts Claude Code against a running dspark
 * server. It reads GET {url}/health through a small HTTP/1.1 client over a
 * plain TCP socket (3 s for the whole exchange; then GET /v1/models to check
 * the key, as /health needs none), builds the child's
 * environment from the answer (base URL, token, the served model under every
 * alias, output and compaction limits, no telemetry, other providers' and
 * keys' variables removed), then prints that environment as shell lines
 * (--print-env) or replaces this process with `claude`. Only the child is
 * configured: nothing is written to disk and this shell is left alone. */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli/cli.h"
#include "base/strbuf.h"
#include "base/util.h"

extern char **environ;

const char CLAUDE_HELP[] =
    "usage: dspark claude [--url URL] [--api-key KEY] [--print-env] [-- CLAUDE_ARGS...]\n"
    "Starts Claude Code (the `claude` command) against a running `dspark serve`. Only\n"
    "the started process is configured: this shell and ~/.claude are left alone.\n"
    "      --url URL      the server (default $DSPARK_URL, else http://127.0.0.1:8080);\n"
    "                     plain http:// only\n"
    "      --api-key KEY  the server's key (the one given to dspark serve --api-key)\n"
    "      --print-env    print the settings as `export`/`unset` lines and exit, e.g.\n"
    "                     eval \"$(dspark claude --print-env)\" configures this shell\n"
    "  -- ARGS...         passed to claude unchanged, e.g. -- -p 'say hi'\n"
    "It asks GET URL/health (3 s timeout) for the model, mode, context window and\n"
    "output limit, checks the key on GET URL/v1/models, then runs claude\n"
    "($DSPARK_CLAUDE_BIN when set) with ANTHROPIC_BASE_URL=URL, ANTHROPIC_AUTH_TOKEN\n"
    "(the key, or \"dspark\"), the served model as ANTHROPIC_MODEL and for the\n"
    "opus/sonnet/haiku aliases, CLAUDE_CODE_MAX_OUTPUT_TOKENS,\n"
    "CLAUDE_CODE_AUTO_COMPACT_WINDOW (0.8 x the window, for windows of 100000 tokens\n"
    "or more), telemetry, auto-update and other non-essential traffic off, and\n"
    "ANTHROPIC_API_KEY and CLAUDE_CODE_USE_* removed.\n"
    "Install Claude Code with: npm install -g @anthropic-ai/claude-code\n"
    "examples:\n"
    "  dspark serve --port 8080 &\n"
    "  dspark claude\n"
    "  dspark claude -- -p 'explain this repository'\n";

#define DEFAULT_URL "http://127.0.0.1:8080"
#define PROBE_TIMEOUT_S 3.0
#define MAX_ANSWER (1 << 20)
#define INSTALL_HINT "install it with: npm install -g @anthropic-ai/claude-code (or set DSPARK_CLAUDE_BIN to its path)"

/* Variables removed from the child's environment: a key that would be sent
   instead of the token, and the switches to other providers. */
static const char *const REMOVED[] = {
    "ANTHROPIC_API_KEY",       "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_FOUNDRY",
    "CLAUDE_CODE_USE_MANTLE",  "CLAUDE_CODE_USE_VERTEX",  "CLAUDE_CODE_USE_ANTHROPIC_AWS",
};
#define N_REMOVED (sizeof REMOVED / sizeof REMOVED[0])

/* ---- URL ---------------------------------------------------------------- */

typedef struct {
    char host[256];   /* without the brackets of an IPv6 literal */
    char port[8];
    char hostport[300]; /* for the Host header */
    char prefix[1024];  /* path before /health, no trailing slash ("" for none) */
} http_url;

static int url_parse(const char *url, http_url *u, char *err, size_t n) {
    memset(u, 0, sizeof *u);
    if (!strncasecmp(url, "https://", 8))
        return ds_err(err, n,
                      "https:// URLs are not supported: dspark serve speaks plain HTTP (use http://HOST:PORT), "
                      "got \"%s\"",
                      url);
    if (strncasecmp(url, "http://", 7))
        return ds_err(err, n, "--url expects http://HOST[:PORT][/PATH], got \"%s\"", url);
    const char *a = url + 7, *end = a + strcspn(a, "/?#");
    if (*end == '?' || *end == '#' || (*end == '/' && end[strcspn(end, "?#")]))
        return ds_err(err, n, "--url must not carry a query or fragment, got \"%s\"", url);
    if (memchr(a, '@', (size_t)(end - a)))
        return ds_err(err, n, "--url must not carry a user name or password, got \"%s\"", url);
    const char *hs = a, *he, *ps = NULL;
    if (*a == '[') {
        hs = a + 1;
        he = memchr(hs, ']', (size_t)(end - hs));
        if (!he) return ds_err(err, n, "--url has an unclosed [ in \"%s\"", url);
        if (he + 1 < end) {
            if (he[1] != ':') return ds_err(err, n, "--url has a bad host in \"%s\"", url);
            ps = he + 2;
        }
    } else {
        he = memchr(a, ':', (size_t)(end - a));
        if (he) ps = he + 1;
        else he = end;
    }
    size_t hl = (size_t)(he - hs);
    if (!hl || hl >= sizeof u->host) return ds_err(err, n, "--url has no usable host in \"%s\"", url);
    memcpy(u->host, hs, hl);
    if (ps) {
        size_t pl = (size_t)(end - ps);
        long p = 0;
        for (size_t i = 0; i < pl; i++) {
            if (ps[i] < '0' || ps[i] > '9' || p > 65535) {
                p = -1;
                break;
            }
            p = p * 10 + (ps[i] - '0');
        }
        if (!pl || p < 1 || p > 65535) return ds_err(err, n, "--url has a bad port in \"%s\"", url);
        snprintf(u->port, sizeof u->port, "%ld", p);
    } else {
        snprintf(u->port, sizeof u->port, "80");
    }
    snprintf(u->hostport, sizeof u->hostport, "%s%s%s:%s", *a == '[' ? "[" : "", u->host, *a == '[' ? "]" : "",
             u->port);
    size_t pl = strlen(end);
    while (pl && end[pl - 1] == '/') pl--;
    if (pl >= sizeof u->prefix) return ds_err(err, n, "--url path too long");
    memcpy(u->prefix, end, pl);
    return 0;
}

/* ---- a small HTTP/1.1 GET ------------------------------------------------- */

enum { PROBE_OK = 0, PROBE_UNREACHABLE = -1, PROBE_FAILED = -2 };

static int remaining_ms(double deadline) {
    double r = deadline - ds_now();
    return r <= 0 ? 0 : (int)(r * 1000) + 1;
}

/* Waits for ev on fd until the deadline: 1 ready, 0 timed out, -1 error. */
static int wait_fd(int fd, short ev, double deadline) {
    for (;;) {
        int ms = remaining_ms(deadline);
        if (!ms) return 0;
        struct pollfd p = {.fd = fd, .events = ev};
        int r = poll(&p, 1, ms);
        if (r > 0) return 1;
        if (r == 0) continue; /* re-check the clock */
        if (errno != EINTR) return -1;
    }
}

static int connect_any(const http_url *u, double deadline, char *err, size_t n) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(u->host, u->port, &hints, &res);
    if (rc) {
        ds_err(err, n, "cannot resolve %s: %s", u->host, gai_strerror(rc));
        return -1;
    }
    int fd = -1;
    ds_err(err, n, "no address for %s", u->host);
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        int s = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (s < 0) {
            ds_err(err, n, "socket: %s", strerror(errno));
            continue;
        }
        if (connect(s, ai->ai_addr, ai->ai_addrlen) == 0) {
            fd = s;
            break;
        }
        if (errno == EINPROGRESS) {
            int w = wait_fd(s, POLLOUT, deadline);
            int so = 0;
            socklen_t sl = sizeof so;
            if (w == 1 && getsockopt(s, SOL_SOCKET, SO_ERROR, &so, &sl) == 0 && so == 0) {
                fd = s;
                break;
            }
            if (w == 0) ds_err(err, n, "no connection within %.0f s", PROBE_TIMEOUT_S);
            else ds_err(err, n, "%s", strerror(so ? so : errno));
        } else {
            ds_err(err, n, "%s", strerror(errno));
        }
        close(s);
    }
    freeaddrinfo(res);
    return fd;
}

/* Case-insensitive search for header name (with the colon) at a line start
   inside the header block; returns the value start or NULL. */
static const char *find_header(const char *head, size_t hlen, const char *name) {
    size_t nl = strlen(name);
    for (const char *p = head; p && p < head + hlen;) {
        const char *eol = memchr(p, '\n', (size_t)(head + hlen - p));
        if (!eol) break;
        if ((size_t)(eol - p) > nl && !strncasecmp(p, name, nl)) {
            p += nl;
            while (*p == ' ' || *p == '\t') p++;
            return p;
        }
        p = eol + 1;
    }
    return NULL;
}

/* Decodes a chunked body in place; returns its length or -1 when incomplete
   or malformed. */
static long dechunk(char *b, size_t n) {
    size_t in = 0, out = 0;
    for (;;) {
        char *e;
        if (in >= n) return -1;
        errno = 0;
        unsigned long len = strtoul(b + in, &e, 16);
        if (e == b + in || errno) return -1;
        char *eol = memchr(e, '\n', n - (size_t)(e - b));
        if (!eol) return -1;
        in = (size_t)(eol - b) + 1;
        if (len == 0) return (long)out;
        if (len > n - in) return -1;
        memmove(b + out, b + in, len);
        out += len;
        in += len;
        if (in < n && b[in] == '\r') in++;
        if (in < n && b[in] == '\n') in++;
    }
}

/* GET path; *status and *body (malloc'd, NUL-terminated) on PROBE_OK. */
static int http_get(const http_url *u, const char *path, const char *bearer, int *status, char **body, char *err,
                    size_t n) {
    double deadline = ds_now() + PROBE_TIMEOUT_S;
    int fd = connect_any(u, deadline, err, n);
    if (fd < 0) return PROBE_UNREACHABLE;
    strbuf req = {0}, ans = {0};
    sb_printf(&req, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: dspark-claude\r\nAccept: application/json\r\n"
                    "Connection: close\r\n",
              path, u->hostport);
    if (bearer) sb_printf(&req, "Authorization: Bearer %s\r\n", bearer);
    sb_puts(&req, "\r\n");
    int rc = PROBE_FAILED;
    size_t sent = 0;
    while (sent < req.n) {
        int w = wait_fd(fd, POLLOUT, deadline);
        if (w <= 0) {
            if (w == 0) ds_err(err, n, "no answer within %.0f s", PROBE_TIMEOUT_S);
            else ds_err(err, n, "%s", strerror(errno));
            goto done;
        }
        ssize_t k = send(fd, req.s + sent, req.n - sent, MSG_NOSIGNAL);
        if (k < 0 && errno != EINTR && errno != EAGAIN) {
            ds_err(err, n, "sending the request: %s", strerror(errno));
            goto done;
        }
        if (k > 0) sent += (size_t)k;
    }
    long clen = -1;
    size_t head_len = 0;
    char buf[4096];
    for (;;) {
        if (head_len && clen >= 0 && ans.n >= head_len + (size_t)clen) break;
        int w = wait_fd(fd, POLLIN, deadline);
        if (w <= 0) {
            if (w == 0) ds_err(err, n, "no answer within %.0f s", PROBE_TIMEOUT_S);
            else ds_err(err, n, "%s", strerror(errno));
            goto done;
        }
        ssize_t k = recv(fd, buf, sizeof buf, 0);
        if (k < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            if (ans.n && errno == ECONNRESET) break; /* answered, then reset: keep what came */
            ds_err(err, n, "reading the answer: %s", strerror(errno));
            goto done;
        }
        if (k == 0) break;
        sb_append(&ans, buf, (size_t)k);
        if (ans.n > MAX_ANSWER) {
            ds_err(err, n, "the answer is larger than %d bytes", MAX_ANSWER);
            goto done;
        }
        if (!head_len) {
            char *e = strstr(ans.s, "\r\n\r\n");
            if (e) {
                head_len = (size_t)(e - ans.s) + 4;
                const char *cl = find_header(ans.s, head_len, "content-length:");
                const char *te = find_header(ans.s, head_len, "transfer-encoding:");
                if (cl && !(te && !strncasecmp(te, "chunked", 7))) clen = strtol(cl, NULL, 10);
            }
        }
    }
    int major = 0, minor = 0, code = 0;
    if (sscanf(sb_str(&ans), "HTTP/%d.%d %d", &major, &minor, &code) != 3 || code < 100 || code > 999) {
        ds_err(err, n, "the answer is not HTTP");
        goto done;
    }
    if (!head_len) {
        ds_err(err, n, "the answer ended inside its headers");
        goto done;
    }
    size_t blen = ans.n - head_len;
    char *b = ans.s + head_len;
    const char *te = find_header(ans.s, head_len, "transfer-encoding:");
    if (te && !strncasecmp(te, "chunked", 7)) {
        long d = dechunk(b, blen);
        if (d < 0) {
            ds_err(err, n, "the answer's chunked body is incomplete");
            goto done;
        }
        blen = (size_t)d;
    } else if (clen >= 0) {
        if (blen < (size_t)clen) {
            ds_err(err, n, "the answer ended after %zu of %ld body bytes", blen, clen);
            goto done;
        }
        blen = (size_t)clen;
    }
    *body = xmalloc(blen + 1);
    memcpy(*body, b, blen);
    (*body)[blen] = 0;
    *status = code;
    rc = PROBE_OK;
done:
    close(fd);
    sb_free(&req);
    sb_free(&ans);
    return rc;
}

/* ---- the child's environment -------------------------------------------- */

typedef struct {
    char key[64];
    char *val;
} setting;

typedef struct {
    setting s[32];
    int n;
} settings;

static void set(settings *st, const char *key, const char *fmt, ...) DS_PRINTF(3, 4);
static void set(settings *st, const char *key, const char *fmt, ...) {
    if (st->n == (int)(sizeof st->s / sizeof st->s[0])) cli_die("claude: too many settings");
    setting *x = &st->s[st->n++];
    snprintf(x->key, sizeof x->key, "%s", key);
    va_list ap;
    va_start(ap, fmt);
    char tmp[1];
    int len = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    char *v = xmalloc((size_t)len + 1);
    va_start(ap, fmt);
    vsnprintf(v, (size_t)len + 1, fmt, ap);
    va_end(ap);
    x->val = v;
}

static int cmp_setting(const void *a, const void *b) {
    return strcmp(((const setting *)a)->key, ((const setting *)b)->key);
}

static int is_removed(const char *key, size_t klen) {
    for (size_t i = 0; i < N_REMOVED; i++)
        if (strlen(REMOVED[i]) == klen && !strncmp(REMOVED[i], key, klen)) return 1;
    return 0;
}

static int is_set(const settings *st, const char *key, size_t klen) {
    for (int i = 0; i < st->n; i++)
        if (strlen(st->s[i].key) == klen && !strncmp(st->s[i].key, key, klen)) return 1;
    return 0;
}

/* The current environment without the removed and the replaced variables,
   then the settings. */
static char **child_env(const settings *st) {
    size_t n = 0;
    for (char **e = environ; e && *e; e++) n++;
    char **env = xmalloc(sizeof(char *) * (n + (size_t)st->n + 1));
    size_t k = 0;
    for (char **e = environ; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        size_t kl = eq ? (size_t)(eq - *e) : strlen(*e);
        if (is_removed(*e, kl) || is_set(st, *e, kl)) continue;
        env[k++] = *e;
    }
    for (int i = 0; i < st->n; i++) {
        strbuf b = {0};
        sb_printf(&b, "%s=%s", st->s[i].key, st->s[i].val);
        env[k++] = sb_take(&b);
    }
    env[k] = NULL;
    return env;
}

static void print_quoted(const char *v) {
    putchar('\'');
    for (; *v; v++) {
        if (*v == '\'') fputs("'\\''", stdout);
        else putchar(*v);
    }
    putchar('\'');
}

static void print_env(const settings *st) {
    for (int i = 0; i < st->n; i++) {
        const char *cur = getenv(st->s[i].key);
        if (cur && !strcmp(cur, st->s[i].val)) continue;
        printf("export %s=", st->s[i].key);
        print_quoted(st->s[i].val);
        putchar('\n');
    }
    const char *gone[N_REMOVED];
    size_t ng = 0;
    for (size_t i = 0; i < N_REMOVED; i++)
        if (getenv(REMOVED[i])) gone[ng++] = REMOVED[i];
    for (size_t i = 0; i < ng; i++) /* a few names: insertion sort */
        for (size_t j = i; j > 0 && strcmp(gone[j - 1], gone[j]) > 0; j--) {
            const char *t = gone[j];
            gone[j] = gone[j - 1];
            gone[j - 1] = t;
        }
    for (size_t i = 0; i < ng; i++) printf("unset %s\n", gone[i]);
    fflush(stdout);
}

/* The program to start: a path (when name has a slash) or the first
   executable regular file named name on PATH. */
static int find_program(const char *name, char *out, size_t n) {
    struct stat sb;
    if (strchr(name, '/')) {
        snprintf(out, n, "%s", name);
        return stat(out, &sb) == 0 && S_ISREG(sb.st_mode) && access(out, X_OK) == 0;
    }
    const char *path = getenv("PATH");
    if (!path) path = "/usr/local/bin:/usr/bin:/bin";
    for (const char *p = path;;) {
        size_t dl = strcspn(p, ":");
        if (dl) snprintf(out, n, "%.*s/%s", (int)dl, p, name);
        else snprintf(out, n, "./%s", name);
        if (stat(out, &sb) == 0 && S_ISREG(sb.st_mode) && access(out, X_OK) == 0) return 1;
        if (!p[dl]) break;
        p += dl + 1;
    }
    return 0;
}

/* ---- the command ---------------------------------------------------------- */

static void key_refused(const char *url, const char *key) __attribute__((noreturn));
static void key_refused(const char *url, const char *key) {
    if (key) cli_die("claude: the server at %s refused the API key given with --api-key (HTTP 401)", url);
    cli_die("claude: the server at %s requires an API key (HTTP 401): pass the key given to dspark serve "
            "with --api-key KEY",
            url);
}

int cmd_claude(const opts *o) {
    if (o->text)
        cli_die("claude: unexpected argument \"%s\": pass Claude Code's arguments after --, "
                "e.g. dspark claude -- -p 'say hi'",
                o->text);
    const char *env_url = getenv("DSPARK_URL");
    const char *raw = o->url ? o->url : env_url && *env_url ? env_url : DEFAULT_URL;
    char err[512];
    http_url u;
    if (url_parse(raw, &u, err, sizeof err) != 0) cli_die("claude: %s", err);
    /* the base URL without trailing slashes: Claude Code appends /v1/... */
    size_t ul = strlen(raw);
    while (ul > 7 && raw[ul - 1] == '/') ul--;
    char *url = xmalloc(ul + 1);
    memcpy(url, raw, ul);
    url[ul] = 0;

    char path[1100];
    snprintf(path, sizeof path, "%s/health", u.prefix);
    int status = 0;
    char *body = NULL;
    int rc = http_get(&u, path, o->api_key, &status, &body, err, sizeof err);
    if (rc == PROBE_UNREACHABLE)
        cli_die("claude: no dspark server is answering at %s (%s).\n"
                "Start one first, e.g.:\n"
                "  dspark serve --port %s%s\n"
                "then run: dspark claude --url %s",
                url, err, u.port, o->api_key ? " --api-key KEY" : "", url);
    if (rc != PROBE_OK) cli_die("claude: the server at %s did not answer GET %s properly: %s", url, path, err);
    if (status == 401) key_refused(url, o->api_key);
    if (status != 200) cli_die("claude: the server at %s returned HTTP %d for GET %s", url, status, path);
    cJSON *h = cJSON_Parse(body);
    if (!cJSON_IsObject(h))
        cli_die("claude: the server at %s answered GET %s with something other than a JSON object: is it a dspark "
                "server?",
                url, path);
    /* dspark serve answers /health without a key: check the key on a route
       that needs it, so a missing or wrong one is reported here and not as
       a failed request inside Claude Code (other answers are left to it) */
    int st2 = 0;
    char *body2 = NULL;
    snprintf(path, sizeof path, "%s/v1/models", u.prefix);
    if (http_get(&u, path, o->api_key, &st2, &body2, err, sizeof err) == PROBE_OK && st2 == 401)
        key_refused(url, o->api_key);
    free(body2);
    const cJSON *jm = cJSON_GetObjectItemCaseSensitive(h, "model");
    const cJSON *jmode = cJSON_GetObjectItemCaseSensitive(h, "mode");
    const cJSON *jctx = cJSON_GetObjectItemCaseSensitive(h, "context_window");
    const cJSON *jmax = cJSON_GetObjectItemCaseSensitive(h, "max_output_tokens");
    const char *served = cJSON_IsString(jm) && *jm->valuestring ? jm->valuestring : "local";
    const char *mode = cJSON_IsString(jmode) && *jmode->valuestring ? jmode->valuestring : NULL;
    long long ctx = cJSON_IsNumber(jctx) && jctx->valuedouble >= 1 && jctx->valuedouble < 1e15
                        ? (long long)jctx->valuedouble : 0;
    long long max_out = cJSON_IsNumber(jmax) && jmax->valuedouble >= 1 && jmax->valuedouble < 1e15
                            ? (long long)jmax->valuedouble : 0;

    settings st = {.n = 0};
    set(&st, "ANTHROPIC_BASE_URL", "%s", url);
    set(&st, "ANTHROPIC_AUTH_TOKEN", "%s", o->api_key ? o->api_key : "dspark");
    set(&st, "ANTHROPIC_MODEL", "%s", served);
    set(&st, "ANTHROPIC_SMALL_FAST_MODEL", "%s", served);
    const char *aliases[] = {"OPUS", "SONNET", "HAIKU"};
    for (int i = 0; i < 3; i++) {
        char k[64];
        snprintf(k, sizeof k, "ANTHROPIC_DEFAULT_%s_MODEL", aliases[i]);
        set(&st, k, "%s", served);
        snprintf(k, sizeof k, "ANTHROPIC_DEFAULT_%s_MODEL_NAME", aliases[i]);
        set(&st, k, "%s (dspark)", served);
        snprintf(k, sizeof k, "ANTHROPIC_DEFAULT_%s_MODEL_DESCRIPTION", aliases[i]);
        set(&st, k, "Local %s via dspark", mode ? mode : "model");
    }
    if (max_out) set(&st, "CLAUDE_CODE_MAX_OUTPUT_TOKENS", "%lld", max_out);
    /* Claude Code clamps smaller windows: leave its default for them */
    if (ctx >= 100000) set(&st, "CLAUDE_CODE_AUTO_COMPACT_WINDOW", "%lld", ctx * 4 / 5);
    set(&st, "DISABLE_TELEMETRY", "1");
    set(&st, "DISABLE_AUTOUPDATER", "1");
    set(&st, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
    qsort(st.s, (size_t)st.n, sizeof st.s[0], cmp_setting);

    if (o->print_env) {
        print_env(&st);
        for (int i = 0; i < st.n; i++) free(st.s[i].val);
        cJSON_Delete(h);
        free(body);
        free(url);
        return 0;
    }

    const char *bin_env = getenv("DSPARK_CLAUDE_BIN");
    const char *bin = bin_env && *bin_env ? bin_env : "claude";
    char prog[4096];
    if (!find_program(bin, prog, sizeof prog)) {
        if (strchr(bin, '/')) cli_die("claude: DSPARK_CLAUDE_BIN=%s is not an executable file; " INSTALL_HINT, bin);
        cli_die("claude: Claude Code (`%s`) was not found on PATH; " INSTALL_HINT, bin);
    }
    char **argv = xmalloc(sizeof(char *) * ((size_t)o->n_rest + 2));
    argv[0] = (char *)bin;
    for (int i = 0; i < o->n_rest; i++) argv[i + 1] = o->rest[i];
    argv[o->n_rest + 1] = NULL;
    char **env = child_env(&st);
    fprintf(stderr, "claude code -> %s \xc2\xb7 model %s%s%s%s \xc2\xb7 this session only\n", url, served,
            mode ? " (" : "", mode ? mode : "", mode ? ")" : "");
    fflush(stderr);
    fflush(stdout);
    execve(prog, argv, env);
    int e = errno;
    if (e == ENOEXEC) cli_die("claude: cannot start %s: not a program (a script needs a #! line)", prog);
    cli_die("claude: cannot start %s: %s", prog, strerror(e));
}
