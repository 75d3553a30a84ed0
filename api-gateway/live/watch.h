/*
 * watch: GET /api/v2/chats/watch, Server-Sent Events of lifecycle changes across all the
 * caller's chats: created, status_change, title_change, archived, action_required (event
 * name = kind; data {"kind", "chat", "tool_calls"?}).
 *
 * A feed keyed by its user: the hub wakes it only for update hints of that user's chats
 * (hints carry the owner), with the chat's id, and a job reads just that chat; other users'
 * updates cost a watch nothing, and neither do hints that say nothing it shows moved (the
 * same status and archived flag as it saw, no title set). The row read is shared through the
 * gateway's watch cache:
 * the other watches of the user woken by the same hint take it instead of reading again
 * (a row read after a hint arrived is fresh enough for every watch that hint woke). The first job
 * and the poller read the user's most recently updated chats at once. What a watch remembers per
 * chat is what it compares (status, title, archived), not the chat.
 */
#ifndef CHATFLEET_WATCH_H
#define CHATFLEET_WATCH_H

#include "gateway.h"

#define WATCH_CHATS_MAX  1000  /* most recently updated chats a full read follows */
#define WATCH_CACHE_ROWS 10000 /* rows the watch cache keeps; beyond, it starts over */

/* Chat rows read for watches, by (user, chat), with when each read started. Thread-safe. */
typedef struct watch_cache watch_cache_t;
watch_cache_t *watch_cache_new(void);
void watch_cache_destroy(watch_cache_t **self_p);

void watch_handle(void *app, http_req_t *req, http_resp_t *resp);

#endif
