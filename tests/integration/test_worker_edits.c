/*
 * Two worker behaviours seen from a client: an edit during generation restarts the turn on
 * the new history (the interrupted attempt commits nothing), and a 429 with retry-after is
 * retried with the retry state on the stream before the turn completes.
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

#include "cluster.h"
#include "mem.h"
#include "proc.h"
#include "sse.h"

#define WAIT_MS 20000

static cluster_t *s_cluster;

static json_t *s_call(const char *method, const char *path, const char *body, long want) {
    char url[256];
    snprintf(url, sizeof url, "%s%s", cluster_url(s_cluster, 0), path);
    proc_http_t r;
    assert_int_equal(proc_http(method, url, cluster_token(s_cluster), body, &r), 0);
    if (r.status != want) {
        fail_msg("%s %s: want %ld, got %ld: %s", method, path, want, r.status, r.body);
    }
    json_t *v = json_loads(r.body, 0, NULL);
    proc_http_free(&r);
    return v;
}

static int s_wait_sql(const char *want, const char *fmt, const char *chat) {
    char *q = mem_printf(fmt, chat);
    int64_t ms = cluster_wait(s_cluster, q, want, WAIT_MS);
    free(q);
    return ms >= 0 ? 0 : -1;
}

static void test_edit_during_generation_restarts_on_the_new_history(void **u) {
    (void)u;
    json_t *c = s_call("POST", "/api/v2/chats",
                       "{\"content\":[{\"type\":\"text\",\"text\":\"[sim:slow 100] [sim:words 60]"
                       " first question\"}]}",
                       201);
    const char *chat = json_string_value(json_object_get(c, "id"));
    /* The first attempt is streaming (an attempt is recorded, nothing committed yet). */
    assert_int_equal(s_wait_sql("1", "SELECT generation_attempt FROM chats WHERE id = '%s'", chat),
                     0);
    char *first = cluster_sql(s_cluster,
                              "SELECT min(id) FROM chat_messages WHERE chat_id = '%s'"
                              " AND role = 'user'",
                              chat);
    char *path = mem_printf("/api/v2/chats/%s/messages/%s", chat, first);
    json_decref(s_call("PATCH", path,
                       "{\"content\":[{\"type\":\"text\",\"text\":\"second question\"}]}", 200));
    assert_int_equal(s_wait_sql("waiting", "SELECT status FROM chats WHERE id = '%s'", chat), 0);
    /* One answer, to the edited question; none to the first. */
    char *answers = cluster_sql(s_cluster,
                                "SELECT count(*) FROM chat_messages WHERE chat_id = '%s'"
                                " AND role = 'assistant' AND NOT deleted",
                                chat);
    assert_string_equal(answers, "1");
    char *text = cluster_sql(s_cluster,
                             "SELECT content->0->>'text' FROM chat_messages WHERE chat_id = '%s'"
                             " AND role = 'assistant' AND NOT deleted",
                             chat);
    assert_non_null(strstr(text, "second question"));
    assert_null(strstr(text, "first question"));
    char *stale = cluster_sql(s_cluster,
                              "SELECT count(*) FROM chat_messages WHERE chat_id = '%s'"
                              " AND role = 'assistant' AND content::text LIKE '%%first question%%'",
                              chat);
    assert_string_equal(stale, "0"); /* the interrupted attempt committed nothing */
    free(stale);
    free(text);
    free(answers);
    free(path);
    free(first);
    json_decref(c);
}

static int s_is_retry(json_t *e, void *ctx) {
    (void)ctx;
    json_t *r = json_object_get(json_object_get(e, "data"), "retry");
    return json_is_object(r);
}

static void test_429_with_retry_after_is_retried_with_retry_events(void **u) {
    (void)u;
    json_t *c = s_call("POST", "/api/v2/chats", "{\"content\":[]}", 201);
    const char *chat = json_string_value(json_object_get(c, "id"));
    char url[256];
    snprintf(url, sizeof url, "%s/api/v2/chats/%s/stream", cluster_url(s_cluster, 0), chat);
    sse_t *stream = sse_open(url, cluster_token(s_cluster), 0);
    assert_true(sse_wait(stream, 0, "status", NULL, NULL, WAIT_MS) >= 0);
    char *path = mem_printf("/api/v2/chats/%s/messages", chat);
    json_decref(s_call("POST", path,
                       "{\"content\":[{\"type\":\"text\",\"text\":\"[sim:fail 429 x2 retry-after"
                       " 300] hello\"}]}",
                       200));
    int r = sse_wait(stream, 0, "retry", s_is_retry, NULL, WAIT_MS);
    assert_true(r >= 0);
    json_t *retry = json_object_get(json_object_get(sse_get(stream, r), "data"), "retry");
    assert_int_equal(json_integer_value(json_object_get(retry, "status")), 429);
    assert_int_equal(json_integer_value(json_object_get(retry, "delay_ms")), 300);
    printf("retry event: status 429, delay_ms 300 (the provider's retry-after), attempt %lld\n",
           (long long)json_integer_value(json_object_get(retry, "attempt")));
    assert_int_equal(s_wait_sql("waiting", "SELECT status FROM chats WHERE id = '%s'", chat), 0);
    char *text = cluster_sql(s_cluster,
                             "SELECT content->0->>'text' FROM chat_messages WHERE chat_id = '%s'"
                             " AND role = 'assistant'",
                             chat);
    assert_non_null(text);
    assert_non_null(strstr(text, "hello"));
    free(text);
    free(path);
    sse_close(&stream);
    json_decref(c);
}

static int s_setup(void **state) {
    (void)state;
    static const char *const env[] = {"CHATFLEET_WORKER_RETRY_BASE_MS=50", NULL};
    cluster_opts_t o = {.name = "test_worker_edits", .gateways = 1, .workers = 2, .env = env};
    s_cluster = cluster_new(&o);
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    return cluster_destroy(&s_cluster) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_edit_during_generation_restarts_on_the_new_history),
        cmocka_unit_test(test_429_with_retry_after_is_retried_with_retry_events),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
