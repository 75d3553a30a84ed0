/*
 * Subagents (issue 36; ARCHITECTURE.md §3, "Families" and "Agent waits"), end to end over real
 * processes: PostgreSQL, a broker, a gateway and two workers running the sim, which spawns,
 * messages and waits by directive (worker/README.md, "The sim provider"). Proves that children
 * run in parallel and the parent resumes exactly once with every child's answer; that a parent
 * waits holding no owner, lease or slot; that killing the worker that ran the parent, or the
 * worker running a child mid-turn, still gives exactly one resumption; that an interrupt of
 * the parent reaches the whole family; that the depth and children caps refuse a spawn with a
 * tool error before any child exists; that a family archive is all or nothing; that a child's
 * structured output comes back as its validated value; and that message_agent reaches a child.
 *
 * The workers run with CHATFLEET_SUBAGENT_MAX_CHILDREN=3 and CHATFLEET_SUBAGENT_MAX_DEPTH=1, and
 * the limiter split into pools: 8 root slots, 3 subagent slots after them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "id.h"
#include "mem.h"
#include "proc.h"

#define DONE_MS 60000 /* a family's whole run, takeovers included */

static cluster_t *s_c;

/* ---- helpers ---- */

static void s_parent(const char *text, char id[ID_UUID_LEN + 1]) {
    long status = cluster_create_chat(s_c, 0, text, id);
    assert_int_equal(status, 201);
}

/* The value of a query, which must not fail; the caller frees. */
static char *s_sql(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static char *s_sql(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *q = mem_vprintf(fmt, ap);
    va_end(ap);
    char *v = cluster_sql(s_c, "%s", q);
    if (!v) {
        fail_msg("query failed: %s", q);
    }
    free(q);
    return v;
}

static long s_sql_long(const char *fmt, const char *id) {
    char *v = s_sql(fmt, id);
    long n = strtol(v, NULL, 10);
    free(v);
    return n;
}

static void s_wait_sql(const char *q, const char *want, int64_t ms) {
    if (cluster_wait(s_c, q, want, ms) < 0) {
        char *got = cluster_sql(s_c, "%s", q);
        fail_msg("%s: want %s, got %s", q, want, got ? got : "(none)");
    }
}

/* Waits until the chat is idle (waiting, no owner). */
static void s_wait_idle(const char *chat) {
    char got[64];
    if (cluster_wait_status(s_c, chat, "waiting:true", DONE_MS, got, sizeof got) != 0) {
        fail_msg("chat %s did not end waiting: %s", chat, got);
    }
}

/* Waits until the parent sits in an agent wait: requires_action, no owner, no heartbeat row. */
static void s_wait_agent_wait(const char *parent) {
    char *q = mem_printf("SELECT c.status = 'requires_action' AND c.waiting_on_agents"
                         " AND c.worker_id IS NULL AND NOT EXISTS (SELECT 1 FROM chat_heartbeats"
                         " h WHERE h.chat_id = c.id) FROM chats c WHERE c.id = '%s'",
                         parent);
    s_wait_sql(q, "t", 30000);
    free(q);
}

/* The parent's children, oldest first, comma-separated ("" when none). */
static char *s_children(const char *parent) {
    return s_sql("SELECT coalesce(string_agg(id::text, ',' ORDER BY created_at, id), '')"
                 " FROM chats WHERE parent_chat_id = '%s'",
                 parent);
}

/* How many tool results named tool the chat's history holds. */
static long s_results(const char *chat, const char *tool) {
    char *q =
        mem_printf("SELECT count(*) FROM chat_messages m, jsonb_array_elements(m.content::jsonb)"
                   " e(p) WHERE m.chat_id = '%%s' AND m.role = 'tool' AND NOT m.deleted"
                   " AND e.p ->> 'type' = 'tool-result' AND e.p ->> 'tool_name' = '%s'",
                   tool);
    long n = s_sql_long(q, chat);
    free(q);
    return n;
}

/* The result of the chat's one tool result named tool, parsed (the caller decrefs). */
static json_t *s_result(const char *chat, const char *tool) {
    char *v = s_sql("SELECT (e.p -> 'result')::text FROM chat_messages m,"
                    " jsonb_array_elements(m.content::jsonb) e(p) WHERE m.chat_id = '%s'"
                    " AND m.role = 'tool' AND NOT m.deleted AND e.p ->> 'tool_name' = '%s'"
                    " ORDER BY m.id LIMIT 1",
                    chat, tool);
    json_t *r = json_loads(v, 0, NULL);
    if (!r) {
        fail_msg("tool result of %s is not JSON: %s", tool, v);
    }
    free(v);
    return r;
}

/* How many times worker w's log shows the chat acquired (takeovers only, when asked). */
static int s_acquisitions(const char *chat, int w, bool takeovers) {
    char needle[128];
    snprintf(needle, sizeof needle, "chat_acquired chat_id=%s", chat);
    FILE *f = fopen(cluster_log(s_c, CLUSTER_WORKER, w), "r");
    int n = 0;
    char line[2048];
    while (f && fgets(line, sizeof line, f)) {
        n += strstr(line, needle) && (!takeovers || strstr(line, "takeover=1"));
    }
    if (f) {
        fclose(f);
    }
    return n;
}

/* How many times the workers' logs show the chat acquired in pool (the acquirer's pool=). */
static int s_pool_acquisitions(const char *chat, const char *pool) {
    char needle[128];
    char tag[32];
    snprintf(needle, sizeof needle, "chat_acquired chat_id=%s", chat);
    snprintf(tag, sizeof tag, "pool=%s", pool);
    int n = 0;
    for (int w = 0; w < 2; w++) {
        FILE *f = fopen(cluster_log(s_c, CLUSTER_WORKER, w), "r");
        char line[2048];
        while (f && fgets(line, sizeof line, f)) {
            n += strstr(line, needle) && strstr(line, tag);
        }
        if (f) {
            fclose(f);
        }
    }
    return n;
}

/* The one worker that has acquired the chat so far (the test fails when it is not one). */
static int s_worker_of(const char *chat) {
    int a = s_acquisitions(chat, 0, false);
    int b = s_acquisitions(chat, 1, false);
    if ((a > 0) == (b > 0)) {
        fail_msg("chat %s acquired by worker 0 %d times, by worker 1 %d times", chat, a, b);
    }
    return a > 0 ? 0 : 1;
}

/* Checks that the wait result names every child of the parent, completed, in order, with an
 * answer naming its task. */
static void s_check_wait(const char *parent, int n) {
    assert_int_equal(s_results(parent, "wait_agent"), 1);
    json_t *r = s_result(parent, "wait_agent");
    json_t *agents = json_object_get(r, "agents");
    assert_int_equal(json_array_size(agents), n);
    char *kids = s_children(parent);
    char *save = NULL;
    char *id = strtok_r(kids, ",", &save);
    for (int k = 0; k < n; k++, id = strtok_r(NULL, ",", &save)) {
        json_t *a = json_array_get(agents, (size_t)k);
        assert_non_null(id);
        assert_string_equal(json_string_value(json_object_get(a, "agent_id")), id);
        assert_string_equal(json_string_value(json_object_get(a, "status")), "completed");
        char task[64];
        snprintf(task, sizeof task, "task %d of %d", k + 1, n);
        const char *answer = json_string_value(json_object_get(a, "answer"));
        if (!answer || !strstr(answer, task)) {
            fail_msg("child %d's answer does not name its task: %s", k + 1, answer);
        }
    }
    free(kids);
    json_decref(r);
}

/* ---- tests ---- */

static void test_three_children_run_in_parallel_and_the_parent_resumes_once_with_all(void **st) {
    (void)st;
    char parent[ID_UUID_LEN + 1];
    s_parent("[sim:spawn 3][sim:child slow 150][sim:child words 16] survey", parent);
    /* While the children run the parent holds nothing: no owner, no lease, no slot. */
    s_wait_agent_wait(parent);
    s_wait_idle(parent);
    s_check_wait(parent, 3);
    /* One resumption: exactly one wait result, and the reply that read it. */
    char *text = s_sql("SELECT string_agg(e.p ->> 'text', '') FROM chat_messages m,"
                       " jsonb_array_elements(m.content::jsonb) e(p) WHERE m.chat_id = '%s'"
                       " AND m.role = 'assistant' AND e.p ->> 'type' = 'text'",
                       parent);
    assert_non_null(strstr(text, "wait_agent="));
    free(text);
    /* In parallel: from the first child's creation to the last one's answer is less than two
     * children's turns one after the other. */
    char *span = s_sql("SELECT (SELECT extract(epoch FROM max(m.created_at) - min(c.created_at))"
                       " FROM chats c JOIN chat_messages m ON m.chat_id = c.id AND m.role ="
                       " 'assistant' WHERE c.parent_chat_id = '%s') / (SELECT"
                       " max(extract(epoch FROM m.created_at - c.created_at)) FROM chats c JOIN"
                       " chat_messages m ON m.chat_id = c.id AND m.role = 'assistant' WHERE"
                       " c.parent_chat_id = '%s')",
                       parent, parent);
    double ratio = strtod(span, NULL);
    char *kids = s_children(parent);
    int on[2] = {0, 0};
    for (char *save = NULL, *id = strtok_r(kids, ",", &save); id; id = strtok_r(NULL, ",", &save)) {
        on[s_worker_of(id)]++;
        /* Each child held a slot of the subagent pool (9..11), the parent one of the roots'. */
        assert_int_equal(s_pool_acquisitions(id, "subagents"), 1);
    }
    assert_true(s_pool_acquisitions(parent, "roots") >= 1);
    assert_int_equal(s_pool_acquisitions(parent, "subagents"), 0);
    free(kids);
    print_message("three children: span / longest child = %.2f; on worker 0: %d, 1: %d\n", ratio,
                  on[0], on[1]);
    assert_true(ratio > 0.0 && ratio < 2.0);
    free(span);
    /* Each child has a root and depth that say where it sits. */
    assert_int_equal(s_sql_long("SELECT count(*) FROM chats WHERE parent_chat_id = '%s' AND"
                                " root_chat_id = parent_chat_id AND depth = 1",
                                parent),
                     3);
}

static void test_the_parents_last_worker_killed_during_the_wait_still_resumes_once(void **st) {
    (void)st;
    char parent[ID_UUID_LEN + 1];
    s_parent("[sim:spawn 3][sim:child slow 150][sim:child words 30] audit", parent);
    s_wait_agent_wait(parent);
    int w = s_worker_of(parent);
    cluster_signal(s_c, CLUSTER_WORKER, w, SIGKILL);
    s_wait_idle(parent);
    s_check_wait(parent, 3);
    cluster_start(s_c, CLUSTER_WORKER, w);
}

static void test_a_child_killed_mid_turn_is_taken_over_and_the_parent_gets_it_once(void **st) {
    (void)st;
    char parent[ID_UUID_LEN + 1];
    s_parent("[sim:spawn 2][sim:child slow 150][sim:child words 40] inventory", parent);
    s_wait_agent_wait(parent);
    char *kids = s_children(parent);
    char first[ID_UUID_LEN + 1];
    snprintf(first, sizeof first, "%.36s", kids);
    free(kids);
    /* Mid-turn: the child is owned and has streamed for a while. */
    char *q = mem_printf("SELECT worker_id IS NOT NULL FROM chats WHERE id = '%s'", first);
    s_wait_sql(q, "t", 20000);
    free(q);
    usleep(1000 * 1000);
    int w = s_worker_of(first);
    cluster_signal(s_c, CLUSTER_WORKER, w, SIGKILL);
    s_wait_idle(parent);
    s_check_wait(parent, 2);
    /* The child's turn was answered once, by the worker that took it over. */
    assert_int_equal(s_sql_long("SELECT count(*) FROM chat_messages WHERE chat_id = '%s' AND"
                                " role = 'assistant' AND NOT deleted",
                                first),
                     1);
    assert_int_equal(s_acquisitions(first, 1 - w, true), 1);
    cluster_start(s_c, CLUSTER_WORKER, w);
}

static void test_interrupting_the_parent_interrupts_its_whole_family(void **st) {
    (void)st;
    char parent[ID_UUID_LEN + 1];
    s_parent("[sim:spawn 3][sim:child slow 500][sim:child words 60] long haul", parent);
    s_wait_agent_wait(parent);
    char path[128];
    snprintf(path, sizeof path, "%s/api/v2/chats/%s/interrupt", cluster_url(s_c, 0), parent);
    proc_http_t r;
    assert_int_equal(proc_http("POST", path, cluster_token(s_c), NULL, &r), 0);
    assert_int_equal(r.status, 200);
    proc_http_free(&r);
    /* Every child stops long before its 30-second turn would end. */
    char *q = mem_printf("SELECT count(*) FROM chats WHERE parent_chat_id = '%s' AND (status <>"
                         " 'waiting' OR worker_id IS NOT NULL)",
                         parent);
    s_wait_sql(q, "0", 10000);
    free(q);
    s_wait_idle(parent);
    /* The wait was answered once: canceled by the interrupt, not by the children's ends. */
    assert_int_equal(s_results(parent, "wait_agent"), 1);
    json_t *res = s_result(parent, "wait_agent");
    assert_non_null(json_object_get(res, "error"));
    json_decref(res);
}

static void test_the_caps_refuse_a_spawn_with_a_tool_error_before_any_child_exists(void **st) {
    (void)st;
    /* Children: the fourth spawn is over CHATFLEET_SUBAGENT_MAX_CHILDREN=3. */
    char parent[ID_UUID_LEN + 1];
    s_parent("[sim:spawn 4][sim:nowait] fan out", parent);
    s_wait_idle(parent);
    assert_int_equal(s_sql_long("SELECT count(*) FROM chats WHERE parent_chat_id = '%s'", parent),
                     3);
    char *refused =
        s_sql("SELECT count(*) FROM chat_messages m, jsonb_array_elements(m.content::jsonb)"
              " e(p) WHERE m.chat_id = '%s' AND e.p ->> 'tool_name' = 'spawn_agent'"
              " AND e.p ->> 'type' = 'tool-result' AND (e.p ->> 'is_error')::boolean"
              " AND e.p -> 'result' ->> 'error' LIKE '%%children, the cap is 3%%'",
              parent);
    assert_string_equal(refused, "1");
    free(refused);
    /* Depth: the child (depth 1) may not spawn at depth 2 (CHATFLEET_SUBAGENT_MAX_DEPTH=1). */
    char root[ID_UUID_LEN + 1];
    s_parent("[sim:spawn 1][sim:child spawn 1][sim:nowait] go deeper", root);
    s_wait_idle(root);
    char *kid = s_children(root);
    assert_int_equal(strlen(kid), ID_UUID_LEN);
    s_wait_idle(kid);
    assert_int_equal(s_sql_long("SELECT count(*) FROM chats WHERE root_chat_id = '%s'", root), 1);
    json_t *r = s_result(kid, "spawn_agent");
    const char *err = json_string_value(json_object_get(r, "error"));
    if (!err || !strstr(err, "over the depth cap 1")) {
        fail_msg("the grandchild's spawn was not refused by depth: %s", err);
    }
    json_decref(r);
    free(kid);
}

static long s_patch_archived(const char *chat, bool archived) {
    char path[128];
    snprintf(path, sizeof path, "%s/api/v2/chats/%s", cluster_url(s_c, 0), chat);
    proc_http_t r;
    assert_int_equal(proc_http("PATCH", path, cluster_token(s_c),
                               archived ? "{\"archived\":true}" : "{\"archived\":false}", &r),
                     0);
    long status = r.status;
    proc_http_free(&r);
    return status;
}

static void test_the_family_archive_is_all_or_nothing(void **st) {
    (void)st;
    char parent[ID_UUID_LEN + 1];
    s_parent("[sim:spawn 2][sim:child slow 200][sim:child words 20][sim:nowait] archive me",
             parent);
    s_wait_idle(parent);
    /* A child still runs: the root's archive is refused and changes nothing. */
    assert_int_equal(s_patch_archived(parent, true), 409);
    assert_int_equal(s_sql_long("SELECT count(*) FROM chats WHERE (id = '%1$s' OR root_chat_id ="
                                " '%1$s') AND archived",
                                parent),
                     0);
    char *q = mem_printf("SELECT count(*) FROM chats WHERE parent_chat_id = '%s' AND (status <>"
                         " 'waiting' OR worker_id IS NOT NULL)",
                         parent);
    s_wait_sql(q, "0", DONE_MS);
    free(q);
    assert_int_equal(s_patch_archived(parent, true), 204);
    assert_int_equal(s_sql_long("SELECT count(*) FROM chats WHERE (id = '%1$s' OR root_chat_id ="
                                " '%1$s') AND archived",
                                parent),
                     3);
    /* A child alone cannot come back while its parent is archived. */
    char *kids = s_children(parent);
    char first[ID_UUID_LEN + 1];
    snprintf(first, sizeof first, "%.36s", kids);
    free(kids);
    assert_int_equal(s_patch_archived(first, false), 409);
}

static void test_a_structured_child_returns_its_validated_value(void **st) {
    (void)st;
    char parent[ID_UUID_LEN + 1];
    s_parent("[sim:spawn 2][sim:child-schema] count things", parent);
    s_wait_idle(parent);
    assert_int_equal(s_results(parent, "wait_agent"), 1);
    json_t *r = s_result(parent, "wait_agent");
    json_t *agents = json_object_get(r, "agents");
    assert_int_equal(json_array_size(agents), 2);
    for (size_t k = 0; k < 2; k++) {
        json_t *v = json_object_get(json_array_get(agents, k), "value");
        assert_true(json_is_object(v));
        assert_true(json_is_integer(json_object_get(v, "n")));
    }
    json_decref(r);
}

static void test_message_agent_reaches_each_child_before_the_wait(void **st) {
    (void)st;
    char parent[ID_UUID_LEN + 1];
    s_parent("[sim:spawn 2][sim:agents message] two steps", parent);
    s_wait_idle(parent);
    assert_int_equal(s_results(parent, "message_agent"), 2);
    assert_int_equal(s_results(parent, "wait_agent"), 1);
    /* Each child got the parent's prompt and its message, and answered both. */
    char *q = mem_printf("SELECT count(*) FROM chat_messages m JOIN chats c ON c.id = m.chat_id"
                         " WHERE c.parent_chat_id = '%s' AND m.role = 'user' AND m.visibility ="
                         " 'both' AND NOT m.deleted",
                         parent);
    s_wait_sql(q, "4", 5000);
    free(q);
    json_t *r = s_result(parent, "wait_agent");
    json_t *agents = json_object_get(r, "agents");
    assert_int_equal(json_array_size(agents), 2);
    for (size_t k = 0; k < 2; k++) {
        const char *answer =
            json_string_value(json_object_get(json_array_get(agents, k), "answer"));
        if (!answer || !strstr(answer, "more about task")) {
            fail_msg("child %zu's answer is not to the message: %s", k + 1, answer);
        }
    }
    json_decref(r);
    /* list_agents shows the caller's children. */
    char other[ID_UUID_LEN + 1];
    s_parent("[sim:spawn 2][sim:agents list][sim:nowait] who is there", other);
    s_wait_idle(other);
    json_t *l = s_result(other, "list_agents");
    assert_int_equal(json_array_size(json_object_get(l, "agents")), 2);
    json_decref(l);
}

/* The CLI's chat list shows a family as a tree under its root. */
static void test_the_cli_lists_a_family_as_a_tree_under_its_root(void **st) {
    (void)st;
    char parent[ID_UUID_LEN + 1];
    s_parent("[sim:spawn 2][sim:wait-all] tree", parent);
    s_wait_idle(parent);
    char bin[600];
    snprintf(bin, sizeof bin, "%s/cli/chatfleet", getenv("CHATFLEET_BUILD_DIR"));
    char url[300];
    char token[300];
    snprintf(url, sizeof url, "CHATFLEET_URL=%s", cluster_url(s_c, 0));
    snprintf(token, sizeof token, "CHATFLEET_TOKEN=%s", cluster_token(s_c));
    char *argv[] = {bin, "chat", "list", NULL};
    char *env[] = {url, token, NULL};
    char *out = proc_output(argv, env);
    assert_non_null(out);
    char *kids = s_children(parent);
    char *root_line = strstr(out, parent);
    assert_non_null(root_line);
    assert_true(root_line == out || root_line[-1] == '\n'); /* a root: no indent */
    for (char *save = NULL, *id = strtok_r(kids, ",", &save); id; id = strtok_r(NULL, ",", &save)) {
        char *line = strstr(out, id);
        if (!line || line - out < 3 || strncmp(line - 3, "\n  ", 3) != 0 || line < root_line) {
            fail_msg("child %s is not listed indented under its root:\n%s", id, out);
        }
    }
    free(kids);
    free(out);
}

static int s_setup(void **state) {
    (void)state;
    static const char *const env[] = {
        "CHATFLEET_SUBAGENT_MAX_CHILDREN=3", "CHATFLEET_SUBAGENT_MAX_DEPTH=1",
        "CHATFLEET_WORKER_MAX_CHATS=8", "CHATFLEET_WORKER_MAX_SUBAGENTS=3", NULL};
    cluster_opts_t o = {.name = "test_subagents", .gateways = 1, .workers = 2, .env = env};
    s_c = cluster_new(&o);
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    return cluster_destroy(&s_c) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_three_children_run_in_parallel_and_the_parent_resumes_once_with_all),
        cmocka_unit_test(test_the_parents_last_worker_killed_during_the_wait_still_resumes_once),
        cmocka_unit_test(test_a_child_killed_mid_turn_is_taken_over_and_the_parent_gets_it_once),
        cmocka_unit_test(test_interrupting_the_parent_interrupts_its_whole_family),
        cmocka_unit_test(test_the_caps_refuse_a_spawn_with_a_tool_error_before_any_child_exists),
        cmocka_unit_test(test_the_family_archive_is_all_or_nothing),
        cmocka_unit_test(test_a_structured_child_returns_its_validated_value),
        cmocka_unit_test(test_message_agent_reaches_each_child_before_the_wait),
        cmocka_unit_test(test_the_cli_lists_a_family_as_a_tree_under_its_root),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
