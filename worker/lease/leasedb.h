/*
 * leasedb: the worker's statements on the lease table (ARCHITECTURE.md §6): acquisition of
 * runnable chats under the concurrency limiter, renewal of this worker's leases, and the
 * sweep of stale rows. Each call is one short transaction on the caller's connection,
 * bounded by lock_timeout and idle_in_transaction_session_timeout, so that neither a peer
 * stopped inside its transaction nor a stopped caller holds row locks for long.
 *
 * The limiter is the unique index on chat_heartbeats.slot (common/chat/sql/0002): with
 * max_chats N, a chat holds one of the slots 1..N through its fresh heartbeat row, so at most
 * N chats hold fresh leases deployment-wide, and no lock is shared between workers. A pool
 * (roots, subagents) is a range of slots of its own, taken only by its kind of chat: an
 * acquisition waits on another transaction only when both touch the same row or claim the
 * same slot. Not thread-safe per connection; any number of workers and threads may call it,
 * each on its own connection.
 */
#ifndef CHATFLEET_LEASEDB_H
#define CHATFLEET_LEASEDB_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hint.h"
#include "id.h"
#include "leaseset.h"

#define LEASEDB_BATCH_MAX 32 /* chats per acquisition transaction */
/* The class of the advisory locks an acquisition takes on its candidate slots (the object is
 * the slot): two-key locks, a space no other lock of chatfleet uses. */
#define LEASEDB_SLOT_LOCK_CLASS 0x63666c73
/* The class of the advisory locks an acquisition takes on the owners of its candidates when
 * a user's share is capped (the object is hashtext of the owner id). */
#define LEASEDB_OWNER_LOCK_CLASS 0x63666f77
/* The longest an acquisition waits for a row or a slot another transaction holds (a live
 * peer's transaction ends in milliseconds); then it tries the next slot. */
#define LEASEDB_LOCK_TIMEOUT_MS 1000

/* The chats an acquisition considers: the limiter's pools (ARCHITECTURE.md §6.2). */
typedef enum {
    LEASEDB_POOL_ANY = 0,  /* every chat: one pool */
    LEASEDB_POOL_ROOTS,    /* root chats only */
    LEASEDB_POOL_SUBAGENTS /* subagent chats (a parent_chat_id) only */
} leasedb_pool_t;

typedef struct {
    const char *worker_id;
    int64_t max_chats;   /* the pool's slots first_slot..first_slot+max_chats-1; 0: no
                            limiter */
    int64_t first_slot;  /* the pool's first slot; 0 means 1 */
    leasedb_pool_t pool; /* which chats the pass considers */
    /* CHATFLEET_WORKER_USER_MAX_CHATS: fresh leases one user may hold per unit of weight
     * (users.chat_weight), deployment-wide, its subagents' included; 0: no cap (the quick
     * pass still ranks owners fairly, ARCHITECTURE.md §6.2, "Fair share") */
    int64_t user_max_chats;
    int64_t lease_stale_ms;  /* also the lease threshold of its Acquire bundles */
    int batch;               /* chats to take at most, 1..LEASEDB_BATCH_MAX */
    int64_t lock_timeout_ms; /* 0: LEASEDB_LOCK_TIMEOUT_MS */
    int64_t idle_ms;         /* idle_in_transaction_session_timeout; 0: lease_stale_ms / 3 */
    const hint_sink_t *sink; /* Acquire's hints, published after COMMIT; may be NULL */
    /* The quick pass: chats without any owner (new, released, handed over), fairly across
     * their owners, found without visiting the chats held by others; false: the full pass,
     * chats whose owner's lease is stale or gone (a takeover) (ARCHITECTURE.md §6.2, "Quick
     * and full passes"). */
    bool quick;
    /* The title pass: instead of runnable chats, idle (waiting or error), unarchived chats with
     * a title request (chats.title_requested_at) and no fresh lease, stale leases included;
     * Acquire takes them for their title call (ARCHITECTURE.md §7.8). quick is then unused.
     * A probe first: when no idle chat has a request, nothing else runs (no slot is claimed). */
    bool titles;
} leasedb_acquire_args_t;

typedef struct {
    char chat_id[ID_UUID_LEN + 1];
    char runner_id[ID_UUID_LEN + 1];
    char previous[ID_UUID_LEN + 1]; /* the worker whose stale lease was taken over; "" */
    int32_t slot;                   /* the limiter slot held; 0 without the limiter */
    hint_update_t after;            /* the committed row */
} leasedb_acquired_t;

typedef struct {
    leasedb_acquired_t chats[LEASEDB_BATCH_MAX]; /* the chats taken: [0, count) */
    int count;
    int free_slots; /* free slots found (at most twice the batch); -1 without the limiter.
                       0 means the limiter refused: nothing was selected */
    int selected;   /* runnable chats without a fresh lease locked for the batch */
    int missed;     /* of which not taken: a fresh lease appeared meanwhile, or no slot */
    bool again;     /* a miss another transaction may not repeat (a slot race was lost, a
                       wait ran out): look again at once rather than at the next poll */
} leasedb_batch_t;

/* One acquisition transaction (ARCHITECTURE.md §6.2): picks free limiter slots, locks up to
 * min(batch, free slots) of the pass's candidates (FOR UPDATE OF c SKIP LOCKED; with
 * user_max_chats, only those whose owner's advisory lock it gets without waiting), applies Acquire
 * with a new runner id to each in a nested bundle that claims the next candidate slots in ascending
 * order, commits, then publishes the hints. A chat that cannot be taken is rolled back alone; a
 * pass that found one chat takes it in a bundle that joins and commits the transaction (no
 * savepoint). Returns 0 (out filled, possibly with nothing taken), or -1 when the transaction
 * failed: nothing was taken, the failure is logged (acquire_failed), and the connection may be
 * broken. */
int leasedb_acquire(PGconn *conn, const leasedb_acquire_args_t *args, leasedb_batch_t *out);

/* Renews in one transaction the leases whose heartbeat row is still fresh and whose chat
 * worker_id's runner still owns; a stale or deleted row is never revived, and a renewed row
 * keeps its slot. Rows are locked in slot order, as acquisitions claim them. bound_ms bounds
 * the transaction (lock_timeout, statement_timeout, idle_in_transaction_session_timeout).
 * renewed[i] (n entries, caller's) tells whether leases[i] was renewed. Returns the number
 * renewed, or -1 when the transaction failed and renewed nothing (logged heartbeat_failed). */
int leasedb_renew(PGconn *conn, const char *worker_id, const lease_t *leases, size_t n,
                  int64_t lease_stale_ms, int64_t bound_ms, bool *renewed);

/* Deletes heartbeat rows older than the stale threshold, skipping rows another transaction
 * has locked (an acquisition taking that row's slot deletes it itself). Returns the number
 * deleted, or -1 (logged heartbeat_sweep_failed). */
int64_t leasedb_sweep(PGconn *conn, int64_t lease_stale_ms);

#endif
