/*
 * gateway: the state every HTTP handler shares (pool, hint sink, limits, models) and the
 * helpers that turn a request into one state-machine bundle and its outcome into HTTP.
 */
#ifndef CHATFLEET_GATEWAY_H
#define CHATFLEET_GATEWAY_H

#include "chatstate.h"
#include "fileupload.h"
#include "hooks.h"
#include "idcache.h"
#include "jsonstrict.h"
#include "http.h"
#include "metrics.h"
#include "pool.h"
#include "ratelimit.h"
#include "relay.h"
#include "workpool.h"

#include <pthread.h>
#include <stdatomic.h>

/* The public projection of a message row (internal metadata stays inside), as json. The
 * stored json of content and of a receipt's structured output is spliced in as text, so its
 * numbers reach the client as the client or the model wrote them (0021_exact_json.sql):
 * jsonb_build_object or || would rewrite them. GATEWAY_MESSAGE_OPEN is the object's text
 * without its closing brace, for a caller that adds members; the metadata object it starts
 * from always has an id, so a member follows it with a comma. */
#define GATEWAY_MESSAGE_OPEN                                                                       \
    "left(json_strip_nulls(json_build_object('id', m.id, 'chat_id', m.chat_id, 'created_by',"      \
    " m.created_by, 'model_config_id', m.model_config_id, 'created_at', m.created_at,"             \
    " 'role', m.role, 'usage', m.usage, 'revision', m.revision,"                                   \
    " 'queued_message_id', m.queued_message_id, 'reasoning_effort', m.reasoning_effort,"           \
    " 'structured_output_request_id', CASE WHEN m.structured_output ->> 'type' ="                  \
    " 'structured-output-request' THEN m.structured_output_request_id END))::text, -1)"            \
    " || ', \"content\": ' || m.content::text || CASE WHEN m.structured_output ->> 'type' ="       \
    " 'structured-output-outcome' THEN ', \"structured_output\": ' || coalesce((SELECT"            \
    " json_object_agg(f.key, f.value ORDER BY f.ord) FROM json_each(m.structured_output)"          \
    " WITH ORDINALITY AS f(key, value, ord) WHERE f.key <> 'type'), '{}')::text ELSE '' END"

#define GATEWAY_MESSAGE_JSON "(" GATEWAY_MESSAGE_OPEN " || '}')::json"

/* A queued row, its content spliced in as text like a message's. */
#define GATEWAY_QUEUED_JSON                                                                        \
    "(left(json_strip_nulls(json_build_object('id', q.id, 'chat_id', q.chat_id,"                   \
    " 'model_config_id', q.model_config_id, 'created_at', q.created_at,"                           \
    " 'structured_output_request_id', q.structured_output_request_id,"                             \
    " 'reasoning_effort', q.reasoning_effort))::text, -1)"                                         \
    " || ', \"content\": ' || q.content::text || '}')::json"

typedef struct {
    pool_t *pool;
    hint_sink_t sink;
    int max_queue;
    struct hub *hub;                 /* wakes the open streams */
    workpool_t *streams;             /* runs the streams' and watches' reads */
    const char *relay_endpoint;      /* the broker's relay, for part catch-up */
    relay_client_t *relay;           /* the one relay client, made on first use */
    struct watch_cache *watch_cache; /* rows shared by watches (watch.h); NULL: none */
    pthread_mutex_t relay_lock;      /* guards relay */
    metrics_t *metrics;
    /* The base URL the gateway advertises (the A2A agent card): CHATFLEET_PUBLIC_URL, or the
     * scheme and listen address; never the request's Host (ARCHITECTURE.md §1.1). */
    const char *public_url;
    /* The deployment's MCP servers by name (models_mcp_servers): what a chat may enable at
     * creation (ARCHITECTURE.md §7.9). */
    json_t *mcp_servers;
    /* The operator console's files (console.h), or NULL: not served. */
    const char *console_dir;
    int64_t lease_stale_ms;      /* CHATFLEET_LEASE_STALE_MS, for the admin API's lease view */
    cs_settings_t chat_settings; /* what every bundle of the gateway passes (chatstate.h) */
    atomic_llong stream_reads;   /* chat streams' database reads (/metrics) */
    /* The lifecycle hook dispatcher (blocking calls only; admithook.h), or NULL: none. */
    hooks_t *hooks;
    idcache_t *auth;         /* tokens verified recently (CHATFLEET_AUTH_CACHE_MS) */
    idcache_t *auth_unknown; /* tokens that found no user recently (same lifetime; id "") */
    idcache_t *models;       /* model config ids by name, found recently (GATEWAY_MODEL_CACHE_MS) */
    sniffer_t *sniffer;      /* uploads' type checks (fileupload.h) */
    int64_t file_quota_bytes; /* CHATFLEET_FILE_QUOTA_BYTES */
    ratelimit_t *creates;     /* chats created per user (CHATFLEET_CHATS_PER_MIN), or NULL */
} gateway_t;

/* How long a model config's id, once found by its name (or as the default), is answered
 * without a query: configs change only when a gateway starts with another config file
 * (models_sync), and every gateway sees the change within this (ARCHITECTURE.md §10). */
#define GATEWAY_MODEL_CACHE_MS 1000
/* Client addresses whose token checks are counted at once (http_router_t.auth_limit). */
#define GATEWAY_AUTH_LIMIT_ADDRESSES 65536

/* Users whose chat creations are counted at once (gateway_t.creates). */
#define GATEWAY_CREATE_LIMIT_USERS 65536

/* Spends one of user_id's chat creations (CHATFLEET_CHATS_PER_MIN, this gateway's count):
 * true, or false with *retry_after_s (>= 1) until the next one is due. */
bool gateway_may_create(gateway_t *gw, const char *user_id, int *retry_after_s);

/* One transition (or several) applied to an open bundle; returns 0 or -1 with err set. */
typedef int (*gateway_step_fn)(chatstate_t *cs, void *ctx, cs_error_t *err);

/* Runs step in a bundle on the caller's chat: 404 unless it is theirs, retries the bundle on
 * CS_RETRY, maps every other failure to its HTTP status in resp. On success returns 0
 * (resp untouched) and, when after is non-NULL, the committed row there. */
int gateway_bundle(gateway_t *gw, PGconn *conn, const http_req_t *req, gateway_step_fn step,
                   void *ctx, hint_update_t *after, http_resp_t *resp);

/* Maps a state-machine error to the HTTP status and envelope. */
void gateway_cs_error(http_resp_t *resp, const cs_error_t *err);

/* Parses the body through the strict JSON boundary; on failure sets a 400 naming the byte
 * offset and JSON pointer and returns NULL. A missing body is {} when empty_ok. */
json_t *gateway_body(const http_req_t *req, http_resp_t *resp, bool empty_ok);

/* The field path (fieldpath.h) of req's body that the strict boundary's error e names, as
 * gateway_body reports it; the caller frees it. */
char *gateway_error_field(const http_req_t *req, const jsonstrict_error_t *e);

/* Rejects any member of obj not named in allowed (NULL-terminated): 400 naming the field,
 * the member's path under parent, the path of obj ("" for the body itself) in the style of
 * fieldpath.h: "dynamic_tools[2].extra", "[\"a/b\"]". */
int gateway_only_fields(json_t *obj, const char *const *allowed, const char *parent,
                        http_resp_t *resp);

/* Reads text as a decimal integer within [min, max] (0 <= min <= max) into out: ASCII digits
 * only, so no sign, space, '+', exponent or trailing byte, and a value beyond max (int64
 * overflow included) is refused, never saturated. Leading zeros are allowed ("007" is 7).
 * 0, or -1 with out untouched. */
int gateway_int_parse(const char *text, int64_t min, int64_t max, int64_t *out);

/* The one reader of numeric query parameters: out is the query argument name read by
 * gateway_int_parse, or dflt when the argument is absent. 0, or -1 with a 400 naming the
 * parameter ("must be an integer from <min> to <max>"). */
int gateway_query_int(const http_req_t *req, const char *name, int64_t min, int64_t max,
                      int64_t dflt, int64_t *out, http_resp_t *resp);

/* A chat id from a query string or a JSON body in its canonical form: a UUID in any letter
 * case, written lower-case into out (as PostgreSQL prints it and bus topics carry it). 0, or
 * -1 when text is not a UUID (out then ""). */
int gateway_chat_id(const char *text, char out[ID_UUID_LEN + 1]);

/* Validates a content array of input parts into its JSON text (caller frees). NULL and 400
 * naming content[i] on failure; empty arrays only when empty_ok. */
char *gateway_content(json_t *content, const char *field, bool empty_ok, http_resp_t *resp);

/* A request's response_format, validated and compiled (ARCHITECTURE.md §8). */
typedef struct {
    bool given; /* present and not null */
    bool structured;
    char *json; /* canonical storage text of a structured format (owned), else NULL */
    char request_id[ID_UUID_LEN + 1]; /* minted for a structured format */
} gateway_format_t;

/* Reads body's response_format. dynamic_tools (a JSON array or NULL) must not declare the
 * finalizer's name for a structured request. 0, or -1 with a 400 naming the exact field. */
int gateway_format(json_t *body, json_t *dynamic_tools, gateway_format_t *out, http_resp_t *resp);
void gateway_format_clear(gateway_format_t *f);

/* Steering fields of a create, a send or an edit (issue 38), each read from body and checked
 * before anything is stored; a field that is absent (or JSON null) leaves its output at the
 * value that means "not given". */

/* reasoning_effort: a name on the effort scale (effort.h) into *out (a static string), NULL
 * when absent. 0, or -1 with a 400 naming reasoning_effort. */
int gateway_effort(json_t *body, const char **out, http_resp_t *resp);

/* plan_mode: "plan" (*out 1) or "" (0); -1 when absent. 0, or -1 with the reference's 400
 * "Invalid plan_mode value." naming plan_mode (api-shapes.md §2.1). */
int gateway_plan_mode(json_t *body, int *out, http_resp_t *resp);

#define GATEWAY_MCP_SERVERS_MAX 16 /* servers a chat may enable (worker: MCPSET_SERVERS_MAX) */

/* Checks v as a chat's mcp_servers (on create and on send): an array of at most
 * GATEWAY_MCP_SERVERS_MAX unique names of servers the deployment configures (gw->mcp_servers,
 * ARCHITECTURE.md §7.9). 0, or -1 with a 400 naming mcp_servers or the element at fault
 * (mcp_servers[i]). */
int gateway_mcp_servers(const gateway_t *gw, json_t *v, http_resp_t *resp);

/* The id of the model config named name (the default's when name is NULL) into id, from
 * gw->models while fresh, else by a query on conn: 1, 0 when none has it, or -1 with a 500 in
 * resp. */
int gateway_model_find(gateway_t *gw, PGconn *conn, const char *name, char id[ID_UUID_LEN + 1],
                       http_resp_t *resp);

/* The id of the model config body's "model" names (a string), or the default's when model is
 * NULL. 0, or -1 with a 400 naming "model" (not a string, no such name, no default) or a 500. */
int gateway_model_id(gateway_t *gw, PGconn *conn, const json_t *model, char id[ID_UUID_LEN + 1],
                     http_resp_t *resp);

/* Runs SQL returning one JSON text column; returns the parsed rows as a JSON array (or NULL
 * on a database error, with a 500 in resp). */
json_t *gateway_rows(PGconn *conn, const char *sql, int n, const char *const *params,
                     http_resp_t *resp);

/* The public JSON of a chat (NULL when it is not the caller's). */
json_t *gateway_chat_json(PGconn *conn, const char *chat_id, const char *user_id,
                          http_resp_t *resp);

#endif
