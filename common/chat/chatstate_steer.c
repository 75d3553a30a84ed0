/* chatstate: what steers a chat's next turns (issue 38): plan mode and its MCP servers.
 * Metadata as a title is (ARCHITECTURE.md §3, "Metadata"): allowed in every state, the state
 * left as it was, no version moved but the bundle's snapshot_version. A send carries them in
 * its own bundle, before the message (routes_message.c), so that the turn it starts runs with
 * them. See chatstate.h. */
#include "chatstate_priv.h"
#include "log.h"

#include <stdio.h>
#include <string.h>

/* Whether chat $1 has a structured request that no receipt has closed: a user row that asks
 * one (its outcome row carries the same request id), or a queued message that carries one
 * (its receipt is written when it is deleted or answered, never while it waits). */
#define CS_PENDING_REQUEST_SQL                                                                     \
    "SELECT EXISTS (SELECT 1 FROM chat_messages m WHERE m.chat_id = $1 AND NOT m.deleted"          \
    " AND m.structured_output ->> 'type' = 'structured-output-request'"                            \
    " AND NOT EXISTS (SELECT 1 FROM chat_messages r"                                               \
    " WHERE r.structured_output_request_id = m.structured_output_request_id"                       \
    " AND r.structured_output ->> 'type' = 'structured-output-outcome'))"                          \
    " OR EXISTS (SELECT 1 FROM chat_queued_messages q WHERE q.chat_id = $1"                        \
    " AND q.structured_output_request_id IS NOT NULL)"

/* Refuses to turn plan mode on over a pending structured request (CS_CONFLICT). */
static int s_no_pending_request(chatstate_t *self, cs_error_t *err) {
    const char *p[] = {self->chat_id};
    PGresult *res = cs_query(self, err, CS_PENDING_REQUEST_SQL, 1, p);
    if (!res) {
        return -1;
    }
    bool pending = db_bool(res, 0, 0);
    PQclear(res);
    if (pending) {
        return cs_fail(self, err, CS_CONFLICT,
                       "plan_mode: a structured request is pending; plan mode cannot be turned"
                       " on until its receipt is written");
    }
    return 0;
}

int chatstate_set_plan_mode(chatstate_t *self, bool on, cs_error_t *err) {
    if (cs_start(self, MV_SET_TITLE, NULL, err) != 0 ||
        (on && s_no_pending_request(self, err) != 0)) {
        return -1;
    }
    exec_state_t from = self->state;
    const char *p[] = {self->chat_id, on ? "t" : "f"};
    if (cs_exec(self, err, "UPDATE chats SET plan_mode = $2::boolean WHERE id = $1", 2, p) != 0 ||
        cs_finish(self, from, MV_SET_TITLE, err) != 0) {
        return -1;
    }
    log_info("plan_mode_set", "chat_id=%s plan_mode=%d", self->chat_id, on);
    return 0;
}

int chatstate_set_mcp_servers(chatstate_t *self, const char *servers_json, cs_error_t *err) {
    if (cs_start(self, MV_SET_TITLE, NULL, err) != 0) {
        return -1;
    }
    exec_state_t from = self->state;
    const char *p[] = {self->chat_id, servers_json};
    if (cs_exec(self, err, "UPDATE chats SET mcp_servers = $2::jsonb WHERE id = $1", 2, p) != 0 ||
        cs_finish(self, from, MV_SET_TITLE, err) != 0) {
        return -1;
    }
    log_info("mcp_servers_set", "chat_id=%s", self->chat_id);
    return 0;
}
