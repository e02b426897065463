/* http: a small HTTP/1.1 server layer over libmicrohttpd, one thread per
 * connection (so a handler may block while the scheduler works). It reads
 * request bodies up to a limit (413 beyond it, before reading the rest),
 * normalises the path (query string and trailing slash removed), answers
 * OPTIONS (204) itself, adds CORS headers to every reply and hands each
 * complete request to one handler.
 *
 * A handler answers with http_reply (a whole body) or http_reply_stream: a
 * producer whose fill function the connection thread calls for more bytes;
 * it may block (in short slices, checking http_fd_gone to notice a client
 * that went away) and returns 1 while more will follow, 0 at the end, -1 to
 * abort the connection. Its close function runs once when the reply is
 * finished or the connection dies (client_gone says which). */
#ifndef DS_HTTP_H
#define DS_HTTP_H

#include <stddef.h>

#include "base/strbuf.h"

typedef struct http_server http_server;

typedef struct {
    const char *method;
    const char *path; /* without query string and trailing slash */
    const char *body;  /* NUL-terminated; "" when none */
    size_t body_len;
    void *conn;        /* the libmicrohttpd connection */
    int fd;            /* its socket */
    void *state;       /* the layer's own per-request state */
} http_req;

/* A request header (case-insensitive name) or NULL. */
const char *http_header(const http_req *r, const char *name);
void http_reply(const http_req *r, int status, const char *content_type, const char *body, size_t len);
void http_reply_json(const http_req *r, int status, const char *json);
/* http_reply of a body that outlives the reply (not copied), with extra
 * headers: name, value, ..., NULL. */
void http_reply_static(const http_req *r, int status, const char *content_type, const void *body, size_t len,
                       const char *const *headers);

typedef struct {
    int (*fill)(void *ctx, strbuf *out);
    void (*close)(void *ctx, int client_gone);
    void *ctx;
    int background; /* a feed with no end of its own (/events): not counted by http_in_flight */
} http_stream;
/* Starts a chunked reply (text/event-stream when content_type is NULL). */
void http_reply_stream(const http_req *r, int status, const char *content_type, const http_stream *st);

/* 1 when the peer has closed the connection (never blocks). */
int http_fd_gone(int fd);

typedef void (*http_handler)(void *app, const http_req *r);
/* host: an IPv4/IPv6 literal or a name (resolved); max_body: the largest
 * request body accepted. Returns NULL with err filled on failure. */
http_server *http_start(const char *host, int port, size_t max_body, http_handler h, void *app, char *err,
                        size_t errlen);
/* Requests in flight: from their headers' arrival until their reply was
 * sent or their connection died, background streams aside. A shutdown
 * drain waits for this to reach 0. */
int http_in_flight(const http_server *s);
/* Closes every connection, joins their threads and frees s. */
void http_stop(http_server *s);

#endif
