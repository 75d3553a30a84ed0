/* structured: see structured.h. */
#include "structured.h"
#include "jsonnumber.h"
#include "jsonout.h"
#include "jsonstrict.h"
#include "mem.h"

#include <stdio.h>
#include <string.h>

static const char *s_str(const json_t *obj, const char *key) {
    const char *v = json_string_value(json_object_get(obj, key));
    return v ? v : "";
}

void structured_state_clear(structured_state_t *st) {
    json_decref(st->candidate);
    memset(st, 0, sizeof *st);
}

static void s_issues(const jsonschema_report_t *rep, char *reason, size_t size);

static bool s_known_rejection(const char *r) {
    return !strcmp(r, "text_only") || !strcmp(r, "invalid_arguments") ||
           !strcmp(r, "invalid_batch") || !strcmp(r, "ineligible") || !strcmp(r, "invalid_output");
}

/* One assistant step row: counts the step and its rejection; a rejected finalizer batch
 * clears the candidate. */
static void s_step(structured_state_t *st, const json_t *so) {
    const json_t *rej = json_object_get(so, "rejection");
    st->steps++;
    snprintf(st->last_finish, sizeof st->last_finish, "%s", s_str(so, "finish"));
    st->last_reject[0] = '\0';
    snprintf(st->last_reason, sizeof st->last_reason, "%s", s_str(so, "reason"));
    const json_t *value = json_object_get(so, "value");
    if (value && rej) {
        st->malformed = true;
        return;
    }
    if (value) {
        /* A native-mode reply accepted as the candidate. */
        json_decref(st->candidate);
        st->candidate = jsonnumber_deep_copy(value);
        return;
    }
    if (!rej) {
        return;
    }
    if (!json_is_string(rej) || !s_known_rejection(json_string_value(rej))) {
        st->malformed = true;
        return;
    }
    snprintf(st->last_reject, sizeof st->last_reject, "%s", json_string_value(rej));
    st->rejections++;
    if (strcmp(st->last_reject, "text_only") != 0) {
        json_decref(st->candidate);
        st->candidate = NULL;
    }
}

void structured_derive(const char *request_id, const json_t *evidence, structured_state_t *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->request_id, sizeof out->request_id, "%s", request_id ? request_id : "");
    size_t i;
    json_t *row;
    json_array_foreach(evidence, i, row) {
        const json_t *so = json_object_get(row, "so");
        const char *type = s_str(so, "type");
        const char *role = s_str(row, "role");
        if (strcmp(s_str(so, "request_id"), out->request_id) != 0) {
            out->malformed = true;
        } else if (!strcmp(type, STRUCTURED_TYPE_STEP) && !strcmp(role, "assistant")) {
            s_step(out, so);
        } else if (!strcmp(type, STRUCTURED_TYPE_CANDIDATE) && !strcmp(role, "tool")) {
            const json_t *v = json_object_get(so, "value");
            if (!v) {
                out->malformed = true;
                continue;
            }
            json_decref(out->candidate);
            out->candidate = jsonnumber_deep_copy(v);
        } else if (!strcmp(type, STRUCTURED_TYPE_FEEDBACK) && !strcmp(role, "user")) {
            continue;
        } else if (!strcmp(type, STRUCTURED_TYPE_INVALIDATION) && !strcmp(role, "user") &&
                   !out->continued) {
            /* Not a rejection: the counts stand, only the candidate is void. */
            out->continued = true;
            json_decref(out->candidate);
            out->candidate = NULL;
        } else {
            out->malformed = true;
        }
    }
}

json_t *structured_tool_spec(const json_t *schema) {
    /* "O" takes a new reference to the caller's schema, which is never rewritten. */
    return json_pack("{s:s, s:s, s:{s:s, s:{s:O}, s:[s], s:b}}", "name", OUTFORMAT_FINALIZER,
                     "description",
                     "Submit the final answer of this turn. Call it once, alone, with the value"
                     " in \"output\"; it must match the schema.",
                     "input_schema", "type", "object", "properties", "output", schema, "required",
                     "output", "additionalProperties", false);
}

const char *structured_instruction(void) {
    return "This turn must end with a structured answer: call " OUTFORMAT_FINALIZER
           " exactly once, with no other tool in the same step, passing {\"output\": <value>}"
           " that matches its schema; then end your turn without further tool calls.";
}

bool structured_native(const json_t *model, const json_t *dynamic_tools) {
    return json_is_true(json_object_get(model, "native_structured_output")) &&
           json_array_size(dynamic_tools) == 0;
}

const char *structured_native_instruction(void) {
    return "This turn must end with a structured answer: reply with only a JSON value that"
           " matches the response schema, with no other text.";
}

int structured_check_text(const outformat_t *fmt, const json_t *content, const char *finish,
                          json_t **value, char *reason, size_t size) {
    *value = NULL;
    if (!structured_eligible(finish)) {
        snprintf(reason, size, "the reply was cut short, refused or filtered (finish %s)", finish);
        return -1;
    }
    size_t len = 0;
    size_t i;
    json_t *p;
    json_array_foreach(content, i, p) {
        if (!strcmp(s_str(p, "type"), "text")) {
            len += strlen(s_str(p, "text"));
        }
    }
    char *text = mem_alloc(len + 1);
    size_t n = 0;
    json_array_foreach(content, i, p) {
        if (!strcmp(s_str(p, "type"), "text")) {
            const char *t = s_str(p, "text");
            size_t k = strlen(t);
            memcpy(text + n, t, k);
            n += k;
        }
    }
    text[n] = '\0';
    jsontape_t *doc = jsontape_new(); /* what the validator reads, parsed once */
    jsonstrict_error_t e;
    int rc = jsonstrict_parse_tape(text, n, NULL, doc, &e);
    free(text);
    jsonschema_report_t rep;
    if (rc != 0) {
        snprintf(reason, size, "the reply is not one strict JSON value: %s at \"%s\": %s",
                 jsonstrict_code_name(e.code), e.path, e.message);
    } else if (jsonschema_validate_tape(fmt->compiled, doc, 0, JSONSCHEMA_ALL_ERRORS, &rep) !=
               JSONSCHEMA_VALID) {
        s_issues(&rep, reason, size);
        rc = -1;
    } else {
        *value = jsontape_to_json(doc, 0);
    }
    jsontape_destroy(&doc);
    return rc;
}

bool structured_eligible(const char *finish) {
    return !finish || !finish[0] || !strcmp(finish, "stop") || !strcmp(finish, "tool_calls");
}

const char *structured_classify(const json_t *content, const char *finish, bool have_candidate,
                                int *finalizers) {
    int fin = 0;
    int other = 0;
    size_t i;
    json_t *p;
    json_array_foreach(content, i, p) {
        if (strcmp(s_str(p, "type"), "tool-call") != 0 ||
            json_is_true(json_object_get(p, "provider_executed"))) {
            continue;
        }
        if (!strcmp(s_str(p, "tool_name"), OUTFORMAT_FINALIZER)) {
            fin++;
        } else {
            other++;
        }
    }
    *finalizers = fin;
    if (fin == 0 && other == 0) {
        bool refused = finish && (!strcmp(finish, "refusal") || !strcmp(finish, "content_filter"));
        return have_candidate || refused ? NULL : "text_only";
    }
    if (fin == 0) {
        return NULL;
    }
    if (fin > 1 || other > 0) {
        return "invalid_batch";
    }
    return structured_eligible(finish) ? NULL : "ineligible";
}

static void s_issues(const jsonschema_report_t *rep, char *reason, size_t size) {
    size_t n = snprintf(reason, size, "output does not match the schema:");
    for (size_t i = 0; i < rep->count && i < STRUCTURED_ISSUES_MAX && n < size; i++) {
        const jsonschema_issue_t *it = &rep->items[i];
        n += snprintf(reason + n, size - n, "%s at \"%s\": %s", i ? ";" : "", it->instance_path,
                      it->message);
    }
}

int structured_check(const outformat_t *fmt, const json_t *args, json_t **value, char *reason,
                     size_t size) {
    *value = NULL;
    if (!json_is_object(args) || json_object_size(args) != 1 || !json_object_get(args, "output")) {
        snprintf(reason, size, "arguments must be exactly {\"output\": <value>}");
        return -1;
    }
    const json_t *v = json_object_get(args, "output");
    jsonschema_report_t rep;
    if (jsonschema_validate(fmt->compiled, v, JSONSCHEMA_ALL_ERRORS, &rep) != JSONSCHEMA_VALID) {
        s_issues(&rep, reason, size);
        return -1;
    }
    *value = jsonnumber_deep_copy(v);
    return 0;
}

structured_decision_t structured_decide(const structured_state_t *st, bool finishing,
                                        long long steps_max) {
    if (st->candidate == NULL && st->rejections >= STRUCTURED_REJECTIONS_MAX) {
        return STRUCTURED_EXHAUSTED;
    }
    if (!finishing) {
        return STRUCTURED_CONTINUE;
    }
    if (st->candidate) {
        return STRUCTURED_SUCCEED;
    }
    if (!strcmp(st->last_finish, "refusal") || !strcmp(st->last_finish, "content_filter")) {
        return STRUCTURED_NOT_PRODUCED;
    }
    if (steps_max > 0 && st->steps >= steps_max) {
        return STRUCTURED_NOT_PRODUCED;
    }
    if (!strcmp(st->last_reject, "text_only") || !strcmp(st->last_reject, "invalid_output")) {
        return STRUCTURED_FEEDBACK;
    }
    return STRUCTURED_NOT_PRODUCED;
}

int structured_turn_open(structured_turn_t *t, const char *request_id, const char *format_text,
                         const json_t *evidence, const json_t *dynamic_tools, char *why,
                         size_t size) {
    memset(t, 0, sizeof *t);
    t->request_id = request_id;
    structured_derive(request_id, evidence, &t->st);
    json_t *v = NULL;
    jsonstrict_error_t je;
    const char *text = format_text ? format_text : "null";
    /* Stored text: it passed the schema caps on the way in; read as stored (the number policy,
     * jsonstrict.h), so a format written before the policy still opens. */
    if (jsonstrict_parse(text, strlen(text), &jsonstrict_limits_stored, &v, &je) != 0) {
        snprintf(why, size, "stored response_format refused: %s", je.message);
        return -1;
    }
    outformat_error_t oe;
    int rc = outformat_parse(v, "response_format", &t->fmt, &oe);
    json_decref(v);
    if (rc != 0 || !t->fmt->structured) {
        snprintf(why, size, "stored response_format invalid at %s: %s", rc ? oe.field : "type",
                 rc ? oe.message : "not json_schema");
        return -1;
    }
    if (t->st.malformed) {
        snprintf(why, size, "structured-output metadata of the request is malformed");
        return -1;
    }
    size_t i;
    json_t *d;
    json_array_foreach(dynamic_tools, i, d) {
        if (!strcmp(s_str(d, "name"), OUTFORMAT_FINALIZER)) {
            snprintf(why, size, "a dynamic tool takes the finalizer's name");
            return -1;
        }
    }
    return 0;
}

void structured_turn_close(structured_turn_t *t) {
    outformat_destroy(&t->fmt);
    structured_state_clear(&t->st);
}

char *structured_candidate_text(const structured_turn_t *t) {
    char *text = jsonout_dumps(t->st.candidate);
    jsontape_t *doc = jsontape_new();
    bool ok = jsonstrict_parse_tape(text, strlen(text), NULL, doc, NULL) == 0 &&
              jsonschema_validate_tape(t->fmt->compiled, doc, 0, JSONSCHEMA_FAIL_FAST, NULL) ==
                  JSONSCHEMA_VALID;
    jsontape_destroy(&doc);
    if (!ok) {
        free(text);
        return NULL;
    }
    return text;
}

const char *structured_decision_name(structured_decision_t d) {
    switch (d) {
        case STRUCTURED_CONTINUE:
            return "continue";
        case STRUCTURED_SUCCEED:
            return "succeed";
        case STRUCTURED_EXHAUSTED:
            return "validation_exhausted";
        case STRUCTURED_NOT_PRODUCED:
            return "not_produced";
        case STRUCTURED_FEEDBACK:
            return "feedback";
    }
    return "?";
}
