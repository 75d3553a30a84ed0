/*
 * attachment: the file parts of a message a user sends (ARCHITECTURE.md §3, "Files"), checked
 * and described before the transition that links them: each names a complete file of the
 * sender's, held by no other chat, of a media type the message's model takes (text files
 * reach every model as text). The transition checks the link again under its locks.
 */
#ifndef CHATFLEET_ATTACHMENT_H
#define CHATFLEET_ATTACHMENT_H

#include <libpq-fe.h>

#include "http.h"

/* Rewrites *content (gateway_content's text; replaced, the old text freed) with each file
 * part's media_type and name from its file. chat_id is the chat the message goes to (NULL
 * for a new chat), model_id the message's model (NULL: the chat's, else the default's).
 * 0 (also for content without file parts), or -1 with a 400 naming content[i] (field is
 * "content" or the caller's name for it) or a 500 in resp. */
int attachment_resolve(PGconn *conn, const char *user_id, const char *chat_id, const char *model_id,
                       const char *field, char **content, http_resp_t *resp);

#endif
