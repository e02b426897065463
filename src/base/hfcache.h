/* hfcache: the Hugging Face hub cache layout, which model lookup reads and
 * downloads write, so that dspark shares its files with other tools.
 *
 *   ROOT/models--ORG--NAME/refs/REVISION        the commit a branch or tag names
 *   ROOT/models--ORG--NAME/snapshots/COMMIT/F   a file (a link into blobs/)
 *   ROOT/models--ORG--NAME/blobs/ETAG           the file's bytes
 *   ROOT/models--ORG--NAME/blobs/ETAG.incomplete a download under way
 *   ROOT/.locks/models--ORG--NAME/ETAG.lock     held (flock) while a blob is written
 *
 * ETAG is the file's git blob id (SHA-1 of "blob SIZE\0" + bytes), or for
 * a file kept in LFS its SHA-256, as the hub reports them; a snapshot's
 * entries are relative links ("../../blobs/ETAG", one more "../" per folder
 * of the file's path), so the cache can move as a whole.
 *
 * ROOT is $HF_HUB_CACHE, else $HF_HOME/hub, else
 * $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub. */
#ifndef DS_HFCACHE_H
#define DS_HFCACHE_H

#include <stddef.h>

/* The cache root (it may not exist). */
void hf_cache_root(char *out, size_t n);

/* Splits "ORG/NAME[@REVISION]" into id ("ORG/NAME") and rev ("" when
 * absent). An id is two non-empty parts of letters, digits, '-', '_' and
 * '.', neither "." nor ".." nor starting with '.'; a revision is a branch,
 * tag or commit of printable characters without spaces, "..", or a leading
 * '/'. 0, or -1 with err saying what is wrong. */
int hf_parse_id(const char *spec, char *id, size_t idn, char *rev, size_t revn, char *err, size_t errlen);

/* ROOT/models--ORG--NAME for a valid id. 0, or -1 when it does not fit. */
int hf_repo_dir(const char *root, const char *id, char *out, size_t n);

/* The snapshot folder of id at rev (NULL or "": "main"): a 40-hex rev is a
 * commit taken as is, else refs/REV names the commit. 0 when that folder
 * exists, -1 when not (out then holds the path looked for). */
int hf_snapshot_dir(const char *root, const char *id, const char *rev, char *out, size_t n);

/* 1 when s is a full commit id: 40 lowercase hex digits. */
int hf_is_commit(const char *s);

/* The paths of the layout above, under repo = hf_repo_dir(...): blobs/ETAG
 * followed by suffix ("" or ".incomplete"); snapshots/COMMIT/FILE;
 * refs/REV; and the lock ROOT/.locks/models--ORG--NAME/ETAG.lock. Each 0,
 * or -1 when the path does not fit. */
int hf_blob_path(const char *repo, const char *etag, const char *suffix, char *out, size_t n);
int hf_pointer_path(const char *repo, const char *commit, const char *file, char *out, size_t n);
int hf_ref_path(const char *repo, const char *rev, char *out, size_t n);
int hf_lock_path(const char *root, const char *id, const char *etag, char *out, size_t n);

/* The link a snapshot's entry FILE holds: the relative path from its folder
 * to blobs/ETAG. 0, or -1 when it does not fit. */
int hf_blob_link(const char *file, const char *etag, char *out, size_t n);

/* Where huggingface_hub keeps the token `hf auth login` saved:
 * $HF_TOKEN_PATH, else $HF_HOME/token, else
 * $XDG_CACHE_HOME/huggingface/token, else ~/.cache/huggingface/token. */
void hf_token_path(char *out, size_t n);

#endif
