/*
 * titlestep: a chat's generated title (ARCHITECTURE.md §7.8) on the title model. A new chat's
 * title, and a regeneration the owner asked for (chats.title_requested_at, POST
 * /chats/{id}/title/regenerate) while the chat runs, are made as a model step's side call
 * (taskctx_side_t, §6.5 "Side calls"): beside the step's model call, so no token waits for
 * them. A regeneration for an idle chat is the call of its owner's abandon task
 * (titlestep_serve). Either way the reply is checked by title.h (the strict boundary and the
 * {title} schema) and its outcome written with chatstate_title_outcome, fenced by the owner:
 * the title (over a user title only when the user asked for it), the call's usage as a
 * chat_usage row of kind 'title' (§7.7: counted whether or not a title came of it), and the
 * request's marker cleared, all in one bundle.
 */
#ifndef CHATFLEET_TITLESTEP_H
#define CHATFLEET_TITLESTEP_H

#include "history.h"
#include "taskctx.h"

/* When h is a new chat's first step (a fallback title, nothing attempted, no reply yet) or has
 * a title request pending (h->title_requested), and its user messages have text, asks for the
 * title call as ctx's side call, on h->title_model (the chat's model when none is configured).
 * Otherwise does nothing. */
void titlestep_ask(taskctx_t *ctx, const history_t *h);

/* An idle chat's title request, for the owner's abandon task (chatstate_title_wanted said so):
 * reads the history under ctx's fence, makes the title call as the task's own call (returns
 * TASKCTX_CALL), writes its outcome, then runs then (the abandon again) as the next phase. A
 * request that cannot be asked (no model config, no user text) is answered at once with its
 * reason, clearing the marker. A read fenced out is TASKCTX_QUIET; a database failure
 * TASKCTX_RETRY (the task starts over, and the call may be made again). */
taskctx_rc_t titlestep_serve(taskctx_t *ctx, PGconn *conn, taskctx_phase_fn *then);

#endif
