/* agentcheck: see agentcheck.h and README.md (invariant 10). Its file-local names carry "ac"
 * because tests/integration/test_chaos.c compiles every chaos module into one translation unit.
 *
 * What a resumption must hold is computed here from the rows, not by the product's query: the
 * children a call names (args.agent_ids in order; none: every child of the chat that existed
 * when the result was written, oldest first by created_at, id), and for each child its latest
 * visible assistant text (the text parts of its newest non-deleted assistant row that is not
 * visibility 'model' and not a receipt, in order, cut to AC_ANSWER_MAX characters) and, when
 * its latest visible user message was a structured request whose receipt succeeded, that
 * receipt's value. Both are read now, after quiescence: they are what the resumption read as
 * long as the child did not run again afterwards, which a child does only when a message
 * reaches it after the resumption. Only a fenced-out runner of the waiting chat can send one
 * (message_agent commits in the child's own bundle, outside the caller's fence, and the wait
 * resumes only once the child has ended with its queue empty), so a child with a user row
 * inserted after the result row is counted and not compared (README.md).
 *
 * "Before" and "after" the result are row ids, not timestamps: chat_messages.id comes from one
 * sequence drawn at each insert, and the resumption inserts its result after reading the
 * children, whereas its created_at is its transaction's start, which can precede a child's
 * last rows when the resumption waited for the parent's row lock. */
#include "agentcheck.h"
#include "mem.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AC_ANSWER_MAX    32768 /* characters of a child's answer (chatstate_agents.c) */
#define AC_OFFENDERS_MAX 2000  /* bytes of offending ids printed */
#define AC_ID_MAX        40    /* a UUID with its NUL, and room */
#define AC_CALL_ID_MAX   128   /* a tool_call_id kept (longer ones are cut) */
#define AC_ERRORS_SHOWN  8     /* distinct tool errors printed */
#define AC_STR_(x)       #x
#define AC_STR(x)        AC_STR_(x)

/* One child chat (parent_chat_id set), as it is now. */
typedef struct {
    char id[AC_ID_MAX];
    char parent[AC_ID_MAX];
    char status[24];
    bool owned;        /* worker_id set */
    bool leased;       /* a lease row of its runner_id exists (its runner still renews) */
    bool agent_wait;   /* waiting_on_agents */
    int depth;         /* 1: a child of a top-level chat */
    int64_t first_row; /* the id of its first row (Create inserts its prompt), or 0 */
    int64_t last_user; /* the id of its newest user row, or 0 */
    char *answer;      /* its latest visible assistant text, or NULL (no text part) */
    bool structured;   /* its latest visible user row is a structured request */
    json_t *receipt;   /* that request's newest receipt (structured_output), or NULL */
} ac_child_t;

/* One wait_agent call (by chat and tool_call_id) and its results. */
typedef struct {
    char chat[AC_ID_MAX];
    char call_id[AC_CALL_ID_MAX];
    bool live;          /* some row holding the call is not deleted */
    json_t *args;       /* the call's args (from a live row when there is one) */
    int results;        /* tool-result parts with its tool_call_id, deleted rows included */
    bool is_error;      /* the first result's */
    json_t *result;     /* the first result's result */
    int64_t result_row; /* the first result's row id */
} ac_call_t;

typedef struct {
    char text[AC_OFFENDERS_MAX];
    size_t len;
    int n;
} ac_offenders_t;

/* The counts printed with the verdict. */
typedef struct {
    int calls;
    int deleted_calls;
    int resumptions;
    int errors;
    int deleted_unanswered;
    int entries;
    int by_status[3];      /* completed, error, not_found */
    int answers;           /* answers compared with the child now */
    int values;            /* structured values compared */
    int not_compared;      /* the child had a message after the resumption */
    ac_offenders_t *notes; /* which ones (printed, never failed) */
    int unasked;           /* a value for a child whose latest request was not structured */
} ac_counts_t;

static void s_ac_offend(ac_offenders_t *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void s_ac_offend(ac_offenders_t *o, const char *fmt, ...) {
    o->n++;
    if (o->len + 120 >= sizeof o->text) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(o->text + o->len, sizeof o->text - o->len - 1, fmt, ap);
    va_end(ap);
    if (w > 0) {
        size_t room = sizeof o->text - o->len - 2;
        o->len += (size_t)w < room ? (size_t)w : room;
    }
    o->text[o->len++] = ' ';
    o->text[o->len] = '\0';
}

static PGresult *s_ac_query(PGconn *conn, const char *sql, ac_offenders_t *o, const char *what) {
    PGresult *res = PQexec(conn, sql);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        fprintf(stderr, "chaos: agentcheck %s: %s", what, PQresultErrorMessage(res));
        s_ac_offend(o, "(%s: query failed)", what);
        PQclear(res);
        return NULL;
    }
    return res;
}

static int64_t s_ac_int(const PGresult *res, int row, int col) {
    return PQgetisnull(res, row, col) ? 0 : strtoll(PQgetvalue(res, row, col), NULL, 10);
}

static bool s_ac_bool(const PGresult *res, int row, int col) {
    return !PQgetisnull(res, row, col) && PQgetvalue(res, row, col)[0] == 't';
}

/* The concatenated text parts of content (a JSON array's text), cut to AC_ANSWER_MAX UTF-8
 * characters (as the product's left() cuts); NULL when it has no text part. */
static char *s_ac_answer(const char *content) {
    json_t *parts = json_loads(content, 0, NULL);
    char *acc = NULL;
    size_t len = 0;
    size_t i;
    json_t *p;
    json_array_foreach(parts, i, p) {
        const char *type = json_string_value(json_object_get(p, "type"));
        const char *text = json_string_value(json_object_get(p, "text"));
        if (!type || strcmp(type, "text") != 0 || !text) {
            continue;
        }
        size_t n = strlen(text);
        acc = mem_realloc(acc, len + n + 1);
        memcpy(acc + len, text, n + 1);
        len += n;
    }
    json_decref(parts);
    size_t chars = 0;
    for (size_t b = 0; acc && b < len; b++) {
        if (((unsigned char)acc[b] & 0xc0) != 0x80 && chars++ == AC_ANSWER_MAX) {
            acc[b] = '\0';
            break;
        }
    }
    return acc;
}

/* Every child chat, oldest first by (created_at, id), into *out; the count, or -1. */
static int s_ac_children(PGconn *conn, ac_child_t **out, ac_offenders_t *o) {
    static const char *const sql =
        "SELECT c.id::text, c.parent_chat_id::text, c.status::text, c.worker_id IS NOT NULL,"
        " c.waiting_on_agents, c.depth,"
        " (SELECT min(f.id) FROM chat_messages f WHERE f.chat_id = c.id),"
        " EXISTS (SELECT 1 FROM chat_heartbeats h WHERE h.chat_id = c.id"
        " AND h.runner_id = c.runner_id),"
        " (SELECT max(u.id) FROM chat_messages u WHERE u.chat_id = c.id AND u.role = 'user'),"
        " (SELECT m.content::text FROM chat_messages m WHERE m.chat_id = c.id"
        " AND m.role = 'assistant' AND NOT m.deleted AND m.visibility <> 'model'"
        " AND (m.structured_output ->> 'type') IS DISTINCT FROM 'structured-output-outcome'"
        " ORDER BY m.id DESC LIMIT 1),"
        " q.rid IS NOT NULL, (SELECT r.structured_output::text FROM chat_messages r"
        " WHERE r.chat_id = c.id AND r.structured_output_request_id = q.rid"
        " AND r.structured_output ->> 'type' = 'structured-output-outcome'"
        " ORDER BY r.id DESC LIMIT 1)"
        " FROM chats c LEFT JOIN LATERAL (SELECT CASE WHEN u.structured_output ->> 'type' ="
        " 'structured-output-request' THEN u.structured_output_request_id END AS rid"
        " FROM chat_messages u WHERE u.chat_id = c.id AND u.role = 'user' AND NOT u.deleted"
        " AND u.visibility <> 'model' ORDER BY u.id DESC LIMIT 1) q ON true"
        " WHERE c.parent_chat_id IS NOT NULL ORDER BY c.created_at, c.id";
    PGresult *res = s_ac_query(conn, sql, o, "children");
    if (!res) {
        return -1;
    }
    int n = PQntuples(res);
    ac_child_t *kids = mem_calloc((size_t)n + 1, sizeof *kids);
    for (int i = 0; i < n; i++) {
        ac_child_t *k = &kids[i];
        snprintf(k->id, sizeof k->id, "%s", PQgetvalue(res, i, 0));
        snprintf(k->parent, sizeof k->parent, "%s", PQgetvalue(res, i, 1));
        snprintf(k->status, sizeof k->status, "%s", PQgetvalue(res, i, 2));
        k->owned = s_ac_bool(res, i, 3);
        k->agent_wait = s_ac_bool(res, i, 4);
        k->depth = (int)s_ac_int(res, i, 5);
        k->first_row = s_ac_int(res, i, 6);
        k->leased = s_ac_bool(res, i, 7);
        k->last_user = s_ac_int(res, i, 8);
        k->answer = PQgetisnull(res, i, 9) ? NULL : s_ac_answer(PQgetvalue(res, i, 9));
        k->structured = s_ac_bool(res, i, 10);
        k->receipt = PQgetisnull(res, i, 11) ? NULL : json_loads(PQgetvalue(res, i, 11), 0, NULL);
    }
    PQclear(res);
    *out = kids;
    return n;
}

/* Every wait_agent call with its first result and how many it has, into *out, oldest call
 * first; the count, or -1. */
static int s_ac_calls(PGconn *conn, ac_call_t **out, ac_offenders_t *o) {
    static const char *const calls_sql =
        "SELECT m.chat_id::text, e.p ->> 'tool_call_id', bool_or(NOT m.deleted),"
        " (array_agg((e.p -> 'args')::text ORDER BY m.deleted, m.id))[1]"
        " FROM chat_messages m, jsonb_array_elements(m.content::jsonb) e(p)"
        " WHERE m.role = 'assistant' AND e.p ->> 'type' = 'tool-call'"
        " AND e.p ->> 'tool_name' = 'wait_agent' GROUP BY 1, 2 ORDER BY min(m.id)";
    static const char *const results_sql =
        "WITH w AS (SELECT DISTINCT m.chat_id, e.p ->> 'tool_call_id' AS call_id"
        " FROM chat_messages m, jsonb_array_elements(m.content::jsonb) e(p)"
        " WHERE m.role = 'assistant' AND e.p ->> 'type' = 'tool-call'"
        " AND e.p ->> 'tool_name' = 'wait_agent')"
        " SELECT t.chat_id::text, w.call_id, (f.p ->> 'is_error') = 'true',"
        " (f.p -> 'result')::text, t.id"
        " FROM chat_messages t CROSS JOIN LATERAL jsonb_array_elements(t.content::jsonb) f(p)"
        " JOIN w ON w.chat_id = t.chat_id AND w.call_id = f.p ->> 'tool_call_id'"
        " WHERE t.role = 'tool' AND f.p ->> 'type' = 'tool-result' ORDER BY t.id";
    PGresult *res = s_ac_query(conn, calls_sql, o, "wait_agent calls");
    if (!res) {
        return -1;
    }
    int n = PQntuples(res);
    ac_call_t *calls = mem_calloc((size_t)n + 1, sizeof *calls);
    json_t *index = json_object(); /* "chat/call" -> its index */
    for (int i = 0; i < n; i++) {
        ac_call_t *c = &calls[i];
        snprintf(c->chat, sizeof c->chat, "%s", PQgetvalue(res, i, 0));
        snprintf(c->call_id, sizeof c->call_id, "%s", PQgetvalue(res, i, 1));
        c->live = s_ac_bool(res, i, 2);
        c->args = json_loads(PQgetvalue(res, i, 3), 0, NULL);
        char *key = mem_printf("%s/%s", c->chat, c->call_id);
        json_object_set_new(index, key, json_integer(i));
        free(key);
    }
    PQclear(res);
    res = s_ac_query(conn, results_sql, o, "wait_agent results");
    for (int i = 0; res && i < PQntuples(res); i++) {
        char *key = mem_printf("%s/%s", PQgetvalue(res, i, 0), PQgetvalue(res, i, 1));
        json_t *at = json_object_get(index, key);
        free(key);
        if (!at) {
            continue; /* a call id longer than AC_CALL_ID_MAX: never made by the sim */
        }
        ac_call_t *c = &calls[json_integer_value(at)];
        if (c->results++ == 0) {
            c->is_error = s_ac_bool(res, i, 2);
            c->result = json_loads(PQgetvalue(res, i, 3), 0, NULL);
            c->result_row = s_ac_int(res, i, 4);
        }
    }
    PQclear(res);
    json_decref(index);
    *out = calls;
    return n;
}

/* The index of the child with id, or -1 (a map from id to index: built once by the caller). */
static int s_ac_find(json_t *by_id, const char *id) {
    json_t *at = id ? json_object_get(by_id, id) : NULL;
    return at ? (int)json_integer_value(at) : -1;
}

/* The ids the call names, as a new array: args.agent_ids when it is a non-empty array; else
 * every child of the chat whose first row was inserted before the result row (ids come from one
 * sequence, drawn at the insert; the resumption inserts its result after reading the children),
 * in the product's order (created_at, id; kids is in that order). */
static json_t *s_ac_named(const ac_call_t *c, const ac_child_t *kids, int nkids) {
    json_t *ids = json_object_get(c->args, "agent_ids");
    if (json_is_array(ids) && json_array_size(ids) > 0) {
        return json_incref(ids);
    }
    json_t *all = json_array();
    for (int i = 0; i < nkids; i++) {
        if (!strcmp(kids[i].parent, c->chat) && kids[i].first_row > 0 &&
            kids[i].first_row < c->result_row) {
            json_array_append_new(all, json_string(kids[i].id));
        }
    }
    return all;
}

/* Checks one child entry of a resumption against the child now. */
static void s_ac_entry(const ac_call_t *c, size_t k, const json_t *entry, const json_t *want,
                       const ac_child_t *kids, json_t *by_id, ac_counts_t *n, ac_offenders_t *o) {
    const char *id = json_string_value(json_object_get(entry, "agent_id"));
    const char *status = json_string_value(json_object_get(entry, "status"));
    const char *wanted = json_string_value(want);
    n->entries++;
    if (!id || !wanted || strcmp(id, wanted) != 0) {
        s_ac_offend(o, "%s/%s(entry %zu names %s, the call %s)", c->chat, c->call_id, k,
                    id ? id : "nothing", wanted ? wanted : "a non-string");
        return;
    }
    int i = s_ac_find(by_id, id);
    const ac_child_t *kid = i >= 0 && !strcmp(kids[i].parent, c->chat) ? &kids[i] : NULL;
    status = status ? status : "";
    if (!kid) {
        n->by_status[2]++;
        if (strcmp(status, "not_found") != 0) {
            s_ac_offend(o, "%s/%s(%s is no child, status %s)", c->chat, c->call_id, id, status);
        }
        return;
    }
    bool completed = !strcmp(status, "completed");
    if (!completed && strcmp(status, "error") != 0) {
        s_ac_offend(o, "%s/%s(child %s status %s)", c->chat, c->call_id, id, status);
        return;
    }
    n->by_status[completed ? 0 : 1]++;
    if (kid->last_user > c->result_row) {
        n->not_compared++; /* it ran again after the resumption (README.md) */
        s_ac_offend(n->notes, "%s/%s(child %s)", c->chat, c->call_id, id);
        return;
    }
    if (strcmp(kid->status, completed ? "waiting" : "error") != 0) {
        s_ac_offend(o, "%s/%s(child %s %s, now %s)", c->chat, c->call_id, id, status, kid->status);
        return;
    }
    if (!completed) {
        return;
    }
    const json_t *answer = json_object_get(entry, "answer");
    n->answers++;
    if ((answer != NULL) != (kid->answer != NULL) ||
        (answer && (!json_is_string(answer) || strcmp(json_string_value(answer), kid->answer)))) {
        s_ac_offend(o, "%s/%s(child %s: answer %.40s%s, latest text %.40s%s)", c->chat, c->call_id,
                    id, answer ? json_string_value(answer) : "none", answer ? "..." : "",
                    kid->answer ? kid->answer : "none", kid->answer ? "..." : "");
    }
    const json_t *value = json_object_get(entry, "value");
    const char *rs = json_string_value(json_object_get(kid->receipt, "status"));
    if (kid->structured && rs && !strcmp(rs, "succeeded")) {
        n->values++;
        if (!value || !json_equal(value, json_object_get(kid->receipt, "value"))) {
            s_ac_offend(o, "%s/%s(child %s: %s value, not its receipt's)", c->chat, c->call_id, id,
                        value ? "another" : "no");
        }
    } else if (value) {
        n->unasked++;
    }
}

/* Checks one call: its results' count and, for a resumption, every entry. */
static void s_ac_call(const ac_call_t *c, const ac_child_t *kids, int nkids, json_t *by_id,
                      ac_counts_t *n, ac_offenders_t *o) {
    n->calls++;
    n->deleted_calls += !c->live;
    if (c->results > 1) {
        s_ac_offend(o, "%s/%s(%d results)", c->chat, c->call_id, c->results);
    } else if (c->results == 0 && c->live) {
        s_ac_offend(o, "%s/%s(no result)", c->chat, c->call_id);
    }
    if (c->results == 0) {
        n->deleted_unanswered += !c->live;
        return;
    }
    if (c->is_error) {
        n->errors++; /* canceled by an interrupt or an edit of the turn */
        return;
    }
    n->resumptions++;
    json_t *agents = json_object_get(c->result, "agents");
    json_t *want = s_ac_named(c, kids, nkids);
    if (!json_is_array(agents) || json_array_size(agents) != json_array_size(want)) {
        s_ac_offend(o, "%s/%s(%zu entries for %zu named children)", c->chat, c->call_id,
                    json_array_size(agents), json_array_size(want));
    } else {
        for (size_t k = 0; k < json_array_size(agents); k++) {
            s_ac_entry(c, k, json_array_get(agents, k), json_array_get(want, k), kids, by_id, n, o);
        }
    }
    json_decref(want);
}

/* Chats left in an agent wait, and children not idle: one is idle when it is waiting or in
 * error, not in an agent wait, and no runner holds it. Its worker_id may still be set when its
 * runner lost its lease (a PostgreSQL restart or a stop held its heartbeats past the stale
 * threshold) between the bundle that ended its turn and the Abandon that would have followed:
 * the runner is cleaned up without an Abandon, and the chat, not runnable, waits with a stale
 * owner, which by ARCHITECTURE.md §6 is no owner (the next Acquire takes it at once). Those
 * are counted in *stale. A lease row of its runner still present at the check (every
 * heartbeater deletes the rows older than the stale threshold each tick, and the check runs
 * long after the last turn) is a runner holding an ended child: that fails. */
static void s_ac_ends(PGconn *conn, const ac_child_t *kids, int nkids, int *waits_left, int *idle,
                      int *stale, ac_offenders_t *o) {
    PGresult *res = s_ac_query(conn, "SELECT id::text FROM chats WHERE waiting_on_agents", o,
                               "agent waits left");
    *waits_left = res ? PQntuples(res) : 0;
    for (int i = 0; i < *waits_left; i++) {
        s_ac_offend(o, "%s(left in an agent wait)", PQgetvalue(res, i, 0));
    }
    PQclear(res);
    *idle = 0;
    *stale = 0;
    for (int i = 0; i < nkids; i++) {
        const ac_child_t *k = &kids[i];
        bool ended = !strcmp(k->status, "waiting") || !strcmp(k->status, "error");
        if (ended && !k->leased && !k->agent_wait) {
            (*idle)++;
            *stale += k->owned;
        } else {
            s_ac_offend(o, "%s(child of %s ends %s%s%s)", k->id, k->parent, k->status,
                        k->agent_wait ? ", in an agent wait" : "",
                        k->leased ? ", leased by a runner" : "");
        }
    }
}

/* The subagent tools' results in history: "name=results(errors)" pairs. */
static void s_ac_tools(PGconn *conn, char *out, size_t cap, ac_offenders_t *o) {
    PGresult *res = s_ac_query(
        conn,
        "SELECT f.p ->> 'tool_name', count(*), count(*) FILTER (WHERE f.p ->> 'is_error' ="
        " 'true') FROM chat_messages t, jsonb_array_elements(t.content::jsonb) f(p) WHERE t.role ="
        " 'tool' AND NOT t.deleted AND f.p ->> 'type' = 'tool-result' AND f.p ->> 'tool_name'"
        " IN ('spawn_agent', 'message_agent', 'interrupt_agent', 'list_agents') GROUP BY 1"
        " ORDER BY 1",
        o, "subagent tool results");
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; res && i < PQntuples(res) && len < cap; i++) {
        int w = snprintf(out + len, cap - len, "%s%s %s (%s errors)", i ? ", " : "",
                         PQgetvalue(res, i, 0), PQgetvalue(res, i, 1), PQgetvalue(res, i, 2));
        len += w > 0 ? (size_t)w : 0;
    }
    PQclear(res);
}

/* Up to AC_ERRORS_SHOWN distinct errors of the subagent tools' results, for the log. */
static void s_ac_tool_errors(PGconn *conn, char *out, size_t cap, ac_offenders_t *o) {
    PGresult *res = s_ac_query(
        conn,
        "SELECT DISTINCT f.p ->> 'tool_name', left(f.p -> 'result' ->> 'error', 70)"
        " FROM chat_messages t, jsonb_array_elements(t.content::jsonb) f(p) WHERE t.role = 'tool'"
        " AND NOT t.deleted AND f.p ->> 'type' = 'tool-result' AND f.p ->> 'is_error' = 'true'"
        " AND f.p ->> 'tool_name' IN ('spawn_agent', 'message_agent', 'interrupt_agent',"
        " 'list_agents', 'wait_agent') ORDER BY 1, 2 LIMIT " AC_STR(AC_ERRORS_SHOWN),
        o, "subagent tool errors");
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; res && i < PQntuples(res) && len < cap; i++) {
        int w = snprintf(out + len, cap - len, "%s%s: \"%s\"", i ? "; " : "", PQgetvalue(res, i, 0),
                         PQgetvalue(res, i, 1));
        len += w > 0 ? (size_t)w : 0;
    }
    PQclear(res);
}

int agentcheck_check(PGconn *conn, const agentcheck_sent_t *sent) {
    ac_offenders_t o = {0};
    ac_offenders_t notes = {0};
    ac_counts_t n = {.notes = &notes};
    ac_child_t *kids = NULL;
    ac_call_t *calls = NULL;
    int nkids = s_ac_children(conn, &kids, &o);
    int ncalls = nkids >= 0 ? s_ac_calls(conn, &calls, &o) : -1;
    json_t *by_id = json_object();
    int nested = 0;
    for (int i = 0; i < nkids; i++) {
        json_object_set_new(by_id, kids[i].id, json_integer(i));
        nested += kids[i].depth > 1;
    }
    json_t *chats = json_object();
    for (int i = 0; i < ncalls; i++) {
        s_ac_call(&calls[i], kids, nkids, by_id, &n, &o);
        json_object_set_new(chats, calls[i].chat, json_true());
    }
    int waits_left = 0;
    int idle = 0;
    int stale = 0;
    if (nkids >= 0) {
        s_ac_ends(conn, kids, nkids, &waits_left, &idle, &stale, &o);
    }
    char tools[400];
    s_ac_tools(conn, tools, sizeof tools, &o);
    char errors[1200];
    s_ac_tool_errors(conn, errors, sizeof errors, &o);
    printf("chaos: agent waits: %d wait_agent calls in %zu chats (%d in deleted rows): %d"
           " resumptions with every child's result, %d answered with an error (canceled), %d"
           " deleted without a result\n",
           n.calls, json_object_size(chats), n.deleted_calls, n.resumptions, n.errors,
           n.deleted_unanswered);
    printf("chaos: agent waits: %d child entries (%d completed, %d error, %d not_found): %d"
           " answers and %d structured values compared with the child now, %d not compared (a"
           " message reached the child after the resumption), %d values of an earlier request\n",
           n.entries, n.by_status[0], n.by_status[1], n.by_status[2], n.answers, n.values,
           n.not_compared, n.unasked);
    if (notes.n > 0) {
        printf("chaos: agent waits: not compared: %s\n", notes.text);
    }
    printf("chaos: subagents: %d turns sent (%d accepted, asking for %d children), %d GET answers"
           " showed an agent wait; %d children in the database (%d nested), %d idle (%d of them"
           " with the stale owner of a runner that lost its lease); %d chats left in an agent wait;"
           " tool results: %s\n",
           sent->turns, sent->accepted, sent->children, sent->waits_seen, nkids > 0 ? nkids : 0,
           nested, idle, stale, waits_left, tools[0] ? tools : "none");
    printf("chaos: subagents: distinct tool errors: %s\n", errors[0] ? errors : "none");
    for (int i = 0; i < nkids; i++) {
        free(kids[i].answer);
        json_decref(kids[i].receipt);
    }
    for (int i = 0; i < ncalls; i++) {
        json_decref(calls[i].args);
        json_decref(calls[i].result);
    }
    free(kids);
    free(calls);
    json_decref(by_id);
    json_decref(chats);
    if (o.n == 0) {
        printf("chaos: invariant %-22s OK\n", "agent_waits_resume_once");
        return 0;
    }
    printf("chaos: invariant %-22s FAILED (%d): %s\n", "agent_waits_resume_once", o.n, o.text);
    return 1;
}
