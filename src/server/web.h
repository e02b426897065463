/* web: the web interface's files (web/ in the source tree), embedded in the
 * binary at build time by scripts/embed-web, so GET / needs no files and no
 * network at run time. */
#ifndef DS_WEB_H
#define DS_WEB_H

#include <stddef.h>

typedef struct {
    const char *path; /* "/" for index.html, else "/NAME" */
    const char *type; /* Content-Type */
    const unsigned char *data;
    size_t len;
} web_asset;

/* ends with an entry whose path is NULL */
extern const web_asset WEB_ASSETS[];

#endif
