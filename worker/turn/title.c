/* title: see title.h. */
#include "title.h"
#include "chatstate.h"
#include "mem.h"
#include "structured.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_INSTRUCTION                                                                              \
    "Write a short title, at most eight words, for a conversation that starts with the user's "    \
    "message below. Answer with a JSON object {\"title\": \"...\"} and nothing else."

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

static const char *s_str(const json_t *obj, const char *key) {
    const char *v = json_string_value(json_object_get(obj, key));
    return v ? v : "";
}

json_t *title_prompt(const json_t *messages) {
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        if (strcmp(s_str(m, "role"), "user") || json_is_true(json_object_get(m, "model_only")) ||
            json_is_true(json_object_get(m, "control"))) {
            continue;
        }
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
        json_t *prompt = text[0]
                             ? json_pack("[{s:s, s:[{s:s, s:s}]}, {s:s, s:[{s:s, s:s}]}]", "role",
                                         "system", "content", "type", "text", "text", S_INSTRUCTION,
                                         "role", "user", "content", "type", "text", "text", text)
                             : NULL;
        free(text);
        return prompt;
    }
    return NULL;
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
