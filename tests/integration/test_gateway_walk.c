/*
 * Walks every state-changing HTTP endpoint against every execution state (the 13 states,
 * with queue lengths 1 and 2 where a queue exists, plus four kinds of Invalid), through a
 * real chatfleet-gateway on a real PostgreSQL. The test acts as the worker to put each chat
 * in its state (chatstate directly; Invalid through SQL, as test_chatstate_walk does), sends
 * one request, and checks it against the move table of ARCHITECTURE.md §4.3 per endpoint,
 * transcribed below as the test's own expectation:
 * an accepted move answers its 2xx and lands in the listed state (read back through
 * GET /chats/{id} and GET /messages), with the queue length the transition implies; a
 * rejected one answers 409 with the envelope (or 409 "Chat is in an invalid state.", 404
 * for N, 400 for an archived flag that is already set: ARCHITECTURE.md §11) and leaves every
 * row of the chat exactly as it was.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chatstate.h"
#include "mem.h"
#include "proc.h"
#include "chatsetup.h"
#include "testdb.h"

/* The tables of ARCHITECTURE.md §4.3, one line per supported (input state, result). The queue note
 * in parentheses is the change in queue length the transition implies: +1, 0, -1, or "=0"
 * (cleared). A "/ last" or "/ non-empty" variant applies only with one or with two queued
 * messages; "/ no queued" and "/ queued" (reconcile) only without or with a queue. */
static const char *s_table[] = {
    "create: N -> R0 (0)",
    "create_empty: N -> W (0)",
    "archive: W -> XW (0)",
    "archive: E0 -> XE0 (0)",
    "archive: E1 -> XE1 (0)",
    "unarchive: XW -> W (0)",
    "unarchive: XE0 -> E0 (0)",
    "unarchive: XE1 -> E1 (0)",
    /* A title is metadata: every existing state keeps its state. */
    "retitle: W -> W (0)",
    "retitle: E0 -> E0 (0)",
    "retitle: E1 -> E1 (0)",
    "retitle: R0 -> R0 (0)",
    "retitle: R1 -> R1 (0)",
    "retitle: I0 -> I0 (0)",
    "retitle: I1 -> I1 (0)",
    "retitle: A0 -> A0 (0)",
    "retitle: A1 -> A1 (0)",
    "retitle: XW -> XW (0)",
    "retitle: XE0 -> XE0 (0)",
    "retitle: XE1 -> XE1 (0)",
    "retitle: Invalid -> Invalid (0)",
    /* Archive and title in one bundle: where archiving is refused the title is too. */
    "archive_retitle: W -> XW (0)",
    "archive_retitle: E0 -> XE0 (0)",
    "archive_retitle: E1 -> XE1 (0)",
    "send_queue: W -> R0 (0)",
    "send_queue: E0 -> R0 (0)",
    "send_queue: E1 -> R1 (0)", /* appends m and promotes the head */
    "send_queue: R0 -> R1 (+1)",
    "send_queue: R1 -> R1 (+1)",
    "send_queue: I0 -> I1 (+1)",
    "send_queue: I1 -> I1 (+1)",
    "send_queue: A0 -> A1 (+1)",
    "send_queue: A1 -> A1 (+1)",
    "send_interrupt: W -> R0 (0)",
    "send_interrupt: E0 -> R0 (0)",
    "send_interrupt: E1 -> R1 (0)",
    "send_interrupt: R0 -> I1 (+1)",
    "send_interrupt: R1 -> I1 (+1)",
    "send_interrupt: I0 -> I1 (+1)",
    "send_interrupt: I1 -> I1 (+1)",
    "send_interrupt: A0 -> R1 (+1)",
    "send_interrupt: A1 -> R1 (+1)",
    /* No worker owns the chat: FinishInterruption in the same transaction promotes the head
     * (from R0 that is m itself). */
    "send_interrupt_unowned: W -> R0 (0)",
    "send_interrupt_unowned: E0 -> R0 (0)",
    "send_interrupt_unowned: E1 -> R1 (0)",
    "send_interrupt_unowned: R0 -> R0 (0)",
    "send_interrupt_unowned: R1 -> R1 (0)",
    "send_interrupt_unowned: I0 -> R0 (0)",
    "send_interrupt_unowned: I1 -> R1 (0)",
    "send_interrupt_unowned: A0 -> R1 (+1)",
    "send_interrupt_unowned: A1 -> R1 (+1)",
    "edit: W -> R0 (=0)",
    "edit: E0 -> R0 (=0)",
    "edit: E1 -> R0 (=0)",
    "edit: R0 -> R0 (=0)",
    "edit: R1 -> R0 (=0)",
    "edit: I0 -> R0 (=0)",
    "edit: I1 -> R0 (=0)",
    "edit: A0 -> R0 (=0)",
    "edit: A1 -> R0 (=0)",
    "delete_queued: E1 -> E0 (-1) / last",
    "delete_queued: E1 -> E1 (-1) / non-empty",
    "delete_queued: R1 -> R0 (-1) / last",
    "delete_queued: R1 -> R1 (-1) / non-empty",
    "delete_queued: I1 -> I0 (-1) / last",
    "delete_queued: I1 -> I1 (-1) / non-empty",
    "delete_queued: A1 -> A0 (-1) / last",
    "delete_queued: A1 -> A1 (-1) / non-empty",
    "promote_queued: E1 -> R0 (-1) / last",
    "promote_queued: E1 -> R1 (-1) / non-empty",
    "promote_queued: R1 -> I1 (0)",
    "promote_queued: I1 -> I1 (0)",
    "promote_queued: A1 -> R0 (-1) / last",
    "promote_queued: A1 -> R1 (-1) / non-empty",
    "interrupt: R0 -> I0 (0)",
    "interrupt: R1 -> I1 (0)",
    "interrupt: A0 -> R0 (0)",
    "interrupt: A1 -> R1 (0)",
    /* Unowned: FinishInterruption in the same transaction; an owned I0/I1 is rejected. */
    "interrupt_unowned: R0 -> W (0)",
    "interrupt_unowned: R1 -> R0 (-1) / last",
    "interrupt_unowned: R1 -> R1 (-1) / non-empty",
    "interrupt_unowned: I0 -> W (0)",
    "interrupt_unowned: I1 -> R0 (-1) / last",
    "interrupt_unowned: I1 -> R1 (-1) / non-empty",
    "interrupt_unowned: A0 -> R0 (0)",
    "interrupt_unowned: A1 -> R1 (0)",
    "tool_results: A0 -> R0 (0)",
    "tool_results: A1 -> R1 (0)",
    "compact: W -> R0 (0)",
    "compact: E0 -> R0 (0)",
    "compact: E1 -> R1 (0)",
    "clear: W -> W (0)",
    "clear: E0 -> W (0)",
    "reconcile: Invalid -> E0 (0) / no queued",
    "reconcile: Invalid -> E1 (0) / queued",
};

typedef enum {
    EP_CREATE = 0,
    EP_CREATE_EMPTY,
    EP_ARCHIVE,
    EP_UNARCHIVE,
    EP_RETITLE,
    EP_ARCHIVE_RETITLE,
    EP_SEND_QUEUE,
    EP_SEND_INTERRUPT,
    EP_SEND_INTERRUPT_UNOWNED,
    EP_EDIT,
    EP_DELETE_QUEUED,
    EP_PROMOTE_QUEUED,
    EP_INTERRUPT,
    EP_INTERRUPT_UNOWNED,
    EP_TOOL_RESULTS,
    EP_COMPACT,
    EP_CLEAR,
    EP_RECONCILE,
    EP_COUNT
} endpoint_t;

static const struct {
    const char *name;
    const char *method;
    const char *path; /* %1$s: chat id, %2$lld: message or queued message id */
    const char *body;
    long ok_status; /* ARCHITECTURE.md §11 */
    bool unowned;   /* the chat is set up without an owner */
} s_endpoints[EP_COUNT] = {
    [EP_CREATE] = {"create", "POST", "/api/v2/chats",
                   "{\"content\":[{\"type\":\"text\",\"text\":\"new\"}]}", 201, false},
    [EP_CREATE_EMPTY] = {"create_empty", "POST", "/api/v2/chats", "{\"content\":[]}", 201, false},
    [EP_ARCHIVE] = {"archive", "PATCH", "/api/v2/chats/%1$s", "{\"archived\":true}", 204, false},
    [EP_UNARCHIVE] = {"unarchive", "PATCH", "/api/v2/chats/%1$s", "{\"archived\":false}", 204,
                      false},
    [EP_RETITLE] = {"retitle", "PATCH", "/api/v2/chats/%1$s", "{\"title\":\"walked\"}", 204, false},
    [EP_ARCHIVE_RETITLE] = {"archive_retitle", "PATCH", "/api/v2/chats/%1$s",
                            "{\"archived\":true,\"title\":\"walked\"}", 204, false},
    [EP_SEND_QUEUE] = {"send_queue", "POST", "/api/v2/chats/%1$s/messages",
                       "{\"content\":[{\"type\":\"text\",\"text\":\"m\"}],"
                       "\"busy_behavior\":\"queue\"}",
                       200, false},
    [EP_SEND_INTERRUPT] = {"send_interrupt", "POST", "/api/v2/chats/%1$s/messages",
                           "{\"content\":[{\"type\":\"text\",\"text\":\"m\"}],"
                           "\"busy_behavior\":\"interrupt\"}",
                           200, false},
    [EP_SEND_INTERRUPT_UNOWNED] = {"send_interrupt_unowned", "POST", "/api/v2/chats/%1$s/messages",
                                   "{\"content\":[{\"type\":\"text\",\"text\":\"m\"}],"
                                   "\"busy_behavior\":\"interrupt\"}",
                                   200, true},
    [EP_EDIT] = {"edit", "PATCH", "/api/v2/chats/%1$s/messages/%2$lld",
                 "{\"content\":[{\"type\":\"text\",\"text\":\"edited\"}]}", 200, false},
    [EP_DELETE_QUEUED] = {"delete_queued", "DELETE", "/api/v2/chats/%1$s/queue/%2$lld", NULL, 204,
                          false},
    [EP_PROMOTE_QUEUED] = {"promote_queued", "POST", "/api/v2/chats/%1$s/queue/%2$lld/promote",
                           NULL, 202, false},
    [EP_INTERRUPT] = {"interrupt", "POST", "/api/v2/chats/%1$s/interrupt", NULL, 200, false},
    [EP_INTERRUPT_UNOWNED] = {"interrupt_unowned", "POST", "/api/v2/chats/%1$s/interrupt", NULL,
                              200, true},
    [EP_TOOL_RESULTS] = {"tool_results", "POST", "/api/v2/chats/%1$s/tool-results",
                         "{\"results\":[{\"tool_call_id\":\"dyn_1\",\"output\":{\"ok\":true}}]}",
                         204, false},
    /* 200 with the chat, as api-shapes.md §2 says; the compaction runs later on a worker
     * (ARCHITECTURE.md §11). */
    [EP_COMPACT] = {"compact", "POST", "/api/v2/chats/%1$s/compact", NULL, 200, false},
    [EP_CLEAR] = {"clear", "POST", "/api/v2/chats/%1$s/clear", NULL, 200, false},
    [EP_RECONCILE] = {"reconcile", "POST", "/api/v2/chats/%1$s/reconcile-invalid", NULL, 200,
                      false},
};

#define NO_ID 999999999LL

static testdb_t *s_db;
static PGconn *s_conn;
static pid_t s_gw;
static char s_base[64];
static char *s_token;
static char s_owner[ID_UUID_LEN + 1];

static int64_t s_id(const char *sql_fmt, const char *chat) {
    char *sql = mem_printf(sql_fmt, chat);
    char *v = testdb_scalar(s_conn, sql);
    free(sql);
    int64_t id = v ? strtoll(v, NULL, 10) : NO_ID;
    free(v);
    return id;
}

/* ---- HTTP ---- */

static json_t *s_http(const char *method, const char *path, const char *body, long *status) {
    char url[320];
    snprintf(url, sizeof url, "%s%s", s_base, path);
    proc_http_t r;
    if (proc_http(method, url, s_token, body, &r) != 0) {
        fail_msg("%s %s: no response", method, path);
    }
    *status = r.status;
    json_t *v = r.body[0] ? json_loads(r.body, 0, NULL) : NULL;
    if (r.body[0] && !v) {
        fail_msg("%s %s: %ld with a body that is not JSON: %s", method, path, r.status, r.body);
    }
    proc_http_free(&r);
    return v;
}

/* The error envelope of ARCHITECTURE.md §11: message, optional detail and validations, and
 * nothing else. */
static void s_check_envelope(json_t *e, const char *what) {
    const char *key;
    json_t *v;
    if (!json_is_object(e) || !json_is_string(json_object_get(e, "message")) ||
        json_string_length(json_object_get(e, "message")) == 0) {
        fail_msg("%s: not an error envelope", what);
    }
    json_object_foreach(e, key, v) {
        bool ok = !strcmp(key, "message") || (!strcmp(key, "detail") && json_is_string(v)) ||
                  (!strcmp(key, "validations") && json_is_array(v));
        if (!ok) {
            fail_msg("%s: unexpected envelope member %s", what, key);
        }
    }
}

/* The execution state as the API shows it: GET /chats/{id} and GET /messages. */
static const char *s_api_state(const char *chat, int *queued) {
    char *path = mem_printf("/api/v2/chats/%s", chat);
    long st;
    json_t *c = s_http("GET", path, NULL, &st);
    free(path);
    if (st == 404) {
        json_decref(c);
        *queued = 0;
        return "N";
    }
    if (st != 200) {
        fail_msg("GET chat %s: %ld", chat, st);
    }
    path = mem_printf("/api/v2/chats/%s/messages", chat);
    json_t *m = s_http("GET", path, NULL, &st);
    free(path);
    if (st != 200) {
        fail_msg("GET messages %s: %ld", chat, st);
    }
    *queued = (int)json_array_size(json_object_get(m, "queued_messages"));
    const char *status = json_string_value(json_object_get(c, "status"));
    bool archived = json_is_true(json_object_get(c, "archived"));
    static char out[16];
    const char *q = *queued > 0 ? "1" : "0";
    if (!status) {
        fail_msg("chat %s has no status", chat);
    }
    if (!strcmp(status, "waiting") && *queued == 0) {
        snprintf(out, sizeof out, "%sW", archived ? "X" : "");
    } else if (!strcmp(status, "error")) {
        snprintf(out, sizeof out, "%sE%s", archived ? "X" : "", q);
    } else if (archived || !strcmp(status, "waiting")) {
        snprintf(out, sizeof out, "Invalid");
    } else if (!strcmp(status, "running")) {
        snprintf(out, sizeof out, "R%s", q);
    } else if (!strcmp(status, "interrupting")) {
        snprintf(out, sizeof out, "I%s", q);
    } else if (!strcmp(status, "requires_action")) {
        snprintf(out, sizeof out, "A%s", q);
    } else {
        snprintf(out, sizeof out, "Invalid");
    }
    json_decref(m);
    json_decref(c);
    return out;
}

/* The table's line for (endpoint, state, queue length): the resulting state and the queue
 * change (*delta; *cleared for "=0"), or NULL when the endpoint does not support the state. */
static bool s_hit[sizeof s_table / sizeof s_table[0]];

static const char *s_expect(endpoint_t ep, const char *state, int queued, int *delta,
                            bool *cleared) {
    for (size_t i = 0; i < sizeof s_table / sizeof s_table[0]; i++) {
        char name[32];
        char from[16];
        char to[16];
        char q[8];
        char variant[32] = "";
        int n = sscanf(s_table[i], "%31[^:]: %15s -> %15s (%7[^)]) / %31[^\n]", name, from, to, q,
                       variant);
        if (n < 4) {
            fail_msg("bad table line %s", s_table[i]);
        }
        if (strcmp(name, s_endpoints[ep].name) || strcmp(from, state)) {
            continue;
        }
        if ((!strcmp(variant, "last") && queued != 1) ||
            (!strcmp(variant, "non-empty") && queued < 2) ||
            (!strcmp(variant, "no queued") && queued != 0) ||
            (!strcmp(variant, "queued") && queued == 0)) {
            continue;
        }
        s_hit[i] = true;
        *cleared = !strcmp(q, "=0");
        *delta = *cleared ? 0 : (int)strtol(q, NULL, 10);
        static char out[16];
        snprintf(out, sizeof out, "%s", to);
        return out;
    }
    return NULL;
}

/* The status and envelope a rejected request must carry. */
static void s_check_rejection(endpoint_t ep, const chatsetup_t *s, bool archived, long status,
                              json_t *body, const char *what) {
    s_check_envelope(body, what);
    const char *message = json_string_value(json_object_get(body, "message"));
    const char *detail = json_string_value(json_object_get(body, "detail"));
    bool redundant = ((ep == EP_ARCHIVE || ep == EP_ARCHIVE_RETITLE) && archived) ||
                     (ep == EP_UNARCHIVE && !archived);
    if (!strcmp(s->name, "N")) {
        if (status != 404) {
            fail_msg("%s: want 404, got %ld", what, status);
        }
    } else if (redundant) {
        /* ARCHITECTURE.md §11: the flag is already set; no transition is attempted. */
        const char *want = archived ? "Chat is already archived." : "Chat is already not archived.";
        if (status != 400 || strcmp(message, want) != 0) {
            fail_msg("%s: want 400 \"%s\", got %ld \"%s\"", what, want, status, message);
        }
    } else if (!strcmp(s->name, "Invalid")) {
        if (status != 409 || strcmp(message, "Chat is in an invalid state.") != 0) {
            fail_msg("%s: want 409 invalid state, got %ld \"%s\"", what, status, message);
        }
    } else if (ep == EP_RECONCILE) {
        if (status != 409 || strcmp(message, "Chat is not in an invalid state.") != 0) {
            fail_msg("%s: want 409 \"Chat is not in an invalid state.\", got %ld \"%s\"", what,
                     status, message);
        }
    } else {
        /* A move the state does not allow: 409, and the detail names the state. */
        char *named = mem_printf("state %s:", s->name);
        bool ok = status == 409 && detail && strstr(detail, named);
        free(named);
        if (!ok) {
            fail_msg("%s: want 409 naming state %s, got %ld \"%s\" (%s)", what, s->name, status,
                     message, detail ? detail : "no detail");
        }
    }
}

static void test_every_endpoint_in_every_state_answers_per_the_reference(void **u) {
    (void)u;
    int pairs = 0;
    int accepted = 0;
    int rejected = 0;
    int per_ep[EP_COUNT] = {0};
    for (int ep = 0; ep < EP_COUNT; ep++) {
        bool create = ep == EP_CREATE || ep == EP_CREATE_EMPTY;
        for (int si = 0; si < chatsetup_count; si++) {
            const chatsetup_t *s = &chatsetup_all[si];
            if (create && strcmp(s->name, "N") != 0) {
                continue; /* POST /chats names no chat: only N is an input state */
            }
            char chat[ID_UUID_LEN + 1];
            chatsetup_build(s_conn, s_owner, s, s_endpoints[ep].unowned, chat);
            int q0 = 0;
            const char *st0 = s_api_state(chat, &q0);
            if (strcmp(st0, s->name) != 0 || q0 != s->queued) {
                fail_msg("setup for %s (queue %d) shows %s (queue %d)", s->name, s->queued, st0,
                         q0);
            }
            bool archived = s->name[0] == 'X' || s->invalid_kind >= 2;
            int64_t target = 0;
            if (ep == EP_EDIT) {
                target = s_id("SELECT min(id) FROM chat_messages WHERE chat_id = '%s'"
                              " AND role = 'user'",
                              chat);
            } else if (ep == EP_DELETE_QUEUED) {
                target = s_id("SELECT id FROM chat_queued_messages WHERE chat_id = '%s'"
                              " ORDER BY position, id LIMIT 1",
                              chat);
            } else if (ep == EP_PROMOTE_QUEUED) {
                target = s_id("SELECT id FROM chat_queued_messages WHERE chat_id = '%s'"
                              " ORDER BY position DESC, id DESC LIMIT 1",
                              chat);
            }
            char *d0 = strcmp(s->name, "N") ? chatsetup_digest(s_conn, chat) : NULL;
            char *path = mem_printf(s_endpoints[ep].path, chat, (long long)target);
            long status = 0;
            json_t *body = s_http(s_endpoints[ep].method, path, s_endpoints[ep].body, &status);
            char what[160];
            snprintf(what, sizeof what, "%s %s (queue %d%s)", s_endpoints[ep].name, s->name,
                     s->queued, s_endpoints[ep].unowned ? ", unowned" : "");
            int delta = 0;
            bool cleared = false;
            const char *want = s_expect((endpoint_t)ep, s->name, s->queued, &delta, &cleared);
            pairs++;
            per_ep[ep]++;
            if (want) {
                if (status != s_endpoints[ep].ok_status) {
                    char *t = body ? json_dumps(body, 0) : NULL;
                    fail_msg("%s: want %ld, got %ld %s", what, s_endpoints[ep].ok_status, status,
                             t ? t : "");
                }
                const char *id = chat;
                if (create) {
                    id = json_string_value(json_object_get(body, "id"));
                    assert_non_null(id);
                }
                int q1 = 0;
                const char *got = s_api_state(id, &q1);
                int want_q = cleared ? 0 : s->queued + delta;
                if (strcmp(got, want) != 0 || q1 != want_q) {
                    fail_msg("%s: want %s with %d queued, got %s with %d", what, want, want_q, got,
                             q1);
                }
                if (ep == EP_RETITLE || ep == EP_ARCHIVE_RETITLE) {
                    char *sql = mem_printf("SELECT title || ' ' || title_source FROM chats"
                                           " WHERE id = '%s'",
                                           chat);
                    char *title = testdb_scalar(s_conn, sql);
                    if (!title || strcmp(title, "walked user") != 0) {
                        fail_msg("%s: want the user title \"walked\", got %s", what,
                                 title ? title : "no row");
                    }
                    free(title);
                    free(sql);
                }
                accepted++;
            } else {
                s_check_rejection((endpoint_t)ep, s, archived, status, body, what);
                if (d0) {
                    char *d1 = chatsetup_digest(s_conn, chat);
                    if (strcmp(d0, d1) != 0) {
                        fail_msg("%s was rejected but changed the chat", what);
                    }
                    free(d1);
                }
                rejected++;
            }
            json_decref(body);
            free(path);
            free(d0);
        }
    }
    for (int ep = 0; ep < EP_COUNT; ep++) {
        printf("walk: %-22s %2d states\n", s_endpoints[ep].name, per_ep[ep]);
    }
    printf("walk: checked %d (endpoint, state) pairs over %d endpoints and %d state setups: "
           "%d accepted, %d rejected\n",
           pairs, (int)EP_COUNT, chatsetup_count, accepted, rejected);
    /* Every line of the table was the expectation of at least one pair. */
    for (size_t i = 0; i < sizeof s_table / sizeof s_table[0]; i++) {
        if (!s_hit[i]) {
            fail_msg("table line never checked: %s", s_table[i]);
        }
    }
    assert_int_equal(accepted + rejected, pairs);
    assert_int_equal(pairs, (EP_COUNT - 2) * chatsetup_count + 2);
}

static int s_group_setup(void **state) {
    (void)state;
    s_db = testdb_new();
    s_conn = testdb_connect(s_db);
    char bin[512];
    snprintf(bin, sizeof bin, "%s/api-gateway/chatfleet-gateway", getenv("CHATFLEET_BUILD_DIR"));
    char *url = mem_printf("CHATFLEET_DATABASE_URL=%s", testdb_url(s_db));
    char *uenv[] = {url, NULL};
    char *uargv[] = {bin, "user-add", "walker", NULL};
    s_token = proc_output(uargv, uenv);
    ASSERT(s_token);
    s_token[strcspn(s_token, "\n")] = '\0';
    char *owner = testdb_scalar(s_conn, "SELECT id FROM users WHERE name = 'walker'");
    ASSERT(owner);
    snprintf(s_owner, sizeof s_owner, "%s", owner);
    free(owner);
    int port = proc_free_port();
    snprintf(s_base, sizeof s_base, "http://127.0.0.1:%d", port);
    char *listen = mem_printf("CHATFLEET_HTTP_LISTEN=127.0.0.1:%d", port);
    /* Broker endpoints on free ports where nothing listens: hints go nowhere, which this
     * test does not need (it reads state back with fresh requests). */
    char *pub = mem_printf("CHATFLEET_BROKER_PUB=tcp://127.0.0.1:%d", proc_free_port());
    char *sub = mem_printf("CHATFLEET_BROKER_SUB=tcp://127.0.0.1:%d", proc_free_port());
    char *env[] = {url, listen, pub, sub, "CHATFLEET_QUEUE_MAX=10", NULL};
    char *argv[] = {bin, "serve", NULL};
    s_gw = proc_spawn(argv, env, "test_gateway_walk.log");
    free(url);
    free(listen);
    free(pub);
    free(sub);
    char health[96];
    snprintf(health, sizeof health, "%s/healthz", s_base);
    ASSERT(proc_wait_http(health, 10000) == 0);
    return 0;
}

static int s_group_teardown(void **state) {
    (void)state;
    int rc = proc_stop(s_gw, 5000);
    free(s_token);
    PQfinish(s_conn);
    testdb_destroy(&s_db);
    return rc == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_endpoint_in_every_state_answers_per_the_reference),
    };
    return cmocka_run_group_tests(tests, s_group_setup, s_group_teardown);
}
