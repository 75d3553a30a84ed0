/* outformat: response_format parsing and schema compilation; see outformat.h. */
#include "outformat.h"
#include "jsonnumber.h"
#include "jsonout.h"
#include "jsonstrict.h"
#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int s_fail(outformat_error_t *err, const char *prefix, const char *field,
                  const char *message) {
    snprintf(err->field, sizeof err->field, "%.160s%s%.300s", prefix, field[0] ? "." : "", field);
    snprintf(err->message, sizeof err->message, "%s", message);
    return -1;
}

/* The first member of obj not in allowed, or NULL. */
static const char *s_unknown(const json_t *obj, const char *const *allowed) {
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        bool ok = false;
        for (int i = 0; allowed[i] && !ok; i++) {
            ok = !strcmp(key, allowed[i]);
        }
        if (!ok) {
            return key;
        }
    }
    return NULL;
}

static bool s_name_ok(const char *name) {
    size_t n = strlen(name);
    if (n < 1 || n > OUTFORMAT_NAME_MAX) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-')) {
            return false;
        }
    }
    return true;
}

static int s_json_schema(const json_t *js, const char *prefix, outformat_t *f,
                         outformat_error_t *err) {
    static const char *const fields[] = {"name", "description", "schema", NULL};
    char p[160];
    snprintf(p, sizeof p, "%.140s.json_schema", prefix);
    if (!json_is_object(js)) {
        return s_fail(err, p, "", "must be an object with name and schema");
    }
    const char *unknown = s_unknown(js, fields);
    if (unknown) {
        return s_fail(err, p, unknown, "unknown field");
    }
    const char *name = json_string_value(json_object_get(js, "name"));
    if (!name || !s_name_ok(name)) {
        return s_fail(err, p, "name", "must match ^[A-Za-z0-9_-]{1,64}$");
    }
    snprintf(f->name, sizeof f->name, "%s", name);
    json_t *d = json_object_get(js, "description");
    if (d && (!json_is_string(d) || json_string_length(d) > OUTFORMAT_DESCRIPTION_MAX)) {
        return s_fail(err, p, "description", "must be a string of at most 1024 bytes");
    }
    f->description = d ? mem_strdup(json_string_value(d)) : NULL;
    json_t *schema = json_object_get(js, "schema");
    if (!json_is_object(schema)) {
        return s_fail(err, p, "schema", schema ? "must be a JSON Schema object" : "is required");
    }
    char *text = jsonout_dumps(schema);
    size_t bytes = strlen(text);
    free(text);
    if (bytes > JSONSTRICT_SCHEMA_MAX_BYTES) {
        char m[96];
        snprintf(m, sizeof m, "is %zu bytes; at most %d are accepted", bytes,
                 JSONSTRICT_SCHEMA_MAX_BYTES);
        return s_fail(err, p, "schema", m);
    }
    jsonschema_error_t je;
    if (jsonschema_compile(schema, &f->compiled, &je) != 0) {
        char sp[JSONSCHEMA_PATH_MAX + 8];
        /* The schema path is a JSON pointer: "/properties/a/type" -> "schema.properties..." */
        snprintf(sp, sizeof sp, "schema%s", je.schema_path);
        for (char *c = sp + 6; *c; c++) {
            if (*c == '/') {
                *c = '.';
            }
        }
        return s_fail(err, p, sp, je.message);
    }
    f->schema = jsonnumber_deep_copy(schema); /* numbers keep their literals */
    f->structured = true;
    return 0;
}

int outformat_parse(const json_t *v, const char *prefix, outformat_t **out,
                    outformat_error_t *err) {
    *out = NULL;
    if (!json_is_object(v) || json_object_size(v) == 0) {
        return s_fail(err, prefix, "", "must be {\"type\":\"text\"} or a json_schema format");
    }
    const char *type = json_string_value(json_object_get(v, "type"));
    if (!type || (strcmp(type, "text") && strcmp(type, "json_schema"))) {
        return s_fail(err, prefix, "type", "must be \"text\" or \"json_schema\"");
    }
    bool text = !strcmp(type, "text");
    static const char *const text_fields[] = {"type", NULL};
    static const char *const schema_fields[] = {"type", "json_schema", NULL};
    const char *unknown = s_unknown(v, text ? text_fields : schema_fields);
    if (unknown) {
        return s_fail(err, prefix, unknown, "unknown field");
    }
    outformat_t *f = mem_calloc(1, sizeof *f);
    if (!text && s_json_schema(json_object_get(v, "json_schema"), prefix, f, err) != 0) {
        outformat_destroy(&f);
        return -1;
    }
    *out = f;
    return 0;
}

void outformat_destroy(outformat_t **self_p) {
    outformat_t *self = *self_p;
    if (!self) {
        return;
    }
    free(self->description);
    json_decref(self->schema);
    jsonschema_destroy(&self->compiled);
    free(self);
    *self_p = NULL;
}

char *outformat_json(const outformat_t *self) {
    if (!self->structured) {
        return NULL;
    }
    json_t *js = json_pack("{s:s,s:O}", "name", self->name, "schema", self->schema);
    if (self->description) {
        json_object_set_new(js, "description", json_string(self->description));
    }
    json_t *v = json_pack("{s:s,s:o}", "type", "json_schema", "json_schema", js);
    char *text = jsonout_dumps(v);
    json_decref(v);
    return text;
}
