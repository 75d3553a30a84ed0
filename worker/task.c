/* task: threads, the in-memory intent lock, and the interrupt, deadline and abandon bodies;
 * see task.h. The generation body lives in generation.c. */
#include "task.h"
#include "generation.h"
#include "history.h"
#include "log.h"
#include "mem.h"

#include <czmq.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

struct task {
    taskctx_t ctx;
    task_kind_t kind;
    uint64_t id;
    pthread_t thread;
    char lock_key[ID_UUID_LEN + 48];
};

/* --- The in-memory lock of (chat, history_version, status), process-wide. --- */

#define S_LOCKS_MAX    4096 /* distinct intents held at once; far above one per owned chat */
#define S_LOCK_POLL_MS 50   /* longest a lock waiter goes without checking its cancel */

static pthread_mutex_t s_locks_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t s_locks_cond; /* on the monotonic clock: made once by s_locks_init */
static pthread_once_t s_locks_once = PTHREAD_ONCE_INIT;
static char *s_locks[S_LOCKS_MAX];

static void s_locks_init(void) {
    id_cond_init(&s_locks_cond);
}

static bool s_lock_held(const char *key) {
    for (int i = 0; i < S_LOCKS_MAX; i++) {
        if (s_locks[i] && !strcmp(s_locks[i], key)) {
            return true;
        }
    }
    return false;
}

/* Takes the lock or returns false when cancelled first. */
static bool s_lock(const char *key, cancel_t *cancel) {
    pthread_once(&s_locks_once, s_locks_init);
    pthread_mutex_lock(&s_locks_mutex);
    for (;;) {
        if (cancel_is_set(cancel)) {
            pthread_mutex_unlock(&s_locks_mutex);
            return false;
        }
        if (!s_lock_held(key)) {
            for (int i = 0; i < S_LOCKS_MAX; i++) {
                if (!s_locks[i]) {
                    s_locks[i] = mem_strdup(key);
                    pthread_mutex_unlock(&s_locks_mutex);
                    return true;
                }
            }
        }
        /* Released locks broadcast; the timeout bounds how long a cancel goes unnoticed. */
        struct timespec ts = id_timespec_at(id_now_ms() + S_LOCK_POLL_MS);
        pthread_cond_timedwait(&s_locks_cond, &s_locks_mutex, &ts);
    }
}

static void s_unlock(const char *key) {
    pthread_once(&s_locks_once, s_locks_init);
    pthread_mutex_lock(&s_locks_mutex);
    for (int i = 0; i < S_LOCKS_MAX; i++) {
        if (s_locks[i] && !strcmp(s_locks[i], key)) {
            free(s_locks[i]);
            s_locks[i] = NULL;
            break;
        }
    }
    pthread_cond_broadcast(&s_locks_cond);
    pthread_mutex_unlock(&s_locks_mutex);
}

/* --- Interrupt (ARCHITECTURE.md §1.2). --- */

typedef struct {
    const cs_fence_t *fence;
    const cs_message_t *partial;
    int count;
} s_interrupt_t;

static int s_finish_interruption(chatstate_t *cs, void *arg, cs_error_t *err) {
    s_interrupt_t *a = arg;
    return chatstate_finish_interruption(cs, a->fence, a->partial, a->count, err);
}

static taskctx_rc_t s_interrupt(taskctx_t *ctx, PGconn *conn) {
    history_t h;
    history_rc_t hr = history_load(conn, ctx->chat_id, &ctx->fence, false, &h);
    if (hr != HISTORY_OK) {
        if (hr == HISTORY_FENCED) {
            atomic_fetch_add(&ctx->env->counters.fence_rejects, 1);
        }
        return hr == HISTORY_DB ? TASKCTX_RETRY : TASKCTX_QUIET;
    }
    int64_t attempt = h.generation_attempt;
    history_clear(&h);
    /* Close first, so a stale generation task cannot add to what is committed below. */
    partbuf_close(ctx->env->partbuf, ctx->chat_id, ctx->fence.history_version, attempt);
    partbuf_part_t *parts = NULL;
    size_t n = 0;
    char *content = NULL;
    if (attempt > 0 &&
        partbuf_parts(ctx->env->partbuf, ctx->chat_id, ctx->fence.history_version, attempt, &parts,
                      &n) == PARTBUF_OK &&
        n > 0) {
        const char **texts = mem_calloc(n, sizeof *texts);
        for (size_t i = 0; i < n; i++) {
            texts[i] = parts[i].json;
        }
        content = generation_partial(texts, n);
        free(texts);
    }
    partbuf_parts_free(&parts, n);
    cs_message_t msg = {.role = "assistant", .content = content};
    s_interrupt_t a = {&ctx->fence, content ? &msg : NULL, content ? 1 : 0};
    taskctx_rc_t rc = taskctx_bundle(ctx, conn, s_finish_interruption, &a, "FinishInterruption");
    if (rc == TASKCTX_DONE) {
        log_info("interrupt_finished", "chat_id=%s partial_parts=%zu partial=%s", ctx->chat_id, n,
                 content ? "yes" : "no");
    }
    free(content);
    return rc;
}

/* --- Requires-action deadline (ARCHITECTURE.md §1.2). --- */

static int s_cancel_ra(chatstate_t *cs, void *arg, cs_error_t *err) {
    return chatstate_cancel_requires_action(cs, arg, "timed out", err);
}

/* Holds no connection while it waits: a worker may own hundreds of chats that wait for
 * their clients, and each would otherwise pin a PostgreSQL backend for minutes. */
static taskctx_rc_t s_deadline(taskctx_t *ctx, PGconn **conn) {
    history_t h;
    history_rc_t hr = history_load(*conn, ctx->chat_id, &ctx->fence, false, &h);
    if (hr != HISTORY_OK) {
        return hr == HISTORY_DB ? TASKCTX_RETRY : TASKCTX_QUIET;
    }
    int64_t wait = h.deadline_in_ms == INT64_MAX ? ctx->env->ra_default_ms : h.deadline_in_ms;
    history_clear(&h);
    log_info("requires_action_wait", "chat_id=%s wait_ms=%lld", ctx->chat_id, (long long)wait);
    dbpool_put(ctx->env->pool, *conn);
    *conn = NULL;
    if (wait > 0 && cancel_wait_ms(ctx->cancel, wait)) {
        return TASKCTX_QUIET;
    }
    *conn = dbpool_get(ctx->env->pool);
    if (!*conn) {
        return TASKCTX_RETRY;
    }
    return taskctx_bundle(ctx, *conn, s_cancel_ra, &ctx->fence, "CancelRequiresAction");
}

/* --- Abandon (ARCHITECTURE.md §1.2). --- */

static int s_abandon_fn(chatstate_t *cs, void *arg, cs_error_t *err) {
    return chatstate_abandon(cs, arg, err);
}

static taskctx_rc_t s_abandon(taskctx_t *ctx, PGconn *conn) {
    return taskctx_bundle(ctx, conn, s_abandon_fn, &ctx->fence, "Abandon");
}

/* --- The thread. --- */

/* Runs the task's body with *conn; a body may give the connection back while it waits and
 * take another (the caller puts back whatever *conn is at the end, NULL included). */
static taskctx_rc_t s_body(task_t *self, PGconn **connp) {
    taskctx_t *ctx = &self->ctx;
    PGconn *conn = *connp;
    switch (self->kind) {
        case TASK_GENERATION:
            return generation_step(ctx, conn);
        case TASK_INTERRUPT:
            return s_interrupt(ctx, conn);
        case TASK_DEADLINE:
            return s_deadline(ctx, connp);
        case TASK_ABANDON:
            return s_abandon(ctx, conn);
    }
    return TASKCTX_QUIET;
}

static void s_done(task_t *self) {
    zsock_t *push = zsock_new(ZMQ_PUSH);
    ASSERT(push);
    /* Linger so the message survives the close right after the send. */
    zsock_set_linger(push, 5000);
    if (zsock_connect(push, "%s", self->ctx.env->inbox) != 0) {
        log_error("task_inbox_unreachable", "endpoint=%s", self->ctx.env->inbox);
        zsock_destroy(&push);
        return;
    }
    zmsg_t *m = zmsg_new();
    zmsg_addstr(m, "DONE");
    zmsg_addmem(m, &self->id, sizeof self->id);
    zmsg_addmem(m, self->ctx.have_after ? &self->ctx.after : NULL,
                self->ctx.have_after ? sizeof self->ctx.after : 0);
    if (zmsg_send(&m, push) != 0) {
        zmsg_destroy(&m);
    }
    zsock_destroy(&push);
}

static void *s_thread(void *arg) {
    task_t *self = arg;
    taskctx_t *ctx = &self->ctx;
    taskctx_env_t *env = ctx->env;
    int64_t backoff = TASK_BACKOFF_MIN_MS;
    if (s_lock(self->lock_key, ctx->cancel)) {
        for (;;) {
            if (cancel_is_set(ctx->cancel)) {
                break;
            }
            PGconn *conn = dbpool_get(env->pool);
            taskctx_rc_t rc = conn ? s_body(self, &conn) : TASKCTX_RETRY;
            dbpool_put(env->pool, conn);
            if (rc != TASKCTX_RETRY) {
                break;
            }
            atomic_fetch_add(&env->counters.retries, 1);
            log_warn("task_retry", "chat_id=%s task=%s backoff_ms=%lld", ctx->chat_id,
                     task_kind_name(self->kind), (long long)backoff);
            if (cancel_wait_ms(ctx->cancel, backoff)) {
                break;
            }
            backoff = backoff * 2 > TASK_BACKOFF_MAX_MS ? TASK_BACKOFF_MAX_MS : backoff * 2;
        }
        s_unlock(self->lock_key);
    }
    s_done(self);
    return NULL;
}

task_t *task_start(taskctx_env_t *env, task_kind_t kind, uint64_t id, const char *chat_id,
                   const char *runner_id, const char *status, int64_t history_version) {
    task_t *self = mem_calloc(1, sizeof *self);
    taskctx_t *ctx = &self->ctx;
    ctx->env = env;
    self->kind = kind;
    snprintf(ctx->chat_id, sizeof ctx->chat_id, "%s", chat_id);
    snprintf(ctx->status, sizeof ctx->status, "%s", status ? status : "");
    snprintf(ctx->fence.worker_id, sizeof ctx->fence.worker_id, "%s", env->worker_id);
    snprintf(ctx->fence.runner_id, sizeof ctx->fence.runner_id, "%s", runner_id);
    ctx->fence.status = status ? ctx->status : NULL;
    ctx->fence.history_version = history_version;
    ctx->fence.generation_attempt = -1;
    ctx->cancel = cancel_new();
    self->id = id;
    snprintf(self->lock_key, sizeof self->lock_key, "%s:%lld:%s", chat_id,
             (long long)history_version, status ? status : "*");
    if (pthread_create(&self->thread, NULL, s_thread, self) != 0) {
        log_error("task_thread_failed", "chat_id=%s task=%s", chat_id, task_kind_name(kind));
        cancel_destroy(&ctx->cancel);
        free(self);
        return NULL;
    }
    log_debug("task_started", "chat_id=%s task=%s id=%llu history_version=%lld", chat_id,
              task_kind_name(kind), (unsigned long long)id, (long long)history_version);
    return self;
}

void task_cancel(task_t *self) {
    cancel_set(self->ctx.cancel);
}

uint64_t task_id(const task_t *self) {
    return self->id;
}

task_kind_t task_kind(const task_t *self) {
    return self->kind;
}

const char *task_kind_name(task_kind_t kind) {
    switch (kind) {
        case TASK_GENERATION:
            return "generation";
        case TASK_INTERRUPT:
            return "interrupt";
        case TASK_DEADLINE:
            return "requires_action_deadline";
        case TASK_ABANDON:
            return "abandon";
    }
    return "?";
}

void task_destroy(task_t **self_p) {
    task_t *self = *self_p;
    if (!self) {
        return;
    }
    pthread_join(self->thread, NULL);
    cancel_destroy(&self->ctx.cancel);
    free(self);
    *self_p = NULL;
}
