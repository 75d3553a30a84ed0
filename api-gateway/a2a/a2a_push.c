/* a2a_push: push notification configs and their delivery; see a2a_push.h. */
#include "a2a_push.h"
#include "jsonnumber.h"
#include "a2a_task.h"
#include "db.h"
#include "egress.h"
#include "gateway.h"
#include "header.h"
#include "id.h"
#include "jsonout.h"
#include "log.h"
#include "mem.h"
#include "ratelimit.h"
#include "whsig.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { RPC_INVALID_PARAMS = -32602, RPC_INTERNAL = -32603, A2A_TASK_NOT_FOUND = -32001 };

/* The delivery policy, set once by a2a_push_configure before any request or pusher thread
 * runs and read-only after that (NULL egress: no allow-list, the default policy). */
static egress_t *s_egress;
static int64_t s_configs_max = 100;
static int64_t s_deliveries_per_min = 600;
static int64_t s_timeout_ms = 5000;
static int64_t s_inflight_max = 256;
static int64_t s_user_inflight_max = 8;
static int64_t s_config_per_min = 60;

int a2a_push_configure(const config_t *cfg, char *why, size_t why_size) {
    char reason[EGRESS_WHY_MAX];
    egress_t *policy = egress_new(cfg->push_allow_cidrs, reason, sizeof reason);
    if (!policy) {
        snprintf(why, why_size, "CHATFLEET_PUSH_ALLOW_CIDRS=%s: %s", cfg->push_allow_cidrs, reason);
        return -1;
    }
    egress_destroy(&s_egress);
    s_egress = policy;
    s_configs_max = cfg->push_configs_max;
    s_deliveries_per_min = cfg->push_deliveries_per_min;
    s_timeout_ms = cfg->push_timeout_ms;
    s_inflight_max = cfg->push_inflight_max;
    s_user_inflight_max = cfg->push_user_inflight_max;
    s_config_per_min = cfg->push_config_per_min;
    return 0;
}

/* The public shape of a config row, v1 (TaskPushNotificationConfig) or v0.3. */
#define S_CONFIG_JSON                                                                              \
    "jsonb_strip_nulls(jsonb_build_object('id', p.id, 'taskId', p.task_id, 'url', p.url,"          \
    " 'token', p.token, 'authentication', CASE WHEN p.auth_scheme IS NOT NULL THEN"                \
    " jsonb_strip_nulls(jsonb_build_object('scheme', p.auth_scheme, 'credentials',"                \
    " p.auth_credentials)) END, 'signingSecret', p.signing_secret))"

static json_t *s_query(PGconn *conn, const char *sql, int n, const char *const *p, int *code) {
    http_resp_t h = {0};
    json_t *rows = gateway_rows(conn, sql, n, p, &h);
    free(h.body);
    if (!rows) {
        *code = RPC_INTERNAL;
    }
    return rows;
}

static json_t *s_invalid(const char *field, const char *detail) {
    return json_pack("{s:s,s:s}", "field", field, "detail", detail);
}

/* A v1 config as v0.3 shows it: {"taskId","pushNotificationConfig":{"id","url","token",
 * "authentication":{"schemes":[...],"credentials"}}}. Steals c. */
static json_t *s_legacy(json_t *c) {
    json_t *inner = jsonnumber_deep_copy(c);
    json_object_del(inner, "taskId");
    json_t *auth = json_object_get(inner, "authentication");
    if (auth) {
        json_object_set_new(auth, "schemes", json_pack("[O]", json_object_get(auth, "scheme")));
        json_object_del(auth, "scheme");
    }
    json_t *out = json_pack("{s:O,s:o}", "taskId", json_object_get(c, "taskId"),
                            "pushNotificationConfig", inner);
    json_decref(c);
    return out;
}

/* The config fields of a create: url (http or https), id, token, authentication. */
typedef struct {
    const char *id;
    char id_buf[ID_UUID_LEN + 1];
    const char *url;
    const char *token;
    const char *scheme;
    const char *credentials;
} s_config_t;

#define S_NO_CONTROL "must not hold control characters (CR, LF, NUL, 0x01-0x1f, DEL)"

/* Refuses a value that goes into the request with a control character in it (tab only where a
 * header value allows it; a NUL inside the JSON string counts): one check per field, so that
 * *data names exactly that field. */
static int s_clean(const char *at, const char *name, json_t *v, bool tab, json_t **data) {
    const char *value = json_string_value(v);
    if (!value || (strlen(value) == json_string_length(v) &&
                   (tab ? header_value_ok(value) : header_text_ok(value)))) {
        return 0;
    }
    char field[128];
    snprintf(field, sizeof field, "%s.%s", at, name);
    *data = s_invalid(field, S_NO_CONTROL);
    return -1;
}

static int s_read_config(json_t *cfg, const char *at, bool legacy, s_config_t *c, json_t **data) {
    char field[128];
    json_t *id = json_object_get(cfg, "id");
    json_t *url = json_object_get(cfg, "url");
    json_t *token = json_object_get(cfg, "token");
    json_t *auth = json_object_get(cfg, "authentication");
    json_t *scheme = legacy ? json_array_get(json_object_get(auth, "schemes"), 0)
                            : json_object_get(auth, "scheme");
    const char *u = json_string_value(url);
    if (!u || (strncmp(u, "http://", 7) && strncmp(u, "https://", 8)) || strlen(u) > 2048) {
        snprintf(field, sizeof field, "%s.url", at);
        *data = s_invalid(field, "must be an http or https URL of at most 2048 bytes");
        return -1;
    }
    if ((id && (!json_is_string(id) || json_string_length(id) > 128)) ||
        (token && (!json_is_string(token) || json_string_length(token) > 1024))) {
        snprintf(field, sizeof field, "%s.%s", at, id && !json_is_string(id) ? "id" : "token");
        *data = s_invalid(field, "must be a string (id up to 128 bytes, token up to 1024)");
        return -1;
    }
    if (auth && (!json_is_string(scheme) || json_string_length(scheme) == 0 ||
                 json_string_length(scheme) > 64 ||
                 !json_is_string(json_object_get(auth, "credentials")))) {
        snprintf(field, sizeof field, "%s.authentication", at);
        *data = s_invalid(field, "needs a scheme (Bearer, Basic) and credentials");
        return -1;
    }
    c->url = u;
    c->token = json_string_value(token);
    c->scheme = json_string_value(scheme);
    c->credentials = json_string_value(json_object_get(auth, "credentials"));
    c->id = json_string_length(id) ? json_string_value(id) : NULL;
    /* Every value that reaches the outgoing request (issue 34): a CR LF in a token would end
     * its header and start the author's own request. The builder refuses them again. */
    const char *scheme_at = legacy ? "authentication.schemes" : "authentication.scheme";
    if (s_clean(at, "url", url, false, data) || s_clean(at, "id", id, false, data) ||
        s_clean(at, "token", token, true, data) || s_clean(at, scheme_at, scheme, false, data) ||
        s_clean(at, "authentication.credentials", json_object_get(auth, "credentials"), true,
                data)) {
        return -1;
    }
    if (c->scheme && !header_name_ok(c->scheme)) {
        snprintf(field, sizeof field, "%s.%s", at, scheme_at);
        *data = s_invalid(field, "must be one auth scheme token (Bearer, Basic): letters, digits"
                                 " and !#$%&'*+-.^_`|~");
        return -1;
    }
    char why[EGRESS_WHY_MAX];
    if (egress_url_check(s_egress, c->url, why, sizeof why) != 0) {
        snprintf(field, sizeof field, "%s.url", at);
        char *detail = mem_printf("refused by the delivery policy: %s (deploy/OPERATIONS.md,"
                                  " \"Push notifications\")",
                                  why);
        *data = s_invalid(field, detail);
        free(detail);
        return -1;
    }
    if (!c->id) {
        if (id_uuid_new(c->id_buf) != 0) {
            return RPC_INTERNAL;
        }
        c->id = c->id_buf;
    }
    return 0;
}

/* The per-user and per-task limits on configs: 0 when one more (or a replacement of an
 * existing id) is allowed; RPC_INVALID_PARAMS with *data saying which limit; or an error code.
 * Two creates at once may both pass a count that then exceeds the limit by one: the limit
 * bounds what a user holds, it is not an exact quota. */
static int s_limits(PGconn *conn, const char *user_id, const char *tid, const char *cid,
                    const char *at, json_t **data) {
    const char *p[] = {user_id, tid, cid};
    int code = 0;
    json_t *rows = s_query(conn,
                           "SELECT jsonb_build_array(count(*), count(*) FILTER (WHERE task_id ="
                           " $2), count(*) FILTER (WHERE task_id = $2 AND id = $3)) FROM"
                           " a2a_push_configs WHERE owner_id = $1::uuid",
                           3, p, &code);
    if (!rows) {
        return code;
    }
    json_t *counts = json_array_get(rows, 0);
    json_int_t user_n = json_integer_value(json_array_get(counts, 0));
    json_int_t task_n = json_integer_value(json_array_get(counts, 1));
    bool replaces = json_integer_value(json_array_get(counts, 2)) > 0;
    json_decref(rows);
    char detail[160];
    if (!replaces && user_n >= s_configs_max) {
        snprintf(detail, sizeof detail,
                 "limit reached: at most %lld push notification configs per user"
                 " (CHATFLEET_PUSH_CONFIGS_MAX); delete one first",
                 (long long)s_configs_max);
    } else if (!replaces && task_n >= A2A_PUSH_TASK_CONFIGS_MAX) {
        snprintf(detail, sizeof detail,
                 "limit reached: at most %d push notification configs per task; delete one first",
                 A2A_PUSH_TASK_CONFIGS_MAX);
    } else {
        return 0;
    }
    *data = s_invalid(at, detail);
    return RPC_INVALID_PARAMS;
}

int a2a_push_config_check(json_t *cfg, const char *at, bool legacy, json_t **data) {
    s_config_t c = {0};
    return s_read_config(cfg, at, legacy, &c, data) == 0 ? 0 : -1;
}

/* The task id a method names, canonical, and the task the caller's: 0, or an error code. */
static int s_task(PGconn *conn, const char *user_id, json_t *v, const char *field,
                  char out[A2A_TASK_ID_MAX], json_t **data) {
    if (!json_is_string(v)) {
        *data = s_invalid(field, "must be a task id");
        return RPC_INVALID_PARAMS;
    }
    if (a2a_task_id_canonical(json_string_value(v), out) != 0) {
        return A2A_TASK_NOT_FOUND;
    }
    a2a_task_t t;
    a2a_lookup_t rc = a2a_task_load(conn, out, user_id, false, &t);
    json_decref(t.task);
    return rc == A2A_TASK_FOUND ? 0 : rc == A2A_TASK_MISSING ? A2A_TASK_NOT_FOUND : RPC_INTERNAL;
}

int a2a_push_rpc(PGconn *conn, const char *user_id, a2a_push_op_t op, json_t *params, bool legacy,
                 json_t **result, json_t **data) {
    char tid[A2A_TASK_ID_MAX];
    /* v0.3 names the task "taskId" on set and "id" elsewhere; v1 "taskId" always. */
    bool by_id = legacy && op != A2A_PUSH_CREATE;
    int code = s_task(conn, user_id, json_object_get(params, by_id ? "id" : "taskId"),
                      by_id ? "params.id" : "params.taskId", tid, data);
    if (code != 0) {
        return code;
    }
    const char *cid = json_string_value(json_object_get(params, legacy  ? "pushNotificationConfigId"
                                                                : by_id ? ""
                                                                        : "id"));
    json_t *rows = NULL;
    if (op == A2A_PUSH_CREATE) {
        s_config_t c = {0};
        json_t *cfg = legacy ? json_object_get(params, "pushNotificationConfig") : params;
        int rc = s_read_config(cfg, legacy ? "params.pushNotificationConfig" : "params", legacy, &c,
                               data);
        if (rc != 0) {
            return rc == -1 ? RPC_INVALID_PARAMS : rc;
        }
        const char *at = legacy ? "params.pushNotificationConfig" : "params";
        if ((rc = s_limits(conn, user_id, tid, c.id, at, data)) != 0) {
            return rc;
        }
        char secret[WHSIG_SECRET_MAX];
        if (whsig_secret_new(secret) != 0) {
            log_error("a2a_push_secret_failed", "no random bytes for a signing secret");
            return RPC_INTERNAL;
        }
        /* A replaced config keeps its secret: its receiver already verifies with it. */
        const char *p[] = {user_id, tid, c.id, c.url, c.token, c.scheme, c.credentials, secret};
        rows = s_query(conn,
                       "INSERT INTO a2a_push_configs AS p (owner_id, task_id, id, url, token,"
                       " auth_scheme, auth_credentials, signing_secret) VALUES ($1::uuid, $2, $3,"
                       " $4, $5, $6, $7, $8) ON CONFLICT (owner_id, task_id, id) DO UPDATE SET"
                       " url = $4, token = $5, auth_scheme = $6, auth_credentials = $7,"
                       " attempts = 0, next_at = now(), done = false RETURNING " S_CONFIG_JSON,
                       8, p, &code);
    } else if (op == A2A_PUSH_LIST) {
        const char *p[] = {user_id, tid};
        rows = s_query(conn,
                       "SELECT " S_CONFIG_JSON " FROM a2a_push_configs p WHERE owner_id = $1::uuid"
                       " AND task_id = $2 ORDER BY created_at, id",
                       2, p, &code);
    } else {
        if (!cid) {
            *data = s_invalid(legacy ? "params.pushNotificationConfigId" : "params.id",
                              "must be a config id");
            return RPC_INVALID_PARAMS;
        }
        const char *p[] = {user_id, tid, cid};
        rows = s_query(conn,
                       op == A2A_PUSH_GET
                           ? "SELECT " S_CONFIG_JSON " FROM a2a_push_configs p WHERE owner_id ="
                             " $1::uuid AND task_id = $2 AND id = $3"
                           : "DELETE FROM a2a_push_configs p WHERE owner_id = $1::uuid AND"
                             " task_id = $2 AND id = $3 RETURNING " S_CONFIG_JSON,
                       3, p, &code);
    }
    if (!rows) {
        return code;
    }
    if (op == A2A_PUSH_LIST) {
        size_t i;
        json_t *c;
        json_t *list = json_array();
        json_array_foreach(rows, i, c) {
            json_array_append_new(list, legacy ? s_legacy(json_incref(c)) : json_incref(c));
        }
        *result = legacy ? list : json_pack("{s:o,s:s}", "configs", list, "nextPageToken", "");
    } else if (op == A2A_PUSH_DELETE) {
        *result = legacy ? json_null() : json_object(); /* idempotent: gone either way */
    } else if (json_array_size(rows) != 1) {
        json_decref(rows);
        return A2A_TASK_NOT_FOUND; /* no such config of this task */
    } else {
        json_t *c = json_incref(json_array_get(rows, 0));
        *result = legacy ? s_legacy(c) : c;
    }
    json_decref(rows);
    return 0;
}

/* --- The pusher. --- */

/* One delivery in flight on the pusher's multi handle: what its end records. */
typedef struct {
    json_t *cfg;           /* the claimed row */
    char *state;           /* the state delivered */
    bool final;            /* a 2xx ends the config: the task's terminal state */
    char *body;            /* CURLOPT_POSTFIELDS points here */
    struct curl_slist *hd; /* CURLOPT_HTTPHEADER points here */
    CURL *h;
    egress_call_t call; /* egress_curl_apply's state, alive until the transfer ends */
    int64_t started_ms;
} s_xfer_t;

struct a2a_pusher {
    pool_t *pool;
    pthread_t thread;
    CURLM *multi;
    ratelimit_t *user_rate;   /* CHATFLEET_PUSH_DELIVERIES_PER_MIN, before the cluster's count */
    ratelimit_t *config_rate; /* CHATFLEET_PUSH_CONFIG_PER_MIN */
    s_xfer_t **xfers;         /* in flight: s_inflight_max slots, n_xfers used */
    int n_xfers;
    atomic_bool stop;
};

/* A string member of a claimed config row, or NULL. */
static const char *s_field(json_t *cfg, const char *key) {
    return json_string_value(json_object_get(cfg, key));
}

/* Appends every header of one delivery through header.h, which refuses a name or a value it
 * would not send: 0, or -1 (the list is then the caller's to free, and nothing is sent). */
static int s_headers(json_t *cfg, const char *delivery_id, const char *body,
                     struct curl_slist **hd) {
    const char *token = s_field(cfg, "token");
    const char *scheme = s_field(cfg, "scheme");
    const char *cred = s_field(cfg, "credentials");
    int64_t now = (int64_t)time(NULL);
    char ts[24];
    snprintf(ts, sizeof ts, "%lld", (long long)now);
    char sig[WHSIG_SIGNATURE_MAX];
    if (whsig_sign(s_field(cfg, "secret"), delivery_id, now, body, strlen(body), sig) != 0) {
        return -1;
    }
    /* "Expect:" with no value: curl sends no "Expect: 100-continue" and waits for none. */
    if (header_append(hd, "Content-Type", "application/a2a+json") ||
        header_append(hd, "Expect", "") || header_append(hd, "X-A2A-Delivery-Id", delivery_id) ||
        header_append(hd, "webhook-id", delivery_id) ||
        header_append(hd, "webhook-timestamp", ts) || header_append(hd, "webhook-signature", sig) ||
        (token && header_append(hd, "X-A2A-Notification-Token", token))) {
        return -1;
    }
    if (scheme) {
        if (!header_name_ok(scheme)) {
            return -1; /* the scheme is a token: a space in it would forge the credentials */
        }
        char *line = mem_printf("%s %s", scheme, cred ? cred : "");
        int rc = header_append(hd, "Authorization", line);
        free(line);
        return rc;
    }
    return 0;
}

/* Takes one delivery from the owner's per-minute budget (a2a_push_rate, shared by every
 * gateway): true when it may go now. A database error lets it go (a limit that fails open
 * for one pass beats deliveries stuck behind a broken read). */
static bool s_rate_take(pool_t *pool, const char *owner) {
    char max[DB_PARAM_INT64_LEN];
    const char *p[] = {owner, db_param_int64(max, s_deliveries_per_min)};
    int code = 0;
    PGconn *conn = pool_get(pool);
    json_t *rows = s_query(
        conn,
        "INSERT INTO a2a_push_rate AS r (owner_id, window_start, deliveries) VALUES ($1::uuid,"
        " now(), 1) ON CONFLICT (owner_id) DO UPDATE SET window_start = CASE WHEN"
        " r.window_start <= now() - interval '1 minute' THEN now() ELSE r.window_start END,"
        " deliveries = CASE WHEN r.window_start <= now() - interval '1 minute' THEN 1 ELSE"
        " r.deliveries + 1 END WHERE r.window_start <= now() - interval '1 minute' OR"
        " r.deliveries < $2::int RETURNING to_jsonb(r.deliveries)",
        2, p, &code);
    pool_put(pool, conn);
    bool ok = !rows || json_array_size(rows) == 1;
    json_decref(rows);
    return ok;
}

/* Sets what set says on one config's row, releasing its claim. */
static void s_release(pool_t *pool, json_t *cfg, const char *set) {
    const char *p[] = {s_field(cfg, "owner_id"), s_field(cfg, "task_id"), s_field(cfg, "id")};
    char *sql = mem_printf("UPDATE a2a_push_configs SET claimed_until = NULL, %s WHERE owner_id ="
                           " $1::uuid AND task_id = $2 AND id = $3 RETURNING to_jsonb(id)",
                           set);
    PGconn *conn = pool_get(pool);
    json_t *rows = s_query(conn, sql, 3, p, &(int){0});
    pool_put(pool, conn);
    json_decref(rows);
    free(sql);
}

/* Puts a delivery over the rate off to the end of the owner's window: the claim is released,
 * the attempts are untouched (it did not fail). */
static void s_defer(pool_t *pool, json_t *cfg) {
    s_release(pool, cfg,
              "next_at = greatest(now(), coalesce((SELECT window_start FROM a2a_push_rate WHERE"
              " owner_id = $1::uuid), now()) + interval '1 minute')");
    log_info("a2a_push_deferred", "task_id=%s config_id=%s reason=rate per_min=%lld",
             s_field(cfg, "task_id"), s_field(cfg, "id"), (long long)s_deliveries_per_min);
}

/* Gives a config up at once: its request may never be built (issue 34: a value the builder
 * refuses is never sent, whatever a retry would do). */
static void s_give_up(pool_t *pool, json_t *cfg, const char *why) {
    s_release(pool, cfg, "done = true");
    log_warn("a2a_push_given_up", "task_id=%s config_id=%s reason=\"%s\"", s_field(cfg, "task_id"),
             s_field(cfg, "id"), why);
}

/* The state to deliver next, or NULL when the webhook has the task's state already. A turn
 * that ended without WORKING delivered delivers WORKING first: every state change, in order. */
static const char *s_next_state(const a2a_task_t *t, const char *task_id, const char *sent) {
    if (sent && !strcmp(sent, t->state)) {
        return NULL;
    }
    bool ran = !strcmp(t->state, "TASK_STATE_COMPLETED") || !strcmp(t->state, "TASK_STATE_FAILED");
    bool worked =
        sent && (!strcmp(sent, "TASK_STATE_WORKING") || !strcmp(sent, "TASK_STATE_INPUT_REQUIRED"));
    if (ran && !worked && task_id[0] != 'r') {
        return "TASK_STATE_WORKING";
    }
    return t->state;
}

/* Records a delivery's outcome and releases the claim. */
static void s_record(pool_t *pool, json_t *cfg, const char *state, bool ok, bool final) {
    int attempts = (int)json_integer_value(json_object_get(cfg, "attempts")) + 1;
    int64_t backoff = A2A_PUSH_BACKOFF_MS;
    for (int i = 1; i < attempts && backoff < A2A_PUSH_BACKOFF_MAX_MS; i++) {
        backoff *= 2;
    }
    backoff = backoff < A2A_PUSH_BACKOFF_MAX_MS ? backoff : A2A_PUSH_BACKOFF_MAX_MS;
    char ms[DB_PARAM_INT64_LEN];
    const char *p[] = {json_string_value(json_object_get(cfg, "owner_id")),
                       json_string_value(json_object_get(cfg, "task_id")),
                       json_string_value(json_object_get(cfg, "id")),
                       ok ? state : NULL,
                       db_param_int64(ms, ok ? 0 : backoff),
                       ok                              ? (final ? "t" : "f")
                       : attempts >= A2A_PUSH_ATTEMPTS ? "t"
                                                       : "f"};
    PGconn *conn = pool_get(pool);
    json_t *rows = s_query(conn,
                           "UPDATE a2a_push_configs SET sent_state = coalesce($4, sent_state),"
                           " attempts = CASE WHEN $4 IS NULL THEN attempts + 1 ELSE 0 END,"
                           " next_at = now() + $5::bigint * interval '1 millisecond',"
                           " claimed_until = NULL, done = $6::boolean WHERE owner_id = $1::uuid"
                           " AND task_id = $2 AND id = $3 RETURNING to_jsonb(id)",
                           6, p, &(int){0});
    pool_put(pool, conn);
    json_decref(rows);
    if (!ok && attempts >= A2A_PUSH_ATTEMPTS) {
        log_warn("a2a_push_given_up", "task_id=%s config_id=%s attempts=%d", p[1], p[2], attempts);
    }
}

/* Puts a config off by delay_ms, for a local rate (reason): the claim is released, the attempts
 * are untouched (it did not fail). */
static void s_put_off(pool_t *pool, json_t *cfg, int64_t delay_ms, const char *reason) {
    char *set =
        mem_printf("next_at = now() + %lld * interval '1 millisecond'", (long long)delay_ms);
    s_release(pool, cfg, set);
    free(set);
    log_info("a2a_push_deferred", "task_id=%s config_id=%s reason=%s delay_ms=%lld",
             s_field(cfg, "task_id"), s_field(cfg, "id"), reason, (long long)delay_ms);
}

static void s_xfer_free(s_xfer_t **x_p) {
    s_xfer_t *x = *x_p;
    if (x) {
        curl_easy_cleanup(x->h);
        curl_slist_free_all(x->hd);
        json_decref(x->cfg);
        free(x->state);
        free(x->body);
        free(x);
        *x_p = NULL;
    }
}

/* Starts the POST of body to the config's webhook under the egress policy, ending by timeout_ms
 * (connection included), on self's multi handle: 0; -1 with why when the request may not be
 * built (a header or the URL refused: the config is given up, nothing is sent); 1 with why when
 * curl could not take it now (a failed attempt). */
static int s_post_start(a2a_pusher_t *self, s_xfer_t *x, const char *delivery_id,
                        int64_t timeout_ms, char *why, size_t why_size) {
    const char *url = s_field(x->cfg, "url");
    if (!url || !header_text_ok(url) || s_headers(x->cfg, delivery_id, x->body, &x->hd) != 0) {
        snprintf(why, why_size,
                 "a header or the URL was refused (control characters, or no"
                 " signing secret)");
        return -1;
    }
    x->h = curl_easy_init();
    if (!x->h || egress_curl_apply(s_egress, x->h, url, (long)timeout_ms, &x->call) != 0 ||
        curl_easy_setopt(x->h, CURLOPT_HTTPHEADER, x->hd) != CURLE_OK ||
        curl_easy_setopt(x->h, CURLOPT_POSTFIELDSIZE, (long)strlen(x->body)) != CURLE_OK ||
        curl_easy_setopt(x->h, CURLOPT_POSTFIELDS, x->body) != CURLE_OK ||
        curl_easy_setopt(x->h, CURLOPT_PRIVATE, x) != CURLE_OK) {
        snprintf(why, why_size, "%s", x->h ? x->call.why : "no curl handle");
        return x->h ? -1 : 1;
    }
    if (curl_multi_add_handle(self->multi, x->h) != CURLM_OK) {
        snprintf(why, why_size, "the transfer could not be added");
        return 1;
    }
    x->started_ms = id_now_ms();
    self->xfers[self->n_xfers++] = x;
    return 0;
}

/* Starts what one claimed config is due, to end by deadline_ms (id_now_ms clock): a POST on
 * the multi handle, or at once a record (nothing to send), a deferral (over a rate) or a give
 * up. Takes cfg. */
static void s_start(a2a_pusher_t *self, json_t *cfg, int64_t deadline_ms) {
    pool_t *pool = self->pool;
    const char *task_id = s_field(cfg, "task_id");
    const char *owner = s_field(cfg, "owner_id");
    PGconn *conn = pool_get(pool);
    a2a_task_t t;
    a2a_lookup_t rc = a2a_task_load(conn, task_id, owner, false, &t);
    pool_put(pool, conn);
    if (rc != A2A_TASK_FOUND) {
        /* A task that is gone (its chat deleted) has nothing more to say; a read that failed
         * is retried after the claim lapses. */
        if (rc == A2A_TASK_MISSING) {
            s_record(pool, cfg, "gone", true, true);
        }
        json_decref(cfg);
        return;
    }
    const char *state = s_next_state(&t, task_id, s_field(cfg, "sent"));
    if (!state) {
        s_record(pool, cfg, t.state, true, t.terminal);
        json_decref(t.task);
        json_decref(cfg);
        return;
    }
    char *delivery_id = mem_printf("%s/%s", task_id, state);
    json_t *status = jsonnumber_deep_copy(json_object_get(t.task, "status"));
    json_object_set_new(status, "state", json_string(state));
    if (strcmp(state, t.state) != 0) {
        json_object_del(status, "message"); /* the WORKING step carries no answer */
    }
    json_t *payload =
        json_pack("{s:{s:s,s:s,s:o,s:{s:s}}}", "statusUpdate", "taskId", task_id, "contextId",
                  t.context_id, "status", status, "metadata", "chatfleetDeliveryId", delivery_id);
    s_xfer_t *x = mem_calloc(1, sizeof *x);
    x->cfg = cfg;
    x->state = mem_strdup(state);
    x->final = t.terminal && !strcmp(state, t.state);
    x->body = jsonout_dumps(payload);
    json_decref(payload);
    json_decref(t.task);
    /* The local buckets first (no query): a config over its own rate, or a user over theirs,
     * waits for its next token; then the cluster-wide count per user. */
    char *key = mem_printf("%s/%s/%s", owner, task_id, s_field(cfg, "id"));
    int64_t now = id_now_ms();
    int64_t retry_ms = 0;
    char why[EGRESS_WHY_MAX];
    if (!ratelimit_take(self->config_rate, key, now, &retry_ms)) {
        s_put_off(pool, cfg, retry_ms, "config_rate");
    } else if (!ratelimit_take(self->user_rate, owner, now, &retry_ms)) {
        s_put_off(pool, cfg, retry_ms, "user_rate");
    } else if (!s_rate_take(pool, owner)) {
        s_defer(pool, cfg);
    } else if (deadline_ms - now < 100) {
        s_put_off(pool, cfg, 0, "claim_lapsing"); /* the claim outlived its deadline: retake */
    } else {
        int started = s_post_start(self, x, delivery_id, deadline_ms - now, why, sizeof why);
        if (started < 0) {
            s_give_up(pool, cfg, why);
        } else if (started > 0) {
            log_warn("a2a_push_not_started", "task_id=%s reason=\"%s\"", task_id, why);
            s_record(pool, cfg, state, false, false);
        } else {
            x = NULL; /* in flight: s_finish records it */
        }
    }
    free(key);
    free(delivery_id);
    s_xfer_free(&x);
}

/* Records the end of one transfer (its result rc) and frees it. */
static void s_finish(a2a_pusher_t *self, s_xfer_t *x, CURLcode rc) {
    for (int i = 0; i < self->n_xfers; i++) {
        if (self->xfers[i] == x) {
            self->xfers[i] = self->xfers[--self->n_xfers];
            break;
        }
    }
    (void)curl_multi_remove_handle(self->multi, x->h); /* only fails on a foreign handle */
    long status = 0;
    (void)curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &status); /* 0 when none */
    /* A 2xx whose body ran past EGRESS_BODY_MAX_BYTES was cut off unread: still an answer. */
    bool answered = rc == CURLE_OK || (rc == CURLE_WRITE_ERROR && x->call.cut);
    bool ok = answered && status >= 200 && status < 300;
    log_info("a2a_push_delivered",
             "task_id=%s config_id=%s state=%s ok=%d status=%ld ms=%lld error=\"%s\"",
             s_field(x->cfg, "task_id"), s_field(x->cfg, "id"), x->state, ok, status,
             (long long)(id_now_ms() - x->started_ms),
             x->call.refused                  ? x->call.why
             : rc != CURLE_OK && !x->call.cut ? curl_easy_strerror(rc)
                                              : "");
    s_record(self->pool, x->cfg, x->state, ok, ok && x->final);
    s_xfer_free(&x);
}

/* Claims due configs no live pusher holds, as many as free slots allow (A2A_PUSH_BATCH at most),
 * fairly: each owner's due configs are ranked by next_at after the ones this pusher has in
 * flight, only ranks up to CHATFLEET_PUSH_USER_INFLIGHT_MAX are taken, and rank 1 of every
 * owner before rank 2 of any. A claim lapses after the delivery deadline and
 * A2A_PUSH_CLAIM_MARGIN_MS; each is started. Returns how many were claimed. */
static int s_claim(a2a_pusher_t *self) {
    int64_t room = s_inflight_max - self->n_xfers;
    room = room < A2A_PUSH_BATCH ? room : A2A_PUSH_BATCH;
    if (room <= 0) {
        return 0;
    }
    char claim[DB_PARAM_INT64_LEN];
    char batch[DB_PARAM_INT64_LEN];
    char per_user[DB_PARAM_INT64_LEN];
    /* The owners in flight, a uuid[] literal: one entry per transfer (uuids need no quotes). */
    size_t busy_size = 3 + (size_t)self->n_xfers * (ID_UUID_LEN + 1);
    char *busy = mem_calloc(1, busy_size);
    size_t at = 0;
    busy[at++] = '{';
    for (int i = 0; i < self->n_xfers; i++) {
        at += (size_t)snprintf(busy + at, busy_size - at, "%s%.*s", i ? "," : "", ID_UUID_LEN,
                               s_field(self->xfers[i]->cfg, "owner_id"));
    }
    busy[at] = '}';
    const char *p[] = {db_param_int64(claim, s_timeout_ms + A2A_PUSH_CLAIM_MARGIN_MS),
                       db_param_int64(batch, room), busy,
                       db_param_int64(per_user, s_user_inflight_max)};
    int64_t deadline_ms = id_now_ms() + s_timeout_ms;
    PGconn *conn = pool_get(self->pool);
    json_t *due = s_query(
        conn,
        "WITH busy AS (SELECT b.owner_id, count(*) AS n FROM unnest($3::uuid[]) AS b(owner_id)"
        " GROUP BY b.owner_id), ranked AS (SELECT c.owner_id, c.task_id, c.id, c.next_at,"
        " row_number() OVER (PARTITION BY c.owner_id ORDER BY c.next_at) + coalesce(b.n, 0) AS rn"
        " FROM a2a_push_configs c LEFT JOIN busy b ON b.owner_id = c.owner_id WHERE NOT c.done"
        " AND c.next_at <= now() AND (c.claimed_until IS NULL OR c.claimed_until < now())),"
        " pick AS (SELECT owner_id, task_id, id FROM ranked WHERE rn <= $4::int ORDER BY rn,"
        " next_at LIMIT $2::int)"
        " UPDATE a2a_push_configs p SET claimed_until = now() + $1::bigint * interval"
        " '1 millisecond' FROM (SELECT q.owner_id, q.task_id, q.id FROM a2a_push_configs q JOIN"
        " pick k ON k.owner_id = q.owner_id AND k.task_id = q.task_id AND k.id = q.id WHERE NOT"
        " q.done AND (q.claimed_until IS NULL OR q.claimed_until < now()) FOR UPDATE OF q SKIP"
        " LOCKED) d WHERE p.owner_id = d.owner_id AND p.task_id = d.task_id AND p.id = d.id"
        " RETURNING jsonb_build_object('owner_id', p.owner_id, 'task_id', p.task_id,"
        " 'id', p.id, 'url', p.url, 'token', p.token, 'scheme', p.auth_scheme, 'credentials',"
        " p.auth_credentials, 'sent', p.sent_state, 'attempts', p.attempts, 'secret',"
        " p.signing_secret)",
        4, p, &(int){0});
    pool_put(self->pool, conn);
    free(busy);
    size_t i;
    json_t *cfg;
    json_array_foreach(due, i, cfg) {
        s_start(self, json_incref(cfg), deadline_ms);
    }
    int n = (int)json_array_size(due);
    json_decref(due);
    return n;
}

/* The pusher's one loop: claim every A2A_PUSH_POLL_MS (at once again after a full batch), drive
 * every transfer, record each that ends. On stop, the transfers in flight are abandoned and
 * their claims released: their deliveries stay due, for this or another gateway. */
static void *s_run(void *arg) {
    a2a_pusher_t *self = arg;
    int64_t next_pass = 0;
    while (!atomic_load(&self->stop)) {
        int64_t now = id_now_ms();
        if (now >= next_pass) {
            next_pass = now + (s_claim(self) >= A2A_PUSH_BATCH ? 0 : A2A_PUSH_POLL_MS);
        }
        int running = 0;
        CURLMcode mc = curl_multi_perform(self->multi, &running);
        CURLMsg *msg;
        int left = 0;
        while ((msg = curl_multi_info_read(self->multi, &left))) {
            s_xfer_t *x = NULL;
            if (msg->msg == CURLMSG_DONE &&
                curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x) == CURLE_OK &&
                x) {
                s_finish(self, x, msg->data.result);
            }
        }
        now = id_now_ms();
        int wait_ms = next_pass > now ? (int)(next_pass - now) : 0;
        if (mc == CURLM_OK) {
            mc = curl_multi_poll(self->multi, NULL, 0, wait_ms, NULL);
        }
        if (mc != CURLM_OK) {
            log_error("a2a_push_multi_failed", "error=\"%s\"", curl_multi_strerror(mc));
            struct timespec pause = {.tv_nsec = (long)A2A_PUSH_POLL_MS * 1000000L};
            nanosleep(&pause, NULL);
        }
    }
    while (self->n_xfers > 0) {
        s_xfer_t *x = self->xfers[--self->n_xfers];
        (void)curl_multi_remove_handle(self->multi, x->h);
        s_release(self->pool, x->cfg, "next_at = now()");
        s_xfer_free(&x);
    }
    return NULL;
}

a2a_pusher_t *a2a_pusher_new(pool_t *pool) {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        log_error("curl_global_init_failed", NULL);
        return NULL;
    }
    a2a_pusher_t *self = mem_calloc(1, sizeof *self);
    self->pool = pool;
    self->multi = curl_multi_init();
    self->user_rate = ratelimit_new((double)s_deliveries_per_min / 60.0,
                                    (double)s_deliveries_per_min, A2A_PUSH_RATE_KEYS);
    self->config_rate =
        ratelimit_new((double)s_config_per_min / 60.0, A2A_PUSH_CONFIG_BURST, A2A_PUSH_RATE_KEYS);
    self->xfers = mem_calloc((size_t)s_inflight_max, sizeof *self->xfers);
    atomic_init(&self->stop, false);
    if (!self->multi || !self->user_rate || !self->config_rate ||
        pthread_create(&self->thread, NULL, s_run, self) != 0) {
        curl_multi_cleanup(self->multi);
        ratelimit_destroy(&self->user_rate);
        ratelimit_destroy(&self->config_rate);
        free(self->xfers);
        free(self);
        return NULL;
    }
    return self;
}

void a2a_pusher_destroy(a2a_pusher_t **self_p) {
    a2a_pusher_t *self = *self_p;
    if (!self) {
        return;
    }
    atomic_store(&self->stop, true);
    (void)curl_multi_wakeup(self->multi); /* ends curl_multi_poll at once */
    pthread_join(self->thread, NULL);
    curl_multi_cleanup(self->multi);
    ratelimit_destroy(&self->user_rate);
    ratelimit_destroy(&self->config_rate);
    free(self->xfers);
    free(self);
    *self_p = NULL;
}
