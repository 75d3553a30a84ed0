/*
 * The SSE stream end to end: a real broker, two real gateways, the test acting as the
 * worker through chatstate (publishing its hints and live parts on the bus). A client sees
 * exactly the expected events for a scripted sequence of transitions; a reconnect with
 * Last-Event-ID neither misses nor repeats a message, and is told (history_reset) when an
 * edit deletes rows at or before its resume point; a client on the other gateway sees the
 * same committed messages; the poll costs an idle chat's streams no read, and still brings
 * them a change that no hint announced; a hinted change whose read failed arrives all the same;
 * a client that reads nothing while megabytes of parts pile up for it (the gateway's socket
 * full, its writes partial and coalesced) then gets every part once, in order, framed; the
 * streams of one chat share one read per hint, and each still gets every part once, in order.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bus.h"
#include "chatsetup.h"
#include "chatstate.h"
#include "db.h"
#include "cluster.h"
#include "id.h"
#include "mem.h"
#include "proc.h"
#include "sse.h"
#include "ssefan.h"

#define WORKER  "11111111-1111-4111-8111-111111111111"
#define RUNNER  "22222222-2222-4222-8222-222222222222"
#define WAIT_MS 8000

static cluster_t *s_cluster;
static char s_pub[64]; /* the broker's publisher endpoint: the test publishes as the worker */
static bus_publisher_t *s_bus;
static hint_sink_t s_sink;

static json_t *s_post(int gw, const char *path, const char *body, long want) {
    char url[256];
    snprintf(url, sizeof url, "%s%s", cluster_url(s_cluster, gw), path);
    proc_http_t r;
    if (proc_http("POST", url, cluster_token(s_cluster), body, &r) != 0 || r.status != want) {
        fail_msg("POST %s: want %ld got %ld %s", path, want, r.status, r.body);
    }
    json_t *v = json_loads(r.body, 0, NULL);
    proc_http_free(&r);
    return v;
}

/* Edits message_id of chat to the text "edited" through gateway 0 (200 or the test fails). */
static void s_edit(const char *chat, const char *message_id) {
    char url[256];
    snprintf(url, sizeof url, "%s/api/v2/chats/%s/messages/%s", cluster_url(s_cluster, 0), chat,
             message_id);
    proc_http_t r;
    assert_int_equal(proc_http("PATCH", url, cluster_token(s_cluster),
                               "{\"content\":[{\"type\":\"text\",\"text\":\"edited\"}]}", &r),
                     0);
    assert_int_equal(r.status, 200);
    proc_http_free(&r);
}

static sse_t *s_stream(int gw, const char *chat, int64_t last_id) {
    char url[256];
    snprintf(url, sizeof url, "%s/api/v2/chats/%s/stream", cluster_url(s_cluster, gw), chat);
    return sse_open(url, cluster_token(s_cluster), last_id);
}

static int s_want(sse_t *s, int from, const char *name) {
    int i = sse_wait(s, from, name, NULL, NULL, WAIT_MS);
    if (i < 0) {
        fail_msg("no %s event after #%d (have %d events)", name, from, sse_count(s));
    }
    return i;
}

static int s_is_status(json_t *e, void *want) {
    json_t *st = json_object_get(json_object_get(json_object_get(e, "data"), "status"), "status");
    return json_is_string(st) && !strcmp(json_string_value(st), want);
}

static int s_is_text(json_t *e, void *want) {
    json_t *msg = json_object_get(json_object_get(e, "data"), "message");
    json_t *t = json_object_get(json_array_get(json_object_get(msg, "content"), 0), "text");
    return json_is_string(t) && !strcmp(json_string_value(t), want);
}

static void s_fence(const char *chat, cs_fence_t *f) {
    char *row = cluster_sql(s_cluster,
                            "SELECT status || ' ' || history_version || ' ' || generation_attempt"
                            " FROM chats WHERE id = '%s'",
                            chat);
    ASSERT(row);
    static char status[32];
    long long hv;
    long long ga;
    ASSERT(sscanf(row, "%31s %lld %lld", status, &hv, &ga) == 3);
    *f = (cs_fence_t){.worker_id = WORKER,
                      .runner_id = RUNNER,
                      .status = status,
                      .history_version = hv,
                      .generation_attempt = ga};
    free(row);
}

typedef int (*step_fn)(chatstate_t *cs, const char *chat, cs_error_t *err);

static void s_worker(const char *chat, step_fn fn) {
    cs_error_t err;
    chatstate_t *cs = chatstate_begin(cluster_db(s_cluster), &chatsetup_settings, chat, &err);
    assert_non_null(cs);
    if (fn(cs, chat, &err) != 0) {
        fail_msg("worker step: %s", err.message);
    }
    assert_int_equal(chatstate_commit(&cs, &s_sink, NULL, &err), 0);
}

static int s_acquire(chatstate_t *cs, const char *chat, cs_error_t *err) {
    (void)chat;
    return chatstate_acquire(cs, WORKER, RUNNER, err);
}

static int s_attempt(chatstate_t *cs, const char *chat, cs_error_t *err) {
    cs_fence_t f;
    s_fence(chat, &f);
    int64_t a;
    return chatstate_record_generation_attempt(cs, &f, &a, err);
}

static int s_step(chatstate_t *cs, const char *chat, cs_error_t *err) {
    cs_fence_t f;
    s_fence(chat, &f);
    cs_message_t m = {.role = "assistant", .content = "[{\"type\":\"text\",\"text\":\"hello\"}]"};
    return chatstate_commit_step(cs, &f, &m, 1, err);
}

static int s_finish(chatstate_t *cs, const char *chat, cs_error_t *err) {
    cs_fence_t f;
    s_fence(chat, &f);
    return chatstate_finish_turn(cs, &f, NULL, 0, err);
}

/* Publishes part seq of chat's episode (f: the chat's fence). */
static void s_part_of(const char *chat, const cs_fence_t *f, int64_t seq, const char *text) {
    wire_part_t p = {.history_version = f->history_version,
                     .generation_attempt = f->generation_attempt,
                     .seq = seq};
    snprintf(p.chat_id, sizeof p.chat_id, "%s", chat);
    snprintf(p.role, sizeof p.role, "assistant");
    char *json = mem_printf("{\"type\":\"text\",\"text\":\"%s\"}", text);
    p.part.text = json;
    p.part.len = strlen(json);
    assert_int_equal(bus_publisher_part(s_bus, &p), 0);
    free(json);
}

static void s_part(const char *chat, int64_t seq, const char *text) {
    cs_fence_t f;
    s_fence(chat, &f);
    s_part_of(chat, &f, seq, text);
}

/* A new chat whose first message is "hi" (the created Chat; the caller frees it). */
static json_t *s_new_chat(void) {
    return s_post(0, "/api/v2/chats", "{\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}", 201);
}

/* The bootstrap ends with preview_reset, as the reference's sync does from local state that
 * starts at zero (api-shapes.md §4.3, step 7): after the snapshot's status, carrying only
 * type and chat_id (§4.2). */
static void test_stream_bootstrap_sends_preview_reset_after_the_snapshot(void **u) {
    (void)u;
    json_t *c = s_new_chat();
    const char *chat = json_string_value(json_object_get(c, "id"));
    sse_t *s = s_stream(0, chat, 0);
    int st = s_want(s, 0, "status");
    int pr = s_want(s, 0, "preview_reset");
    assert_true(pr > st);
    json_t *data = json_object_get(sse_get(s, pr), "data");
    assert_int_equal(json_object_size(data), 2);
    assert_string_equal(json_string_value(json_object_get(data, "type")), "preview_reset");
    assert_string_equal(json_string_value(json_object_get(data, "chat_id")), chat);
    sse_close(&s);
    json_decref(c);
}

static int s_fail(chatstate_t *cs, const char *chat, cs_error_t *err) {
    cs_fence_t f;
    s_fence(chat, &f);
    return chatstate_finish_error(cs, &f, "{\"message\":\"model failed\",\"kind\":\"generic\"}",
                                  NULL, 0, err);
}

/* A chat in error: the stream sends status error and the persisted error (api-shapes.md
 * §4.3, step 4), {"type":"error","chat_id","error":ChatError}. */
static void test_stream_sends_the_persisted_error_of_a_chat_in_error(void **u) {
    (void)u;
    json_t *c = s_new_chat();
    const char *chat = json_string_value(json_object_get(c, "id"));
    s_worker(chat, s_acquire);
    s_worker(chat, s_fail);
    sse_t *s = s_stream(0, chat, 0);
    assert_true(sse_wait(s, 0, "status", s_is_status, "error", WAIT_MS) >= 0);
    int e = s_want(s, 0, "error");
    json_t *data = json_object_get(sse_get(s, e), "data");
    assert_string_equal(json_string_value(json_object_get(data, "chat_id")), chat);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(data, "error"), "message")),
        "model failed");
    sse_close(&s);
    json_decref(c);
}

static void test_stream_follows_a_scripted_turn(void **u) {
    (void)u;
    json_t *c = s_new_chat();
    const char *chat = json_string_value(json_object_get(c, "id"));
    sse_t *a = s_stream(0, chat, 0);
    /* The snapshot: the user message, the (empty) queue, the status. */
    int i = s_want(a, 0, "message");
    assert_true(s_is_text(sse_get(a, i), "hi"));
    int64_t first_id = json_integer_value(json_object_get(sse_get(a, i), "id"));
    assert_true(first_id > 0);
    s_want(a, 0, "queue_update");
    assert_true(sse_wait(a, 0, "status", s_is_status, "running", WAIT_MS) >= 0);
    /* The worker acquires, starts an attempt and streams two parts, one out of order. */
    s_worker(chat, s_acquire);
    s_worker(chat, s_attempt);
    int mark = sse_count(a);
    s_want(a, mark, "preview_reset");
    s_part(chat, 1, "hel");
    s_part(chat, 3, "skipped: a gap");
    s_part(chat, 2, "lo");
    int p1 = s_want(a, mark, "message_part");
    int p2 = s_want(a, p1 + 1, "message_part");
    json_t *mp = json_object_get(json_object_get(sse_get(a, p2), "data"), "message_part");
    assert_int_equal(json_integer_value(json_object_get(mp, "seq")), 2);
    /* The step commits: a message event; the turn finishes: status waiting. */
    s_worker(chat, s_step);
    i = sse_wait(a, p2, "message", s_is_text, "hello", WAIT_MS);
    assert_true(i >= 0);
    int64_t hello_id = json_integer_value(json_object_get(sse_get(a, i), "id"));
    s_worker(chat, s_finish);
    assert_true(sse_wait(a, i, "status", s_is_status, "waiting", WAIT_MS) >= 0);
    /* A queued send while running, seen on both gateways. */
    sse_t *b = s_stream(1, chat, 0);
    char *mpath = mem_printf("/api/v2/chats/%s/messages", chat);
    json_decref(s_post(0, mpath, "{\"content\":[{\"type\":\"text\",\"text\":\"again\"}]}", 200));
    int again_a = sse_wait(a, i, "message", s_is_text, "again", WAIT_MS);
    int again_b = sse_wait(b, 0, "message", s_is_text, "again", WAIT_MS);
    assert_true(again_a >= 0 && again_b >= 0);
    assert_true(sse_wait(b, 0, "message", s_is_text, "hello", WAIT_MS) >= 0);
    /* An edit of the first message: history_reset, then the new history. */
    char first_text[DB_PARAM_INT64_LEN];
    s_edit(chat, db_param_int64(first_text, first_id));
    int reset = s_want(a, again_a, "history_reset");
    assert_true(sse_wait(a, reset, "message", s_is_text, "edited", WAIT_MS) >= 0);
    assert_true(sse_wait(b, again_b, "history_reset", NULL, NULL, WAIT_MS) >= 0);
    /* Every message event after the reset is a live row (the deleted ones are not resent). */
    for (int k = reset; k < sse_count(a); k++) {
        json_t *e = sse_get(a, k);
        if (!strcmp(json_string_value(json_object_get(e, "event")), "message")) {
            assert_true(json_integer_value(json_object_get(e, "id")) > hello_id);
        }
    }
    /* Reconnect after "hello": only later messages arrive, none twice. */
    sse_t *c2 = s_stream(0, chat, hello_id);
    s_want(c2, 0, "status");
    int64_t seen[64];
    int nseen = 0;
    for (int k = 0; k < sse_count(c2); k++) {
        json_t *e = sse_get(c2, k);
        if (strcmp(json_string_value(json_object_get(e, "event")), "message") != 0) {
            continue;
        }
        int64_t id = json_integer_value(json_object_get(e, "id"));
        assert_true(id > hello_id);
        for (int j = 0; j < nseen; j++) {
            assert_true(seen[j] != id);
        }
        seen[nseen++] = id;
    }
    assert_true(nseen >= 1);
    sse_close(&c2);
    sse_close(&b);
    sse_close(&a);
    free(mpath);
    json_decref(c);
}

static int s_tool_step(chatstate_t *cs, const char *chat, cs_error_t *err) {
    cs_fence_t f;
    s_fence(chat, &f);
    cs_message_t m = {.role = "assistant",
                      .content = "[{\"type\":\"tool-call\",\"tool_call_id\":\"w1\","
                                 "\"tool_name\":\"ask\",\"args\":{\"q\":1}}]"};
    if (chatstate_commit_step(cs, &f, &m, 1, err) != 0) {
        return -1;
    }
    f.history_version = -1; /* the step itself advanced it */
    return chatstate_enter_requires_action(cs, &f, err);
}

static int s_kind_of(json_t *e, void *chat_id) {
    json_t *chat = json_object_get(json_object_get(e, "data"), "chat");
    return !strcmp(json_string_value(json_object_get(chat, "id")), chat_id);
}

static void test_watch_reports_lifecycle_of_all_chats(void **u) {
    (void)u;
    char url[256];
    snprintf(url, sizeof url, "%s/api/v2/chats/watch", cluster_url(s_cluster, 1));
    sse_t *w = sse_open(url, cluster_token(s_cluster), 0);
    /* Let the watch take its first snapshot, so the new chat is news to it. */
    json_t *before = s_post(0, "/api/v2/chats", "{\"content\":[]}", 201);
    const char *b = json_string_value(json_object_get(before, "id"));
    char *bpath = mem_printf("%s/api/v2/chats/%s", cluster_url(s_cluster, 0), b);
    proc_http_t r;
    int64_t deadline = id_now_ms() + WAIT_MS;
    /* A title change is a move with its update hint. Retitle until the watch, whose
     * first snapshot may come after the first retitle, reports one. */
    for (int n = 0; sse_wait(w, 0, "title_change", s_kind_of, (void *)b, 300) < 0; n++) {
        assert_true(id_now_ms() < deadline);
        char *body = mem_printf("{\"title\":\"t%d\"}", n);
        assert_int_equal(proc_http("PATCH", bpath, cluster_token(s_cluster), body, &r), 0);
        assert_int_equal(r.status, 204);
        proc_http_free(&r);
        free(body);
    }
    assert_true(sse_wait(w, 0, "title_change", s_kind_of, (void *)b, 10) >= 0);
    json_t *c =
        s_post(0, "/api/v2/chats", "{\"content\":[{\"type\":\"text\",\"text\":\"w\"}]}", 201);
    const char *chat = json_string_value(json_object_get(c, "id"));
    assert_true(sse_wait(w, 0, "created", s_kind_of, (void *)chat, WAIT_MS) >= 0);
    s_worker(chat, s_acquire);
    s_worker(chat, s_tool_step);
    int i = sse_wait(w, 0, "action_required", s_kind_of, (void *)chat, WAIT_MS);
    assert_true(i >= 0);
    json_t *calls = json_object_get(json_object_get(sse_get(w, i), "data"), "tool_calls");
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(calls, 0), "tool_call_id")), "w1");
    assert_true(sse_wait(w, 0, "status_change", s_kind_of, (void *)chat, WAIT_MS) >= 0);
    assert_int_equal(proc_http("PATCH", bpath, cluster_token(s_cluster), "{\"archived\":true}", &r),
                     0);
    assert_int_equal(r.status, 204);
    proc_http_free(&r);
    assert_true(sse_wait(w, 0, "archived", s_kind_of, (void *)b, WAIT_MS) >= 0);
    sse_close(&w);
    free(bpath);
    json_decref(c);
    json_decref(before);
}

static int s_is_after(json_t *e, void *after) {
    return json_integer_value(json_object_get(e, "id")) > *(int64_t *)after;
}

/* A client that has seen every row resumes with Last-Event-ID; an edit then deletes rows at
 * or before that id. The connection must be told (history_reset), not only given the new
 * row: it holds the deleted rows. This was the stream gap the chaos run found (invariant 5 of
 * tests/chaos/README.md), and its reproduction, moved here from test_chaos. */
static void test_resumed_stream_is_told_of_an_edit_before_its_resume_point(void **u) {
    (void)u;
    json_t *c =
        s_post(0, "/api/v2/chats", "{\"content\":[{\"type\":\"text\",\"text\":\"one\"}]}", 201);
    const char *chat = json_string_value(json_object_get(c, "id"));
    char *mpath = mem_printf("/api/v2/chats/%s/messages", chat);
    s_worker(chat, s_acquire);
    s_worker(chat, s_step);
    s_worker(chat, s_finish);
    json_decref(s_post(0, mpath, "{\"content\":[{\"type\":\"text\",\"text\":\"two\"}]}", 200));
    s_worker(chat, s_step);
    s_worker(chat, s_finish);
    char *first =
        cluster_sql(s_cluster, "SELECT min(id) FROM chat_messages WHERE chat_id = '%s'", chat);
    char *last =
        cluster_sql(s_cluster, "SELECT max(id) FROM chat_messages WHERE chat_id = '%s'", chat);
    int64_t last_id = strtoll(last, NULL, 10);
    /* Resumed after every row: the snapshot carries no message, only queue and status. Once
     * the status is there, the first sync is done and the edit lands on a live connection. */
    sse_t *s = s_stream(0, chat, last_id);
    assert_true(sse_wait(s, 0, "status", s_is_status, "waiting", WAIT_MS) >= 0);
    int mark = sse_count(s);
    s_edit(chat, first);
    int reset = s_want(s, mark, "history_reset");
    int row = sse_wait(s, reset, "message", s_is_after, &last_id, WAIT_MS);
    assert_true(row >= 0);
    assert_true(s_is_text(sse_get(s, row), "edited"));
    sse_close(&s);
    free(last);
    free(first);
    free(mpath);
    json_decref(c);
}

static void test_stream_rejects_bad_cursor_and_foreign_chat(void **u) {
    (void)u;
    char url[256];
    snprintf(url, sizeof url, "%s/api/v2/chats/00000000-0000-4000-8000-000000000000/stream",
             cluster_url(s_cluster, 0));
    proc_http_t r;
    assert_int_equal(proc_http("GET", url, cluster_token(s_cluster), NULL, &r), 0);
    assert_int_equal(r.status, 404);
    proc_http_free(&r);
    json_t *c = s_post(0, "/api/v2/chats", "{\"content\":[]}", 201);
    snprintf(url, sizeof url, "%s/api/v2/chats/%s/stream?after_id=x", cluster_url(s_cluster, 0),
             json_string_value(json_object_get(c, "id")));
    assert_int_equal(proc_http("GET", url, cluster_token(s_cluster), NULL, &r), 0);
    assert_int_equal(r.status, 400);
    proc_http_free(&r);
    json_decref(c);
}

/* A queue_update event whose queue holds exactly the texts in want ("" for none), in order. */
static int s_is_queue(json_t *e, void *want) {
    json_t *q = json_object_get(json_object_get(e, "data"), "queued_messages");
    char got[256] = "";
    size_t i;
    json_t *m;
    json_array_foreach(q, i, m) {
        json_t *t = json_object_get(json_array_get(json_object_get(m, "content"), 0), "text");
        size_t off = strlen(got);
        snprintf(got + off, sizeof got - off, "%s%s", i ? "," : "", json_string_value(t));
    }
    return json_is_array(q) && !strcmp(got, want);
}

/* Queues text on a busy chat through gateway 0; returns the queued message's id. */
static int64_t s_queue(const char *chat, const char *text) {
    char *path = mem_printf("/api/v2/chats/%s/messages", chat);
    char *body = mem_printf("{\"content\":[{\"type\":\"text\",\"text\":\"%s\"}],"
                            "\"busy_behavior\":\"queue\"}",
                            text);
    json_t *r = s_post(0, path, body, 200);
    assert_true(json_is_true(json_object_get(r, "queued")));
    int64_t id = json_integer_value(json_object_get(json_object_get(r, "queued_message"), "id"));
    assert_true(id > 0);
    json_decref(r);
    free(body);
    free(path);
    return id;
}

/* Deleting a queued message reaches an open stream as a queue_update without it: the stream
 * learns of the change only from queue_version, which the delete trigger advances (the one
 * guard of that counter on delete; test_chatstate_triggers.c checks it in the database). */
static void test_stream_reports_a_deleted_queued_message(void **u) {
    (void)u;
    json_t *c =
        s_post(0, "/api/v2/chats", "{\"content\":[{\"type\":\"text\",\"text\":\"busy\"}]}", 201);
    const char *chat = json_string_value(json_object_get(c, "id"));
    int64_t one = s_queue(chat, "one");
    (void)s_queue(chat, "two");
    sse_t *s = s_stream(0, chat, 0);
    int at = sse_wait(s, 0, "queue_update", s_is_queue, "one,two", WAIT_MS);
    if (at < 0) {
        fail_msg("no queue_update with one,two (have %d events)", sse_count(s));
    }
    char url[256];
    snprintf(url, sizeof url, "%s/api/v2/chats/%s/queue/%lld", cluster_url(s_cluster, 0), chat,
             (long long)one);
    proc_http_t r;
    assert_int_equal(proc_http("DELETE", url, cluster_token(s_cluster), NULL, &r), 0);
    assert_int_equal(r.status, 204);
    proc_http_free(&r);
    if (sse_wait(s, at + 1, "queue_update", s_is_queue, "two", WAIT_MS) < 0) {
        fail_msg("the stream was not told that queued message %lld was deleted", (long long)one);
    }
    sse_close(&s);
    json_decref(c);
}

/* Gateway gw's chatfleet_stream_reads_total (the chat streams' database reads). */
static long long s_stream_reads(int gw) {
    char url[256];
    snprintf(url, sizeof url, "%s/metrics", cluster_url(s_cluster, gw));
    proc_http_t r;
    assert_int_equal(proc_http("GET", url, cluster_token(s_cluster), NULL, &r), 0);
    assert_int_equal(r.status, 200);
    const char *line = strstr(r.body, "\nchatfleet_stream_reads_total ");
    if (!line) {
        fail_msg("no chatfleet_stream_reads_total in /metrics");
    }
    long long n = strtoll(line + strlen("\nchatfleet_stream_reads_total "), NULL, 10);
    proc_http_free(&r);
    return n;
}

/* The poll (ARCHITECTURE.md §7.4) reads the versions of the chats with streams in one
 * statement: an idle chat with many streams costs no stream a read, and a change committed
 * without any hint still reaches every one of them at the next poll (2 s here). */
static void test_the_poll_reads_a_chat_once_and_still_finds_a_change_no_hint_announced(void **u) {
    (void)u;
    enum { N = 8, POLLS = 3 };
    json_t *c = s_new_chat();
    const char *chat = json_string_value(json_object_get(c, "id"));
    s_worker(chat, s_acquire);
    s_worker(chat, s_attempt);
    sse_t *s[N];
    for (int i = 0; i < N; i++) {
        s[i] = s_stream(0, chat, 0);
        s_want(s[i], 0, "preview_reset");
    }
    usleep(1500 * 1000); /* past each stream's settle sync (FEED_SETTLE_MS and a hub tick) */
    long long before = s_stream_reads(0);
    usleep((POLLS * 2000 + 500) * 1000);
    long long polled = s_stream_reads(0) - before;
    /* A poll that synced every stream would have read N times per poll. */
    if (polled >= N) {
        fail_msg("%lld stream reads in %d polls of one idle chat with %d streams", polled, POLLS,
                 N);
    }
    /* A reply committed with no hint published at all. */
    cs_error_t err;
    chatstate_t *cs = chatstate_begin(cluster_db(s_cluster), &chatsetup_settings, chat, &err);
    assert_non_null(cs);
    if (s_step(cs, chat, &err) != 0) {
        fail_msg("step: %s", err.message);
    }
    assert_int_equal(chatstate_commit(&cs, NULL, NULL, &err), 0);
    for (int i = 0; i < N; i++) {
        if (sse_wait(s[i], 0, "message", s_is_text, "hello", 2000 + WAIT_MS) < 0) {
            fail_msg("stream %d never saw the unhinted reply (have %d events)", i, sse_count(s[i]));
        }
        sse_close(&s[i]);
    }
    json_decref(c);
}

/* A hinted change whose read failed still reaches the stream: the failed sync is tried again
 * at the hub's next tick. The reply is committed without its hint, every read of
 * chat_messages is made to wait behind a lock, the hint is published, and the stream's read
 * (waiting for the lock) is canceled. The hint is spent then, and the poll wakes a stream only
 * for a version no hint announced, so without the retry the reply would wait for the chat's
 * next change (issue 39: a chaos run's streams missed the rows committed while PostgreSQL
 * restarted). */
static void test_a_hinted_change_whose_read_failed_still_reaches_the_stream(void **u) {
    (void)u;
    json_t *c = s_new_chat();
    const char *chat = json_string_value(json_object_get(c, "id"));
    s_worker(chat, s_acquire);
    s_worker(chat, s_attempt);
    sse_t *s = s_stream(0, chat, 0);
    s_want(s, 0, "preview_reset");
    usleep(1500 * 1000); /* past the stream's settle sync (FEED_SETTLE_MS and a hub tick) */
    cs_error_t err;
    chatstate_t *cs = chatstate_begin(cluster_db(s_cluster), &chatsetup_settings, chat, &err);
    assert_non_null(cs);
    if (s_step(cs, chat, &err) != 0) {
        fail_msg("step: %s", err.message);
    }
    hint_update_t hint;
    assert_int_equal(chatstate_commit(&cs, NULL, &hint, &err), 0);
    PGconn *lock = db_connect(cluster_db_url(s_cluster), "test_gateway_stream lock");
    assert_non_null(lock);
    PGresult *r = PQexec(lock, "BEGIN; LOCK TABLE chat_messages IN ACCESS EXCLUSIVE MODE");
    assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
    PQclear(r);
    assert_int_equal(bus_publisher_update(s_bus, &hint), 0);
    /* The stream's sync has read the chat and waits for the lock: its read fails. */
    const char *cancel = "SELECT count(*) FILTER (WHERE pg_cancel_backend(pid)) > 0 FROM"
                         " pg_stat_activity WHERE application_name = 'chatfleet-gateway'"
                         " AND wait_event_type = 'Lock'";
    assert_true(cluster_wait(s_cluster, cancel, "t", WAIT_MS) >= 0);
    PQclear(PQexec(lock, "ROLLBACK"));
    PQfinish(lock);
    if (sse_wait(s, 0, "message", s_is_text, "hello", WAIT_MS) < 0) {
        fail_msg("the stream never saw the hinted reply its failed read missed (have %d events)",
                 sse_count(s));
    }
    sse_close(&s);
    json_decref(c);
}

/* The parts of stream s: each seq from 1 to n once, in order, and nothing else. */
static void s_assert_parts(sse_t *s, int which, int n) {
    int next = 1;
    for (int k = 0; k < sse_count(s); k++) {
        json_t *e = sse_get(s, k);
        if (strcmp(json_string_value(json_object_get(e, "event")), "message_part") != 0) {
            continue;
        }
        json_t *mp = json_object_get(json_object_get(e, "data"), "message_part");
        int64_t seq = json_integer_value(json_object_get(mp, "seq"));
        if (seq != next) {
            fail_msg("stream %d: part seq %lld where %d was next", which, (long long)seq, next);
        }
        next++;
    }
    if (next != n + 1) {
        fail_msg("stream %d: %d parts of %d", which, next - 1, n);
    }
}

/* The streams of one chat share their reads (chatread.h): the hints that start a turn cost the
 * chat's N streams a read or two between them, not N each, and the hint of the step's commit
 * exactly one; every stream still gets every part once, in order, and the step's message.
 * chatfleet_stream_reads_total counts the reads. */
static void test_the_streams_of_a_chat_share_one_read_per_hint(void **u) {
    (void)u;
    enum { N = 16, PARTS = 40 };
    json_t *c = s_new_chat();
    const char *chat = json_string_value(json_object_get(c, "id"));
    sse_t *s[N];
    int first[N];
    for (int i = 0; i < N; i++) {
        s[i] = s_stream(0, chat, 0);
        first[i] = s_want(s[i], 0, "preview_reset");
    }
    usleep(1500 * 1000); /* past each stream's settle sync (FEED_SETTLE_MS and a hub tick) */
    long long before = s_stream_reads(0);
    s_worker(chat, s_acquire);
    s_worker(chat, s_attempt);
    for (int i = 0; i < N; i++) {
        if (sse_wait(s[i], first[i] + 1, "preview_reset", NULL, NULL, WAIT_MS) < 0) {
            fail_msg("stream %d never saw the attempt's preview_reset", i);
        }
    }
    long long started = s_stream_reads(0) - before;
    /* One read per hint (two here), and a third at most when the second hint came while the
     * first one's read was in flight; a read per stream would be 2N. */
    if (started > 3) {
        fail_msg("%lld stream reads for %d streams of one chat and 2 hints", started, N);
    }
    cs_fence_t f;
    s_fence(chat, &f);
    for (int seq = 1; seq <= PARTS; seq++) {
        char text[16];
        snprintf(text, sizeof text, "w%d", seq);
        s_part_of(chat, &f, seq, text);
    }
    before = s_stream_reads(0);
    s_worker(chat, s_step);
    for (int i = 0; i < N; i++) {
        if (sse_wait(s[i], 0, "message", s_is_text, "hello", WAIT_MS) < 0) {
            fail_msg("stream %d never saw the step's message", i);
        }
    }
    assert_int_equal(s_stream_reads(0) - before, 1);
    for (int i = 0; i < N; i++) {
        s_assert_parts(s[i], i, PARTS);
        sse_close(&s[i]);
    }
    json_decref(c);
}

static int s_setup(void **state) {
    (void)state;
    /* No workers: the test is the worker, publishing on the broker at s_pub. The gateways
     * keep the settings they had before the harness: the default lease (30 s), a 2 s poll. */
    snprintf(s_pub, sizeof s_pub, "tcp://127.0.0.1:%d", proc_free_port());
    char *pub = mem_printf("CHATFLEET_BROKER_PUB=%s", s_pub);
    const char *env[] = {pub, "CHATFLEET_LEASE_STALE_MS=30000", "CHATFLEET_STREAM_POLL_MS=2000",
                         NULL};
    cluster_opts_t o = {.name = "test_gateway_stream", .gateways = 2, .workers = 0, .env = env};
    s_cluster = cluster_new(&o);
    free(pub);
    s_bus = bus_publisher_new(s_pub);
    ASSERT(s_bus);
    s_sink = bus_publisher_sink(s_bus);
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    bus_publisher_destroy(&s_bus);
    return cluster_destroy(&s_cluster) == 0 ? 0 : -1;
}

#define LAG_PARTS      1500
#define LAG_PART_BYTES 8000 /* 12 MB in all: more than the sockets between them hold */

typedef struct {
    int64_t next; /* the seq expected next */
    bool bad;     /* a part out of order, repeated, or not the text sent */
} lag_t;

static void s_on_lag_event(void *ctx, int conn, const char *event, const char *data, size_t len,
                           int64_t now_us) {
    (void)conn;
    (void)len;
    (void)now_us;
    lag_t *l = ctx;
    if (strcmp(event, "message_part") != 0) {
        return;
    }
    json_t *e = json_loads(data, 0, NULL);
    json_t *mp = json_object_get(e, "message_part");
    int64_t seq = json_integer_value(json_object_get(mp, "seq"));
    const char *text = json_string_value(json_object_get(json_object_get(mp, "part"), "text"));
    char head[32];
    snprintf(head, sizeof head, "p%lld-", (long long)seq);
    l->bad |= seq != l->next || !text || strncmp(text, head, strlen(head)) != 0 ||
              strlen(text) != LAG_PART_BYTES;
    l->next = seq + 1;
    json_decref(e);
}

/* The gateway writes a stream's parts as they come and, when the client does not read, keeps
 * the rest and coalesces what follows: the client that reads late still gets each part once, in
 * order, in a well-framed chunked body (ssefan fails the connection on a framing error). */
static void test_a_client_that_reads_late_gets_every_part_in_order(void **u) {
    (void)u;
    json_t *c = s_new_chat();
    const char *chat = json_string_value(json_object_get(c, "id"));
    ssefan_t *fan = ssefan_new(cluster_url(s_cluster, 0), cluster_token(s_cluster));
    assert_non_null(fan);
    lag_t l = {.next = 1};
    ssefan_set_handler(fan, s_on_lag_event, &l);
    char *path = mem_printf("/api/v2/chats/%s/stream", chat);
    int conn = ssefan_open(fan, path);
    int64_t end = id_now_ms() + WAIT_MS;
    while (ssefan_count(fan, conn, "preview_reset") == 0 && id_now_ms() < end) {
        ssefan_poll(fan, 50);
    }
    /* The attempt's hint reaches the stream (so its parts will): the new episode's reset. */
    s_worker(chat, s_acquire);
    s_worker(chat, s_attempt);
    while (ssefan_count(fan, conn, "preview_reset") < 2 && id_now_ms() < end) {
        ssefan_poll(fan, 50);
    }
    assert_int_equal(ssefan_count(fan, conn, "preview_reset"), 2);
    /* The parts, paced for the bus's high-water marks, while the client reads nothing. */
    cs_fence_t f;
    s_fence(chat, &f);
    char *text = mem_alloc(LAG_PART_BYTES + 1);
    for (int seq = 1; seq <= LAG_PARTS; seq++) {
        int k = snprintf(text, LAG_PART_BYTES + 1, "p%d-", seq);
        memset(text + k, 'x', (size_t)(LAG_PART_BYTES - k));
        text[LAG_PART_BYTES] = '\0';
        s_part_of(chat, &f, seq, text);
        if (seq % 50 == 0) {
            usleep(20 * 1000);
        }
    }
    free(text);
    usleep(500 * 1000);
    end = id_now_ms() + 4 * WAIT_MS;
    while (l.next <= LAG_PARTS && !l.bad && ssefan_state(fan, conn) == SSEFAN_OPEN &&
           id_now_ms() < end) {
        ssefan_poll(fan, 50);
    }
    assert_false(l.bad);
    assert_int_equal(ssefan_state(fan, conn), SSEFAN_OPEN);
    assert_int_equal(l.next, LAG_PARTS + 1);
    assert_int_equal(ssefan_count(fan, conn, "message_part"), LAG_PARTS);
    ssefan_destroy(&fan);
    free(path);
    json_decref(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_bootstrap_sends_preview_reset_after_the_snapshot),
        cmocka_unit_test(test_stream_follows_a_scripted_turn),
        cmocka_unit_test(test_stream_sends_the_persisted_error_of_a_chat_in_error),
        cmocka_unit_test(test_resumed_stream_is_told_of_an_edit_before_its_resume_point),
        cmocka_unit_test(test_stream_rejects_bad_cursor_and_foreign_chat),
        cmocka_unit_test(test_watch_reports_lifecycle_of_all_chats),
        cmocka_unit_test(test_stream_reports_a_deleted_queued_message),
        cmocka_unit_test(
            test_the_poll_reads_a_chat_once_and_still_finds_a_change_no_hint_announced),
        cmocka_unit_test(test_a_hinted_change_whose_read_failed_still_reaches_the_stream),
        cmocka_unit_test(test_a_client_that_reads_late_gets_every_part_in_order),
        cmocka_unit_test(test_the_streams_of_a_chat_share_one_read_per_hint),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
