/*
 * title: a chat's generated title (ARCHITECTURE.md §7.8), made through chatfleet's own
 * structured output: the title call asks for a json_schema {title} value (native schema on
 * the provider), and its reply is screened by the strict JSON boundary and validated against
 * that schema by the Draft-07 validator, so a bad answer never becomes a title.
 *
 * Pure: no I/O. The generation step makes the call and writes the title with
 * chatstate_set_generated_title.
 */
#ifndef CHATFLEET_TITLE_H
#define CHATFLEET_TITLE_H

#include <jansson.h>
#include <stddef.h>

#include "outformat.h"

#define TITLE_SCHEMA_NAME "chat_title"

/* The {title} format: an object with one string member "title", 1 to CS_TITLE_MAX_BYTES
 * bytes, nothing else. Never NULL; outformat_destroy frees it. */
outformat_t *title_format_new(void);

/* The same format, made once per process and shared (its compiled schema is immutable and its
 * document only read): never NULL, never freed. Thread-safe. */
const outformat_t *title_format(void);

/* The title call's prompt for messages (history_t.messages): an instruction and the text of
 * the first real user message (not model-only, not control). A new reference, or NULL when
 * there is no such text. */
json_t *title_prompt(const json_t *messages);

/* The most recent user messages a regeneration's prompt carries. */
#define TITLE_REGEN_MESSAGES 8

/* A requested regeneration's prompt (POST /chats/{id}/title/regenerate) for messages: an
 * instruction, then the text of the last TITLE_REGEN_MESSAGES real user messages, oldest first,
 * one user message each, so that a conversation that moved on gets a title for where it went.
 * A new reference, or NULL when no user message has text. */
json_t *title_regen_prompt(const json_t *messages);

/* The title a reply (its content parts and finish) holds: the text must pass the strict
 * boundary and fmt's schema, and is trimmed of surrounding white space. A new string, or NULL
 * with the reason in reason (bounded by size). */
char *title_from_reply(const outformat_t *fmt, const json_t *content, const char *finish,
                       char *reason, size_t size);

#endif
