/* task: the phases of a task on the worker's database jobs and event loop, the in-memory intent
 * lock, and the interrupt, deadline and abandon bodies; see task.h. The generation body lives in
 * generation.c. */
#include "task.h"
#include "generation.h"
#include "history.h"
#include "titlestep.h"
#include "log.h"
#include "mem.h"

#include <czmq.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* Where a task is while it waits; read and written on the loop's thread only. */
typedef enum { S_BUSY = 0, S_CALL, S_TIMER } s_wait_t;

struct task {
    taskctx_t ctx;
    task_kind_t kind;
    uint64_t id;
    char lock_key[ID_UUID_LEN + 48];
    atomic_int refs;       /* the manager's, plus one per cancel on its way to the loop */
    atomic_bool finished;  /* its end was sent (s_finish ran) */
    int64_t backoff;       /* the next retry's backoff */
    s_wait_t wait;         /* loop thread */
    provider_call_t *call; /* S_CALL */
    evloop_timer_t *timer; /* S_TIMER */
    bool lock_waiting;     /* queued behind the holder of lock_key; under s_locks_mutex */
    task_t *lock_next;     /* the next waiter; under s_locks_mutex */
    /* The side call (taskctx_side_t) and how the task's two halves end. */
    taskctx_t *side;            /* its context while one runs (its body: the call's state) */
    provider_call_t *side_call; /* loop thread: the call in flight, or NULL */
    pthread_mutex_t end_lock;
    bool side_active;  /* under end_lock: asked and not yet ended */
    bool carry_active; /* under end_lock: the body's carry is being written alone */
    bool main_ended;   /* under end_lock: the body is done; DONE waits for the side */
    bool parked;       /* under end_lock: the body's next phase waits for the side's end */
};

static void s_job(void *arg, PGconn *conn);
static void s_finish(task_t *self);

/* --- The in-memory lock of (chat, history_version, status), process-wide. A task that finds
 * the lock held waits in a queue (no thread waits for it) and is started by the unlock. --- */

typedef struct {
    task_t *head, *tail; /* waiters, first come first served */
} s_lock_t;

static pthread_mutex_t s_locks_mutex = PTHREAD_MUTEX_INITIALIZER;
static zhashx_t *s_locks; /* lock key -> s_lock_t; made on first use */

/* Ends (for every task) waits for the end of the tasks being destroyed at shutdown. */
static pthread_mutex_t s_end_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t s_end_cond = PTHREAD_COND_INITIALIZER;

static void s_lock_free(void **item) {
    free(*item);
    *item = NULL;
}

/* Takes the lock, or queues self behind its holder. Returns true when taken. */
static bool s_lock_or_queue(task_t *self) {
    pthread_mutex_lock(&s_locks_mutex);
    if (!s_locks) {
        s_locks = zhashx_new();
        ASSERT(s_locks);
        zhashx_set_destructor(s_locks, s_lock_free);
    }
    s_lock_t *l = zhashx_lookup(s_locks, self->lock_key);
    if (!l) {
        zhashx_insert(s_locks, self->lock_key, mem_calloc(1, sizeof(s_lock_t)));
        pthread_mutex_unlock(&s_locks_mutex);
        return true;
    }
    self->lock_waiting = true;
    if (l->tail) {
        l->tail->lock_next = self;
    } else {
        l->head = self;
    }
    l->tail = self;
    pthread_mutex_unlock(&s_locks_mutex);
    return false;
}

/* Hands the lock to the first waiter (whose first phase is queued) or drops it. */
static void s_unlock(task_t *self) {
    pthread_mutex_lock(&s_locks_mutex);
    s_lock_t *l = zhashx_lookup(s_locks, self->lock_key);
    task_t *next = l ? l->head : NULL;
    if (next) {
        l->head = next->lock_next;
        if (!l->head) {
            l->tail = NULL;
        }
        next->lock_next = NULL;
        next->lock_waiting = false;
    } else if (l) {
        zhashx_delete(s_locks, self->lock_key);
    }
    pthread_mutex_unlock(&s_locks_mutex);
    if (next) {
        dbexec_submit(next->ctx.env->exec, s_job, next);
    }
}

/* Takes self out of the waiters of its lock; true when it was waiting. */
static bool s_unqueue(task_t *self) {
    pthread_mutex_lock(&s_locks_mutex);
    bool was = self->lock_waiting;
    if (was) {
        s_lock_t *l = zhashx_lookup(s_locks, self->lock_key);
        task_t **pp = &l->head;
        task_t *prev = NULL;
        while (*pp != self) {
            prev = *pp;
            pp = &(*pp)->lock_next;
        }
        *pp = self->lock_next;
        if (l->tail == self) {
            l->tail = prev;
        }
        self->lock_next = NULL;
        self->lock_waiting = false;
    }
    pthread_mutex_unlock(&s_locks_mutex);
    return was;
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
    if (!conn) {
        return TASKCTX_RETRY;
    }
    history_t h;
    history_rc_t hr = history_load(conn, ctx->chat_id, &ctx->fence, false, &h);
    if (hr != HISTORY_OK) {
        if (hr == HISTORY_FENCED) {
            atomic_fetch_add(&ctx->env->counters.fence_rejects, 1);
        }
        return hr == HISTORY_DB ? TASKCTX_RETRY : TASKCTX_QUIET;
    }
    int64_t attempt = h.generation_attempt;
    taskctx_set_turn(ctx, h.subagent, &h.trace, h.trigger_age_us, h.trigger_id);
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
        taskctx_outcome(ctx, TURN_INTERRUPTED);
    }
    free(content);
    return rc;
}

/* --- Requires-action deadline (ARCHITECTURE.md §1.2). --- */

static int s_cancel_ra(chatstate_t *cs, void *arg, cs_error_t *err) {
    return chatstate_cancel_requires_action(cs, arg, "timed out", err);
}

static taskctx_rc_t s_deadline_fire(taskctx_t *ctx, PGconn *conn) {
    if (!conn) {
        return TASKCTX_RETRY;
    }
    return taskctx_bundle(ctx, conn, s_cancel_ra, &ctx->fence, "CancelRequiresAction");
}

/* Holds no connection while it waits: a worker may own thousands of chats that wait for
 * their clients (ARCHITECTURE.md §6.5). */
static taskctx_rc_t s_deadline(taskctx_t *ctx, PGconn *conn) {
    if (!conn) {
        return TASKCTX_RETRY;
    }
    history_t h;
    history_rc_t hr = history_load(conn, ctx->chat_id, &ctx->fence, false, &h);
    if (hr != HISTORY_OK) {
        return hr == HISTORY_DB ? TASKCTX_RETRY : TASKCTX_QUIET;
    }
    int64_t wait = h.deadline_in_ms == INT64_MAX
                       ? ctx->env->chat_settings.requires_action_deadline_ms
                       : h.deadline_in_ms;
    history_clear(&h);
    log_info("requires_action_wait", "chat_id=%s wait_ms=%lld", ctx->chat_id, (long long)wait);
    ctx->wait_ms = wait;
    ctx->next = s_deadline_fire;
    return TASKCTX_WAIT;
}

/* --- Abandon (ARCHITECTURE.md §1.2). --- */

typedef struct {
    const cs_fence_t *fence;
    bool titles; /* serve a pending title request first (not on a drain's abandon) */
    bool title;  /* one is pending: nothing was written */
} s_abandon_t;

static int s_abandon_fn(chatstate_t *cs, void *arg, cs_error_t *err) {
    s_abandon_t *a = arg;
    if (a->titles && chatstate_title_wanted(cs, a->fence, &a->title, err) != 0) {
        return -1;
    }
    return a->title ? TASKCTX_BUNDLE_EMPTY : chatstate_abandon(cs, a->fence, err);
}

/* An idle chat the owner lets go of; one with a title request (taken by the acquirer's title
 * pass, or left so by a turn's end) gets its title call first (titlestep_serve), then comes
 * back here. A drain's abandon (history_version -1) lets go at once. */
static taskctx_rc_t s_abandon(taskctx_t *ctx, PGconn *conn) {
    if (!conn) {
        return TASKCTX_RETRY;
    }
    s_abandon_t a = {.fence = &ctx->fence, .titles = ctx->fence.history_version >= 0};
    taskctx_rc_t rc = taskctx_bundle(ctx, conn, s_abandon_fn, &a, "Abandon");
    return rc == TASKCTX_DONE && a.title ? titlestep_serve(ctx, conn, s_abandon) : rc;
}

/* --- The phases. --- */

static taskctx_phase_fn *s_entry(task_kind_t kind) {
    switch (kind) {
        case TASK_GENERATION:
            return generation_step;
        case TASK_INTERRUPT:
            return s_interrupt;
        case TASK_DEADLINE:
            return s_deadline;
        case TASK_ABANDON:
            return s_abandon;
    }
    return NULL;
}

static void s_unref(task_t *self) {
    if (atomic_fetch_sub(&self->refs, 1) == 1) {
        cancel_destroy(&self->ctx.cancel);
        pthread_mutex_destroy(&self->end_lock);
        free(self);
    }
}

/* Tells the manager the task ended, with the row it committed last (the fast path). */
static void s_send_done(task_t *self) {
    taskctx_env_t *env = self->ctx.env;
    zmsg_t *m = zmsg_new();
    zmsg_addstr(m, "DONE");
    zmsg_addmem(m, &self->id, sizeof self->id);
    zmsg_addmem(m, self->ctx.have_after ? &self->ctx.after : NULL,
                self->ctx.have_after ? sizeof self->ctx.after : 0);
    pthread_mutex_lock(&env->done_lock);
    if (zmsg_send(&m, env->done) != 0) {
        zmsg_destroy(&m);
        log_error("task_inbox_unreachable", "chat_id=%s endpoint=%s", self->ctx.chat_id,
                  env->inbox);
    }
    pthread_mutex_unlock(&env->done_lock);
}

/* The end of a task, once both halves ended: DONE sent. */
static void s_end(task_t *self) {
    s_send_done(self);
    pthread_mutex_lock(&s_end_mutex);
    atomic_store(&self->finished, true);
    pthread_cond_broadcast(&s_end_cond);
    pthread_mutex_unlock(&s_end_mutex);
}

/* A database job: the side's write the body ended without taking, alone (s_finish); then the
 * task's end when the side is done too. */
static void s_carry_job(void *arg, PGconn *conn) {
    task_t *self = arg;
    (void)taskctx_carry_alone(&self->ctx, conn);
    pthread_mutex_lock(&self->end_lock);
    self->carry_active = false;
    bool end = !self->side_active;
    pthread_mutex_unlock(&self->end_lock);
    if (end) {
        s_end(self);
    }
}

/* The end of the body, exactly once: its state freed, its lock handed on, a carried write it
 * did not take written alone, and the task's end when no side call or write is left. */
static void s_finish(task_t *self) {
    bool carry = self->ctx.carry.write != NULL;
    taskctx_reset(&self->ctx);
    taskctx_release_turn(&self->ctx); /* after the span of an outcome it recorded */
    s_unlock(self);
    pthread_mutex_lock(&self->end_lock);
    self->main_ended = true;
    self->carry_active = carry;
    bool wait = self->side_active || carry;
    pthread_mutex_unlock(&self->end_lock);
    if (carry) {
        dbexec_submit(self->ctx.env->exec, s_carry_job, self);
    } else if (!wait) {
        s_end(self);
    }
}

/* --- The side call (taskctx_side_t). --- */

/* The end of the side call: its state freed, its write carried to the body (which runs no
 * phase meanwhile: s_park), then the body's parked phase, or the task's end when the body is
 * done. */
static void s_side_end(task_t *self) {
    taskctx_carry_t carry = self->side->carry;
    self->side->carry = (taskctx_carry_t){0};
    taskctx_reset(self->side);
    free(self->side);
    self->side = NULL;
    pthread_mutex_lock(&self->end_lock);
    self->side_active = false;
    bool ended = self->main_ended;
    /* A carry is left only for a parked body (s_side_job), which cannot end while parked:
     * it takes the write in its next bundle, or s_finish writes it alone. */
    if (carry.write && !ended) {
        self->ctx.carry = carry;
        carry.write = NULL;
    }
    bool end = ended && !self->carry_active;
    bool resume = self->parked;
    self->parked = false;
    pthread_mutex_unlock(&self->end_lock);
    if (carry.write) {
        carry.done(carry.arg, false);
    }
    if (resume) {
        dbexec_submit(self->ctx.env->exec, s_job, self);
    } else if (end) {
        s_end(self);
    }
}

/* Whether the body's next phase must wait for the side call: it runs once the side ended, so
 * that the side writes while the body's fence still holds (a title before the turn's end). */
static bool s_park(task_t *self) {
    pthread_mutex_lock(&self->end_lock);
    self->parked = self->side_active;
    bool parked = self->parked;
    pthread_mutex_unlock(&self->end_lock);
    return parked;
}

static void s_side_job(void *arg, PGconn *conn) {
    task_t *self = arg;
    taskctx_rc_t rc = self->side->next(self->side, conn);
    /* Carried only to a body that waits for this side to commit its step (its call ended
     * first): a body still in its call may run for minutes, or be interrupted, so the write
     * goes now, as soon as it is known. */
    pthread_mutex_lock(&self->end_lock);
    bool to_body = self->parked && !self->main_ended;
    pthread_mutex_unlock(&self->end_lock);
    if (!to_body && rc == TASKCTX_DONE) {
        rc = taskctx_carry_alone(self->side, conn);
    }
    if (rc == TASKCTX_RETRY) {
        log_warn("side_call_dropped", "chat_id=%s reason=\"its write failed\"",
                 self->side->chat_id);
    }
    s_side_end(self);
}

static void s_side_done(void *arg, provider_rc_t rc, provider_result_t *res) {
    task_t *self = arg;
    self->side_call = NULL;
    self->side->call_rc = rc;
    self->side->call_res = *res;
    res->content = NULL;
    res->usage = NULL;
    if (rc == PROVIDER_CANCELLED) {
        (void)self->side->next(self->side, NULL);
        s_side_end(self);
        return;
    }
    dbexec_submit(self->ctx.env->exec, s_side_job, self);
}

/* Loop thread: starts the side call asked for (its start function in side->call_start). */
static void s_side_start(void *arg) {
    task_t *self = arg;
    taskctx_t *side = self->side;
    if (cancel_is_set(self->ctx.cancel)) {
        s_side_end(self);
        return;
    }
    provider_call_t *(*start)(taskctx_t *, provider_done_fn *, void *) = side->call_start;
    side->call_start = NULL;
    self->side_call = start(side, s_side_done, self);
}

/* Takes the side call a phase asked for, if any: started on the loop, or dropped while
 * another runs. Called where the phase returned, before anything can end the task. */
static void s_side_take(task_t *self) {
    taskctx_t *ctx = &self->ctx;
    taskctx_side_t req = ctx->side;
    ctx->side = (taskctx_side_t){0};
    if (!req.start) {
        return;
    }
    pthread_mutex_lock(&self->end_lock);
    bool busy = self->side_active;
    self->side_active = true;
    pthread_mutex_unlock(&self->end_lock);
    if (busy) {
        if (req.body_free) {
            req.body_free(req.body);
        }
        return;
    }
    taskctx_t *side = mem_calloc(1, sizeof *side);
    side->env = ctx->env;
    memcpy(side->chat_id, ctx->chat_id, sizeof side->chat_id);
    memcpy(side->status, ctx->status, sizeof side->status);
    side->fence = ctx->fence;
    side->fence.status = ctx->fence.status ? side->status : NULL;
    side->cancel = ctx->cancel;
    side->subagent = ctx->subagent;
    side->call_start = req.start;
    side->next = req.next;
    side->body = req.body;
    side->body_free = req.body_free;
    self->side = side;
    evloop_post(ctx->env->loop, s_side_start, self);
}

static void s_wait_done(void *arg) {
    task_t *self = arg;
    self->timer = NULL;
    self->wait = S_BUSY;
    if (!s_park(self)) {
        dbexec_submit(self->ctx.env->exec, s_job, self);
    }
}

/* Loop thread: waits ctx.wait_ms, then runs ctx.next (or the first phase again). */
static void s_wait_start(void *arg) {
    task_t *self = arg;
    if (cancel_is_set(self->ctx.cancel)) {
        s_finish(self);
        return;
    }
    self->wait = S_TIMER;
    int64_t at = id_now_ms() + (self->ctx.wait_ms > 0 ? self->ctx.wait_ms : 0);
    self->timer = evloop_timer_at(self->ctx.env->loop, at, s_wait_done, self);
}

static void s_call_done(void *arg, provider_rc_t rc, provider_result_t *res) {
    task_t *self = arg;
    self->call = NULL;
    self->wait = S_BUSY;
    self->ctx.call_rc = rc;
    self->ctx.call_res = *res;
    res->content = NULL;
    res->usage = NULL;
    if (rc == PROVIDER_CANCELLED) {
        /* Nothing to write: the next phase only closes the episode (it takes no connection). */
        (void)self->ctx.next(&self->ctx, NULL);
        s_finish(self);
        return;
    }
    if (!s_park(self)) {
        dbexec_submit(self->ctx.env->exec, s_job, self);
    }
}

/* Loop thread: makes the model call in ctx.call, then runs ctx.next as a database job. */
static void s_call_start(void *arg) {
    task_t *self = arg;
    if (cancel_is_set(self->ctx.cancel)) {
        self->ctx.call_rc = PROVIDER_CANCELLED;
        (void)self->ctx.next(&self->ctx, NULL);
        s_finish(self);
        return;
    }
    self->wait = S_CALL;
    taskctx_t *ctx = &self->ctx;
    provider_call_t *(*start)(taskctx_t *, provider_done_fn *, void *) = ctx->call_start;
    ctx->call_start = NULL;
    self->call = start ? start(ctx, s_call_done, self)
                       : provider_start(ctx->env->loop, &ctx->call, ctx->on_part, ctx->part_arg,
                                        s_call_done, self);
}

/* What follows a phase that returned rc. */
static void s_after(task_t *self, taskctx_rc_t rc) {
    taskctx_t *ctx = &self->ctx;
    taskctx_env_t *env = ctx->env;
    s_side_take(self);
    switch (rc) {
        case TASKCTX_CALL:
            evloop_post(env->loop, s_call_start, self);
            return;
        case TASKCTX_WAIT:
            evloop_post(env->loop, s_wait_start, self);
            return;
        case TASKCTX_RETRY:
            atomic_fetch_add(&env->counters.retries, 1);
            log_warn("task_retry", "chat_id=%s task=%s backoff_ms=%lld", ctx->chat_id,
                     task_kind_name(self->kind), (long long)self->backoff);
            taskctx_reset(ctx); /* the next attempt starts over from the first phase */
            ctx->wait_ms = self->backoff;
            self->backoff =
                self->backoff * 2 > TASK_BACKOFF_MAX_MS ? TASK_BACKOFF_MAX_MS : self->backoff * 2;
            evloop_post(env->loop, s_wait_start, self);
            return;
        case TASKCTX_DONE:
        case TASKCTX_QUIET:
            s_finish(self);
            return;
    }
}

/* A database job: runs the task's next phase (its first when none is set). */
static void s_job(void *arg, PGconn *conn) {
    task_t *self = arg;
    taskctx_t *ctx = &self->ctx;
    if (!ctx->next && cancel_is_set(ctx->cancel)) {
        s_finish(self);
        return;
    }
    taskctx_phase_fn *fn = ctx->next ? ctx->next : s_entry(self->kind);
    ctx->next = NULL;
    s_after(self, fn(ctx, conn));
}

/* Loop thread: a cancel reaches the task where it waits. */
static void s_cancel_on_loop(void *arg) {
    task_t *self = arg;
    if (self->side_call) {
        provider_cancel(self->side_call); /* ends it through s_side_done */
    }
    if (self->wait == S_CALL) {
        provider_cancel(self->call); /* ends it through s_call_done */
    } else if (self->wait == S_TIMER) {
        evloop_timer_cancel(self->ctx.env->loop, self->timer);
        self->timer = NULL;
        self->wait = S_BUSY;
        s_finish(self);
    } else if (s_unqueue(self)) {
        s_finish(self);
    }
    s_unref(self);
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
    self->backoff = TASK_BACKOFF_MIN_MS;
    atomic_init(&self->refs, 1);
    pthread_mutex_init(&self->end_lock, NULL);
    snprintf(self->lock_key, sizeof self->lock_key, "%s:%lld:%s", chat_id,
             (long long)history_version, status ? status : "*");
    log_debug("task_started", "chat_id=%s task=%s id=%llu history_version=%lld", chat_id,
              task_kind_name(kind), (unsigned long long)id, (long long)history_version);
    if (s_lock_or_queue(self)) {
        dbexec_submit(env->exec, s_job, self);
    }
    return self;
}

void task_cancel(task_t *self) {
    cancel_set(self->ctx.cancel);
    atomic_fetch_add(&self->refs, 1);
    evloop_post(self->ctx.env->loop, s_cancel_on_loop, self);
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
    pthread_mutex_lock(&s_end_mutex);
    while (!atomic_load(&self->finished)) {
        pthread_cond_wait(&s_end_cond, &s_end_mutex);
    }
    pthread_mutex_unlock(&s_end_mutex);
    s_unref(self);
    *self_p = NULL;
}
