/*
 * fileparts: the files a history's messages name, made ready for a model (ARCHITECTURE.md §3,
 * "Files"; §7.3): a linked image or PDF gets its bytes (base64, the providers' neutral shape,
 * worker/providers/README.md), a text file is inlined as a text part, and a file that is gone
 * (evicted, or the chat cleared) becomes a placeholder. Only user messages carry files to a
 * model: an assistant's or a tool's file parts (a tool's image, toolfiles.h) are dropped, the
 * tool's result naming the file.
 */
#ifndef CHATFLEET_FILEPARTS_H
#define CHATFLEET_FILEPARTS_H

#include <jansson.h>
#include <libpq-fe.h>

/* Rewrites the file parts of messages (history_t.messages) in place, reading the bytes of
 * chat_id's files on conn, in the caller's transaction. 0, or -1 on a database error. */
int fileparts_fill(PGconn *conn, const char *chat_id, json_t *messages);

#endif
