/*
 * Usage of the calls that write no message, title regeneration and the operators' cost view
 * (ARCHITECTURE.md §7.7, §7.8; issue 38, Must show 5), end to end on a cluster of real
 * processes with priced sim models (the chats on "sim", their titles on "sim-title"). A new
 * chat's usage includes its title call: its total exceeds the sum of its message rows by
 * exactly the title's chat_usage row. POST /title/regenerate answers 202, and the worker writes
 * a new generated title, over a user title, from where the conversation went, counting a second
 * title call; archived and foreign chats are refused. A request made while the chat runs is
 * served by its turn's next model step. A request survives a worker killed during its title
 * call: the next owner makes the call again and counts it once. GET /admin/costs
 * grouped by day, by user and by model each sums to the per-chat usage of every chat of the
 * deployment (two users), its window of days bounds it, bad parameters are a 400 naming them,
 * and a non-admin gets 403.
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
#include "mem.h"
#include "proc.h"

#define WAIT_MS   20000
#define CHATS_MAX 16

static cluster_t *s_cluster;
static char s_config[128];
static char *s_other_token; /* a second user's */
static char *s_admin_token; /* an operator's (user-add --admin) */

/* Every chat the tests made, with its owner's token: the deployment's chats. */
static struct {
    char id[ID_UUID_LEN + 1];
    const char *token;
} s_chats[CHATS_MAX];
static int s_nchats;

/* The usage sums every view reports. */
static const char *const s_sums[] = {
    "input_tokens",     "output_tokens",     "cache_read_tokens", "cache_creation_tokens",
    "reasoning_tokens", "total_cost_micros", "messages",          "calls"};
#define SUMS (sizeof s_sums / sizeof s_sums[0])

static long long s_num(const json_t *obj, const char *key) {
    return (long long)json_integer_value(json_object_get(obj, key));
}

/* METHOD path with body as token's user: the status, and the parsed answer into *out. */
static long s_call(const char *method, const char *path, const char *token, const char *body,
                   json_t **out) {
    char *url = mem_printf("%s%s", cluster_url(s_cluster, 0), path);
    proc_http_t r;
    assert_int_equal(proc_http(method, url, token, body, &r), 0);
    free(url);
    if (out) {
        *out = json_loads(r.body, 0, NULL);
    }
    long status = r.status;
    proc_http_free(&r);
    return status;
}

/* GET path as token's user; fails the test unless 200. A new reference. */
static json_t *s_get(const char *path, const char *token) {
    json_t *v = NULL;
    long status = s_call("GET", path, token, NULL, &v);
    if (status != 200) {
        fail_msg("GET %s: %ld", path, status);
    }
    return v;
}

/* A new chat of token's user whose first message is text, with more of the body's members
 * (",\"key\":value...", or ""); its id (the registry's: the chats the cost view must sum). */
static const char *s_chat_with(const char *token, const char *text, const char *more) {
    char *body = mem_printf("{\"content\":[{\"type\":\"text\",\"text\":\"%s\"}]%s}", text, more);
    json_t *c = NULL;
    long status = s_call("POST", "/api/v2/chats", token, body, &c);
    free(body);
    assert_int_equal(status, 201);
    assert_true(s_nchats < CHATS_MAX);
    char *id = s_chats[s_nchats].id;
    snprintf(id, ID_UUID_LEN + 1, "%s", json_string_value(json_object_get(c, "id")));
    s_chats[s_nchats++].token = token;
    json_decref(c);
    return id;
}

static const char *s_chat(const char *token, const char *text) {
    return s_chat_with(token, text, "");
}

/* Waits until the chat's turns are answered (replies assistant rows), it is idle and unowned,
 * and no title request is pending. */
static void s_wait_idle(const char *chat, int replies) {
    char *q = mem_printf("SELECT (SELECT count(*) FROM chat_messages WHERE chat_id = c.id AND"
                         " role = 'assistant') || ':' || status || ':' || (worker_id IS NULL)"
                         " || ':' || (title_requested_at IS NULL) FROM chats c WHERE id = '%s'",
                         chat);
    char want[48];
    snprintf(want, sizeof want, "%d:waiting:true:true", replies);
    if (cluster_wait(s_cluster, q, want, WAIT_MS) < 0) {
        char *got = cluster_sql(s_cluster, "%s", q);
        fail_msg("chat %s: %s, not %s", chat, got ? got : "(none)", want);
    }
    free(q);
}

static char *s_title(const char *chat) {
    char *t = cluster_sql(s_cluster,
                          "SELECT title_source || ':' || title FROM chats WHERE id = '%s'", chat);
    assert_non_null(t);
    return t;
}

static long long s_sql_num(const char *fmt, const char *chat) {
    char *v = cluster_sql(s_cluster, fmt, chat);
    assert_non_null(v);
    long long n = strtoll(v, NULL, 10);
    free(v);
    return n;
}

/* The sum of key over the chat's rows of table (chat_messages: those with usage). */
static long long s_rows_sum(const char *table, const char *key, const char *chat) {
    char *fmt = mem_printf("SELECT coalesce(sum((usage ->> '%s')::bigint), 0) FROM %s WHERE"
                           " chat_id = '%%s' AND usage IS NOT NULL",
                           key, table);
    long long n = s_sql_num(fmt, chat);
    free(fmt);
    return n;
}

/* The chat's usage as GET /usage answers it (a new reference). */
static json_t *s_usage(const char *chat, const char *token) {
    char *path = mem_printf("/api/v2/chats/%s/usage", chat);
    json_t *v = s_get(path, token);
    free(path);
    return v;
}

/* The by_model entry of a usage answer for model, or NULL. */
static const json_t *s_by_model(const json_t *usage, const char *model) {
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(usage, "by_model"), i, m) {
        const char *name = json_string_value(json_object_get(m, "model"));
        if (name && !strcmp(name, model)) {
            return m;
        }
    }
    return NULL;
}

/* The chat's usage total is its message rows' sums plus its chat_usage rows', each kind. */
static void s_assert_usage_adds_up(const char *chat, const char *token, int titles) {
    json_t *u = s_usage(chat, token);
    const char *kinds[] = {"input_tokens", "output_tokens", "total_cost_micros"};
    for (int k = 0; k < 3; k++) {
        long long msgs = s_rows_sum("chat_messages", kinds[k], chat);
        long long calls = s_rows_sum("chat_usage", kinds[k], chat);
        assert_true(calls > 0); /* the sim reports usage, and both models are priced */
        assert_int_equal(s_num(u, kinds[k]), msgs + calls);
    }
    long long rows = s_sql_num("SELECT count(*) FROM chat_messages WHERE chat_id = '%s' AND"
                               " usage IS NOT NULL",
                               chat);
    assert_int_equal(s_num(u, "messages"), rows);
    assert_int_equal(s_num(u, "calls"), rows + titles);
    assert_int_equal(s_sql_num("SELECT count(*) FROM chat_usage WHERE chat_id = '%s' AND kind ="
                               " 'title'",
                               chat),
                     titles);
    /* The title calls are the title model's, and wrote no message. */
    const json_t *t = s_by_model(u, "sim-title");
    assert_non_null(t);
    assert_int_equal(s_num(t, "messages"), 0);
    assert_int_equal(s_num(t, "calls"), titles);
    assert_int_equal(s_num(t, "input_tokens"), s_rows_sum("chat_usage", "input_tokens", chat));
    json_decref(u);
}

static void test_a_new_chats_usage_includes_its_title_call(void **u) {
    (void)u;
    const char *chat = s_chat(cluster_token(s_cluster), "Plan a trip to Lisbon in spring");
    s_wait_idle(chat, 1);
    char *t = s_title(chat);
    assert_string_equal(t, "generated:Plan a trip to Lisbon in");
    free(t);
    s_assert_usage_adds_up(chat, cluster_token(s_cluster), 1);
    /* The title row is priced with the title model's prices (input 1, output 2 per Mtok). */
    char *row = cluster_sql(s_cluster,
                            "SELECT (usage ->> 'total_cost_micros')::bigint = (usage ->>"
                            " 'input_tokens')::bigint + 2 * (usage ->> 'output_tokens')::bigint"
                            " FROM chat_usage WHERE chat_id = '%s'",
                            chat);
    assert_string_equal(row, "t");
    free(row);
}

static void test_regenerate_writes_a_new_title_over_a_user_title_and_counts_its_call(void **u) {
    (void)u;
    const char *tok = cluster_token(s_cluster);
    const char *chat = s_chat(tok, "Plan a trip to Porto by train");
    s_wait_idle(chat, 1);
    assert_int_equal(
        cluster_send(s_cluster, 0, chat, "Now compare buses and ferries along the coast", NULL),
        200);
    s_wait_idle(chat, 2);
    char path[160];
    snprintf(path, sizeof path, "/api/v2/chats/%s", chat);
    assert_int_equal(s_call("PATCH", path, tok, "{\"title\":\"Mine\"}", NULL), 204);
    snprintf(path, sizeof path, "/api/v2/chats/%s/title/regenerate", chat);
    json_t *c = NULL;
    assert_int_equal(s_call("POST", path, tok, NULL, &c), 202);
    assert_string_equal(json_string_value(json_object_get(c, "id")), chat);
    json_decref(c);
    /* An idle chat: taken for its title call, then let go. The title is the conversation's
     * latest turn (the sim titles the last user message it is given). */
    char *q = mem_printf("SELECT title_source || ':' || title || ':' || (title_requested_at IS"
                         " NULL) || ':' || (worker_id IS NULL) FROM chats WHERE id = '%s'",
                         chat);
    assert_true(cluster_wait(s_cluster, q,
                             "generated:Now compare buses and ferries along:true:true",
                             WAIT_MS) >= 0);
    free(q);
    s_assert_usage_adds_up(chat, tok, 2);
    /* Someone else's chat does not exist for the caller; an archived one is refused. */
    assert_int_equal(s_call("POST", path, s_other_token, NULL, NULL), 404);
    assert_int_equal(s_call("POST",
                            "/api/v2/chats/00000000-0000-4000-8000-000000000000/title/"
                            "regenerate",
                            tok, NULL, NULL),
                     404);
    snprintf(path, sizeof path, "/api/v2/chats/%s", chat);
    assert_int_equal(s_call("PATCH", path, tok, "{\"archived\":true}", NULL), 204);
    snprintf(path, sizeof path, "/api/v2/chats/%s/title/regenerate", chat);
    assert_int_equal(s_call("POST", path, tok, NULL, NULL), 409);
    char *pending = cluster_sql(
        s_cluster, "SELECT title_requested_at IS NULL FROM chats WHERE id = '%s'", chat);
    assert_string_equal(pending, "t");
    free(pending);
    snprintf(path, sizeof path, "/api/v2/chats/%s", chat);
    assert_int_equal(s_call("PATCH", path, tok, "{\"archived\":false}", NULL), 204);
}

/* Whether the log file at path holds text, polled until timeout_ms. */
static bool s_log_has(const char *path, const char *text, int64_t timeout_ms) {
    for (int64_t end = id_now_ms() + timeout_ms; id_now_ms() < end;) {
        FILE *f = fopen(path, "r");
        char line[2048];
        bool found = false;
        while (f && !found && fgets(line, sizeof line, f)) {
            found = strstr(line, text) != NULL;
        }
        if (f) {
            fclose(f);
        }
        if (found) {
            return true;
        }
        usleep(5 * 1000); /* a poll interval, not a wait for state */
    }
    return false;
}

/* A request made while the chat runs is served by the turn's next model step, as its side
 * call: the idle path never sees it. The request is made while the turn waits for a client
 * tool's result, so a model step surely follows it, however fast the machine. */
static void test_a_running_chats_next_step_serves_the_request(void **u) {
    (void)u;
    const char *tok = cluster_token(s_cluster);
    const char *chat =
        s_chat_with(tok, "Sketch a garden plan", ",\"dynamic_tools\":[{\"name\":\"lookup\"}]");
    s_wait_idle(chat, 1);
    assert_int_equal(
        cluster_send(s_cluster, 0, chat, "[sim:dynamic lookup] Now tell the time", NULL), 200);
    char *q = mem_printf("SELECT status FROM chats WHERE id = '%s'", chat);
    assert_true(cluster_wait(s_cluster, q, "requires_action", WAIT_MS) >= 0);
    free(q);
    char path[160];
    snprintf(path, sizeof path, "/api/v2/chats/%s/title/regenerate", chat);
    assert_int_equal(s_call("POST", path, tok, NULL, NULL), 202);
    char *call = cluster_sql(s_cluster,
                             "SELECT p ->> 'tool_call_id' FROM chat_messages m,"
                             " jsonb_array_elements(m.content::jsonb) p WHERE m.chat_id = '%s'"
                             " AND p ->> 'type' = 'tool-call' ORDER BY m.id DESC LIMIT 1",
                             chat);
    assert_non_null(call);
    char *results =
        mem_printf("{\"results\":[{\"tool_call_id\":\"%s\",\"output\":{\"ok\":true}}]}", call);
    snprintf(path, sizeof path, "/api/v2/chats/%s/tool-results", chat);
    assert_int_equal(s_call("POST", path, tok, results, NULL), 204);
    s_wait_idle(chat, 3);
    char *t = s_title(chat);
    assert_string_equal(t, "generated:Now tell the time");
    free(t);
    char *line =
        mem_printf("event=title_call chat_id=%s model=sim-title requested=1 path=step", chat);
    assert_true(s_log_has(cluster_log(s_cluster, CLUSTER_WORKER, 0), line, WAIT_MS));
    free(line);
    free(results);
    free(call);
    s_assert_usage_adds_up(chat, tok, 2);
}

static void test_a_request_survives_a_worker_killed_during_its_title_call(void **u) {
    (void)u;
    const char *tok = cluster_token(s_cluster);
    /* Paced: the title call takes about 6 x 300 ms, a window to kill the worker in. */
    const char *chat = s_chat(tok, "[sim:slow 300] Draw a map of the old town");
    s_wait_idle(chat, 1);
    char path[160];
    snprintf(path, sizeof path, "/api/v2/chats/%s", chat);
    assert_int_equal(s_call("PATCH", path, tok, "{\"title\":\"Mine\"}", NULL), 204);
    snprintf(path, sizeof path, "/api/v2/chats/%s/title/regenerate", chat);
    assert_int_equal(s_call("POST", path, tok, NULL, NULL), 202);
    /* Owned while idle, the request pending, and the owner's log says its call started. */
    char *q = mem_printf("SELECT status || ':' || (worker_id IS NOT NULL) || ':' ||"
                         " (title_requested_at IS NOT NULL) FROM chats WHERE id = '%s'",
                         chat);
    assert_true(cluster_wait(s_cluster, q, "waiting:true:true", WAIT_MS) >= 0);
    free(q);
    char *line = mem_printf("event=title_call chat_id=%s model=sim-title requested=1", chat);
    assert_true(s_log_has(cluster_log(s_cluster, CLUSTER_WORKER, 0), line, WAIT_MS));
    free(line);
    cluster_signal(s_cluster, CLUSTER_WORKER, 0, SIGKILL);
    char *t = s_title(chat);
    assert_string_equal(t, "user:Mine");
    free(t);
    cluster_start(s_cluster, CLUSTER_WORKER, 0);
    /* The next owner (after the lease went stale) makes the call again and counts it once. */
    q = mem_printf("SELECT title_source || ':' || title || ':' || (title_requested_at IS NULL)"
                   " || ':' || (worker_id IS NULL) FROM chats WHERE id = '%s'",
                   chat);
    assert_true(cluster_wait(s_cluster, q, "generated:Draw a map of the old:true:true", WAIT_MS) >=
                0);
    free(q);
    s_assert_usage_adds_up(chat, tok, 2);
}

/* The sums of s_sums over every chat's GET /usage. */
static void s_chats_total(long long out[SUMS]) {
    memset(out, 0, SUMS * sizeof out[0]);
    for (int i = 0; i < s_nchats; i++) {
        json_t *u = s_usage(s_chats[i].id, s_chats[i].token);
        for (size_t k = 0; k < SUMS; k++) {
            out[k] += s_num(u, s_sums[k]);
        }
        json_decref(u);
    }
}

/* GET /admin/costs?query as the operator: its rows sum to its total, which is want. Returns the
 * view (a new reference). */
static json_t *s_costs_sum_to(const char *query, const long long want[SUMS]) {
    char path[160];
    snprintf(path, sizeof path, "/api/v2/admin/costs%s", query);
    json_t *v = s_get(path, s_admin_token);
    const json_t *total = json_object_get(v, "total");
    for (size_t k = 0; k < SUMS; k++) {
        long long sum = 0;
        size_t i;
        json_t *row;
        json_array_foreach(json_object_get(v, "rows"), i, row) {
            sum += s_num(row, s_sums[k]);
        }
        if (sum != want[k] || s_num(total, s_sums[k]) != want[k]) {
            fail_msg("%s %s: rows %lld, total %lld, chats %lld", path, s_sums[k], sum,
                     s_num(total, s_sums[k]), want[k]);
        }
    }
    return v;
}

static void test_the_cost_view_sums_to_the_chats_usage_by_day_user_and_model(void **u) {
    (void)u;
    const char *mine[] = {s_chat(cluster_token(s_cluster), "Explain how tides work"),
                          s_chat(s_other_token, "Suggest a name for a bakery"),
                          s_chat(s_other_token, "List three winter vegetables")};
    for (int i = 0; i < 3; i++) {
        s_wait_idle(mine[i], 1);
    }
    /* The deployment's chats are the ones these tests made. */
    char *n = cluster_sql(s_cluster, "SELECT count(*) FROM chats");
    char want_n[16];
    snprintf(want_n, sizeof want_n, "%d", s_nchats);
    assert_string_equal(n, want_n);
    free(n);
    long long want[SUMS];
    s_chats_total(want);
    assert_true(want[0] > 0 && want[5] > 0 && want[7] > want[6]); /* titles: calls > messages */
    json_t *v = s_costs_sum_to("", want);
    assert_string_equal(json_string_value(json_object_get(v, "group")), "day");
    assert_int_equal(json_array_size(json_object_get(v, "rows")), 1); /* all made today */
    json_decref(v);
    v = s_costs_sum_to("?group=user", want);
    assert_int_equal(json_array_size(json_object_get(v, "rows")), 2);
    /* The other user's row is the sum of that user's chats. */
    long long theirs = 0;
    for (int i = 0; i < s_nchats; i++) {
        if (s_chats[i].token == s_other_token) {
            json_t *cu = s_usage(s_chats[i].id, s_other_token);
            theirs += s_num(cu, "total_cost_micros");
            json_decref(cu);
        }
    }
    size_t i;
    json_t *row;
    bool found = false;
    json_array_foreach(json_object_get(v, "rows"), i, row) {
        if (!strcmp(json_string_value(json_object_get(row, "user_name")), "costs_other")) {
            assert_int_equal(s_num(row, "total_cost_micros"), theirs);
            found = true;
        }
    }
    assert_true(found);
    json_decref(v);
    v = s_costs_sum_to("?group=model", want);
    assert_int_equal(json_array_size(json_object_get(v, "rows")), 2); /* sim, sim-title */
    json_decref(v);
    /* A window of days: today's holds everything, tomorrow's nothing. */
    char *today = cluster_sql(s_cluster, "SELECT (now() AT TIME ZONE 'UTC')::date");
    char *tomorrow = cluster_sql(s_cluster, "SELECT (now() AT TIME ZONE 'UTC')::date + 1");
    char query[96];
    snprintf(query, sizeof query, "?group=model&from=%s&to=%s", today, today);
    json_decref(s_costs_sum_to(query, want));
    snprintf(query, sizeof query, "?from=%s", tomorrow);
    long long none[SUMS] = {0};
    v = s_costs_sum_to(query, none);
    assert_int_equal(json_array_size(json_object_get(v, "rows")), 0);
    json_decref(v);
    free(today);
    free(tomorrow);
    /* Bad parameters name themselves; only operators read costs. */
    const struct {
        const char *query;
        const char *field;
    } bad[] = {{"?group=week", "group"},
               {"?from=2024-02-30", "from"},
               {"?to=yesterday", "to"},
               {"?from=2024-03-02&to=2024-03-01", "to"},
               {"?bogus=1", "bogus"}};
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        char path[128];
        snprintf(path, sizeof path, "/api/v2/admin/costs%s", bad[b].query);
        json_t *e = NULL;
        assert_int_equal(s_call("GET", path, s_admin_token, NULL, &e), 400);
        char *text = json_dumps(e, 0);
        if (!strstr(text, bad[b].field)) {
            fail_msg("%s: %s names no %s", path, text, bad[b].field);
        }
        free(text);
        json_decref(e);
    }
    assert_int_equal(s_call("GET", "/api/v2/admin/costs", cluster_token(s_cluster), NULL, NULL),
                     403);
    assert_int_equal(s_call("GET", "/api/v2/admin/costs", NULL, NULL, NULL), 401);
}

static int s_setup(void **state) {
    (void)state;
    snprintf(s_config, sizeof s_config, "/tmp/cf-usage-costs-%d.json", (int)getpid());
    FILE *f = fopen(s_config, "w");
    if (!f) {
        return -1;
    }
    fprintf(f, "{\"models\":[{\"name\":\"sim\",\"provider\":\"sim\",\"model\":\"sim\","
               "\"default\":true,\"prices\":{\"input\":3,\"output\":15}},"
               "{\"name\":\"sim-title\",\"provider\":\"sim\",\"model\":\"sim\","
               "\"prices\":{\"input\":1,\"output\":2}}]}");
    fclose(f);
    char *cfg = mem_printf("CHATFLEET_CONFIG=%s", s_config);
    const char *env[] = {cfg, "CHATFLEET_TITLE_MODEL=sim-title", NULL};
    cluster_opts_t o = {.name = "test_usage_costs", .gateways = 1, .workers = 1, .env = env};
    s_cluster = cluster_new(&o);
    free(cfg);
    s_other_token = cluster_user_add(s_cluster, false, "costs_other");
    s_admin_token = cluster_user_add(s_cluster, true, "costs_operator");
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    int unclean = cluster_destroy(&s_cluster);
    unlink(s_config);
    free(s_other_token);
    free(s_admin_token);
    return unclean == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_new_chats_usage_includes_its_title_call),
        cmocka_unit_test(test_regenerate_writes_a_new_title_over_a_user_title_and_counts_its_call),
        cmocka_unit_test(test_a_running_chats_next_step_serves_the_request),
        cmocka_unit_test(test_a_request_survives_a_worker_killed_during_its_title_call),
        cmocka_unit_test(test_the_cost_view_sums_to_the_chats_usage_by_day_user_and_model),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
