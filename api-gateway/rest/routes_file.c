/* routes_file: uploads and downloads of chat files (ARCHITECTURE.md §3, "Files").
 *
 *   POST /api/v2/chats/files        raw body, Content-Type the media type, optional
 *                                   Content-Disposition filename; 201 {"id", ...}
 *   GET  /api/v2/chats/files/{file} the bytes, as uploaded
 *   DELETE /api/v2/chats/files/{file} an upload no chat holds; 204 (409 when a chat holds it)
 *
 * An upload streams: each piece of the body is stored as it arrives (fileupload.h), so a
 * gateway holds one piece per upload whatever the file's size. A file is its owner's: any
 * other caller gets 404, as for chats. */
#include "rest.h"
#include "chatfile.h"
#include "fileupload.h"
#include "log.h"
#include "mem.h"

#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The upload of req, made at its first piece; NULL with resp set when the headers are bad. */
static fileupload_t *s_upload_of(gateway_t *gw, http_req_t *req, http_resp_t *resp) {
    if (req->stream) {
        return req->stream;
    }
    char name[CHATFILE_NAME_MAX + 1];
    if (fileupload_disposition_name(http_header(req, "Content-Disposition"), name, sizeof name) !=
        0) {
        http_invalid(resp, "Content-Disposition",
                     "the filename must be UTF-8 without control characters, at most 255 bytes");
        return NULL;
    }
    req->stream = fileupload_new(gw->sniffer, req->user_id, http_header(req, "Content-Type"), name,
                                 gw->file_quota_bytes, resp);
    return req->stream;
}

static int s_piece(void *app, http_req_t *req, const char *data, size_t len, http_resp_t *resp) {
    gateway_t *gw = app;
    fileupload_t *up = s_upload_of(gw, req, resp);
    if (!up) {
        return -1;
    }
    PGconn *conn = pool_get(gw->pool);
    int rc = fileupload_write(up, conn, data, len, resp);
    pool_put(gw->pool, conn);
    return rc;
}

static void s_release(void *app, void *stream) {
    gateway_t *gw = app;
    fileupload_t *up = stream;
    PGconn *conn = pool_get(gw->pool);
    fileupload_destroy(&up, conn);
    pool_put(gw->pool, conn);
}

/* POST /chats/files: the last piece (req->body), then the upload completed. */
static void s_upload(void *app, http_req_t *req, http_resp_t *resp) {
    gateway_t *gw = app;
    fileupload_t *up = s_upload_of(gw, req, resp);
    if (!up) {
        return;
    }
    PGconn *conn = pool_get(gw->pool);
    if (fileupload_write(up, conn, req->body, req->body_len, resp) == 0) {
        (void)fileupload_finish(up, conn, resp);
    }
    fileupload_destroy(&up, conn);
    req->stream = NULL;
    pool_put(gw->pool, conn);
}

/* A download's place in its file's pieces. */
typedef struct {
    chatfile_t file;
    int row;
    uint64_t row_start; /* the file offset of row's first byte */
} download_t;

static ssize_t s_read(void *cls, uint64_t pos, char *buf, size_t max) {
    download_t *d = cls;
    PGresult *res = d->file.chunks;
    while (d->row < PQntuples(res)) {
        size_t len = PQgetisnull(res, d->row, CHATFILE_DATA_COLUMN)
                         ? 0
                         : (size_t)PQgetlength(res, d->row, CHATFILE_DATA_COLUMN);
        if (pos < d->row_start + len) {
            size_t off = (size_t)(pos - d->row_start);
            size_t n = len - off < max ? len - off : max;
            memcpy(buf, PQgetvalue(res, d->row, CHATFILE_DATA_COLUMN) + off, n);
            return (ssize_t)n;
        }
        d->row_start += len;
        d->row++;
    }
    return MHD_CONTENT_READER_END_OF_STREAM;
}

static void s_free(void *cls) {
    download_t *d = cls;
    chatfile_clear(&d->file);
    free(d);
}

/* The Content-Disposition of a download: the name as a quoted ASCII fallback (other bytes
 * '_') and as RFC 5987 UTF-8. Caller frees. */
static char *s_disposition(const char *name) {
    size_t n = strlen(name);
    char *ascii = mem_calloc(1, n + 1);
    char *pct = mem_calloc(1, 3 * n + 1);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        ascii[i] = c < 0x20 || c >= 0x7f || c == '"' || c == '\\' ? '_' : (char)c;
        bool plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                     strchr("-._~", c);
        at += (size_t)snprintf(pct + at, 4, plain ? "%c" : "%%%02X", c);
    }
    char *out = mem_printf("attachment; filename=\"%s\"; filename*=UTF-8''%s", ascii, pct);
    free(ascii);
    free(pct);
    return out;
}

/* GET /chats/files/{file}: the bytes with their media type, name and SHA-256 (ETag). */
static void s_download(void *app, http_req_t *req, http_resp_t *resp) {
    gateway_t *gw = app;
    char id[ID_UUID_LEN + 1];
    download_t *d = mem_calloc(1, sizeof *d);
    int found = 0;
    if (gateway_chat_id(req->params[0], id) == 0) {
        PGconn *conn = pool_get(gw->pool);
        found = chatfile_read(conn, req->user_id, id, &d->file);
        pool_put(gw->pool, conn);
    }
    if (found != 1) {
        free(d);
        if (found < 0) {
            http_error(resp, 500, "Internal error.", "the file could not be read");
        } else {
            http_error(resp, 404, "File not found.", NULL);
        }
        return;
    }
    struct MHD_Response *r = MHD_create_response_from_callback(
        (uint64_t)d->file.size, CHATFILE_PIECE_BYTES, s_read, d, s_free);
    char *disposition = s_disposition(d->file.name[0] ? d->file.name : "file");
    char etag[72];
    snprintf(etag, sizeof etag, "\"%s\"", d->file.sha256);
    MHD_add_response_header(r, "Content-Type", d->file.media_type);
    MHD_add_response_header(r, "Content-Disposition", disposition);
    MHD_add_response_header(r, "ETag", etag);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Cache-Control", "private, max-age=0");
    free(disposition);
    resp->raw = r;
    resp->status = 200;
}

/* DELETE /chats/files/{file}: an upload no chat holds (a held one goes with its chat). */
static void s_delete(void *app, http_req_t *req, http_resp_t *resp) {
    gateway_t *gw = app;
    char id[ID_UUID_LEN + 1];
    int rc = 0;
    if (gateway_chat_id(req->params[0], id) == 0) {
        PGconn *conn = pool_get(gw->pool);
        rc = chatfile_delete_unlinked(conn, req->user_id, id);
        pool_put(gw->pool, conn);
    }
    if (rc == 1) {
        log_info("chat_file_deleted", "file_id=%s user_id=%s", id, req->user_id);
        http_json(resp, 204, NULL);
    } else if (rc == 2) {
        http_error(resp, 409, "The file is attached to a chat.",
                   "a chat's files go with the chat (deleted, cleared or evicted)");
    } else if (rc == 0) {
        http_error(resp, 404, "File not found.", NULL);
    } else {
        http_error(resp, 500, "Internal error.", "the file could not be deleted");
    }
}

static const http_body_t s_upload_body = {
    .max_bytes = CHATFILE_MAX_BYTES, .sink = s_piece, .release = s_release};

/* Before the chat routes: "/api/v2/chats/{}" must not take "files". */
const http_route_t file_route_table[] = {
    {"POST", "/api/v2/chats/files", s_upload, false, &s_upload_body, NULL},
    {"GET", "/api/v2/chats/files/{}", s_download, false, NULL, NULL},
    {"DELETE", "/api/v2/chats/files/{}", s_delete, false, NULL, NULL},
};
const int file_route_count = sizeof file_route_table / sizeof file_route_table[0];
