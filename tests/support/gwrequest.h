/*
 * gwrequest: drives the gateway's request handling (http_handle) without a server, for the
 * unit tests of routing and of request parsing. A request is built from NULL-terminated
 * tables of query arguments and headers, run through a router, and its answer parsed with the
 * strict parser; helpers assert on JSON bodies and on the 400 validation envelope. The
 * gateway_t it sets up has a pool of one connection that can never connect, so a request that
 * passes its checks answers 500 "database unavailable" instead of a 400.
 */
#ifndef CHATFLEET_GWREQUEST_H
#define CHATFLEET_GWREQUEST_H

#include <jansson.h>
#include <stdbool.h>

#include "gateway.h"
#include "http.h"

#define GWREQUEST_TOKEN         "good-token" /* the one token gwrequest_auth accepts */
#define GWREQUEST_TOKEN_DB_DOWN "db-down"    /* gwrequest_auth cannot check it (database down) */
#define GWREQUEST_USER_ID       "00000000-0000-4000-8000-0000000000aa" /* ...as this user */
#define GWREQUEST_CHAT_ID       "00000000-0000-4000-8000-000000000001"
#define GWREQUEST_CONNINFO      "host=/nonexistent/chatfleet-test dbname=chatfleet connect_timeout=1"
#define GWREQUEST_PUBLIC_URL    "https://chat.example.test" /* the gateway's advertised URL */

/* A query argument or header; tables of them end with {NULL, NULL}. */
typedef struct {
    const char *name;
    const char *value;
} gwrequest_kv_t;

/* The lookup context of a request: its query arguments and headers (either may be NULL). */
typedef struct {
    const gwrequest_kv_t *query;
    const gwrequest_kv_t *headers;
} gwrequest_table_t;

/* The headers of a request from the test user: "Authorization: Bearer GWREQUEST_TOKEN". */
extern const gwrequest_kv_t gwrequest_bearer[];

/* How many times gwrequest_auth ran since the last gwrequest_handle began. */
extern int gwrequest_auth_calls;

/* An http_lookup_fn over a gwrequest_table_t (ctx): query names exact, header names
 * case-insensitive. */
const char *gwrequest_lookup(void *ctx, http_kind_t kind, const char *name);

/* An http_each_fn over the same table, in its order. */
int gwrequest_each(void *ctx, http_kind_t kind, http_pair_fn fn, void *arg);

/* An http_auth_fn that accepts GWREQUEST_TOKEN as GWREQUEST_USER_ID, answers
 * HTTP_AUTH_UNAVAILABLE for GWREQUEST_TOKEN_DB_DOWN, and counts its calls. */
int gwrequest_auth(void *app, const char *token, char user_id[ID_UUID_LEN + 1]);

/* Handles one request through router; returns its status and the body parsed by the strict
 * parser (a new reference, or NULL when there is no body). The test fails on a body that is
 * not strict JSON or on a ready (streamed) response. req_out, when given, receives the
 * request. */
int gwrequest_handle(const http_router_t *router, const char *method, const char *path,
                     const gwrequest_kv_t *query, const gwrequest_kv_t *headers, const char *body,
                     bool too_large, json_t **json, http_req_t *req_out);

/* Parses resp's body with the strict parser (it must have one) and frees it. */
json_t *gwrequest_body(http_resp_t *resp);

/* Asserts that got (consumed) equals the JSON text want. */
void gwrequest_expect_json(json_t *got, const char *want);

/* Asserts that got (consumed) is a 400 validation envelope naming field with detail (NULL:
 * any detail). */
void gwrequest_expect_invalid(json_t *got, const char *field, const char *detail);

/* Sets gw up with a pool of one connection to GWREQUEST_CONNINFO (it never connects), the
 * logging hint sink and a queue limit of 10; gwrequest_gateway_free releases it. */
void gwrequest_gateway_init(gateway_t *gw);
void gwrequest_gateway_free(gateway_t *gw);

#endif
