/*
 * titlestep: a new chat's generated title, made as the first step's side call
 * (ARCHITECTURE.md §7.8; taskctx_side_t, §6.5 "Side calls") on the title model: it runs
 * beside the step's model call, so the first token never waits for it. Its reply is checked
 * by title.h (the strict boundary and the {title} schema) and written with
 * chatstate_set_generated_title, fenced by the owner; anything else leaves the fallback.
 */
#ifndef CHATFLEET_TITLESTEP_H
#define CHATFLEET_TITLESTEP_H

#include "history.h"
#include "taskctx.h"

/* When h is a new chat's first step (a fallback title, nothing attempted, no reply yet) and
 * its first message has text, asks for the title call as ctx's side call, on h->title_model
 * (the chat's model when none is configured). Otherwise does nothing. */
void titlestep_ask(taskctx_t *ctx, const history_t *h);

#endif
