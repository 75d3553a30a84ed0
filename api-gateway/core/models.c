/* models: config file to model_configs; see models.h. */
#include "models.h"
#include "chatfile.h"
#include "config.h"
#include "db.h"
#include "effort.h"
#include "header.h"
#include "id.h"
#include "jsonstrict.h"
#include "jsonout.h"
#include "log.h"
#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MODELS_FILE_MAX_BYTES (256 * 1024)
#define S_ENV_NAME_MAX_BYTES  128 /* the longest api_key_env accepted */

static const char *const s_builtin =
    "{\"models\":[{\"name\":\"sim\",\"provider\":\"sim\",\"model\":\"sim\",\"default\":true,"
    "\"context_limit\":128000,\"native_structured_output\":false}]}";

static char *s_read(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        return NULL;
    }
    char *buf = mem_alloc(MODELS_FILE_MAX_BYTES + 1);
    *len = fread(buf, 1, MODELS_FILE_MAX_BYTES + 1, f);
    fclose(f);
    return buf;
}

static int s_bad(const char *path, size_t i, const char *field, const char *why) {
    fprintf(stderr, "config: %s: models[%zu].%s %s\n", path, i, field, why);
    return -1;
}

/* prices: {"input", "output", "cache_read"?, "cache_write"?}, USD per million tokens. */
static int s_check_prices(const char *path, size_t i, const json_t *prices) {
    static const char *const keys[] = {"input", "output", "cache_read", "cache_write", NULL};
    if (!prices) {
        return 0;
    }
    if (!json_is_object(prices)) {
        return s_bad(path, i, "prices", "must be an object of USD per million tokens");
    }
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)prices, key, v) {
        bool known = false;
        for (int k = 0; keys[k] && !known; k++) {
            known = !strcmp(keys[k], key);
        }
        char field[64];
        snprintf(field, sizeof field, "prices.%.40s", key);
        if (!known) {
            return s_bad(path, i, field, "is not a known field");
        }
        if (!json_is_number(v) || json_number_value(v) < 0) {
            return s_bad(path, i, field, "must be a number >= 0 (USD per million tokens)");
        }
    }
    if (!json_object_get(prices, "input") || !json_object_get(prices, "output")) {
        return s_bad(path, i, "prices", "must have both input and output");
    }
    return 0;
}

/* base_url goes into every request line the worker sends to the provider: http(s) only,
 * and no control character (one would let the file's author write headers of their own). */
static int s_check_base_url(const char *path, size_t i, const json_t *v) {
    if (!v || json_is_null(v)) {
        return 0;
    }
    const char *url = json_string_value(v);
    if (!url) {
        return s_bad(path, i, "base_url", "must be a string");
    }
    if (!header_text_ok(url)) {
        return s_bad(path, i, "base_url", "must not hold control characters");
    }
    if ((strncasecmp(url, "http://", 7) || !url[7]) &&
        (strncasecmp(url, "https://", 8) || !url[8])) {
        return s_bad(path, i, "base_url", "must be an http:// or https:// URL");
    }
    return 0;
}

/* api_key_env names the worker's environment variable holding the key: a portable name
 * ([A-Za-z_][A-Za-z0-9_]*), so that it can only ever name a variable. */
static int s_check_key_env(const char *path, size_t i, const json_t *v) {
    if (!v || json_is_null(v)) {
        return 0;
    }
    const char *name = json_string_value(v);
    bool ok = config_env_name_ok(name) && strlen(name) <= S_ENV_NAME_MAX_BYTES;
    if (!ok) {
        return s_bad(path, i, "api_key_env",
                     "must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*, at most 128 "
                     "bytes)");
    }
    return 0;
}

/* media_types: the file types the model takes as file parts, each a stored type that is not
 * text (text files reach every model as text). */
static int s_check_media_types(const char *path, size_t i, const json_t *types) {
    if (!types) {
        return 0;
    }
    if (!json_is_array(types)) {
        return s_bad(path, i, "media_types", "must be an array of media types");
    }
    size_t k;
    json_t *t;
    json_array_foreach(types, k, t) {
        const char *v = json_string_value(t);
        if (!v || !chatfile_media_known(v) || chatfile_media_text(v)) {
            char field[48];
            snprintf(field, sizeof field, "media_types[%zu]", k);
            return s_bad(path, i, field,
                         "must be one of application/pdf, image/gif, image/jpeg, image/png, "
                         "image/webp");
        }
    }
    return 0;
}

/* The media types a model takes: its config's, else its provider's (ARCHITECTURE.md §3,
 * "Files"). A new reference. */
static json_t *s_media_types(const json_t *m) {
    json_t *given = json_object_get(m, "media_types");
    if (given) {
        return json_incref(given);
    }
    const char *prov = json_string_value(json_object_get(m, "provider"));
    if (prov && !strcmp(prov, "ollama")) {
        return json_pack("[s, s]", "image/png", "image/jpeg");
    }
    return json_pack("[s, s, s, s, s]", "image/png", "image/jpeg", "image/gif", "image/webp",
                     "application/pdf");
}

/* options: {"reasoning_effort": {"default", "max"}} (chatd-architecture.md, "Reasoning
 * effort"): both names on the effort scale (effort.h), default no higher than max. The worker
 * sends the chat's effort clamped to max, else default; a config without it sends none. */
static int s_check_options(const char *path, size_t i, const json_t *options) {
    if (!options) {
        return 0;
    }
    const char *key;
    json_t *v;
    if (!json_is_object(options)) {
        return s_bad(path, i, "options", "must be an object");
    }
    json_object_foreach((json_t *)options, key, v) {
        if (strcmp(key, "reasoning_effort") != 0) {
            char field[64];
            snprintf(field, sizeof field, "options.%.40s", key);
            return s_bad(path, i, field, "is not a known field");
        }
    }
    const json_t *re = json_object_get(options, "reasoning_effort");
    if (!re) {
        return 0;
    }
    if (!json_is_object(re)) {
        return s_bad(path, i, "options.reasoning_effort", "must be an object {default, max}");
    }
    json_object_foreach((json_t *)re, key, v) {
        if (strcmp(key, "default") != 0 && strcmp(key, "max") != 0) {
            char field[80];
            snprintf(field, sizeof field, "options.reasoning_effort.%.40s", key);
            return s_bad(path, i, field, "is not a known field");
        }
    }
    int d = effort_rank(json_string_value(json_object_get(re, "default")));
    int m = effort_rank(json_string_value(json_object_get(re, "max")));
    if (!d || !m) {
        return s_bad(path, i,
                     !d ? "options.reasoning_effort.default" : "options.reasoning_effort.max",
                     "must be one of " EFFORT_NAMES_TEXT);
    }
    if (d > m) {
        return s_bad(path, i, "options.reasoning_effort.default",
                     "must not be above max (none < minimal < low < medium < high < xhigh < max)");
    }
    return 0;
}

static int s_check(const char *path, size_t i, json_t *m) {
    static const char *const fields[] = {"name",
                                         "provider",
                                         "model",
                                         "base_url",
                                         "api_key_env",
                                         "default",
                                         "context_limit",
                                         "native_structured_output",
                                         "compression_threshold",
                                         "prices",
                                         "media_types",
                                         "options",
                                         NULL};
    const char *key;
    json_t *v;
    json_object_foreach(m, key, v) {
        bool known = false;
        for (int k = 0; fields[k] && !known; k++) {
            known = !strcmp(fields[k], key);
        }
        if (!known) {
            return s_bad(path, i, key, "is not a known field");
        }
    }
    const char *prov = json_string_value(json_object_get(m, "provider"));
    if (!json_is_string(json_object_get(m, "name")) ||
        !json_string_length(json_object_get(m, "name"))) {
        return s_bad(path, i, "name", "must be a non-empty string");
    }
    if (!prov || (strcmp(prov, "sim") && strcmp(prov, "openai") && strcmp(prov, "anthropic") &&
                  strcmp(prov, "ollama"))) {
        return s_bad(path, i, "provider", "must be sim, openai, anthropic or ollama");
    }
    if (!json_is_string(json_object_get(m, "model"))) {
        return s_bad(path, i, "model", "must be a string");
    }
    if (s_check_base_url(path, i, json_object_get(m, "base_url")) != 0 ||
        s_check_key_env(path, i, json_object_get(m, "api_key_env")) != 0) {
        return -1;
    }
    const json_t *cl = json_object_get(m, "context_limit");
    if (cl && !(json_is_integer(cl) && json_integer_value(cl) > 0)) {
        return s_bad(path, i, "context_limit", "must be a positive integer (tokens)");
    }
    const json_t *ct = json_object_get(m, "compression_threshold");
    if (ct &&
        !(json_is_integer(ct) && json_integer_value(ct) >= 0 && json_integer_value(ct) <= 100)) {
        return s_bad(path, i, "compression_threshold", "must be an integer from 0 to 100");
    }
    return s_check_prices(path, i, json_object_get(m, "prices")) ||
           s_check_media_types(path, i, json_object_get(m, "media_types")) ||
           s_check_options(path, i, json_object_get(m, "options"));
}

int models_sync(PGconn *conn, const char *path) {
    size_t len = strlen(s_builtin);
    char *text = path ? s_read(path, &len) : mem_strdup(s_builtin);
    const char *where = path ? path : "(built-in)";
    if (!text) {
        fprintf(stderr, "config: cannot read %s\n", path);
        return -1;
    }
    json_t *root = NULL;
    jsonstrict_error_t e;
    jsonstrict_limits_t lim = jsonstrict_limits_default;
    lim.max_bytes = MODELS_FILE_MAX_BYTES;
    int rc = jsonstrict_parse(text, len, &lim, &root, &e);
    free(text);
    if (rc != 0) {
        fprintf(stderr, "config: %s: %s at byte %zu (%s)\n", where, e.message, e.offset,
                e.path[0] ? e.path : "/");
        return -1;
    }
    json_t *models = json_object_get(root, "models");
    if (!json_is_array(models) || json_array_size(models) == 0) {
        fprintf(stderr, "config: %s: models must be a non-empty array\n", where);
        json_decref(root);
        return -1;
    }
    size_t i;
    json_t *m;
    size_t dflt = 0;
    int ndefault = 0;
    json_array_foreach(models, i, m) {
        if (!json_is_object(m) || s_check(where, i, m) != 0) {
            json_decref(root);
            return -1;
        }
        if (json_is_true(json_object_get(m, "default")) && ndefault++ == 0) {
            dflt = i;
        }
    }
    if (ndefault > 1) {
        fprintf(stderr, "config: %s: more than one model has \"default\": true\n", where);
        json_decref(root);
        return -1;
    }
    char err[256];
    rc = db_exec(conn, err, sizeof err, "BEGIN", 0, NULL) == DB_OK &&
                 db_exec(conn, err, sizeof err, "UPDATE model_configs SET is_default = false", 0,
                         NULL) == DB_OK
             ? 0
             : -1;
    json_array_foreach(models, i, m) {
        if (rc != 0) {
            break;
        }
        char id[ID_UUID_LEN + 1];
        ASSERT(id_uuid_new(id) == 0);
        char limit_buf[DB_PARAM_INT64_LEN];
        json_t *cl = json_object_get(m, "context_limit");
        const char *limit =
            json_is_integer(cl) ? db_param_int64(limit_buf, json_integer_value(cl)) : NULL;
        json_t *pj = json_object_get(m, "prices");
        char *prices = pj ? jsonout_dumps(pj) : NULL;
        json_t *mt = s_media_types(m);
        char *media = jsonout_dumps(mt);
        json_decref(mt);
        json_t *oj = json_object_get(m, "options");
        char *options = oj ? jsonout_dumps(oj) : NULL;
        char threshold[8] = "";
        json_t *ct = json_object_get(m, "compression_threshold");
        if (json_is_integer(ct)) {
            snprintf(threshold, sizeof threshold, "%d", (int)json_integer_value(ct));
        }
        const char *p[] = {id,
                           json_string_value(json_object_get(m, "name")),
                           json_string_value(json_object_get(m, "provider")),
                           json_string_value(json_object_get(m, "model")),
                           json_string_value(json_object_get(m, "base_url")),
                           json_string_value(json_object_get(m, "api_key_env")),
                           i == dflt ? "t" : "f",
                           limit,
                           json_is_true(json_object_get(m, "native_structured_output")) ? "t" : "f",
                           threshold[0] ? threshold : NULL,
                           prices,
                           media,
                           options};
        rc = db_exec(conn, err, sizeof err,
                     "INSERT INTO model_configs (id, name, provider, model, base_url, api_key_env,"
                     " is_default, context_limit, native_structured_output, compression_threshold,"
                     " prices, media_types, options) VALUES ($1, $2, $3, $4, $5, $6, $7::boolean,"
                     " $8::bigint, $9::boolean, $10::int, $11::jsonb,"
                     " ARRAY(SELECT jsonb_array_elements_text($12::jsonb)), $13::jsonb)"
                     " ON CONFLICT (name) DO"
                     " UPDATE SET provider = EXCLUDED.provider, model = EXCLUDED.model,"
                     " base_url = EXCLUDED.base_url, api_key_env = EXCLUDED.api_key_env,"
                     " is_default = EXCLUDED.is_default, context_limit = EXCLUDED.context_limit,"
                     " native_structured_output = EXCLUDED.native_structured_output,"
                     " compression_threshold = EXCLUDED.compression_threshold,"
                     " prices = EXCLUDED.prices, media_types = EXCLUDED.media_types,"
                     " options = EXCLUDED.options, updated_at = now()",
                     13, p) == DB_OK
                 ? 0
                 : -1;
        if (rc == 0) {
            log_info("model_config", "name=%s provider=%s model=%s default=%d", p[1], p[2], p[3],
                     i == dflt);
        }
        free(prices);
        free(media);
        free(options);
    }
    if (rc == 0 && db_exec(conn, err, sizeof err, "COMMIT", 0, NULL) != DB_OK) {
        rc = -1;
    }
    if (rc != 0) {
        PQclear(PQexec(conn, "ROLLBACK"));
        fprintf(stderr, "config: storing model configs failed: %s\n", err);
    }
    json_decref(root);
    return rc;
}

json_t *models_mcp_servers(const char *path) {
    json_t *names = json_object();
    size_t len = 0;
    char *text = path ? s_read(path, &len) : NULL;
    json_t *root = NULL;
    if (path && (!text || jsonstrict_parse(text, len, NULL, &root, NULL) != 0)) {
        free(text);
        json_decref(names);
        return NULL;
    }
    free(text);
    const char *name;
    json_t *v;
    json_object_foreach(json_object_get(root, "mcp_servers"), name, v) {
        json_object_set_new(names, name, json_true());
    }
    json_decref(root);
    return names;
}
