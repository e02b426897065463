/* http: see http.h. */
#include "server/http.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "base/util.h"

/* open connections at most (each has a thread); more are refused at accept */
#define HTTP_MAX_CONNECTIONS 256

struct http_server {
    struct MHD_Daemon *d;
    size_t max_body;
    http_handler h;
    void *app;
    int in_flight; /* atomic: see http_in_flight */
};

/* per-request state, kept in *con_cls between access-handler calls */
typedef struct {
    strbuf body;
    int too_large;
    int background; /* its reply is a background stream: no longer in flight */
    http_server *srv;
} req_state;

typedef struct {
    http_stream st;
    strbuf pend;
    size_t off;
    int ended;
} stream_state;

static void add_common_headers(struct MHD_Response *resp) {
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
    MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                            "Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta");
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    MHD_add_response_header(resp, "Server", "dspark");
}

const char *http_header(const http_req *r, const char *name) {
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

static void queue(struct MHD_Connection *c, int status, struct MHD_Response *resp) {
    add_common_headers(resp);
    MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
}

void http_reply(const http_req *r, int status, const char *content_type, const char *body, size_t len) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (content_type) MHD_add_response_header(resp, "Content-Type", content_type);
    queue(r->conn, status, resp);
}

void http_reply_static(const http_req *r, int status, const char *content_type, const void *body, size_t len,
                       const char *const *headers) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_PERSISTENT);
    if (content_type) MHD_add_response_header(resp, "Content-Type", content_type);
    for (int i = 0; headers && headers[i] && headers[i + 1]; i += 2)
        MHD_add_response_header(resp, headers[i], headers[i + 1]);
    queue(r->conn, status, resp);
}

void http_reply_json(const http_req *r, int status, const char *json) {
    http_reply(r, status, "application/json", json, strlen(json));
}

int http_fd_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return 1;
    return 0;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    stream_state *s = cls;
    (void)pos;
    while (s->off == s->pend.n) {
        sb_clear(&s->pend);
        s->off = 0;
        if (s->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        int rc = s->st.fill(s->st.ctx, &s->pend);
        if (rc < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (rc == 0) s->ended = 1;
    }
    size_t k = s->pend.n - s->off;
    if (k > max) k = max;
    memcpy(buf, s->pend.s + s->off, k);
    s->off += k;
    return (ssize_t)k;
}

static void stream_free(void *cls) {
    stream_state *s = cls;
    if (s->st.close) s->st.close(s->st.ctx, !s->ended || s->off != s->pend.n);
    sb_free(&s->pend);
    free(s);
}

void http_reply_stream(const http_req *r, int status, const char *content_type, const http_stream *st) {
    req_state *rs = r->state;
    if (st->background && rs && !rs->background) {
        rs->background = 1;
        __atomic_sub_fetch(&rs->srv->in_flight, 1, __ATOMIC_SEQ_CST);
    }
    stream_state *s = xcalloc(1, sizeof *s);
    s->st = *st;
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, s, stream_free);
    MHD_add_response_header(resp, "Content-Type", content_type ? content_type : "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    queue(r->conn, status, resp);
}

static void normalise_path(const char *url, char *path, size_t n) {
    const char *q = strchr(url, '?');
    size_t len = q ? (size_t)(q - url) : strlen(url);
    if (len >= n) len = n - 1;
    memcpy(path, url, len);
    path[len] = 0;
    while (len > 1 && path[len - 1] == '/') path[--len] = 0;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                 const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    http_server *srv = cls;
    (void)version;
    req_state *rs = *con_cls;
    if (!rs) {
        rs = xcalloc(1, sizeof *rs);
        rs->srv = srv;
        __atomic_add_fetch(&srv->in_flight, 1, __ATOMIC_SEQ_CST); /* on_completed takes it back */
        *con_cls = rs;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > srv->max_body) rs->too_large = 1;
        if (!rs->too_large) return MHD_YES;
    }
    if (*upload_size) {
        if (!rs->too_large && rs->body.n + *upload_size > srv->max_body) rs->too_large = 1;
        if (!rs->too_large) sb_append(&rs->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    char path[1024];
    normalise_path(url, path, sizeof path);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    http_req r = {.method = method, .path = path, .body = sb_str(&rs->body),
                  .body_len = rs->body.n, .conn = c, .fd = ci ? ci->connect_fd : -1, .state = rs};
    if (rs->too_large) {
        char msg[256];
        snprintf(msg, sizeof msg,
                 "{\"error\":{\"message\":\"request body is larger than the %zu-byte limit\","
                 "\"type\":\"invalid_request_error\",\"code\":413}}",
                 srv->max_body);
        struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(msg), msg, MHD_RESPMEM_MUST_COPY);
        MHD_add_response_header(resp, "Content-Type", "application/json");
        MHD_add_response_header(resp, "Connection", "close");
        queue(c, 413, resp);
        return MHD_YES;
    }
    if (!strcmp(method, "OPTIONS")) {
        http_reply(&r, 204, NULL, "", 0);
        return MHD_YES;
    }
    srv->h(srv->app, &r);
    return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)c;
    (void)toe;
    req_state *rs = *con_cls;
    if (!rs) return;
    if (!rs->background) __atomic_sub_fetch(&rs->srv->in_flight, 1, __ATOMIC_SEQ_CST);
    sb_free(&rs->body);
    free(rs);
    *con_cls = NULL;
}

http_server *http_start(const char *host, int port, size_t max_body, http_handler h, void *app, char *err,
                        size_t errlen) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int g = getaddrinfo(host, ps, &hints, &ai);
    if (g != 0) {
        ds_err(err, errlen, "cannot resolve host \"%s\": %s", host, gai_strerror(g));
        return NULL;
    }
    http_server *s = xcalloc(1, sizeof *s);
    s->max_body = max_body;
    s->h = h;
    s->app = app;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    s->d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, on_access, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned)600, MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_MAX_CONNECTIONS,
                            MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->d) {
        ds_err(err, errlen, "cannot listen on %s:%d (address in use, or not allowed)", host, port);
        free(s);
        return NULL;
    }
    return s;
}

int http_in_flight(const http_server *s) { return s ? __atomic_load_n(&s->in_flight, __ATOMIC_SEQ_CST) : 0; }

void http_stop(http_server *s) {
    if (!s) return;
    MHD_stop_daemon(s->d);
    free(s);
}
