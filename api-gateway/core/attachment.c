/* attachment: a message's file parts checked and described; see attachment.h. */
#include "attachment.h"
#include "jsonstrict.h"
#include "chatfile.h"
#include "db.h"
#include "fieldpath.h"
#include "jsonout.h"
#include "mem.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The files content names, as a uuid[] literal ("{a,b}"); NULL when it names none. */
static char *s_ids(const json_t *parts) {
    char *ids = NULL;
    size_t i;
    json_t *p;
    json_array_foreach(parts, i, p) {
        const char *id = json_string_value(json_object_get(p, "file_id"));
        if (!id) {
            continue;
        }
        char *next = mem_printf("%s%s%s", ids ? ids : "{", ids ? "," : "", id);
        free(ids);
        ids = next;
    }
    if (!ids) {
        return NULL;
    }
    char *closed = mem_printf("%s}", ids);
    free(ids);
    return closed;
}

/* The row of files for id, or -1. */
static int s_row(const PGresult *files, const char *id) {
    for (int r = 0; r < PQntuples(files); r++) {
        if (!strcmp(PQgetvalue(files, r, 0), id)) {
            return r;
        }
    }
    return -1;
}

/* Checks part (a file part at path) against its file's row and the model, and fills its
 * media_type and name. 0, or -1 with a 400. */
static int s_part(json_t *part, const char *path, const PGresult *files, const PGresult *model,
                  const char *chat_id, http_resp_t *resp) {
    int r = s_row(files, json_string_value(json_object_get(part, "file_id")));
    const char *holder = r >= 0 ? db_text(files, r, 3) : NULL;
    const char *detail = NULL;
    char why[256];
    if (r < 0) {
        detail = "no such file: it was never uploaded, was deleted or evicted, or is not yours";
    } else if (holder && (!chat_id || strcmp(holder, chat_id))) {
        detail = "the file is attached to another chat (a file belongs to one chat)";
    } else {
        const char *type = PQgetvalue(files, r, 1);
        bool takes = chatfile_media_text(type);
        json_t *list = json_loads(PQgetvalue(model, 0, 1), 0, NULL);
        size_t k;
        json_t *t;
        json_array_foreach(list, k, t) {
            takes = takes || !strcmp(json_string_value(t), type);
        }
        json_decref(list);
        if (!takes) {
            snprintf(why, sizeof why, "the model %s does not accept %s files (its media_types)",
                     PQgetvalue(model, 0, 0), type);
            http_invalid(resp, path, why);
            return -1;
        }
        json_object_set_new(part, "media_type", json_string(type));
        json_object_set_new(part, "name", json_string(PQgetvalue(files, r, 2)));
        return 0;
    }
    char *f = fieldpath_member(path, "file_id");
    http_invalid(resp, f, detail);
    free(f);
    return -1;
}

int attachment_resolve(PGconn *conn, const char *user_id, const char *chat_id, const char *model_id,
                       const char *field, char **content, http_resp_t *resp) {
    if (!strstr(*content, "\"file_id\"")) {
        return 0;
    }
    json_t *parts = jsonstrict_load_stored(*content, strlen(*content));
    char *ids = s_ids(parts);
    char err[256];
    db_err_t e;
    const char *fp[] = {user_id, ids};
    PGresult *files = db_query(conn, &e, err, sizeof err,
                               "SELECT id::text, mime_type, name, chat_id::text FROM chat_files"
                               " WHERE owner_id = $1::uuid AND id = ANY($2::uuid[]) AND complete",
                               2, fp);
    const char *mp[] = {model_id, chat_id, user_id};
    PGresult *model = files ? db_query(conn, &e, err, sizeof err,
                                       "SELECT m.name, coalesce(array_to_json(m.media_types),"
                                       " '[]')::text FROM model_configs m WHERE m.id ="
                                       " coalesce($1::uuid, (SELECT model_config_id FROM chats"
                                       " WHERE id = $2::uuid AND owner_id = $3::uuid),"
                                       " (SELECT id FROM model_configs WHERE is_default))",
                                       3, mp)
                            : NULL;
    int rc = files && model && PQntuples(model) == 1 ? 0 : -1;
    if (rc != 0) {
        http_error(resp, 500, "Internal error.", "the message's files could not be read");
    }
    size_t i;
    json_t *p;
    json_array_foreach(parts, i, p) {
        if (rc != 0) {
            break;
        }
        if (json_object_get(p, "file_id")) {
            char *path = fieldpath_element(field, i);
            rc = s_part(p, path, files, model, chat_id, resp);
            free(path);
        }
    }
    if (rc == 0) {
        free(*content);
        *content = jsonout_dumps(parts);
    }
    PQclear(files);
    PQclear(model);
    free(ids);
    json_decref(parts);
    return rc;
}
