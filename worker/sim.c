/* sim: see sim.h. Pure computation plus a cancellable pace; no I/O. */
#include "sim.h"
#include "id.h"
#include "mem.h"

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

static void s_directive(const char *d, sim_script_t *out) {
    char verb[16];
    s_word(&d, verb, sizeof verb);
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
static char *s_text_of(const json_t *msg) {
    size_t i;
    json_t *p;
    char *acc = mem_strdup("");
    json_array_foreach(json_object_get(msg, "content"), i, p) {
        const char *t = json_string_value(json_object_get(p, "text"));
        if (t && !strcmp(s_str(p, "type"), "text")) {
            char *next = mem_printf("%s%s", acc, t);
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

static void s_emit(provider_part_fn *on_part, void *ctx, const json_t *part) {
    if (!on_part) {
        return;
    }
    char *text = json_dumps(part, JSON_COMPACT);
    on_part(ctx, text);
    free(text);
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
            char *r = json_dumps(json_object_get(p, "result"), JSON_COMPACT | JSON_ENCODE_ANY);
            const char *name = json_string_value(json_object_get(p, "tool_name"));
            char *next = mem_printf("%s %s=%s", acc, name ? name : "?", r ? r : "null");
            free(r);
            free(acc);
            acc = next;
        }
    }
    return acc;
}

provider_rc_t sim_generate(const provider_request_t *req, cancel_t *cancel,
                           provider_part_fn *on_part, void *ctx, provider_result_t *out) {
    const json_t *msgs = req->messages;
    size_t n = json_array_size(msgs);
    size_t last_user = n;
    for (size_t i = n; i-- > 0;) {
        if (!strcmp(s_role(json_array_get(msgs, i)), "user")) {
            last_user = i;
            break;
        }
    }
    char *prompt = last_user < n ? s_text_of(json_array_get(msgs, last_user)) : mem_strdup("");
    sim_script_t sc;
    char *clean = mem_alloc(strlen(prompt) + 1);
    sim_parse(prompt, &sc, clean, strlen(prompt) + 1);
    free(prompt);
    int steps = 0;
    size_t last_assistant = n;
    for (size_t i = last_user < n ? last_user + 1 : 0; i < n; i++) {
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
    if (sc.stall) {
        while (!cancel_wait_ms(cancel, 1000)) {
        }
        free(clean);
        return PROVIDER_CANCELLED;
    }
    json_t *content = json_array();
    int64_t pace = sc.slow_ms >= 0 ? sc.slow_ms : req->chunk_ms;
    int64_t out_tokens = 0;
    bool tool_step = false;
    if (sc.tool[0] && steps < sc.tool_steps) {
        json_t *part = s_call_part(sc.tool, json_object());
        s_emit(on_part, ctx, part);
        json_array_append_new(content, part);
        tool_step = true;
        out_tokens++;
    }
    if (sc.dynamic[0] && steps < sc.dynamic_steps) {
        json_t *part = s_call_part(sc.dynamic, json_pack("{s:s}", "question", clean));
        s_emit(on_part, ctx, part);
        json_array_append_new(content, part);
        tool_step = true;
        out_tokens++;
    }
    if (!tool_step) {
        bool after_tools = last_assistant < n && last_assistant + 1 < n;
        char *text =
            after_tools ? s_results_reply(msgs, last_assistant + 1) : s_reply(clean, sc.words);
        int64_t start = id_now_ms();
        int64_t chunk = 0;
        /* Word by word on an absolute schedule, so the pace is an average rate: a task that
         * was stopped (SIGSTOP) catches up at once instead of drifting. */
        for (const char *w = text; *w && rc == PROVIDER_OK;) {
            const char *sp = strchr(w + 1, ' ');
            size_t len = sp ? (size_t)(sp - w) : strlen(w);
            if (pace > 0 && cancel_wait_until(cancel, start + chunk * pace)) {
                rc = PROVIDER_CANCELLED;
                break;
            }
            if (cancel_is_set(cancel)) {
                rc = PROVIDER_CANCELLED;
                break;
            }
            char *piece = mem_strndup(w, len);
            json_t *part = json_pack("{s:s, s:s}", "type", "text", "text", piece);
            s_emit(on_part, ctx, part);
            json_decref(part);
            free(piece);
            w += len;
            chunk++;
        }
        if (rc == PROVIDER_OK) {
            json_array_append_new(content, json_pack("{s:s, s:s}", "type", "text", "text", text));
        }
        out_tokens += chunk;
        free(text);
    }
    free(clean);
    if (rc != PROVIDER_OK) {
        json_decref(content);
        return rc;
    }
    size_t in_chars = 0;
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        char *t = s_text_of(m);
        in_chars += strlen(t);
        free(t);
    }
    out->content = content;
    out->usage = json_pack("{s:I, s:I}", "input_tokens", (json_int_t)(in_chars / 4 + 1),
                           "output_tokens", (json_int_t)out_tokens);
    return PROVIDER_OK;
}
