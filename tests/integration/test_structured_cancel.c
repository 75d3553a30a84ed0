/*
 * Deleting a queued structured request while another turn waits on a dynamic tool: the
 * cancellation receipt arrives on the stream (through the broker's hint, the poller is set
 * far off) and on REST at once and identical, and the waiting turn's attempt, history
 * version, preview and pending call are untouched.
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
#include <time.h>

#include "chatsetup.h"
#include "chatstate.h"
#include "cluster.h"
#include "id.h"
#include "mem.h"
#include "proc.h"
#include "sse.h"

#define HINT_MS 3000 /* well under the 60 s stream poll: only a hint can deliver in time */

static cluster_t *s_cluster;

static json_t *s_call(const char *method, const char *path, const char *body, long want) {
    char url[256];
    snprintf(url, sizeof url, "%s%s", cluster_url(s_cluster, 0), path);
    proc_http_t r;
    assert_int_equal(proc_http(method, url, cluster_token(s_cluster), body, &r), 0);
    if (r.status != want) {
        fail_msg("%s %s: want %ld, got %ld: %s", method, path, want, r.status, r.body);
    }
    json_t *v = r.body[0] ? json_loads(r.body, 0, NULL) : json_null();
    proc_http_free(&r);
    return v;
}

/* Acts as the worker: acquire, an attempt, a dynamic tool call, requires_action. */
static void s_wait_on_dynamic_tool(const char *chat) {
    PGconn *conn = cluster_db(s_cluster);
    cs_error_t err;
    cs_fence_t f;
    chatstate_t *cs = chatstate_begin(conn, &chatsetup_settings, chat, &err);
    assert_non_null(cs);
    assert_int_equal(chatstate_acquire(cs, CHATSETUP_WORKER, CHATSETUP_RUNNER, &err), 0);
    assert_int_equal(chatstate_commit(&cs, NULL, NULL, &err), 0);
    cs = chatstate_begin(conn, &chatsetup_settings, chat, &err);
    chatsetup_fence(conn, chat, &f);
    int64_t attempt;
    assert_int_equal(chatstate_record_generation_attempt(cs, &f, &attempt, &err), 0);
    f.generation_attempt = attempt;
    cs_message_t call = {.role = "assistant",
                         .content = "[{\"type\":\"tool-call\",\"tool_call_id\":\"dyn_1\","
                                    "\"tool_name\":\"ask\",\"args\":{}}]"};
    assert_int_equal(chatstate_commit_step(cs, &f, &call, 1, &err), 0);
    f.history_version = -1;
    f.generation_attempt = -1;
    assert_int_equal(chatstate_enter_requires_action(cs, &f, &err), 0);
    assert_int_equal(chatstate_commit(&cs, NULL, NULL, &err), 0);
}

static int s_is_receipt(json_t *e, void *rid) {
    json_t *so = json_object_get(json_object_get(json_object_get(e, "data"), "message"),
                                 "structured_output");
    return so && !strcmp(json_string_value(json_object_get(so, "request_id")), rid);
}

static void test_queue_deletion_during_a_dynamic_wait_cancels_at_once(void **u) {
    (void)u;
    json_t *c =
        s_call("POST", "/api/v2/chats", "{\"content\":[{\"type\":\"text\",\"text\":\"x\"}]}", 201);
    const char *chat = json_string_value(json_object_get(c, "id"));
    s_wait_on_dynamic_tool(chat);
    char *path = mem_printf("/api/v2/chats/%s/messages", chat);
    json_t *q = s_call("POST", path,
                       "{\"content\":[{\"type\":\"text\",\"text\":\"later\"}],\"response_format\":"
                       "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":{"
                       "\"type\":\"integer\"}}}}",
                       200);
    json_t *qm = json_object_get(q, "queued_message");
    char *rid = mem_strdup(json_string_value(json_object_get(qm, "structured_output_request_id")));
    char *qpath = mem_printf("/api/v2/chats/%s/queue/%lld", chat,
                             (long long)json_integer_value(json_object_get(qm, "id")));
    char *before = cluster_sql(s_cluster,
                               "SELECT generation_attempt || '/' || history_version || '/' ||"
                               " status FROM chats WHERE id = '%s'",
                               chat);
    char url[256];
    snprintf(url, sizeof url, "%s/api/v2/chats/%s/stream", cluster_url(s_cluster, 0), chat);
    sse_t *stream = sse_open(url, cluster_token(s_cluster), 0);
    assert_true(sse_wait(stream, 0, "action_required", NULL, NULL, HINT_MS) >= 0);
    /* Past the stream's settle sync (FEED_SETTLE_MS): from here only a hint can deliver. The
     * wait also gives the new subscription time to reach the broker on a loaded machine (a
     * hint published before it arrives reaches nobody: the settle sync covers only the first
     * FEED_SETTLE_MS), which 500 ms once did not under a parallel ctest. */
    struct timespec settle = {1, 500 * 1000 * 1000};
    nanosleep(&settle, NULL);
    int mark = sse_count(stream);
    int64_t t0 = id_now_ms();
    json_decref(s_call("DELETE", qpath, NULL, 204));
    int i = sse_wait(stream, mark, "message", s_is_receipt, rid, HINT_MS);
    assert_true(i >= 0);
    printf("cancellation receipt on the stream %lld ms after DELETE\n",
           (long long)(id_now_ms() - t0));
    json_t *streamed =
        json_object_get(json_object_get(json_object_get(sse_get(stream, i), "data"), "message"),
                        "structured_output");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(streamed, "error"), "code")),
        "queue_deleted");
    /* REST shows the same receipt. */
    json_t *listing = s_call("GET", path, NULL, 200);
    json_t *rest = NULL;
    size_t k;
    json_t *m;
    json_array_foreach(json_object_get(listing, "messages"), k, m) {
        json_t *so = json_object_get(m, "structured_output");
        if (so && !strcmp(json_string_value(json_object_get(so, "request_id")), rid)) {
            rest = so;
        }
    }
    assert_non_null(rest);
    assert_true(json_equal(rest, streamed));
    /* The waiting turn is untouched: attempt, history, status, the pending call, the preview. */
    char *after = cluster_sql(s_cluster,
                              "SELECT generation_attempt || '/' || history_version || '/' ||"
                              " status FROM chats WHERE id = '%s'",
                              chat);
    assert_string_equal(before, after);
    char *sql =
        mem_printf("SELECT string_agg(call_id, ',') FROM (%s) p", chatstate_pending_calls_sql);
    const char *p[] = {chat};
    PGresult *res = PQexecParams(cluster_db(s_cluster), sql, 1, NULL, p, NULL, NULL, 0);
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    assert_string_equal(PQgetvalue(res, 0, 0), "dyn_1");
    PQclear(res);
    free(sql);
    for (int e = mark; e < sse_count(stream); e++) {
        const char *name = json_string_value(json_object_get(sse_get(stream, e), "event"));
        assert_true(strcmp(name, "preview_reset") != 0 && strcmp(name, "history_reset") != 0);
    }
    printf("waiting turn unchanged: %s; pending call dyn_1; no preview or history reset\n", after);
    sse_close(&stream);
    json_decref(listing);
    free(after);
    free(before);
    free(qpath);
    free(rid);
    json_decref(q);
    free(path);
    json_decref(c);
}

static int s_setup(void **state) {
    (void)state;
    static const char *const env[] = {"CHATFLEET_STREAM_POLL_MS=60000", NULL};
    cluster_opts_t o = {.name = "test_structured_cancel", .gateways = 1, .workers = 0, .env = env};
    s_cluster = cluster_new(&o);
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    return cluster_destroy(&s_cluster) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queue_deletion_during_a_dynamic_wait_cancels_at_once),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
