/* hub: downloads a repository of the Hugging Face hub into the hub cache
 * (base/hfcache.h lays it out), over the hub's HTTP API as huggingface_hub
 * uses it, so that dspark, huggingface_hub and transformers share the files.
 *
 *   GET {endpoint}/api/models/{id}/revision/{rev}?blobs=true
 *       -> "sha" (the commit) and "siblings": each file's "rfilename",
 *          "size", "blobId" (git blob id) and, for LFS files, "lfs"
 *          {"sha256", "size"}
 *   GET {endpoint}/{id}/resolve/{commit}/{path}   (redirects followed,
 *       Range: bytes=N- to resume)
 *
 * endpoint is $HF_ENDPOINT (default https://huggingface.co); the token
 * ($HF_TOKEN, else the file hf_token_path names) goes as "Authorization:
 * Bearer" to the endpoint only (libcurl drops it on a redirect to another
 * host). Errors carry the hub's X-Error-Code (GatedRepo, RepoNotFound,
 * RevisionNotFound, EntryNotFound) into messages that say what to do.
 *
 * Invariants: a file enters blobs/ only complete and verified (size, and
 * SHA-256 for LFS files or the git blob id for others); it is downloaded
 * to blobs/ETAG.incomplete, which a later run resumes with a Range request;
 * refs/REV is written last, once every selected file is in the snapshot,
 * so a revision name never points at a half-downloaded model. */
#ifndef DS_HUB_H
#define DS_HUB_H

#include <stddef.h>
#include <stdio.h>

typedef struct {
    const char *revision;        /* branch, tag or commit (NULL or "": "main") */
    const char *const *include;  /* fnmatch globs over repo paths (n_include 0: hub_wanted) */
    int n_include;
    int jobs;      /* files downloaded at once (0: 4) */
    int retries;   /* attempts after a dropped connection, each resuming (0: 5; -1: none) */
    int retry_ms;  /* the first wait before a retry, doubled each time (0: 1000) */
    FILE *log;     /* progress and notes (NULL: quiet) */
    int tty;       /* -1: a redrawn progress bar when log is a terminal, else log lines; 0: lines; 1: bar */
} hub_opts;

typedef struct {
    char commit[48];
    int files;            /* files selected */
    int fetched;          /* of those, downloaded by this run (the rest were cached) */
    long long bytes;      /* size of the selected files */
    long long received;   /* bytes received over the network by this run */
} hub_result;

/* Pulls the files of id ("org/name") at o->revision into the hub cache
 * (hf_cache_root) and writes the snapshot folder into snapshot. Files
 * already in blobs/ are not fetched again. 0, or -1 with err saying what
 * went wrong and what to do. res may be NULL. */
int hub_pull(const char *id, const hub_opts *o, char *snapshot, size_t n, hub_result *res, char *err,
             size_t errlen);

/* The default selection: 1 when the top-level file path is needed to run a
 * model from a repo that has (has_safetensors) or lacks safetensors
 * weights: config, generation config, tokenizer and chat-template files,
 * *.safetensors and their index; *.gguf only in a repo without
 * safetensors (hub_pull then insists on exactly one, else asks for
 * --include). Files in subfolders (original/, onnx/, ...) are not needed. */
int hub_wanted(const char *path, int has_safetensors);

/* The hex digest a file must have: SHA-256 of its bytes (lfs), else the
 * git blob id, SHA-1 of "blob SIZE\0" + bytes. 0, or -1 with err. */
int hub_file_digest(const char *path, int lfs, char *hex, size_t n, char *err, size_t errlen);

#endif
