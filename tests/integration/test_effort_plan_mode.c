/*
 * Reasoning effort and plan mode end to end (issue 38): a cluster (gateway, broker, a worker)
 * whose model configs point openai, anthropic and ollama at the mock provider server, some with
 * options.reasoning_effort {default, max} and some without, and an MCP server over stdio whose
 * tools say whether they only read (tests/mcp/annotated_server.mjs). For each provider the
 * request bodies the mock records carry the native effort field (OpenAI reasoning_effort,
 * Anthropic thinking.budget_tokens with max_tokens above it, Ollama think): a message's own
 * effort, the config's default when the chat has none, a value above the config's max clamped
 * to it, the chat's last effort on a later message without one, nothing at all on a config
 * without reasoning_effort, and a queued message's effort after its promotion. In plan mode
 * the request offers only the tools that change nothing and the system text carries the plan
 * block; a call the model makes to a withheld tool (an MCP tool that may write, a client's
 * dynamic tool) is answered with a tool error and never run. mcp_servers changes on send. The
 * gateway refuses bad values with the field path, a structured request combined with plan mode
 * (400), and enabling plan mode while a structured request is pending (409).
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
#include "clusterlog.h"
#include "id.h"
#include "mem.h"
#include "mockprov.h"
#include "proc.h"

#define WAIT_MS 20000

#define OA(delta, finish)                                                                          \
    "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\","      \
    "\"choices\":[{\"index\":0,\"delta\":" delta ",\"finish_reason\":" finish "}]}\n\n"
#define AN(name, data) "event: " name "\ndata: " data "\n\n"
#define OL(msg, tail)  "{\"model\":\"m\",\"message\":{\"role\":\"assistant\"," msg "}," tail "}\n"

/* A provider: its configs, its text reply, and the effort each case must put on the wire, as
 * s_effort_of writes it ("-": no effort field). */
typedef struct {
    const char *model; /* config with options.reasoning_effort */
    const char *plain; /* config without it */
    const char *type;
    const char *text;
    const char *first, *first_want; /* a message's own effort, within the config's max */
    const char *dflt_want;          /* a chat without any: the config's default */
    const char *max_want;           /* "max", above the config's max: clamped */
    const char *queued, *queued_want;
} wire_t;

static const wire_t s_wires[] = {
    /* openai-e: default low, max high; the field takes the scale as it is. */
    {"openai-e", "openai-p", "text/event-stream",
     OA("{\"role\":\"assistant\",\"content\":\"done\"}", "null")
         OA("{}", "\"stop\"") "data: [DONE]\n\n",
     "medium", "medium", "low", "high", "minimal", "minimal"},
    /* anthropic-e: default medium, max high; budget:max_tokens. */
    {"anthropic-e", "anthropic-p", "text/event-stream",
     AN("message_start", "{\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":"
                         "\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{"
                         "\"input_tokens\":3,\"output_tokens\":1}}}")
         AN("content_block_start", "{\"type\":\"content_block_start\",\"index\":0,"
                                   "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}")
             AN("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{"
                                       "\"type\":\"text_delta\",\"text\":\"done\"}}")
                 AN("content_block_stop", "{\"type\":\"content_block_stop\",\"index\":0}")
                     AN("message_delta", "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
                                         "\"end_turn\"},\"usage\":{\"output_tokens\":2}}")
                         AN("message_stop", "{\"type\":\"message_stop\"}"),
     "low", "1024:9216", "4096:12288", "8192:16384", "high", "8192:16384"},
    /* ollama-e: gpt-oss (think takes a level), default low, max medium. */
    {"ollama-e", "ollama-p", "application/x-ndjson",
     OL("\"content\":\"done\"", "\"done\":false")
         OL("\"content\":\"\"", "\"done_reason\":\"stop\",\"done\":true"),
     "medium", "medium", "low", "medium", "minimal", "low"},
};

#define NWIRES (sizeof s_wires / sizeof s_wires[0])

static cluster_t *s_cluster;
static mockprov_t *s_mock;
static char s_config[256];

/* --- HTTP and the database. --- */

/* METHOD /api/v2/chats<path> with body: the status, the parsed answer into *out when given. */
static long s_http(const char *method, const char *path, const char *body, json_t **out) {
    char url[512];
    snprintf(url, sizeof url, "%s/api/v2/chats%s", cluster_url(s_cluster, 0), path);
    proc_http_t r;
    assert_int_equal(proc_http(method, url, cluster_token(s_cluster), body, &r), 0);
    long status = r.status;
    if (out) {
        *out = r.body ? json_loads(r.body, 0, NULL) : NULL;
    }
    proc_http_free(&r);
    return status;
}

/* POST /chats with body (201 expected): the new chat's id (caller frees). */
static char *s_create(const char *body) {
    json_t *v = NULL;
    long status = s_http("POST", "", body, &v);
    if (status != 201) {
        char *text = v ? json_dumps(v, JSON_COMPACT) : NULL;
        fail_msg("POST /chats: %ld %s", status, text ? text : "");
    }
    char *id = mem_strdup(json_string_value(json_object_get(v, "id")));
    json_decref(v);
    return id;
}

/* METHOD /chats/{chat}<path>: the status (the answer into *out when given). */
static long s_chat_call(const char *method, const char *chat, const char *path, const char *body,
                        json_t **out) {
    char *p = mem_printf("/%s%s", chat, path);
    long status = s_http(method, p, body, out);
    free(p);
    return status;
}

/* Asserts a 400 whose validations[0].field is field (and whose message is message, when
 * given). */
static void s_refused(const char *method, const char *path, const char *body, const char *field,
                      const char *message) {
    json_t *v = NULL;
    long status = s_http(method, path, body, &v);
    char *text = v ? json_dumps(v, JSON_COMPACT) : mem_strdup("");
    if (status != 400) {
        fail_msg("%s %s %s: want 400 naming %s, got %ld %s", method, path, body, field, status,
                 text);
    }
    const char *got = json_string_value(
        json_object_get(json_array_get(json_object_get(v, "validations"), 0), "field"));
    if (!got || strcmp(got, field) != 0) {
        fail_msg("%s %s %s: want the field %s, got %s", method, path, body, field, text);
    }
    if (message) {
        assert_string_equal(json_string_value(json_object_get(v, "message")), message);
    }
    printf("  400 naming %s: %s\n", field, text);
    free(text);
    json_decref(v);
}

/* Waits until the chat has n assistant rows and is waiting. */
static void s_wait_turns(const char *chat, int n) {
    char *q = mem_printf("SELECT (SELECT count(*) FROM chat_messages WHERE chat_id = c.id AND"
                         " role = 'assistant') || ':' || status FROM chats c WHERE id = '%s'",
                         chat);
    char want[32];
    snprintf(want, sizeof want, "%d:waiting", n);
    clusterlog_expect(s_cluster, q, want, WAIT_MS);
    free(q);
}

/* --- What the worker sent. --- */

static void s_push(const char *type, const char *body) {
    mockprov_reply_t *r = mockprov_reply_new(200, type);
    mockprov_reply_body(r, body, 7, 0);
    mockprov_push(s_mock, &r);
}

/* The body of the mock's latest request (a new reference). */
static json_t *s_last_body(void) {
    json_t *req = mockprov_request(s_mock, mockprov_request_count(s_mock) - 1);
    json_t *body = json_incref(json_object_get(req, "body"));
    json_decref(req);
    assert_non_null(body);
    return body;
}

/* The effort a request body carries in its provider's field, as text: OpenAI
 * reasoning_effort; Anthropic "budget_tokens:max_tokens" of an enabled thinking; Ollama think
 * (a level, "true" or "false"); "-" when there is none (Anthropic's max_tokens then 8192).
 * Caller frees. */
static char *s_effort_of(const json_t *body) {
    const json_t *oa = json_object_get(body, "reasoning_effort");
    const json_t *an = json_object_get(body, "thinking");
    const json_t *ol = json_object_get(body, "think");
    if (oa) {
        return mem_strdup(json_string_value(oa));
    }
    if (an) {
        assert_string_equal(json_string_value(json_object_get(an, "type")), "enabled");
        return mem_printf("%lld:%lld",
                          (long long)json_integer_value(json_object_get(an, "budget_tokens")),
                          (long long)json_integer_value(json_object_get(body, "max_tokens")));
    }
    if (ol) {
        return mem_strdup(json_is_string(ol) ? json_string_value(ol)
                          : json_is_true(ol) ? "true"
                                             : "false");
    }
    const json_t *mt = json_object_get(body, "max_tokens");
    if (mt) {
        assert_int_equal(json_integer_value(mt), 8192);
    }
    return mem_strdup("-");
}

static void s_expect_effort(const char *what, const char *want) {
    json_t *body = s_last_body();
    char *got = s_effort_of(body);
    printf("  %s: %s\n", what, got);
    if (strcmp(got, want) != 0) {
        fail_msg("%s: the request carries effort %s, want %s", what, got, want);
    }
    free(got);
    json_decref(body);
}

/* The tool names a request body offers (OpenAI and Ollama: tools[].function.name; Anthropic:
 * tools[].name), as a new array. */
static json_t *s_tool_names(const json_t *body) {
    json_t *names = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(body, "tools"), i, t) {
        json_t *fn = json_object_get(t, "function");
        json_array_append(names, json_object_get(fn ? fn : t, "name"));
    }
    return names;
}

static bool s_has(const json_t *names, const char *name) {
    size_t i;
    json_t *n;
    json_array_foreach(names, i, n) {
        if (!strcmp(json_string_value(n), name)) {
            return true;
        }
    }
    return false;
}

/* Every system text of a request body (Anthropic's top-level system blocks, the others'
 * system messages), joined. Caller frees. */
static char *s_system_text(const json_t *body) {
    char *out = mem_strdup("");
    size_t i;
    json_t *b;
    json_array_foreach(json_object_get(body, "system"), i, b) {
        char *next = mem_printf("%s%s\n", out, json_string_value(json_object_get(b, "text")));
        free(out);
        out = next;
    }
    json_array_foreach(json_object_get(body, "messages"), i, b) {
        const char *c = json_string_value(json_object_get(b, "content"));
        if (!strcmp(json_string_value(json_object_get(b, "role")), "system") && c) {
            char *next = mem_printf("%s%s\n", out, c);
            free(out);
            out = next;
        }
    }
    return out;
}

/* --- Effort. --- */

static char *s_message(const char *text, const char *model, const char *effort) {
    return mem_printf("{\"content\":[{\"type\":\"text\",\"text\":\"%s\"}]%s%s%s%s%s%s}", text,
                      model ? ",\"model\":\"" : "", model ? model : "", model ? "\"" : "",
                      effort ? ",\"reasoning_effort\":\"" : "", effort ? effort : "",
                      effort ? "\"" : "");
}

/* Sends text (with effort, when given) to chat and waits for its turn, the chat's n-th. */
static void s_send_turn(const wire_t *w, const char *chat, const char *effort, int n) {
    s_push(w->type, w->text);
    char *body = s_message("again", NULL, effort);
    assert_int_equal(s_chat_call("POST", chat, "/messages", body, NULL), 200);
    free(body);
    s_wait_turns(chat, n);
}

static void test_effort_reaches_each_provider_and_is_clamped_to_the_config_max(void **u) {
    (void)u;
    for (size_t i = 0; i < NWIRES; i++) {
        const wire_t *w = &s_wires[i];
        printf("%s:\n", w->model);
        /* A first message with its own effort. */
        s_push(w->type, w->text);
        char *body = s_message("hello", w->model, w->first);
        char *chat = s_create(body);
        free(body);
        s_wait_turns(chat, 1);
        s_expect_effort("a message's effort", w->first_want);
        /* Above the config's max: clamped; stored as sent. */
        s_send_turn(w, chat, "max", 2);
        s_expect_effort("max, clamped", w->max_want);
        /* No effort on the next message: the chat's last one, clamped again. */
        s_send_turn(w, chat, NULL, 3);
        s_expect_effort("the chat's last effort", w->max_want);
        char *rec = cluster_sql(s_cluster,
                                "SELECT c.last_reasoning_effort || ':' || (SELECT string_agg("
                                "coalesce(m.reasoning_effort, '-'), ',' ORDER BY m.id) FROM"
                                " chat_messages m WHERE m.chat_id = c.id AND m.role = 'user')"
                                " FROM chats c WHERE c.id = '%s'",
                                chat);
        char *want = mem_printf("max:%s,max,-", w->first);
        assert_string_equal(rec, want);
        free(want);
        free(rec);
        free(chat);
        /* A chat without any effort: the config's default. */
        s_push(w->type, w->text);
        body = s_message("hello", w->model, NULL);
        chat = s_create(body);
        free(body);
        s_wait_turns(chat, 1);
        s_expect_effort("the config's default", w->dflt_want);
        free(chat);
        /* A config without reasoning_effort: nothing is sent, whatever the user chose. */
        s_push(w->type, w->text);
        body = s_message("hello", w->plain, "high");
        chat = s_create(body);
        free(body);
        s_wait_turns(chat, 1);
        s_expect_effort("a config without reasoning_effort", "-");
        free(chat);
    }
    /* Ollama's boolean think, for a model that takes no level (default none, max high). */
    const wire_t *o = &s_wires[2];
    s_push(o->type, o->text);
    char *body = s_message("hello", "ollama-b", NULL);
    char *chat = s_create(body);
    free(body);
    s_wait_turns(chat, 1);
    s_expect_effort("ollama think, none", "false");
    s_send_turn(o, chat, "high", 2);
    s_expect_effort("ollama think, high", "true");
    free(chat);
}

static void test_a_queued_message_s_effort_survives_promotion(void **u) {
    (void)u;
    for (size_t i = 0; i < NWIRES; i++) {
        const wire_t *w = &s_wires[i];
        /* The first turn is slow, so that the next message waits in the queue. */
        mockprov_reply_t *r = mockprov_reply_new(200, w->type);
        mockprov_reply_chunk(r, w->text, 1, 1500);
        mockprov_reply_body(r, w->text + 1, 7, 0);
        mockprov_push(s_mock, &r);
        s_push(w->type, w->text);
        char *body = s_message("first", w->model, w->first);
        char *chat = s_create(body);
        free(body);
        body = s_message("queued", NULL, w->queued);
        json_t *out = NULL;
        assert_int_equal(s_chat_call("POST", chat, "/messages", body, &out), 200);
        free(body);
        assert_true(json_is_true(json_object_get(out, "queued")));
        assert_string_equal(json_string_value(json_object_get(
                                json_object_get(out, "queued_message"), "reasoning_effort")),
                            w->queued);
        json_decref(out);
        s_wait_turns(chat, 2);
        printf("%s:\n", w->model);
        s_expect_effort("the promoted message's effort", w->queued_want);
        char *rec = cluster_sql(s_cluster,
                                "SELECT m.reasoning_effort || ':' || c.last_reasoning_effort FROM"
                                " chat_messages m JOIN chats c ON c.id = m.chat_id WHERE"
                                " m.chat_id = '%s' AND m.queued_message_id IS NOT NULL",
                                chat);
        char *want = mem_printf("%s:%s", w->queued, w->queued);
        assert_string_equal(rec, want);
        free(want);
        free(rec);
        free(chat);
    }
}

/* --- Plan mode. --- */

#define DYNAMIC_TOOL                                                                               \
    "\"dynamic_tools\":[{\"name\":\"client_write\",\"description\":\"writes on the client\","      \
    "\"input_schema\":{\"type\":\"object\"}}]"

/* The tools plan mode offers: the local ones, the subagent tools that change nothing, and the
 * MCP tool that says it only reads. */
static const char *const s_read_only[] = {
    "time", "echo", "list_agents", "list_subagent_models", "wait_agent", "mcp__ann__look"};

static void test_plan_mode_offers_only_read_only_tools_and_the_plan_block(void **u) {
    (void)u;
    for (size_t i = 0; i < NWIRES; i++) {
        const wire_t *w = &s_wires[i];
        printf("%s:\n", w->model);
        s_push(w->type, w->text);
        char *body = mem_printf("{\"content\":[{\"type\":\"text\",\"text\":\"plan it\"}],"
                                "\"model\":\"%s\",\"plan_mode\":\"plan\",\"mcp_servers\":[\"ann\"],"
                                "%s}",
                                w->model, DYNAMIC_TOOL);
        char *chat = s_create(body);
        free(body);
        s_wait_turns(chat, 1);
        json_t *sent = s_last_body();
        json_t *names = s_tool_names(sent);
        char *listed = json_dumps(names, JSON_COMPACT);
        printf("  plan mode offers %s\n", listed);
        free(listed);
        size_t n = sizeof s_read_only / sizeof s_read_only[0];
        assert_int_equal(json_array_size(names), n);
        for (size_t k = 0; k < n; k++) {
            assert_true(s_has(names, s_read_only[k]));
        }
        char *system = s_system_text(sent);
        assert_non_null(strstr(system, "You are in plan mode"));
        free(system);
        json_decref(names);
        json_decref(sent);
        json_t *c = NULL;
        assert_int_equal(s_chat_call("GET", chat, "", NULL, &c), 200);
        assert_string_equal(json_string_value(json_object_get(c, "plan_mode")), "plan");
        json_decref(c);
        /* Off again: every tool, and no plan block. */
        assert_int_equal(s_chat_call("PATCH", chat, "", "{\"plan_mode\":\"\"}", NULL), 204);
        assert_int_equal(s_chat_call("GET", chat, "", NULL, &c), 200);
        assert_null(json_object_get(c, "plan_mode"));
        json_decref(c);
        s_send_turn(w, chat, NULL, 2);
        sent = s_last_body();
        names = s_tool_names(sent);
        const char *all[] = {"client_write",   "mcp__ann__change", "mcp__ann__plain",
                             "mcp__ann__look", "spawn_agent",      "message_agent"};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) {
            assert_true(s_has(names, all[k]));
        }
        system = s_system_text(sent);
        assert_null(strstr(system, "plan mode"));
        free(system);
        json_decref(names);
        json_decref(sent);
        free(chat);
    }
}

static void test_a_withheld_tool_call_in_plan_mode_is_an_error_and_never_runs(void **u) {
    (void)u;
    const char *log = cluster_log(s_cluster, CLUSTER_WORKER, 0);
    int looks = clusterlog_count(log, "event=mcp_call ", "tool=look ");
    mockprov_push_openai_call(s_mock, "call_look", "mcp__ann__look", "{\"x\":\"a\"}");
    mockprov_push_openai_call(s_mock, "call_change", "mcp__ann__change", "{\"x\":\"b\"}");
    mockprov_push_openai_call(s_mock, "call_client", "client_write", "{}");
    mockprov_push_openai_text(s_mock, "planned");
    char *body = mem_printf("{\"content\":[{\"type\":\"text\",\"text\":\"plan it\"}],"
                            "\"model\":\"openai-e\",\"plan_mode\":\"plan\",\"mcp_servers\":"
                            "[\"ann\"],%s}",
                            DYNAMIC_TOOL);
    char *chat = s_create(body);
    free(body);
    s_wait_turns(chat, 4); /* never requires_action: the client's call was answered */
    char *rows = cluster_sql(s_cluster,
                             "SELECT string_agg((content -> 0 ->> 'tool_name') || ':' ||"
                             " (content -> 0 ->> 'is_error'), ',' ORDER BY id) FROM chat_messages"
                             " WHERE chat_id = '%s' AND role = 'tool'",
                             chat);
    printf("  tool rows: %s\n", rows);
    assert_string_equal(rows, "mcp__ann__look:false,mcp__ann__change:true,client_write:true");
    free(rows);
    char *why = cluster_sql(s_cluster,
                            "SELECT content -> 0 -> 'result' ->> 'error' FROM chat_messages WHERE"
                            " chat_id = '%s' AND role = 'tool' AND content -> 0 ->> 'tool_name' ="
                            " 'mcp__ann__change'",
                            chat);
    assert_non_null(strstr(why, "plan mode"));
    free(why);
    /* The server ran the read and never the write. */
    assert_int_equal(clusterlog_count(log, "event=mcp_call ", "tool=look "), looks + 1);
    assert_int_equal(clusterlog_count(log, "event=mcp_call ", "tool=change "), 0);
    free(chat);
}

static void test_mcp_servers_change_on_send(void **u) {
    (void)u;
    const wire_t *w = &s_wires[0];
    s_push(w->type, w->text);
    char *body = s_message("hello", w->model, NULL);
    char *chat = s_create(body);
    free(body);
    s_wait_turns(chat, 1);
    json_t *sent = s_last_body();
    json_t *names = s_tool_names(sent);
    assert_false(s_has(names, "mcp__ann__look"));
    json_decref(names);
    json_decref(sent);
    /* A send that enables the server: its tools from this turn on. */
    s_push(w->type, w->text);
    assert_int_equal(s_chat_call("POST", chat, "/messages",
                                 "{\"content\":[{\"type\":\"text\",\"text\":\"x\"}],"
                                 "\"mcp_servers\":[\"ann\"]}",
                                 NULL),
                     200);
    s_wait_turns(chat, 2);
    sent = s_last_body();
    names = s_tool_names(sent);
    assert_true(s_has(names, "mcp__ann__look") && s_has(names, "mcp__ann__change"));
    json_decref(names);
    json_decref(sent);
    /* null keeps the set; [] clears it. */
    s_push(w->type, w->text);
    assert_int_equal(s_chat_call("POST", chat, "/messages",
                                 "{\"content\":[{\"type\":\"text\",\"text\":\"x\"}],"
                                 "\"mcp_servers\":null}",
                                 NULL),
                     200);
    s_wait_turns(chat, 3);
    json_t *c = NULL;
    assert_int_equal(s_chat_call("GET", chat, "", NULL, &c), 200);
    assert_string_equal(json_string_value(json_array_get(json_object_get(c, "mcp_servers"), 0)),
                        "ann");
    json_decref(c);
    s_push(w->type, w->text);
    assert_int_equal(s_chat_call("POST", chat, "/messages",
                                 "{\"content\":[{\"type\":\"text\",\"text\":\"x\"}],"
                                 "\"mcp_servers\":[]}",
                                 NULL),
                     200);
    s_wait_turns(chat, 4);
    sent = s_last_body();
    names = s_tool_names(sent);
    assert_false(s_has(names, "mcp__ann__look"));
    json_decref(names);
    json_decref(sent);
    free(chat);
}

/* --- The gateway's checks. --- */

#define SCHEMA_FORMAT                                                                              \
    "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":{"   \
    "\"type\":\"object\",\"required\":[\"n\"],\"properties\":{\"n\":{\"type\":\"integer\"}}}}}"
#define TEXT_HI "\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]"

static void test_bad_values_are_refused_naming_the_field(void **u) {
    (void)u;
    char *chat = s_create("{" TEXT_HI ",\"model\":\"sim\"}");
    s_wait_turns(chat, 1);
    char *path = mem_printf("/%s", chat);
    char *messages = mem_printf("/%s/messages", chat);
    char *mid = cluster_sql(s_cluster,
                            "SELECT min(id) FROM chat_messages WHERE chat_id = '%s' AND role ="
                            " 'user'",
                            chat);
    char *edit = mem_printf("/%s/messages/%s", chat, mid);
    char *before =
        cluster_sql(s_cluster, "SELECT count(*) FROM chat_messages WHERE chat_id = '%s'", chat);
    s_refused("POST", "", "{" TEXT_HI ",\"reasoning_effort\":\"extreme\"}", "reasoning_effort",
              NULL);
    s_refused("POST", "", "{" TEXT_HI ",\"reasoning_effort\":3}", "reasoning_effort", NULL);
    s_refused("POST", "", "{\"content\":[],\"reasoning_effort\":\"low\"}", "reasoning_effort",
              NULL);
    s_refused("POST", "", "{" TEXT_HI ",\"plan_mode\":\"on\"}", "plan_mode",
              "Invalid plan_mode value.");
    s_refused("POST", "", "{" TEXT_HI ",\"plan_mode\":\"plan\"," SCHEMA_FORMAT "}",
              "response_format", NULL);
    s_refused("POST", messages, "{" TEXT_HI ",\"reasoning_effort\":\"High\"}", "reasoning_effort",
              NULL);
    s_refused("POST", messages, "{" TEXT_HI ",\"plan_mode\":true}", "plan_mode",
              "Invalid plan_mode value.");
    s_refused("POST", messages, "{" TEXT_HI ",\"plan_mode\":\"plan\"," SCHEMA_FORMAT "}",
              "response_format", NULL);
    s_refused("POST", messages, "{" TEXT_HI ",\"mcp_servers\":[\"ann\",\"nope\"]}",
              "mcp_servers[1]", NULL);
    s_refused("POST", messages, "{" TEXT_HI ",\"mcp_servers\":\"ann\"}", "mcp_servers", NULL);
    s_refused("PATCH", edit, "{" TEXT_HI ",\"reasoning_effort\":\"x\"}", "reasoning_effort", NULL);
    s_refused("PATCH", edit, "{" TEXT_HI ",\"plan_mode\":\"plan\"}", "plan_mode", NULL);
    s_refused("PATCH", path, "{\"plan_mode\":\"maybe\"}", "plan_mode", "Invalid plan_mode value.");
    /* The chat's own plan mode refuses a structured send or edit, inside the bundle. */
    assert_int_equal(s_chat_call("PATCH", chat, "", "{\"plan_mode\":\"plan\"}", NULL), 204);
    s_refused("POST", messages, "{" TEXT_HI "," SCHEMA_FORMAT "}", "response_format", NULL);
    s_refused("PATCH", edit, "{" TEXT_HI "," SCHEMA_FORMAT "}", "response_format", NULL);
    char *n =
        cluster_sql(s_cluster, "SELECT count(*) FROM chat_messages WHERE chat_id = '%s'", chat);
    assert_string_equal(n, before); /* a refusal stores nothing */
    free(n);
    free(before);
    /* A send that turns plan mode off may ask for structured output (the sim answers it). */
    json_t *out = NULL;
    assert_int_equal(
        s_chat_call("POST", chat, "/messages",
                    "{" TEXT_HI ",\"plan_mode\":\"\",\"model\":\"sim\"," SCHEMA_FORMAT "}", &out),
        200);
    json_decref(out);
    free(edit);
    free(mid);
    free(messages);
    free(path);
    free(chat);
}

static void test_enabling_plan_mode_while_a_structured_request_is_pending_is_a_conflict(void **u) {
    (void)u;
    /* A structured request whose turn is slow: the finalizer's call comes after 1.5 s. */
    const char *call =
        OA("{\"role\":\"assistant\",\"tool_calls\":[{\"index\":0,\"id\":\"call_f\",\"type\":"
           "\"function\",\"function\":{\"name\":\"submit_structured_output\",\"arguments\":"
           "\"{\\\"output\\\":{\\\"n\\\":42}}\"}}]}",
           "null") OA("{}", "\"tool_calls\"") "data: [DONE]\n\n";
    mockprov_reply_t *r = mockprov_reply_new(200, "text/event-stream");
    mockprov_reply_chunk(r, call, 1, 1500);
    mockprov_reply_body(r, call + 1, 7, 0);
    mockprov_push(s_mock, &r);
    s_push(s_wires[0].type, s_wires[0].text);
    char *chat = s_create("{" TEXT_HI ",\"model\":\"openai-e\"," SCHEMA_FORMAT "}");
    json_t *out = NULL;
    assert_int_equal(s_chat_call("PATCH", chat, "", "{\"plan_mode\":\"plan\"}", &out), 409);
    json_decref(out);
    assert_int_equal(
        s_chat_call("POST", chat, "/messages", "{" TEXT_HI ",\"plan_mode\":\"plan\"}", NULL), 409);
    char *rec = cluster_sql(s_cluster,
                            "SELECT plan_mode || ':' || (SELECT count(*) FROM"
                            " chat_queued_messages WHERE chat_id = c.id) FROM chats c WHERE id ="
                            " '%s'",
                            chat);
    assert_string_equal(rec, "false:0"); /* neither refusal changed the chat */
    free(rec);
    /* The receipt closes the request: plan mode may be turned on. */
    char *q = mem_printf("SELECT structured_output ->> 'status' FROM chat_messages WHERE"
                         " chat_id = '%s' AND structured_output ->> 'type' ="
                         " 'structured-output-outcome'",
                         chat);
    clusterlog_expect(s_cluster, q, "succeeded", WAIT_MS);
    free(q);
    clusterlog_expect_status(s_cluster, chat, "waiting", WAIT_MS);
    assert_int_equal(s_chat_call("PATCH", chat, "", "{\"plan_mode\":\"plan\"}", NULL), 204);
    free(chat);
}

/* --- The cluster. --- */

static int s_setup(void **state) {
    (void)state;
    s_mock = mockprov_new();
    ASSERT(s_mock);
    const char *m = mockprov_url(s_mock);
    const char *src = getenv("CHATFLEET_SOURCE_DIR");
    ASSERT(src);
    snprintf(s_config, sizeof s_config, "/tmp/cf-effort-%d.json", (int)getpid());
    FILE *f = fopen(s_config, "w");
    ASSERT(f);
#define EFFORT(d, x) ",\"options\":{\"reasoning_effort\":{\"default\":\"" d "\",\"max\":\"" x "\"}}"
    fprintf(
        f,
        "{\"models\":["
        "{\"name\":\"openai-e\",\"provider\":\"openai\",\"model\":\"gpt\",\"base_url\":"
        "\"%s/v1\",\"api_key_env\":\"MOCK_KEY\",\"default\":true" EFFORT(
            "low",
            "high") "},"
                    "{\"name\":\"openai-p\",\"provider\":\"openai\",\"model\":\"gpt\",\"base_url\":"
                    "\"%s/v1\",\"api_key_env\":\"MOCK_KEY\"},"
                    "{\"name\":\"anthropic-e\",\"provider\":\"anthropic\",\"model\":\"claude\","
                    "\"base_url\":\"%s\",\"api_key_env\":\"MOCK_KEY\"" EFFORT(
                        "medium",
                        "high") "},"
                                "{\"name\":\"anthropic-p\",\"provider\":\"anthropic\",\"model\":"
                                "\"claude\","
                                "\"base_url\":\"%s\",\"api_key_env\":\"MOCK_KEY\"},"
                                "{\"name\":\"ollama-e\",\"provider\":\"ollama\",\"model\":\"gpt-"
                                "oss:20b\","
                                "\"base_url\":\"%s\"" EFFORT(
                                    "low",
                                    "medium") "},"
                                              "{\"name\":\"ollama-b\",\"provider\":\"ollama\","
                                              "\"model\":\"llama3\","
                                              "\"base_url\":\"%s\"" EFFORT(
                                                  "none",
                                                  "high") "},"
                                                          "{\"name\":\"ollama-p\",\"provider\":"
                                                          "\"ollama\",\"model\":\"llama3\",\"base_"
                                                          "url\":"
                                                          "\"%s\"},"
                                                          "{\"name\":\"sim\",\"provider\":\"sim\","
                                                          "\"model\":\"sim\"}],"
                                                          "\"mcp_servers\":{\"ann\":{\"command\":"
                                                          "\"node\",\"args\":"
                                                          "[\"%s/tests/mcp/"
                                                          "annotated_server.mjs\"],\"sandbox\":{"
                                                          "\"ro_paths\":"
                                                          "[\"%s/tests/mcp\"]}}}}",
        m, m, m, m, m, m, m, src, src);
#undef EFFORT
    fclose(f);
    char *cfg = mem_printf("CHATFLEET_CONFIG=%s", s_config);
    /* Titles on the sim, so that the mock's scripted replies are the turns' only. */
    const char *env[] = {cfg, "MOCK_KEY=sk-test", "CHATFLEET_TITLE_MODEL=sim",
                         "CHATFLEET_MCP_SANDBOX=auto", NULL};
    cluster_opts_t o = {.name = "test_effort_plan_mode", .gateways = 1, .workers = 1, .env = env};
    s_cluster = cluster_new(&o);
    free(cfg);
    /* The tools a step offers are those of the servers ready by then. */
    const char *log = cluster_log(s_cluster, CLUSTER_WORKER, 0);
    int64_t end = id_now_ms() + WAIT_MS;
    while (clusterlog_count(log, "event=mcp_ready ", "server=ann ") == 0 && id_now_ms() < end) {
        usleep(50 * 1000);
    }
    ASSERT(clusterlog_count(log, "event=mcp_ready ", "server=ann ") > 0);
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    int unclean = cluster_destroy(&s_cluster);
    mockprov_destroy(&s_mock);
    unlink(s_config);
    return unclean == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_effort_reaches_each_provider_and_is_clamped_to_the_config_max),
        cmocka_unit_test(test_a_queued_message_s_effort_survives_promotion),
        cmocka_unit_test(test_plan_mode_offers_only_read_only_tools_and_the_plan_block),
        cmocka_unit_test(test_a_withheld_tool_call_in_plan_mode_is_an_error_and_never_runs),
        cmocka_unit_test(test_mcp_servers_change_on_send),
        cmocka_unit_test(test_bad_values_are_refused_naming_the_field),
        cmocka_unit_test(
            test_enabling_plan_mode_while_a_structured_request_is_pending_is_a_conflict),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
