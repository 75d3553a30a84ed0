/* a2a_stream: SendStreamingMessage over a feed; see a2a_stream.h. */
#include "a2a_stream.h"
#include "jsonnumber.h"
#include "jsonstrict.h"
#include "a2a_task.h"
#include "db.h"
#include "episode.h"
#include "feed.h"
#include "id.h"
#include "log.h"
#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    feed_t *feed;
    gateway_t *gw;
    json_t *rpc_id;
    char task_id[A2A_TASK_ID_MAX];
    char chat_id[ID_UUID_LEN + 1];
    char user_id[ID_UUID_LEN + 1];
    bool legacy;
    bool sent_task;
    bool closed;
    char state[32];
    episode_t *episode;       /* the turn's current episode: its text deltas (episode.h) */
    int64_t snapshot_version; /* of the chat, when the episode was last synced */
    int64_t ended_ms;         /* when a read first found the task ended (0: not yet) */
} s_stream_t;

/* The chat as the task's read saw it. */
typedef struct {
    int64_t snapshot_version;
    int64_t history_version;
    int64_t generation_attempt;
    char worker_id[ID_UUID_LEN + 1];
} s_chat_t;

/* Sends one JSON-RPC result (steals result). */
static void s_send(s_stream_t *s, const char *type, json_t *result) {
    json_t *env = json_pack("{s:s,s:O,s:o}", "jsonrpc", "2.0", "id", s->rpc_id, "result", result);
    feed_emit(s->feed, type, env, 0);
}

static json_t *s_status_update(s_stream_t *s, json_t *status, bool final) {
    json_t *u =
        json_pack("{s:s,s:s,s:O}", "taskId", s->task_id, "contextId", s->chat_id, "status", status);
    if (!s->legacy) {
        return json_pack("{s:o}", "statusUpdate", u);
    }
    json_object_set_new(u, "kind", json_string("status-update"));
    json_object_set_new(u, "final", json_boolean(final));
    return u;
}

static json_t *s_artifact_update(s_stream_t *s, json_t *artifact) {
    json_t *u = json_pack("{s:s,s:s,s:O,s:b}", "taskId", s->task_id, "contextId", s->chat_id,
                          "artifact", artifact, "lastChunk", 1);
    if (!s->legacy) {
        return json_pack("{s:o}", "artifactUpdate", u);
    }
    json_object_set_new(u, "kind", json_string("artifact-update"));
    return u;
}

static void s_finish(s_stream_t *s, json_t *task) {
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(task, "artifacts"), i, a) {
        s_send(s, "artifact", s_artifact_update(s, a));
    }
    s_send(s, "status", s_status_update(s, json_object_get(task, "status"), true));
    s->closed = true;
    feed_close(s->feed);
}

/* The first event: the task as it is, without what only its end may carry. */
static void s_send_task(s_stream_t *s, const a2a_task_t *t) {
    s->sent_task = true;
    json_t *first = jsonnumber_deep_copy(t->task);
    json_object_set_new(first, "artifacts", json_array());
    if (!t->terminal) {
        json_object_del(json_object_get(first, "status"), "message");
    }
    s_send(s, "task", s->legacy ? first : json_pack("{s:o}", "task", first));
}

/* Reads the task and its chat in one snapshot, so that the episode a working task's read
 * names is its own turn's. A2A_TASK_FOUND with *t (the caller frees t->task) and *c (zero
 * when the task has no chat row: a request refused for an invalid schema in a new context). */
static a2a_lookup_t s_read(s_stream_t *s, a2a_task_t *t, s_chat_t *c) {
    PGconn *conn = pool_get(s->gw->pool);
    a2a_lookup_t rc = A2A_TASK_DB_ERROR;
    if (db_exec(conn, NULL, 0, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", 0, NULL) ==
        DB_OK) {
        rc = a2a_task_load(conn, s->task_id, s->user_id, s->legacy, t);
    }
    *c = (s_chat_t){0};
    if (rc == A2A_TASK_FOUND) {
        const char *p[] = {s->chat_id, s->user_id};
        db_err_t e;
        PGresult *res = db_query(conn, &e, NULL, 0,
                                 "SELECT snapshot_version, history_version, generation_attempt,"
                                 " coalesce(worker_id::text, '') FROM chats"
                                 " WHERE id = $1 AND owner_id = $2",
                                 2, p);
        if (!res) {
            json_decref(t->task);
            rc = A2A_TASK_DB_ERROR;
        } else if (PQntuples(res) == 1) {
            c->snapshot_version = db_int64(res, 0, 0);
            c->history_version = db_int64(res, 0, 1);
            c->generation_attempt = db_int64(res, 0, 2);
            snprintf(c->worker_id, sizeof c->worker_id, "%s", PQgetvalue(res, 0, 3));
        }
        PQclear(res);
    }
    PQclear(PQexec(conn, rc == A2A_TASK_FOUND ? "COMMIT" : "ROLLBACK"));
    pool_put(s->gw->pool, conn);
    return rc;
}

static void s_on_sync(void *owner, const feed_change_t *change, int64_t asked_ms) {
    (void)asked_ms;
    (void)change; /* one task of one chat, read whole */
    s_stream_t *s = owner;
    if (s->closed) {
        return;
    }
    a2a_task_t t;
    s_chat_t c;
    if (s_read(s, &t, &c) != A2A_TASK_FOUND) {
        return; /* a failed read changes nothing; the poller retries */
    }
    if (!s->sent_task) {
        s_send_task(s, &t);
    } else if (strcmp(t.state, s->state) != 0 && !t.terminal) {
        s_send(s, "status", s_status_update(s, json_object_get(t.task, "status"), false));
    }
    snprintf(s->state, sizeof s->state, "%s", t.state);
    if (t.terminal) {
        /* The episode's last parts may not have come live before the turn ended: its tail
         * from the log and the worker, then the artifact (ARCHITECTURE.md §8, "A2A"). A worker
         * that did not answer in time is asked again at the next tick, for a while. */
        int64_t now = id_now_ms();
        s->ended_ms = s->ended_ms ? s->ended_ms : now;
        bool whole = episode_finish(s->episode);
        if (!whole && now - s->ended_ms < A2A_STREAM_TAIL_MS) {
            feed_sync_later(s->feed, 0);
        } else {
            if (!whole) {
                log_warn("a2a_stream_tail_missing", "chat_id=%s task_id=%s", s->chat_id,
                         s->task_id);
            }
            s_finish(s, t.task);
        }
    } else if (strcmp(t.state, "TASK_STATE_SUBMITTED") != 0 &&
               (!episode_following(s->episode) || c.snapshot_version > s->snapshot_version)) {
        /* The chat's episode is this turn's (a queued task's chat runs another turn): what it
         * streamed so far, then live parts. */
        s->snapshot_version = c.snapshot_version;
        episode_sync(s->episode, c.history_version, c.generation_attempt, c.worker_id);
    }
    json_decref(t.task);
}

/* A text part of the answer: a working status message carrying the delta, whose message id
 * names its episode and seq (a retry's deltas start a new episode). */
static void s_on_episode_part(void *owner, const episode_part_t *part) {
    s_stream_t *s = owner;
    if (strcmp(part->role, "assistant") != 0) {
        return;
    }
    json_t *p = jsonstrict_load_stored(part->json, part->len);
    const char *text = json_string_value(json_object_get(p, "text"));
    if (text && *text) {
        char mid[96];
        snprintf(mid, sizeof mid, "%s-part-%lld-%lld-%lld", s->task_id,
                 (long long)part->history_version, (long long)part->generation_attempt,
                 (long long)part->seq);
        json_t *msg = json_pack("{s:s,s:s,s:s,s:s,s:[o]}", "messageId", mid, "role",
                                s->legacy ? "agent" : "ROLE_AGENT", "contextId", s->chat_id,
                                "taskId", s->task_id, "parts",
                                s->legacy ? json_pack("{s:s,s:s}", "kind", "text", "text", text)
                                          : json_pack("{s:s}", "text", text));
        if (s->legacy) {
            json_object_set_new(msg, "kind", json_string("message"));
        }
        json_t *status =
            json_pack("{s:s,s:o}", "state", a2a_task_state_name("TASK_STATE_WORKING", s->legacy),
                      "message", msg);
        s_send(s, "status", s_status_update(s, status, false));
        json_decref(status);
    }
    json_decref(p);
}

static const episode_ops_t s_episode_ops = {NULL, s_on_episode_part};

/* A live part of the chat: the episode delivers it in order, or fills a gap first. */
static void s_on_part(void *owner, hub_part_t *hp) {
    s_stream_t *s = owner;
    if (!s->closed) {
        episode_live(s->episode, hp);
    }
}

static void s_on_destroy(void *owner) {
    s_stream_t *s = owner;
    log_info("a2a_stream_closed", "chat_id=%s task_id=%s state=%s", s->chat_id, s->task_id,
             s->state);
    episode_destroy(&s->episode);
    json_decref(s->rpc_id);
    free(s);
}

static const feed_ops_t s_ops = {s_on_sync, s_on_part, s_on_destroy, NULL};

void a2a_stream_start(gateway_t *gw, const http_req_t *req, http_resp_t *resp, json_t *rpc_id,
                      const char *task_id, const char *chat_id, bool legacy) {
    s_stream_t *s = mem_calloc(1, sizeof *s);
    s->gw = gw;
    s->rpc_id = json_incref(rpc_id);
    s->legacy = legacy;
    snprintf(s->task_id, sizeof s->task_id, "%s", task_id);
    snprintf(s->chat_id, sizeof s->chat_id, "%s", chat_id);
    snprintf(s->user_id, sizeof s->user_id, "%s", req->user_id);
    s->episode = episode_new(gw, s->chat_id, &s_episode_ops, s);
    /* The first job's sync sends the task, before any live part it may hold. */
    resp->raw =
        feed_new(gw->hub, gw->streams, req->conn, s->chat_id, s->user_id, &s_ops, s, &s->feed);
    if (!resp->raw) {
        log_info("a2a_stream_refused", "chat_id=%s task_id=%s reason=streams_per_user", s->chat_id,
                 s->task_id);
        episode_destroy(&s->episode);
        json_decref(s->rpc_id);
        free(s);
        http_busy(resp, "too many open streams for this user");
        return;
    }
    log_info("a2a_stream_opened", "chat_id=%s task_id=%s", s->chat_id, s->task_id);
    resp->status = 200;
}
