/* gwrequest: the gateway's request handling without a server, for tests; see gwrequest.h. */
#include "gwrequest.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "jsonstrict.h"

const gwrequest_kv_t gwrequest_bearer[] = {{"Authorization", "Bearer " GWREQUEST_TOKEN},
                                           {NULL, NULL}};

int gwrequest_auth_calls;

const char *gwrequest_lookup(void *ctx, http_kind_t kind, const char *name) {
    const gwrequest_table_t *t = ctx;
    const gwrequest_kv_t *kv = kind == HTTP_QUERY ? t->query : t->headers;
    for (; kv && kv->name; kv++) {
        if (kind == HTTP_QUERY ? !strcmp(kv->name, name) : !strcasecmp(kv->name, name)) {
            return kv->value;
        }
    }
    return NULL;
}

int gwrequest_each(void *ctx, http_kind_t kind, http_pair_fn fn, void *arg) {
    const gwrequest_table_t *t = ctx;
    const gwrequest_kv_t *kv = kind == HTTP_QUERY ? t->query : t->headers;
    for (; kv && kv->name; kv++) {
        int rc = fn(arg, kv->name, kv->value);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

int gwrequest_auth(void *app, const char *token, char user_id[ID_UUID_LEN + 1]) {
    (void)app;
    gwrequest_auth_calls++;
    if (!strcmp(token, GWREQUEST_TOKEN_DB_DOWN)) {
        return HTTP_AUTH_UNAVAILABLE;
    }
    if (strcmp(token, GWREQUEST_TOKEN) != 0) {
        return HTTP_AUTH_DENIED;
    }
    snprintf(user_id, ID_UUID_LEN + 1, "%s", GWREQUEST_USER_ID);
    return 0;
}

int gwrequest_handle(const http_router_t *router, const char *method, const char *path,
                     const gwrequest_kv_t *query, const gwrequest_kv_t *headers, const char *body,
                     bool too_large, json_t **json, http_req_t *req_out) {
    gwrequest_auth_calls = 0;
    gwrequest_table_t t = {query, headers};
    http_req_t req = {.lookup = gwrequest_lookup,
                      .each = gwrequest_each,
                      .lookup_ctx = &t,
                      .method = method,
                      .path = path,
                      .body = body ? body : "",
                      .body_len = body ? strlen(body) : 0,
                      .body_too_large = too_large};
    http_resp_t resp = {0};
    http_handle(router, &req, &resp);
    *json = NULL;
    if (resp.body) {
        jsonstrict_error_t err;
        if (jsonstrict_parse(resp.body, strlen(resp.body), NULL, json, &err) != 0) {
            fail_msg("%s %s: the body is not strict JSON (%s): %s", method, path, err.message,
                     resp.body);
        }
    }
    if (resp.raw) {
        fail_msg("%s %s: an unexpected ready response", method, path);
    }
    if (req_out) {
        *req_out = req;
    }
    free(resp.body);
    return resp.status;
}

json_t *gwrequest_body(http_resp_t *resp) {
    json_t *v = NULL;
    assert_non_null(resp->body);
    assert_int_equal(jsonstrict_parse(resp->body, strlen(resp->body), NULL, &v, NULL), 0);
    free(resp->body);
    resp->body = NULL;
    return v;
}

void gwrequest_expect_json(json_t *got, const char *want) {
    json_t *w = json_loads(want, 0, NULL);
    assert_non_null(w);
    if (!json_equal(got, w)) {
        char *g = got ? json_dumps(got, JSON_SORT_KEYS) : NULL;
        fail_msg("want %s, got %s", want, g ? g : "(no body)");
    }
    json_decref(w);
    json_decref(got);
}

void gwrequest_expect_invalid(json_t *got, const char *field, const char *detail) {
    json_t *v = json_array_get(json_object_get(got, "validations"), 0);
    char *g = json_dumps(got, JSON_SORT_KEYS);
    if (!json_is_string(json_object_get(got, "message")) ||
        strcmp(json_string_value(json_object_get(got, "message")), "Invalid request.") != 0 ||
        json_array_size(json_object_get(got, "validations")) != 1 ||
        !json_is_string(json_object_get(v, "field")) ||
        strcmp(json_string_value(json_object_get(v, "field")), field) != 0 ||
        (detail && (!json_is_string(json_object_get(v, "detail")) ||
                    strcmp(json_string_value(json_object_get(v, "detail")), detail) != 0)) ||
        !json_equal(json_object_get(v, "detail"), json_object_get(got, "detail"))) {
        fail_msg("want field %s detail %s, got %s", field, detail ? detail : "(any)",
                 g ? g : "(no body)");
    }
    free(g);
    json_decref(got);
}

void gwrequest_gateway_init(gateway_t *gw) {
    *gw = (gateway_t){0};
    gw->pool = pool_new_unverified(GWREQUEST_CONNINFO, 1);
    gw->sink = hint_sink_log;
    gw->max_queue = 10;
    gw->public_url = GWREQUEST_PUBLIC_URL;
    gw->chat_settings =
        (cs_settings_t){.lease_stale_ms = 30000, .requires_action_deadline_ms = 5 * 60 * 1000};
    gw->models = idcache_new(GATEWAY_MODEL_CACHE_MS);
}

void gwrequest_gateway_free(gateway_t *gw) {
    pool_destroy(&gw->pool);
    idcache_destroy(&gw->models);
}
