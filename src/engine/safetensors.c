/* safetensors: owns the parsing and validation of .safetensors headers,
 * the read-only mappings of the files, and sharded sets described by
 * model.safetensors.index.json. Tensors are plain descriptions whose data
 * pointers point into the mapping; nothing is copied. Validation is strict
 * because every later stage trusts shape * dtype_size == bytes and that
 * the bytes lie inside the file: a bad header must become an error naming
 * the file and the tensor, never an out-of-bounds read. */
#include "engine/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/json.h"
#include "base/util.h"

/* JSON numbers are doubles: integers above 2^53 are not exact, and no
 * real file has a dimension or offset that large. */
#define ST_MAX_INT ((int64_t)1 << 53)

struct st_file {
    char *name;           /* as given: used in messages */
    const char *base;     /* base name (points into name), stored in tensor.file */
    void *map;            /* non-NULL when st_open mapped the file */
    size_t map_size;
    int in_memory;        /* map is our copy of the file (ST_LOAD_READ), not the file */
    int n;
    tensor *t;            /* [n], header order */
    const tensor **sorted; /* [n], by name, for st_find */
};

/* tensors made from the set's (st_set_derive), in chunks so that their
   addresses never move */
#define DERIVED_CHUNK 64
typedef struct derived {
    struct derived *next;
    int n;
    tensor t[DERIVED_CHUNK];
} derived;

struct st_set {
    int n_shards;
    st_file **shards;
    int n;
    const tensor **all;    /* [n], shard by shard */
    const tensor **sorted; /* [n], by name */
    derived *made;
    void *owner;           /* st_set_wrap's: released at close */
    void (*release)(void *owner);
};

static int cmp_tensor_name(const void *a, const void *b) {
    const tensor *x = *(const tensor *const *)a, *y = *(const tensor *const *)b;
    return strcmp(x->name, y->name);
}

static int cmp_key_tensor(const void *key, const void *elem) {
    return strcmp((const char *)key, (*(const tensor *const *)elem)->name);
}

static const tensor *find_sorted(const tensor *const *sorted, int n, const char *name) {
    if (!name || n <= 0) return NULL;
    const tensor *const *p = bsearch(name, sorted, (size_t)n, sizeof *sorted, cmp_key_tensor);
    return p ? *p : NULL;
}

typedef struct {
    uint64_t begin, end;
    int idx;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->idx - y->idx;
}

static int is_json_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Fills one tensor from its header entry. Names the tensor in errors. */
static int parse_entry(tensor *t, uint64_t *begin, const cJSON *e, const char *ctx, uint64_t data_size, char *err,
                       size_t errlen) {
    const char *nm = t->name;
    if (!cJSON_IsObject(e)) return ds_err(err, errlen, "%s: tensor \"%s\": entry is not an object", ctx, nm);

    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (!dt) return ds_err(err, errlen, "%s: tensor \"%s\": missing \"dtype\"", ctx, nm);
    if (!cJSON_IsString(dt)) return ds_err(err, errlen, "%s: tensor \"%s\": \"dtype\" must be a string", ctx, nm);
    if (dtype_from_name(dt->valuestring, &t->dtype) != 0)
        return ds_err(err, errlen, "%s: tensor \"%s\": unknown dtype \"%.32s\"", ctx, nm, dt->valuestring);

    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    if (!sh) return ds_err(err, errlen, "%s: tensor \"%s\": missing \"shape\"", ctx, nm);
    if (!cJSON_IsArray(sh))
        return ds_err(err, errlen, "%s: tensor \"%s\": \"shape\" must be a list of non-negative integers", ctx, nm);
    int nd = cJSON_GetArraySize(sh);
    if (nd > TENSOR_MAX_DIMS)
        return ds_err(err, errlen, "%s: tensor \"%s\": shape has %d dimensions (at most %d supported)", ctx, nm, nd,
                      TENSOR_MAX_DIMS);
    /* The overflow check multiplies the non-zero dimensions so that the
     * verdict does not depend on where a zero sits. */
    uint64_t numel = 1, nonzero = 1;
    int i = 0;
    for (const cJSON *d = sh->child; d; d = d->next, i++) {
        if (!json_is_int(d, 0, ST_MAX_INT))
            return ds_err(err, errlen, "%s: tensor \"%s\": \"shape\" must be a list of non-negative integers", ctx,
                          nm);
        uint64_t v = (uint64_t)d->valuedouble;
        t->shape[i] = (int64_t)v;
        if (v == 0) {
            numel = 0;
            continue;
        }
        if (nonzero > (uint64_t)INT64_MAX / v)
            return ds_err(err, errlen, "%s: tensor \"%s\": shape is too large (element count overflows)", ctx, nm);
        nonzero *= v;
        numel *= v;
    }
    t->ndim = nd;
    uint64_t esz = dtype_size(t->dtype);
    if (numel > (uint64_t)INT64_MAX / esz)
        return ds_err(err, errlen, "%s: tensor \"%s\": shape is too large (byte count overflows)", ctx, nm);
    uint64_t need = numel * esz;

    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!off) return ds_err(err, errlen, "%s: tensor \"%s\": missing \"data_offsets\"", ctx, nm);
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || !json_is_int(off->child, 0, ST_MAX_INT) ||
        !json_is_int(off->child->next, 0, ST_MAX_INT))
        return ds_err(err, errlen, "%s: tensor \"%s\": \"data_offsets\" must be two non-negative integers", ctx, nm);
    uint64_t b = (uint64_t)off->child->valuedouble, en = (uint64_t)off->child->next->valuedouble;
    if (b > en)
        return ds_err(err, errlen, "%s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64 "] end before they begin",
                      ctx, nm, b, en);
    if (en > data_size)
        return ds_err(err, errlen,
                      "%s: tensor \"%s\": data_offsets end %" PRIu64 " is beyond the %" PRIu64
                      "-byte data region (file truncated?)",
                      ctx, nm, en, data_size);
    if (en - b != need) {
        char dims[160];
        size_t k = 0;
        dims[0] = 0;
        for (int j = 0; j < nd && k < sizeof dims - 24; j++)
            k += (size_t)snprintf(dims + k, sizeof dims - k, "%s%" PRId64, j ? ", " : "", t->shape[j]);
        return ds_err(err, errlen,
                      "%s: tensor \"%s\": shape [%s] of %s needs %" PRIu64 " bytes but data_offsets span %" PRIu64,
                      ctx, nm, dims, dtype_name(t->dtype), need, en - b);
    }
    t->nbytes = (size_t)need;
    *begin = b;
    return 0;
}

static void file_free_parts(st_file *f) {
    if (!f) return;
    if (f->t)
        for (int i = 0; i < f->n; i++) free((char *)f->t[i].name);
    free(f->t);
    free(f->sorted);
    if (f->map) munmap(f->map, f->map_size);
    free(f->name);
    free(f);
}

/* Parses the image into f (whose name/base are set). ctx names the file. */
static int st_parse(st_file *f, const unsigned char *p, size_t size, const char *ctx, char *err, size_t errlen) {
    if (size < 8)
        return ds_err(err, errlen, "%s: file is %zu bytes, too short for a safetensors header (truncated?)", ctx, size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | p[i];
    if (hlen > ST_MAX_HEADER)
        return ds_err(err, errlen, "%s: header length %" PRIu64 " exceeds the %u-byte limit (not a safetensors file?)",
                      ctx, hlen, (unsigned)ST_MAX_HEADER);
    if (hlen > size - 8)
        return ds_err(err, errlen, "%s: header length %" PRIu64 " exceeds the file size %zu (truncated)", ctx, hlen,
                      size);
    if (hlen == 0) return ds_err(err, errlen, "%s: header is empty", ctx);
    const char *h = (const char *)p + 8;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(h, (size_t)hlen, &end, 0);
    if (!root) {
        size_t at = (end && end >= h && end <= h + hlen) ? (size_t)(end - h) : 0;
        return ds_err(err, errlen, "%s: header is not valid JSON (near byte %zu of the header)", ctx, at);
    }
    /* Writers pad the header with spaces; anything else after the JSON
     * value means the header length or the JSON is wrong. */
    for (const char *q = end ? end : h + hlen; q < h + hlen; q++) {
        if (!is_json_space((unsigned char)*q)) {
            cJSON_Delete(root);
            return ds_err(err, errlen, "%s: unexpected bytes after the JSON header (at byte %zu of the header)", ctx,
                          (size_t)(q - h));
        }
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return ds_err(err, errlen, "%s: header is not a JSON object", ctx);
    }

    uint64_t data_size = (uint64_t)(size - 8 - hlen);
    const unsigned char *data = p + 8 + hlen;
    int n = 0, n_meta = 0;
    for (const cJSON *e = root->child; e; e = e->next) n++;
    f->t = xcalloc((size_t)(n ? n : 1), sizeof(tensor));
    f->n = 0;
    /* each tensor's begin offset, until all are validated */
    uint64_t *begin = xcalloc((size_t)(n ? n : 1), sizeof(uint64_t));
    int rc = 0;
    for (const cJSON *e = root->child; e; e = e->next) {
        const char *key = e->string ? e->string : "";
        if (strcmp(key, "__metadata__") == 0) {
            if (++n_meta > 1) {
                rc = ds_err(err, errlen, "%s: \"__metadata__\" appears twice in the header", ctx);
                break;
            }
            if (!cJSON_IsObject(e)) {
                rc = ds_err(err, errlen, "%s: \"__metadata__\" must be an object of strings", ctx);
                break;
            }
            for (const cJSON *m = e->child; m; m = m->next) {
                if (!cJSON_IsString(m)) {
                    rc = ds_err(err, errlen, "%s: \"__metadata__\" value \"%s\" must be a string", ctx,
                                m->string ? m->string : "");
                    break;
                }
            }
            if (rc) break;
            continue;
        }
        tensor *t = &f->t[f->n];
        t->name = xstrdup(key);
        t->file = f->base;
        f->n++;
        if ((rc = parse_entry(t, &begin[f->n - 1], e, ctx, data_size, err, errlen)) != 0) break;
    }
    cJSON_Delete(root);
    if (rc) {
        free(begin);
        return rc;
    }

    /* duplicate names: cJSON keeps every member of an object */
    f->sorted = xmalloc(sizeof(*f->sorted) * (size_t)(f->n ? f->n : 1));
    for (int i = 0; i < f->n; i++) f->sorted[i] = &f->t[i];
    qsort(f->sorted, (size_t)f->n, sizeof(*f->sorted), cmp_tensor_name);
    for (int i = 1; i < f->n; i++)
        if (strcmp(f->sorted[i - 1]->name, f->sorted[i]->name) == 0) {
            free(begin);
            return ds_err(err, errlen, "%s: tensor \"%s\" appears twice in the header", ctx, f->sorted[i]->name);
        }

    /* overlapping byte ranges; sorted by offset so header order is irrelevant */
    span *sp = xmalloc(sizeof(span) * (size_t)(f->n ? f->n : 1));
    for (int i = 0; i < f->n; i++) {
        sp[i].begin = begin[i];
        sp[i].end = sp[i].begin + f->t[i].nbytes;
        sp[i].idx = i;
    }
    qsort(sp, (size_t)f->n, sizeof(span), cmp_span);
    uint64_t max_end = 0;
    int owner = -1;
    for (int i = 0; i < f->n; i++) {
        if (owner >= 0 && sp[i].begin < max_end) {
            const tensor *a = &f->t[owner], *b = &f->t[sp[i].idx];
            uint64_t ab = begin[owner];
            rc = ds_err(err, errlen,
                        "%s: tensors \"%s\" (bytes %" PRIu64 "..%" PRIu64 ") and \"%s\" (bytes %" PRIu64 "..%" PRIu64
                        ") overlap",
                        ctx, a->name, ab, ab + a->nbytes, b->name, sp[i].begin, sp[i].end);
            break;
        }
        if (owner < 0 || sp[i].end > max_end) {
            max_end = sp[i].end;
            owner = sp[i].idx;
        }
    }
    free(sp);
    if (rc == 0)
        for (int i = 0; i < f->n; i++) f->t[i].data = data + begin[i];
    free(begin);
    return rc;
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

int st_open_mem(st_file **out, const void *data, size_t size, const char *name, char *err, size_t errlen) {
    *out = NULL;
    if (!name) name = "(memory)";
    if (!data && size) return ds_err(err, errlen, "%s: no data", name);
    st_file *f = xcalloc(1, sizeof *f);
    f->name = xstrdup(name);
    f->base = f->name;
    if (st_parse(f, data ? data : "", size, f->name, err, errlen) != 0) {
        file_free_parts(f);
        return -1;
    }
    *out = f;
    return 0;
}

/* Reads the whole file into anonymous memory (huge pages where the kernel
 * gives them). On some machines (VMs in particular) streaming weights from
 * a file mapping is much slower than from anonymous memory. */
static void *read_into_memory(int fd, size_t size, const char *path, char *err, size_t errlen) {
    void *mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        ds_err(err, errlen, "%s: cannot allocate %.1f MiB to load it (try --mmap)", path, (double)size / 1048576.0);
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    madvise(mem, size, MADV_HUGEPAGE);
#endif
    size_t done = 0;
    while (done < size) {
        size_t want = size - done < ((size_t)1 << 30) ? size - done : ((size_t)1 << 30);
        ssize_t r = pread(fd, (char *)mem + done, want, (off_t)done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            ds_err(err, errlen, "%s: read failed at byte %zu: %s", path, done, r < 0 ? strerror(errno) : "unexpected end");
            munmap(mem, size);
            return NULL;
        }
        done += (size_t)r;
    }
    mprotect(mem, size, PROT_READ);
    return mem;
}

int st_open_mode(st_file **out, const char *path, st_load mode, char *err, size_t errlen) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ds_err(err, errlen, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return ds_err(err, errlen, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return ds_err(err, errlen, "%s: not a regular file", path);
    }
    size_t size = (size_t)st.st_size;
    if (size < 8) {
        close(fd);
        return ds_err(err, errlen, "%s: file is %zu bytes, too short for a safetensors header (truncated?)", path,
                      size);
    }
    void *map;
    if (mode == ST_LOAD_READ) {
        map = read_into_memory(fd, size, path, err, errlen);
        close(fd);
        if (!map) return -1;
    } else {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        int e = errno;
        close(fd);
        if (map == MAP_FAILED) return ds_err(err, errlen, "%s: mmap failed: %s", path, strerror(e));
    }

    st_file *f = xcalloc(1, sizeof *f);
    f->name = xstrdup(path);
    f->base = base_name(f->name);
    f->map = map;
    f->map_size = size;
    f->in_memory = mode == ST_LOAD_READ;
    if (st_parse(f, map, size, f->name, err, errlen) != 0) {
        file_free_parts(f);
        return -1;
    }
    *out = f;
    return 0;
}

int st_open(st_file **out, const char *path, char *err, size_t errlen) {
    return st_open_mode(out, path, ST_LOAD_MMAP, err, errlen);
}

void st_close(st_file *f) { file_free_parts(f); }

int st_count(const st_file *f) { return f ? f->n : 0; }

const tensor *st_get(const st_file *f, int i) {
    if (!f || i < 0 || i >= f->n) return NULL;
    return &f->t[i];
}

const tensor *st_find(const st_file *f, const char *name) {
    if (!f) return NULL;
    return find_sorted(f->sorted, f->n, name);
}

/* ---- sets ---- */

typedef struct {
    const char *tensor; /* points into the index's cJSON tree */
    int shard;
} map_entry;

static int cmp_map_entry(const void *a, const void *b) {
    return strcmp(((const map_entry *)a)->tensor, ((const map_entry *)b)->tensor);
}

static int cmp_key_map(const void *key, const void *elem) {
    return strcmp((const char *)key, ((const map_entry *)elem)->tensor);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static int cmp_key_str(const void *key, const void *elem) {
    return strcmp((const char *)key, *(const char *const *)elem);
}

void st_set_close(st_set *s) {
    if (!s) return;
    for (int i = 0; i < s->n_shards; i++) st_close(s->shards[i]);
    free(s->shards);
    free(s->all);
    free(s->sorted);
    while (s->made) {
        derived *d = s->made;
        s->made = d->next;
        free(d);
    }
    if (s->release) s->release(s->owner);
    free(s);
}

const tensor *st_set_derive(st_set *s, const tensor *t) {
    if (!s->made || s->made->n == DERIVED_CHUNK) {
        derived *d = xcalloc(1, sizeof *d);
        d->next = s->made;
        s->made = d;
    }
    s->made->t[s->made->n] = *t;
    return &s->made->t[s->made->n++];
}

int st_set_wrap(st_set **out, const tensor *const *t, int n, void *owner, void (*release)(void *owner),
                const char *ctx, char *err, size_t errlen) {
    st_set *s = xcalloc(1, sizeof *s);
    s->n = n;
    s->all = xmalloc(sizeof(*s->all) * (size_t)(n ? n : 1));
    s->sorted = xmalloc(sizeof(*s->sorted) * (size_t)(n ? n : 1));
    memcpy(s->all, t, sizeof(*s->all) * (size_t)n);
    memcpy(s->sorted, t, sizeof(*s->all) * (size_t)n);
    qsort(s->sorted, (size_t)n, sizeof(*s->sorted), cmp_tensor_name);
    s->owner = owner;
    s->release = release;
    *out = s;
    for (int i = 1; i < n; i++)
        if (strcmp(s->sorted[i - 1]->name, s->sorted[i]->name) == 0) {
            ds_err(err, errlen, "%s: tensor \"%s\" appears twice", ctx, s->sorted[i]->name);
            st_set_close(s);
            *out = NULL;
            return -1;
        }
    return 0;
}

/* Builds the combined tensor lists once every shard is open. */
static int set_index_tensors(st_set *s, const char *ctx, char *err, size_t errlen) {
    int n = 0;
    for (int i = 0; i < s->n_shards; i++) n += st_count(s->shards[i]);
    s->n = n;
    s->all = xmalloc(sizeof(*s->all) * (size_t)(n ? n : 1));
    s->sorted = xmalloc(sizeof(*s->sorted) * (size_t)(n ? n : 1));
    int k = 0;
    for (int i = 0; i < s->n_shards; i++)
        for (int j = 0; j < s->shards[i]->n; j++) s->all[k++] = &s->shards[i]->t[j];
    memcpy(s->sorted, s->all, sizeof(*s->all) * (size_t)n);
    qsort(s->sorted, (size_t)n, sizeof(*s->sorted), cmp_tensor_name);
    for (int i = 1; i < n; i++)
        if (strcmp(s->sorted[i - 1]->name, s->sorted[i]->name) == 0)
            return ds_err(err, errlen, "%s: tensor \"%s\" is in both %s and %s", ctx, s->sorted[i]->name,
                          s->sorted[i - 1]->file, s->sorted[i]->file);
    return 0;
}

static int bad_shard_name(const char *s) {
    return !*s || strchr(s, '/') || strchr(s, '\\') || strstr(s, "..");
}

static int open_sharded(st_set *s, const char *dir, const char *ipath, st_load mode, char *err, size_t errlen) {
    cJSON *root = json_parse_file(ipath, err, errlen);
    if (!root) return -1;
    int rc = 0;
    map_entry *map = NULL;
    const char **shards = NULL;
    int n = 0, ns = 0;
    const cJSON *wm = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (!cJSON_IsObject(root)) {
        rc = ds_err(err, errlen, "%s: not a JSON object", ipath);
        goto done;
    }
    if (!cJSON_IsObject(wm)) {
        rc = ds_err(err, errlen, "%s: missing \"weight_map\" object", ipath);
        goto done;
    }
    for (const cJSON *e = wm->child; e; e = e->next) n++;
    if (n == 0) {
        rc = ds_err(err, errlen, "%s: \"weight_map\" is empty", ipath);
        goto done;
    }
    map = xmalloc(sizeof(map_entry) * (size_t)n);
    shards = xmalloc(sizeof(char *) * (size_t)n);
    n = 0;
    for (const cJSON *e = wm->child; e; e = e->next) {
        const char *t = e->string ? e->string : "";
        if (!cJSON_IsString(e)) {
            rc = ds_err(err, errlen, "%s: weight_map[\"%s\"] must be a file name string", ipath, t);
            goto done;
        }
        if (bad_shard_name(e->valuestring)) {
            rc = ds_err(err, errlen, "%s: weight_map[\"%s\"] names \"%s\", which is not a plain file name", ipath, t,
                        e->valuestring);
            goto done;
        }
        map[n].tensor = t;
        map[n].shard = -1;
        shards[n] = e->valuestring;
        n++;
    }
    /* distinct shard names, sorted, so each shard is opened once and in a
     * stable order */
    qsort(shards, (size_t)n, sizeof(char *), cmp_str);
    for (int i = 0; i < n; i++)
        if (ns == 0 || strcmp(shards[ns - 1], shards[i]) != 0) shards[ns++] = shards[i];
    {
        int i = 0;
        for (const cJSON *e = wm->child; e; e = e->next, i++) {
            const char **p = bsearch(e->valuestring, shards, (size_t)ns, sizeof(char *), cmp_key_str);
            map[i].shard = (int)(p - shards);
        }
    }
    qsort(map, (size_t)n, sizeof(map_entry), cmp_map_entry);
    for (int i = 1; i < n; i++)
        if (strcmp(map[i - 1].tensor, map[i].tensor) == 0) {
            rc = ds_err(err, errlen, "%s: tensor \"%s\" is listed twice in weight_map", ipath, map[i].tensor);
            goto done;
        }

    s->shards = xcalloc((size_t)ns, sizeof(st_file *));
    for (int i = 0; i < ns; i++) {
        char path[4096];
        if (ds_path_join(path, sizeof path, dir, shards[i]) != 0) {
            rc = ds_err(err, errlen, "%s: path of shard \"%s\" is too long", ipath, shards[i]);
            goto done;
        }
        if (!ds_file_exists(path)) {
            rc = ds_err(err, errlen, "%s: weight_map names shard \"%s\", which is missing (%s)", ipath, shards[i],
                        path);
            goto done;
        }
        if ((rc = st_open_mode(&s->shards[i], path, mode, err, errlen)) != 0) goto done;
        s->n_shards++;
    }
    /* every listed tensor is in its shard ... */
    for (int i = 0; i < n; i++) {
        if (!st_find(s->shards[map[i].shard], map[i].tensor)) {
            rc = ds_err(err, errlen, "%s: tensor \"%s\" is mapped to %s, which does not contain it", ipath,
                        map[i].tensor, shards[map[i].shard]);
            goto done;
        }
    }
    /* ... and every tensor in a shard is listed, for that shard */
    for (int i = 0; i < ns; i++) {
        const st_file *f = s->shards[i];
        for (int j = 0; j < f->n; j++) {
            const map_entry *m = bsearch(f->t[j].name, map, (size_t)n, sizeof(map_entry), cmp_key_map);
            if (!m) {
                rc = ds_err(err, errlen, "%s: tensor \"%s\" is not listed in %s", f->name, f->t[j].name, ipath);
                goto done;
            }
            if (m->shard != i) {
                rc = ds_err(err, errlen, "%s: tensor \"%s\" is in %s but %s maps it to %s", f->name, f->t[j].name,
                            shards[i], ipath, shards[m->shard]);
                goto done;
            }
        }
    }
    rc = set_index_tensors(s, ipath, err, errlen);
done:
    free(map);
    free(shards);
    cJSON_Delete(root);
    return rc;
}

int st_set_open_mode(st_set **out, const char *dir, st_load mode, char *err, size_t errlen) {
    *out = NULL;
    char ipath[4096], spath[4096];
    if (ds_path_join(ipath, sizeof ipath, dir, "model.safetensors.index.json") != 0 ||
        ds_path_join(spath, sizeof spath, dir, "model.safetensors") != 0)
        return ds_err(err, errlen, "%s: path too long", dir);
    st_set *s = xcalloc(1, sizeof *s);
    int rc;
    if (ds_file_exists(ipath)) {
        rc = open_sharded(s, dir, ipath, mode, err, errlen);
    } else if (ds_file_exists(spath)) {
        s->shards = xcalloc(1, sizeof(st_file *));
        rc = st_open_mode(&s->shards[0], spath, mode, err, errlen);
        if (rc == 0) {
            s->n_shards = 1;
            rc = set_index_tensors(s, spath, err, errlen);
        }
    } else {
        rc = ds_err(err, errlen, "%s: no model.safetensors or model.safetensors.index.json", dir);
    }
    if (rc != 0) {
        st_set_close(s);
        return -1;
    }
    *out = s;
    return 0;
}

int st_set_count(const st_set *s) { return s ? s->n : 0; }

const tensor *st_set_get(const st_set *s, int i) {
    if (!s || i < 0 || i >= s->n) return NULL;
    return s->all[i];
}

const tensor *st_set_find(const st_set *s, const char *name) {
    if (!s) return NULL;
    return find_sorted(s->sorted, s->n, name);
}

int st_set_rows8(st_set *s, const tensor *const *t, int n) {
    int done = 0;
    for (int i = 0; s && i < s->n_shards; i++) {
        st_file *f = s->shards[i];
        if (!f->in_memory) continue;
        /* the copy is read-only once loaded: writable while its tensors
           are rearranged (the whole mapping, once, so that no huge page is
           split at a tensor's ends) */
        int open = 0;
        for (int j = 0; j < n; j++) {
            if (!t[j] || t[j] < f->t || t[j] >= f->t + f->n || !tensor_rows8_ok(t[j])) continue;
            if (!open && mprotect(f->map, f->map_size, PROT_READ | PROT_WRITE) != 0) break;
            open = 1;
            tensor_to_rows8((void *)(uintptr_t)t[j]->data, dtype_size(t[j]->dtype), t[j]->shape[0], t[j]->shape[1]);
            f->t[t[j] - f->t].rows8 = 1;
            done++;
        }
        if (open) mprotect(f->map, f->map_size, PROT_READ);
    }
    return done;
}

int st_set_open(st_set **out, const char *dir, char *err, size_t errlen) {
    return st_set_open_mode(out, dir, ST_LOAD_MMAP, err, errlen);
}
