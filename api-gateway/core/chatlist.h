/*
 * chatlist: GET /api/v2/chats (api-shapes.md §2): its query parameters read and checked, and
 * the one statement that lists the caller's root chats, pinned first, searched (PostgreSQL
 * full-text search over titles and message text), filtered by labels and paged by cursor and
 * offset. Also the rules of labels, one set for the list's filter and the bodies that set
 * them (POST and PATCH /chats), and the 400 envelope of a refusal with a message of its own.
 */
#ifndef CHATFLEET_CHATLIST_H
#define CHATFLEET_CHATLIST_H

#include "gateway.h"

#define CHATLIST_LIMIT_MAX     200 /* chats per page */
#define CHATLIST_LIMIT_DEFAULT 50
#define CHATLIST_OFFSET_MAX    10000 /* rows skipped after the cursor */
#define CHATLIST_Q_MAX_BYTES   1024  /* the q parameter, archived: tokens included */
#define LABELS_MAX             50    /* labels on one chat, and label= filters in one list */
#define LABEL_KEY_MAX_BYTES    64    /* a key: 1 to this many bytes of UTF-8, no ':' */
#define LABEL_VALUE_MAX_BYTES  256   /* a value: 0 to this many bytes of UTF-8 */

/* Answers GET /api/v2/chats for req's user: 200 with a JSON array of their root chats (each
 * embedding its family, gateway_chat_json's shape), or a 400 naming the parameter at fault:
 *   limit 1..CHATLIST_LIMIT_MAX (default 50); offset 0..CHATLIST_OFFSET_MAX (default 0);
 *   after_id: one of the caller's chats (any other id gets the same 400, so the answer tells
 *   nothing of other users' chats); archived: true|false (default false);
 *   q: the text of a search box for websearch_to_tsquery('english', ...), matched against the
 *   title and the non-deleted user-visible text of the chat's own messages; its tokens
 *   archived:true and archived:false (outside double quotes) set the archived filter instead
 *   (one conflicting with the other or with the archived parameter: 400 naming q);
 *   label=key:value, repeatable: the chat carries every pair (same key, two values: none
 *   does). Order: pinned chats by pin_order, then updated_at and id, newest first; after_id
 *   continues after the cursor's row in that order, and offset skips rows after that. A
 *   database failure is a 500. */
void chatlist_handle(gateway_t *gw, const http_req_t *req, http_resp_t *resp);

/* Checks a labels value of a request body, found under field ("labels"): an object of at most
 * LABELS_MAX members, each key 1..LABEL_KEY_MAX_BYTES without ':' (label=key:value splits at
 * the first one) and each value a string of 0..LABEL_VALUE_MAX_BYTES, without NUL. 0, or -1
 * with 400 "Invalid labels." naming field or the member at fault (labels.KEY,
 * labels["a b"]). */
int chatlist_labels_check(const json_t *labels, const char *field, http_resp_t *resp);

/* The 400 validation envelope with a message of its own ("Invalid labels.", "Pin order must
 * be non-negative."): {"message", "detail", "validations": [{"field", "detail"}]}. */
void chatlist_invalid(http_resp_t *resp, const char *message, const char *field,
                      const char *detail);

#endif
