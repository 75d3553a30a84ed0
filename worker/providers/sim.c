/* sim: see sim.h. Pure computation: a reply is planned at once (its parts and when each is due)
 * and played out on the call's loop by one timer at a time; no I/O. */
#include "sim.h"
#include "id.h"
#include "jsonout.h"
#include "mem.h"
#include "outformat.h"
#include "schemagen.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const s_filler[] = {
    "alpha", "bravo",  "charlie", "delta", "echo", "foxtrot",  "golf",  "hotel",
    "india", "juliet", "kilo",    "lima",  "mike", "november", "oscar", "papa",
};

/* A bounded strtol: a non-negative decimal of at most 9 digits, or -1. */
static long s_number(const char **p) {
    const char *s = *p;
    while (*s == ' ') {
        s++;
    }
    long v = 0;
    int digits = 0;
    while (isdigit((unsigned char)*s) && digits < 9) {
        v = v * 10 + (*s - '0');
        s++;
        digits++;
    }
    *p = s;
    return digits ? v : -1;
}

static void s_word(const char **p, char *out, size_t size) {
    const char *s = *p;
    while (*s == ' ') {
        s++;
    }
    size_t n = 0;
    while (*s && *s != ' ' && *s != ']') {
        if (n + 1 < size) {
            out[n++] = *s;
        }
        s++;
    }
    out[n] = '\0';
    *p = s;
}

/* " xN" after a directive's argument, or dflt. */
static int s_times(const char **p, int dflt) {
    const char *s = *p;
    while (*s == ' ') {
        s++;
    }
    if (*s != 'x') {
        return dflt;
    }
    s++;
    long n = s_number(&s);
    *p = s;
    if (n < 1) {
        return dflt;
    }
    return n > SIM_REPEAT_MAX ? SIM_REPEAT_MAX : (int)n;
}

/* An optional count after a schema directive, or dflt. */
static int s_count(const char **p, int dflt) {
    long n = s_number(p);
    if (n < 0) {
        return dflt;
    }
    return n > SIM_REPEAT_MAX ? SIM_REPEAT_MAX : (int)n;
}

static void s_schema_directive(const char *what, const char **d, sim_script_t *out) {
    if (!strcmp(what, "text")) {
        out->schema_text = s_count(d, SIM_REPEAT_MAX);
    } else if (!strcmp(what, "wrong")) {
        out->schema_wrong = s_count(d, 1);
    } else if (!strcmp(what, "siblings")) {
        out->schema_siblings = s_count(d, 1);
    } else if (!strcmp(what, "double")) {
        out->schema_double = s_count(d, 1);
    } else if (!strcmp(what, "unsafe")) {
        out->schema_unsafe = s_count(d, 1);
    } else if (!strcmp(what, "truncate")) {
        out->schema_truncate = s_count(d, 1);
    } else if (!strcmp(what, "refuse")) {
        out->schema_refuse = true;
    } else if (!strcmp(what, "stall-after-candidate")) {
        out->schema_stall = true;
    }
}

/* The subagent directives (simagents.h); false when verb is none of them. */
static bool s_agents_directive(const char *verb, const char *d, simagents_script_t *out) {
    if (!strcmp(verb, "spawn")) {
        int n = s_count(&d, 1);
        out->spawn = n < 1 ? 1 : n;
    } else if (!strcmp(verb, "child")) {
        d += strspn(d, " ");
        if (*d && out->children < SIMAGENTS_CHILDREN_MAX) {
            snprintf(out->child[out->children++], sizeof out->child[0], "%s", d);
        }
    } else if (!strcmp(verb, "child-schema")) {
        out->child_schema = true;
    } else if (!strcmp(verb, "nowait")) {
        out->nowait = true;
    } else if (!strcmp(verb, "wait-all")) {
        out->wait_all = true;
    } else if (!strcmp(verb, "agents")) {
        char what[16];
        s_word(&d, what, sizeof what);
        out->verb = simagents_verb(what);
    } else {
        return false;
    }
    return true;
}

static void s_directive(const char *d, sim_script_t *out) {
    char verb[40];
    s_word(&d, verb, sizeof verb);
    if (s_agents_directive(verb, d, &out->agents)) {
        return;
    }
    if (!strcmp(verb, "tool")) {
        s_word(&d, out->tool, sizeof out->tool);
        out->tool_steps = s_times(&d, 1);
    } else if (!strcmp(verb, "dynamic")) {
        s_word(&d, out->dynamic, sizeof out->dynamic);
        out->dynamic_steps = s_times(&d, 1);
    } else if (!strcmp(verb, "fail")) {
        long st = s_number(&d);
        out->fail_status = st >= 100 && st <= 599 ? (int)st : 0;
        out->fail_attempts = s_times(&d, 1);
        while (*d == ' ') {
            d++;
        }
        if (!strncmp(d, "retry-after", 11)) {
            d += 11;
            long ms = s_number(&d);
            out->retry_after = ms;
        }
    } else if (!strcmp(verb, "slow")) {
        long ms = s_number(&d);
        out->slow_ms = ms >= 0 ? ms : -1;
    } else if (!strcmp(verb, "stall")) {
        out->stall = true;
    } else if (!strcmp(verb, "clock")) {
        out->clock = true;
    } else if (!strcmp(verb, "usage")) {
        long n = s_number(&d);
        out->usage_input = n >= 0 ? n : -1;
    } else if (!strcmp(verb, "title-fail")) {
        out->title_fail = true;
    } else if (!strcmp(verb, "title-invalid")) {
        out->title_invalid = true;
    } else if (!strcmp(verb, "title-slow")) {
        long ms = s_number(&d);
        out->title_slow_ms = ms >= 0 ? ms : -1;
    } else if (!strncmp(verb, "schema-", 7)) {
        s_schema_directive(verb + 7, &d, out);
    } else if (!strcmp(verb, "words")) {
        long n = s_number(&d);
        if (n >= 0) {
            out->words = n > SIM_WORDS_MAX ? SIM_WORDS_MAX : (int)n;
        }
    }
}

void sim_parse(const char *text, sim_script_t *out, char *clean, size_t size) {
    memset(out, 0, sizeof *out);
    out->retry_after = -1;
    out->slow_ms = -1;
    out->title_slow_ms = -1;
    out->usage_input = -1;
    out->words = SIM_WORDS_DEFAULT;
    size_t n = 0;
    const char *s = text ? text : "";
    while (*s) {
        const char *end = strncmp(s, "[sim:", 5) == 0 ? strchr(s, ']') : NULL;
        if (end) {
            char d[160];
            size_t len = (size_t)(end - s - 5);
            snprintf(d, sizeof d, "%.*s", (int)(len < sizeof d ? len : sizeof d - 1), s + 5);
            s_directive(d, out);
            s = end + 1;
            continue;
        }
        if (n + 1 < size) {
            clean[n++] = *s == '\n' || *s == '\t' ? ' ' : *s;
        }
        s++;
    }
    while (n > 0 && clean[n - 1] == ' ') {
        n--;
    }
    clean[n] = '\0';
    size_t lead = strspn(clean, " ");
    memmove(clean, clean + lead, n - lead + 1);
}

static const char *s_str(const json_t *obj, const char *key) {
    const char *v = json_string_value(json_object_get(obj, key));
    return v ? v : "";
}

static const char *s_role(const json_t *msg) {
    return s_str(msg, "role");
}

/* The text of a message's text parts, concatenated (caller frees). */
/* A message's text parts joined; a file part the sim received (with its bytes) adds
 * " [file <name> <media type> <N> bytes]", so a test can see that the model got it. */
static char *s_text_of(const json_t *msg) {
    size_t i;
    json_t *p;
    char *acc = mem_strdup("");
    json_array_foreach(json_object_get(msg, "content"), i, p) {
        const char *t = json_string_value(json_object_get(p, "text"));
        const char *data = json_string_value(json_object_get(p, "data"));
        char *next = NULL;
        if (t && !strcmp(s_str(p, "type"), "text")) {
            next = mem_printf("%s%s", acc, t);
        } else if (data && !strcmp(s_str(p, "type"), "file")) {
            size_t n = strlen(data);
            size_t bytes = n / 4 * 3 - (n && data[n - 1] == '=') - (n > 1 && data[n - 2] == '=');
            next = mem_printf("%s [file %s %s %zu bytes]", acc, s_str(p, "name"),
                              s_str(p, "media_type"), bytes);
        }
        if (next) {
            free(acc);
            acc = next;
        }
    }
    return acc;
}

static json_t *s_call_part(const char *name, json_t *args) {
    char id[ID_UUID_LEN + 1];
    if (id_uuid_new(id) != 0) {
        snprintf(id, sizeof id, "%lld", (long long)id_now_ms());
    }
    char *call_id = mem_printf("call_%.8s%.4s", id, id + 9);
    /* "o" steals args. */
    json_t *part = json_pack("{s:s, s:s, s:s, s:o}", "type", "tool-call", "tool_call_id", call_id,
                             "tool_name", name, "args", args);
    free(call_id);
    return part;
}

/* A reply as planned: its parts, each due at an offset from the start of the call. */
typedef struct {
    int64_t at;
    char *json;
} s_due_t;

typedef struct {
    provider_call_t *call;
    s_due_t *parts;
    size_t n, cap;
    size_t next;  /* the next part to send */
    int64_t t;    /* the offset the plan has reached */
    int64_t base; /* the loop time the call started */
    bool stall;   /* after the parts, never end: wait to be cancelled */
    bool clock;   /* [sim:clock]: stamp each text part as it is sent */
    evloop_timer_t *timer;
} s_plan_t;

static void s_emit(s_plan_t *plan, const json_t *part) {
    if (plan->n == plan->cap) {
        plan->cap = plan->cap ? plan->cap * 2 : 16;
        plan->parts = mem_realloc(plan->parts, plan->cap * sizeof *plan->parts);
    }
    plan->parts[plan->n++] = (s_due_t){plan->t, jsonout_dumps(part)};
}

/* The deterministic reply text: an echo of the prompt and filler words picked by its hash. */
static char *s_reply(const char *prompt, int words) {
    uint32_t h = 2166136261u;
    for (const char *c = prompt; *c; c++) {
        h = (h ^ (uint8_t)*c) * 16777619u;
    }
    size_t cap = strlen(prompt) + 32 + (size_t)words * 10;
    char *buf = mem_alloc(cap);
    int n = snprintf(buf, cap, "Echo: %s.", prompt[0] ? prompt : "(nothing)");
    for (int i = 0; i < words && n > 0 && (size_t)n < cap; i++) {
        h = h * 1103515245u + 12345u;
        n += snprintf(buf + n, cap - (size_t)n, " %s",
                      s_filler[(h >> 16) % (sizeof s_filler / sizeof s_filler[0])]);
    }
    return buf;
}

/* What the tool results since the last assistant message said, as the reply text. */
static char *s_results_reply(const json_t *msgs, size_t from) {
    char *acc = mem_strdup("Tool results:");
    for (size_t i = from; i < json_array_size(msgs); i++) {
        json_t *m = json_array_get(msgs, i);
        size_t k;
        json_t *p;
        json_array_foreach(json_object_get(m, "content"), k, p) {
            if (strcmp(s_str(p, "type"), "tool-result")) {
                continue;
            }
            json_t *result = json_object_get(p, "result");
            char *r = result ? jsonout_dumps(result) : NULL;
            const char *name = json_string_value(json_object_get(p, "tool_name"));
            char *next = mem_printf("%s %s=%s", acc, name ? name : "?", r ? r : "null");
            free(r);
            free(acc);
            acc = next;
        }
    }
    return acc;
}

/* Plans text word by word at pace (an average rate on the call's own schedule) and appends
 * it to content as one text part. *chunks counts the words. */
static void s_stream_text(s_plan_t *plan, const char *text, int64_t pace, json_t *content,
                          int64_t *chunks) {
    int64_t chunk = 0;
    int64_t t0 = plan->t;
    for (const char *w = text; *w;) {
        const char *sp = strchr(w + 1, ' ');
        size_t len = sp ? (size_t)(sp - w) : strlen(w);
        plan->t = t0 + chunk * pace;
        char *piece = mem_strndup(w, len);
        json_t *part = json_pack("{s:s, s:s}", "type", "text", "text", piece);
        s_emit(plan, part);
        json_decref(part);
        free(piece);
        w += len;
        chunk++;
    }
    json_array_append_new(content, json_pack("{s:s, s:s}", "type", "text", "text", text));
    *chunks += chunk;
}

/* The output schema of the finalizer on offer, or NULL when it is not on offer. */
static const json_t *s_finalizer_schema(const json_t *tools) {
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        if (!strcmp(s_str(t, "name"), OUTFORMAT_FINALIZER)) {
            const json_t *props = json_object_get(json_object_get(t, "input_schema"), "properties");
            return json_object_get(props, "output");
        }
    }
    return NULL;
}

/* Whether the rows after the last assistant message accept a submission. */
static bool s_acknowledged(const json_t *msgs, size_t from) {
    for (size_t i = from; i < json_array_size(msgs); i++) {
        size_t k;
        json_t *p;
        json_array_foreach(json_object_get(json_array_get(msgs, i), "content"), k, p) {
            if (!strcmp(s_str(p, "type"), "tool-result") &&
                !strcmp(s_str(p, "tool_name"), OUTFORMAT_FINALIZER) &&
                !json_is_true(json_object_get(p, "is_error"))) {
                return true;
            }
        }
    }
    return false;
}

/* A finalizer call whose raw argument bytes are args_text (the sim streams them as a real
 * provider would). */
static json_t *s_submit_part(const char *args_text) {
    json_t *part = s_call_part(OUTFORMAT_FINALIZER, json_null());
    json_object_del(part, "args");
    json_object_set_new(part, "args_text", json_string(args_text));
    return part;
}

/* {"output": v} as argument text (v stolen); or, when v is NULL, arguments of the wrong
 * shape. */
static char *s_args_text(json_t *v) {
    json_t *args = v ? json_pack("{s:o}", "output", v) : json_pack("{s:s}", "answer", "none");
    char *text = jsonout_dumps(args);
    json_decref(args);
    return text;
}

typedef enum { S_VALID = 0, S_TEXT, S_WRONG, S_SIBLINGS, S_DOUBLE, S_UNSAFE, S_TRUNCATED } s_act_t;

/* What the i-th schema step of the turn does. */
static s_act_t s_act(const sim_script_t *sc, int i) {
    int limits[] = {sc->schema_text,   sc->schema_wrong,  sc->schema_siblings,
                    sc->schema_double, sc->schema_unsafe, sc->schema_truncate};
    int acc = 0;
    for (int k = 0; k < 6; k++) {
        acc += limits[k];
        if (i < acc) {
            return (s_act_t)(k + 1);
        }
    }
    return S_VALID;
}

/* The calls of a structured step (act is not S_TEXT), appended to content. */
static void s_schema_calls(s_act_t act, const json_t *schema, json_t *content) {
    jsonschema_t *compiled = NULL;
    json_t *v = NULL;
    if (jsonschema_compile(schema, &compiled, NULL) == 0) {
        v = act == S_WRONG ? schemagen_invalid(schema, compiled)
                           : schemagen_valid(schema, compiled);
    }
    if (!v && act != S_WRONG) {
        v = schemagen_instance(schema, 0); /* unsupported by the generator: try it anyway */
    }
    jsonschema_destroy(&compiled);
    char *text = NULL;
    if (act == S_UNSAFE) {
        json_decref(v); /* the duplicate key is written by hand; s_args_text would steal v */
        text = mem_strdup("{\"output\":1,\"output\":2}");
    } else {
        text = s_args_text(v);
    }
    json_array_append_new(content, s_submit_part(text));
    if (act == S_DOUBLE) {
        json_array_append_new(content, s_submit_part(text));
    }
    if (act == S_SIBLINGS) {
        json_array_append_new(content, s_call_part("time", json_object()));
    }
    free(text);
}

typedef struct {
    const provider_request_t *req;
    s_plan_t *plan;
    const sim_script_t *sc;
    int64_t pace;
} s_call_t;

/* A step while a structured request is open: after an accepted submission a short text
 * ends the turn; otherwise the scripted mistake of this step, or a valid submission. */
static void s_schema_step(const s_call_t *c, const json_t *schema, int index, bool acknowledged,
                          const char *clean, json_t *content, provider_result_t *out,
                          int64_t *chunks) {
    const sim_script_t *sc = c->sc;
    if (acknowledged) {
        if (sc->schema_stall && c->req->attempt == 1) {
            c->plan->stall = true;
            return;
        }
        s_stream_text(c->plan, "Submitted the answer.", c->pace, content, chunks);
        return;
    }
    if (sc->schema_refuse) {
        snprintf(out->finish, sizeof out->finish, "refusal");
        s_stream_text(c->plan, "I can't help with that.", c->pace, content, chunks);
        return;
    }
    s_act_t act = s_act(sc, index);
    if (act == S_TEXT) {
        char *text = s_reply(clean, sc->words);
        s_stream_text(c->plan, text, c->pace, content, chunks);
        free(text);
        return;
    }
    /* A call takes the model one chunk's time too, so that slow turns stay slow. */
    c->plan->t += c->pace;
    s_schema_calls(act, schema, content);
    size_t i;
    json_t *p;
    json_array_foreach(content, i, p) {
        s_emit(c->plan, p);
    }
    /* A truncated attempt carries a complete-looking, valid submission: the worker must still
     * refuse it as a candidate (ARCHITECTURE.md §8, the finalizer loop). */
    snprintf(out->finish, sizeof out->finish, "%s", act == S_TRUNCATED ? "length" : "tool_calls");
    *chunks += (int64_t)json_array_size(content);
}

/* A step in native mode (req->native_schema set): the reply is the JSON text of an instance
 * of the schema, or the scripted mistake of this step as text: prose (schema-text), an
 * invalid instance (schema-wrong), a duplicate key (schema-unsafe), a valid instance cut short
 * (schema-truncate), or a refusal; sibling and double batches have no meaning without tools
 * and answer validly. */
static void s_native_step(const s_call_t *c, int index, const char *clean, json_t *content,
                          provider_result_t *out, int64_t *chunks) {
    const sim_script_t *sc = c->sc;
    const json_t *schema = c->req->native_schema;
    if (sc->schema_refuse) {
        snprintf(out->finish, sizeof out->finish, "refusal");
        s_stream_text(c->plan, "I can't help with that.", c->pace, content, chunks);
        return;
    }
    s_act_t act = s_act(sc, index);
    char *text = NULL;
    if (act == S_TEXT) {
        text = s_reply(clean, sc->words);
    } else if (act == S_UNSAFE) {
        text = mem_strdup("{\"output\":1,\"output\":2}");
    } else {
        jsonschema_t *compiled = NULL;
        json_t *v = NULL;
        if (jsonschema_compile(schema, &compiled, NULL) == 0) {
            v = act == S_WRONG ? schemagen_invalid(schema, compiled)
                               : schemagen_valid(schema, compiled);
        }
        if (!v && act != S_WRONG) {
            v = schemagen_instance(schema, 0); /* unsupported by the generator: try it anyway */
        }
        jsonschema_destroy(&compiled);
        text = v ? jsonout_dumps(v) : mem_strdup("\"no instance\"");
        json_decref(v);
    }
    snprintf(out->finish, sizeof out->finish, "%s", act == S_TRUNCATED ? "length" : "stop");
    s_stream_text(c->plan, text, c->pace, content, chunks);
    free(text);
}

/* A step of the subagent script (calls from simagents_calls): its calls in one message,
 * which take the model one chunk's time, as a structured step's do. */
static void s_agents_step(const s_call_t *c, const json_t *calls, json_t *content,
                          provider_result_t *out, int64_t *chunks) {
    c->plan->t += c->pace;
    size_t i;
    json_t *k;
    json_array_foreach(calls, i, k) {
        json_t *part = s_call_part(s_str(k, "tool_name"), json_incref(json_object_get(k, "args")));
        s_emit(c->plan, part);
        json_array_append_new(content, part);
    }
    snprintf(out->finish, sizeof out->finish, "tool_calls");
    *chunks += (int64_t)json_array_size(calls);
}

/* The index of the latest real user message (control feedback rows skipped), or n. */
static size_t s_last_user(const json_t *msgs) {
    size_t n = json_array_size(msgs);
    for (size_t i = n; i-- > 0;) {
        const json_t *m = json_array_get(msgs, i);
        if (!strcmp(s_role(m), "user") && !json_is_true(json_object_get(m, "control"))) {
            return i;
        }
    }
    return n;
}

static void s_plan_free(void *arg) {
    s_plan_t *plan = arg;
    for (size_t i = 0; i < plan->n; i++) {
        free(plan->parts[i].json);
    }
    free(plan->parts);
    free(plan);
}

static void s_plan_stop(void *arg) {
    s_plan_t *plan = arg;
    evloop_timer_cancel(plan->call->loop, plan->timer);
    plan->timer = NULL;
}

/* Hands part (JSON text) to the worker; with [sim:clock], a text part's text first gets
 * "@MICROS@ " with the monotonic clock's microseconds now. */
static void s_send(s_plan_t *plan, const char *part) {
    provider_call_t *call = plan->call;
    json_t *p = plan->clock ? json_loads(part, 0, NULL) : NULL;
    const char *text = json_string_value(json_object_get(p, "text"));
    const char *type = json_string_value(json_object_get(p, "type"));
    if (!text || !type || strcmp(type, "text") != 0) {
        call->on_part(call->part_ctx, part);
        json_decref(p);
        return;
    }
    char *stamped = mem_printf("@%lld@ %s", (long long)id_now_us(), text);
    json_object_set_new(p, "text", json_string(stamped));
    char *json = jsonout_dumps(p);
    call->on_part(call->part_ctx, json);
    free(json);
    free(stamped);
    json_decref(p);
}

/* Sends every part that is due, then waits for the next one, or ends the call. */
static void s_play(void *arg) {
    s_plan_t *plan = arg;
    provider_call_t *call = plan->call;
    plan->timer = NULL;
    int64_t now = id_now_ms();
    while (plan->next < plan->n && plan->base + plan->parts[plan->next].at <= now) {
        if (call->on_part) {
            s_send(plan, plan->parts[plan->next].json);
        }
        plan->next++;
    }
    if (plan->next < plan->n) {
        plan->timer =
            evloop_timer_at(call->loop, plan->base + plan->parts[plan->next].at, s_play, plan);
    } else if (!plan->stall) {
        provider_call_end(call, PROVIDER_OK);
    }
}

/* The sim's summary (provider.h, summary): "Summary of N messages:" and the start of each user
 * and assistant text before the instruction (the last row; rows without text are skipped),
 * bounded and deterministic. */
static char *s_summary(const json_t *msgs) {
    size_t n = json_array_size(msgs);
    char *acc = mem_printf("Summary of %zu messages:", n > 0 ? n - 1 : 0);
    for (size_t i = 0; i + 1 < n && strlen(acc) < SIM_SUMMARY_MAX_BYTES; i++) {
        const json_t *m = json_array_get(msgs, i);
        if (strcmp(s_role(m), "user") && strcmp(s_role(m), "assistant")) {
            continue;
        }
        char *t = s_text_of(m);
        if (t[0]) { /* a row of tool calls only has nothing to say here */
            char *next = mem_printf("%s %s: %.40s;", acc, s_role(m), t);
            free(acc);
            acc = next;
        }
        free(t);
    }
    return acc;
}

/* Plans a summary (req->summary) as text at the call's pace. */
static void s_plan_summary(s_plan_t *plan, const provider_request_t *req, provider_result_t *out) {
    json_t *content = json_array();
    int64_t words = 0;
    char *text = s_summary(req->messages);
    s_stream_text(plan, text, req->chunk_ms, content, &words);
    free(text);
    out->content = content;
    out->usage = json_pack("{s:I, s:I}", "input_tokens", (json_int_t)json_array_size(req->messages),
                           "output_tokens", (json_int_t)words);
}

#define SIM_TITLE_WORDS 6 /* a sim title is the message's first words */

/* Plans a title (req->title): {"title": the first words of the last user message, directives
 * removed}, or the scripted failure or invalid answer. */
static provider_rc_t s_plan_title(s_plan_t *plan, const provider_request_t *req,
                                  provider_result_t *out) {
    const json_t *msgs = req->messages;
    size_t last = s_last_user(msgs);
    char *prompt =
        last < json_array_size(msgs) ? s_text_of(json_array_get(msgs, last)) : mem_strdup("");
    sim_script_t sc;
    char *clean = mem_alloc(strlen(prompt) + 1);
    sim_parse(prompt, &sc, clean, strlen(prompt) + 1);
    free(prompt);
    if (sc.title_fail) {
        free(clean);
        return provider_fail(out, 400, false, -1, "sim: scripted title failure");
    }
    size_t end = 0;
    for (int w = 0; clean[end] && w < SIM_TITLE_WORDS; w++) {
        end += strcspn(clean + end, " ");
        end += w + 1 < SIM_TITLE_WORDS ? strspn(clean + end, " ") : 0;
    }
    clean[end] = '\0';
    json_t *v = sc.title_invalid ? json_pack("{s:s}", "name", clean)
                                 : json_pack("{s:s}", "title", clean[0] ? clean : "Chat");
    free(clean);
    char *text = jsonout_dumps(v);
    json_decref(v);
    json_t *content = json_array();
    int64_t words = 0;
    /* Paced as the turn's reply would be ([sim:slow N] included), or by [sim:title-slow N]. */
    int64_t pace = sc.title_slow_ms >= 0 ? sc.title_slow_ms
                   : sc.slow_ms >= 0     ? sc.slow_ms
                                         : req->chunk_ms;
    s_stream_text(plan, text, pace, content, &words);
    free(text);
    out->content = content;
    out->usage = json_pack("{s:I, s:I}", "input_tokens", (json_int_t)json_array_size(msgs),
                           "output_tokens", (json_int_t)words);
    return PROVIDER_OK;
}

/* Plans the reply into plan and call->out; PROVIDER_ERROR for a scripted failure. */
static provider_rc_t s_plan(s_plan_t *plan, const provider_request_t *req, provider_result_t *out) {
    const json_t *msgs = req->messages;
    size_t n = json_array_size(msgs);
    size_t last_user = s_last_user(msgs);
    char *prompt = last_user < n ? s_text_of(json_array_get(msgs, last_user)) : mem_strdup("");
    sim_script_t sc;
    char *clean = mem_alloc(strlen(prompt) + 1);
    sim_parse(prompt, &sc, clean, strlen(prompt) + 1);
    free(prompt);
    int steps = 0;
    size_t last_assistant = n;
    size_t from = last_user < n ? last_user + 1 : 0;
    for (size_t i = from; i < n; i++) {
        if (!strcmp(s_role(json_array_get(msgs, i)), "assistant")) {
            steps++;
            last_assistant = i;
        }
    }
    provider_rc_t rc = PROVIDER_OK;
    if (sc.fail_status && req->attempt <= sc.fail_attempts) {
        rc = provider_fail(out, sc.fail_status, provider_status_retryable(sc.fail_status),
                           sc.retry_after, "sim: scripted failure %d (attempt %lld of %d)",
                           sc.fail_status, (long long)req->attempt, sc.fail_attempts);
        free(clean);
        return rc;
    }
    plan->clock = sc.clock;
    if (sc.stall) {
        plan->stall = true;
        free(clean);
        return PROVIDER_OK;
    }
    json_t *content = json_array();
    s_call_t call = {req, plan, &sc, sc.slow_ms >= 0 ? sc.slow_ms : req->chunk_ms};
    int64_t out_tokens = 0;
    bool tool_step = false;
    if (sc.tool[0] && steps < sc.tool_steps) {
        json_t *part = s_call_part(sc.tool, json_object());
        s_emit(plan, part);
        json_array_append_new(content, part);
        tool_step = true;
        out_tokens++;
    }
    if (sc.dynamic[0] && steps < sc.dynamic_steps) {
        json_t *part = s_call_part(sc.dynamic, json_pack("{s:s}", "question", clean));
        s_emit(plan, part);
        json_array_append_new(content, part);
        tool_step = true;
        out_tokens++;
    }
    const json_t *schema = s_finalizer_schema(req->tools);
    bool after_tools = last_assistant < n && last_assistant + 1 < n;
    if (req->native_schema && json_array_size(req->tools) > 0) {
        /* As llama.cpp refuses a grammar together with tools: a worker that offered both
         * would be wrong, and a test sees it as a failed request. */
        json_decref(content);
        free(clean);
        return provider_fail(out, 400, false, -1, "sim: a native schema cannot come with tools");
    }
    /* The subagent script comes after the [sim:tool] steps and before a structured answer;
     * in native mode no tool is on offer, so there is none. */
    json_t *agent_calls =
        tool_step || req->native_schema ? NULL : simagents_calls(&sc.agents, msgs, from, clean);
    int ordinary = sc.tool[0] ? sc.tool_steps : 0;
    ordinary = sc.dynamic[0] && sc.dynamic_steps > ordinary ? sc.dynamic_steps : ordinary;
    int index = steps - (steps < ordinary ? steps : ordinary);
    if (sc.agents.spawn > 0) {
        index -= simagents_steps(msgs, from);
        index = index < 0 ? 0 : index;
    }
    if (agent_calls) {
        s_agents_step(&call, agent_calls, content, out, &out_tokens);
        json_decref(agent_calls);
    } else if (!tool_step && req->native_schema) {
        s_native_step(&call, index, clean, content, out, &out_tokens);
    } else if (!tool_step && schema) {
        bool acked = after_tools && s_acknowledged(msgs, last_assistant + 1);
        s_schema_step(&call, schema, index, acked, clean, content, out, &out_tokens);
    } else if (!tool_step) {
        char *text =
            after_tools ? s_results_reply(msgs, last_assistant + 1) : s_reply(clean, sc.words);
        s_stream_text(plan, text, call.pace, content, &out_tokens);
        free(text);
    } else {
        snprintf(out->finish, sizeof out->finish, "tool_calls");
    }
    free(clean);
    size_t in_chars = 0;
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        char *t = s_text_of(m);
        in_chars += strlen(t);
        free(t);
    }
    out->content = content;
    out->usage =
        json_pack("{s:I, s:I}", "input_tokens",
                  sc.usage_input >= 0 ? (json_int_t)sc.usage_input : (json_int_t)(in_chars / 4 + 1),
                  "output_tokens", (json_int_t)out_tokens);
    return PROVIDER_OK;
}

void sim_start(provider_call_t *call, const provider_request_t *req) {
    s_plan_t *plan = mem_calloc(1, sizeof *plan);
    plan->call = call;
    plan->base = id_now_ms();
    call->impl = plan;
    call->impl_free = s_plan_free;
    call->stop = s_plan_stop;
    if (req->summary) {
        s_plan_summary(plan, req, &call->out);
    } else if ((req->title ? s_plan_title(plan, req, &call->out) : s_plan(plan, req, &call->out)) !=
               PROVIDER_OK) {
        provider_call_end(call, PROVIDER_ERROR);
        return;
    }
    /* Even a reply due at once is sent from the loop: a call never ends inside its start. */
    plan->timer =
        evloop_timer_at(call->loop, plan->base + (plan->n ? plan->parts[0].at : 0), s_play, plan);
}
