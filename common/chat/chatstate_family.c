/* chatstate_family: parents, roots and the family archive (ARCHITECTURE.md §3, "Families");
 * see chatstate.h (cs_create_t.parent_chat_id, chatstate_set_archived). */
#include "chatstate_priv.h"
#include "mem.h"

#include <stdio.h>
#include <string.h>

/* The parent's family: its root (the parent itself when it is a root), depth and owner. */
static int s_parent(chatstate_t *self, const char *parent, cs_family_t *f, char *owner,
                    cs_error_t *err) {
    const char *p[] = {parent};
    PGresult *res = cs_query(self, err,
                             "SELECT coalesce(root_chat_id, id)::text, depth, owner_id::text"
                             " FROM chats WHERE id = $1",
                             1, p);
    if (!res) {
        return -1;
    }
    int n = PQntuples(res);
    if (n == 1) {
        snprintf(f->root_chat_id, sizeof f->root_chat_id, "%s", db_text(res, 0, 0));
        f->depth = (int)db_int64(res, 0, 1) + 1;
        snprintf(owner, ID_UUID_LEN + 1, "%s", db_text(res, 0, 2));
    }
    PQclear(res);
    return n == 1 ? 0 : cs_fail(self, err, CS_NOT_FOUND, "parent chat %s not found", parent);
}

/* Locks the family's root FOR NO KEY UPDATE: one child is created at a time in a family, so
 * the counts below are exact, and a family archive (the root FOR UPDATE) sees a child wholly
 * or not at all. Reads the root's archived marker, the family's size and the parent's
 * children in the same round trip's snapshot. */
static int s_lock_and_count(chatstate_t *self, const char *parent, const cs_family_t *f,
                            bool *archived, int64_t *members, int64_t *children, cs_error_t *err) {
    const char *p[] = {f->root_chat_id, parent};
    PGresult *res =
        cs_query(self, err,
                 "SELECT archived, (SELECT count(*) FROM chats WHERE root_chat_id = $1),"
                 " (SELECT count(*) FROM chats WHERE parent_chat_id = $2)"
                 " FROM chats WHERE id = $1 FOR NO KEY UPDATE",
                 2, p);
    if (!res) {
        return -1;
    }
    int n = PQntuples(res);
    if (n == 1) {
        *archived = db_bool(res, 0, 0);
        *members = db_int64(res, 0, 1);
        *children = db_int64(res, 0, 2);
    }
    PQclear(res);
    return n == 1 ? 0 : cs_fail(self, err, CS_NOT_FOUND, "parent chat %s not found", parent);
}

int cs_family_join(chatstate_t *self, const cs_create_t *c, cs_family_t *f, cs_error_t *err) {
    char owner[ID_UUID_LEN + 1] = "";
    bool archived = false;
    int64_t members = 0;
    int64_t children = 0;
    if (!id_uuid_valid(c->parent_chat_id)) {
        return cs_fail(self, err, CS_NOT_FOUND, "parent chat %s not found", c->parent_chat_id);
    }
    if (s_parent(self, c->parent_chat_id, f, owner, err) != 0 ||
        s_lock_and_count(self, c->parent_chat_id, f, &archived, &members, &children, err) != 0) {
        return -1;
    }
    if (strcmp(owner, c->owner_id) != 0) {
        return cs_fail(self, err, CS_NOT_FOUND, "parent chat %s not found", c->parent_chat_id);
    }
    if (archived) {
        return cs_fail(self, err, CS_CONFLICT,
                       "the family's root %s is archived: Create is not allowed", f->root_chat_id);
    }
    if (members >= CS_FAMILY_MAX) {
        return cs_fail(self, err, CS_CONFLICT, "the family has %lld members, the most there can be",
                       (long long)members);
    }
    if (c->max_depth > 0 && f->depth > c->max_depth) {
        return cs_fail(self, err, CS_CONFLICT, "a child at depth %d is over the depth cap %d",
                       f->depth, c->max_depth);
    }
    if (c->max_children > 0 && children >= c->max_children) {
        return cs_fail(self, err, CS_CONFLICT, "the parent has %lld children, the cap is %d",
                       (long long)children, c->max_children);
    }
    return 0;
}

/* Keeps one hint per family member the archive changed, for chatstate_commit to publish (at
 * most CS_FAMILY_MAX: creation keeps a family within it). */
static void s_keep_hints(chatstate_t *self, const PGresult *res) {
    int n = PQntuples(res);
    self->family = mem_calloc((size_t)(n ? n : 1), sizeof *self->family);
    self->family_count = n;
    for (int i = 0; i < n; i++) {
        hint_update_t *u = &self->family[i];
        snprintf(u->chat_id, sizeof u->chat_id, "%s", db_text(res, i, 0));
        snprintf(u->owner_id, sizeof u->owner_id, "%s", db_text(res, i, 1));
        u->snapshot_version = db_int64(res, i, 2);
        snprintf(u->worker_id, sizeof u->worker_id, "%s", db_text(res, i, 3));
        snprintf(u->runner_id, sizeof u->runner_id, "%s", db_text(res, i, 4));
        u->history_version = db_int64(res, i, 5);
        u->queue_version = db_int64(res, i, 6);
        u->retry_state_version = db_int64(res, i, 7);
        u->generation_attempt = db_int64(res, i, 8);
        snprintf(u->status, sizeof u->status, "%s", db_text(res, i, 9));
        u->archived = db_bool(res, i, 10);
    }
}

/* A root's descendants take the root's new archived marker with it, or the whole bundle fails:
 * each one that changes must be waiting or in error (SetArchived's states), locked in a fixed
 * order first. */
static int s_descendants(chatstate_t *self, bool archived, cs_error_t *err) {
    ASSERT(!self->nested); /* the family's hints are published by chatstate_commit */
    const char *p[] = {self->chat_id, archived ? "t" : "f"};
    PGresult *res = cs_query(self, err,
                             "SELECT id::text, status FROM chats WHERE root_chat_id = $1"
                             " AND archived <> $2::boolean ORDER BY depth, id FOR UPDATE",
                             2, p);
    if (!res) {
        return -1;
    }
    for (int i = 0; i < PQntuples(res); i++) {
        const char *status = db_text(res, i, 1);
        if (strcmp(status, "waiting") != 0 && strcmp(status, "error") != 0) {
            int rc = cs_fail(self, err, CS_CONFLICT,
                             "chat %s of the family is %s: SetArchived is not allowed",
                             db_text(res, i, 0), status);
            PQclear(res);
            return rc;
        }
    }
    PQclear(res);
    res = cs_query(self, err,
                   "UPDATE chats SET archived = $2::boolean, updated_at = now(),"
                   " snapshot_version = snapshot_version + 1"
                   " WHERE root_chat_id = $1 AND archived <> $2::boolean RETURNING id::text,"
                   " owner_id::text, snapshot_version, coalesce(worker_id::text, ''),"
                   " coalesce(runner_id::text, ''), history_version, queue_version,"
                   " retry_state_version, generation_attempt, status, archived",
                   2, p);
    if (!res) {
        return -1;
    }
    s_keep_hints(self, res);
    PQclear(res);
    return 0;
}

int cs_family_archive(chatstate_t *self, bool archived, cs_error_t *err) {
    const char *p[] = {self->chat_id};
    PGresult *res = cs_query(self, err,
                             "SELECT c.parent_chat_id IS NULL, coalesce(p.archived, false)"
                             " FROM chats c LEFT JOIN chats p ON p.id = c.parent_chat_id"
                             " WHERE c.id = $1",
                             1, p);
    if (!res) {
        return -1;
    }
    bool root = PQntuples(res) == 1 && db_bool(res, 0, 0);
    bool parent_archived = PQntuples(res) == 1 && db_bool(res, 0, 1);
    PQclear(res);
    if (!archived && parent_archived) {
        return cs_fail(self, err, CS_CONFLICT,
                       "the parent chat is archived: unarchive the family's root instead");
    }
    return root ? s_descendants(self, archived, err) : 0;
}
