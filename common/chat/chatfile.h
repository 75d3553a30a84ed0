/*
 * chatfile: the stored files of chats (ARCHITECTURE.md §3, "Files"): an upload written chunk
 * by chunk, its bytes read back, and the sweep of uploads left incomplete. Links between files
 * and chats are not written here: the transition that persists a message naming a file
 * writes its link (chatstate.h, cs_settings_t.max_attachments).
 */
#ifndef CHATFLEET_CHATFILE_H
#define CHATFLEET_CHATFILE_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

#include "id.h"

#define CHATFILE_MAX_BYTES    (10 * 1024 * 1024) /* one file */
#define CHATFILE_PIECE_BYTES  (64 * 1024)        /* what a writer stores per chunk row */
#define CHATFILE_NAME_MAX     255                /* bytes of a file name */
#define CHATFILE_MEDIA_MAX    64                 /* bytes of a media type */
#define CHATFILE_ABANDONED_MS (60 * 60 * 1000)   /* an upload incomplete this long is swept */

/* True when media_type is one a file may be stored as: application/json, application/pdf,
 * image/gif, image/jpeg, image/png, image/webp, text/csv, text/markdown, text/plain. */
bool chatfile_media_known(const char *media_type);

/* True for the media types a model gets as text (the file's UTF-8 inlined): text/csv,
 * text/markdown, text/plain and application/json. */
bool chatfile_media_text(const char *media_type);

/* The bytes of standard base64 text (a file part's data) in a new buffer, their count in *len;
 * NULL when text is not base64 or decodes to more than CHATFILE_MAX_BYTES. Caller frees. */
unsigned char *chatfile_base64_decode(const char *text, int *len);

/* Starts an upload of owner's: an incomplete row named name (may be "") of media_type, its
 * id written to id. 0, or -1 with the server's message in errbuf. */
int chatfile_begin(PGconn *conn, const char *owner_id, const char *media_type, const char *name,
                   char id[ID_UUID_LEN + 1], char *errbuf, int errlen);

/* Stores the upload's piece seq (0, 1, ...): len bytes. 0 or -1. */
int chatfile_put(PGconn *conn, const char *id, int seq, const void *data, size_t len, char *errbuf,
                 int errlen);

/* Completes the upload: its size and SHA-256 recorded, the file usable, unless its owner's
 * complete files would then take more than quota bytes (< 0: no quota). Completions of one
 * owner's files are serialized (an advisory lock), so concurrent uploads cannot pass the quota
 * together. 0, CHATFILE_OVER_QUOTA (nothing changed), or -1. */
#define CHATFILE_OVER_QUOTA 1
int chatfile_complete(PGconn *conn, const char *id, int64_t size, const unsigned char sha256[32],
                      int64_t quota, char *errbuf, int errlen);

/* Deletes a file and its bytes (an abandoned or refused upload). 0 or -1. */
int chatfile_delete(PGconn *conn, const char *id);

/* Deletes owner's complete file id (a valid UUID) unless a chat holds it: 1 deleted, 0 no such
 * file of owner's, 2 held by a chat (it goes with the chat), -1 on a database error. */
int chatfile_delete_unlinked(PGconn *conn, const char *owner_id, const char *id);

/* The bytes owner's files take, complete or not; -1 on a database error. */
int64_t chatfile_used(PGconn *conn, const char *owner_id);

#define CHATFILE_DATA_COLUMN 4

/* A stored file, its bytes in chunks. */
typedef struct {
    char media_type[CHATFILE_MEDIA_MAX + 1];
    char name[CHATFILE_NAME_MAX + 1];
    int64_t size;
    char sha256[65];  /* lower-case hex */
    PGresult *chunks; /* one row per piece in order, column CHATFILE_DATA_COLUMN the bytes
                         (binary; NULL in the one row of an empty file) */
} chatfile_t;

/* Reads owner's complete file id (a valid UUID) into out: 1, 0 when there is none (no such
 * file, another owner's, or not complete), -1 on a database error. Release with
 * chatfile_clear. */
int chatfile_read(PGconn *conn, const char *owner_id, const char *id, chatfile_t *out);

/* Frees what chatfile_read filled. */
void chatfile_clear(chatfile_t *f);

/* The bytes of chat_id's linked files among ids (a PostgreSQL uuid[] literal, "{a,b}"): rows
 * of id, media_type, name, bytes, all in binary format (each value its bytes), for a
 * history to send; a file not linked to the chat has no row. NULL on a database error. */
PGresult *chatfile_load(PGconn *conn, const char *chat_id, const char *ids);

/* Deletes uploads incomplete for CHATFILE_ABANDONED_MS (their gateway died mid-body): the
 * number deleted, or -1. */
int64_t chatfile_sweep(PGconn *conn);

#endif
