/* compaction: see compaction.h. */
#include "compaction.h"
#include "id.h"
#include "jsonout.h"
#include "mem.h"
#include "usage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The instructions are never stored: only the summary they produce is. */
#define S_SYSTEM                                                                                   \
    "You summarize conversations so that they can continue without their earlier messages."
#define S_REQUEST                                                                                  \
    "Summarize the conversation above for your own later use: the user's goals and "               \
    "requests, decisions made, facts and results learned (tool results included), and what "       \
    "is still open. Write plain prose, without preamble."
#define S_BOUNDARY_PREFIX "Summary of the earlier conversation, which was compacted:\n\n"

static const char *s_str(const json_t *obj, const char *key) {
    const char *v = json_string_value(json_object_get(obj, key));
    return v ? v : "";
}

static json_t *s_text_row(const char *role, const char *text) {
    return json_pack("{s:s, s:[{s:s, s:s}]}", "role", role, "content", "type", "text", "text",
                     text);
}

/* The index where the trailing unanswered user rows begin: after the last assistant row. */
static size_t s_replay_start(const json_t *messages) {
    size_t n = json_array_size(messages);
    for (size_t i = n; i-- > 0;) {
        if (!strcmp(s_str(json_array_get(messages, i), "role"), "assistant")) {
            return i + 1;
        }
    }
    return 0;
}

json_t *compaction_prompt(const json_t *messages, json_t **replay) {
    json_t *prompt = json_array();
    json_t *tail = json_array();
    json_array_append_new(prompt, s_text_row("system", S_SYSTEM));
    size_t from = s_replay_start(messages);
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        if (json_is_true(json_object_get(m, "control"))) {
            continue; /* structured feedback is an instruction, not conversation */
        }
        const json_t *content = json_object_get(m, "content");
        if (i >= from && !strcmp(s_str(m, "role"), "user")) {
            json_array_append(tail, (json_t *)content);
            continue;
        }
        json_array_append_new(prompt, json_pack("{s:O, s:O}", "role", json_object_get(m, "role"),
                                                "content", content));
    }
    json_array_append_new(prompt, s_text_row("user", S_REQUEST));
    *replay = tail;
    return prompt;
}

void compaction_guide(json_t *prompt, const json_t *answer) {
    const char *m = json_string_value(json_object_get(answer, "model_context"));
    const char *u = json_string_value(json_object_get(answer, "user_context"));
    size_t n = json_array_size(prompt);
    if ((!m && !u) || n == 0) {
        return;
    }
    char *text =
        mem_printf("Guidance for this summary: %s%s%s", m ? m : "", m && u ? "\n" : "", u ? u : "");
    json_array_insert_new(prompt, n - 1, s_text_row("user", text));
    free(text);
}

char *compaction_progress_part(const char *call_id, const char *source) {
    json_t *p = json_pack("{s:s, s:s, s:s, s:s, s:s}", "type", COMPACTION_PART_TYPE, "tool_name",
                          COMPACTION_TOOL, "tool_call_id", call_id, "source", source, "status",
                          "Summarizing...");
    char *text = jsonout_dumps(p);
    json_decref(p);
    return text;
}

int compaction_call_id(char out[COMPACTION_CALL_ID_MAX]) {
    char uuid[ID_UUID_LEN + 1];
    if (id_uuid_new(uuid) != 0) {
        return -1;
    }
    snprintf(out, COMPACTION_CALL_ID_MAX, "summary_%s", uuid);
    return 0;
}

char *compaction_summary_text(const json_t *content) {
    char *acc = mem_strdup("");
    size_t i;
    json_t *p;
    json_array_foreach(content, i, p) {
        if (!strcmp(s_str(p, "type"), "text")) {
            char *next = mem_printf("%s%s", acc, s_str(p, "text"));
            free(acc);
            acc = next;
        }
    }
    return acc;
}

/* --- The automatic trigger. --- */

compaction_trigger_t compaction_trigger(int64_t chat_limit, int threshold, int64_t override_limit) {
    compaction_trigger_t t = {.context_limit = chat_limit > 0 ? chat_limit : 0,
                              .chat_point = -1,
                              .override_point = -1,
                              .threshold_percent = threshold};
    if (t.context_limit > 0 && threshold < COMPACTION_THRESHOLD_OFF_PERCENT) {
        t.chat_point = t.context_limit * threshold / 100;
    }
    if (override_limit > 0 && t.context_limit > 0) {
        int64_t point = override_limit * COMPACTION_OVERRIDE_WINDOW_PERCENT / 100;
        /* Beyond the chat model's window the prompt could never get there. */
        if (point <= t.context_limit) {
            t.override_point = point;
        }
    }
    if (t.override_point >= 0 && (t.chat_point < 0 || t.override_point < t.chat_point)) {
        t.override_binds = true;
        t.threshold_percent = COMPACTION_OVERRIDE_WINDOW_PERCENT;
        t.trigger_limit = override_limit;
    } else if (t.chat_point >= 0) {
        t.trigger_limit = t.context_limit;
    }
    return t;
}

static int64_t s_int(const json_t *obj, const char *key) {
    const json_t *v = json_object_get(obj, key);
    return json_is_integer(v) && json_integer_value(v) >= 0 ? (int64_t)json_integer_value(v) : -1;
}

compaction_gate_t compaction_gate(const json_t *messages, const json_t *summary,
                                  const compaction_trigger_t *t, int64_t *tokens) {
    *tokens = -1;
    size_t replies = 0; /* assistant rows with usage after the boundary, up to the latest */
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        if (strcmp(s_str(m, "role"), "assistant") ||
            json_is_true(json_object_get(m, "compressed"))) {
            continue;
        }
        int64_t n = usage_context_tokens(json_object_get(m, "usage"));
        if (n >= 0) {
            *tokens = n;
            replies++;
        }
    }
    if (*tokens < 0 || t->trigger_limit <= 0) {
        return COMPACTION_GATE_NONE;
    }
    int64_t point = t->override_binds ? t->override_point : t->chat_point;
    if (*tokens < point) {
        return COMPACTION_GATE_NONE;
    }
    /* A summary made under another trigger is no failed compaction: compact again. */
    if (summary && replies == 1 && t->threshold_percent > 0 &&
        s_int(summary, "threshold_percent") == t->threshold_percent &&
        s_int(summary, "trigger_context_limit_tokens") == t->trigger_limit) {
        return COMPACTION_GATE_OVER_LIMIT;
    }
    return COMPACTION_GATE_RUN;
}

char *compaction_over_limit_error(const compaction_trigger_t *t, int64_t tokens) {
    bool chat = !t->override_binds || (t->chat_point >= 0 && tokens >= t->chat_point);
    bool over = t->override_binds || (t->override_point >= 0 && tokens >= t->override_point);
    const char *fix = chat && over ? "raise the owner's compaction threshold for this model or"
                                     " configure a compaction model with a larger context window"
                      : chat       ? "raise the owner's compaction threshold for this model"
                                   : "configure a compaction model with a larger context window";
    char *msg =
        mem_printf("the conversation is still over the compaction limit after it was"
                   " summarized (%lld tokens, trigger at %d%% of %lld): %s",
                   (long long)tokens, t->threshold_percent, (long long)t->trigger_limit, fix);
    json_t *e =
        json_pack("{s:s, s:s, s:I, s:i, s:I}", "kind", "context_limit", "message", msg,
                  "context_tokens", (json_int_t)tokens, "threshold_percent", t->threshold_percent,
                  "trigger_context_limit_tokens", (json_int_t)t->trigger_limit);
    free(msg);
    char *text = jsonout_dumps(e);
    json_decref(e);
    return text;
}

/* --- The compaction step. --- */

#define S_ROWS_MAX 3 /* the triplet; replayed rows come after it */

struct compaction_step {
    cs_message_t *rows;
    char **texts; /* what the rows' content points to */
    int count;
};

/* Adds a row whose content is v's JSON text (v is stolen). */
static void s_add(compaction_step_t *self, cs_message_t row, json_t *v) {
    char *text = jsonout_dumps(v);
    json_decref(v);
    self->texts[self->count] = text;
    row.content = text;
    self->rows[self->count++] = row;
}

compaction_step_t *compaction_step_new(const char *summary, const json_t *replay,
                                       const compaction_meta_t *meta) {
    const char *call_id = meta->call_id;
    const compaction_trigger_t *t = meta->trigger;
    compaction_step_t *self = mem_calloc(1, sizeof *self);
    size_t cap = S_ROWS_MAX + json_array_size(replay);
    self->rows = mem_calloc(cap, sizeof *self->rows);
    self->texts = mem_calloc(cap, sizeof *self->texts);
    char *boundary = mem_printf(S_BOUNDARY_PREFIX "%s", summary);
    /* The boundary: a compressed model-only user row, the shape the clear sentinel has, so
     * that prompt reads and boundary detection treat both alike (ARCHITECTURE.md §4.3). */
    s_add(self, (cs_message_t){.role = "user", .visibility = "model", .compressed = true},
          json_pack("[{s:s, s:s}]", "type", "text", "text", boundary));
    free(boundary);
    s_add(self,
          (cs_message_t){.role = "assistant",
                         .visibility = "user",
                         .compressed = true,
                         .usage = meta->usage,
                         .model_config_id = meta->model_config_id},
          json_pack("[{s:s, s:s, s:s, s:{s:s}}]", "type", "tool-call", "tool_call_id", call_id,
                    "tool_name", COMPACTION_TOOL, "args", "source", meta->source));
    s_add(self, (cs_message_t){.role = "tool", .visibility = "user", .compressed = true},
          json_pack("[{s:s, s:s, s:s, s:{s:s, s:s, s:I, s:i, s:I, s:I, s:s}}]", "type",
                    "tool-result", "tool_call_id", call_id, "tool_name", COMPACTION_TOOL, "result",
                    "source", meta->source, "summary", summary, "replayed_messages",
                    (json_int_t)json_array_size(replay), "threshold_percent", t->threshold_percent,
                    "trigger_context_limit_tokens", (json_int_t)t->trigger_limit,
                    "context_limit_tokens", (json_int_t)t->context_limit, "summary_model",
                    meta->summary_model ? meta->summary_model : ""));
    size_t i;
    json_t *content;
    json_array_foreach(replay, i, content) {
        s_add(self, (cs_message_t){.role = "user", .visibility = "model"}, json_incref(content));
    }
    return self;
}

const cs_message_t *compaction_step_rows(const compaction_step_t *self, int *count) {
    *count = self->count;
    return self->rows;
}

void compaction_step_destroy(compaction_step_t **self_p) {
    compaction_step_t *self = *self_p;
    if (!self) {
        return;
    }
    for (int i = 0; i < self->count; i++) {
        free(self->texts[i]);
    }
    free(self->texts);
    free(self->rows);
    free(self);
    *self_p = NULL;
}
