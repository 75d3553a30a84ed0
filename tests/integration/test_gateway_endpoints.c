/*
 * The gateway's routes beyond what test_gateway_http covers, end to end on a real
 * PostgreSQL, a real broker and a real chatfleet-gateway: chat list pagination and the
 * archived filter, message cursors, compact, clear (the boundary pair in the visible
 * history), reconcile-invalid, promote (the promoted row keeps its queue id), models, user
 * titles (a move with its update hint, all-or-nothing with archiving), 401 and 404 on every
 * route, an edit's history_reset on the stream, tool-result validation with two pending calls
 * and a syntax error, 413 bodies, the queue cap per state, and the error envelope of
 * ARCHITECTURE.md §11 on every 4xx this file sees.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bus.h"
#include "chatsetup.h"
#include "chatstate.h"
#include "db.h"
#include "gateway.h"
#include "mem.h"
#include "proc.h"
#include "sse.h"
#include "testdb.h"

#define WORKER  "11111111-1111-4111-8111-111111111111"
#define RUNNER  "22222222-2222-4222-8222-222222222222"
#define TEXT(t) "{\"type\":\"text\",\"text\":\"" t "\"}"
#define SEND(t) "{\"content\":[" TEXT(t) "]}"
#define WAIT_MS 8000
#define CAP     2 /* CHATFLEET_QUEUE_MAX of the gateway under test */

static testdb_t *s_db;
static PGconn *s_conn;
static pid_t s_broker;
static pid_t s_gw;
static char s_base[64];
static char s_sub[64]; /* the broker's subscriber endpoint, to read the gateway's hints */
static char s_gw_bin[512];
static char *s_token;
static char s_owner[ID_UUID_LEN + 1];
static int s_envelopes; /* 4xx envelopes checked */

/* ---- HTTP ---- */

/* The error envelope of ARCHITECTURE.md §11: a non-empty message, optional detail and
 * validations ([{field, detail}] with strings), nothing else. */
static void s_check_envelope(json_t *e, const char *what) {
    if (!json_is_object(e) || !json_is_string(json_object_get(e, "message")) ||
        json_string_length(json_object_get(e, "message")) == 0) {
        fail_msg("%s: the 4xx body is not an error envelope", what);
    }
    const char *key;
    json_t *v;
    json_object_foreach(e, key, v) {
        if (!strcmp(key, "message") || (!strcmp(key, "detail") && json_is_string(v))) {
            continue;
        }
        if (strcmp(key, "validations") != 0 || !json_is_array(v) || json_array_size(v) == 0) {
            fail_msg("%s: unexpected envelope member %s", what, key);
        }
        size_t i;
        json_t *val;
        json_array_foreach(v, i, val) {
            if (json_object_size(val) != 2 || !json_is_string(json_object_get(val, "field")) ||
                !json_is_string(json_object_get(val, "detail"))) {
                fail_msg("%s: validations[%zu] is not {field, detail}", what, i);
            }
        }
    }
    s_envelopes++;
}

static json_t *s_req(const char *method, const char *path, const char *token, const char *body,
                     long want) {
    char url[1024];
    snprintf(url, sizeof url, "%s%s", s_base, path);
    proc_http_t r;
    if (proc_http(method, url, token, body, &r) != 0) {
        fail_msg("%s %s: no response", method, path);
    }
    if (r.status != want) {
        fail_msg("%s %s: want %ld, got %ld: %.300s", method, path, want, r.status, r.body);
    }
    json_t *v = r.body[0] ? json_loads(r.body, 0, NULL) : json_null();
    if (!v) {
        fail_msg("%s %s: the body is not JSON: %.300s", method, path, r.body);
    }
    proc_http_free(&r);
    if (want >= 400 && want < 500) {
        char what[300];
        snprintf(what, sizeof what, "%s %s", method, path);
        s_check_envelope(v, what);
    }
    return v;
}

static json_t *s_call(const char *method, const char *path, const char *body, long want) {
    return s_req(method, path, s_token, body, want);
}

static void s_expect_field(json_t *err, const char *field) {
    json_t *v = json_object_get(json_array_get(json_object_get(err, "validations"), 0), "field");
    if (!json_is_string(v) || strcmp(json_string_value(v), field) != 0) {
        char *d = json_dumps(err, 0);
        fail_msg("want field %s in %s", field, d);
    }
}

static void s_expect_detail(json_t *err, const char *part) {
    const char *d = json_string_value(json_object_get(err, "detail"));
    if (!d || !strstr(d, part)) {
        fail_msg("want a detail with \"%s\", got %s", part, d ? d : "none");
    }
}

static const char *s_str(json_t *o, const char *key) {
    return json_string_value(json_object_get(o, key));
}

static json_int_t s_int(json_t *o, const char *key) {
    return json_integer_value(json_object_get(o, key));
}

static char *s_create(const char *token, const char *body) {
    json_t *c = s_req("POST", "/api/v2/chats", token, body, 201);
    char *id = mem_strdup(s_str(c, "id"));
    json_decref(c);
    return id;
}

static json_t *s_chat(const char *chat) {
    char *p = mem_printf("/api/v2/chats/%s", chat);
    json_t *c = s_call("GET", p, NULL, 200);
    free(p);
    return c;
}

static json_t *s_messages(const char *chat, const char *query) {
    char *p = mem_printf("/api/v2/chats/%s/messages%s", chat, query);
    json_t *m = s_call("GET", p, NULL, 200);
    free(p);
    return m;
}

static const char *s_text(json_t *msg) {
    return s_str(json_array_get(json_object_get(msg, "content"), 0), "text");
}

/* ---- The worker's side, through chatstate ---- */

static void s_fence(const char *chat, cs_fence_t *f) {
    char *sql = mem_printf("SELECT status || ' ' || history_version || ' ' || generation_attempt"
                           " FROM chats WHERE id = '%s'",
                           chat);
    char *row = testdb_scalar(s_conn, sql);
    static char status[32];
    long long hv = 0;
    long long ga = 0;
    ASSERT(row && sscanf(row, "%31s %lld %lld", status, &hv, &ga) == 3);
    *f = (cs_fence_t){.worker_id = WORKER,
                      .runner_id = RUNNER,
                      .status = status,
                      .history_version = hv,
                      .generation_attempt = ga};
    free(row);
    free(sql);
}

typedef int (*step_fn)(chatstate_t *cs, const char *chat, void *ctx, cs_error_t *err);

static void s_worker(const char *chat, step_fn fn, void *ctx) {
    cs_error_t err;
    chatstate_t *cs = chatstate_begin(s_conn, &chatsetup_settings, chat, &err);
    if (!cs || fn(cs, chat, ctx, &err) != 0 || chatstate_commit(&cs, NULL, NULL, &err) != 0) {
        fail_msg("worker step on %s: %s", chat, err.message);
    }
}

static int s_acquire(chatstate_t *cs, const char *chat, void *ctx, cs_error_t *err) {
    (void)chat;
    (void)ctx;
    return chatstate_acquire(cs, WORKER, RUNNER, err);
}

/* Commits the assistant texts in ctx (a NULL-terminated array) as one step. */
static int s_step(chatstate_t *cs, const char *chat, void *ctx, cs_error_t *err) {
    const char *const *texts = ctx;
    cs_message_t msgs[8];
    char *contents[8];
    int n = 0;
    for (; texts[n] && n < 8; n++) {
        contents[n] = mem_printf("[" TEXT("%s") "]", texts[n]);
        msgs[n] = (cs_message_t){.role = "assistant", .content = contents[n]};
    }
    cs_fence_t f;
    s_fence(chat, &f);
    int rc = chatstate_commit_step(cs, &f, msgs, n, err);
    for (int i = 0; i < n; i++) {
        free(contents[i]);
    }
    return rc;
}

/* Commits one assistant message with the tool calls named in ctx and requires action. */
static int s_tool_calls(chatstate_t *cs, const char *chat, void *ctx, cs_error_t *err) {
    const char *const *ids = ctx;
    char *content = mem_strdup("[");
    for (int i = 0; ids[i]; i++) {
        char *next = mem_printf("%s%s{\"type\":\"tool-call\",\"tool_call_id\":\"%s\","
                                "\"tool_name\":\"ask\",\"args\":{}}",
                                content, i ? "," : "", ids[i]);
        free(content);
        content = next;
    }
    char *full = mem_printf("%s]", content);
    free(content);
    cs_message_t m = {.role = "assistant", .content = full};
    cs_fence_t f;
    s_fence(chat, &f);
    int rc = chatstate_commit_step(cs, &f, &m, 1, err);
    free(full);
    if (rc != 0) {
        return -1;
    }
    f.history_version = -1; /* the step itself advanced it */
    return chatstate_enter_requires_action(cs, &f, err);
}

static int s_finish(chatstate_t *cs, const char *chat, void *ctx, cs_error_t *err) {
    (void)ctx;
    cs_fence_t f;
    s_fence(chat, &f);
    return chatstate_finish_turn(cs, &f, NULL, 0, err);
}

static int s_fail(chatstate_t *cs, const char *chat, void *ctx, cs_error_t *err) {
    (void)ctx;
    cs_fence_t f;
    s_fence(chat, &f);
    return chatstate_finish_error(cs, &f, "{\"message\":\"boom\"}", NULL, 0, err);
}

/* Queues the text in ctx without the gateway's cap. */
static int s_queue(chatstate_t *cs, const char *chat, void *ctx, cs_error_t *err) {
    (void)chat;
    char *content = mem_printf("[" TEXT("%s") "]", (const char *)ctx);
    cs_message_t m = {.role = "user", .content = content};
    int64_t mid;
    int64_t qid;
    int rc = chatstate_send_message(cs, &m, CS_BUSY_QUEUE, 0, &mid, &qid, err);
    free(content);
    return rc;
}

/* A chat of the test user in W whose history is the user's "hello" and the assistant's
 * answers in texts (none when texts is NULL). */
static char *s_waiting_chat(const char *const *texts) {
    char *chat = s_create(s_token, SEND("hello"));
    s_worker(chat, s_acquire, NULL);
    if (texts) {
        s_worker(chat, s_step, (void *)texts);
    }
    s_worker(chat, s_finish, NULL);
    return chat;
}

static char *s_digest(const char *chat) {
    char *sql = mem_printf(
        "SELECT md5(coalesce((SELECT row_to_json(c)::text FROM chats c WHERE id = '%1$s'), '')"
        " || coalesce((SELECT string_agg(row_to_json(m)::text, ',' ORDER BY id)"
        " FROM chat_messages m WHERE chat_id = '%1$s'), '')"
        " || coalesce((SELECT string_agg(row_to_json(q)::text, ',' ORDER BY id)"
        " FROM chat_queued_messages q WHERE chat_id = '%1$s'), ''))",
        chat);
    char *d = testdb_scalar(s_conn, sql);
    free(sql);
    return d;
}

static void s_unchanged(const char *chat, const char *before, const char *what) {
    char *after = s_digest(chat);
    if (strcmp(before, after) != 0) {
        fail_msg("%s was rejected but changed the chat", what);
    }
    free(after);
}

static char *s_db_value(const char *fmt, const char *arg) {
    char *sql = mem_printf(fmt, arg);
    char *v = testdb_scalar(s_conn, sql);
    free(sql);
    return v;
}

/* ---- Tests ---- */

static void test_chat_list_pages_by_limit_and_after_id_and_filters_archived(void **u) {
    (void)u;
    char *user = mem_printf("CHATFLEET_DATABASE_URL=%s", testdb_url(s_db));
    char *env[] = {user, NULL};
    char *argv[] = {s_gw_bin, "user-add", "pager", NULL};
    char *token = proc_output(argv, env);
    free(user);
    ASSERT(token);
    token[strcspn(token, "\n")] = '\0';
    char *ids[5];
    for (int i = 0; i < 5; i++) {
        ids[i] = s_create(token, "{\"content\":[]}");
    }
    char *apath = mem_printf("/api/v2/chats/%s", ids[2]);
    json_decref(s_req("PATCH", apath, token, "{\"archived\":true}", 204));
    json_t *all = s_req("GET", "/api/v2/chats?limit=200", token, NULL, 200);
    assert_int_equal(json_array_size(all), 4);
    size_t i;
    json_t *c;
    json_array_foreach(all, i, c) {
        assert_false(json_is_true(json_object_get(c, "archived")));
        assert_string_not_equal(s_str(c, "id"), ids[2]);
    }
    /* Pages of two follow the full listing's order and end with an empty page. */
    json_t *p1 = s_req("GET", "/api/v2/chats?limit=2", token, NULL, 200);
    assert_int_equal(json_array_size(p1), 2);
    char *q = mem_printf("/api/v2/chats?limit=2&after_id=%s", s_str(json_array_get(p1, 1), "id"));
    json_t *p2 = s_req("GET", q, token, NULL, 200);
    free(q);
    assert_int_equal(json_array_size(p2), 2);
    q = mem_printf("/api/v2/chats?limit=2&after_id=%s", s_str(json_array_get(p2, 1), "id"));
    json_t *p3 = s_req("GET", q, token, NULL, 200);
    free(q);
    assert_int_equal(json_array_size(p3), 0);
    for (int k = 0; k < 4; k++) {
        json_t *page = k < 2 ? p1 : p2;
        assert_string_equal(s_str(json_array_get(page, k % 2), "id"),
                            s_str(json_array_get(all, k), "id"));
    }
    json_t *arch = s_req("GET", "/api/v2/chats?archived=true", token, NULL, 200);
    assert_int_equal(json_array_size(arch), 1);
    assert_string_equal(s_str(json_array_get(arch, 0), "id"), ids[2]);
    json_t *unarch = s_req("GET", "/api/v2/chats?archived=false&limit=200", token, NULL, 200);
    assert_int_equal(json_array_size(unarch), 4);
    static const struct {
        const char *query;
        const char *field;
    } bad[] = {
        {"limit=0", "limit"},
        {"limit=201", "limit"},
        {"after_id=not-a-uuid", "after_id"},
        {"archived=maybe", "archived"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        q = mem_printf("/api/v2/chats?%s", bad[k].query);
        json_t *e = s_req("GET", q, token, NULL, 400);
        s_expect_field(e, bad[k].field);
        json_decref(e);
        free(q);
    }
    json_decref(unarch);
    json_decref(arch);
    json_decref(p3);
    json_decref(p2);
    json_decref(p1);
    json_decref(all);
    free(apath);
    for (int k = 0; k < 5; k++) {
        free(ids[k]);
    }
    free(token);
}

/* The ids of a messages response, in response order. */
static int s_ids(json_t *resp, json_int_t *out, int max) {
    json_t *msgs = json_object_get(resp, "messages");
    int n = 0;
    for (size_t i = 0; i < json_array_size(msgs) && n < max; i++) {
        out[n++] = s_int(json_array_get(msgs, i), "id");
    }
    return n;
}

static void s_page(const char *chat, const char *query, const json_int_t *want, int nwant,
                   bool more) {
    json_t *m = s_messages(chat, query);
    json_int_t got[16];
    int n = s_ids(m, got, 16);
    if (n != nwant) {
        fail_msg("%s: want %d messages, got %d", query, nwant, n);
    }
    for (int i = 0; i < n; i++) {
        if (got[i] != want[i]) {
            fail_msg("%s: message %d is %lld, want %lld", query, i, (long long)got[i],
                     (long long)want[i]);
        }
    }
    if (json_is_true(json_object_get(m, "has_more")) != more) {
        fail_msg("%s: has_more should be %s", query, more ? "true" : "false");
    }
    /* The queue comes only with the uncursored, newest page. */
    if (strstr(query, "_id=")) {
        assert_int_equal(json_array_size(json_object_get(m, "queued_messages")), 0);
    }
    json_decref(m);
}

static void test_message_cursors_page_both_ways_and_reject_crossed_cursors(void **u) {
    (void)u;
    char *chat = s_create(s_token, SEND("m0"));
    static const char *const answers[] = {"a1", "a2", "a3", "a4", "a5", NULL};
    s_worker(chat, s_acquire, NULL);
    s_worker(chat, s_step, (void *)answers);
    char *mpath = mem_printf("/api/v2/chats/%s/messages", chat);
    json_t *r = s_call("POST", mpath, SEND("queued"), 200);
    assert_true(json_is_true(json_object_get(r, "queued")));
    json_decref(r);
    json_t *m = s_messages(chat, "?limit=200");
    json_int_t desc[16];
    assert_int_equal(s_ids(m, desc, 16), 6);
    assert_int_equal(json_array_size(json_object_get(m, "queued_messages")), 1);
    json_decref(m);
    json_int_t id[6]; /* ascending */
    for (int i = 0; i < 6; i++) {
        id[i] = desc[5 - i];
        assert_true(i == 0 || id[i] > id[i - 1]);
    }
    char q[128];
    s_page(chat, "?limit=2", (json_int_t[]){id[5], id[4]}, 2, true);
    snprintf(q, sizeof q, "?before_id=%lld&limit=2", (long long)id[4]);
    s_page(chat, q, (json_int_t[]){id[3], id[2]}, 2, true);
    snprintf(q, sizeof q, "?before_id=%lld&limit=2", (long long)id[1]);
    s_page(chat, q, (json_int_t[]){id[0]}, 1, false);
    /* after_id alone polls forward, oldest first. */
    snprintf(q, sizeof q, "?after_id=%lld", (long long)id[3]);
    s_page(chat, q, (json_int_t[]){id[4], id[5]}, 2, false);
    snprintf(q, sizeof q, "?after_id=%lld&limit=2", (long long)id[0]);
    s_page(chat, q, (json_int_t[]){id[1], id[2]}, 2, true);
    snprintf(q, sizeof q, "?after_id=%lld&before_id=%lld", (long long)id[1], (long long)id[4]);
    s_page(chat, q, (json_int_t[]){id[3], id[2]}, 2, false);
    static const char *const crossed[] = {"?after_id=%lld&before_id=%lld",
                                          "?after_id=%lld&before_id=%lld"};
    for (int k = 0; k < 2; k++) {
        /* after_id == before_id, then after_id > before_id */
        snprintf(q, sizeof q, crossed[k], (long long)id[3], (long long)id[3 - k]);
        char *p = mem_printf("%s%s", mpath, q);
        json_t *e = s_call("GET", p, NULL, 400);
        s_expect_field(e, "after_id");
        json_decref(e);
        free(p);
    }
    static const struct {
        const char *query;
        const char *field;
    } bad[] = {{"?limit=0", "limit"},
               {"?limit=201", "limit"},
               {"?before_id=-1", "before_id"},
               {"?after_id=x", "after_id"}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char *p = mem_printf("%s%s", mpath, bad[k].query);
        json_t *e = s_call("GET", p, NULL, 400);
        s_expect_field(e, bad[k].field);
        json_decref(e);
        free(p);
    }
    free(mpath);
    free(chat);
}

/* api-shapes.md §2.1: editing a message of another role is 400 "Only user messages can be
 * edited." and changes nothing; an id that names no message of the chat is 404 "Chat message
 * not found." with the reference's detail. */
static void test_editing_an_assistant_message_is_400_only_user_messages(void **u) {
    (void)u;
    static const char *const answer[] = {"an answer", NULL};
    char *chat = s_waiting_chat(answer);
    char *aid = s_db_value("SELECT max(id) FROM chat_messages WHERE chat_id = '%s' AND role ="
                           " 'assistant'",
                           chat);
    char *path = mem_printf("/api/v2/chats/%s/messages/%s", chat, aid);
    char *d0 = s_digest(chat);
    json_t *e = s_call("PATCH", path, "{\"content\":[{\"type\":\"text\",\"text\":\"x\"}]}", 400);
    assert_string_equal(s_str(e, "message"), "Only user messages can be edited.");
    json_decref(e);
    s_unchanged(chat, d0, "editing an assistant message");
    free(path);
    path = mem_printf("/api/v2/chats/%s/messages/999999999", chat);
    e = s_call("PATCH", path, "{\"content\":[{\"type\":\"text\",\"text\":\"x\"}]}", 404);
    assert_string_equal(s_str(e, "message"), "Chat message not found.");
    assert_string_equal(s_str(e, "detail"), "Message does not belong to this chat.");
    json_decref(e);
    free(d0);
    free(path);
    free(aid);
    free(chat);
}

static void
test_compact_answers_200_with_the_running_chat_then_409_when_nothing_to_compact(void **u) {
    (void)u;
    static const char *const answer[] = {"an answer", NULL};
    char *chat = s_waiting_chat(answer);
    char *path = mem_printf("/api/v2/chats/%s/compact", chat);
    /* api-shapes.md §2: 200 with the Chat (the summary is written later, by a worker). */
    json_t *c = s_call("POST", path, NULL, 200);
    assert_string_equal(s_str(c, "status"), "running");
    assert_string_equal(s_str(c, "id"), chat);
    json_decref(c);
    char *at =
        s_db_value("SELECT compaction_requested_at IS NOT NULL FROM chats WHERE id = '%s'", chat);
    assert_string_equal(at, "t");
    free(at);
    /* A chat whose history has no assistant output has nothing to compact. */
    char *bare = s_waiting_chat(NULL);
    char *bpath = mem_printf("/api/v2/chats/%s/compact", bare);
    char *d0 = s_digest(bare);
    json_t *e = s_call("POST", bpath, NULL, 409);
    s_expect_detail(e, "nothing to compact");
    json_decref(e);
    s_unchanged(bare, d0, "compact with nothing to compact");
    free(d0);
    free(bpath);
    free(bare);
    free(path);
    free(chat);
}

static void test_clear_shows_the_boundary_pair_and_a_second_clear_is_409(void **u) {
    (void)u;
    static const char *const answer[] = {"before the clear", NULL};
    char *chat = s_waiting_chat(answer);
    json_t *m = s_messages(chat, "");
    size_t before = json_array_size(json_object_get(m, "messages"));
    json_decref(m);
    char *path = mem_printf("/api/v2/chats/%s/clear", chat);
    json_t *c = s_call("POST", path, NULL, 200);
    assert_string_equal(s_str(c, "status"), "waiting");
    json_decref(c);
    /* The visible pair is the newest history; the sentinel is model-only. */
    m = s_messages(chat, "");
    json_t *msgs = json_object_get(m, "messages");
    assert_int_equal(json_array_size(msgs), before + 2);
    json_t *result = json_array_get(json_object_get(json_array_get(msgs, 0), "content"), 0);
    json_t *call = json_array_get(json_object_get(json_array_get(msgs, 1), "content"), 0);
    assert_string_equal(s_str(json_array_get(msgs, 0), "role"), "tool");
    assert_string_equal(s_str(json_array_get(msgs, 1), "role"), "assistant");
    assert_string_equal(s_str(call, "type"), "tool-call");
    assert_string_equal(s_str(result, "type"), "tool-result");
    assert_string_equal(s_str(call, "tool_name"), "chat_cleared");
    assert_string_equal(s_str(result, "tool_name"), "chat_cleared");
    assert_string_equal(s_str(call, "tool_call_id"), s_str(result, "tool_call_id"));
    json_decref(m);
    char *sentinels = s_db_value("SELECT count(*) FROM chat_messages WHERE chat_id = '%s'"
                                 " AND compressed AND role = 'user' AND visibility = 'model'",
                                 chat);
    assert_string_equal(sentinels, "1");
    free(sentinels);
    char *d0 = s_digest(chat);
    json_t *e = s_call("POST", path, NULL, 409);
    s_expect_detail(e, "nothing to clear");
    json_decref(e);
    s_unchanged(chat, d0, "a second clear");
    free(d0);
    free(path);
    free(chat);
}

/* ARCHITECTURE.md §4.3: nothing to compact after the latest boundary, the clear boundary
 * included (clear and compaction never reach across each other's boundary). */
static void test_compact_right_after_clear_is_409_nothing_to_compact(void **u) {
    (void)u;
    static const char *const answer[] = {"before the clear", NULL};
    char *chat = s_waiting_chat(answer);
    char *path = mem_printf("/api/v2/chats/%s/clear", chat);
    json_decref(s_call("POST", path, NULL, 200));
    free(path);
    path = mem_printf("/api/v2/chats/%s/compact", chat);
    char *d0 = s_digest(chat);
    json_t *e = s_call("POST", path, NULL, 409);
    s_expect_detail(e, "nothing to compact");
    json_decref(e);
    s_unchanged(chat, d0, "compact after clear");
    free(d0);
    free(path);
    free(chat);
}

static void test_reconcile_invalid_lands_in_error_and_a_second_is_409(void **u) {
    (void)u;
    char *chat = s_create(s_token, SEND("hello"));
    s_worker(chat, s_acquire, NULL);
    s_worker(chat, s_queue, "waiting behind");
    /* Waiting with a queue: no valid state has that. */
    char *sql = mem_printf("UPDATE chats SET status = 'waiting' WHERE id = '%s'", chat);
    assert_int_equal(testdb_try(s_conn, sql, NULL, 0), 0);
    free(sql);
    char *path = mem_printf("/api/v2/chats/%s/reconcile-invalid", chat);
    json_t *c = s_call("POST", path, NULL, 200);
    assert_string_equal(s_str(c, "status"), "error");
    assert_false(json_is_true(json_object_get(c, "archived")));
    const char *why = s_str(json_object_get(c, "last_error"), "message");
    assert_non_null(why);
    assert_non_null(strstr(why, "invalid state"));
    json_decref(c);
    json_t *m = s_messages(chat, "");
    assert_int_equal(json_array_size(json_object_get(m, "queued_messages")), 1); /* E1 */
    json_decref(m);
    char *d0 = s_digest(chat);
    json_t *e = s_call("POST", path, NULL, 409);
    assert_string_equal(s_str(e, "message"), "Chat is not in an invalid state.");
    json_decref(e);
    s_unchanged(chat, d0, "reconcile of a valid chat");
    free(d0);
    free(path);
    free(chat);
}

static json_int_t s_queued_id(const char *chat, int index) {
    json_t *m = s_messages(chat, "");
    json_int_t id = s_int(json_array_get(json_object_get(m, "queued_messages"), index), "id");
    json_decref(m);
    assert_true(id > 0);
    return id;
}

static void test_promote_moves_the_message_into_history_with_its_queue_id(void **u) {
    (void)u;
    /* E1 with two queued: the tail goes into history now, the head stays queued. */
    char *chat = s_create(s_token, SEND("hello"));
    s_worker(chat, s_acquire, NULL);
    s_worker(chat, s_queue, "qa");
    s_worker(chat, s_queue, "qb");
    s_worker(chat, s_fail, NULL);
    json_int_t qa = s_queued_id(chat, 0);
    json_int_t qb = s_queued_id(chat, 1);
    char *path = mem_printf("/api/v2/chats/%s/queue/%lld/promote", chat, (long long)qb);
    json_decref(s_call("POST", path, NULL, 202));
    json_t *c = s_chat(chat);
    assert_string_equal(s_str(c, "status"), "running");
    assert_null(json_object_get(c, "last_error"));
    json_decref(c);
    json_t *m = s_messages(chat, "");
    json_t *newest = json_array_get(json_object_get(m, "messages"), 0);
    assert_string_equal(s_str(newest, "role"), "user");
    assert_string_equal(s_text(newest), "qb");
    json_t *queued = json_object_get(m, "queued_messages");
    assert_int_equal(json_array_size(queued), 1);
    assert_int_equal(s_int(json_array_get(queued, 0), "id"), qa);
    char idtext[DB_PARAM_INT64_LEN];
    char *qid = s_db_value("SELECT queued_message_id FROM chat_messages WHERE id = %s",
                           db_param_int64(idtext, s_int(newest, "id")));
    assert_non_null(qid);
    assert_int_equal(strtoll(qid, NULL, 10), qb);
    free(qid);
    json_decref(m);
    /* R1: the promoted message moves to the head and the chat interrupts. */
    s_worker(chat, s_queue, "qc");
    json_int_t qc = s_queued_id(chat, 1);
    free(path);
    path = mem_printf("/api/v2/chats/%s/queue/%lld/promote", chat, (long long)qc);
    json_decref(s_call("POST", path, NULL, 202));
    assert_int_equal(s_queued_id(chat, 0), qc);
    c = s_chat(chat);
    assert_string_equal(s_str(c, "status"), "interrupting");
    json_decref(c);
    /* An id that is not in the non-empty queue is 404, and changes nothing. */
    free(path);
    path = mem_printf("/api/v2/chats/%s/queue/%lld/promote", chat, (long long)qb);
    char *d0 = s_digest(chat);
    json_decref(s_call("POST", path, NULL, 404));
    s_unchanged(chat, d0, "promote of an unknown queued id");
    free(d0);
    free(path);
    free(chat);
}

static void test_models_lists_the_configured_default(void **u) {
    (void)u;
    json_t *r = s_call("GET", "/api/v2/chats/models", NULL, 200);
    json_t *models = json_object_get(r, "models");
    assert_true(json_array_size(models) >= 1);
    int defaults = 0;
    size_t i;
    json_t *m;
    json_array_foreach(models, i, m) {
        assert_non_null(s_str(m, "id"));
        assert_non_null(s_str(m, "name"));
        assert_non_null(s_str(m, "provider"));
        assert_non_null(s_str(m, "model"));
        defaults += json_is_true(json_object_get(m, "default"));
    }
    assert_int_equal(defaults, 1);
    /* A chat created without a model runs on the default. */
    json_t *dflt = NULL;
    json_array_foreach(models, i, m) {
        if (json_is_true(json_object_get(m, "default"))) {
            dflt = m;
        }
    }
    char *chat = s_create(s_token, "{\"content\":[]}");
    json_t *c = s_chat(chat);
    assert_string_equal(s_str(c, "last_model_config_id"), s_str(dflt, "id"));
    json_decref(c);
    free(chat);
    json_decref(r);
}

/* GET /users/me names the token's user, and is 401 without a valid token. */
static void test_users_me_names_the_signed_in_user(void **u) {
    (void)u;
    json_t *me = s_call("GET", "/api/v2/users/me", NULL, 200);
    assert_string_equal(s_str(me, "id"), s_owner);
    assert_string_equal(s_str(me, "name"), "ender");
    assert_true(json_is_false(json_object_get(me, "is_admin")));
    assert_non_null(s_str(me, "created_at"));
    json_decref(me);
    json_decref(s_req("GET", "/api/v2/users/me", "cf_bad", NULL, 401));
}

/* The id of the model config a chat was created on. */
static char *s_chat_model(const char *chat) {
    json_t *c = s_chat(chat);
    char *id = mem_strdup(s_str(c, "last_model_config_id"));
    json_decref(c);
    return id;
}

/* Makes the config with id the default, as a gateway's start with another config file does,
 * and waits out the gateway's model cache (GATEWAY_MODEL_CACHE_MS). */
static void s_set_default_model(const char *id) {
    /* One default at a time (a unique index): the old one goes first, in one transaction. */
    char *sql = mem_printf("UPDATE model_configs SET is_default = false WHERE is_default;"
                           " UPDATE model_configs SET is_default = true WHERE id = '%s'",
                           id);
    char err[256];
    if (testdb_try(s_conn, sql, err, sizeof err) != 0) {
        fail_msg("%s: %s", sql, err);
    }
    free(sql);
    usleep((GATEWAY_MODEL_CACHE_MS + 300) * 1000);
}

/* The gateway answers a model config's id from memory for a while (ARCHITECTURE.md §10,
 * "Model configs"): a config added is found by its name at once, and a default changed in the
 * database is what new chats run on once the cache interval has passed. */
static void test_a_changed_default_model_is_used_after_the_cache_interval(void **u) {
    (void)u;
    char *old = testdb_scalar(s_conn, "SELECT id FROM model_configs WHERE is_default");
    assert_non_null(old);
    /* The default's id is cached now. */
    char *first = s_create(s_token, "{\"content\":[]}");
    char *got = s_chat_model(first);
    assert_string_equal(got, old);
    free(got);
    char other[ID_UUID_LEN + 1];
    assert_int_equal(id_uuid_new(other), 0);
    char *sql = mem_printf("INSERT INTO model_configs (id, name, provider, model)"
                           " VALUES ('%s', 'cache-other', 'sim', 'sim')",
                           other);
    assert_int_equal(testdb_try(s_conn, sql, NULL, 0), 0);
    free(sql);
    char *named = s_create(s_token, "{\"content\":[],\"model\":\"cache-other\"}");
    got = s_chat_model(named);
    assert_string_equal(got, other);
    free(got);
    s_set_default_model(other);
    char *after = s_create(s_token, "{\"content\":[]}");
    got = s_chat_model(after);
    assert_string_equal(got, other);
    free(got);
    s_set_default_model(old); /* the other tests run on the configured default */
    free(after);
    free(named);
    free(first);
    free(old);
}

static void test_title_patch_writes_a_user_title(void **u) {
    (void)u;
    char *chat = s_create(s_token, SEND("fallback words"));
    char *src = s_db_value("SELECT title_source FROM chats WHERE id = '%s'", chat);
    assert_string_equal(src, "fallback");
    free(src);
    char *path = mem_printf("/api/v2/chats/%s", chat);
    json_decref(s_call("PATCH", path, "{\"title\":\"my title\"}", 204));
    json_t *c = s_chat(chat);
    assert_string_equal(s_str(c, "title"), "my title");
    json_decref(c);
    src = s_db_value("SELECT title_source FROM chats WHERE id = '%s'", chat);
    assert_string_equal(src, "user");
    free(src);
    char big[256];
    memset(big, 'x', 201);
    big[201] = '\0';
    char *long_title = mem_printf("{\"title\":\"%s\"}", big);
    const char *bad[] = {"{\"title\":\"\"}", "{\"title\":7}", long_title};
    char *d0 = s_digest(chat);
    for (int i = 0; i < 3; i++) {
        json_t *e = s_call("PATCH", path, bad[i], 400);
        s_expect_field(e, "title");
        json_decref(e);
    }
    s_unchanged(chat, d0, "a bad title");
    free(d0);
    free(long_title);
    free(path);
    free(chat);
}

static void test_title_patch_bumps_snapshot_version_and_publishes_an_update_hint(void **u) {
    (void)u;
    char *chat = s_create(s_token, SEND("hinted"));
    char *path = mem_printf("/api/v2/chats/%s", chat);
    bus_subscriber_t *sub = bus_subscriber_new(s_sub);
    assert_non_null(sub);
    char topic[PROTO_TOPIC_MAX_BYTES];
    snprintf(topic, sizeof topic, "%s%s", PROTO_TOPIC_UPDATE, chat);
    assert_int_equal(bus_subscriber_subscribe(sub, topic), 0);
    /* A subscription reaches the broker a little after it is made: retitle until a hint
     * arrives, then drain, so the next hint is the one the next PATCH publishes. */
    wire_msg_t m;
    int64_t deadline = id_now_ms() + WAIT_MS;
    for (int n = 0;; n++) {
        assert_true(id_now_ms() < deadline);
        char *body = mem_printf("{\"title\":\"warm-up %d\"}", n);
        json_decref(s_call("PATCH", path, body, 204));
        free(body);
        if (bus_subscriber_recv(sub, &m, 200) == 1) {
            wire_msg_clear(&m);
            break;
        }
    }
    while (bus_subscriber_recv(sub, &m, 300) == 1) {
        wire_msg_clear(&m);
    }
    json_t *c0 = s_chat(chat);
    json_decref(s_call("PATCH", path, "{\"title\":\"with a hint\"}", 204));
    json_t *c1 = s_chat(chat);
    assert_string_equal(s_str(c1, "title"), "with a hint");
    assert_string_equal(s_str(c1, "status"), s_str(c0, "status"));
    assert_int_equal(s_int(c1, "snapshot_version"), s_int(c0, "snapshot_version") + 1);
    assert_int_equal(bus_subscriber_recv(sub, &m, WAIT_MS), 1);
    assert_int_equal(m.type, WIRE_UPDATE);
    assert_string_equal(m.u.update.chat_id, chat);
    assert_int_equal(m.u.update.snapshot_version, s_int(c1, "snapshot_version"));
    wire_msg_clear(&m);
    bus_subscriber_destroy(&sub);
    json_decref(c1);
    json_decref(c0);
    free(path);
    free(chat);
}

static void test_title_and_archive_in_one_patch_apply_together_or_not_at_all(void **u) {
    (void)u;
    /* A running chat cannot be archived: the title in the same PATCH is not written. */
    char *running = s_create(s_token, SEND("still running"));
    char *path = mem_printf("/api/v2/chats/%s", running);
    json_decref(s_call("PATCH", path, "{\"title\":\"before\"}", 204));
    char *d0 = s_digest(running);
    json_t *e = s_call("PATCH", path, "{\"archived\":true,\"title\":\"half\"}", 409);
    s_expect_detail(e, "state R0");
    json_decref(e);
    s_unchanged(running, d0, "archive and title of a running chat");
    json_t *c = s_chat(running);
    assert_string_equal(s_str(c, "title"), "before");
    json_decref(c);
    free(d0);
    free(path);
    /* An idle chat with an invalid title: the archive in the same PATCH is not applied. */
    char *idle = s_create(s_token, "{\"content\":[]}");
    path = mem_printf("/api/v2/chats/%s", idle);
    d0 = s_digest(idle);
    const char *bad[] = {"{\"archived\":true,\"title\":\"\"}", "{\"archived\":true,\"title\":7}"};
    for (int i = 0; i < 2; i++) {
        e = s_call("PATCH", path, bad[i], 400);
        s_expect_field(e, "title");
        json_decref(e);
    }
    s_unchanged(idle, d0, "archive with a bad title");
    /* Both valid: both applied, in one move each of the same bundle. */
    c = s_chat(idle);
    json_int_t v0 = s_int(c, "snapshot_version");
    json_decref(c);
    json_decref(s_call("PATCH", path, "{\"archived\":true,\"title\":\"filed\"}", 204));
    c = s_chat(idle);
    assert_string_equal(s_str(c, "title"), "filed");
    assert_true(json_is_true(json_object_get(c, "archived")));
    assert_int_equal(s_int(c, "snapshot_version"), v0 + 1);
    json_decref(c);
    free(d0);
    free(path);
    free(idle);
    free(running);
}

static void test_every_route_is_401_without_a_token_and_404_for_an_unknown_chat(void **u) {
    (void)u;
    static const struct {
        const char *method;
        const char *fmt; /* %s: chat id */
        const char *body;
    } routes[] = {
        {"GET", "/api/v2/chats/%s", NULL},
        {"PATCH", "/api/v2/chats/%s", "{\"title\":\"t\"}"},
        {"GET", "/api/v2/chats/%s/messages", NULL},
        {"GET", "/api/v2/chats/%s/messages?before_id=5", NULL},
        {"POST", "/api/v2/chats/%s/messages", SEND("x")},
        {"PATCH", "/api/v2/chats/%s/messages/1", SEND("x")},
        {"DELETE", "/api/v2/chats/%s/queue/1", NULL},
        {"POST", "/api/v2/chats/%s/queue/1/promote", NULL},
        {"POST", "/api/v2/chats/%s/interrupt", NULL},
        {"POST", "/api/v2/chats/%s/tool-results",
         "{\"results\":[{\"tool_call_id\":\"a\",\"output\":1}]}"},
        {"POST", "/api/v2/chats/%s/compact", NULL},
        {"POST", "/api/v2/chats/%s/clear", NULL},
        {"POST", "/api/v2/chats/%s/reconcile-invalid", NULL},
        {"GET", "/api/v2/chats/%s/stream", NULL},
    };
    static const char *const collections[][2] = {
        {"GET", "/api/v2/chats"},
        {"POST", "/api/v2/chats"},
        {"GET", "/api/v2/chats/models"},
        {"GET", "/api/v2/chats/watch"},
    };
    int checked = 0;
    for (size_t i = 0; i < sizeof collections / sizeof collections[0]; i++) {
        json_decref(s_req(collections[i][0], collections[i][1], NULL, "{\"content\":[]}", 401));
        json_decref(s_req(collections[i][0], collections[i][1], "cf_bad", "{\"content\":[]}", 401));
        checked += 2;
    }
    static const char *const unknown[] = {"00000000-0000-4000-8000-000000000000", "not-a-uuid"};
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        char *path = mem_printf(routes[i].fmt, unknown[0]);
        json_decref(s_req(routes[i].method, path, NULL, routes[i].body, 401));
        json_decref(s_req(routes[i].method, path, "cf_bad", routes[i].body, 401));
        free(path);
        for (int k = 0; k < 2; k++) {
            path = mem_printf(routes[i].fmt, unknown[k]);
            json_decref(s_call(routes[i].method, path, routes[i].body, 404));
            free(path);
        }
        checked += 4;
    }
    printf("auth: %d route checks (401 without or with a bad token, 404 unknown chat)\n", checked);
}

static void test_ids_that_are_not_positive_integers_are_400_on_an_own_chat(void **u) {
    (void)u;
    char *chat = s_create(s_token, SEND("ids"));
    static const struct {
        const char *method;
        const char *fmt; /* %1$s: chat id, %2$s: the bad id */
        const char *message;
    } routes[] = {
        {"PATCH", "/api/v2/chats/%1$s/messages/%2$s", "Invalid chat message ID."},
        {"DELETE", "/api/v2/chats/%1$s/queue/%2$s", "Invalid queued message ID."},
        {"POST", "/api/v2/chats/%1$s/queue/%2$s/promote", "Invalid queued message ID."},
    };
    /* "+1", " 1" and an id beyond int64 were read as 1, 1 and INT64_MAX (strtoll). */
    static const char *const bad[] = {"abc", "0", "-3", "1x", "+1", "%201", "9223372036854775808"};
    char *d0 = s_digest(chat);
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
            char *path = mem_printf(routes[i].fmt, chat, bad[k]);
            json_t *e = s_call(routes[i].method, path, SEND("x"), 400);
            assert_string_equal(s_str(e, "message"), routes[i].message);
            json_decref(e);
            free(path);
            /* Not the caller's chat: 404 before the id is looked at. */
            path = mem_printf(routes[i].fmt, "00000000-0000-4000-8000-000000000000", bad[k]);
            json_decref(s_call(routes[i].method, path, SEND("x"), 404));
            free(path);
        }
    }
    s_unchanged(chat, d0, "a request with a malformed id");
    free(d0);
    free(chat);
}

static int s_is_text(json_t *e, void *want) {
    json_t *msg = json_object_get(json_object_get(e, "data"), "message");
    const char *t = s_text(msg);
    return t && !strcmp(t, want);
}

static char *s_user_token(const char *name) {
    char *user = mem_printf("CHATFLEET_DATABASE_URL=%s", testdb_url(s_db));
    char *env[] = {user, NULL};
    char *argv[] = {s_gw_bin, "user-add", (char *)name, NULL};
    char *token = proc_output(argv, env);
    free(user);
    ASSERT(token);
    token[strcspn(token, "\n")] = '\0';
    return token;
}

static char *s_upper(const char *s) {
    char *u = mem_strdup(s);
    for (char *c = u; *c; c++) {
        *c = (char)toupper((unsigned char)*c);
    }
    return u;
}

/* user-weight sets a user's share of worker slots (users.chat_weight); a weight outside
 * 1..1000 exits 2 and an unknown name 1, each saying why, and neither changes anything. */
static void test_user_weight_sets_a_users_share_and_refuses_bad_input(void **u) {
    (void)u;
    free(s_user_token("weighted"));
    char *db = mem_printf("CHATFLEET_DATABASE_URL=%s", testdb_url(s_db));
    char *env[] = {db, NULL};
    const struct {
        const char *name, *weight;
        int rc;
        const char *says;
    } cases[] = {
        {"weighted", "7", 0, NULL},
        {"weighted", "0", 2, "1..1000"},
        {"weighted", "1001", 2, "1..1000"},
        {"weighted", "3x", 2, "(got \"3x\")"},
        {"nobody-here", "2", 1, "no such user"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[] = "/tmp/test_gateway_endpoints_out.XXXXXX";
        int fd = mkstemp(out);
        assert_true(fd >= 0);
        close(fd);
        char *argv[] = {s_gw_bin, "user-weight", (char *)cases[i].name, (char *)cases[i].weight,
                        NULL};
        assert_int_equal(proc_run(argv, env, out, 10000), cases[i].rc);
        char *text = proc_file_text(out);
        if (cases[i].says && !strstr(text, cases[i].says)) {
            fail_msg("user-weight %s %s said: %s", cases[i].name, cases[i].weight, text);
        }
        free(text);
        unlink(out);
        char *w = testdb_scalar(s_conn, "SELECT chat_weight FROM users WHERE name = 'weighted'");
        assert_string_equal(w, "7");
        free(w);
    }
    free(db);
}

/* GET /chats?after_id= with another user's chat answered a page ordered after it (or an empty
 * one for an unknown id): the cursor must be one of the caller's chats, and every other id
 * gets one and the same 400. An own cursor in upper case is the same cursor. */
static void test_chat_list_cursor_must_be_an_own_chat_else_one_400(void **u) {
    (void)u;
    char *token = s_user_token("cursor-owner");
    char *stranger = s_user_token("cursor-stranger");
    char *mine[3];
    for (int i = 0; i < 3; i++) {
        mine[i] = s_create(token, "{\"content\":[]}");
    }
    char *theirs = s_create(stranger, "{\"content\":[]}");
    char *theirs_upper = s_upper(theirs);
    const char *const refused[] = {theirs, theirs_upper, "00000000-0000-4000-8000-000000000000",
                                   "not-a-uuid"};
    char *first = NULL;
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        char *q = mem_printf("/api/v2/chats?after_id=%s", refused[i]);
        json_t *e = s_req("GET", q, token, NULL, 400);
        s_expect_field(e, "after_id");
        char *text = json_dumps(e, JSON_SORT_KEYS);
        if (!first) {
            first = mem_strdup(text);
        } else if (strcmp(first, text) != 0) {
            fail_msg("after_id=%s answered %s, unlike a malformed id's %s", refused[i], text,
                     first);
        }
        free(text);
        json_decref(e);
        free(q);
    }
    /* The owner still pages by it, in either letter case, to the same page. */
    json_t *all = s_req("GET", "/api/v2/chats", token, NULL, 200);
    assert_int_equal(json_array_size(all), 3);
    const char *top = s_str(json_array_get(all, 0), "id");
    char *top_upper = s_upper(top);
    char *q1 = mem_printf("/api/v2/chats?after_id=%s", top);
    char *q2 = mem_printf("/api/v2/chats?after_id=%s", top_upper);
    json_t *p1 = s_req("GET", q1, token, NULL, 200);
    json_t *p2 = s_req("GET", q2, token, NULL, 200);
    assert_int_equal(json_array_size(p1), 2);
    assert_true(json_equal(p1, p2));
    /* And the stranger's own list is not touched by the owner's cursor. */
    char *q3 = mem_printf("/api/v2/chats?after_id=%s", mine[0]);
    json_decref(s_req("GET", q3, stranger, NULL, 400));
    free(q3);
    json_decref(p2);
    json_decref(p1);
    free(q2);
    free(q1);
    free(top_upper);
    json_decref(all);
    free(first);
    free(theirs_upper);
    free(theirs);
    for (int i = 0; i < 3; i++) {
        free(mine[i]);
    }
    free(stranger);
    free(token);
}

/* Query numbers are digits only: limit=1e9 was 1, 5abc 5, 10abc 10; "+5" and " 5" cursors
 * were 5; an id beyond int64 saturated. Each is a 400 naming the parameter. */
static void test_query_numbers_are_refused_unless_plain_digits_in_range(void **u) {
    (void)u;
    char *chat = s_create(s_token, SEND("numbers"));
    static const struct {
        bool messages;
        const char *query;
        const char *field;
    } bad[] = {
        {false, "limit=1e9", "limit"},
        {false, "limit=5abc", "limit"},
        {false, "limit=10abc", "limit"},
        {true, "limit=1e9", "limit"},
        {true, "limit=5abc", "limit"},
        {true, "after_id=%2B5", "after_id"},
        {true, "after_id=%205", "after_id"},
        {true, "before_id=9223372036854775808", "before_id"},
        {true, "before_id=99999999999999999999", "before_id"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *q = bad[i].messages ? mem_printf("/api/v2/chats/%s/messages?%s", chat, bad[i].query)
                                  : mem_printf("/api/v2/chats?%s", bad[i].query);
        json_t *e = s_call("GET", q, NULL, 400);
        s_expect_field(e, bad[i].field);
        s_expect_detail(e, "must be an integer from");
        json_decref(e);
        free(q);
    }
    char *q = mem_printf("/api/v2/chats/%s/messages?limit=007&before_id=9223372036854775807", chat);
    json_t *m = s_call("GET", q, NULL, 200);
    assert_int_equal(json_array_size(json_object_get(m, "messages")), 1);
    json_decref(m);
    free(q);
    free(chat);
}

static void test_edit_shows_history_reset_on_the_stream(void **u) {
    (void)u;
    char *chat = s_create(s_token, SEND("original"));
    static const char *const answer[] = {"answer to original", NULL};
    s_worker(chat, s_acquire, NULL);
    s_worker(chat, s_step, (void *)answer);
    char *mpath = mem_printf("/api/v2/chats/%s/messages", chat);
    json_decref(s_call("POST", mpath, SEND("queued one"), 200));
    json_t *m = s_messages(chat, "");
    json_t *msgs = json_object_get(m, "messages");
    json_int_t first = s_int(json_array_get(msgs, json_array_size(msgs) - 1), "id");
    json_int_t answer_id = s_int(json_array_get(msgs, 0), "id");
    json_decref(m);
    char url[256];
    snprintf(url, sizeof url, "%s/api/v2/chats/%s/stream", s_base, chat);
    sse_t *s = sse_open(url, s_token, 0);
    assert_true(sse_wait(s, 0, "message", s_is_text, "answer to original", WAIT_MS) >= 0);
    int mark = sse_count(s);
    char *epath = mem_printf("/api/v2/chats/%s/messages/%lld", chat, (long long)first);
    json_t *e = s_call("PATCH", epath, SEND("edited"), 200);
    json_t *deleted = json_object_get(e, "deleted_message_ids");
    assert_int_equal(json_array_size(deleted), 2); /* the edited message and the answer */
    json_decref(e);
    int reset = sse_wait(s, mark, "history_reset", NULL, NULL, WAIT_MS);
    assert_true(reset >= 0);
    assert_true(sse_wait(s, reset, "message", s_is_text, "edited", WAIT_MS) >= 0);
    for (int k = reset; k < sse_count(s); k++) {
        json_t *ev = sse_get(s, k);
        if (!strcmp(s_str(ev, "event"), "message")) {
            assert_true(s_int(ev, "id") > answer_id); /* deleted rows are not resent */
        }
    }
    sse_close(&s);
    m = s_messages(chat, "");
    assert_int_equal(json_array_size(json_object_get(m, "messages")), 1);
    assert_int_equal(json_array_size(json_object_get(m, "queued_messages")), 0);
    json_decref(m);
    free(epath);
    free(mpath);
    free(chat);
}

static void test_tool_results_need_every_pending_call_and_valid_json(void **u) {
    (void)u;
    char *chat = s_create(s_token, SEND("two tools"));
    static const char *const calls[] = {"c1", "c2", NULL};
    s_worker(chat, s_acquire, NULL);
    s_worker(chat, s_tool_calls, (void *)calls);
    char *path = mem_printf("/api/v2/chats/%s/tool-results", chat);
    char *d0 = s_digest(chat);
    static const struct {
        const char *body;
        const char *field;
    } bad[] = {
        /* missing: one of two pending calls answered */
        {"{\"results\":[{\"tool_call_id\":\"c1\",\"output\":1}]}", "results"},
        /* duplicate */
        {"{\"results\":[{\"tool_call_id\":\"c1\",\"output\":1},"
         "{\"tool_call_id\":\"c1\",\"output\":2}]}",
         "results[1].tool_call_id"},
        /* unexpected */
        {"{\"results\":[{\"tool_call_id\":\"c1\",\"output\":1},"
         "{\"tool_call_id\":\"c3\",\"output\":2}]}",
         "results[1].tool_call_id"},
        {"{\"results\":[{\"tool_call_id\":\"c1\",\"output\":1,\"is_error\":\"no\"}]}",
         "results[0].is_error"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *e = s_call("POST", path, bad[i].body, 400);
        s_expect_field(e, bad[i].field);
        json_decref(e);
    }
    /* A syntax error: the detail names the byte where the text stops being JSON. */
    const char *broken = "{\"results\":[{\"tool_call_id\":\"c1\",\"output\":{\"a\":tru}}]}";
    size_t at = (size_t)(strstr(broken, "tru}") - broken);
    json_t *e = s_call("POST", path, broken, 400);
    s_expect_field(e, "results[0].output.a");
    const char *detail = s_str(e, "detail");
    const char *byte = detail ? strstr(detail, "at byte ") : NULL;
    if (!byte) {
        fail_msg("the detail names no byte: %s", detail ? detail : "none");
    }
    size_t got = (size_t)strtoull(byte + 8, NULL, 10);
    if (got != at) {
        fail_msg("the syntax error starts at byte %zu of the body, the detail says %zu (%s)", at,
                 got, detail);
    }
    json_decref(e);
    s_unchanged(chat, d0, "invalid tool results");
    free(d0);
    json_decref(s_call("POST", path,
                       "{\"results\":[{\"tool_call_id\":\"c2\",\"output\":{\"v\":2}},"
                       "{\"tool_call_id\":\"c1\",\"output\":\"one\",\"is_error\":true}]}",
                       204));
    json_t *c = s_chat(chat);
    assert_string_equal(s_str(c, "status"), "running");
    json_decref(c);
    json_t *m = s_messages(chat, "");
    json_t *msgs = json_object_get(m, "messages");
    int results = 0;
    for (size_t i = 0; i < 2; i++) {
        json_t *part = json_array_get(json_object_get(json_array_get(msgs, i), "content"), 0);
        assert_string_equal(s_str(part, "type"), "tool-result");
        results += !strcmp(s_str(part, "tool_call_id"), "c1") &&
                   json_is_true(json_object_get(part, "is_error"));
        results += !strcmp(s_str(part, "tool_call_id"), "c2") &&
                   s_int(json_object_get(part, "result"), "v") == 2;
    }
    assert_int_equal(results, 2);
    json_decref(m);
    free(path);
    free(chat);
}

static void test_bodies_over_one_mib_are_413_on_every_body_route(void **u) {
    (void)u;
    char *chat = s_create(s_token, "{\"content\":[]}");
    size_t big = 1024 * 1024 + 16;
    char *huge = mem_alloc(big + 1);
    memset(huge, ' ', big);
    huge[0] = '{';
    huge[big - 1] = '}';
    huge[big] = '\0';
    static const char *const routes[][2] = {
        {"POST", "/api/v2/chats"},
        {"PATCH", "/api/v2/chats/%s"},
        {"POST", "/api/v2/chats/%s/messages"},
        {"PATCH", "/api/v2/chats/%s/messages/1"},
        {"POST", "/api/v2/chats/%s/tool-results"},
    };
    char *d0 = s_digest(chat);
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        char *path = mem_printf(routes[i][1], chat);
        json_decref(s_call(routes[i][0], path, huge, 413));
        free(path);
    }
    s_unchanged(chat, d0, "an oversized body");
    free(d0);
    free(huge);
    free(chat);
}

/* Sends one message to chat and expects want; a 429 must change nothing. */
static void s_send_expect(const char *chat, const char *busy, long want) {
    char *path = mem_printf("/api/v2/chats/%s/messages", chat);
    char *body = mem_printf("{\"content\":[" TEXT("over") "],\"busy_behavior\":\"%s\"}", busy);
    char *d0 = s_digest(chat);
    json_t *r = s_call("POST", path, body, want);
    if (want == 429) {
        assert_string_equal(s_str(r, "message"), "Message queue is full.");
        assert_string_equal(s_str(r, "detail"), "Maximum 2 messages can be queued."); /* CAP */
        s_unchanged(chat, d0, "a send to a full queue");
    }
    json_decref(r);
    free(d0);
    free(body);
    free(path);
}

static void test_queue_cap_is_429_when_busy_but_not_from_error(void **u) {
    (void)u;
    /* R1, I1 and A1 at the cap: 429 for both busy behaviours. */
    char *r1 = s_create(s_token, SEND("running"));
    s_worker(r1, s_acquire, NULL);
    char *a1 = s_create(s_token, SEND("acting"));
    static const char *const call[] = {"c1", NULL};
    s_worker(a1, s_acquire, NULL);
    s_worker(a1, s_tool_calls, (void *)call);
    for (int i = 0; i < CAP; i++) {
        s_worker(r1, s_queue, "q");
        s_worker(a1, s_queue, "q");
    }
    s_send_expect(r1, "queue", 429);
    s_send_expect(r1, "interrupt", 429);
    s_send_expect(a1, "queue", 429);
    s_send_expect(a1, "interrupt", 429);
    char *ipath = mem_printf("/api/v2/chats/%s/interrupt", r1);
    json_decref(s_call("POST", ipath, NULL, 200)); /* owned: R1 -> I1 */
    json_t *c = s_chat(r1);
    assert_string_equal(s_str(c, "status"), "interrupting");
    json_decref(c);
    s_send_expect(r1, "queue", 429);
    /* E1 at the cap: the send appends and promotes the head, so the queue does not grow. */
    char *e1 = s_create(s_token, SEND("failing"));
    s_worker(e1, s_acquire, NULL);
    for (int i = 0; i < CAP; i++) {
        s_worker(e1, s_queue, "q");
    }
    s_worker(e1, s_fail, NULL);
    s_send_expect(e1, "queue", 200);
    c = s_chat(e1);
    assert_string_equal(s_str(c, "status"), "running");
    json_decref(c);
    json_t *m = s_messages(e1, "");
    assert_int_equal(json_array_size(json_object_get(m, "queued_messages")), CAP);
    json_decref(m);
    free(ipath);
    free(e1);
    free(a1);
    free(r1);
}

static void test_every_4xx_carried_the_error_envelope(void **u) {
    (void)u;
    /* Every 4xx above went through s_check_envelope; this reports how many. */
    printf("envelope: %d 4xx responses had the ARCHITECTURE.md §11 error envelope\n", s_envelopes);
    assert_true(s_envelopes > 50);
}

/* Issue 34: a model config file whose base_url holds a control character or is not http(s),
 * or whose api_key_env is not a variable name, stops the gateway at start naming the field
 * (models[i].base_url); the same file with good values is stored and the gateway serves. */
static char *s_write_config(const char *second) {
    char *path = mem_strdup("/tmp/test_gateway_endpoints_models.XXXXXX");
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    char *text = mem_printf("{\"models\":[{\"name\":\"sim\",\"provider\":\"sim\",\"model\":"
                            "\"sim\",\"default\":true},%s]}",
                            second);
    ASSERT(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    free(text);
    return path;
}

static void test_a_model_config_with_a_control_character_stops_the_gateway(void **u) {
    (void)u;
    static const struct {
        const char *model;
        const char *field;
    } bad[] = {
        {"{\"name\":\"x\",\"provider\":\"openai\",\"model\":\"m\",\"base_url\":"
         "\"http://127.0.0.1:9/v1\\r\\nX-Injected: 1\"}",
         "models[1].base_url"},
        {"{\"name\":\"x\",\"provider\":\"openai\",\"model\":\"m\",\"base_url\":"
         "\"http://127.0.0.1:9/\\u001bv1\"}",
         "models[1].base_url"},
        {"{\"name\":\"x\",\"provider\":\"openai\",\"model\":\"m\",\"base_url\":"
         "\"file:///etc/passwd\"}",
         "models[1].base_url"},
        {"{\"name\":\"x\",\"provider\":\"openai\",\"model\":\"m\",\"api_key_env\":"
         "\"KEY\\nX\"}",
         "models[1].api_key_env"},
        {"{\"name\":\"x\",\"provider\":\"openai\",\"model\":\"m\",\"api_key_env\":"
         "\"MY-KEY\"}",
         "models[1].api_key_env"},
    };
    char *db = mem_printf("CHATFLEET_DATABASE_URL=%s", testdb_url(s_db));
    char *argv[] = {s_gw_bin, "serve", NULL};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *path = s_write_config(bad[i].model);
        char *cfg = mem_printf("CHATFLEET_CONFIG=%s", path);
        char out[] = "/tmp/test_gateway_endpoints_out.XXXXXX";
        int fd = mkstemp(out);
        assert_true(fd >= 0);
        close(fd);
        char *env[] = {db, cfg, "CHATFLEET_HTTP_LISTEN=127.0.0.1:1", NULL};
        assert_int_equal(proc_run(argv, env, out, 10000), 2);
        char *text = proc_file_text(out);
        printf("  %s", text);
        assert_non_null(strstr(text, bad[i].field));
        free(text);
        unlink(out);
        unlink(path);
        free(cfg);
        free(path);
    }
    char *none = testdb_scalar(s_conn, "SELECT count(*) FROM model_configs WHERE name = 'x'");
    assert_string_equal(none, "0");
    free(none);
    /* Good values: stored, and the gateway serves. */
    char *path = s_write_config("{\"name\":\"x\",\"provider\":\"openai\",\"model\":\"m\","
                                "\"base_url\":\"https://api.example.com/v1\",\"api_key_env\":"
                                "\"MY_KEY_1\"}");
    char *cfg = mem_printf("CHATFLEET_CONFIG=%s", path);
    int port = proc_free_port();
    char *listen = mem_printf("CHATFLEET_HTTP_LISTEN=127.0.0.1:%d", port);
    char *env[] = {db, cfg, listen, NULL};
    pid_t gw = proc_spawn(argv, env, "test_gateway_endpoints.log");
    char health[96];
    snprintf(health, sizeof health, "http://127.0.0.1:%d/healthz", port);
    assert_int_equal(proc_wait_http(health, 10000), 0);
    char *row = testdb_scalar(s_conn, "SELECT base_url || ' ' || api_key_env FROM model_configs"
                                      " WHERE name = 'x'");
    assert_string_equal(row, "https://api.example.com/v1 MY_KEY_1");
    free(row);
    proc_stop(gw, 5000);
    unlink(path);
    free(listen);
    free(cfg);
    free(path);
    free(db);
}

static int s_setup(void **state) {
    (void)state;
    s_db = testdb_new();
    s_conn = testdb_connect(s_db);
    snprintf(s_gw_bin, sizeof s_gw_bin, "%s/api-gateway/chatfleet-gateway",
             getenv("CHATFLEET_BUILD_DIR"));
    char *url = mem_printf("CHATFLEET_DATABASE_URL=%s", testdb_url(s_db));
    char *uenv[] = {url, NULL};
    char *uargv[] = {s_gw_bin, "user-add", "ender", NULL};
    s_token = proc_output(uargv, uenv);
    ASSERT(s_token);
    s_token[strcspn(s_token, "\n")] = '\0';
    char *owner = testdb_scalar(s_conn, "SELECT id FROM users WHERE name = 'ender'");
    ASSERT(owner);
    snprintf(s_owner, sizeof s_owner, "%s", owner);
    free(owner);
    char pub[64];
    char sub[64];
    char relay[64];
    snprintf(pub, sizeof pub, "tcp://127.0.0.1:%d", proc_free_port());
    snprintf(sub, sizeof sub, "tcp://127.0.0.1:%d", proc_free_port());
    snprintf(s_sub, sizeof s_sub, "%s", sub);
    snprintf(relay, sizeof relay, "tcp://127.0.0.1:%d", proc_free_port());
    char bbin[512];
    snprintf(bbin, sizeof bbin, "%s/broker/chatfleet-broker", getenv("CHATFLEET_BUILD_DIR"));
    char *bargv[] = {bbin, "--pub", pub, "--sub", sub, "--relay", relay, NULL};
    s_broker = proc_spawn(bargv, NULL, "test_gateway_endpoints.log");
    int port = proc_free_port();
    snprintf(s_base, sizeof s_base, "http://127.0.0.1:%d", port);
    char *env[] = {url,
                   mem_printf("CHATFLEET_HTTP_LISTEN=127.0.0.1:%d", port),
                   mem_printf("CHATFLEET_BROKER_PUB=%s", pub),
                   mem_printf("CHATFLEET_BROKER_SUB=%s", sub),
                   mem_printf("CHATFLEET_BROKER_RELAY=%s", relay),
                   mem_printf("CHATFLEET_QUEUE_MAX=%d", CAP),
                   mem_strdup("CHATFLEET_STREAM_POLL_MS=1000"),
                   NULL};
    char *argv[] = {s_gw_bin, "serve", NULL};
    s_gw = proc_spawn(argv, env, "test_gateway_endpoints.log");
    for (int k = 0; env[k]; k++) {
        free(env[k]);
    }
    char health[96];
    snprintf(health, sizeof health, "%s/healthz", s_base);
    ASSERT(proc_wait_http(health, 10000) == 0);
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    int rc = proc_stop(s_gw, 5000);
    proc_stop(s_broker, 5000);
    free(s_token);
    PQfinish(s_conn);
    testdb_destroy(&s_db);
    return rc == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_list_pages_by_limit_and_after_id_and_filters_archived),
        cmocka_unit_test(test_message_cursors_page_both_ways_and_reject_crossed_cursors),
        cmocka_unit_test(
            test_compact_answers_200_with_the_running_chat_then_409_when_nothing_to_compact),
        cmocka_unit_test(test_editing_an_assistant_message_is_400_only_user_messages),
        cmocka_unit_test(test_clear_shows_the_boundary_pair_and_a_second_clear_is_409),
        cmocka_unit_test(test_compact_right_after_clear_is_409_nothing_to_compact),
        cmocka_unit_test(test_reconcile_invalid_lands_in_error_and_a_second_is_409),
        cmocka_unit_test(test_promote_moves_the_message_into_history_with_its_queue_id),
        cmocka_unit_test(test_models_lists_the_configured_default),
        cmocka_unit_test(test_users_me_names_the_signed_in_user),
        cmocka_unit_test(test_a_changed_default_model_is_used_after_the_cache_interval),
        cmocka_unit_test(test_title_patch_writes_a_user_title),
        cmocka_unit_test(test_title_patch_bumps_snapshot_version_and_publishes_an_update_hint),
        cmocka_unit_test(test_title_and_archive_in_one_patch_apply_together_or_not_at_all),
        cmocka_unit_test(test_every_route_is_401_without_a_token_and_404_for_an_unknown_chat),
        cmocka_unit_test(test_ids_that_are_not_positive_integers_are_400_on_an_own_chat),
        cmocka_unit_test(test_chat_list_cursor_must_be_an_own_chat_else_one_400),
        cmocka_unit_test(test_user_weight_sets_a_users_share_and_refuses_bad_input),
        cmocka_unit_test(test_query_numbers_are_refused_unless_plain_digits_in_range),
        cmocka_unit_test(test_edit_shows_history_reset_on_the_stream),
        cmocka_unit_test(test_tool_results_need_every_pending_call_and_valid_json),
        cmocka_unit_test(test_bodies_over_one_mib_are_413_on_every_body_route),
        cmocka_unit_test(test_queue_cap_is_429_when_busy_but_not_from_error),
        cmocka_unit_test(test_a_model_config_with_a_control_character_stops_the_gateway),
        cmocka_unit_test(test_every_4xx_carried_the_error_envelope),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
