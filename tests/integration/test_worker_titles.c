/*
 * Generated titles end to end (ARCHITECTURE.md §7.8): a cluster of real processes on the sim.
 * A new chat gets a generated title once, through the {title} structured request (the sim
 * answers with the message's first words), written at once when it ends first and in the
 * transaction of the turn's reply when the reply ends first, and a watch sees its
 * title_change; a user title
 * is never replaced; a failing title call and an answer that fails the {title} schema leave
 * the fallback, and the turn is answered either way; an interrupt during the title call
 * cancels it with the turn, and one after it keeps the title the call came to.
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
#include <unistd.h>

#include "cluster.h"
#include "mem.h"
#include "proc.h"
#include "sse.h"

#define WAIT_MS 20000

static cluster_t *s_cluster;

/* POST /chats with body; the new chat's id (caller frees). */
static char *s_create(const char *body) {
    char url[256];
    snprintf(url, sizeof url, "%s/api/v2/chats", cluster_url(s_cluster, 0));
    proc_http_t r;
    assert_int_equal(proc_http("POST", url, cluster_token(s_cluster), body, &r), 0);
    if (r.status != 201) {
        fail_msg("POST /api/v2/chats: %ld %s", r.status, r.body);
    }
    json_t *v = json_loads(r.body, 0, NULL);
    proc_http_free(&r);
    char *id = mem_strdup(json_string_value(json_object_get(v, "id")));
    json_decref(v);
    return id;
}

static char *s_chat(const char *text) {
    char *body = mem_printf("{\"content\":[{\"type\":\"text\",\"text\":\"%s\"}]}", text);
    char *id = s_create(body);
    free(body);
    return id;
}

/* Waits until the chat's turn is answered and it is idle. */
static void s_wait_answered(const char *chat, int replies) {
    char *q = mem_printf("SELECT (SELECT count(*) FROM chat_messages WHERE chat_id = c.id AND"
                         " role = 'assistant') || ':' || status FROM chats c WHERE id = '%s'",
                         chat);
    char want[32];
    snprintf(want, sizeof want, "%d:waiting", replies);
    if (cluster_wait(s_cluster, q, want, WAIT_MS) < 0) {
        fail_msg("chat %s: not answered %d times", chat, replies);
    }
    free(q);
}

static char *s_title(const char *chat) {
    char *t = cluster_sql(s_cluster,
                          "SELECT title_source || ':' || title FROM chats WHERE id = '%s'", chat);
    assert_non_null(t);
    return t;
}

/* Any event of the chat ctx names. */
static int s_is_of_chat(json_t *ev, void *ctx) {
    const json_t *chat = json_object_get(json_object_get(ev, "data"), "chat");
    const char *id = json_string_value(json_object_get(chat, "id"));
    return id && !strcmp(id, ctx);
}

/* A title_change event of the chat ctx names, with a generated title. */
static int s_is_title_change(json_t *ev, void *ctx) {
    const json_t *chat = json_object_get(json_object_get(ev, "data"), "chat");
    const char *id = json_string_value(json_object_get(chat, "id"));
    const char *title = json_string_value(json_object_get(chat, "title"));
    return id && title && !strcmp(id, ctx) && !strcmp(title, "Plan a trip to Lisbon in");
}

/* Fails unless "<title usage rows>:<written by the reply's transaction>" of chat is want. */
static void s_expect_same_transaction(const char *chat, const char *want) {
    char *same = cluster_sql(s_cluster,
                             "SELECT count(*) || ':' || bool_and(u.xmin::text = m.xmin::text)"
                             " FROM chat_usage u JOIN chat_messages m ON m.chat_id = u.chat_id"
                             " AND m.role = 'assistant' WHERE u.chat_id = '%s'"
                             " AND u.kind = 'title'",
                             chat);
    assert_non_null(same);
    assert_string_equal(same, want);
    free(same);
}

/* A reply that ends before its title call: the step waits for the title, which is carried
 * into the reply's bundle (ARCHITECTURE.md §6.5): one transaction writes both. */
static void test_a_reply_faster_than_its_title_carries_it(void **u) {
    (void)u;
    char *chat = s_chat("[sim:title-slow 200][sim:words 1] Count the stars over Madeira tonight");
    s_wait_answered(chat, 1);
    char *t = s_title(chat);
    assert_string_equal(t, "generated:Count the stars over Madeira tonight");
    free(t);
    s_expect_same_transaction(chat, "1:true");
    free(chat);
}

static void test_a_new_chat_gets_one_generated_title_and_a_watch_sees_it(void **u) {
    (void)u;
    char url[256];
    snprintf(url, sizeof url, "%s/api/v2/chats/watch", cluster_url(s_cluster, 0));
    sse_t *w = sse_open(url, cluster_token(s_cluster), 0);
    assert_non_null(w);
    /* The watch has made its first read once it reports a chat as created (a chat created
     * before that read is in its first snapshot, with no event): chats with a user title,
     * which get no generated one, until one is reported. */
    bool ready = false;
    for (int i = 0; i < 20 && !ready; i++) {
        char *first = s_create("{\"title\":\"warm-up\",\"content\":[]}");
        ready = sse_wait(w, 0, "created", s_is_of_chat, first, 1000) >= 0;
        free(first);
    }
    assert_true(ready);
    /* The title call paced (60 ms a chunk), so that the watch sees the chat created with its
     * fallback title before the generated one is written, whatever the machine's speed. */
    char *chat = s_chat("[sim:slow 60] Plan a trip to Lisbon in spring, with trains");
    s_wait_answered(chat, 1);
    char *t = s_title(chat);
    assert_string_equal(t, "generated:Plan a trip to Lisbon in");
    free(t);
    /* The title ended before the reply, so it was written at once, by a transaction of its
     * own (ARCHITECTURE.md §6.5, "Side calls"). */
    s_expect_same_transaction(chat, "1:false");
    assert_true(sse_wait(w, 0, "title_change", s_is_title_change, chat, WAIT_MS) >= 0);
    sse_close(&w);
    /* The title was written without touching updated_at, and never again on a later turn. */
    char *at = cluster_sql(s_cluster, "SELECT title_updated_at FROM chats WHERE id = '%s'", chat);
    char *url2 = mem_printf("%s/api/v2/chats/%s/messages", cluster_url(s_cluster, 0), chat);
    proc_http_t r;
    assert_int_equal(proc_http("POST", url2, cluster_token(s_cluster),
                               "{\"content\":[{\"type\":\"text\",\"text\":\"And back by ship\"}]}",
                               &r),
                     0);
    assert_int_equal(r.status, 200);
    proc_http_free(&r);
    free(url2);
    s_wait_answered(chat, 2);
    char *at2 = cluster_sql(s_cluster, "SELECT title_updated_at FROM chats WHERE id = '%s'", chat);
    assert_string_equal(at, at2);
    t = s_title(chat);
    assert_string_equal(t, "generated:Plan a trip to Lisbon in");
    free(t);
    free(at);
    free(at2);
    free(chat);
}

static void test_a_user_title_is_never_replaced(void **u) {
    (void)u;
    char *chat = s_create("{\"title\":\"Mine\",\"content\":[{\"type\":\"text\",\"text\":"
                          "\"Write a haiku about rain\"}]}");
    s_wait_answered(chat, 1);
    char *t = s_title(chat);
    assert_string_equal(t, "user:Mine");
    free(t);
    free(chat);
}

static void test_a_failing_or_invalid_title_answer_leaves_the_fallback(void **u) {
    (void)u;
    const char *prompts[] = {"[sim:title-fail] Compare two sorting algorithms",
                             "[sim:title-invalid] Compare two sorting algorithms"};
    for (int i = 0; i < 2; i++) {
        char *chat = s_chat(prompts[i]);
        char *before = s_title(chat);
        s_wait_answered(chat, 1); /* the turn is answered all the same */
        char *after = s_title(chat);
        assert_true(!strncmp(before, "fallback:", 9));
        assert_string_equal(after, before);
        free(before);
        free(after);
        free(chat);
    }
}

/* Waits until chat runs on a worker, then ms more, and interrupts it. */
static void s_interrupt_after(const char *chat, int ms) {
    char *q =
        mem_printf("SELECT status FROM chats WHERE id = '%s' AND worker_id IS NOT NULL", chat);
    assert_true(cluster_wait(s_cluster, q, "running", WAIT_MS) >= 0);
    free(q);
    usleep((useconds_t)ms * 1000);
    char *url = mem_printf("%s/api/v2/chats/%s/interrupt", cluster_url(s_cluster, 0), chat);
    proc_http_t r;
    assert_int_equal(proc_http("POST", url, cluster_token(s_cluster), NULL, &r), 0);
    assert_int_equal(r.status, 200);
    proc_http_free(&r);
    free(url);
}

/* An interrupt that lands while the title call (a side call beside the turn's, §6.5, paced
 * to take about 1.8 s) and the reply both stream cancels both: the turn ends (with a partial
 * reply, or none when no part had streamed yet), the title stays the fallback, and the worker
 * goes on to answer the next turn with a title of its own. */
static void test_an_interrupt_during_the_title_call_cancels_it_with_the_turn(void **u) {
    (void)u;
    char *chat = s_chat("[sim:slow 300] Plan a long walk along the coast in autumn");
    s_interrupt_after(chat, 500); /* into the calls, well before the title's end */
    char *q =
        mem_printf("SELECT status || ':' || (worker_id IS NULL) || ':' || (SELECT count(*) <= 1"
                   " FROM chat_messages WHERE chat_id = c.id AND role = 'assistant') FROM chats c"
                   " WHERE id = '%s'",
                   chat);
    assert_true(cluster_wait(s_cluster, q, "waiting:true:true", WAIT_MS) >= 0);
    free(q);
    char *t = s_title(chat);
    assert_true(!strncmp(t, "fallback:", 9));
    free(t);
    char *next = s_chat("Name three rivers in Portugal");
    s_wait_answered(next, 1);
    t = s_title(next);
    assert_string_equal(t, "generated:Name three rivers in Portugal");
    free(t);
    free(next);
    free(chat);
}

/* An interrupt after the title call ended, while the reply still streams: the turn's bundle
 * that would have carried the title never comes, and the title is written on its own all the
 * same (ARCHITECTURE.md §6.5, "Side calls"). */
static void test_an_interrupt_after_the_title_call_keeps_its_title(void **u) {
    (void)u;
    /* The title (a few chunks 100 ms apart) ends within about a second; the reply (60 words
     * 100 ms apart) streams for six. */
    char *chat = s_chat("[sim:slow 100][sim:words 60] Plan a short ride to Porto by train");
    s_interrupt_after(chat, 2500);
    char *q =
        mem_printf("SELECT status || ':' || (worker_id IS NULL) FROM chats WHERE id = '%s'", chat);
    assert_true(cluster_wait(s_cluster, q, "waiting:true", WAIT_MS) >= 0);
    free(q);
    char *t = s_title(chat);
    assert_string_equal(t, "generated:Plan a short ride to Porto");
    free(t);
    free(chat);
}

static int s_setup(void **state) {
    (void)state;
    cluster_opts_t o = {.name = "test_worker_titles", .gateways = 1, .workers = 1};
    s_cluster = cluster_new(&o);
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    return cluster_destroy(&s_cluster) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_new_chat_gets_one_generated_title_and_a_watch_sees_it),
        cmocka_unit_test(test_a_reply_faster_than_its_title_carries_it),
        cmocka_unit_test(test_a_user_title_is_never_replaced),
        cmocka_unit_test(test_a_failing_or_invalid_title_answer_leaves_the_fallback),
        cmocka_unit_test(test_an_interrupt_during_the_title_call_cancels_it_with_the_turn),
        cmocka_unit_test(test_an_interrupt_after_the_title_call_keeps_its_title),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
