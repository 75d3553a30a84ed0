/* a2a_file: an A2A message's files; see a2a_file.h. */
#include "a2a_file.h"
#include "jsonstrict.h"
#include "attachment.h"
#include "chatfile.h"
#include "fileupload.h"
#include "jsonout.h"
#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *s_invalid(const char *field, const char *detail) {
    return json_pack("{s:s,s:s}", "field", field, "detail", detail);
}

int a2a_file_part(json_t *part, const char *field, json_t *files, json_t **data) {
    const char *kind = json_string_value(json_object_get(part, "kind"));
    json_t *file = kind && !strcmp(kind, "file") ? json_object_get(part, "file") : part;
    bool legacy = file != part;
    const char *url_key = legacy ? "uri" : "url";
    const char *bytes_key = legacy ? "bytes" : "raw";
    if (!json_is_object(file) ||
        (!json_object_get(file, url_key) && !json_object_get(file, bytes_key))) {
        if (!legacy) {
            return 0; /* a text or data part */
        }
        *data = s_invalid(field, "a file part holds file.bytes");
        return -1;
    }
    char *f = mem_printf("%s%s.%s", field, legacy ? ".file" : "", url_key);
    if (json_object_get(file, url_key)) {
        *data = s_invalid(f, "files by URL are not fetched: send the bytes");
        free(f);
        return -1;
    }
    free(f);
    const char *bytes = json_string_value(json_object_get(file, bytes_key));
    const char *type = json_string_value(json_object_get(file, legacy ? "mimeType" : "mediaType"));
    const char *name = json_string_value(json_object_get(file, legacy ? "name" : "filename"));
    if (!bytes || !type) {
        *data = s_invalid(field, legacy ? "a file part holds file.bytes and file.mimeType"
                                        : "a file part holds raw (base64) and mediaType");
        return -1;
    }
    json_array_append_new(files, json_pack("{s:s, s:s, s:s, s:s}", "bytes", bytes, "media_type",
                                           type, "name", name ? name : "", "field", field));
    return 1;
}

/* Stores one file (the bytes in pieces, as an upload's body arrives); its id into id. */
static int s_store(gateway_t *gw, PGconn *conn, const char *user_id, const json_t *f,
                   char id[ID_UUID_LEN + 1], json_t **data) {
    const char *field = json_string_value(json_object_get(f, "field"));
    int len = 0;
    unsigned char *bytes =
        chatfile_base64_decode(json_string_value(json_object_get(f, "bytes")), &len);
    if (!bytes) {
        *data = s_invalid(field, "the bytes are not base64");
        return -1;
    }
    http_resp_t h = {0};
    fileupload_t *up =
        fileupload_new(gw->sniffer, user_id, json_string_value(json_object_get(f, "media_type")),
                       json_string_value(json_object_get(f, "name")), gw->file_quota_bytes, &h);
    int rc = up ? 0 : -1;
    for (int at = 0; rc == 0 && at < len; at += HTTP_CHUNK_BYTES) {
        int n = len - at < HTTP_CHUNK_BYTES ? len - at : HTTP_CHUNK_BYTES;
        rc = fileupload_write(up, conn, (const char *)bytes + at, (size_t)n, &h);
    }
    if (rc == 0) {
        rc = fileupload_finish(up, conn, &h);
    }
    if (rc == 0) {
        snprintf(id, ID_UUID_LEN + 1, "%s", fileupload_id(up));
    } else {
        json_t *err = h.body ? json_loads(h.body, 0, NULL) : NULL;
        const char *detail = json_string_value(json_object_get(err, "detail"));
        *data = s_invalid(field, detail ? detail : "the file could not be stored");
        json_decref(err);
    }
    free(h.body);
    fileupload_destroy(&up, conn);
    free(bytes);
    return rc;
}

/* The files' parts checked and described (attachment.h); a refusal names the A2A part. */
static int s_resolve(PGconn *conn, const char *user_id, const char *chat_id, const json_t *files,
                     char **parts, json_t **data) {
    http_resp_t h = {0};
    if (attachment_resolve(conn, user_id, chat_id, NULL, "p", parts, &h) == 0) {
        return 0;
    }
    json_t *err = h.body ? json_loads(h.body, 0, NULL) : NULL;
    json_t *v = json_array_get(json_object_get(err, "validations"), 0);
    const char *at = json_string_value(json_object_get(v, "field"));
    size_t k = 0;
    const char *field = at && sscanf(at, "p[%zu]", &k) == 1 && k < json_array_size(files)
                            ? json_string_value(json_object_get(json_array_get(files, k), "field"))
                            : "params.message.parts";
    const char *detail = json_string_value(json_object_get(v, "detail"));
    *data = s_invalid(field, detail ? detail : "the files could not be checked");
    json_decref(err);
    free(h.body);
    return -1;
}

int a2a_file_store(gateway_t *gw, PGconn *conn, const char *user_id, const char *chat_id,
                   json_t *files, char **content, json_t **data) {
    if (json_array_size(files) == 0) {
        return 0;
    }
    json_t *made = json_array();
    size_t i;
    json_t *f;
    json_array_foreach(files, i, f) {
        char id[ID_UUID_LEN + 1];
        if (s_store(gw, conn, user_id, f, id, data) != 0) {
            json_decref(made);
            return -1;
        }
        json_array_append_new(made, json_pack("{s:s, s:s}", "type", "file", "file_id", id));
    }
    char *parts = jsonout_dumps(made);
    json_decref(made);
    int rc = s_resolve(conn, user_id, chat_id, files, &parts, data);
    if (rc == 0) {
        json_t *all = jsonstrict_load_stored(*content, strlen(*content));
        json_t *resolved = jsonstrict_load_stored(parts, strlen(parts));
        json_array_extend(all, resolved);
        free(*content);
        *content = jsonout_dumps(all);
        json_decref(all);
        json_decref(resolved);
    }
    free(parts);
    return rc;
}
