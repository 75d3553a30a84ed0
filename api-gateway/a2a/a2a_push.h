/*
 * a2a_push: A2A push notifications (A2A v1.0 §3.1.7-3.1.10, §4.3; ARCHITECTURE.md §8, "A2A
 * push notifications"; deploy/OPERATIONS.md, "Push notifications"). The configuration methods
 * read and write a2a_push_configs; the pusher is one thread per gateway that delivers each
 * configured task's state changes to its webhook from that table, so a delivery survives any
 * gateway's restart or kill -9. It runs many POSTs at once on one libcurl multi handle (issue
 * 42): at most CHATFLEET_PUSH_INFLIGHT_MAX, of which CHATFLEET_PUSH_USER_INFLIGHT_MAX one
 * user's, claimed every user's first before anyone's second; each ends by its deadline
 * (CHATFLEET_PUSH_TIMEOUT_MS, connection included); a config has one in flight at most and
 * starts at most CHATFLEET_PUSH_CONFIG_PER_MIN a minute. A failure backs off its config alone,
 * so one user's hanging webhooks never delay another user's deliveries.
 *
 * A delivery is an HTTP POST of a StreamResponse {"statusUpdate":{taskId, contextId, status,
 * metadata:{"chatfleetDeliveryId"}}} with Content-Type application/a2a+json, the config's
 * authentication ("Authorization: <scheme> <credentials>"), its token
 * (X-A2A-Notification-Token) and the delivery id (X-A2A-Delivery-Id: "<task>/<state>"): each
 * state of a task is delivered once, or again with the same id when a pusher died between the
 * webhook's answer and its record (the receiver deduplicates by the id). A turn that ended
 * before WORKING was delivered delivers WORKING first. Failures are retried with backoff
 * (A2A_PUSH_BACKOFF_MS doubling up to A2A_PUSH_BACKOFF_MAX_MS), at most A2A_PUSH_ATTEMPTS
 * times in a row.
 *
 * Safety (security issue 34). Every value that goes into the request (url, id, token,
 * authentication scheme and credentials) is refused at creation when it holds a control
 * character (-32602 naming the field), and headers are built only through common/net/header.h,
 * which refuses them again: a delivery whose headers are refused is given up and logged, never
 * sent. The URL must pass the egress policy (common/net/egress.h): https to a public address
 * unless CHATFLEET_PUSH_ALLOW_CIDRS covers the target; it is checked at creation (the name
 * resolved) and on every connect, through no proxy, following no redirect (a 3xx is a failed
 * delivery), reading at most EGRESS_BODY_MAX_BYTES of the answer. A user holds at most
 * CHATFLEET_PUSH_CONFIGS_MAX configs and a task A2A_PUSH_TASK_CONFIGS_MAX; a user's deliveries
 * are at most CHATFLEET_PUSH_DELIVERIES_PER_MIN a minute across the cluster (one over waits for
 * the next minute; it is not a failed attempt). Each delivery is signed the Standard Webhooks
 * way (common/net/whsig.h): webhook-id (the delivery id), webhook-timestamp (unix seconds) and
 * webhook-signature "v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>.<body>")>", with the
 * config's own secret "whsec_<base64 key>", made at creation and shown to its owner as
 * "signingSecret" (v0.3: inside pushNotificationConfig).
 */
#ifndef CHATFLEET_A2A_PUSH_H
#define CHATFLEET_A2A_PUSH_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>

#include "config.h"
#include "pool.h"

#define A2A_PUSH_POLL_MS          200  /* how often the pusher looks for due deliveries */
#define A2A_PUSH_CLAIM_MARGIN_MS  3000 /* a claim outlives its delivery's deadline by this */
#define A2A_PUSH_BACKOFF_MS       500  /* the first retry's delay; doubles per failure */
#define A2A_PUSH_BACKOFF_MAX_MS   30000
#define A2A_PUSH_ATTEMPTS         12   /* failures in a row before a config is given up */
#define A2A_PUSH_BATCH            32   /* configs claimed per pass at most */
#define A2A_PUSH_CONFIG_BURST     5    /* deliveries one config may start at once */
#define A2A_PUSH_RATE_KEYS        4096 /* users, and configs, each rate table tracks */
#define A2A_PUSH_TASK_CONFIGS_MAX 10   /* configs per task */

/* Sets the delivery policy from cfg (the allow-list, the per-user limits) for every later
 * call and the pusher; call it once at start, before any request and a2a_pusher_new. Without
 * it the defaults hold (no allow-list, 100 configs, 600 deliveries a minute, config.c's
 * CHATFLEET_PUSH_* defaults). Returns 0; or -1
 * with why (why_size bytes) when CHATFLEET_PUSH_ALLOW_CIDRS is not a list of CIDRs: the
 * gateway does not start. */
int a2a_push_configure(const config_t *cfg, char *why, size_t why_size);

typedef enum {
    A2A_PUSH_CREATE = 0,
    A2A_PUSH_GET,
    A2A_PUSH_LIST,
    A2A_PUSH_DELETE,
} a2a_push_op_t;

/* One configuration method for user_id (params as the v1 binding sends them; legacy: the v0.3
 * shapes, {"taskId","pushNotificationConfig":{...}} and "pushNotificationConfigId"). Returns 0
 * with *result set; or a JSON-RPC error code (-32602 with *data naming the field: a control
 * character, a URL the egress policy refuses, a config limit reached; -32001 when the task or
 * the config is not the caller's, -32603 on a database error). */
int a2a_push_rpc(PGconn *conn, const char *user_id, a2a_push_op_t op, json_t *params, bool legacy,
                 json_t **result, json_t **data);

/* Checks a push config as a create would accept it, storing nothing: cfg is the v1
 * PushNotificationConfig ({"url","id","token","authentication":{"scheme","credentials"}}) or,
 * legacy, the v0.3 one ("authentication":{"schemes":[...]}); at is the field path that names it
 * in errors ("params.configuration.taskPushNotificationConfig"). The URL is checked against
 * the egress policy (its name resolved). Returns 0; or -1 with *data naming the field (JSON-RPC
 * -32602). */
int a2a_push_config_check(json_t *cfg, const char *at, bool legacy, json_t **data);

typedef struct a2a_pusher a2a_pusher_t;

/* Starts the pusher thread on pool's connections. NULL on failure. */
a2a_pusher_t *a2a_pusher_new(pool_t *pool);

/* Stops the thread at once (POSTs in flight are abandoned and their claims released: those
 * deliveries stay due) and frees it; NULL-safe. */
void a2a_pusher_destroy(a2a_pusher_t **self_p);

#endif
