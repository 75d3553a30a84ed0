/* simagents: see simagents.h. The script's state is never kept: it is read back from the tool
 * results in the history at every step, as a real model would read them. */
#include "simagents.h"
#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPAWN_TOOL "spawn_agent"
#define WAIT_TOOL  "wait_agent"

/* The tool each verb calls (NULL for none). */
static const char *const s_verb_tool[] = {
    [SIMAGENTS_VERB_NONE] = NULL,
    [SIMAGENTS_VERB_MESSAGE] = "message_agent",
    [SIMAGENTS_VERB_INTERRUPT] = "interrupt_agent",
    [SIMAGENTS_VERB_LIST] = "list_agents",
    [SIMAGENTS_VERB_MODELS] = "list_subagent_models",
};

static const char *const s_verb_word[] = {
    [SIMAGENTS_VERB_NONE] = "",
    [SIMAGENTS_VERB_MESSAGE] = "message",
    [SIMAGENTS_VERB_INTERRUPT] = "interrupt",
    [SIMAGENTS_VERB_LIST] = "list",
    [SIMAGENTS_VERB_MODELS] = "models",
};

#define VERB_COUNT (sizeof s_verb_word / sizeof s_verb_word[0])

static const char *s_str(const json_t *obj, const char *key) {
    const char *v = json_string_value(json_object_get(obj, key));
    return v ? v : "";
}

simagents_verb_t simagents_verb(const char *word) {
    for (size_t v = 1; v < VERB_COUNT; v++) {
        if (!strcmp(word, s_verb_word[v])) {
            return (simagents_verb_t)v;
        }
    }
    return SIMAGENTS_VERB_NONE;
}

/* Whether name is one of the six subagent tools. */
static bool s_is_agent_tool(const char *name) {
    if (!strcmp(name, SPAWN_TOOL) || !strcmp(name, WAIT_TOOL)) {
        return true;
    }
    for (size_t v = 1; v < VERB_COUNT; v++) {
        if (!strcmp(name, s_verb_tool[v])) {
            return true;
        }
    }
    return false;
}

/* Reads the turn so far: into names, {NAME: true} for each tool with a result; into spawned,
 * {"k": K, "agent_id": ID} for each successful spawn, in call order, K being the call's 1-based
 * place among the spawn calls of its message (the "task K of N" it was given). Results are
 * matched to calls by tool_call_id, so the order the results were written in does not matter. */
static void s_scan(const json_t *msgs, size_t from, json_t *names, json_t *spawned) {
    json_t *results = json_object(); /* tool_call_id -> its tool-result part */
    size_t n = json_array_size(msgs);
    for (size_t i = from; i < n; i++) {
        size_t k;
        json_t *p;
        json_array_foreach(json_object_get(json_array_get(msgs, i), "content"), k, p) {
            if (!strcmp(s_str(p, "type"), "tool-result") && s_str(p, "tool_name")[0]) {
                json_object_set_new(names, s_str(p, "tool_name"), json_true());
                if (s_str(p, "tool_call_id")[0]) {
                    json_object_set(results, s_str(p, "tool_call_id"), p);
                }
            }
        }
    }
    for (size_t i = from; i < n; i++) {
        const json_t *m = json_array_get(msgs, i);
        if (strcmp(s_str(m, "role"), "assistant")) {
            continue;
        }
        int place = 0;
        size_t k;
        json_t *p;
        json_array_foreach(json_object_get(m, "content"), k, p) {
            bool call = !strcmp(s_str(p, "type"), "tool-call");
            if (!call || strcmp(s_str(p, "tool_name"), SPAWN_TOOL)) {
                continue;
            }
            place++;
            const json_t *r = json_object_get(results, s_str(p, "tool_call_id"));
            const char *id = s_str(json_object_get(r, "result"), "agent_id");
            if (r && id[0] && !json_is_true(json_object_get(r, "is_error"))) {
                json_array_append_new(spawned, json_pack("{s:i, s:s}", "k", place, "agent_id", id));
            }
        }
    }
    json_decref(results);
}

/* Appends {"tool_name": name, "args": args} to calls (args stolen). */
static void s_add(json_t *calls, const char *name, json_t *args) {
    /* "o" steals args. */
    json_array_append_new(calls, json_pack("{s:s, s:o}", "tool_name", name, "args", args));
}

/* The response_format of [sim:child-schema]: an object with one integer "n". */
static json_t *s_child_format(void) {
    return json_pack("{s:s, s:{s:s, s:{s:s, s:{s:{s:s}}, s:[s], s:b}}}", "type", "json_schema",
                     "json_schema", "name", "child_result", "schema", "type", "object",
                     "properties", "n", "type", "integer", "required", "n", "additionalProperties",
                     0);
}

/* Step a: N spawn calls, the K-th with the prompt "<child directives>task K of N: <clean>". */
static void s_spawn_calls(const simagents_script_t *sc, const char *clean, json_t *calls) {
    char *directives = mem_strdup("");
    for (int c = 0; c < sc->children && c < SIMAGENTS_CHILDREN_MAX; c++) {
        char *next = mem_printf("%s[sim:%s]", directives, sc->child[c]);
        free(directives);
        directives = next;
    }
    for (int k = 1; k <= sc->spawn; k++) {
        char *title = mem_printf("task %d of %d", k, sc->spawn);
        char *prompt = mem_printf("%s%s: %s", directives, title, clean);
        json_t *args = json_pack("{s:s, s:s}", "prompt", prompt, "title", title);
        if (sc->child_schema) {
            json_object_set_new(args, "response_format", s_child_format());
        }
        s_add(calls, SPAWN_TOOL, args);
        free(prompt);
        free(title);
    }
    free(directives);
}

/* Step b: the verb's calls, one per spawned child (message, interrupt) or one in all. */
static void s_verb_calls(simagents_verb_t verb, const json_t *spawned, json_t *calls) {
    if (verb == SIMAGENTS_VERB_LIST || verb == SIMAGENTS_VERB_MODELS) {
        s_add(calls, s_verb_tool[verb], json_object());
        return;
    }
    size_t i;
    json_t *s;
    json_array_foreach(spawned, i, s) {
        json_t *args = json_pack("{s:s}", "agent_id", s_str(s, "agent_id"));
        if (verb == SIMAGENTS_VERB_MESSAGE) {
            char *text = mem_printf("more about task %lld",
                                    (long long)json_integer_value(json_object_get(s, "k")));
            json_object_set_new(args, "message", json_string(text));
            free(text);
        }
        s_add(calls, s_verb_tool[verb], args);
    }
}

/* Step c: one wait for the spawned children (or, with wait-all, for every child: {}). Nothing
 * when no spawn succeeded and the wait would name no child. */
static void s_wait_call(const simagents_script_t *sc, const json_t *spawned, json_t *calls) {
    if (sc->wait_all) {
        s_add(calls, WAIT_TOOL, json_object());
        return;
    }
    if (json_array_size(spawned) == 0) {
        return;
    }
    json_t *ids = json_array();
    size_t i;
    json_t *s;
    json_array_foreach(spawned, i, s) {
        json_array_append_new(ids, json_string(s_str(s, "agent_id")));
    }
    /* "o" steals ids. */
    s_add(calls, WAIT_TOOL, json_pack("{s:o}", "agent_ids", ids));
}

json_t *simagents_calls(const simagents_script_t *sc, const json_t *msgs, size_t from,
                        const char *clean) {
    if (sc->spawn < 1) {
        return NULL;
    }
    json_t *names = json_object();
    json_t *spawned = json_array();
    s_scan(msgs, from, names, spawned);
    json_t *calls = json_array();
    if (!json_object_get(names, SPAWN_TOOL)) {
        s_spawn_calls(sc, clean ? clean : "", calls);
    } else if (sc->verb != SIMAGENTS_VERB_NONE && (size_t)sc->verb < VERB_COUNT &&
               !json_object_get(names, s_verb_tool[sc->verb])) {
        s_verb_calls(sc->verb, spawned, calls);
    }
    /* A verb with no child to address falls through to the wait, as if it had been done. */
    if (json_array_size(calls) == 0 && !sc->nowait && !json_object_get(names, WAIT_TOOL)) {
        s_wait_call(sc, spawned, calls);
    }
    json_decref(names);
    json_decref(spawned);
    if (json_array_size(calls) == 0) {
        json_decref(calls);
        return NULL;
    }
    return calls;
}

int simagents_steps(const json_t *msgs, size_t from) {
    int steps = 0;
    for (size_t i = from; i < json_array_size(msgs); i++) {
        const json_t *m = json_array_get(msgs, i);
        if (strcmp(s_str(m, "role"), "assistant")) {
            continue;
        }
        size_t k;
        json_t *p;
        json_array_foreach(json_object_get(m, "content"), k, p) {
            if (!strcmp(s_str(p, "type"), "tool-call") && s_is_agent_tool(s_str(p, "tool_name"))) {
                steps++;
                break;
            }
        }
    }
    return steps;
}
