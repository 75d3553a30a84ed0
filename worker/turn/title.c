/* title: see title.h. */
#include "title.h"
#include "chatstate.h"
#include "mem.h"
#include "structured.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_INSTRUCTION                                                                              \
    "Write a short title, at most eight words, for a conversation that starts with the user's "    \
    "message below. Answer with a JSON object {\"title\": \"...\"} and nothing else."

#define S_REGEN_INSTRUCTION                                                                        \
    "Write a short title, at most eight words, for the conversation whose user messages follow, "  \
    "oldest first; what the user asks most recently matters most. Answer with a JSON object "      \
    "{\"title\": \"...\"} and nothing else."

outformat_t *title_format_new(void) {
    json_t *rf =
        json_pack("{s:s, s:{s:s, s:{s:s, s:[s], s:b, s:{s:{s:s, s:i, s:i}}}}}", "type",
                  "json_schema", "json_schema", "name", TITLE_SCHEMA_NAME, "schema", "type",
                  "object", "required", "title", "additionalProperties", 0, "properties", "title",
                  "type", "string", "minLength", 1, "maxLength", CS_TITLE_MAX_BYTES);
    outformat_t *fmt = NULL;
    outformat_error_t err;
    ASSERT(outformat_parse(rf, "title", &fmt, &err) == 0 && fmt);
    json_decref(rf);
    return fmt;
}

static pthread_once_t s_format_once = PTHREAD_ONCE_INIT;
static outformat_t *s_format;

static void s_format_make(void) {
    s_format = title_format_new();
}

const outformat_t *title_format(void) {
    pthread_once(&s_format_once, s_format_make);
    return s_format;
}

static const char *s_str(const json_t *obj, const char *key) {
    const char *v = json_string_value(json_object_get(obj, key));
    return v ? v : "";
}

/* Whether m is a real user message: the user's own, not model-only, not control. */
static bool s_real_user(const json_t *m) {
    return !strcmp(s_str(m, "role"), "user") && !json_is_true(json_object_get(m, "model_only")) &&
           !json_is_true(json_object_get(m, "control"));
}

/* The text parts of m joined by newlines (caller frees; "" when it has none). */
static char *s_text(const json_t *m) {
    char *text = mem_strdup("");
    size_t k;
    json_t *p;
    json_array_foreach(json_object_get(m, "content"), k, p) {
        if (!strcmp(s_str(p, "type"), "text")) {
            char *next = mem_printf("%s%s%s", text, text[0] ? "\n" : "", s_str(p, "text"));
            free(text);
            text = next;
        }
    }
    return text;
}

static json_t *s_message(const char *role, const char *text) {
    return json_pack("{s:s, s:[{s:s, s:s}]}", "role", role, "content", "type", "text", "text",
                     text);
}

json_t *title_prompt(const json_t *messages) {
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        if (!s_real_user(m)) {
            continue;
        }
        char *text = s_text(m);
        json_t *prompt = text[0] ? json_pack("[o, o]", s_message("system", S_INSTRUCTION),
                                             s_message("user", text))
                                 : NULL;
        free(text);
        return prompt;
    }
    return NULL;
}

json_t *title_regen_prompt(const json_t *messages) {
    json_t *prompt = json_pack("[o]", s_message("system", S_REGEN_INSTRUCTION));
    size_t total = 0;
    for (size_t i = json_array_size(messages); i-- > 0 && total < TITLE_REGEN_MESSAGES;) {
        const json_t *m = json_array_get(messages, i);
        char *text = s_real_user(m) ? s_text(m) : NULL;
        if (text && text[0]) {
            /* Oldest first: each goes in right after the instruction. */
            json_array_insert_new(prompt, 1, s_message("user", text));
            total++;
        }
        free(text);
    }
    if (total == 0) {
        json_decref(prompt);
        return NULL;
    }
    return prompt;
}

char *title_from_reply(const outformat_t *fmt, const json_t *content, const char *finish,
                       char *reason, size_t size) {
    json_t *value = NULL;
    if (structured_check_text(fmt, content, finish, &value, reason, size) != 0) {
        return NULL;
    }
    const char *t = json_string_value(json_object_get(value, "title"));
    size_t start = t ? strspn(t, " \t\r\n") : 0;
    size_t len = t ? strlen(t + start) : 0;
    while (len > 0 && strchr(" \t\r\n", t[start + len - 1])) {
        len--;
    }
    char *title = len > 0 ? mem_printf("%.*s", (int)len, t + start) : NULL;
    if (!title) {
        snprintf(reason, size, "the title is blank");
    }
    json_decref(value);
    return title;
}
