/* toolfiles: a tool's images stored as chat files; see toolfiles.h. */
#include "toolfiles.h"
#include "chatfile.h"
#include "db.h"
#include "log.h"
#include "mem.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The chat's owner into owner; 0 or -1. */
static int s_owner(PGconn *conn, const char *chat_id, char owner[ID_UUID_LEN + 1]) {
    char err[256];
    db_err_t e;
    const char *p[] = {chat_id};
    PGresult *res = db_query(conn, &e, err, sizeof err,
                             "SELECT owner_id::text FROM chats WHERE id = $1::uuid", 1, p);
    int rc = res && PQntuples(res) == 1 ? 0 : -1;
    if (rc == 0) {
        snprintf(owner, ID_UUID_LEN + 1, "%s", PQgetvalue(res, 0, 0));
    }
    PQclear(res);
    return rc;
}

/* Stores len bytes as a complete file of owner's; its id into id. 0 or -1. */
static int s_put(PGconn *conn, const char *owner, const char *type, const char *name,
                 const unsigned char *bytes, int len, char id[ID_UUID_LEN + 1]) {
    char err[256];
    unsigned char md[32];
    if (EVP_Digest(bytes, (size_t)len, md, NULL, EVP_sha256(), NULL) != 1 ||
        chatfile_begin(conn, owner, type, name, id, err, sizeof err) != 0) {
        return -1;
    }
    int seq = 0;
    for (int at = 0; at < len; at += CHATFILE_PIECE_BYTES, seq++) {
        int n = len - at < CHATFILE_PIECE_BYTES ? len - at : CHATFILE_PIECE_BYTES;
        if (chatfile_put(conn, id, seq, bytes + at, (size_t)n, err, sizeof err) != 0) {
            (void)chatfile_delete(conn, id);
            return -1;
        }
    }
    /* A tool's file is not the user's upload: no quota (the chat's cap bounds it). */
    if (chatfile_complete(conn, id, len, md, -1, err, sizeof err) != 0) {
        (void)chatfile_delete(conn, id);
        return -1;
    }
    return 0;
}

/* Stores one image item; 1 stored, 0 not an item to store, -1 failed. */
static int s_item(PGconn *conn, const char *chat_id, const char *call_id, json_t *item,
                  char owner[ID_UUID_LEN + 1], json_t *stored) {
    const char *type = json_string_value(json_object_get(item, "mimeType"));
    const char *data = json_string_value(json_object_get(item, "data"));
    const char *kind = json_string_value(json_object_get(item, "type"));
    if (!kind || strcmp(kind, "image") || !data || !type || !chatfile_media_known(type) ||
        chatfile_media_text(type)) {
        return 0;
    }
    int len = 0;
    unsigned char *bytes = chatfile_base64_decode(data, &len);
    if (!bytes) {
        return 0; /* not base64: left as the server sent it */
    }
    char id[ID_UUID_LEN + 1];
    char *name = mem_printf("%s-%zu.%s", call_id, json_array_size(stored), strchr(type, '/') + 1);
    int rc = (owner[0] || s_owner(conn, chat_id, owner) == 0) &&
                     s_put(conn, owner, type, name, bytes, len, id) == 0
                 ? 1
                 : -1;
    if (rc == 1) {
        json_object_del(item, "data");
        json_object_set_new(item, "file_id", json_string(id));
        json_object_set_new(item, "name", json_string(name));
        json_array_append_new(stored, json_string(id));
        log_info("tool_file_stored", "chat_id=%s tool_call_id=%s file_id=%s bytes=%d", chat_id,
                 call_id, id, len);
    }
    free(name);
    free(bytes);
    return rc;
}

int toolfiles_store(PGconn *conn, const char *chat_id, json_t *answers, json_t *stored) {
    char owner[ID_UUID_LEN + 1] = "";
    const char *call_id;
    json_t *a;
    json_object_foreach(answers, call_id, a) {
        size_t i;
        json_t *item;
        json_array_foreach(json_object_get(json_object_get(a, "result"), "content"), i, item) {
            if (s_item(conn, chat_id, call_id, item, owner, stored) < 0) {
                return -1;
            }
        }
    }
    return 0;
}

void toolfiles_discard(PGconn *conn, const json_t *stored) {
    size_t i;
    json_t *id;
    json_array_foreach(stored, i, id) {
        (void)chatfile_delete(conn, json_string_value(id));
    }
}
