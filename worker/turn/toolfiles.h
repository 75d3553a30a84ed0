/*
 * toolfiles: the files a tool writes take the uploads' path (ARCHITECTURE.md §3, "Files"): an
 * image in an MCP tool's result is stored as a file of the chat's owner, and the result keeps
 * a reference to it instead of its bytes; the step's CommitStep then links it to the chat like
 * any message's file (cap and eviction included).
 */
#ifndef CHATFLEET_TOOLFILES_H
#define CHATFLEET_TOOLFILES_H

#include <jansson.h>
#include <libpq-fe.h>

/* Stores every {"type":"image","data","mimeType"} item of the results in answers
 * ({tool_call_id: {"result": {"content": [...]}, "is_error"}}, changed in place) whose type is
 * one a file may be stored as: "data" gives way to "file_id" and "name". The ids stored are
 * appended to stored (an array) so that a step whose commit fails can delete them
 * (toolfiles_discard). 0, or -1 on a database error (what was stored is in stored). */
int toolfiles_store(PGconn *conn, const char *chat_id, json_t *answers, json_t *stored);

/* Deletes the files toolfiles_store stored (their step did not commit). */
void toolfiles_discard(PGconn *conn, const json_t *stored);

#endif
