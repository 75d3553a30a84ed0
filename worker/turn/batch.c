/* batch: see batch.h. */
#include "batch.h"
#include "agents.h"
#include "id.h"
#include "jsonout.h"
#include "jsonstrict.h"
#include "mcpset.h"
#include "mem.h"
#include "tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *s_str(const json_t *obj, const char *key) {
    const char *v = json_string_value(json_object_get(obj, key));
    return v ? v : "";
}

/* The rows of one CommitStep and the texts they point to. */
struct batch {
    cs_message_t msgs[BATCH_CALLS_MAX + 1 + 2]; /* + the two hook context rows */
    int n;
    char *owned[2 * (BATCH_CALLS_MAX + 1) + 2 + 2];
    int nowned;
    bool hooked;        /* local tools run under the hooks, in a step of their own (hookstep.h) */
    const json_t *plan; /* plan mode: the tools on offer (borrowed); NULL: not in plan mode */
    taskctx_t *ctx;     /* whose turn tool_call stages are of (batch_set_task); NULL: untimed */
};

static const char *s_keep(batch_t *r, char *text) {
    r->owned[r->nowned++] = text;
    return text;
}

batch_t *batch_new(void) {
    return mem_calloc(1, sizeof(batch_t));
}

void batch_set_task(batch_t *self, taskctx_t *ctx) {
    self->ctx = ctx;
}

void batch_destroy(batch_t **self_p) {
    if (!self_p || !*self_p) {
        return;
    }
    batch_t *r = *self_p;
    for (int i = 0; i < r->nowned; i++) {
        free(r->owned[i]);
    }
    free(r);
    *self_p = NULL;
}

const cs_message_t *batch_rows(const batch_t *self, int *count) {
    *count = self->n;
    return self->msgs;
}

/* Appends a file part to content for each stored file the result's content names (a tool's
 * image, toolfiles.h): the row's transition links them to the chat. */
static void s_file_parts(json_t *content, const json_t *result) {
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(result, "content"), i, item) {
        const char *id = json_string_value(json_object_get(item, "file_id"));
        if (id) {
            json_array_append_new(content,
                                  json_pack("{s:s, s:s, s:s, s:s}", "type", "file", "file_id", id,
                                            "media_type", s_str(item, "mimeType"), "name",
                                            s_str(item, "name")));
        }
    }
}

/* Appends the tool row answering call (result is stolen; meta, stolen, may be NULL). */
static void s_add_result(batch_t *r, const json_t *call, json_t *result, bool is_error,
                         const char *request_id, json_t *meta) {
    /* "o" steals result. */
    json_t *content = json_pack("[{s:s, s:s, s:s, s:o, s:b}]", "type", "tool-result",
                                "tool_call_id", s_str(call, "tool_call_id"), "tool_name",
                                s_str(call, "tool_name"), "result", result, "is_error", is_error);
    s_file_parts(content, result);
    r->msgs[r->n] = (cs_message_t){.role = "tool", .content = s_keep(r, jsonout_dumps(content))};
    if (meta) {
        r->msgs[r->n].so_request_id = request_id;
        r->msgs[r->n].so_meta = s_keep(r, jsonout_dumps(meta));
    }
    r->n++;
    json_decref(content);
    json_decref(meta);
}

static json_t *s_tool_error(const char *why, int repairs_left) {
    char text[STRUCTURED_ERROR_MAX];
    snprintf(text, sizeof text, "%s", why);
    json_t *e = json_pack("{s:s}", "error", text);
    if (repairs_left >= 0) {
        json_object_set_new(e, "repairs_left", json_integer(repairs_left));
    }
    return e;
}

/* How one batch is answered. */
typedef struct {
    const json_t *dynamic_tools;
    const json_t *rejected;        /* [{"tool_call_id","reason"}] refused at the boundary */
    const structured_turn_t *turn; /* NULL: no structured request is open */
    const char *batch_error;       /* the batch is refused as a whole (structured only) */
    bool replay;                   /* calls read back from history, not this step's reply */
    const json_t *answers;         /* {tool_call_id: {"result", "is_error"}} made elsewhere */
    const json_t *plan;            /* plan mode's offer (batch_set_plan), or NULL */
    bool candidate;                /* out: a valid submission was accepted */
} s_answer_t;

static const char *s_rejected_reason(const json_t *rejected, const char *id) {
    size_t i;
    json_t *r;
    json_array_foreach(rejected, i, r) {
        if (!strcmp(s_str(r, "tool_call_id"), id)) {
            return s_str(r, "reason");
        }
    }
    return NULL;
}

static bool s_is_dynamic(const json_t *dynamic_tools, const char *name) {
    size_t k;
    json_t *t;
    json_array_foreach(dynamic_tools, k, t) {
        if (!strcmp(s_str(t, "name"), name)) {
            return true;
        }
    }
    return false;
}

/* Whether offered (tool specs) holds one named name. */
static bool s_offered(const json_t *offered, const char *name) {
    size_t i;
    json_t *t;
    json_array_foreach(offered, i, t) {
        if (!strcmp(s_str(t, "name"), name)) {
            return true;
        }
    }
    return false;
}

bool batch_runs_locally(const json_t *dynamic_tools, const char *name) {
    return !mcpset_is_tool(name) && strcmp(name, OUTFORMAT_FINALIZER) != 0 &&
           !agents_is_tool(name) && !s_is_dynamic(dynamic_tools, name);
}

/* Whether calls hold a call of a declared dynamic tool. */
static bool s_has_dynamic(const json_t *calls, const json_t *dynamic_tools) {
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        if (!strcmp(s_str(c, "type"), "tool-call") &&
            s_is_dynamic(dynamic_tools, s_str(c, "tool_name"))) {
            return true;
        }
    }
    return false;
}

/* A subagent tool's call (agents.h): answered from an->answers when the step that runs it
 * made one; else left pending, except a wait_agent beside a client's call, which would hold
 * the chat for the client and the children at once: that one is refused. */
static void s_agent_call(batch_t *r, const json_t *calls, const json_t *c, s_answer_t *an) {
    const json_t *a = json_object_get(an->answers, s_str(c, "tool_call_id"));
    if (a) {
        s_add_result(r, c, json_incref(json_object_get(a, "result")),
                     json_is_true(json_object_get(a, "is_error")), NULL, NULL);
    } else if (!strcmp(s_str(c, "tool_name"), CS_AGENT_WAIT_TOOL) &&
               s_has_dynamic(calls, an->dynamic_tools)) {
        s_add_result(r, c,
                     s_tool_error(CS_AGENT_WAIT_TOOL " cannot wait beside client tool calls: call"
                                                     " it again once they are answered",
                                  -1),
                     true, NULL, NULL);
    }
}

/* Runs the one finalizer call of an acceptable batch: a candidate, or a bounded error. */
static void s_submit(batch_t *r, s_answer_t *an, const json_t *call) {
    const structured_turn_t *t = an->turn;
    json_t *value = NULL;
    char why[STRUCTURED_ERROR_MAX];
    int left = STRUCTURED_REJECTIONS_MAX - t->st.rejections - 1;
    if (structured_check(t->fmt, json_object_get(call, "args"), &value, why, sizeof why) != 0) {
        s_add_result(r, call, s_tool_error(why, left), true, NULL, NULL);
        return;
    }
    json_t *meta =
        json_pack("{s:s, s:s, s:s, s:o}", "type", STRUCTURED_TYPE_CANDIDATE, "request_id",
                  t->request_id, "tool_call_id", s_str(call, "tool_call_id"), "value", value);
    json_t *ack = json_pack("{s:b, s:s}", "accepted", true, "message",
                            "Structured output accepted. End your turn now, without tool calls.");
    s_add_result(r, call, ack, false, t->request_id, meta);
    an->candidate = true;
}

/* Appends one tool row per call that is not left to a client: run locally, answered with an
 * error (refused arguments, a refused batch, a replayed finalizer), or checked as a
 * submission. */
static void s_answer(batch_t *r, const json_t *calls, s_answer_t *an) {
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        if (r->n >= BATCH_CALLS_MAX || strcmp(s_str(c, "type"), "tool-call") != 0 ||
            json_is_true(json_object_get(c, "provider_executed"))) {
            continue;
        }
        const char *name = s_str(c, "tool_name");
        const char *refused = s_rejected_reason(an->rejected, s_str(c, "tool_call_id"));
        int left = an->turn ? STRUCTURED_REJECTIONS_MAX - an->turn->st.rejections - 1 : -1;
        bool finalizer = !strcmp(name, OUTFORMAT_FINALIZER);
        if (refused) {
            char why[STRUCTURED_ERROR_MAX];
            snprintf(why, sizeof why, "arguments refused (not valid strict JSON): %s", refused);
            s_add_result(r, c, s_tool_error(why, finalizer ? left : -1), true, NULL, NULL);
        } else if (an->batch_error) {
            s_add_result(r, c, s_tool_error(an->batch_error, left), true, NULL, NULL);
        } else if (an->plan && !finalizer && !s_offered(an->plan, name)) {
            s_add_result(r, c, s_tool_error(BATCH_PLAN_REFUSAL, -1), true, NULL, NULL);
        } else if (finalizer && an->turn && an->replay) {
            s_add_result(r, c,
                         s_tool_error("not executed: a submission is checked only in the step"
                                      " that made it; submit again",
                                      -1),
                         true, NULL, NULL);
        } else if (finalizer && an->turn) {
            s_submit(r, an, c);
        } else if (agents_is_tool(name) && !s_is_dynamic(an->dynamic_tools, name)) {
            s_agent_call(r, calls, c, an);
        } else if (mcpset_is_tool(name) || (r->hooked && !s_is_dynamic(an->dynamic_tools, name))) {
            /* Answered by the step that makes the call (mcpset.h, hookstep.h); left pending
             * until then. */
            const json_t *a = json_object_get(an->answers, s_str(c, "tool_call_id"));
            if (a) {
                s_add_result(r, c, json_incref(json_object_get(a, "result")),
                             json_is_true(json_object_get(a, "is_error")), NULL, NULL);
            }
        } else if (!s_is_dynamic(an->dynamic_tools, name)) {
            bool is_error = false;
            int64_t t0 = id_now_us();
            json_t *result = tools_run(name, json_object_get(c, "args"), &is_error);
            if (r->ctx && tools_is_local(name)) { /* an unknown tool runs nothing */
                taskctx_stage(r->ctx, STAGE_TOOL_CALL, t0);
            }
            s_add_result(r, c, result, is_error, NULL, NULL);
        }
    }
}

/* Replaces each tool call's args_text by the value the strict boundary parsed from it, or by
 * the placeholder {} when it refused (ARCHITECTURE.md §8, the finalizer loop: screening
 * before persistence): the raw bytes are never stored. Refusals go to rejected. */
static void s_screen(json_t *content, json_t *rejected) {
    size_t i;
    json_t *p;
    json_array_foreach(content, i, p) {
        const json_t *raw = json_object_get(p, "args_text");
        if (!json_is_string(raw)) {
            continue;
        }
        json_t *v = NULL;
        jsonstrict_error_t e;
        if (jsonstrict_parse(json_string_value(raw), json_string_length(raw), NULL, &v, &e) != 0) {
            char reason[STRUCTURED_REASON_MAX];
            snprintf(reason, sizeof reason, "%s at \"%s\": %s", jsonstrict_code_name(e.code),
                     e.path, e.message);
            json_array_append_new(rejected, json_pack("{s:s, s:s}", "tool_call_id",
                                                      s_str(p, "tool_call_id"), "reason", reason));
            v = json_object();
        }
        json_object_del(p, "args_text");
        json_object_set_new(p, "args", v);
    }
}

/* The structured_output of a step row. New reference. */
static json_t *s_step_meta(const structured_turn_t *t, const char *finish, const char *rejection,
                           json_t *rejected, const char *reason, json_t *value) {
    json_t *m = json_pack("{s:s, s:s, s:s}", "type", STRUCTURED_TYPE_STEP, "request_id",
                          t->request_id, "finish", finish[0] ? finish : "stop");
    if (rejection) {
        json_object_set_new(m, "rejection", json_string(rejection));
    }
    if (json_array_size(rejected) > 0) {
        json_object_set(m, "rejected_calls", rejected);
    }
    if (reason) {
        json_object_set_new(m, "reason", json_string(reason));
    }
    if (value) {
        json_object_set(m, "value", value);
    }
    return m;
}

static const char *s_batch_error(const char *rejection, bool native) {
    if (!rejection) {
        return NULL;
    }
    if (native) {
        return "not executed: no tools are on offer in this turn; reply with only the JSON value";
    }
    if (!strcmp(rejection, "ineligible")) {
        return "not executed: the reply was cut short, refused or filtered; submit again";
    }
    return "not executed: " OUTFORMAT_FINALIZER " must be the only tool call of its step, and"
           " called once";
}

static bool s_refused(const char *finish) {
    return finish && (!strcmp(finish, "refusal") || !strcmp(finish, "content_filter"));
}

/* The rejection of a native-mode reply (NULL: none). No tool is on offer, so any call refuses
 * the batch; a refused or filtered ending is no rejection (the request is not produced); any
 * other text-only ending is the submission: *value on success, else "invalid_output" with the
 * reason. */
static const char *s_native(const structured_turn_t *t, const json_t *content, const char *finish,
                            json_t **value, char *reason, size_t size) {
    *value = NULL;
    size_t i;
    json_t *p;
    json_array_foreach(content, i, p) {
        if (!strcmp(s_str(p, "type"), "tool-call") &&
            !json_is_true(json_object_get(p, "provider_executed"))) {
            return "invalid_batch";
        }
    }
    if (s_refused(finish)) {
        return NULL;
    }
    return structured_check_text(t->fmt, content, finish, value, reason, size) == 0
               ? NULL
               : "invalid_output";
}

void batch_set_hooked(batch_t *self, bool hooked) {
    self->hooked = hooked;
}

void batch_set_plan(batch_t *self, const json_t *offered) {
    self->plan = offered;
}

void batch_pending(batch_t *self, const json_t *pending, const json_t *dynamic_tools,
                   const structured_turn_t *turn, const json_t *answers) {
    s_answer_t an = {.dynamic_tools = dynamic_tools,
                     .turn = turn,
                     .replay = true,
                     .answers = answers,
                     .plan = self->plan};
    s_answer(self, pending, &an);
}

void batch_reply(batch_t *self, json_t *content, const char *finish, const char *usage,
                 const char *model_config_id, const json_t *dynamic_tools,
                 const structured_turn_t *turn, const char **rejection, bool *candidate) {
    json_t *rejected = json_array();
    s_screen(content, rejected);
    const char *rej = NULL;
    int finalizers = 0;
    char reason[STRUCTURED_REASON_MAX];
    bool have_reason = false;
    json_t *value = NULL;
    if (turn) {
        rej = structured_classify(content, finish, turn->st.candidate != NULL, &finalizers);
    }
    if (turn && turn->native) {
        rej = s_native(turn, content, finish, &value, reason, sizeof reason);
        have_reason = rej && !strcmp(rej, "invalid_output");
    }
    self->n = 1;
    s_answer_t an = {.dynamic_tools = dynamic_tools,
                     .rejected = rejected,
                     .turn = turn,
                     .batch_error = s_batch_error(rej, turn && turn->native),
                     .plan = self->plan};
    s_answer(self, content, &an);
    if (turn && !turn->native && !rej && finalizers == 1 && !an.candidate) {
        rej = "invalid_arguments";
    }
    if (value) {
        an.candidate = true;
    }
    self->msgs[0] = (cs_message_t){.role = "assistant",
                                   .content = s_keep(self, jsonout_dumps(content)),
                                   .usage = usage,
                                   .model_config_id = model_config_id};
    if (turn) {
        json_t *meta = s_step_meta(turn, finish, rej, rejected, have_reason ? reason : NULL, value);
        self->msgs[0].so_request_id = turn->request_id;
        self->msgs[0].so_meta = s_keep(self, jsonout_dumps(meta));
        json_decref(meta);
    }
    json_decref(rejected);
    json_decref(value);
    *rejection = rej;
    *candidate = an.candidate;
}

/* The texts the answers to calls (in their order) carry under key, joined, or NULL. */
static char *s_joined(const json_t *calls, const json_t *answers, const char *key) {
    char *out = NULL;
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        const char *t = json_string_value(
            json_object_get(json_object_get(answers, s_str(c, "tool_call_id")), key));
        if (t) {
            char *next = out ? mem_printf("%s\n\n%s", out, t) : mem_strdup(t);
            free(out);
            out = next;
        }
    }
    return out;
}

/* Appends a row of role and visibility vis holding one text part (text stolen), marked as
 * hook context (CS_HOOK_CONTEXT_META). */
static void s_add_context_row(batch_t *r, const char *role, const char *vis, char *text,
                              const char *meta) {
    json_t *content = json_pack("[{s:s, s:s}]", "type", "text", "text", text);
    free(text);
    r->msgs[r->n++] = (cs_message_t){.role = role,
                                     .visibility = vis,
                                     .content = s_keep(r, jsonout_dumps(content)),
                                     .so_meta = meta};
    json_decref(content);
}

void batch_hook_context(batch_t *self, const json_t *calls, const json_t *answers) {
    char *model = s_joined(calls, answers, "model_context");
    char *user = s_joined(calls, answers, "user_context");
    if (model) {
        s_add_context_row(self, "user", "model", model, CS_HOOK_CONTEXT_META);
    }
    if (user) {
        s_add_context_row(self, "assistant", "user", user, CS_HOOK_CONTEXT_META);
    }
}

void batch_event_context(batch_t *self, const json_t *answer, const char *event, bool model) {
    const char *m = json_string_value(json_object_get(answer, "model_context"));
    const char *u = json_string_value(json_object_get(answer, "user_context"));
    if (!(m && model) && !u) {
        return;
    }
    json_t *meta = json_pack("{s:s, s:s}", "type", "hook-context", "event", event);
    const char *kept = s_keep(self, jsonout_dumps(meta));
    json_decref(meta);
    if (m && model) {
        s_add_context_row(self, "user", "model", mem_strdup(m), kept);
    }
    if (u) {
        s_add_context_row(self, "assistant", "user", mem_strdup(u), kept);
    }
}
