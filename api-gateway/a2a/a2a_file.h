/*
 * a2a_file: the file parts of an A2A message (ARCHITECTURE.md §3, "Files"; api-gateway/a2a/
 * README.md): a v1.0 part with "raw" bytes (base64), "mediaType" and "filename", or a v0.3
 * {"kind":"file","file":{"bytes","mimeType","name"}}, stored as an upload of the caller's and
 * sent as a file part. A part by URL ("url", v0.3 "file.uri") is refused: the gateway fetches
 * nothing on a client's behalf.
 */
#ifndef CHATFLEET_A2A_FILE_H
#define CHATFLEET_A2A_FILE_H

#include <jansson.h>

#include "gateway.h"

/* Reads part (at field, "params.message.parts[i]") when it is a file part: 1 with
 * {"bytes","media_type","name","field"} appended to files, 0 when it is no file part, -1 with
 * *data naming the field when it is a file part this agent refuses. */
int a2a_file_part(json_t *part, const char *field, json_t *files, json_t **data);

/* Stores each of files (a2a_file_part's) as the user's upload and appends a file part per
 * file to *content (a JSON array text; replaced), checked against the chat (chat_id, NULL for a
 * new one) and its model as a REST send is (attachment.h). 0, or -1 with *data naming the
 * part's field. */
int a2a_file_store(gateway_t *gw, PGconn *conn, const char *user_id, const char *chat_id,
                   json_t *files, char **content, json_t **data);

#endif
