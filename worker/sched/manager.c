/* manager: see manager.h. */
#include "manager.h"
#include "actor.h"
#include "bus.h"
#include "db.h"
#include "dbpool.h"
#include "log.h"
#include "mem.h"
#include "runner.h"

#include <czmq.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct manager {
    zactor_t *actor;
};

typedef struct s_entry {
    runner_t *runner;
    bool dying;                /* cleaned up: waiting for its tasks to end before it is freed */
    void *handle;              /* its place in self->entries */
    zlistx_t *tasks;           /* s_task_t * of this runner */
    struct s_entry *next_same; /* the next entry of the same chat (self->by_chat) */
} s_entry_t;

typedef struct {
    task_t *task;
    s_entry_t *owner; /* NULL once the owner was freed (never: owners wait for their tasks) */
    bool drain;       /* an abandon task of the drain */
    void *handle;     /* its place in self->tasks */
    char key[24];     /* its id in self->by_task */
} s_task_t;

typedef struct {
    zsock_t *pipe;
    manager_args_t args;
    zsock_t *inbox;
    zactor_t *sync;
    bus_subscriber_t *sub;
    zloop_t *loop;
    zlistx_t *entries; /* s_entry_t * */
    zlistx_t *tasks;   /* s_task_t * */
    zhashx_t *by_chat; /* chat id -> the first s_entry_t of that chat (next_same links more) */
    zhashx_t *by_task; /* task id (decimal) -> s_task_t: thousands of turns in flight must not
                          make each event a walk over every runner and task */
    uint64_t next_task_id;
    bool draining;
    bool drain_replied;
    int64_t spawned;
    int64_t cleanups;
} self_t;

/* --- The sync loop: its own thread and connection. --- */

typedef struct {
    leaseset_t *leases;
    char url[MANAGER_URL_MAX];
    char inbox[128];
    int64_t sync_ms;
    int64_t statement_timeout_ms;
} s_sync_args_t;

/* Reads the owned chats (only those in `only` when it is not NULL) in one statement and sends
 * the manager their rows as one ROWS message. */
static void s_sync_once(PGconn **conn, dbpool_t *pool, s_sync_args_t *a, zsock_t *push,
                        zhashx_t *only) {
    lease_t *leases = NULL;
    size_t all = leaseset_snapshot(a->leases, &leases);
    size_t n = 0;
    for (size_t i = 0; i < all; i++) {
        if (!only || zhashx_lookup(only, leases[i].chat_id)) {
            leases[n++] = leases[i];
        }
    }
    if (n == 0) {
        free(leases);
        return;
    }
    if (!*conn) {
        *conn = dbpool_get(pool, -1);
        if (!*conn) {
            free(leases);
            return;
        }
    }
    size_t cap = n * (ID_UUID_LEN + 1) + 3;
    char *ids = mem_alloc(cap);
    size_t off = 0;
    ids[off++] = '{';
    for (size_t i = 0; i < n; i++) {
        off += (size_t)snprintf(ids + off, cap - off, "%s%s", i ? "," : "", leases[i].chat_id);
    }
    snprintf(ids + off, cap - off, "}");
    const char *p[] = {ids};
    db_err_t e;
    char err[200];
    PGresult *res = db_query(*conn, &e, err, sizeof err,
                             "SELECT id::text, snapshot_version, coalesce(worker_id::text, ''),"
                             " coalesce(runner_id::text, ''), history_version, queue_version,"
                             " retry_state_version, generation_attempt, status::text, archived"
                             " FROM chats WHERE id = ANY($1::uuid[])",
                             1, p);
    free(ids);
    if (!res) {
        char q[240];
        log_warn("sync_failed", "reason=%s", log_quote(err, q, sizeof q));
        dbpool_put(pool, *conn); /* closes it when broken */
        *conn = NULL;
        free(leases);
        return;
    }
    /* Rows by chat id: thousands of owned chats must not make a sync quadratic. */
    zhashx_t *rows = zhashx_new();
    for (int r = 0; r < PQntuples(res); r++) {
        zhashx_update(rows, PQgetvalue(res, r, 0), (void *)(intptr_t)(r + 1));
    }
    zmsg_t *m = zmsg_new();
    zmsg_addstr(m, "ROWS");
    for (size_t i = 0; i < n; i++) {
        hint_update_t u;
        memset(&u, 0, sizeof u);
        snprintf(u.chat_id, sizeof u.chat_id, "%s", leases[i].chat_id);
        /* A deleted chat: a row no runner can own, newer than anything seen. */
        u.snapshot_version = INT64_MAX;
        snprintf(u.status, sizeof u.status, "waiting");
        int r = (int)(intptr_t)zhashx_lookup(rows, leases[i].chat_id) - 1;
        if (r >= 0) {
            u.snapshot_version = db_int64(res, r, 1);
            snprintf(u.worker_id, sizeof u.worker_id, "%s", PQgetvalue(res, r, 2));
            snprintf(u.runner_id, sizeof u.runner_id, "%s", PQgetvalue(res, r, 3));
            u.history_version = db_int64(res, r, 4);
            u.queue_version = db_int64(res, r, 5);
            u.retry_state_version = db_int64(res, r, 6);
            u.generation_attempt = db_int64(res, r, 7);
            snprintf(u.status, sizeof u.status, "%s", PQgetvalue(res, r, 8));
            u.archived = db_bool(res, r, 9);
        }
        zmsg_addmem(m, &u, sizeof u);
    }
    zhashx_destroy(&rows);
    PQclear(res);
    free(leases);
    if (zmsg_send(&m, push) != 0) {
        zmsg_destroy(&m);
    }
}

static void s_sync_actor(zsock_t *pipe, void *argp) {
    s_sync_args_t a = *(s_sync_args_t *)argp;
    zsock_t *push = zsock_new(ZMQ_PUSH);
    ASSERT(push && zsock_connect(push, "%s", a.inbox) == 0);
    dbpool_t *pool = dbpool_new(a.url, "chatfleet-worker sync", (int)a.statement_timeout_ms, 1);
    PGconn *conn = NULL;
    zsock_signal(pipe, 0);
    int64_t next = id_now_ms() + a.sync_ms;
    zhashx_t *soon = zhashx_new(); /* chats spawned since the last pass: read at once */
    zpoller_t *poller = zpoller_new(pipe, NULL);
    bool term = false;
    while (!term) {
        int64_t now = id_now_ms();
        void *which = zpoller_wait(poller, (int)(next > now ? next - now : 0));
        /* Every command waiting now is taken before one pass: a burst of spawns costs one
         * read of those chats, not one read of every owned chat per spawn. */
        while (!term && which == pipe && (zsock_events(pipe) & ZMQ_POLLIN)) {
            char *cmd = NULL, *chat = NULL;
            if (zstr_recvx(pipe, &cmd, &chat, NULL) < 1 || streq(cmd, "$TERM")) {
                term = true;
            } else if (chat) {
                zhashx_update(soon, chat, (void *)1); /* "NOW" chat_id */
            }
            zstr_free(&cmd);
            zstr_free(&chat);
        }
        if (term) {
            break;
        }
        if (zhashx_size(soon) > 0) {
            s_sync_once(&conn, pool, &a, push, soon);
            zhashx_purge(soon);
        }
        if (id_now_ms() >= next) {
            s_sync_once(&conn, pool, &a, push, NULL);
            next = id_now_ms() + a.sync_ms;
        }
    }
    zpoller_destroy(&poller);
    zhashx_destroy(&soon);
    dbpool_put(pool, conn);
    dbpool_destroy(&pool);
    zsock_destroy(&push);
}

/* --- Runners and tasks. --- */

static void s_spawn_task(self_t *self, s_entry_t *e, task_kind_t kind, const char *status,
                         int64_t hv, bool drain) {
    uint64_t id = ++self->next_task_id;
    task_t *t = task_start(self->args.env, kind, id, runner_chat_id(e->runner),
                           runner_runner_id(e->runner), status, hv);
    s_task_t *st = mem_calloc(1, sizeof *st);
    st->task = t;
    st->owner = e;
    st->drain = drain;
    snprintf(st->key, sizeof st->key, "%llu", (unsigned long long)id);
    st->handle = zlistx_add_end(self->tasks, st);
    zlistx_add_end(e->tasks, st);
    zhashx_insert(self->by_task, st->key, st);
    if (!drain) {
        runner_set_active(e->runner, id);
    }
}

static s_task_t *s_find_task(self_t *self, uint64_t id) {
    char key[24];
    snprintf(key, sizeof key, "%llu", (unsigned long long)id);
    return zhashx_lookup(self->by_task, key);
}

static bool s_chat_has_other(self_t *self, const char *chat_id, s_entry_t *except) {
    for (s_entry_t *e = zhashx_lookup(self->by_chat, chat_id); e; e = e->next_same) {
        if (e != except && !e->dying) {
            return true;
        }
    }
    return false;
}

static void s_index_remove(self_t *self, s_entry_t *e) {
    const char *chat = runner_chat_id(e->runner);
    s_entry_t *head = zhashx_lookup(self->by_chat, chat);
    s_entry_t **pp = &head;
    while (*pp && *pp != e) {
        pp = &(*pp)->next_same;
    }
    if (*pp) {
        *pp = e->next_same;
    }
    if (head) {
        zhashx_update(self->by_chat, chat, head);
    } else {
        zhashx_delete(self->by_chat, chat);
    }
}

/* The runner exits (every task of it has ended): the turns it left open are abandoned. */
static void s_entry_free(self_t *self, s_entry_t *e) {
    taskctx_runner_exit(self->args.env, runner_chat_id(e->runner), runner_runner_id(e->runner));
    zlistx_detach(self->entries, e->handle);
    s_index_remove(self, e);
    zlistx_destroy(&e->tasks);
    runner_destroy(&e->runner);
    free(e);
}

static void s_free_entry_if_done(self_t *self, s_entry_t *e) {
    if (e->dying && zlistx_size(e->tasks) == 0) {
        s_entry_free(self, e);
    }
}

/* While the limiter refuses, a runner cleaned up because its chat let go (the update ev, whose
 * move deleted the lease and freed its slot, has committed) sends an ownership hint, which
 * wakes every acquirer for the slot as a new chat would; it carries ev's version, which every
 * subscriber takes as new. */
static void s_hint_freed_slot(self_t *self, const hint_update_t *ev) {
    taskctx_env_t *env = self->args.env;
    if (!atomic_load(&env->limiter_full) || !env->sink.ownership) {
        return;
    }
    hint_ownership_t o = {.snapshot_version = ev->snapshot_version};
    const char *chat = ev->chat_id;
    snprintf(o.chat_id, sizeof o.chat_id, "%s", chat);
    env->sink.ownership(env->sink.ctx, &o);
    log_debug("slot_freed_hint", "chat_id=%s worker_id=%s", chat, env->worker_id);
}

/* Cancels every task of the runner, stops its lease and hints; frees it once its tasks
 * have all ended (ARCHITECTURE.md §1.2). */
static void s_cleanup(self_t *self, s_entry_t *e, const char *why) {
    if (e->dying) {
        return;
    }
    e->dying = true;
    self->cleanups++;
    const char *chat = runner_chat_id(e->runner);
    leaseset_remove(self->args.leases, chat, runner_runner_id(e->runner));
    for (s_task_t *t = zlistx_first(e->tasks); t; t = zlistx_next(e->tasks)) {
        if (!t->drain) {
            task_cancel(t->task);
        }
    }
    if (!s_chat_has_other(self, chat, e)) {
        char topic[PROTO_TOPIC_MAX_BYTES];
        snprintf(topic, sizeof topic, "%s%s", PROTO_TOPIC_UPDATE, chat);
        bus_subscriber_unsubscribe(self->sub, topic);
        bus_subscriber_forget(self->sub, chat);
    }
    log_info("runner_cleanup", "chat_id=%s runner_id=%s reason=%s", chat,
             runner_runner_id(e->runner), why);
    s_free_entry_if_done(self, e);
}

static void s_event(self_t *self, s_entry_t *e, const hint_update_t *ev) {
    if (e->dying) {
        return;
    }
    runner_action_t act;
    runner_on_event(e->runner, ev, &act);
    if (act.ignored) {
        return;
    }
    if (act.cancel) {
        s_task_t *t = s_find_task(self, act.cancel_id);
        if (t) {
            task_cancel(t->task);
        }
    }
    if (act.cleanup) {
        s_cleanup(self, e, "not_owner");
        s_hint_freed_slot(self, ev);
        return;
    }
    if (act.spawn && !self->draining) {
        s_spawn_task(self, e, act.spawn_kind, act.status[0] ? act.status : NULL,
                     act.history_version, false);
    }
}

static void s_event_all(self_t *self, const hint_update_t *ev) {
    /* Collected first: handling an event can clean a runner up, which walks and edits the
     * entry list. */
    size_t n = 0, cap = 0;
    s_entry_t *first = zhashx_lookup(self->by_chat, ev->chat_id);
    for (s_entry_t *e = first; e; e = e->next_same) {
        cap++;
    }
    if (cap == 0) {
        return;
    }
    s_entry_t **match = mem_alloc(cap * sizeof *match);
    for (s_entry_t *e = first; e; e = e->next_same) {
        if (!e->dying) {
            match[n++] = e;
        }
    }
    for (size_t i = 0; i < n; i++) {
        s_event(self, match[i], ev);
    }
    free(match);
}

static s_entry_t *s_find_entry(self_t *self, const char *chat_id, const char *runner_id) {
    for (s_entry_t *e = zhashx_lookup(self->by_chat, chat_id); e; e = e->next_same) {
        if (!strcmp(runner_runner_id(e->runner), runner_id)) {
            return e;
        }
    }
    return NULL;
}

static void s_on_spawn(self_t *self, const hint_update_t *row) {
    s_entry_t *e = mem_calloc(1, sizeof *e);
    e->runner = runner_new(row->chat_id, self->args.env->worker_id, row->runner_id);
    e->tasks = zlistx_new();
    e->handle = zlistx_add_end(self->entries, e);
    e->next_same = zhashx_lookup(self->by_chat, row->chat_id);
    zhashx_update(self->by_chat, row->chat_id, e);
    self->spawned++;
    leaseset_add(self->args.leases, row->chat_id, row->runner_id);
    /* Subscribe before the first read (ARCHITECTURE.md §7.2): the Acquire row is the
     * first state, and the sync asked for below covers anything published in between. */
    char topic[PROTO_TOPIC_MAX_BYTES];
    snprintf(topic, sizeof topic, "%s%s", PROTO_TOPIC_UPDATE, row->chat_id);
    bus_subscriber_subscribe(self->sub, topic);
    log_info("runner_spawned", "chat_id=%s runner_id=%s status=%s history_version=%lld",
             row->chat_id, row->runner_id, row->status, (long long)row->history_version);
    if (self->draining) {
        /* History version -1: a drain's abandon lets go at once, title request or not. */
        s_spawn_task(self, e, TASK_ABANDON, NULL, -1, true);
        return;
    }
    s_event(self, e, row);
    zstr_sendx(self->sync, "NOW", row->chat_id, NULL);
}

static void s_check_drained(self_t *self) {
    if (!self->draining || self->drain_replied) {
        return;
    }
    for (s_task_t *t = zlistx_first(self->tasks); t; t = zlistx_next(self->tasks)) {
        if (t->drain) {
            return;
        }
    }
    self->drain_replied = true;
    zstr_send(self->pipe, "DRAINED");
}

static void s_on_done(self_t *self, uint64_t id, const hint_update_t *after) {
    s_task_t *t = s_find_task(self, id);
    if (!t) {
        return;
    }
    zlistx_detach(self->tasks, t->handle);
    zhashx_delete(self->by_task, t->key);
    s_entry_t *owner = t->owner;
    zlistx_detach(owner->tasks, zlistx_find(owner->tasks, t));
    task_destroy(&t->task); /* its thread has sent DONE and is returning */
    free(t);
    runner_task_ended(owner->runner, id);
    if (self->draining && !owner->dying && zlistx_size(owner->tasks) == 0) {
        /* Its drain's abandon let the chat go and its cancelled tasks have ended: the runner
         * is done, though it may be freed only at $TERM. */
        taskctx_runner_exit(self->args.env, runner_chat_id(owner->runner),
                            runner_runner_id(owner->runner));
    }
    if (owner->dying) {
        s_free_entry_if_done(self, owner);
    } else if (after) {
        s_event_all(self, after);
    }
    s_check_drained(self);
}

static int s_on_inbox(zloop_t *loop, zsock_t *reader, void *arg) {
    (void)loop;
    self_t *self = arg;
    zmsg_t *m = zmsg_recv(reader);
    if (!m) {
        return 0;
    }
    char *kind = zmsg_popstr(m);
    if (kind && streq(kind, "SPAWN")) {
        zframe_t *f = zmsg_first(m);
        if (f && zframe_size(f) == sizeof(hint_update_t)) {
            hint_update_t row;
            memcpy(&row, zframe_data(f), sizeof row);
            s_on_spawn(self, &row);
        }
    } else if (kind && streq(kind, "CLEANUP")) {
        char *chat = zmsg_popstr(m);
        char *runner = zmsg_popstr(m);
        s_entry_t *e = chat && runner ? s_find_entry(self, chat, runner) : NULL;
        if (e) {
            s_cleanup(self, e, "lease_not_renewed");
        }
        zstr_free(&chat);
        zstr_free(&runner);
    } else if (kind && streq(kind, "DONE")) {
        zframe_t *idf = zmsg_first(m);
        zframe_t *af = zmsg_next(m);
        if (idf && zframe_size(idf) == sizeof(uint64_t)) {
            uint64_t id;
            memcpy(&id, zframe_data(idf), sizeof id);
            hint_update_t after;
            bool have = af && zframe_size(af) == sizeof after;
            if (have) {
                memcpy(&after, zframe_data(af), sizeof after);
            }
            s_on_done(self, id, have ? &after : NULL);
        }
    } else if (kind && streq(kind, "ROWS")) {
        for (zframe_t *f = zmsg_first(m); f; f = zmsg_next(m)) {
            if (zframe_size(f) == sizeof(hint_update_t)) {
                hint_update_t row;
                memcpy(&row, zframe_data(f), sizeof row);
                s_event_all(self, &row);
            }
        }
    }
    zstr_free(&kind);
    zmsg_destroy(&m);
    return 0;
}

static int s_on_hint(zloop_t *loop, zsock_t *reader, void *arg) {
    (void)loop;
    (void)reader;
    self_t *self = arg;
    wire_msg_t msg;
    while (bus_subscriber_recv(self->sub, &msg, 0) == 1) {
        if (msg.type == WIRE_UPDATE) {
            s_event_all(self, &msg.u.update);
        }
        wire_msg_clear(&msg);
    }
    return 0;
}

static void s_drain(self_t *self) {
    self->draining = true;
    self->drain_replied = false;
    size_t abandons = 0;
    for (s_entry_t *e = zlistx_first(self->entries); e; e = zlistx_next(self->entries)) {
        if (e->dying) {
            continue;
        }
        for (s_task_t *t = zlistx_first(e->tasks); t; t = zlistx_next(e->tasks)) {
            task_cancel(t->task);
        }
        abandons++;
    }
    /* A second pass: spawning appends to the task list the first pass walked. */
    for (s_entry_t *e = zlistx_first(self->entries); e; e = zlistx_next(self->entries)) {
        if (!e->dying) {
            s_spawn_task(self, e, TASK_ABANDON, NULL, -1, true);
        }
    }
    log_info("worker_drain", "runners=%zu", abandons);
    s_check_drained(self);
}

static int s_on_pipe(zloop_t *loop, zsock_t *reader, void *arg) {
    (void)loop;
    self_t *self = arg;
    char *cmd = zstr_recv(reader);
    int rc = 0;
    if (!cmd || streq(cmd, "$TERM")) {
        rc = -1;
    } else if (streq(cmd, "STATUS")) {
        zsock_send(self->pipe, "8888", (uint64_t)zlistx_size(self->entries),
                   (uint64_t)zlistx_size(self->tasks), (uint64_t)self->spawned,
                   (uint64_t)self->cleanups);
    } else if (streq(cmd, "DRAIN")) {
        s_drain(self);
    }
    zstr_free(&cmd);
    return rc;
}

static int s_on_gc(zloop_t *loop, int timer_id, void *arg) {
    (void)loop;
    (void)timer_id;
    self_t *self = arg;
    partbuf_gc(self->args.env->partbuf, id_now_ms());
    return 0;
}

static void s_actor(zsock_t *pipe, void *start) {
    self_t self = {.pipe = pipe, .args = *(manager_args_t *)actor_args(start)};
    self.inbox = zsock_new(ZMQ_PULL);
    ASSERT(self.inbox);
    if (zsock_bind(self.inbox, "%s", self.args.env->inbox) != 0) {
        log_error("manager_inbox_bind_failed", "endpoint=%s", self.args.env->inbox);
        zsock_destroy(&self.inbox);
        actor_ready(pipe, start, -1);
        return;
    }
    self.sub = bus_subscriber_new(self.args.broker_sub);
    ASSERT(self.sub);
    s_sync_args_t sa = {.leases = self.args.leases,
                        .sync_ms = self.args.sync_ms,
                        .statement_timeout_ms = self.args.statement_timeout_ms};
    snprintf(sa.url, sizeof sa.url, "%s", self.args.database_url);
    snprintf(sa.inbox, sizeof sa.inbox, "%s", self.args.env->inbox);
    self.sync = zactor_new(s_sync_actor, &sa);
    ASSERT(self.sync);
    self.entries = zlistx_new();
    self.tasks = zlistx_new();
    self.by_chat = zhashx_new();
    self.by_task = zhashx_new();
    self.loop = zloop_new();
    zloop_set_nonstop(self.loop, true);
    zloop_reader(self.loop, pipe, s_on_pipe, &self);
    zloop_reader(self.loop, self.inbox, s_on_inbox, &self);
    zloop_reader(self.loop, bus_subscriber_sock(self.sub), s_on_hint, &self);
    zloop_timer(self.loop, MANAGER_GC_INTERVAL_MS, 0, s_on_gc, &self);
    actor_ready(pipe, start, 0);
    zloop_start(self.loop);
    /* $TERM: cancel everything, then wait for each task (they check their token between
     * steps, and every statement is bounded by statement_timeout). */
    for (s_task_t *t = zlistx_first(self.tasks); t; t = zlistx_next(self.tasks)) {
        task_cancel(t->task);
    }
    while (zlistx_size(self.tasks) > 0) {
        s_task_t *t = zlistx_first(self.tasks);
        zlistx_detach(self.tasks, zlistx_cursor(self.tasks));
        task_destroy(&t->task);
        free(t);
    }
    while (zlistx_size(self.entries) > 0) {
        s_entry_t *e = zlistx_first(self.entries);
        leaseset_remove(self.args.leases, runner_chat_id(e->runner), runner_runner_id(e->runner));
        zlistx_purge(e->tasks); /* the tasks themselves were freed above */
        s_entry_free(&self, e);
    }
    zlistx_destroy(&self.entries);
    zlistx_destroy(&self.tasks);
    zhashx_destroy(&self.by_chat);
    zhashx_destroy(&self.by_task);
    zloop_destroy(&self.loop);
    zactor_destroy(&self.sync);
    bus_subscriber_destroy(&self.sub);
    zsock_destroy(&self.inbox);
}

manager_t *manager_new(const manager_args_t *args) {
    /* actor_new returns after the actor has copied args, so they may live on the caller's
     * stack. */
    zactor_t *actor = actor_new(s_actor, (void *)args);
    if (!actor) {
        return NULL;
    }
    manager_t *self = mem_calloc(1, sizeof *self);
    self->actor = actor;
    return self;
}

void manager_destroy(manager_t **self_p) {
    manager_t *self = *self_p;
    if (!self) {
        return;
    }
    zactor_destroy(&self->actor);
    free(self);
    *self_p = NULL;
}

int manager_drain(manager_t *self, int timeout_ms) {
    if (zstr_send(self->actor, "DRAIN") != 0) {
        return -1;
    }
    zpoller_t *poller = zpoller_new(self->actor, NULL);
    int64_t deadline = id_now_ms() + timeout_ms;
    int rc = -1;
    while (rc != 0 && id_now_ms() < deadline) {
        if (zpoller_wait(poller, (int)(deadline - id_now_ms())) == self->actor) {
            char *reply = zstr_recv(self->actor);
            if (reply && streq(reply, "DRAINED")) {
                rc = 0;
            }
            zstr_free(&reply);
            if (!reply) {
                break;
            }
        }
    }
    zpoller_destroy(&poller);
    return rc;
}

int manager_status(manager_t *self, manager_status_t *out) {
    uint64_t r = 0, t = 0, s = 0, c = 0;
    if (zstr_send(self->actor, "STATUS") != 0 ||
        zsock_recv(self->actor, "8888", &r, &t, &s, &c) != 0) {
        return -1;
    }
    out->runners = (int64_t)r;
    out->tasks = (int64_t)t;
    out->spawned = (int64_t)s;
    out->cleanups = (int64_t)c;
    return 0;
}
