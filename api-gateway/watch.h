/*
 * watch: GET /api/v2/chats/watch, Server-Sent Events of lifecycle changes across all the
 * caller's chats: created, status_change, title_change, archived, action_required (event
 * name = kind; data {"kind", "chat", "tool_calls"?}). A feed woken by every update hint and
 * by the poller (a title change, a SetTitle move, has its hint too); each sync reads the
 * caller's chats once and reports what differs from what this watch last saw.
 */
#ifndef CHATFLEET_WATCH_H
#define CHATFLEET_WATCH_H

#include "gateway.h"

#define WATCH_CHATS_MAX   1000 /* most recently updated chats a watch follows */
#define WATCH_MIN_SYNC_MS 200  /* syncs closer than this are coalesced */

void watch_handle(void *app, http_req_t *req, http_resp_t *resp);

#endif
