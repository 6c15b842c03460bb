/* The one I/O layer every format reads through. Internal.
 *
 * A location is a local path or a URL (http://, https://, s3://bucket/key). pb__io_open picks
 * the backend from the location's scheme; every backend gives the same reads:
 *   size, pread (exactly len bytes or an error), preadv (many ranges, all in flight at once
 *   where the backend can), read_all (bounded), map (local files only, where safe), close;
 * and on folders: stat and list.
 * Reads are whole or fail: a range past the end, a short body or a file changed since open
 * (size, mtime, ETag) is an error naming the location and the cause, never fewer bytes. Local
 * files: a read that runs into the end says how the file changed; read_all and pb__io_check
 * compare size and modification time with those at open (one fstat; a check on every pread
 * would double the system calls of the formats' hot paths).
 *
 * Read tuning comes in a pb_read_options (include/pipebench/format.h), passed from
 * pb_dataset_open_opts down to every open; environment variables (PIPEBENCH_*) are only
 * documented overrides applied once, in pb__io_options_resolve. */
#ifndef PB_IO_IO_H
#define PB_IO_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "pipebench/core.h"
#include "pipebench/format.h"

typedef struct pb__io_file pb__io_file;

/* One range of a scattered read: len bytes at offset off into dst. */
typedef struct pb__io_range {
  uint64_t off;
  size_t len;
  void *dst;
} pb__io_range;

/* What stands at a location. */
typedef enum { PB__IO_MISSING = 0, PB__IO_FILE, PB__IO_DIR, PB__IO_OTHER } pb__io_kind;

/* Counters a reader keeps (for --trace-requests and the rows' requests/bytes per image). */
typedef struct pb__io_stats {
  int64_t requests;  /* storage requests made (reads on a local file) */
  int64_t bytes;     /* bytes fetched */
  int64_t retries;   /* requests repeated after a transient failure */
} pb__io_stats;

/* What an open learnt that a later open of the same object may take instead of asking again
 * (remote: the HEAD's size and validator), so a format that opens a file per read (TIFF) pays
 * one request per read, not two. set 0: nothing known. */
typedef struct pb__io_known {
  int set;
  uint64_t size;
  char etag[256], modified[128];
} pb__io_known;

/* A backend: one scheme. Functions return PB_OK or a negative code with err set. */
typedef struct pb__io_backend {
  const char *scheme; /* "file", "http", "https", "s3" */
  int (*open)(const char *location, const pb_read_options *opts, pb__io_file **out,
              struct pb_error *err);
  int (*pread)(pb__io_file *f, void *dst, size_t len, uint64_t off, struct pb_error *err);
  int (*preadv)(pb__io_file *f, const pb__io_range *r, size_t n, struct pb_error *err);
  /* NULL where the backend cannot map; PB_EUNSUPPORTED where this file should not be mapped. */
  int (*map)(pb__io_file *f, const void **data, struct pb_error *err);
  void (*close)(pb__io_file *f);
  int (*stat)(const char *location, const pb_read_options *opts, pb__io_kind *kind,
              uint64_t *size, struct pb_error *err);
  /* Sorted entry names of a folder (no "." or ".."), freed with pb__io_free_names. */
  int (*list)(const char *location, const pb_read_options *opts, char ***names, size_t *n,
              struct pb_error *err);
  /* open without asking the server again (NULL: open); known: what describe gave. */
  int (*open_known)(const char *location, const pb_read_options *opts, const pb__io_known *known,
                    pb__io_file **out, struct pb_error *err);
  void (*describe)(const pb__io_file *f, pb__io_known *known);
  /* The whole object in one request (pb__io_read_file); NULL: open, read_all, close. */
  int (*read_file)(const char *location, const pb_read_options *opts, size_t max, void **data,
                   size_t *size, struct pb_error *err);
} pb__io_backend;

/* Every open file starts with this header; backends put their own state after it. */
struct pb__io_file {
  const pb__io_backend *be;
  char *location;   /* as given, for messages (credentials never appear in it) */
  uint64_t size;
  pb__io_stats stats;
};

/* The backend for a location: "file" for a plain path; NULL with a message for a scheme this
 * build cannot read. */
const pb__io_backend *pb__io_backend_for(const char *location, struct pb_error *err);
/* 1 when location is a URL (has a scheme other than file). */
int pb__io_is_url(const char *location);

/* What an open of f learnt (k->set 0 where the backend reuses nothing), and an open that takes
 * it instead of asking again: the reads still check every answer against that size and
 * validator, so an object changed since is an error as before. k NULL or not set: pb__io_open. */
void pb__io_known_get(const pb__io_file *f, pb__io_known *k);
int pb__io_open_known(const char *location, const pb_read_options *opts, const pb__io_known *k,
                      pb__io_file **out, struct pb_error *err);

/* opts NULL: the defaults. */
int pb__io_open(const char *location, const pb_read_options *opts, pb__io_file **out,
                struct pb_error *err);
static inline uint64_t pb__io_size(const pb__io_file *f) { return f->size; }
/* pread and preadv check every range against the size at open (past the end: PB_EFORMAT naming
 * the location) and skip empty ones before the backend sees them. */
int pb__io_pread(pb__io_file *f, void *dst, size_t len, uint64_t off, struct pb_error *err);
int pb__io_preadv(pb__io_file *f, const pb__io_range *r, size_t n, struct pb_error *err);
/* The whole file into a pb_alloc'd buffer (pb_free(*data, *size)); more than max bytes is
 * PB_EUNSUPPORTED naming the location, and nothing is read. */
int pb__io_read_all(pb__io_file *f, size_t max, void **data, size_t *size, struct pb_error *err);
/* A read-only view of the whole file valid until close; PB_EUNSUPPORTED when mapping is off or
 * not possible (callers then read). */
int pb__io_map(pb__io_file *f, const void **data, struct pb_error *err);
void pb__io_close(pb__io_file *f);
int pb__io_stat(const char *location, const pb_read_options *opts, pb__io_kind *kind,
                uint64_t *size, struct pb_error *err);
int pb__io_list(const char *location, const pb_read_options *opts, char ***names, size_t *n,
                struct pb_error *err);
void pb__io_free_names(char **names, size_t n);
/* location + "/" + name (a URL's query stays at the end); malloc'd (free), NULL on no memory. */
char *pb__io_join(const char *location, const char *name);

/* open + read_all + close: the whole file at location, at most max bytes (as read_all). */
int pb__io_read_file(const char *location, const pb_read_options *opts, size_t max, void **data,
                     size_t *size, struct pb_error *err);
/* PB_OK while the file is as it was at open (local files: size and modification time, one
 * fstat); an error naming it otherwise. Readers of a mapping call it before each read, since a
 * mapped file cut short faults instead of failing. Remote files: PB_OK (their reads check). */
int pb__io_check(pb__io_file *f, struct pb_error *err);

/* The options after defaults and documented environment overrides (docs/io.md); in NULL: the
 * defaults; out may alias in. Reads the environment on every call (formats call it once per
 * open, through pb_dataset_open_opts). */
void pb__io_options_resolve(const pb_read_options *in, pb_read_options *out);
/* The most threads a metadata read ahead uses (pb_read_options.meta_in_flight's bound). */
enum { PB__AHEAD_MAX = 256 };

/* The on-disk cache of remote reads (lib/io/disk_cache.c). pb__io_cache_dir: PATH of the read
 * option "disk:PATH" (opts->cache, else PIPEBENCH_READ_CACHE), or NULL. get: 1 when the entry
 * of key holds exactly len bytes (copied to dst), else 0. put: stores them, best effort (a
 * cache that cannot be written is no error). */
const char *pb__io_cache_dir(const pb_read_options *opts);
int pb__io_cache_get(const char *dir, const char *key, void *dst, size_t len);
void pb__io_cache_put(const char *dir, const char *key, const void *src, size_t len);

/* Adds to the process-wide counters pb_io_counters reads (relaxed atomics: any thread). */
void pb__io_count(int64_t requests, int64_t bytes);
/* Adds one remote request's duration, request to last byte (pb_io_request_time reads the sum). */
void pb__io_count_time(int64_t ns);

/* The S3 settings pipebench's own s3:// reads use (lib/io/s3.c resolves them from the AWS
 * variables and files), for a helper program that reads s3:// itself (the Lance engine): a
 * NULL-terminated array of malloc'd "NAME=VALUE" strings for the helper's environment, never
 * its command line: PB_S3_REGION always, PB_S3_ENDPOINT when one is named, and PB_S3_KEY_ID,
 * PB_S3_SECRET (+ PB_S3_TOKEN) when requests are signed (none: anonymous). Freed with
 * pb__io_s3_env_free, which wipes them. A build without libcurl: PB_EUNSUPPORTED. */
int pb__io_s3_env(char ***env, struct pb_error *err);
void pb__io_s3_env_free(char **env);

extern const pb__io_backend pb__io_file_backend;
/* The remote backends, where the build has them: pb__io_http_backend serves http:// and https://,
 * pb__io_s3_backend s3://. io.c refers to them weakly, so a build without them links and refuses
 * those schemes naming them. */

/* ---- the local-file backend's own entry points ------------------------------------------- */

/* A pb__io_file over fd, an open regular file (its owner now; closed with pb__io_close, or at
 * once on failure): for readers that open with their own rules (beneath a dataset folder).
 * location names it in messages. st: fd's fstat where the caller has it (or had it when the
 * file was scanned: a file changed since then reads short or fails pb__io_check), NULL to
 * fstat here. Not regular: PB_EFORMAT naming location. */
int pb__io_file_from_fd(int fd, const char *location, const pb_read_options *opts,
                        const struct stat *st, pb__io_file **out, struct pb_error *err);
/* 1 when f's reads bypass the page cache (O_DIRECT took), 0 otherwise. */
int pb__io_file_direct(const pb__io_file *f);
/* Exactly len bytes at off of an open descriptor (EINTR and short reads looped; the end of the
 * file first is PB_EIO "name: ends at byte N, ..."): for files pipebench writes and reads back
 * itself (spools), which are no dataset and may grow. */
int pb__io_fd_pread(int fd, void *dst, size_t len, uint64_t off, const char *name,
                    struct pb_error *err);

#endif
