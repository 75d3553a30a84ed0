/*
 * upload: local files attached to a message (ARCHITECTURE.md §3, "Files"), for the --file
 * options of `chat create`, `chat send`, `chat edit` and `ask`. Every file is checked before
 * anything is sent (a known extension, a readable regular file, a name the gateway takes);
 * then each is streamed from disk to POST /api/v2/chats/files, its media type from its
 * extension and its name in Content-Disposition, and the message names each upload with a
 * {"type":"file","file_id"} part after its text.
 */
#ifndef CHATFLEET_CLI_UPLOAD_H
#define CHATFLEET_CLI_UPLOAD_H

#include <jansson.h>

#include "client.h"

#define UPLOAD_FILES_MAX 32  /* --file options per command */
#define UPLOAD_NAME_MAX  255 /* bytes of a file name the gateway stores */
#define UPLOAD_EXTENSIONS                                                                          \
    ".png .jpg .jpeg .gif .webp .pdf .json .csv .md .txt" /* the accepted, in messages */

/* The --file options of one command, in the order given (the strings are argv's). */
typedef struct {
    const char *paths[UPLOAD_FILES_MAX];
    int n;
} upload_list_t;

/* Appends path to list. 0, or -1 (reason on stderr) past UPLOAD_FILES_MAX. */
int upload_list_add(upload_list_t *list, const char *path);

/* The media type the gateway stores for path's extension (case-insensitive): image/png,
 * image/jpeg (.jpg, .jpeg), image/gif, image/webp, application/pdf, application/json,
 * text/csv, text/markdown (.md), text/plain (.txt); NULL for any other. */
const char *upload_media_type(const char *path);

/* Checks every file of list before anything is sent: a known extension, a regular file that
 * opens for reading, a base name without control characters of at most UPLOAD_NAME_MAX bytes.
 * 0, or -1 with the path and the reason on stderr (for an unknown extension, the accepted
 * ones). */
int upload_check(const upload_list_t *list);

/* Uploads the files of list in order, appending one {"type":"file","file_id"} part per file
 * to content (a JSON array). 0, or -1 at the first failure with the path and the gateway's
 * message (or the transport's reason) on stderr; the files uploaded before it are deleted
 * again (DELETE /api/v2/chats/files/{file}) and content is as it was. */
int upload_all(client_t *client, const upload_list_t *list, json_t *content);

#endif
