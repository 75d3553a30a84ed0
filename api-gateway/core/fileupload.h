/*
 * fileupload: one upload's way into PostgreSQL (ARCHITECTURE.md §3, "Files"): the declared
 * media type and file name read from the request's headers, each piece of the body stored as
 * it arrives (chatfile.h), the bytes checked against the declared type with libmagic (and as
 * UTF-8 for text types), the SHA-256 computed on the way, the owner's quota kept. Nothing of
 * the body is held beyond the piece being written.
 */
#ifndef CHATFLEET_FILEUPLOAD_H
#define CHATFLEET_FILEUPLOAD_H

#include <libpq-fe.h>
#include <stdint.h>

#include "http.h"
#include "id.h"

/* The libmagic database, shared by a gateway's uploads (calls are serialised). */
typedef struct sniffer sniffer_t;
sniffer_t *sniffer_new(void); /* NULL (logged) when libmagic cannot load its database */
void sniffer_destroy(sniffer_t **self_p);

typedef struct fileupload fileupload_t;

/* The file name of a Content-Disposition value (NULL: none) into out: the filename (RFC 6266,
 * filename* in UTF-8 preferred), its last path segment; "" when it names none. 0, or -1 when
 * it is not UTF-8, holds a control character or is longer than CHATFILE_NAME_MAX bytes. */
int fileupload_disposition_name(const char *disposition, char *out, size_t size);

/* An upload of owner's of content_type (a Content-Type value: one of chatfile_media_known,
 * no charset but UTF-8) named name (checked as fileupload_disposition_name checks it; "" for
 * none); quota_bytes is what all the owner's files may take. NULL with a 400 naming field
 * "Content-Type" or "name" in resp. */
fileupload_t *fileupload_new(sniffer_t *sniffer, const char *owner_id, const char *content_type,
                             const char *name, int64_t quota_bytes, http_resp_t *resp);

/* The id of the file (after fileupload_finish). */
const char *fileupload_id(const fileupload_t *self);

/* Stores the next len bytes of the body (the first piece creates the file row). 0, or -1
 * with resp set: 400 when the bytes are not what the type says, 413 over the quota, 500. */
int fileupload_write(fileupload_t *self, PGconn *conn, const char *data, size_t len,
                     http_resp_t *resp);

/* Completes the upload: 201 {"id","name","mime_type","size_bytes","sha256"} in resp and 0,
 * or -1 with resp set as fileupload_write. */
int fileupload_finish(fileupload_t *self, PGconn *conn, http_resp_t *resp);

/* Frees the upload, deleting what it stored unless it completed. */
void fileupload_destroy(fileupload_t **self_p, PGconn *conn);

#endif
