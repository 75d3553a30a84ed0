/* worker: see worker.h. */
#include "worker.h"
#include "config.h"
#include "acquirer.h"
#include "bus.h"
#include "chatstate.h"
#include "dbexec.h"
#include "dbpool.h"
#include "heartbeater.h"
#include "leaseset.h"
#include "log.h"
#include "manager.h"
#include "hooks.h"
#include "hookstep.h"
#include "mcpset.h"
#include "mem.h"
#include "partbuf.h"
#include "relay.h"
#include "task.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct worker {
    char id[ID_UUID_LEN + 1];
    worker_options_t opts; /* the caller's, copied: every step reads them here */
    config_t cfg;          /* likewise; its strings borrowed from the caller's config */
    bus_publisher_t *pub;
    partbuf_t *partbuf;
    relay_worker_t *relay;
    leaseset_t *leases;
    taskctx_env_t env;
    manager_t *manager;
    heartbeater_t *heartbeater;
    acquirer_t *acquirer;
    bool shut;
};

static int s_num(const char *name, int64_t dflt, int64_t min, int64_t *out) {
    if (config_env_int(name, dflt, min, out) != 0) {
        fprintf(stderr, "config: %s must be an integer >= %lld (got \"%s\")\n", name,
                (long long)min, getenv(name));
        return -1;
    }
    return 0;
}

static int s_options(worker_options_t *o);

/* The compaction settings: the override's name (at most COMPACTION_MODEL_NAME_MAX - 1
 * bytes) and the default threshold (0..100). */
/* A model config name from the environment variable var into out (size bytes; "" unset). */
static int s_name(const char *var, char *out, size_t size) {
    const char *v = getenv(var);
    if (v && strlen(v) >= size) {
        fprintf(stderr, "config: %s must be at most %zu bytes\n", var, size - 1);
        return -1;
    }
    snprintf(out, size, "%s", v ? v : "");
    return 0;
}

static int s_compaction(compaction_config_t *c) {
    if (s_name("CHATFLEET_COMPACTION_MODEL", c->model, sizeof c->model) != 0) {
        return -1;
    }
    int64_t pct = 0;
    if (s_num("CHATFLEET_COMPACTION_THRESHOLD_PERCENT", 70, 0, &pct) != 0) {
        return -1;
    }
    if (pct > 100) {
        fprintf(stderr,
                "config: CHATFLEET_COMPACTION_THRESHOLD_PERCENT must be at most 100 (got"
                " %lld)\n",
                (long long)pct);
        return -1;
    }
    c->default_threshold = (int)pct;
    return 0;
}

int worker_options_load(worker_options_t *o) {
    int rc =
        s_options(o) || s_compaction(&o->turn.compaction) ||
                s_name("CHATFLEET_TITLE_MODEL", o->turn.title_model, sizeof o->turn.title_model) ||
                s_name("CHATFLEET_PLAN_MODE_INSTRUCTIONS", o->turn.plan_instructions,
                       sizeof o->turn.plan_instructions)
            ? -1
            : 0;
    /* Limiter slots are PostgreSQL integers (chat_heartbeats.slot). */
    if (rc == 0 && o->max_chats + o->max_subagents > INT32_MAX) {
        fprintf(stderr,
                "config: CHATFLEET_WORKER_MAX_CHATS + CHATFLEET_WORKER_MAX_SUBAGENTS must be at"
                " most %d (got %lld)\n",
                INT32_MAX, (long long)(o->max_chats + o->max_subagents));
        return -1;
    }
    /* Times a weight (at most 1000, users.chat_weight), in PostgreSQL's bigint. */
    if (rc == 0 && o->user_max_chats > INT32_MAX) {
        fprintf(stderr, "config: CHATFLEET_WORKER_USER_MAX_CHATS must be at most %d (got %lld)\n",
                INT32_MAX, (long long)o->user_max_chats);
        return -1;
    }
    if (rc == 0 && o->max_subagents > 0 && o->max_chats == 0) {
        fprintf(stderr, "config: CHATFLEET_WORKER_MAX_SUBAGENTS needs the limiter on"
                        " (CHATFLEET_WORKER_MAX_CHATS > 0)\n");
        return -1;
    }
    return rc;
}

static int s_options(worker_options_t *o) {
    return s_num("CHATFLEET_WORKER_MAX_CHATS", 1000, 0, &o->max_chats) ||
                   s_num("CHATFLEET_WORKER_MAX_SUBAGENTS", 0, 0, &o->max_subagents) ||
                   s_num("CHATFLEET_WORKER_USER_MAX_CHATS", 0, 0, &o->user_max_chats) ||
                   s_num("CHATFLEET_WORKER_SYNC_MS", 1000, 10, &o->sync_ms) ||
                   s_num("CHATFLEET_MAX_GENERATION_RETRIES", 25, 0, &o->turn.max_retries) ||
                   s_num("CHATFLEET_MAX_STEPS_PER_TURN", 1200, 1, &o->turn.max_steps) ||
                   s_num("CHATFLEET_WORKER_RETRY_BASE_MS", 500, 0, &o->turn.retry_base_ms) ||
                   s_num("CHATFLEET_WORKER_RETRY_MAX_MS", 30000, 0, &o->turn.retry_max_ms) ||
                   s_num("CHATFLEET_SIM_CHUNK_MS", 20, 0, &o->turn.sim_chunk_ms) ||
                   s_num("CHATFLEET_REQUIRES_ACTION_DEADLINE_MS", 5 * 60 * 1000, 1,
                         &o->ra_deadline_ms) ||
                   s_num("CHATFLEET_WORKER_DRAIN_MS", 5000, 0, &o->drain_ms) ||
                   s_num("CHATFLEET_WORKER_DB_CONNS", 8, WORKER_DB_CONNS_MIN, &o->db_conns) ||
                   s_num("CHATFLEET_SUBAGENT_MAX_DEPTH", 3, 0, &o->turn.subagent_max_depth) ||
                   s_num("CHATFLEET_SUBAGENT_MAX_CHILDREN", 16, 1, &o->turn.subagent_max_children)
               ? -1
               : 0;
}

/* The database URL is required and must fit the manager's copy. 0 or -1 (logged). */
static int s_config_check(const config_t *cfg) {
    if (!cfg->database_url) {
        log_error("worker_config", "reason=\"CHATFLEET_DATABASE_URL is required\"");
        return -1;
    }
    if (strlen(cfg->database_url) >= MANAGER_URL_MAX) {
        log_error("worker_config", "reason=\"CHATFLEET_DATABASE_URL is longer than %d bytes\"",
                  MANAGER_URL_MAX - 1);
        return -1;
    }
    return 0;
}

/* Statements are bounded so that no task or actor can hang on a wedged server. */
static int64_t s_statement_ms(const config_t *cfg) {
    return cfg->lease_stale_ms > 3000 ? cfg->lease_stale_ms : 3000;
}

/* The acquirer, the heartbeater and the sync loop hold one connection each; the task jobs
 * share the rest (ARCHITECTURE.md §6.5). */
static int s_task_conns(const worker_options_t *opts) {
    return (int)opts->db_conns - 3;
}

/* The bus publisher, the part buffer and its relay, the lease set. -1 (logged) without a
 * publisher; a relay that cannot start is only a warning. */
static int s_start_bus(worker_t *self) {
    const config_t *cfg = &self->cfg;
    self->pub = bus_publisher_new(cfg->broker_pub);
    if (!self->pub) {
        log_error("worker_config", "reason=\"invalid broker pub endpoint\" endpoint=%s",
                  cfg->broker_pub);
        return -1;
    }
    self->partbuf = partbuf_new(self->pub);
    int64_t relay_hb = PROTO_HEARTBEAT_DEFAULT_MS;
    self->relay = relay_worker_new(cfg->broker_relay, self->id, relay_hb, partbuf_relay_handler,
                                   self->partbuf);
    if (!self->relay) {
        log_warn("worker_relay_unavailable", "endpoint=%s", cfg->broker_relay);
    }
    self->leases = leaseset_new();
    return 0;
}

/* What the tasks run on: the connection pool, the job threads and the event loop. 0 or -1
 * (logged). */
static int s_start_task_threads(worker_t *self) {
    taskctx_env_t *env = &self->env;
    snprintf(env->worker_id, sizeof env->worker_id, "%s", self->id);
    int task_conns = s_task_conns(&self->opts);
    env->pool = dbpool_new(self->cfg.database_url, "chatfleet-worker task",
                           (int)s_statement_ms(&self->cfg), task_conns);
    env->exec = dbexec_new(env->pool, task_conns);
    env->loop = evloop_new();
    ASSERT(pthread_mutex_init(&env->done_lock, NULL) == 0);
    if (!env->exec || evloop_start(env->loop) != 0) {
        log_error("worker_start_failed", "worker_id=%s reason=\"task threads\"", self->id);
        return -1;
    }
    return 0;
}

/* The deployment's MCP servers, one connection each, started now (ARCHITECTURE.md §7.9),
 * and the lifecycle hook consumer, when one is configured (§7.10). 0 or -1 (logged). */
static int s_start_mcp_and_hooks(worker_t *self) {
    taskctx_env_t *env = &self->env;
    char why[256] = "";
    env->mcp = mcpset_new(self->cfg.config_path, why, sizeof why);
    if (!env->mcp) {
        log_error("worker_config", "reason=\"%s\"", why);
        return -1;
    }
    mcpset_log(env->mcp);
    hooks_config_t hc;
    if (hooks_config_read(&hc, 0, why, sizeof why) != 0) { /* never blocks: no thread bound */
        log_error("worker_config", "reason=\"%s\"", why);
        return -1;
    }
    hooks_runner_t hr = hookstep_runner(env->loop);
    env->hooks = hooks_new(&hc, &hr);
    hooks_config_clear(&hc);
    hooks_log_config(env->hooks);
    return 0;
}

/* The rest of what every task sees: where its hints and ends go, the turn's options (a copy
 * of opts->turn), and the chatstate settings every bundle of the worker passes. */
static void s_task_env(worker_t *self) {
    const worker_options_t *opts = &self->opts;
    taskctx_env_t *env = &self->env;
    env->partbuf = self->partbuf;
    env->sink = bus_publisher_sink(self->pub);
    atomic_init(&env->limiter_full, false);
    snprintf(env->inbox, sizeof env->inbox, "inproc://chatfleet-manager-%s", self->id);
    env->opts = opts->turn;
    env->opts.queue_max = self->cfg.queue_max;
    env->usage = usagemeter_new();
    env->stages = stagemeter_new();
    env->turns = turnset_new(taskctx_turn_abandoned, env);
    /* Spans of the turns, when an OTLP/HTTP receiver is configured (otlp.h). */
    env->otlp = otlp_new(getenv("CHATFLEET_OTLP_ENDPOINT"), self->id);
    env->chat_settings = (cs_settings_t){.lease_stale_ms = self->cfg.lease_stale_ms,
                                         .requires_action_deadline_ms = opts->ra_deadline_ms,
                                         .max_attachments = (int)self->cfg.chat_max_attachments};
}

/* The manager and its inbox, the socket task ends are pushed on. 0 or -1 (logged). */
static int s_start_manager(worker_t *self) {
    taskctx_env_t *env = &self->env;
    manager_args_t ma = {.env = env,
                         .leases = self->leases,
                         .database_url = self->cfg.database_url,
                         .broker_sub = self->cfg.broker_sub,
                         .sync_ms = self->opts.sync_ms,
                         .statement_timeout_ms = s_statement_ms(&self->cfg)};
    self->manager = manager_new(&ma);
    env->done = zsock_new(ZMQ_PUSH);
    if (env->done) {
        /* Task ends must never block: no high-water mark, and a bounded send. */
        zsock_set_sndhwm(env->done, 0);
        zsock_set_sndtimeo(env->done, 1000);
    }
    if (!self->manager || !env->done || zsock_connect(env->done, "%s", env->inbox) != 0) {
        log_error("worker_start_failed", "worker_id=%s reason=\"manager inbox\"", self->id);
        return -1;
    }
    return 0;
}

/* The lease actors: the heartbeater and the acquirer. */
static void s_start_lease_actors(worker_t *self) {
    const config_t *cfg = &self->cfg;
    const worker_options_t *opts = &self->opts;
    taskctx_env_t *env = &self->env;
    int64_t stmt_ms = s_statement_ms(cfg);
    heartbeater_args_t ha = {.database_url = cfg->database_url,
                             .inbox = env->inbox,
                             .leases = self->leases,
                             .heartbeat_ms = cfg->heartbeat_ms,
                             .lease_stale_ms = cfg->lease_stale_ms};
    snprintf(ha.worker_id, sizeof ha.worker_id, "%s", self->id);
    self->heartbeater = heartbeater_new(&ha);
    acquirer_args_t aa = {.database_url = cfg->database_url,
                          .broker_sub = cfg->broker_sub,
                          .inbox = env->inbox,
                          .poll_ms = cfg->acquire_poll_ms,
                          .max_chats = opts->max_chats,
                          .max_subagents = opts->max_subagents,
                          .user_max_chats = opts->user_max_chats,
                          .lease_stale_ms = cfg->lease_stale_ms,
                          .statement_timeout_ms = stmt_ms,
                          .sink = env->sink,
                          .limiter_full = &env->limiter_full,
                          .auto_archive_days = cfg->auto_archive_days,
                          .auto_archive_interval_ms = cfg->auto_archive_interval_ms,
                          .auto_archive_batch = cfg->auto_archive_batch,
                          .clock_offset_s = cfg->test_clock_offset_s};
    snprintf(aa.worker_id, sizeof aa.worker_id, "%s", self->id);
    self->acquirer = acquirer_new(&aa);
}

static void s_log_started(const worker_t *self) {
    const worker_options_t *opts = &self->opts;
    log_info("worker_started",
             "worker_id=%s max_chats=%lld max_subagents=%lld user_max_chats=%lld sync_ms=%lld "
             "max_retries=%lld "
             "max_steps=%lld "
             "retry_base_ms=%lld retry_max_ms=%lld sim_chunk_ms=%lld "
             "requires_action_deadline_ms=%lld drain_ms=%lld db_conns=%lld task_conns=%d "
             "compaction_model=%s compaction_threshold_percent=%d title_model=%s "
             "subagent_max_depth=%lld subagent_max_children=%lld plan_instructions=%s "
             "otlp_endpoint=%s",
             self->id, (long long)opts->max_chats, (long long)opts->max_subagents,
             (long long)opts->user_max_chats, (long long)opts->sync_ms,
             (long long)opts->turn.max_retries, (long long)opts->turn.max_steps,
             (long long)opts->turn.retry_base_ms, (long long)opts->turn.retry_max_ms,
             (long long)opts->turn.sim_chunk_ms, (long long)opts->ra_deadline_ms,
             (long long)opts->drain_ms, (long long)opts->db_conns, s_task_conns(opts),
             opts->turn.compaction.model[0] ? opts->turn.compaction.model : "-",
             opts->turn.compaction.default_threshold,
             opts->turn.title_model[0] ? opts->turn.title_model : "-",
             (long long)opts->turn.subagent_max_depth, (long long)opts->turn.subagent_max_children,
             opts->turn.plan_instructions[0] ? "custom" : "default",
             self->env.otlp && getenv("CHATFLEET_OTLP_ENDPOINT") ? getenv("CHATFLEET_OTLP_ENDPOINT")
                                                                 : "-");
}

worker_t *worker_new(const config_t *cfg, const worker_options_t *opts) {
    if (s_config_check(cfg) != 0) {
        return NULL;
    }
    worker_t *self = mem_calloc(1, sizeof *self);
    ASSERT(id_uuid_new(self->id) == 0);
    self->opts = *opts;
    self->cfg = *cfg;
    if (s_start_bus(self) != 0 || s_start_task_threads(self) != 0 ||
        s_start_mcp_and_hooks(self) != 0) {
        worker_destroy(&self);
        return NULL;
    }
    s_task_env(self);
    if (s_start_manager(self) != 0) {
        worker_destroy(&self);
        return NULL;
    }
    s_start_lease_actors(self);
    s_log_started(self);
    return self;
}

int worker_shutdown(worker_t *self) {
    if (self->shut) {
        return 0;
    }
    self->shut = true;
    int64_t t0 = id_now_ms();
    acquirer_pause(self->acquirer);
    /* The heartbeater keeps renewing while the abandons run. */
    int rc = manager_drain(self->manager, (int)self->opts.drain_ms);
    log_info("worker_drained", "worker_id=%s ok=%d ms=%lld", self->id, rc == 0,
             (long long)(id_now_ms() - t0));
    return rc;
}

void worker_destroy(worker_t **self_p) {
    worker_t *self = *self_p;
    if (!self) {
        return;
    }
    acquirer_destroy(&self->acquirer);
    manager_destroy(&self->manager);
    heartbeater_destroy(&self->heartbeater);
    relay_worker_destroy(&self->relay);
    leaseset_destroy(&self->leases);
    /* Every task has ended (manager_destroy waited): no job or loop callback is left. */
    dbexec_destroy(&self->env.exec);
    mcpset_destroy(&self->env.mcp); /* before the loop: its last answers are posted there */
    evloop_destroy(&self->env.loop);
    hooks_destroy(&self->env.hooks); /* after the loop: no dispatch is left in it */
    zsock_destroy(&self->env.done);
    if (self->env.pool) {
        pthread_mutex_destroy(&self->env.done_lock);
    }
    dbpool_destroy(&self->env.pool);
    partbuf_destroy(&self->partbuf);
    usagemeter_destroy(&self->env.usage);
    turnset_destroy(&self->env.turns); /* after the manager: its runners have exited */
    stagemeter_destroy(&self->env.stages);
    otlp_destroy(&self->env.otlp); /* every task has ended: posts what is left */
    bus_publisher_destroy(&self->pub);
    free(self);
    *self_p = NULL;
}

const char *worker_id(const worker_t *self) {
    return self->id;
}

/* One reading of every counter, from the owner thread (the actors' pipes are its own). */
typedef struct {
    acquirer_status_t as;
    heartbeater_status_t hs;
    manager_status_t ms;
    size_t leases;
    size_t episodes;
    long long commits, fence_rejects, retries, model_calls, model_errors, turns_finished,
        turns_failed;
} s_reading_t;

static char *s_counter_metrics(worker_t *self, const s_reading_t *rp);

static void s_read(worker_t *self, s_reading_t *r) {
    taskctx_counters_t *c = &self->env.counters;
    memset(r, 0, sizeof *r);
    (void)acquirer_status(self->acquirer, &r->as);
    (void)heartbeater_status(self->heartbeater, &r->hs);
    (void)manager_status(self->manager, &r->ms);
    r->leases = leaseset_size(self->leases);
    r->episodes = partbuf_size(self->partbuf);
    r->commits = atomic_load(&c->commits);
    r->fence_rejects = atomic_load(&c->fence_rejects);
    r->retries = atomic_load(&c->retries);
    r->model_calls = atomic_load(&c->model_calls);
    r->model_errors = atomic_load(&c->model_errors);
    r->turns_finished = atomic_load(&c->turns_finished);
    r->turns_failed = atomic_load(&c->turns_failed);
}

void worker_log_counters(worker_t *self) {
    s_reading_t r;
    s_read(self, &r);
    log_info("worker_counters",
             "worker_id=%s acquired=%lld takeovers=%lld runners=%lld tasks=%lld "
             "leases=%zu heartbeat_ticks=%lld heartbeat_failed=%lld leases_lost=%lld "
             "commits=%lld fence_rejects=%lld task_retries=%lld model_calls=%lld "
             "model_errors=%lld turns_finished=%lld turns_failed=%lld episodes=%zu",
             self->id, (long long)r.as.acquired, (long long)r.as.takeovers, (long long)r.ms.runners,
             (long long)r.ms.tasks, r.leases, (long long)r.hs.ticks, (long long)r.hs.failed,
             (long long)r.hs.lost, r.commits, r.fence_rejects, r.retries, r.model_calls,
             r.model_errors, r.turns_finished, r.turns_failed, r.episodes);
}

/* The model call latency histogram and errors by status, appended to text (consumed). */
static char *s_model_metrics(worker_t *self, char *text) {
    taskctx_counters_t *c = &self->env.counters;
    char *out = mem_printf("%s# TYPE chatfleet_worker_model_call_seconds histogram\n", text);
    free(text);
    long long cum = 0;
    for (int b = 0; b < TASKCTX_MODEL_BUCKETS; b++) {
        cum += atomic_load(&c->model_ms_buckets[b]);
        char le[24];
        if (b < TASKCTX_MODEL_BUCKETS - 1) {
            snprintf(le, sizeof le, "%g", (double)taskctx_model_bucket_ms[b] / 1000.0);
        } else {
            snprintf(le, sizeof le, "+Inf");
        }
        char *next = mem_printf(
            "%schatfleet_worker_model_call_seconds_bucket{worker=\"%s\",le=\"%s\"} %lld\n", out,
            self->id, le, cum);
        free(out);
        out = next;
    }
    char *next =
        mem_printf("%schatfleet_worker_model_call_seconds_sum{worker=\"%s\"} %.3f\n"
                   "chatfleet_worker_model_call_seconds_count{worker=\"%s\"} %lld\n"
                   "# TYPE chatfleet_worker_model_errors_by_status_total counter\n",
                   out, self->id, (double)atomic_load(&c->model_ms_sum) / 1000.0, self->id, cum);
    free(out);
    out = next;
    for (int k = 0; k < TASKCTX_ERROR_CLASSES; k++) {
        next = mem_printf(
            "%schatfleet_worker_model_errors_by_status_total{worker=\"%s\",status=\"%s\"} %lld\n",
            out, self->id, taskctx_error_class_names[k],
            (long long)atomic_load(&c->model_errors_by_class[k]));
        free(out);
        out = next;
    }
    return out;
}

/* What the worker holds for its turns in flight (ARCHITECTURE.md §6.5), appended to text
 * (consumed): task connections, jobs waiting for a thread, transfers and timers on the loop. */
static char *s_capacity_metrics(worker_t *self, char *text) {
    dbpool_stats_t ps;
    dbpool_stats(self->env.pool, &ps);
    evloop_stats_t ls;
    evloop_stats(self->env.loop, &ls);
    char *out =
        mem_printf("%s# TYPE chatfleet_worker_task_connections gauge\n"
                   "chatfleet_worker_task_connections{worker=\"%s\",state=\"open\"} %d\n"
                   "chatfleet_worker_task_connections{worker=\"%s\",state=\"idle\"} %d\n"
                   "# TYPE chatfleet_worker_task_connection_waiters gauge\n"
                   "chatfleet_worker_task_connection_waiters{worker=\"%s\"} %d\n"
                   "# TYPE chatfleet_worker_task_connect_failures_total counter\n"
                   "chatfleet_worker_task_connect_failures_total{worker=\"%s\"} %lld\n"
                   "# TYPE chatfleet_worker_task_jobs_queued gauge\n"
                   "chatfleet_worker_task_jobs_queued{worker=\"%s\"} %zu\n"
                   "# TYPE chatfleet_worker_loop_transfers gauge\n"
                   "chatfleet_worker_loop_transfers{worker=\"%s\"} %zu\n"
                   "# TYPE chatfleet_worker_loop_timers gauge\n"
                   "chatfleet_worker_loop_timers{worker=\"%s\"} %zu\n",
                   text, self->id, ps.open, self->id, ps.idle, self->id, ps.waiting, self->id,
                   (long long)ps.connect_failures, self->id, dbexec_queued(self->env.exec),
                   self->id, ls.transfers, self->id, ls.timers);
    free(text);
    return out;
}

/* The span exporter's counters (otlp.h), when it runs. 0, or -1 past out's cap. */
static int s_span_metrics(worker_t *self, dynbuf_t *out) {
    if (!self->env.otlp) {
        return 0;
    }
    otlp_stats_t st;
    otlp_stats(self->env.otlp, &st);
    return dynbuf_addf(out,
                       "# TYPE chatfleet_worker_spans_total counter\n"
                       "chatfleet_worker_spans_total{worker=\"%s\",state=\"exported\"} %lld\n"
                       "chatfleet_worker_spans_total{worker=\"%s\",state=\"dropped\"} %lld\n"
                       "# TYPE chatfleet_worker_span_posts_failed_total counter\n"
                       "chatfleet_worker_span_posts_failed_total{worker=\"%s\"} %lld\n",
                       self->id, st.exported, self->id, st.dropped, self->id, st.posts_failed);
}

char *worker_metrics(worker_t *self) {
    s_reading_t r;
    s_read(self, &r);
    char *text = s_capacity_metrics(self, s_model_metrics(self, s_counter_metrics(self, &r)));
    text = usagemeter_metrics(self->env.usage, self->id, text);
    /* The stage timings and turn outcomes (stagemeter.h); a text past the cap keeps the rest. */
    dynbuf_t b;
    dynbuf_init(&b, (size_t)16 << 20);
    if (dynbuf_add(&b, text, strlen(text)) != 0 ||
        stagemeter_append(self->env.stages, &b, self->id) != 0 || s_span_metrics(self, &b) != 0) {
        log_warn("worker_metrics_truncated", "worker_id=%s", self->id);
    }
    free(text);
    text = dynbuf_take(&b);
    return text ? text : mem_strdup("");
}

static char *s_counter_metrics(worker_t *self, const s_reading_t *rp) {
    s_reading_t r = *rp;
    /* Prometheus text exposition: one family per line pair, labelled by worker. */
    return mem_printf(
        "# TYPE chatfleet_worker_leases gauge\nchatfleet_worker_leases{worker=\"%1$s\"} %2$zu\n"
        "# TYPE chatfleet_worker_runners gauge\nchatfleet_worker_runners{worker=\"%1$s\"} %3$lld\n"
        "# TYPE chatfleet_worker_acquisitions_total counter\n"
        "chatfleet_worker_acquisitions_total{worker=\"%1$s\"} %4$lld\n"
        "# TYPE chatfleet_worker_takeovers_total counter\n"
        "chatfleet_worker_takeovers_total{worker=\"%1$s\"} %5$lld\n"
        "# TYPE chatfleet_worker_leases_lost_total counter\n"
        "chatfleet_worker_leases_lost_total{worker=\"%1$s\"} %6$lld\n"
        "# TYPE chatfleet_worker_fence_rejections_total counter\n"
        "chatfleet_worker_fence_rejections_total{worker=\"%1$s\"} %7$lld\n"
        "# TYPE chatfleet_worker_commits_total counter\n"
        "chatfleet_worker_commits_total{worker=\"%1$s\"} %8$lld\n"
        "# TYPE chatfleet_worker_task_retries_total counter\n"
        "chatfleet_worker_task_retries_total{worker=\"%1$s\"} %9$lld\n"
        "# TYPE chatfleet_worker_model_calls_total counter\n"
        "chatfleet_worker_model_calls_total{worker=\"%1$s\"} %10$lld\n"
        "# TYPE chatfleet_worker_model_errors_total counter\n"
        "chatfleet_worker_model_errors_total{worker=\"%1$s\"} %11$lld\n"
        "# TYPE chatfleet_worker_turns_total counter\n"
        "chatfleet_worker_turns_total{worker=\"%1$s\",outcome=\"finished\"} %12$lld\n"
        "chatfleet_worker_turns_total{worker=\"%1$s\",outcome=\"failed\"} %13$lld\n"
        "# TYPE chatfleet_worker_episodes gauge\nchatfleet_worker_episodes{worker=\"%1$s\"} "
        "%14$zu\n",
        self->id, r.leases, (long long)r.ms.runners, (long long)r.as.acquired,
        (long long)r.as.takeovers, (long long)r.hs.lost, r.fence_rejects, r.commits, r.retries,
        r.model_calls, r.model_errors, r.turns_finished, r.turns_failed, r.episodes);
}
