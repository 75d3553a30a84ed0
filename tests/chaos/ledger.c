/* ledger: a chaos run's record and its invariant checker; see ledger.h and README.md. */
#include "ledger.h"
#include "agentcheck.h"
#include "id.h"
#include "jsonschema.h"
#include "mem.h"
#include "outformat.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LEDGER_OFFENDERS_MAX 2000 /* bytes of offending ids printed per invariant */

typedef struct {
    int64_t *version;
    bool *after_write;
    size_t n;
    size_t cap;
} snaps_t;

typedef struct {
    sse_t *sse;
    int gateway;
    int64_t after_id;
    int64_t opened_ms;
} segment_t;

typedef struct {
    ledger_sample_t max; /* each field's peak over the phase's samples */
    int samples;
    int failed; /* the database did not answer (a restart) */
} peaks_t;

struct ledger {
    pthread_mutex_t lock;
    int nchats;
    char chat_ids[LEDGER_CHATS_MAX][ID_UUID_LEN + 1];
    ledger_call_t *calls;
    size_t ncalls;
    size_t cap;
    FILE *log;
    int64_t t0;
    snaps_t snaps[LEDGER_CHATS_MAX];
    segment_t segs[LEDGER_CHATS_MAX][LEDGER_SEGMENTS_MAX];
    int nsegs[LEDGER_CHATS_MAX];
    const char *const *formats;
    int nformats;
    ledger_slow_t *slow;
    size_t nslow;
    size_t slow_cap;
    int workers;
    int db_conns;
    peaks_t peaks[LEDGER_PHASES];
};

static const char *const s_op_names[LEDGER_OPS] = {"create",       "send",         "send_interrupt",
                                                   "edit",         "queue_delete", "interrupt",
                                                   "tool_results", "get",          "compact"};

ledger_t *ledger_new(int nchats, const char *calls_log) {
    ASSERT(nchats > 0 && nchats <= LEDGER_CHATS_MAX);
    ledger_t *self = mem_calloc(1, sizeof *self);
    pthread_mutex_init(&self->lock, NULL);
    self->nchats = nchats;
    self->t0 = id_now_ms();
    if (calls_log) {
        self->log = fopen(calls_log, "w");
    }
    return self;
}

void ledger_destroy(ledger_t **self_p) {
    ledger_t *self = *self_p;
    if (!self) {
        return;
    }
    for (int c = 0; c < self->nchats; c++) {
        for (int s = 0; s < self->nsegs[c]; s++) {
            sse_close(&self->segs[c][s].sse);
        }
        free(self->snaps[c].version);
        free(self->snaps[c].after_write);
    }
    for (size_t i = 0; i < self->ncalls; i++) {
        json_decref(self->calls[i].deleted);
    }
    free(self->calls);
    free(self->slow);
    if (self->log) {
        fclose(self->log);
    }
    pthread_mutex_destroy(&self->lock);
    free(self);
    *self_p = NULL;
}

void ledger_add(ledger_t *self, const ledger_call_t *call) {
    pthread_mutex_lock(&self->lock);
    if (self->ncalls == self->cap) {
        self->cap = self->cap ? self->cap * 2 : 256;
        self->calls = mem_realloc(self->calls, self->cap * sizeof *self->calls);
    }
    ledger_call_t *c = &self->calls[self->ncalls++];
    *c = *call;
    c->at_ms = id_now_ms();
    if (self->log && call->op != LEDGER_GET) {
        fprintf(self->log,
                "t=%lld chat=%d op=%s status=%ld tag=%d target=%lld message_id=%lld"
                " queued_id=%lld rid=%s agents=%d\n",
                (long long)(c->at_ms - self->t0), c->chat, s_op_names[c->op], c->status, c->tag,
                (long long)c->target, (long long)c->message_id, (long long)c->queued_id,
                c->rid[0] ? c->rid : "-", c->agents);
        fflush(self->log);
    }
    pthread_mutex_unlock(&self->lock);
}

void ledger_set_chat(ledger_t *self, int chat, const char *chat_id) {
    ASSERT(chat >= 0 && chat < self->nchats);
    pthread_mutex_lock(&self->lock);
    snprintf(self->chat_ids[chat], sizeof self->chat_ids[chat], "%s", chat_id);
    pthread_mutex_unlock(&self->lock);
}

const char *ledger_chat_id(ledger_t *self, int chat) {
    ASSERT(chat >= 0 && chat < self->nchats);
    return self->chat_ids[chat]; /* written once, before the chat's client starts */
}

void ledger_snapshot(ledger_t *self, int chat, int64_t version, bool after_write) {
    pthread_mutex_lock(&self->lock);
    snaps_t *s = &self->snaps[chat];
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 64;
        s->version = mem_realloc(s->version, s->cap * sizeof *s->version);
        s->after_write = mem_realloc(s->after_write, s->cap * sizeof *s->after_write);
    }
    s->version[s->n] = version;
    s->after_write[s->n] = after_write;
    s->n++;
    pthread_mutex_unlock(&self->lock);
}

void ledger_stream_add(ledger_t *self, int chat, int gateway, int64_t after_id, sse_t **sse) {
    pthread_mutex_lock(&self->lock);
    ASSERT(self->nsegs[chat] < LEDGER_SEGMENTS_MAX);
    segment_t *s = &self->segs[chat][self->nsegs[chat]++];
    s->sse = *sse;
    s->gateway = gateway;
    s->after_id = after_id;
    s->opened_ms = id_now_ms();
    *sse = NULL;
    pthread_mutex_unlock(&self->lock);
}

bool ledger_stream_dead(ledger_t *self, int chat, int64_t stale_ms) {
    pthread_mutex_lock(&self->lock);
    int n = self->nsegs[chat];
    bool dead = n > 0 && n < LEDGER_SEGMENTS_MAX && sse_count(self->segs[chat][n - 1].sse) == 0 &&
                id_now_ms() - self->segs[chat][n - 1].opened_ms > stale_ms;
    pthread_mutex_unlock(&self->lock);
    return dead;
}

int ledger_stream_gateway(ledger_t *self, int chat) {
    pthread_mutex_lock(&self->lock);
    int n = self->nsegs[chat];
    int g = n ? self->segs[chat][n - 1].gateway : -1;
    pthread_mutex_unlock(&self->lock);
    return g;
}

int64_t ledger_stream_last_id(ledger_t *self, int chat) {
    pthread_mutex_lock(&self->lock);
    int64_t last = 0;
    for (int s = self->nsegs[chat] - 1; s >= 0 && last == 0; s--) {
        segment_t *seg = &self->segs[chat][s];
        for (int i = sse_count(seg->sse) - 1; i >= 0 && last == 0; i--) {
            last = json_integer_value(json_object_get(sse_get(seg->sse, i), "id"));
        }
        if (last == 0) {
            last = seg->after_id;
        }
    }
    pthread_mutex_unlock(&self->lock);
    return last;
}

json_t *ledger_stream_action(ledger_t *self, int chat) {
    pthread_mutex_lock(&self->lock);
    json_t *out = NULL;
    for (int s = self->nsegs[chat] - 1; s >= 0 && !out; s--) {
        segment_t *seg = &self->segs[chat][s];
        for (int i = sse_count(seg->sse) - 1; i >= 0 && !out; i--) {
            json_t *e = sse_get(seg->sse, i);
            if (!strcmp(json_string_value(json_object_get(e, "event")), "action_required")) {
                out = json_incref(json_object_get(
                    json_object_get(json_object_get(e, "data"), "action_required"), "tool_calls"));
            }
        }
    }
    pthread_mutex_unlock(&self->lock);
    return out;
}

int ledger_count(ledger_t *self, ledger_op_t op, int *total) {
    pthread_mutex_lock(&self->lock);
    int ok = 0;
    int all = 0;
    for (size_t i = 0; i < self->ncalls; i++) {
        if (self->calls[i].op == op) {
            all++;
            ok += self->calls[i].status >= 200 && self->calls[i].status < 300;
        }
    }
    pthread_mutex_unlock(&self->lock);
    if (total) {
        *total = all;
    }
    return ok;
}

ledger_agents_t ledger_agent_counts(ledger_t *self) {
    ledger_agents_t a = {0};
    pthread_mutex_lock(&self->lock);
    for (size_t i = 0; i < self->ncalls; i++) {
        const ledger_call_t *c = &self->calls[i];
        bool ok = c->status >= 200 && c->status < 300;
        a.turns += c->agents > 0;
        a.accepted += c->agents > 0 && ok;
        a.children += ok ? c->agents : 0;
        a.waits_seen += c->agent_wait;
    }
    pthread_mutex_unlock(&self->lock);
    return a;
}

void ledger_set_schemas(ledger_t *self, const char *const *formats, int n) {
    self->formats = formats;
    self->nformats = n;
}

void ledger_slow_add(ledger_t *self, const ledger_slow_t *chat) {
    pthread_mutex_lock(&self->lock);
    ASSERT(self->nslow < LEDGER_SLOW_MAX);
    if (self->nslow == self->slow_cap) {
        self->slow_cap = self->slow_cap ? self->slow_cap * 2 : 256;
        self->slow = mem_realloc(self->slow, self->slow_cap * sizeof *self->slow);
    }
    self->slow[self->nslow++] = *chat;
    if (self->log) {
        fprintf(self->log, "t=%lld slow op=create status=%ld tag=%d chat=%s schema=%d\n",
                (long long)(id_now_ms() - self->t0), chat->status, chat->tag,
                chat->chat_id[0] ? chat->chat_id : "-", chat->schema);
        fflush(self->log);
    }
    pthread_mutex_unlock(&self->lock);
}

void ledger_set_workers(ledger_t *self, int workers, int db_conns) {
    ASSERT(workers > 0 && workers <= LEDGER_WORKERS_MAX);
    self->workers = workers;
    self->db_conns = db_conns;
}

static int s_max(int a, int b) {
    return a > b ? a : b;
}

void ledger_sample(ledger_t *self, ledger_phase_t phase, const ledger_sample_t *s) {
    ASSERT(phase >= 0 && phase < LEDGER_PHASES);
    pthread_mutex_lock(&self->lock);
    peaks_t *p = &self->peaks[phase];
    p->samples++;
    if (!s) {
        p->failed++;
        pthread_mutex_unlock(&self->lock);
        return;
    }
    ledger_sample_t *m = &p->max;
    m->worker_conns = s_max(m->worker_conns, s->worker_conns);
    m->orphans = s_max(m->orphans, s->orphans);
    m->held = s_max(m->held, s->held);
    for (int i = 0; i < 4; i++) {
        m->by_app[i] = s_max(m->by_app[i], s->by_app[i]);
    }
    for (int i = 0; i < LEDGER_WORKERS_MAX; i++) {
        m->sock[i] = s_max(m->sock[i], s->sock[i]);
    }
    m->running = s_max(m->running, s->running);
    m->in_flight = s_max(m->in_flight, s->in_flight);
    pthread_mutex_unlock(&self->lock);
}

/* --- Checks. --- */

/* A bounded list of offending ids for one invariant. */
typedef struct {
    char text[LEDGER_OFFENDERS_MAX];
    size_t len;
    int n;
} offenders_t;

static void s_offend(offenders_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void s_offend(offenders_t *o, const char *fmt, ...) {
    o->n++;
    if (o->len + 80 >= sizeof o->text) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(o->text + o->len, sizeof o->text - o->len, fmt, ap);
    va_end(ap);
    if (w > 0) {
        o->len += (size_t)w < sizeof o->text - o->len ? (size_t)w : sizeof o->text - o->len - 1;
    }
    if (o->len + 2 < sizeof o->text) {
        o->text[o->len++] = ' ';
        o->text[o->len] = '\0';
    }
}

/* Prints the verdict line of one invariant; returns 1 when it failed. */
static int s_verdict(const char *name, const offenders_t *o) {
    if (o->n == 0) {
        printf("chaos: invariant %-22s OK\n", name);
        return 0;
    }
    printf("chaos: invariant %-22s FAILED (%d): %s\n", name, o->n, o->text);
    return 1;
}

static PGresult *s_query(PGconn *conn, const char *sql) {
    PGresult *res = PQexec(conn, sql);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        fprintf(stderr, "chaos: %s: %s", sql, PQresultErrorMessage(res));
        PQclear(res);
        return NULL;
    }
    return res;
}

static int s_tag_of(const char *text) {
    const char *p = text ? strstr(text, LEDGER_TAG_PREFIX) : NULL;
    if (!p) {
        return -1;
    }
    char *end = NULL;
    long v = strtol(p + strlen(LEDGER_TAG_PREFIX), &end, 10);
    return end && end > p + strlen(LEDGER_TAG_PREFIX) && v >= 0 && v < 1000000 ? (int)v : -1;
}

static bool s_2xx(const ledger_call_t *c) {
    return c->status >= 200 && c->status < 300;
}

typedef struct {
    int rows;
    int64_t id;
    bool deleted;
} tagrow_t;

typedef struct {
    char rid[ID_UUID_LEN + 1];
    int count;
    json_t *outcome; /* the last receipt's structured_output */
} receipt_t;

typedef struct {
    receipt_t *r;
    size_t n;
} receipts_t;

static receipt_t *s_receipt(receipts_t *rs, const char *rid) {
    for (size_t i = 0; i < rs->n; i++) {
        if (!strcmp(rs->r[i].rid, rid)) {
            return &rs->r[i];
        }
    }
    return NULL;
}

static receipts_t s_receipts(PGconn *conn) {
    receipts_t rs = {0};
    PGresult *res = s_query(conn, "SELECT structured_output_request_id, structured_output::text"
                                  " FROM chat_messages WHERE structured_output ->> 'type' ="
                                  " 'structured-output-outcome' ORDER BY id");
    rs.r = mem_calloc((size_t)(res ? PQntuples(res) : 0) + 1, sizeof *rs.r);
    for (int i = 0; res && i < PQntuples(res); i++) {
        receipt_t *r = s_receipt(&rs, PQgetvalue(res, i, 0));
        if (!r) {
            r = &rs.r[rs.n++];
            snprintf(r->rid, sizeof r->rid, "%s", PQgetvalue(res, i, 0));
        }
        r->count++;
        json_decref(r->outcome);
        r->outcome = json_loads(PQgetvalue(res, i, 1), 0, NULL);
    }
    PQclear(res);
    return rs;
}

static void s_receipts_free(receipts_t *rs) {
    for (size_t i = 0; i < rs->n; i++) {
        json_decref(rs->r[i].outcome);
    }
    free(rs->r);
}

static const char *s_outcome_status(const receipt_t *r) {
    const char *s = r ? json_string_value(json_object_get(r->outcome, "status")) : NULL;
    return s ? s : "";
}

/* Invariant 1: every accepted user message is in history (once), truncated by an edit,
 * deleted from the queue by its client, or has a cancellation receipt. */
static int s_check_accepted(ledger_t *self, PGconn *conn, receipts_t *rs) {
    int maxtag = 0;
    for (size_t i = 0; i < self->ncalls; i++) {
        maxtag = self->calls[i].tag > maxtag ? self->calls[i].tag : maxtag;
    }
    tagrow_t *tags = mem_calloc((size_t)maxtag + 1, sizeof *tags);
    /* Top-level chats only: a child's prompt quotes its parent's (tag included). */
    PGresult *res = s_query(conn, "SELECT m.id, m.deleted, m.content::text FROM chat_messages m"
                                  " JOIN chats c ON c.id = m.chat_id AND c.parent_chat_id IS NULL"
                                  " WHERE m.role = 'user' AND m.visibility <> 'model'"
                                  " ORDER BY m.id");
    for (int i = 0; res && i < PQntuples(res); i++) {
        int t = s_tag_of(PQgetvalue(res, i, 2));
        if (t >= 0 && t <= maxtag) {
            tags[t].rows++;
            tags[t].id = strtoll(PQgetvalue(res, i, 0), NULL, 10);
            tags[t].deleted = PQgetvalue(res, i, 1)[0] == 't';
        }
    }
    PQclear(res);
    offenders_t o = {0};
    int accepted = 0;
    int in_history = 0;
    int truncated = 0;
    int queue_deleted = 0;
    int cancelled = 0;
    int dropped = 0;
    int unknown_committed = 0;
    int unknown = 0;
    for (size_t i = 0; i < self->ncalls; i++) {
        const ledger_call_t *c = &self->calls[i];
        if (c->tag < 0 || (c->op != LEDGER_CREATE && c->op != LEDGER_SEND &&
                           c->op != LEDGER_SEND_INTERRUPT && c->op != LEDGER_EDIT)) {
            continue;
        }
        const tagrow_t *t = &tags[c->tag];
        if (!s_2xx(c)) {
            unknown++;
            if (t->rows > 0 && c->status >= 400 && c->status < 500) {
                s_offend(&o, "tag=%d(rejected %ld but committed as message %lld)", c->tag,
                         c->status, (long long)t->id);
            }
            unknown_committed += t->rows > 0;
            continue;
        }
        accepted++;
        const receipt_t *r = c->rid[0] ? s_receipt(rs, c->rid) : NULL;
        bool receipt_cancelled = r && !strcmp(s_outcome_status(r), "canceled");
        bool edit_after = false;
        bool queue_delete = false;
        bool superseded = false;
        for (size_t j = 0; j < self->ncalls; j++) {
            const ledger_call_t *d = &self->calls[j];
            if (d->chat != c->chat) {
                continue;
            }
            /* Any edit attempt counts: its outcome may be unknown but committed. */
            edit_after |= d->op == LEDGER_EDIT && t->rows > 0 && d->target <= t->id;
            queue_delete |=
                d->op == LEDGER_QUEUE_DELETE && c->queued_id && d->target == c->queued_id;
            /* An edit drops the whole queue (chatstate's edit bundle), so a message still
             * queued when its client edited the history is superseded. */
            superseded |= d->op == LEDGER_EDIT && c->queued_id && j > i;
        }
        if (t->rows > 1) {
            s_offend(&o, "tag=%d(%d rows)", c->tag, t->rows);
        } else if (t->rows == 1 && !t->deleted) {
            in_history++;
        } else if (t->rows == 1 && edit_after) {
            truncated++;
        } else if (receipt_cancelled) {
            cancelled++;
        } else if (t->rows == 0 && queue_delete) {
            queue_deleted++;
        } else if (t->rows == 0 && superseded) {
            dropped++;
        } else {
            s_offend(&o, "tag=%d(chat %d %s message %lld queued %lld)", c->tag, c->chat,
                     t->rows ? "deleted" : "missing", (long long)t->id, (long long)c->queued_id);
        }
    }
    free(tags);
    printf("chaos: accepted user messages: %d accepted = %d in history + %d truncated by edits + %d"
           " deleted from the queue by their client + %d queued ones dropped by a later edit + %d"
           " with a cancellation receipt; %d calls without a 2xx (%d of them committed anyway)\n",
           accepted, in_history, truncated, queue_deleted, dropped, cancelled, unknown,
           unknown_committed);
    return s_verdict("accepted_messages", &o);
}

/* The schemas of ledger_set_schemas, parsed and compiled (free with s_formats_free). */
static outformat_t **s_formats_new(ledger_t *self) {
    outformat_t **formats = mem_calloc((size_t)self->nformats + 1, sizeof *formats);
    for (int i = 0; i < self->nformats; i++) {
        json_t *v = json_loads(self->formats[i], 0, NULL);
        outformat_error_t err;
        ASSERT(v && outformat_parse(v, "response_format", &formats[i], &err) == 0);
        json_decref(v);
    }
    return formats;
}

static void s_formats_free(ledger_t *self, outformat_t ***formats_p) {
    for (int i = 0; i < self->nformats; i++) {
        outformat_destroy(&(*formats_p)[i]);
    }
    free(*formats_p);
    *formats_p = NULL;
}

/* Invariant 2: exactly one terminal receipt per structured request UUID (the ones the clients
 * were given and every one in the database), and each succeeded value validates. */
static int s_check_structured(ledger_t *self, PGconn *conn, receipts_t *rs) {
    offenders_t o = {0};
    int requests = 0;
    int by_status[4] = {0}; /* succeeded, failed, cancelled, other */
    int validated = 0;
    outformat_t **formats = s_formats_new(self);
    for (size_t i = 0; i < self->ncalls; i++) {
        const ledger_call_t *c = &self->calls[i];
        if (!c->rid[0] || !s_2xx(c)) {
            continue;
        }
        requests++;
        const receipt_t *r = s_receipt(rs, c->rid);
        if (!r || r->count != 1) {
            s_offend(&o, "rid=%s(%d receipts)", c->rid, r ? r->count : 0);
            continue;
        }
        const char *st = s_outcome_status(r);
        int k = !strcmp(st, "succeeded")  ? 0
                : !strcmp(st, "failed")   ? 1
                : !strcmp(st, "canceled") ? 2
                                          : 3;
        by_status[k]++;
        if (k == 0 && c->schema >= 0 && c->schema < self->nformats) {
            const json_t *value = json_object_get(r->outcome, "value");
            if (!value || jsonschema_validate(formats[c->schema]->compiled, value,
                                              JSONSCHEMA_FAIL_FAST, NULL) != JSONSCHEMA_VALID) {
                s_offend(&o, "rid=%s(succeeded value does not validate)", c->rid);
            } else {
                validated++;
            }
        }
    }
    /* Every request in the database, including those whose send had no 2xx. */
    PGresult *res = s_query(conn, "SELECT DISTINCT structured_output_request_id::text FROM"
                                  " chat_messages WHERE structured_output ->> 'type' ="
                                  " 'structured-output-request' UNION SELECT"
                                  " structured_output_request_id::text FROM chat_queued_messages"
                                  " WHERE structured_output_request_id IS NOT NULL");
    int in_db = res ? PQntuples(res) : 0;
    for (int i = 0; i < in_db; i++) {
        const receipt_t *r = s_receipt(rs, PQgetvalue(res, i, 0));
        if (!r || r->count != 1) {
            s_offend(&o, "db-rid=%s(%d receipts)", PQgetvalue(res, i, 0), r ? r->count : 0);
        }
    }
    PQclear(res);
    s_formats_free(self, &formats);
    printf("chaos: structured requests: %d accepted (%d in the database), receipts: %d succeeded"
           " (%d validated against their schema), %d failed, %d cancelled, %d other\n",
           requests, in_db, by_status[0], validated, by_status[1], by_status[2], by_status[3]);
    return s_verdict("structured_receipts", &o);
}

static int s_count_lines(const char *path, const char *needle) {
    FILE *f = fopen(path, "r");
    if (!f) {
        return 0;
    }
    char line[8192];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        n += strstr(line, needle) != NULL;
    }
    fclose(f);
    return n;
}

/* Runs sql, which yields one row (count, offending ids); adds the ids to o. */
static int s_dup_query(PGconn *conn, const char *sql, offenders_t *o, const char *what) {
    PGresult *res = s_query(conn, sql);
    int n = -1;
    if (res && PQntuples(res) == 1) {
        n = (int)strtol(PQgetvalue(res, 0, 0), NULL, 10);
        if (n > 0) {
            s_offend(o, "%s: %s", what, PQgetvalue(res, 0, 1));
        }
    } else {
        s_offend(o, "%s: query failed", what);
    }
    PQclear(res);
    return n;
}

/* Invariant 3: no step committed by a fenced-out runner: the rejections the workers logged,
 * and no duplicate the fence would have had to stop. */
static int s_check_fence(PGconn *conn, const char *const *logs) {
    offenders_t o = {0};
    int rejected = 0;
    int nlogs = 0;
    for (int i = 0; logs && logs[i]; i++) {
        rejected += s_count_lines(logs[i], "event=fence_mismatch");
        nlogs++;
    }
    int dup_results = s_dup_query(
        conn,
        "SELECT count(*), coalesce(string_agg(k, ','), '') FROM (SELECT m.chat_id || '/' ||"
        " (e.p ->> 'tool_call_id') AS k FROM chat_messages m,"
        " jsonb_array_elements(m.content::jsonb) e(p) WHERE m.role = 'tool' AND NOT m.deleted"
        " AND e.p ->> 'type' = 'tool-result'"
        " GROUP BY 1 HAVING count(*) > 1) d",
        &o, "duplicate tool results per tool_call_id");
    int dup_calls = s_dup_query(
        conn,
        "SELECT count(*), coalesce(string_agg(k, ','), '') FROM (SELECT m.chat_id || '/' ||"
        " (e.p ->> 'tool_call_id') AS k FROM chat_messages m,"
        " jsonb_array_elements(m.content::jsonb) e(p) WHERE m.role = 'assistant' AND NOT m.deleted"
        " AND e.p ->> 'type' = 'tool-call'"
        " GROUP BY 1 HAVING count(*) > 1) d",
        &o, "duplicate tool calls per tool_call_id");
    /* A final answer is an assistant row without tool calls; a user turn (the latest user row
     * of any visibility before it) gets at most one. */
    int dup_answers = s_dup_query(
        conn,
        "WITH r AS (SELECT id, chat_id, role, content, structured_output, max(id) FILTER (WHERE"
        " role = 'user') OVER (PARTITION BY chat_id ORDER BY id) AS turn FROM chat_messages"
        " WHERE NOT deleted) SELECT count(*), coalesce(string_agg(turn::text || ':' || ids,"
        " ','), '') FROM (SELECT turn, string_agg(id::text, '+') AS ids FROM r WHERE role ="
        " 'assistant' AND NOT content::jsonb @> '[{\"type\":\"tool-call\"}]' AND"
        " (structured_output ->> 'type') IS DISTINCT FROM 'structured-output-outcome'"
        " GROUP BY chat_id, turn HAVING count(*) > 1) d",
        &o, "user turns answered twice (turn:assistant ids)");
    PGresult *res = s_query(conn, "SELECT count(*) FILTER (WHERE role = 'assistant'),"
                                  " count(*) FILTER (WHERE role = 'tool') FROM chat_messages"
                                  " WHERE NOT deleted");
    printf("chaos: fencing: %d rejected writes (event=fence_mismatch in %d worker logs);"
           " %s assistant and %s tool rows committed: %d duplicate tool results, %d duplicate"
           " tool calls, %d user turns answered twice\n",
           rejected, nlogs, res ? PQgetvalue(res, 0, 0) : "?", res ? PQgetvalue(res, 0, 1) : "?",
           dup_results, dup_calls, dup_answers);
    PQclear(res);
    return s_verdict("no_fenced_out_commits", &o);
}

/* Invariant 4: every chat ends in waiting or error, or requires_action with calls pending for
 * its client; nothing is left queued. */
static int s_check_terminal(PGconn *conn) {
    offenders_t o = {0};
    PGresult *res = s_query(
        conn,
        "SELECT c.id, c.status, (SELECT count(*) FROM chat_queued_messages q WHERE"
        " q.chat_id = c.id), (SELECT count(*) FROM chat_messages m, jsonb_array_elements("
        "m.content::jsonb) e(p) WHERE m.chat_id = c.id AND m.role = 'assistant' AND NOT m.deleted"
        " AND e.p ->> 'type' = 'tool-call' AND NOT EXISTS (SELECT 1 FROM chat_messages t,"
        " jsonb_array_elements(t.content::jsonb) f(p) WHERE t.chat_id = c.id AND NOT t.deleted AND"
        " t.role = 'tool' AND f.p ->> 'tool_call_id' = e.p ->> 'tool_call_id')),"
        " c.waiting_on_agents FROM chats c ORDER BY c.created_at");
    int waiting = 0;
    int error = 0;
    int action = 0;
    for (int i = 0; res && i < PQntuples(res); i++) {
        const char *st = PQgetvalue(res, i, 1);
        long queued = strtol(PQgetvalue(res, i, 2), NULL, 10);
        long pending = strtol(PQgetvalue(res, i, 3), NULL, 10);
        bool agent_wait = PQgetvalue(res, i, 4)[0] == 't'; /* its calls are not the client's */
        if (queued > 0) {
            s_offend(&o, "%s(%ld queued)", PQgetvalue(res, i, 0), queued);
        } else if (!strcmp(st, "waiting")) {
            waiting++;
        } else if (!strcmp(st, "error")) {
            error++;
        } else if (!strcmp(st, "requires_action") && pending > 0 && !agent_wait) {
            action++;
        } else {
            s_offend(&o, "%s(%s%s)", PQgetvalue(res, i, 0), st, agent_wait ? ", agent wait" : "");
        }
    }
    printf("chaos: final chat states: %d chats: %d waiting, %d error, %d requires_action waiting"
           " for their client\n",
           res ? PQntuples(res) : 0, waiting, error, action);
    PQclear(res);
    return s_verdict("terminal_states", &o);
}

typedef struct {
    int64_t id;
    int64_t rev;
} viewrow_t;

typedef struct {
    int delivered;
    int duplicates;
    int resets;
    int segments;
    int rows;
    int unsignalled; /* deleted rows at or before the resume point left on screen */
} streamstats_t;

static viewrow_t *s_view_find(viewrow_t *v, size_t n, int64_t id) {
    for (size_t i = 0; i < n; i++) {
        if (v[i].id == id) {
            return &v[i];
        }
    }
    return NULL;
}

/* Replays chat c's stream events into a view and compares it with the committed rows. Adds
 * offenders to o (when not NULL) and returns how many mismatches it found. */
static int s_stream_chat(ledger_t *self, PGconn *conn, int c, offenders_t *o, streamstats_t *st) {
    size_t cap = 256;
    size_t n = 0;
    viewrow_t *view = mem_calloc(cap, sizeof *view);
    int bad = 0;
    pthread_mutex_lock(&self->lock);
    int nsegs = self->nsegs[c];
    pthread_mutex_unlock(&self->lock);
    for (int s = 0; s < nsegs; s++) {
        segment_t *seg = &self->segs[c][s];
        int64_t newest = seg->after_id;
        int count = sse_count(seg->sse);
        st->segments++;
        for (int i = 0; i < count; i++) {
            json_t *e = sse_get(seg->sse, i);
            const char *name = json_string_value(json_object_get(e, "event"));
            if (!strcmp(name, "history_reset")) {
                /* The gateway resends the whole visible history after a reset (stream.h). */
                n = 0;
                newest = 0;
                st->resets++;
                continue;
            }
            if (strcmp(name, "message") != 0) {
                continue;
            }
            json_t *m = json_object_get(json_object_get(e, "data"), "message");
            int64_t id = json_integer_value(json_object_get(m, "id"));
            int64_t rev = json_integer_value(json_object_get(m, "revision"));
            st->delivered++;
            viewrow_t *v = s_view_find(view, n, id);
            if (v) {
                if (rev == v->rev) {
                    st->duplicates++;
                } else if (rev < v->rev) {
                    bad++;
                    if (o) {
                        s_offend(o, "chat%d/%lld(revision %lld after %lld)", c, (long long)id,
                                 (long long)rev, (long long)v->rev);
                    }
                } else {
                    v->rev = rev;
                }
                continue;
            }
            if (id <= newest) {
                bad++;
                if (o) {
                    s_offend(o, "chat%d/%lld(new after %lld)", c, (long long)id, (long long)newest);
                }
            }
            newest = id > newest ? id : newest;
            if (n == cap) {
                cap *= 2;
                view = mem_realloc(view, cap * sizeof *view);
            }
            view[n++] = (viewrow_t){id, rev};
        }
    }
    const char *p[] = {self->chat_ids[c]};
    PGresult *res = PQexecParams(conn,
                                 "SELECT id, revision FROM chat_messages WHERE chat_id = $1 AND"
                                 " visibility <> 'model' AND NOT deleted ORDER BY id",
                                 1, NULL, p, NULL, NULL, 0);
    int rows = PQresultStatus(res) == PGRES_TUPLES_OK ? PQntuples(res) : -1;
    if (rows < 0) {
        bad++;
    }
    st->rows += rows > 0 ? rows : 0;
    bool *matched = mem_calloc(n + 1, sizeof *matched);
    for (int i = 0; i < rows; i++) {
        int64_t id = strtoll(PQgetvalue(res, i, 0), NULL, 10);
        int64_t rev = strtoll(PQgetvalue(res, i, 1), NULL, 10);
        viewrow_t *v = s_view_find(view, n, id);
        if (v) {
            matched[v - view] = true;
        }
        if (!v || v->rev != rev) {
            bad++;
            if (o) {
                s_offend(o, "chat%d/%lld(%s revision %lld, saw %lld)", c, (long long)id,
                         v ? "committed" : "never seen, committed", (long long)rev,
                         v ? (long long)v->rev : 0LL);
            }
        }
    }
    int64_t resumed_after = nsegs > 0 ? self->segs[c][nsegs - 1].after_id : 0;
    for (size_t j = 0; j < n; j++) {
        if (matched[j]) {
            continue;
        }
        /* A row shown and later deleted must have been answered by a history_reset, wherever
         * it stood relative to the connection's resume point. */
        bool gap = view[j].id <= resumed_after;
        st->unsignalled += gap;
        {
            bad++;
            if (o) {
                s_offend(o, "chat%d/%lld(shown but deleted%s)", c, (long long)view[j].id,
                         gap ? ", at or before the resume point" : "");
            }
        }
    }
    free(matched);
    PQclear(res);
    free(view);
    return bad;
}

/* Invariant 5: each chat's stream client saw every committed user-visible message exactly
 * once after de-duplication by (id, revision), new ids in id order, resets applied. Waits for
 * the clients to catch up first (streams poll every CHATFLEET_STREAM_POLL_MS). */
static int s_check_streams(ledger_t *self, PGconn *conn, int timeout_ms) {
    int64_t deadline = id_now_ms() + timeout_ms;
    int64_t t0 = id_now_ms();
    for (;;) {
        int bad = 0;
        for (int c = 0; c < self->nchats; c++) {
            streamstats_t st = {0};
            bad += s_stream_chat(self, conn, c, NULL, &st);
        }
        if (bad == 0 || id_now_ms() > deadline) {
            break;
        }
        struct timespec ts = {0, 200 * 1000 * 1000}; /* poll interval of the convergence wait */
        nanosleep(&ts, NULL);
    }
    offenders_t o = {0};
    streamstats_t st = {0};
    for (int c = 0; c < self->nchats; c++) {
        s_stream_chat(self, conn, c, &o, &st);
    }
    printf("chaos: streams: %d chats, %d connections (%d resumed with Last-Event-ID), %d message"
           " events for %d committed visible rows, %d duplicates removed by (id, revision), %d"
           " history_reset; caught up in %lld ms\n",
           self->nchats, st.segments, st.segments - self->nchats, st.delivered, st.rows,
           st.duplicates, st.resets, (long long)(id_now_ms() - t0));
    printf("chaos: streams: %d rows deleted at or before a connection's resume point left on"
           " screen (each one fails the invariant)\n",
           st.unsignalled);
    return s_verdict("streams_exactly_once", &o);
}

/* Invariant 6: snapshot_version per chat never goes back, and grows across a client's own
 * answered write. */
static int s_check_snapshots(ledger_t *self) {
    offenders_t o = {0};
    size_t total = 0;
    int grew = 0;
    for (int c = 0; c < self->nchats; c++) {
        const snaps_t *s = &self->snaps[c];
        total += s->n;
        for (size_t i = 1; i < s->n; i++) {
            if (s->version[i] < s->version[i - 1] ||
                (s->after_write[i] && s->version[i] <= s->version[i - 1])) {
                s_offend(&o, "chat%d(%lld then %lld%s)", c, (long long)s->version[i - 1],
                         (long long)s->version[i], s->after_write[i] ? " across a write" : "");
            }
            grew += s->after_write[i];
        }
    }
    printf("chaos: snapshot_version: %zu observations over %d chats (%d across a client's own"
           " write)\n",
           total, self->nchats, grew);
    return s_verdict("snapshot_monotonic", &o);
}

/* What the rows of one slow-phase chat showed. A turn is a user row of any visibility (the
 * finalizer's feedback rows start turns too, as in s_check_fence); a final answer is an
 * assistant row without tool calls that is not a receipt. */
typedef struct {
    bool seen;         /* the chat row exists */
    bool waiting;      /* status waiting without last_error */
    char status[24];   /* its status */
    int tag_rows;      /* visible user rows carrying the chat's tag */
    int tag_deleted;   /* of them, deleted */
    int foreign_users; /* visible user rows with another tag or none */
    int answers;       /* final answers in the turn of the tagged message */
    int echoes;        /* of them, the echo of the chat's own prompt */
    int twice;         /* turns answered more than once */
    int last_answers;  /* final answers of the chat's last turn */
    int deleted;       /* deleted assistant rows (no edit or interrupt ran: nothing to delete) */
    char rid[ID_UUID_LEN + 1]; /* the tagged row's structured request UUID, or "" */
} slowrows_t;

static int s_slow_cmp(const void *a, const void *b) {
    return strcmp(((const ledger_slow_t *)a)->chat_id, ((const ledger_slow_t *)b)->chat_id);
}

static ledger_slow_t *s_slow_find(ledger_t *self, size_t n, const char *chat_id) {
    ledger_slow_t key;
    snprintf(key.chat_id, sizeof key.chat_id, "%s", chat_id);
    return bsearch(&key, self->slow, n, sizeof *self->slow, s_slow_cmp);
}

/* Reads the rows of the slow chats (the first n of self->slow, sorted by chat id) into rows. */
static int s_slow_rows(ledger_t *self, PGconn *conn, size_t n, slowrows_t *rows) {
    size_t cap = n * (ID_UUID_LEN + 1) + 3;
    char *arr = mem_calloc(cap, 1);
    size_t len = 0;
    arr[len++] = '{';
    for (size_t i = 0; i < n; i++) {
        len += (size_t)snprintf(arr + len, cap - len, "%s%s", i ? "," : "", self->slow[i].chat_id);
    }
    snprintf(arr + len, cap - len, "}");
    const char *p[] = {arr};
    PGresult *res = PQexecParams(conn,
                                 "SELECT id::text, status::text, last_error IS NULL FROM chats"
                                 " WHERE id = ANY($1::uuid[])",
                                 1, NULL, p, NULL, NULL, 0);
    int rc = PQresultStatus(res) == PGRES_TUPLES_OK ? 0 : -1;
    for (int i = 0; rc == 0 && i < PQntuples(res); i++) {
        ledger_slow_t *c = s_slow_find(self, n, PQgetvalue(res, i, 0));
        if (c) {
            slowrows_t *r = &rows[c - self->slow];
            r->seen = true;
            snprintf(r->status, sizeof r->status, "%s", PQgetvalue(res, i, 1));
            r->waiting = !strcmp(r->status, "waiting") && PQgetvalue(res, i, 2)[0] == 't';
        }
    }
    PQclear(res);
    res = PQexecParams(conn,
                       "SELECT chat_id::text, role::text, visibility <> 'model', deleted,"
                       " coalesce((SELECT string_agg(e ->> 'text', '') FROM"
                       " jsonb_array_elements(content::jsonb) e WHERE e ->> 'type' = 'text'), ''),"
                       " content::jsonb @> '[{\"type\":\"tool-call\"}]',"
                       " (structured_output ->> 'type') IS NOT DISTINCT FROM"
                       " 'structured-output-outcome', CASE WHEN structured_output ->> 'type' ="
                       " 'structured-output-request' THEN structured_output_request_id::text END"
                       " FROM chat_messages WHERE chat_id = ANY($1::uuid[]) ORDER BY chat_id, id",
                       1, NULL, p, NULL, NULL, 0);
    free(arr);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        fprintf(stderr, "chaos: slow rows: %s", PQresultErrorMessage(res));
        PQclear(res);
        return -1;
    }
    ledger_slow_t *chat = NULL;
    bool tag_turn = false;
    int turn_answers = 0;
    for (int i = 0; i <= PQntuples(res); i++) {
        bool next = i == PQntuples(res) || !chat || strcmp(chat->chat_id, PQgetvalue(res, i, 0));
        if (next && chat) { /* the previous chat's last turn ends */
            slowrows_t *r = &rows[chat - self->slow];
            r->twice += turn_answers > 1;
            r->last_answers = turn_answers;
        }
        if (i == PQntuples(res)) {
            break;
        }
        if (next) {
            chat = s_slow_find(self, n, PQgetvalue(res, i, 0));
            ASSERT(chat); /* the query named only these chats */
            tag_turn = false;
            turn_answers = 0;
        }
        slowrows_t *r = &rows[chat - self->slow];
        const char *role = PQgetvalue(res, i, 1);
        bool visible = PQgetvalue(res, i, 2)[0] == 't';
        bool deleted = PQgetvalue(res, i, 3)[0] == 't';
        const char *text = PQgetvalue(res, i, 4);
        bool calls = PQgetvalue(res, i, 5)[0] == 't';
        bool receipt = PQgetvalue(res, i, 6)[0] == 't';
        if (!strcmp(role, "user")) {
            r->twice += turn_answers > 1;
            turn_answers = 0;
            tag_turn = visible && s_tag_of(text) == chat->tag;
            r->tag_rows += tag_turn;
            r->tag_deleted += tag_turn && deleted;
            if (tag_turn && !PQgetisnull(res, i, 7)) {
                snprintf(r->rid, sizeof r->rid, "%s", PQgetvalue(res, i, 7));
            }
            r->foreign_users += visible && !tag_turn;
        } else if (!strcmp(role, "assistant") && deleted) {
            r->deleted++;
        } else if (!strcmp(role, "assistant") && !calls && !receipt) {
            turn_answers++;
            if (tag_turn) {
                r->answers++;
                r->echoes += !strncmp(text, "Echo: ", 6) && s_tag_of(text) == chat->tag;
            }
        }
    }
    PQclear(res);
    return rc;
}

/* Invariant 7: every slow-phase turn accepted with a 2xx is answered exactly once, by the echo
 * of its own prompt, with no duplicate, stale or deleted assistant row; every such chat ends
 * waiting; a structured one has exactly one receipt, succeeded and valid; and the phase had
 * at least min_in_flight turns in flight together. */
static int s_check_slow(ledger_t *self, PGconn *conn, receipts_t *rs, int min_in_flight) {
    offenders_t o = {0};
    /* The accepted ones first, sorted by chat id, for s_slow_find. */
    size_t n = 0;
    int no_2xx = 0;
    for (size_t i = 0; i < self->nslow; i++) {
        ledger_slow_t *c = &self->slow[i];
        if (c->status >= 200 && c->status < 300 && c->chat_id[0]) {
            ledger_slow_t t = self->slow[n];
            self->slow[n++] = *c;
            *c = t;
        } else {
            no_2xx++;
            if (c->status >= 400 && c->status < 500) { /* nothing in this phase is refusable */
                s_offend(&o, "tag=%d(create rejected with %ld)", c->tag, c->status);
            }
        }
    }
    qsort(self->slow, n, sizeof *self->slow, s_slow_cmp);
    slowrows_t *rows = mem_calloc(n + 1, sizeof *rows);
    if (n > 0 && s_slow_rows(self, conn, n, rows) != 0) {
        s_offend(&o, "the slow chats could not be read");
    }
    outformat_t **formats = s_formats_new(self);
    int once = 0;
    int structured = 0;
    int receipts_ok = 0;
    int not_waiting = 0;
    int user_bad = 0;
    int twice = 0;
    int stale = 0;
    int deleted = 0;
    int unanswered = 0;
    for (size_t i = 0; i < n; i++) {
        const ledger_slow_t *c = &self->slow[i];
        const slowrows_t *r = &rows[i];
        int before = o.n;
        if (!r->seen) {
            s_offend(&o, "%s(tag %d: no such chat)", c->chat_id, c->tag);
            continue;
        }
        if (!r->waiting) {
            not_waiting++;
            s_offend(&o, "%s(ends %s%s)", c->chat_id, r->status,
                     strcmp(r->status, "waiting") ? "" : " with an error");
        }
        if (r->tag_rows != 1 || r->tag_deleted || r->foreign_users) {
            user_bad++;
            s_offend(&o, "%s(tag %d in history %d times, %d deleted, %d other user rows)",
                     c->chat_id, c->tag, r->tag_rows, r->tag_deleted, r->foreign_users);
        }
        if (r->twice) {
            twice++;
            s_offend(&o, "%s(%d turns answered twice)", c->chat_id, r->twice);
        }
        if (r->deleted) {
            deleted++;
            s_offend(&o, "%s(%d deleted assistant rows)", c->chat_id, r->deleted);
        }
        if (r->echoes != r->answers) {
            stale++;
            s_offend(&o, "%s(%d of %d answers to tag %d are not its echo)", c->chat_id,
                     r->answers - r->echoes, r->answers, c->tag);
        }
        /* A plain turn's answer is the echo; a structured one may answer its tagged message
         * with the echo (the scripted text-only attempt) and ends with one more answer. */
        if (r->last_answers != 1 || (c->schema < 0 && r->answers != 1)) {
            unanswered++;
            s_offend(&o, "%s(tag %d: %d answers, %d in its last turn)", c->chat_id, c->tag,
                     r->answers, r->last_answers);
        }
        if ((c->schema >= 0) != (r->rid[0] != '\0')) {
            s_offend(&o, "%s(tag %d: %s structured request)", c->chat_id, c->tag,
                     r->rid[0] ? "an unasked" : "no");
        } else if (c->schema >= 0) {
            structured++;
            const receipt_t *rc = s_receipt(rs, r->rid);
            const char *st = s_outcome_status(rc);
            const json_t *value = rc ? json_object_get(rc->outcome, "value") : NULL;
            if (!rc || rc->count != 1 || strcmp(st, "succeeded") != 0) {
                s_offend(&o, "%s(rid %s: %d receipts, %s)", c->chat_id, r->rid, rc ? rc->count : 0,
                         rc ? st : "none");
            } else if (c->schema >= self->nformats || !value ||
                       jsonschema_validate(formats[c->schema]->compiled, value,
                                           JSONSCHEMA_FAIL_FAST, NULL) != JSONSCHEMA_VALID) {
                s_offend(&o, "%s(rid %s: the value does not validate)", c->chat_id, r->rid);
            } else {
                receipts_ok++;
            }
        }
        once += o.n == before;
    }
    s_formats_free(self, &formats);
    free(rows);
    const peaks_t *p = &self->peaks[LEDGER_PHASE_SLOW];
    if (self->nslow > 0 && p->max.in_flight < min_in_flight) {
        s_offend(&o, "peak in flight %d < %d: the phase did not load the workers", p->max.in_flight,
                 min_in_flight);
    }
    printf("chaos: slow turns: %zu chats created (%zu accepted, %d without a 2xx), %d structured;"
           " %d answered exactly once by their own prompt's echo, %d structured receipts"
           " succeeded and validated\n",
           self->nslow, n, no_2xx, structured, once, receipts_ok);
    printf("chaos: slow turns: %d user messages missing or twice, %d answered twice, %d stale"
           " answers, %d with deleted assistant rows, %d unanswered, %d not waiting\n",
           user_bad, twice, stale, deleted, unanswered, not_waiting);
    printf("chaos: slow turns: peak %d chats running together, %d turns in flight (a model call"
           " started under a fresh lease; at least %d wanted)\n",
           p->max.running, p->max.in_flight, min_in_flight);
    return s_verdict("slow_turns_once", &o);
}

/* Invariant 8: the workers' PostgreSQL connections never exceeded workers x
 * CHATFLEET_WORKER_DB_CONNS in pg_stat_activity, nor CHATFLEET_WORKER_DB_CONNS per worker
 * process, in any sample of either phase. A backend whose worker was killed lingers until it
 * next reads from its socket (one waiting on a lock, until the lock is granted): its client is
 * gone and its restarted worker opens its own, so such orphans are counted and reported, not
 * held against the cap. (A sample that straddles a kill or a PostgreSQL restart sees every
 * connection that closed between its two reads as an orphan too: they were closing.) */
static int s_check_connections(ledger_t *self) {
    static const char *const names[LEDGER_PHASES] = {"workload", "slow phase"};
    offenders_t o = {0};
    int cap = self->workers * self->db_conns;
    for (int ph = 0; ph < LEDGER_PHASES; ph++) {
        const peaks_t *p = &self->peaks[ph];
        const ledger_sample_t *m = &p->max;
        char socks[16 * LEDGER_WORKERS_MAX] = "";
        size_t len = 0;
        for (int w = 0; w < self->workers; w++) {
            len +=
                (size_t)snprintf(socks + len, sizeof socks - len, "%s%d", w ? "/" : "", m->sock[w]);
            if (m->sock[w] > self->db_conns) {
                s_offend(&o, "%s: worker %d held %d connections", names[ph], w, m->sock[w]);
            }
        }
        if (m->held > cap) {
            s_offend(&o, "%s: %d worker connections in pg_stat_activity", names[ph], m->held);
        }
        if (p->samples > 0 && p->samples == p->failed) {
            s_offend(&o, "%s: no sample reached the database", names[ph]);
        }
        printf("chaos: worker connections, %s: peak %d held in pg_stat_activity (acquirer %d,"
               " heartbeater %d, sync %d, task %d; %d listed, at most %d of them orphans whose"
               " client was gone), per worker process %s; %d samples (%d without the database)\n",
               names[ph], m->held, m->by_app[0], m->by_app[1], m->by_app[2], m->by_app[3],
               m->worker_conns, m->orphans, socks, p->samples, p->failed);
    }
    printf("chaos: worker connections: cap %d workers x CHATFLEET_WORKER_DB_CONNS %d = %d\n",
           self->workers, self->db_conns, cap);
    return s_verdict("worker_connections", &o);
}

/* Invariant 9: compaction requests are consumed once. No chat is left with a request pending;
 * no chat has more manual summaries (deleted ones included: an edit may truncate one) than
 * requests its client saw accepted or whose outcome it could not know (no response, or a 5xx:
 * a gateway whose database went away after the COMMIT answers 500 for a committed request);
 * every summary call has exactly one result. */
static int s_check_compactions(ledger_t *self, PGconn *conn) {
    offenders_t o = {0};
    int *accepted = mem_calloc((size_t)self->nchats, sizeof *accepted);
    int *unknown = mem_calloc((size_t)self->nchats, sizeof *unknown);
    int requested = 0;
    int ok = 0;
    int unknowns = 0;
    for (size_t i = 0; i < self->ncalls; i++) {
        const ledger_call_t *c = &self->calls[i];
        if (c->op == LEDGER_COMPACT) {
            bool unsure = c->status < 0 || c->status >= 500;
            requested++;
            ok += s_2xx(c);
            accepted[c->chat] += s_2xx(c);
            unknown[c->chat] += unsure;
            unknowns += unsure;
        }
    }
    PGresult *res = s_query(conn, "SELECT id FROM chats WHERE compaction_requested_at IS NOT NULL");
    int pending = res ? PQntuples(res) : 0;
    for (int i = 0; i < pending; i++) {
        s_offend(&o, "%s(request pending)", PQgetvalue(res, i, 0));
    }
    PQclear(res);
    res = s_query(conn, "SELECT chat_id, count(*) FILTER (WHERE content -> 0 -> 'args' ->>"
                        " 'source' = 'manual'), count(*) FROM chat_messages WHERE role ="
                        " 'assistant' AND compressed AND content -> 0 ->> 'tool_name' ="
                        " 'chat_summarized' GROUP BY chat_id");
    int summaries = 0;
    int automatic = 0;
    for (int i = 0; res && i < PQntuples(res); i++) {
        long manual = strtol(PQgetvalue(res, i, 1), NULL, 10);
        summaries += (int)strtol(PQgetvalue(res, i, 2), NULL, 10);
        automatic += (int)(strtol(PQgetvalue(res, i, 2), NULL, 10) - manual);
        for (int c = 0; c < self->nchats; c++) {
            if (!strcmp(ledger_chat_id(self, c), PQgetvalue(res, i, 0)) &&
                manual > accepted[c] + unknown[c]) {
                s_offend(&o, "%s(%ld summaries for %d accepted requests, %d of unknown outcome)",
                         PQgetvalue(res, i, 0), manual, accepted[c], unknown[c]);
            }
        }
    }
    PQclear(res);
    int unpaired = s_dup_query(
        conn,
        "SELECT count(*), coalesce(string_agg(a.id::text, ','), '') FROM chat_messages a WHERE"
        " a.role = 'assistant' AND a.compressed AND a.content -> 0 ->> 'tool_name' ="
        " 'chat_summarized' AND (SELECT count(*) FROM chat_messages t WHERE t.chat_id = a.chat_id"
        " AND t.role = 'tool' AND t.compressed AND t.content -> 0 ->> 'tool_call_id' ="
        " a.content -> 0 ->> 'tool_call_id') <> 1",
        &o, "summary calls without exactly one result");
    printf("chaos: compactions: %d requested, %d accepted, %d of unknown outcome, %d summaries"
           " committed (%d automatic), %d requests pending, %d summary calls without exactly one"
           " result\n",
           requested, ok, unknowns, summaries, automatic, pending, unpaired);
    free(accepted);
    free(unknown);
    return s_verdict("compactions_once", &o);
}

int ledger_check(ledger_t *self, PGconn *conn, const char *const *worker_logs, int timeout_ms,
                 int slow_min_in_flight) {
    int failed = 0;
    receipts_t rs = s_receipts(conn);
    printf("chaos: --- invariants ---\n");
    failed += s_check_accepted(self, conn, &rs);
    failed += s_check_structured(self, conn, &rs);
    failed += s_check_fence(conn, worker_logs);
    failed += s_check_terminal(conn);
    failed += s_check_streams(self, conn, timeout_ms);
    failed += s_check_snapshots(self);
    failed += s_check_slow(self, conn, &rs, slow_min_in_flight);
    failed += s_check_connections(self);
    failed += s_check_compactions(self, conn);
    ledger_agents_t ag = ledger_agent_counts(self);
    agentcheck_sent_t sent = {.turns = ag.turns,
                              .accepted = ag.accepted,
                              .children = ag.children,
                              .waits_seen = ag.waits_seen};
    failed += agentcheck_check(conn, &sent);
    s_receipts_free(&rs);
    printf("chaos: %d of 10 invariants failed\n", failed);
    return failed;
}
