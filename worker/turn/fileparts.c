/* fileparts: a history's files made ready for a model; see fileparts.h. */
#include "fileparts.h"
#include "chatfile.h"
#include "mem.h"

#include <openssl/evp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *s_str(const json_t *obj, const char *key) {
    const char *v = json_string_value(json_object_get(obj, key));
    return v ? v : "";
}

/* The ids of every file part with a file_id, as a uuid[] literal; NULL when there are none. */
static char *s_ids(const json_t *messages) {
    char *ids = NULL;
    size_t i, k;
    json_t *m, *p;
    json_array_foreach(messages, i, m) {
        if (strcmp(s_str(m, "role"), "user")) {
            continue; /* the model takes files in user messages only: the others are dropped */
        }
        json_array_foreach(json_object_get(m, "content"), k, p) {
            const char *id = json_string_value(json_object_get(p, "file_id"));
            if (id && !strcmp(s_str(p, "type"), "file")) {
                char *next = mem_printf("%s%s%s", ids ? ids : "{", ids ? "," : "", id);
                free(ids);
                ids = next;
            }
        }
    }
    char *closed = ids ? mem_printf("%s}", ids) : NULL;
    free(ids);
    return closed;
}

/* The part the model gets for file row r of files. */
static json_t *s_loaded(const PGresult *files, int r) {
    const char *type = PQgetvalue(files, r, 1);
    const char *name = PQgetvalue(files, r, 2);
    const char *bytes = PQgetvalue(files, r, 3);
    int len = PQgetlength(files, r, 3);
    if (chatfile_media_text(type)) {
        const char *shown = name[0] ? name : "(unnamed)";
        char *text = mem_printf("Attached file %s (%s):\n%.*s\n(end of %s)\n", shown, type, len,
                                bytes, shown);
        json_t *part = json_pack("{s:s, s:s}", "type", "text", "text", text);
        free(text);
        return part;
    }
    char *b64 = mem_calloc(1, 4 * ((size_t)len / 3 + 1) + 1);
    EVP_EncodeBlock((unsigned char *)b64, (const unsigned char *)bytes, len);
    json_t *part =
        json_pack("{s:s, s:s, s:s, s:s, s:s}", "type", "file", "file_id", PQgetvalue(files, r, 0),
                  "media_type", type, "name", name, "data", b64);
    free(b64);
    return part;
}

/* The part the model gets for file part p of a message of role; NULL: none. */
static json_t *s_part(const json_t *p, const char *role, const PGresult *files) {
    if (strcmp(role, "user")) {
        return NULL; /* a tool's file: its result names it, no wire takes its bytes there */
    }
    const char *id = s_str(p, "file_id");
    for (int r = 0; r < PQntuples(files); r++) {
        if (!strcmp(PQgetvalue(files, r, 0), id)) {
            return s_loaded(files, r);
        }
    }
    if (strcmp(role, "user")) {
        return NULL;
    }
    const char *name = s_str(p, "name");
    char *text = mem_printf("[attachment %s (%s) has expired: its content is no longer available]",
                            name[0] ? name : id, s_str(p, "media_type"));
    json_t *part = json_pack("{s:s, s:s}", "type", "text", "text", text);
    free(text);
    return part;
}

/* True when message m holds a file part naming a stored file. */
static bool s_has_file(const json_t *m) {
    size_t k;
    json_t *p;
    json_array_foreach(json_object_get(m, "content"), k, p) {
        if (!strcmp(s_str(p, "type"), "file") && json_object_get(p, "file_id")) {
            return true;
        }
    }
    return false;
}

/* Rewrites m's file parts (s_part for each). */
static void s_rewrite(json_t *m, const PGresult *files) {
    json_t *out = json_array();
    size_t k;
    json_t *p;
    json_array_foreach(json_object_get(m, "content"), k, p) {
        if (strcmp(s_str(p, "type"), "file") || !json_object_get(p, "file_id")) {
            json_array_append(out, p);
            continue;
        }
        json_t *made = s_part(p, s_str(m, "role"), files);
        if (made) {
            json_array_append_new(out, made);
        }
    }
    json_object_set_new(m, "content", out);
}

int fileparts_fill(PGconn *conn, const char *chat_id, json_t *messages) {
    size_t i;
    json_t *m;
    bool any = false;
    json_array_foreach(messages, i, m) {
        any = any || s_has_file(m);
    }
    if (!any) {
        return 0;
    }
    char *ids = s_ids(messages);
    PGresult *files =
        ids ? chatfile_load(conn, chat_id, ids) : PQmakeEmptyPGresult(NULL, PGRES_TUPLES_OK);
    free(ids);
    if (!files) {
        return -1;
    }
    json_array_foreach(messages, i, m) {
        if (s_has_file(m)) {
            s_rewrite(m, files);
        }
    }
    PQclear(files);
    return 0;
}
