/* chatlist: GET /api/v2/chats, its parameters and its one statement; labels' rules. See
 * chatlist.h. */
#include "chatlist.h"
#include "db.h"
#include "fieldpath.h"
#include "jsonout.h"
#include "jsonstrict.h"
#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

extern const char *const gateway_chat_json_sql;

/* What a list request asks for, once read and checked. */
typedef struct {
    int64_t limit;
    int64_t offset;
    const char *after_s;         /* the after_id argument as sent, or NULL */
    char after[ID_UUID_LEN + 1]; /* its canonical form */
    int archived;                /* -1: not given; 0 false; 1 true */
    int q_archived;              /* the same, from q's archived: tokens */
    char *text;                  /* q without its archived: tokens (heap), or NULL */
    json_t *labels;              /* every label=key:value as one object, or NULL */
    bool contradiction;          /* a key asked with two values: nothing matches */
    int label_count;             /* label arguments read */
    http_resp_t *resp;           /* where a label's refusal goes */
} list_t;

void chatlist_invalid(http_resp_t *resp, const char *message, const char *field,
                      const char *detail) {
    json_t *e = json_pack("{s:s,s:s,s:[{s:s,s:s}]}", "message", message, "detail", detail,
                          "validations", "field", field, "detail", detail);
    if (!e) { /* field was not UTF-8 (it comes from a strict body, so it is): say it plainly */
        http_invalid(resp, field, detail);
        return;
    }
    http_json(resp, 400, e);
}

/* True when the n bytes at s are UTF-8 throughout. */
static bool s_utf8(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    const unsigned char *end = p + n;
    while (p < end) {
        size_t k = jsonstrict_utf8_len(p, end);
        if (k == 0) {
            return false;
        }
        p += k;
    }
    return true;
}

/* The detail of a key that breaks the rules, or NULL when it keeps them. */
static const char *s_key_fault(const char *key, size_t n) {
    if (n == 0 || n > LABEL_KEY_MAX_BYTES || !s_utf8(key, n)) {
        return "a label key must be 1 to 64 bytes of UTF-8";
    }
    return memchr(key, ':', n) ? "a label key must not contain ':'" : NULL;
}

static const char *s_value_fault(const char *value, size_t n) {
    if (n > LABEL_VALUE_MAX_BYTES || !s_utf8(value, n) || memchr(value, '\0', n)) {
        return "a label value must be a string of 0 to 256 bytes of UTF-8";
    }
    return NULL;
}

int chatlist_labels_check(const json_t *labels, const char *field, http_resp_t *resp) {
    if (!json_is_object(labels) || json_object_size(labels) > LABELS_MAX) {
        chatlist_invalid(resp, "Invalid labels.", field,
                         "must be an object of at most 50 string labels");
        return -1;
    }
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)labels, key, value) {
        const char *fault = s_key_fault(key, strlen(key));
        if (!fault) {
            fault = !json_is_string(value)
                        ? "a label value must be a string"
                        : s_value_fault(json_string_value(value), json_string_length(value));
        }
        if (fault) {
            char *path = fieldpath_member(field, key);
            chatlist_invalid(resp, "Invalid labels.", path, fault);
            free(path);
            return -1;
        }
    }
    return 0;
}

/* One label=key:value argument into l->labels (an http_pair_fn): 0, or 1 with a 400 naming
 * label in l->resp. */
static int s_label(void *arg, const char *name, const char *value) {
    list_t *l = arg;
    if (strcmp(name, "label") != 0) {
        return 0;
    }
    const char *colon = value ? strchr(value, ':') : NULL;
    const char *fault = ++l->label_count > LABELS_MAX ? "at most 50 label filters"
                        : !colon                      ? "must be key:value"
                                                      : s_key_fault(value, (size_t)(colon - value));
    if (!fault) {
        fault = s_value_fault(colon + 1, strlen(colon + 1));
    }
    if (fault) {
        http_invalid(l->resp, "label", fault);
        return 1;
    }
    char *key = mem_strndup(value, (size_t)(colon - value));
    const char *had = json_string_value(json_object_get(l->labels, key));
    l->contradiction |= had && strcmp(had, colon + 1) != 0;
    json_object_set_new(l->labels, key, json_string(colon + 1));
    free(key);
    return 0;
}

/* Splits q into its archived: tokens (outside double quotes, in any letter case) and the
 * search text, the rest, into l. 0, or -1 with a 400 naming q. */
static int s_q(list_t *l, const char *q, http_resp_t *resp) {
    size_t n = strlen(q);
    if (n > CHATLIST_Q_MAX_BYTES || !s_utf8(q, n)) {
        http_invalid(resp, "q", "must be at most 1024 bytes of UTF-8");
        return -1;
    }
    static const char space[] = " \t\n\r\f\v";
    char *text = mem_alloc(n + 1);
    size_t o = 0;
    bool quoted = false;
    for (const char *p = q + strspn(q, space); *p; p += strspn(p, space)) {
        size_t k = strcspn(p, space);
        int v = quoted                                            ? -1
                : k == 13 && !strncasecmp(p, "archived:true", k)  ? 1
                : k == 14 && !strncasecmp(p, "archived:false", k) ? 0
                                                                  : -1;
        if (v >= 0 && l->q_archived >= 0 && v != l->q_archived) {
            free(text);
            http_invalid(resp, "q", "archived:true and archived:false together");
            return -1;
        }
        if (v >= 0) {
            l->q_archived = v;
        } else {
            for (size_t i = 0; i < k; i++) {
                quoted ^= p[i] == '"';
            }
            o += (size_t)snprintf(text + o, n + 1 - o, "%s%.*s", o ? " " : "", (int)k, p);
        }
        p += k;
    }
    l->text = o ? text : NULL;
    if (!o) {
        free(text);
    }
    return 0;
}

/* Reads and checks every parameter into l: 0, or -1 with the 400 in resp. */
static int s_params(const http_req_t *req, list_t *l, http_resp_t *resp) {
    const char *archived = http_query(req, "archived");
    const char *q = http_query(req, "q");
    l->after_s = http_query(req, "after_id");
    l->archived = l->q_archived = -1;
    if (gateway_query_int(req, "limit", 1, CHATLIST_LIMIT_MAX, CHATLIST_LIMIT_DEFAULT, &l->limit,
                          resp) != 0 ||
        gateway_query_int(req, "offset", 0, CHATLIST_OFFSET_MAX, 0, &l->offset, resp) != 0) {
        return -1;
    }
    if (l->after_s && gateway_chat_id(l->after_s, l->after) != 0) {
        http_invalid(resp, "after_id", "must be the id of one of your chats");
        return -1;
    }
    if (archived && strcmp(archived, "true") && strcmp(archived, "false")) {
        http_invalid(resp, "archived", "must be true or false");
        return -1;
    }
    l->archived = archived ? !strcmp(archived, "true") : -1;
    if (q && s_q(l, q, resp) != 0) {
        return -1;
    }
    if (l->archived >= 0 && l->q_archived >= 0 && l->archived != l->q_archived) {
        http_invalid(resp, "q", "its archived: token contradicts the archived parameter");
        return -1;
    }
    l->labels = json_object();
    l->resp = resp;
    return http_query_each(req, s_label, l) == 0 ? 0 : -1;
}

/* A list cursor must name one of the caller's own chats: any other id, malformed, unknown
 * or another user's, gets the same 400, so the answer tells nothing about other users' chats
 * (their existence, their order). 1 when it is theirs, 0 when not, -1 on a database error
 * (then a 500 in resp). */
static int s_own_cursor(PGconn *conn, const char *chat_id, const char *user_id, http_resp_t *resp) {
    const char *p[] = {chat_id, user_id};
    db_err_t e;
    PGresult *res =
        db_query(conn, &e, NULL, 0, "SELECT 1 FROM chats WHERE id = $1 AND owner_id = $2", 2, p);
    if (!res) {
        http_error(resp, 500, "Internal error.", "database unavailable");
        return -1;
    }
    int n = PQntuples(res);
    PQclear(res);
    return n == 1;
}

/* Appends clause (a format with one %d, the number of the parameter value takes) to *where
 * and value to p. */
static void s_clause(char **where, const char *clause, const char **p, int *n, const char *value) {
    p[(*n)++] = value;
    char *c = mem_printf(clause, *n);
    char *w = mem_printf("%s%s", *where, c);
    free(c);
    free(*where);
    *where = w;
}

/* The cursor's row in the list's order (pinned first by pin_order, then newest first), read
 * with the owner again: the cursor check and the list may see different snapshots, and
 * neither may read another user's row. */
#define S_AFTER_SQL                                                                                \
    " AND EXISTS (SELECT 1 FROM chats k WHERE k.id = $%d::uuid AND k.owner_id = $1"                \
    " AND ((c.pin_order = 0, c.pin_order) > (k.pin_order = 0, k.pin_order)"                        \
    " OR ((c.pin_order = 0, c.pin_order) = (k.pin_order = 0, k.pin_order)"                         \
    " AND (c.updated_at, c.id) < (k.updated_at, k.id))))"

/* The search: a semi-join over two sets of the owner's chats, one from titles, one from
 * message text, each a semi-join of its own, so that the planner may start from a GIN index (a
 * rare word: its few messages, then their chats by key) or from the owner's chats (a common
 * word, or a user with few chats: their messages by chat, the vector rechecked, stopping at a
 * chat's first match). tests/bench/search at 100,000 chats picks each of these by the word and
 * the owner. An OR EXISTS would leave one plan only, a scan of the owner's chats. */
#define S_SEARCH_SQL                                                                               \
    " AND c.id IN (SELECT t.id FROM chats t WHERE t.owner_id = $1"                                 \
    " AND t.title_search @@ websearch_to_tsquery('english', $%1$d)"                                \
    " UNION SELECT o.id FROM chats o WHERE o.owner_id = $1 AND o.id IN (SELECT m.chat_id"          \
    " FROM chat_messages m WHERE m.search @@ websearch_to_tsquery('english', $%1$d)"               \
    " AND NOT m.deleted))"

/* The list's statement for l, with its parameters into p (8 at most) and their count into
 * *n. One text per combination of the optional filters: each is prepared once per
 * connection, and none carries a value. Caller frees. */
static char *s_sql(const list_t *l, const char *user_id, const char **p, int *n, char *lim,
                   char *off, char **labels_text) {
    *n = 0;
    p[(*n)++] = user_id;
    p[(*n)++] = l->archived == 1 || l->q_archived == 1 ? "true" : "false";
    p[(*n)++] = db_param_int64(lim, l->limit);
    p[(*n)++] = db_param_int64(off, l->offset);
    char *where = mem_strdup("");
    if (l->after_s) {
        s_clause(&where, S_AFTER_SQL, p, n, l->after);
    }
    if (json_object_size(l->labels) > 0) {
        *labels_text = jsonout_dumps(l->labels);
        s_clause(&where, " AND c.labels @> $%d::jsonb", p, n, *labels_text);
    }
    if (l->text) {
        s_clause(&where, S_SEARCH_SQL, p, n, l->text);
    }
    char *sql = mem_printf("SELECT %s FROM chats c WHERE c.owner_id = $1"
                           " AND c.parent_chat_id IS NULL" /* roots: children are embedded */
                           " AND c.archived = $2::boolean%s"
                           " ORDER BY c.pin_order = 0, c.pin_order, c.updated_at DESC, c.id DESC"
                           " OFFSET $4::int LIMIT $3::int",
                           gateway_chat_json_sql, where);
    free(where);
    return sql;
}

void chatlist_handle(gateway_t *gw, const http_req_t *req, http_resp_t *resp) {
    list_t l = {0};
    if (s_params(req, &l, resp) != 0) {
        goto done;
    }
    PGconn *conn = pool_get(gw->pool);
    int own = l.after_s ? s_own_cursor(conn, l.after, req->user_id, resp) : 1;
    if (own == 0) {
        http_invalid(resp, "after_id", "must be the id of one of your chats");
    }
    json_t *rows = NULL;
    if (own == 1 && l.contradiction) {
        rows = json_array(); /* a label cannot have two values */
    } else if (own == 1) {
        const char *p[8];
        int n = 0;
        char lim[DB_PARAM_INT64_LEN];
        char off[DB_PARAM_INT64_LEN];
        char *labels_text = NULL;
        char *sql = s_sql(&l, req->user_id, p, &n, lim, off, &labels_text);
        rows = gateway_rows(conn, sql, n, p, resp);
        free(sql);
        free(labels_text);
    }
    pool_put(gw->pool, conn);
    if (rows) {
        http_json(resp, 200, rows);
    }
done:
    free(l.text);
    json_decref(l.labels);
}
