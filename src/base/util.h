/* util: small shared helpers: error-buffer formatting, allocation that
 * aborts on out-of-memory (the only unrecoverable failure), whole-file
 * reading, wall-clock time, hashing, and 16-bit float conversions. */
#ifndef DS_UTIL_H
#define DS_UTIL_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define DS_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DS_PRINTF(a, b)
#endif

/* Writes a formatted message into err (if non-NULL) and returns -1, so
 * library code can say `return ds_err(err, errlen, "...", ...);`. */
int ds_err(char *err, size_t errlen, const char *fmt, ...) DS_PRINTF(3, 4);

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
/* 64-byte aligned allocation; free with free(). */
void *xaligned(size_t n);

/* Reads a whole file, NUL-terminated; *len gets the byte count (without
 * the NUL). Returns NULL and fills err on failure. */
char *ds_read_file(const char *path, size_t *len, char *err, size_t errlen);
int ds_file_exists(const char *path);
/* Joins dir and name into out (size n). Returns 0, or -1 if too long. */
int ds_path_join(char *out, size_t n, const char *dir, const char *name);

double ds_now(void); /* monotonic seconds */

/* 1 when s[0..n) is well-formed UTF-8 as far as lead bytes go: C2..F4
 * leads, each with its count of continuation bytes, no sequence cut. */
int ds_utf8_valid(const char *s, size_t n);

/* FNV-1a 64-bit over bytes, chainable: pass the previous hash as seed
 * (DS_FNV_SEED for the first call). */
#define DS_FNV_SEED 0xcbf29ce484222325ULL
uint64_t ds_fnv1a(uint64_t seed, const void *data, size_t n);

/* The splitmix64 finaliser: a bijection on 64 bits that mixes every bit. */
static inline uint64_t ds_mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

/* "<prefix><24 lowercase hex>": 16 hex digits that are a bijection of a
 * process-wide counter (unique within the process) and 8 random ones (from
 * getrandom, else the clock). Thread-safe. */
void ds_unique_id(char *out, size_t n, const char *prefix);

/* Parses "3,5,7" into a newly allocated int array. Returns count, -1 on
 * error (err filled). */
int ds_parse_ids(const char *s, int **out, char *err, size_t errlen);

static inline float ds_bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v;
    v.u = (uint32_t)h << 16;
    return v.f;
}
static inline uint16_t ds_f32_to_bf16(float f) { /* round to nearest even */
    union { uint32_t u; float f; } v;
    v.f = f;
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40); /* NaN */
    return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}
float ds_f16_to_f32(uint16_t h);
uint16_t ds_f32_to_f16(float f);

#endif
