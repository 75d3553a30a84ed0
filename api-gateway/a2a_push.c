/* a2a_push: push notification configs and their delivery; see a2a_push.h. */
#include "a2a_push.h"
#include "a2a_task.h"
#include "gateway.h"
#include "id.h"
#include "jsonout.h"
#include "log.h"
#include "mem.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { RPC_INVALID_PARAMS = -32602, RPC_INTERNAL = -32603, A2A_TASK_NOT_FOUND = -32001 };

/* The public shape of a config row, v1 (TaskPushNotificationConfig) or v0.3. */
#define S_CONFIG_JSON                                                                              \
    "jsonb_strip_nulls(jsonb_build_object('id', p.id, 'taskId', p.task_id, 'url', p.url,"          \
    " 'token', p.token, 'authentication', CASE WHEN p.auth_scheme IS NOT NULL THEN"                \
    " jsonb_strip_nulls(jsonb_build_object('scheme', p.auth_scheme, 'credentials',"                \
    " p.auth_credentials)) END))"

static json_t *s_invalid(const char *field, const char *detail) {
    return json_pack("{s:s,s:s}", "field", field, "detail", detail);
}

/* A v1 config as v0.3 shows it: {"taskId","pushNotificationConfig":{"id","url","token",
 * "authentication":{"schemes":[...],"credentials"}}}. Steals c. */
static json_t *s_legacy(json_t *c) {
    json_t *inner = json_deep_copy(c);
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

static int s_read_config(json_t *cfg, const char *at, bool legacy, s_config_t *c, json_t **data) {
    char field[96];
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
    if (!c->id) {
        if (id_uuid_new(c->id_buf) != 0) {
            return RPC_INTERNAL;
        }
        c->id = c->id_buf;
    }
    return 0;
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

static json_t *s_query(PGconn *conn, const char *sql, int n, const char *const *p, int *code) {
    http_resp_t h = {0};
    json_t *rows = gateway_rows(conn, sql, n, p, &h);
    free(h.body);
    if (!rows) {
        *code = RPC_INTERNAL;
    }
    return rows;
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
        const char *p[] = {user_id, tid, c.id, c.url, c.token, c.scheme, c.credentials};
        rows = s_query(conn,
                       "INSERT INTO a2a_push_configs AS p (owner_id, task_id, id, url, token,"
                       " auth_scheme, auth_credentials) VALUES ($1::uuid, $2, $3, $4, $5, $6, $7)"
                       " ON CONFLICT (owner_id, task_id, id) DO UPDATE SET url = $4, token = $5,"
                       " auth_scheme = $6, auth_credentials = $7, attempts = 0, next_at = now(),"
                       " done = false RETURNING " S_CONFIG_JSON,
                       7, p, &code);
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

struct a2a_pusher {
    pool_t *pool;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stop;
};

static size_t s_discard(char *p, size_t size, size_t n, void *ctx) {
    (void)p;
    (void)ctx;
    return size * n;
}

/* POSTs body to the config's webhook; true on a 2xx answer. */
static bool s_post(json_t *cfg, const char *delivery_id, const char *body) {
    CURL *h = curl_easy_init();
    if (!h) {
        return false;
    }
    struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/a2a+json");
    char *line = mem_printf("X-A2A-Delivery-Id: %s", delivery_id);
    hd = curl_slist_append(hd, line);
    free(line);
    const char *token = json_string_value(json_object_get(cfg, "token"));
    const char *scheme = json_string_value(json_object_get(cfg, "scheme"));
    const char *cred = json_string_value(json_object_get(cfg, "credentials"));
    if (token) {
        line = mem_printf("X-A2A-Notification-Token: %s", token);
        hd = curl_slist_append(hd, line);
        free(line);
    }
    if (scheme) {
        line = mem_printf("Authorization: %s %s", scheme, cred ? cred : "");
        hd = curl_slist_append(hd, line);
        free(line);
    }
    curl_easy_setopt(h, CURLOPT_URL, json_string_value(json_object_get(cfg, "url")));
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)A2A_PUSH_TIMEOUT_MS);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, s_discard);
    long status = 0;
    CURLcode rc = curl_easy_perform(h);
    if (rc == CURLE_OK) {
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    }
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    return rc == CURLE_OK && status >= 200 && status < 300;
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
    char ms[24];
    snprintf(ms, sizeof ms, "%lld", (long long)(ok ? 0 : backoff));
    const char *p[] = {json_string_value(json_object_get(cfg, "owner_id")),
                       json_string_value(json_object_get(cfg, "task_id")),
                       json_string_value(json_object_get(cfg, "id")),
                       ok ? state : NULL,
                       ms,
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

/* Delivers what one claimed config is due. */
static void s_deliver(pool_t *pool, json_t *cfg) {
    const char *task_id = json_string_value(json_object_get(cfg, "task_id"));
    const char *owner = json_string_value(json_object_get(cfg, "owner_id"));
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
        return;
    }
    const char *state = s_next_state(&t, task_id, json_string_value(json_object_get(cfg, "sent")));
    if (!state) {
        s_record(pool, cfg, t.state, true, t.terminal);
        json_decref(t.task);
        return;
    }
    char *delivery_id = mem_printf("%s/%s", task_id, state);
    json_t *status = json_deep_copy(json_object_get(t.task, "status"));
    json_object_set_new(status, "state", json_string(state));
    if (strcmp(state, t.state) != 0) {
        json_object_del(status, "message"); /* the WORKING step carries no answer */
    }
    json_t *payload =
        json_pack("{s:{s:s,s:s,s:o,s:{s:s}}}", "statusUpdate", "taskId", task_id, "contextId",
                  t.context_id, "status", status, "metadata", "chatfleetDeliveryId", delivery_id);
    char *body = jsonout_dumps(payload);
    json_decref(payload);
    bool ok = s_post(cfg, delivery_id, body);
    log_info("a2a_push_delivered", "task_id=%s config_id=%s state=%s ok=%d", task_id,
             json_string_value(json_object_get(cfg, "id")), state, ok);
    s_record(pool, cfg, state, ok, ok && t.terminal && !strcmp(state, t.state));
    free(body);
    free(delivery_id);
    json_decref(t.task);
}

/* Claims the due configs no live pusher holds (FOR UPDATE SKIP LOCKED, then a claim that
 * lapses after A2A_PUSH_CLAIM_MS) and delivers each. */
static void s_pass(pool_t *pool) {
    PGconn *conn = pool_get(pool);
    int code = 0;
    char claim[24];
    char batch[24];
    snprintf(claim, sizeof claim, "%d", A2A_PUSH_CLAIM_MS);
    snprintf(batch, sizeof batch, "%d", A2A_PUSH_BATCH);
    const char *p[] = {claim, batch};
    json_t *due = s_query(
        conn,
        "UPDATE a2a_push_configs p SET claimed_until = now() + $1::bigint * interval"
        " '1 millisecond' FROM (SELECT owner_id, task_id, id FROM a2a_push_configs WHERE NOT done"
        " AND next_at <= now() AND (claimed_until IS NULL OR claimed_until < now()) ORDER BY"
        " next_at LIMIT $2::int FOR UPDATE SKIP LOCKED) d WHERE p.owner_id = d.owner_id AND "
        "p.task_id = d.task_id AND"
        " p.id = d.id RETURNING jsonb_build_object('owner_id', p.owner_id, 'task_id', p.task_id,"
        " 'id', p.id, 'url', p.url, 'token', p.token, 'scheme', p.auth_scheme, 'credentials',"
        " p.auth_credentials, 'sent', p.sent_state, 'attempts', p.attempts)",
        2, p, &code);
    pool_put(pool, conn);
    size_t i;
    json_t *cfg;
    json_array_foreach(due, i, cfg) {
        s_deliver(pool, cfg);
    }
    json_decref(due);
}

static void *s_run(void *arg) {
    a2a_pusher_t *self = arg;
    pthread_mutex_lock(&self->lock);
    while (!self->stop) {
        pthread_mutex_unlock(&self->lock);
        s_pass(self->pool);
        pthread_mutex_lock(&self->lock);
        if (!self->stop) {
            struct timespec at = id_timespec_at(id_now_ms() + A2A_PUSH_POLL_MS);
            pthread_cond_timedwait(&self->wake, &self->lock, &at);
        }
    }
    pthread_mutex_unlock(&self->lock);
    return NULL;
}

a2a_pusher_t *a2a_pusher_new(pool_t *pool) {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        log_error("curl_global_init_failed", NULL);
        return NULL;
    }
    a2a_pusher_t *self = mem_calloc(1, sizeof *self);
    self->pool = pool;
    pthread_mutex_init(&self->lock, NULL);
    id_cond_init(&self->wake);
    if (pthread_create(&self->thread, NULL, s_run, self) != 0) {
        pthread_cond_destroy(&self->wake);
        pthread_mutex_destroy(&self->lock);
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
    pthread_mutex_lock(&self->lock);
    self->stop = true;
    pthread_cond_signal(&self->wake);
    pthread_mutex_unlock(&self->lock);
    pthread_join(self->thread, NULL);
    pthread_cond_destroy(&self->wake);
    pthread_mutex_destroy(&self->lock);
    free(self);
    *self_p = NULL;
}
