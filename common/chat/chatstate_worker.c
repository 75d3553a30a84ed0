/* chatstate: the transitions the worker applies (ARCHITECTURE.md §4.2, §5.2). Every one but
 * Acquire takes a fence. */
#include "chatstate_priv.h"
#include "mem.h"

#include <stdio.h>
#include <string.h>

int chatstate_acquire(chatstate_t *self, const char *worker_id, const char *runner_id,
                      cs_error_t *err) {
    return chatstate_acquire_slot(self, worker_id, runner_id, NULL, err);
}

/* After the round trip that ran Acquire's owner update (kept in *own: the chat's id when it
 * was taken, and whether its owner was within its share): 0 when it took the chat; CS_CONFLICT
 * when a fresh lease holds it or its owner holds its share. Clears *own. */
static int s_took(chatstate_t *self, PGresult **own, cs_error_t *err) {
    int n = *own ? PQntuples(*own) : -1;
    bool taken = n == 1 && !PQgetisnull(*own, 0, 0);
    bool within = n == 1 && !strcmp(PQgetvalue(*own, 0, 1), "t");
    PQclear(*own);
    *own = NULL;
    if (n != 1) {
        return cs_fail(self, err, CS_DB, "internal: the owner update's result was not kept");
    }
    return taken    ? 0
           : within ? cs_fail(self, err, CS_CONFLICT, "chat is held by a fresh lease")
                    : cs_fail(self, err, CS_CONFLICT,
                              "the chat's owner holds its share of the limiter"
                              " (CHATFLEET_WORKER_USER_MAX_CHATS)");
}

/* Claims the first candidate slot it can for the heartbeat row of (chat, runner_id); the
 * owner update sent ahead (*own) is checked with the first claim's round trip, which also
 * loads the row. 0 when one is taken (slots->taken), -1 otherwise (the bundle is poisoned). */
static int s_claim_slot(chatstate_t *self, const char *runner_id, cs_slots_t *slots,
                        const char *stale, PGresult **own, cs_error_t *err) {
    slots->taken = 0;
    bool checked = false;
    while (slots->next < slots->count) {
        bool vacant = slots->vacant && slots->vacant[slots->next];
        int32_t slot = slots->slots[slots->next++];
        char text[DB_PARAM_INT64_LEN];
        const char *p[] = {self->chat_id, runner_id, db_param_int64(text, slot), stale};
        /* A stale holder gives the slot up. The statement re-checks staleness on the row's
         * newest version once its lock is granted, so a renewal that committed meanwhile
         * keeps its slot; a renewal that comes after this delete finds no row and never
         * revives it (ARCHITECTURE.md §6.1). A row of this very runner (a reused runner id)
         * goes too: the insert below replaces it. */
        if (!vacant &&
            cs_exec(self, err,
                    "DELETE FROM chat_heartbeats WHERE (chat_id = $1 AND runner_id = $2::uuid)"
                    " OR (slot = $3::int AND heartbeat_at <="
                    " statement_timestamp() - $4::bigint * interval '1 millisecond')",
                    4, p) != 0) {
            return -1;
        }
        /* The unique index decides between concurrent claims: a claim committed since this
         * transaction's last snapshot, or still in flight (waited for), wins, and this one
         * inserts nothing. No lock is taken for it besides the index's own. Sent ahead with
         * the row's load: one round trip per candidate. */
        PGresult *res = NULL;
        if (cs_keep(self, err,
                    "INSERT INTO chat_heartbeats (chat_id, runner_id, heartbeat_at, slot,"
                    " owner_id) SELECT $1, $2::uuid, statement_timestamp(), $3::int,"
                    " c.owner_id FROM chats c WHERE c.id = $1"
                    " ON CONFLICT (slot) DO NOTHING RETURNING slot",
                    3, p, &res) != 0 ||
            cs_load(self, err) != 0) {
            PQclear(res);
            return -1;
        }
        if (!checked && s_took(self, own, err) != 0) {
            /* Not taken: the bundle's rollback undoes the claim, so the candidate stays free
             * for the next chat. */
            slots->next--;
            PQclear(res);
            return -1;
        }
        checked = true;
        int n = res ? PQntuples(res) : -1;
        PQclear(res);
        if (n < 0) {
            return cs_fail(self, err, CS_DB, "internal: the slot claim's result was not kept");
        }
        if (n == 1) {
            slots->taken = slot;
            return 0;
        }
    }
    if (!checked && (cs_load(self, err) != 0 || s_took(self, own, err) != 0)) {
        return -1;
    }
    return cs_fail(self, err, CS_CONFLICT, "no free limiter slot among the candidates");
}

/* Acquire's checks of the row it started from: a runnable chat, or an idle, unarchived one with
 * a title request, which its owner serves before it lets the chat go (chatstate_title.c). */
static int s_runnable(chatstate_t *self, exec_state_t from, cs_error_t *err) {
    bool title = self->row.title_requested && !self->row.archived &&
                 (from == ES_W || from == ES_E0 || from == ES_E1);
    if (!chatmove_runnable(from) && !title) {
        return cs_fail(self, err, CS_CONFLICT, "chat is in state %s: Acquire is not allowed",
                       chatmove_state_name(from));
    }
    if (self->row.agent_wait) {
        return cs_fail(self, err, CS_CONFLICT,
                       "chat waits for its subagents: Acquire is not allowed");
    }
    return 0;
}

/* Acquire's writes: the owner update, fenced by the lease, and the heartbeat row (with a
 * limiter slot when slots is given), then the row's load. */
static int s_acquire_writes(chatstate_t *self, const char *worker_id, const char *runner_id,
                            cs_slots_t *slots, cs_error_t *err) {
    char stale[DB_PARAM_INT64_LEN];
    char cap[DB_PARAM_INT64_LEN];
    db_param_int64(stale, self->settings.lease_stale_ms);
    const char *p[] = {self->chat_id, worker_id, runner_id, stale,
                       db_param_int64(cap, self->settings.user_max_chats)};
    /* Only a chat without a fresh lease can be taken; the heartbeat row is the lease. With a
     * cap, only while its owner holds fewer fresh leases than its share: counted in this
     * statement, after the scan took the owner's advisory lock (leasedb.c), so no other
     * acquisition counts the owner meanwhile. Sent ahead: its result is read with the
     * heartbeat row's insert and the row's load, so an acquisition is one round trip after
     * the bundle's start (ARCHITECTURE.md §6.2). */
    PGresult *own = NULL;
    if (cs_keep(self, err,
                "WITH share AS (SELECT $5::bigint = 0 OR (SELECT count(*) FROM chat_heartbeats h"
                " WHERE h.owner_id = c.owner_id AND h.chat_id <> c.id AND h.heartbeat_at >"
                " statement_timestamp() - $4::bigint * interval '1 millisecond')"
                " < $5::bigint * (SELECT u.chat_weight FROM users u WHERE u.id = c.owner_id)"
                " AS within FROM chats c WHERE c.id = $1), took AS (UPDATE chats c"
                " SET worker_id = $2::uuid, runner_id = $3::uuid WHERE id = $1"
                " AND NOT waiting_on_agents AND (SELECT within FROM share)"
                " AND (worker_id IS NULL OR runner_id IS NULL OR (SELECT true FROM"
                " chat_heartbeats h WHERE h.chat_id = c.id AND h.runner_id = c.runner_id"
                " AND h.heartbeat_at > statement_timestamp() - $4::bigint * interval"
                " '1 millisecond' LIMIT 1) IS NULL) RETURNING id)"
                " SELECT (SELECT id FROM took), coalesce((SELECT within FROM share), true)",
                5, p, &own) != 0) {
        return -1;
    }
    int rc;
    if (slots) {
        rc = s_claim_slot(self, runner_id, slots, stale, &own, err);
    } else {
        rc = cs_exec(self, err,
                     "INSERT INTO chat_heartbeats (chat_id, runner_id, heartbeat_at, owner_id)"
                     " SELECT $1, $2::uuid, statement_timestamp(), c.owner_id FROM chats c"
                     " WHERE c.id = $1 ON CONFLICT (chat_id, runner_id)"
                     " DO UPDATE SET heartbeat_at = EXCLUDED.heartbeat_at, slot = NULL",
                     2, (const char *const[]){self->chat_id, runner_id});
        rc = rc == 0 && cs_load(self, err) == 0 ? s_took(self, &own, err) : -1;
    }
    PQclear(own);
    return rc;
}

/* In a joined or nested bundle (the acquirer's, ARCHITECTURE.md §6.2 step 4) Acquire's writes
 * go out behind the bundle's start, in the same round trip, and the row the start loaded is
 * checked after they ran: a chat that may not be acquired fails the bundle, whose rollback
 * undoes them, and gives its candidate slot back. */
int chatstate_acquire_slot(chatstate_t *self, const char *worker_id, const char *runner_id,
                           cs_slots_t *slots, cs_error_t *err) {
    exec_state_t from = ES_N;
    self->ahead = self->first_pending;
    if (!self->ahead) {
        if (cs_start(self, MV_ACQUIRE, NULL, err) != 0 || s_runnable(self, self->state, err) != 0) {
            return -1;
        }
        from = self->state;
    }
    int tried = slots ? slots->next : 0;
    int rc = s_acquire_writes(self, worker_id, runner_id, slots, err);
    if (self->ahead) {
        self->ahead = false;
        /* The start's row decides first: its failure (not found, not runnable) is the
         * bundle's, whatever the writes did. */
        if (self->first && (cs_first_check(self, MV_ACQUIRE, NULL, &from, err) != 0 ||
                            s_runnable(self, from, err) != 0)) {
            if (slots) {
                slots->next = tried;
                slots->taken = 0;
            }
            return -1;
        }
    }
    return rc == 0 ? cs_finish(self, from, MV_ACQUIRE, err) : -1;
}

int chatstate_abandon(chatstate_t *self, const cs_fence_t *fence, cs_error_t *err) {
    cs_fence_t owner = *fence;
    owner.status = NULL;
    owner.history_version = -1;
    owner.generation_attempt = -1;
    if (cs_start(self, MV_ABANDON, &owner, err) != 0) {
        return -1;
    }
    exec_state_t from = self->state;
    const char *p[] = {self->chat_id};
    if (cs_exec_row(self, err,
                    "WITH gone AS (DELETE FROM chat_heartbeats h USING chats o WHERE h.chat_id = $1"
                    " AND o.id = $1 AND h.runner_id = o.runner_id)"
                    " UPDATE chats c SET worker_id = NULL, runner_id = NULL WHERE c.id = $1",
                    1, p) != 0) {
        return -1;
    }
    return cs_finish(self, from, MV_ABANDON, err);
}

int chatstate_commit_step(chatstate_t *self, const cs_fence_t *fence, const cs_message_t *msgs,
                          int count, cs_error_t *err) {
    /* With the start still pending, the step's rows and the load that checks them go out
     * behind it: one round trip for the three. */
    if (cs_start_ahead(self, MV_COMMIT_STEP, fence, err) != 0) {
        return -1;
    }
    exec_state_t from = self->state;
    int rc = cs_insert_all(self, msgs, count, err);
    if (cs_ahead_end(self, MV_COMMIT_STEP, fence, rc, &from, err) != 0) {
        return -1;
    }
    return cs_finish(self, from, MV_COMMIT_STEP, err);
}

int chatstate_commit_compaction(chatstate_t *self, const cs_fence_t *fence,
                                const cs_message_t *msgs, int count, cs_error_t *err) {
    if (cs_start(self, MV_COMMIT_STEP, fence, err) != 0) {
        return -1;
    }
    if (!self->row.compaction_requested) {
        return cs_fail(self, err, CS_CONFLICT, "no compaction was requested");
    }
    exec_state_t from = self->state;
    const char *p[] = {self->chat_id};
    if (cs_insert_all(self, msgs, count, err) != 0 ||
        cs_exec(self, err, "UPDATE chats SET compaction_requested_at = NULL WHERE id = $1", 1, p) !=
            0) {
        return -1;
    }
    return cs_finish(self, from, MV_COMMIT_STEP, err);
}

int chatstate_enter_requires_action(chatstate_t *self, const cs_fence_t *fence, cs_error_t *err) {
    if (cs_start(self, MV_ENTER_REQUIRES_ACTION, fence, err) != 0) {
        return -1;
    }
    exec_state_t from = self->state;
    /* A bundle that enters requires_action must have been given a deadline. */
    ASSERT(self->settings.requires_action_deadline_ms > 0);
    char ms[DB_PARAM_INT64_LEN];
    const char *p[] = {self->chat_id,
                       db_param_int64(ms, self->settings.requires_action_deadline_ms)};
    if (cs_exec(self, err,
                "UPDATE chats SET status = 'requires_action', updated_at = now(),"
                " requires_action_deadline_at = now() + $2::bigint * interval '1 millisecond'"
                " WHERE id = $1",
                2, p) != 0) {
        return -1;
    }
    return cs_finish(self, from, MV_ENTER_REQUIRES_ACTION, err);
}

int chatstate_enter_agent_wait(chatstate_t *self, const cs_fence_t *fence, cs_error_t *err) {
    if (cs_start(self, MV_ENTER_REQUIRES_ACTION, fence, err) != 0) {
        return -1;
    }
    exec_state_t from = self->state;
    const char *p[] = {self->chat_id, CS_AGENT_WAIT_TOOL};
    PGresult *res = cs_query(self, err,
                             CS_PENDING_CALLS_SQL " SELECT count(*) FILTER (WHERE name <> $2),"
                                                  " count(*) FROM pending",
                             2, p);
    if (!res) {
        return -1;
    }
    bool only_waits = db_int64(res, 0, 0) == 0 && db_int64(res, 0, 1) > 0;
    PQclear(res);
    if (!only_waits) {
        return cs_fail(self, err, CS_BAD_INPUT,
                       "an agent wait needs pending calls, all of them " CS_AGENT_WAIT_TOOL);
    }
    /* Ownership goes with the lease and its limiter slot, as in Abandon: a parent that waits
     * holds nothing a child may need. */
    if (cs_exec(self, err,
                "WITH gone AS (DELETE FROM chat_heartbeats h USING chats c WHERE h.chat_id = $1"
                " AND c.id = $1 AND h.runner_id = c.runner_id)"
                " UPDATE chats SET status = 'requires_action', waiting_on_agents = true,"
                " worker_id = NULL, runner_id = NULL, requires_action_deadline_at = NULL,"
                " updated_at = now() WHERE id = $1",
                1, p) != 0 ||
        cs_finish(self, from, MV_ENTER_REQUIRES_ACTION, err) != 0) {
        return -1;
    }
    snprintf(self->wake, sizeof self->wake, "%s", self->chat_id);
    return 0;
}

int chatstate_finish_interruption(chatstate_t *self, const cs_fence_t *fence,
                                  const cs_message_t *partial, int count, cs_error_t *err) {
    if (cs_start(self, MV_FINISH_INTERRUPTION, fence, err) != 0) {
        return -1;
    }
    exec_state_t from = self->state;
    if (cs_finish_interruption(self, partial, count, NULL, err) != 0) {
        return -1;
    }
    return cs_finish(self, from, MV_FINISH_INTERRUPTION, err);
}

int chatstate_record_generation_attempt(chatstate_t *self, const cs_fence_t *fence,
                                        int64_t *attempt, cs_error_t *err) {
    if (cs_start(self, MV_RECORD_GENERATION_ATTEMPT, fence, err) != 0) {
        return -1;
    }
    exec_state_t from = self->state;
    const char *p[] = {self->chat_id};
    /* Sent ahead, returning the row: the move's closing load is its result. */
    if (cs_exec_row(self, err,
                    "UPDATE chats c SET generation_attempt = generation_attempt + 1"
                    " WHERE c.id = $1",
                    1, p) != 0 ||
        cs_finish(self, from, MV_RECORD_GENERATION_ATTEMPT, err) != 0) {
        return -1;
    }
    if (attempt) {
        *attempt = self->row.generation_attempt;
    }
    return 0;
}

int chatstate_record_retry_state(chatstate_t *self, const cs_fence_t *fence, const char *retry_json,
                                 cs_error_t *err) {
    if (cs_start(self, MV_RECORD_RETRY_STATE, fence, err) != 0) {
        return -1;
    }
    exec_state_t from = self->state;
    const char *p[] = {self->chat_id, retry_json};
    if (cs_exec(self, err, "UPDATE chats SET retry_state = $2::jsonb WHERE id = $1", 2, p) != 0) {
        return -1;
    }
    return cs_finish(self, from, MV_RECORD_RETRY_STATE, err);
}

static int s_finish_turn(chatstate_t *self, const cs_fence_t *fence, const cs_message_t *msgs,
                         int count, bool release, cs_error_t *err) {
    if (cs_start(self, MV_FINISH_TURN, fence, err) != 0) {
        return -1;
    }
    exec_state_t from = self->state;
    /* Terminal messages (receipts) go in before the queue head is promoted. */
    if (cs_insert_all(self, msgs, count, err) != 0 ||
        cs_land_after_turn(self, NULL, release, err) != 0) {
        return -1;
    }
    /* Released and waiting: FinishTurn, then Abandon (allowed from waiting, under the owner
     * this move's fence checked), as one write. */
    return cs_finish(self, from, MV_FINISH_TURN, err);
}

int chatstate_finish_turn(chatstate_t *self, const cs_fence_t *fence, const cs_message_t *msgs,
                          int count, cs_error_t *err) {
    return s_finish_turn(self, fence, msgs, count, false, err);
}

int chatstate_finish_turn_release(chatstate_t *self, const cs_fence_t *fence, cs_error_t *err) {
    return s_finish_turn(self, fence, NULL, 0, true, err);
}

int chatstate_finish_error(chatstate_t *self, const cs_fence_t *fence, const char *error_json,
                           const cs_message_t *msgs, int count, cs_error_t *err) {
    if (cs_start(self, MV_FINISH_ERROR, fence, err) != 0) {
        return -1;
    }
    exec_state_t from = self->state;
    const char *p[] = {self->chat_id, error_json};
    if (cs_insert_all(self, msgs, count, err) != 0 ||
        cs_exec(self, err,
                "UPDATE chats SET status = 'error', last_error = $2::jsonb, updated_at = now(),"
                " requires_action_deadline_at = NULL WHERE id = $1",
                2, p) != 0) {
        return -1;
    }
    return cs_finish(self, from, MV_FINISH_ERROR, err);
}

int chatstate_cancel_requires_action(chatstate_t *self, const cs_fence_t *fence, const char *reason,
                                     cs_error_t *err) {
    if (cs_start(self, MV_CANCEL_REQUIRES_ACTION, fence, err) != 0) {
        return -1;
    }
    exec_state_t from = self->state;
    char why[200];
    snprintf(why, sizeof why, "tool call canceled: %s", reason ? reason : "timed out");
    const char *p[] = {self->chat_id};
    if (cs_answer_pending(self, why, err) != 0 ||
        cs_exec(self, err,
                "UPDATE chats SET status = 'running', requires_action_deadline_at = NULL,"
                " updated_at = now() WHERE id = $1",
                1, p) != 0) {
        return -1;
    }
    return cs_finish(self, from, MV_CANCEL_REQUIRES_ACTION, err);
}
