/* chatfile: stored files; see chatfile.h. */
#include "chatfile.h"
#include "db.h"
#include "hex.h"
#include "log.h"
#include "mem.h"

#include <openssl/evp.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const s_known[] = {"application/json", "application/pdf", "image/gif",
                                      "image/jpeg",       "image/png",       "image/webp",
                                      "text/csv",         "text/markdown",   "text/plain"};

bool chatfile_media_known(const char *media_type) {
    for (size_t i = 0; i < sizeof s_known / sizeof s_known[0]; i++) {
        if (!strcmp(media_type, s_known[i])) {
            return true;
        }
    }
    return false;
}

bool chatfile_media_text(const char *media_type) {
    return !strncmp(media_type, "text/", 5) || !strcmp(media_type, "application/json");
}

unsigned char *chatfile_base64_decode(const char *text, int *len) {
    size_t n = text ? strlen(text) : 0;
    if (n % 4 != 0 || n / 4 * 3 > (size_t)CHATFILE_MAX_BYTES + 2) {
        return NULL;
    }
    unsigned char *out = mem_calloc(1, n / 4 * 3 + 1);
    int got = EVP_DecodeBlock(out, (const unsigned char *)text, (int)n);
    if (got < 0) {
        free(out);
        return NULL;
    }
    /* EVP_DecodeBlock counts the padding's bytes too. */
    *len = got - (n >= 1 && text[n - 1] == '=') - (n >= 2 && text[n - 2] == '=');
    return out;
}

int chatfile_begin(PGconn *conn, const char *owner_id, const char *media_type, const char *name,
                   char id[ID_UUID_LEN + 1], char *errbuf, int errlen) {
    if (id_uuid_new(id) != 0) {
        snprintf(errbuf, (size_t)errlen, "no randomness for a file id");
        return -1;
    }
    const char *p[] = {id, owner_id, media_type, name};
    return db_exec(conn, errbuf, errlen,
                   "INSERT INTO chat_files (id, owner_id, mime_type, name)"
                   " VALUES ($1::uuid, $2::uuid, $3, $4)",
                   4, p) == DB_OK
               ? 0
               : -1;
}

int chatfile_put(PGconn *conn, const char *id, int seq, const void *data, size_t len, char *errbuf,
                 int errlen) {
    char s[DB_PARAM_INT64_LEN];
    const char *p[] = {id, db_param_int64(s, seq), data};
    const int lengths[] = {0, 0, (int)len};
    const int formats[] = {0, 0, 1};
    db_bin_t bin = {.lengths = lengths, .formats = formats};
    db_err_t err;
    PGresult *res = db_query_bin(conn, &err, errbuf, errlen,
                                 "INSERT INTO chat_file_chunks (file_id, seq, data)"
                                 " VALUES ($1::uuid, $2::int, $3::bytea)",
                                 3, p, &bin);
    PQclear(res);
    return err == DB_OK ? 0 : -1;
}

int chatfile_complete(PGconn *conn, const char *id, int64_t size, const unsigned char sha256[32],
                      int64_t quota, char *errbuf, int errlen) {
    char hex[65];
    hex_encode(sha256, 32, hex);
    char n[DB_PARAM_INT64_LEN], q[DB_PARAM_INT64_LEN];
    const char *p[] = {id, db_param_int64(n, size), hex, db_param_int64(q, quota)};
    db_err_t err;
    /* One transaction: the owner's lock first, then (in READ COMMITTED, a snapshot taken
     * after it) the sum of their complete files and the update. */
    if (db_exec(conn, errbuf, errlen, "BEGIN", 0, NULL) != DB_OK) {
        return -1;
    }
    PGresult *res = NULL;
    if (db_exec(conn, errbuf, errlen,
                "SELECT pg_advisory_xact_lock(hashtextextended('chat_files:' || owner_id::text,"
                " 0)) FROM chat_files WHERE id = $1::uuid",
                1, p) == DB_OK) {
        res = db_query(conn, &err, errbuf, errlen,
                       "UPDATE chat_files f SET complete = true, size_bytes = $2::bigint,"
                       " sha256 = decode($3, 'hex') WHERE id = $1::uuid AND ($4::bigint < 0 OR"
                       " (SELECT coalesce(sum(size_bytes), 0) FROM chat_files o"
                       " WHERE o.owner_id = f.owner_id AND o.complete) + $2::bigint <="
                       " $4::bigint)",
                       4, p);
    }
    int rc = !res ? -1 : strtoll(PQcmdTuples(res), NULL, 10) == 1 ? 0 : CHATFILE_OVER_QUOTA;
    PQclear(res);
    if (db_exec(conn, errbuf, errlen, rc < 0 ? "ROLLBACK" : "COMMIT", 0, NULL) != DB_OK) {
        return -1;
    }
    return rc;
}

int chatfile_delete(PGconn *conn, const char *id) {
    char errbuf[256];
    const char *p[] = {id};
    if (db_exec(conn, errbuf, sizeof errbuf, "DELETE FROM chat_files WHERE id = $1::uuid", 1, p) !=
        DB_OK) {
        log_warn("chat_file_delete_failed", "file_id=%s error=\"%s\"", id, errbuf);
        return -1;
    }
    return 0;
}

int chatfile_delete_unlinked(PGconn *conn, const char *owner_id, const char *id) {
    char errbuf[256];
    db_err_t err;
    const char *p[] = {id, owner_id};
    /* The row lock orders it with a link (cs_link_files locks the file too): a file linked
     * first is kept, one deleted first is refused to the link. */
    PGresult *res = db_query(conn, &err, errbuf, sizeof errbuf,
                             "WITH f AS (SELECT id, chat_id FROM chat_files WHERE id = $1::uuid"
                             " AND owner_id = $2::uuid AND complete FOR UPDATE),"
                             " d AS (DELETE FROM chat_files WHERE id IN (SELECT id FROM f"
                             " WHERE chat_id IS NULL) RETURNING id)"
                             " SELECT (SELECT count(*) FROM f), (SELECT count(*) FROM d)",
                             2, p);
    if (!res) {
        log_warn("chat_file_delete_failed", "file_id=%s error=\"%s\"", id, errbuf);
        return -1;
    }
    int rc = db_int64(res, 0, 0) == 0 ? 0 : db_int64(res, 0, 1) == 1 ? 1 : 2;
    PQclear(res);
    return rc;
}

int64_t chatfile_used(PGconn *conn, const char *owner_id) {
    char errbuf[256];
    db_err_t err;
    const char *p[] = {owner_id};
    /* An incomplete upload counts what it has stored so far. */
    PGresult *res = db_query(conn, &err, errbuf, sizeof errbuf,
                             "SELECT coalesce(sum(CASE WHEN f.complete THEN f.size_bytes ELSE"
                             " (SELECT coalesce(sum(length(c.data)), 0) FROM chat_file_chunks c"
                             " WHERE c.file_id = f.id) END), 0)"
                             " FROM chat_files f WHERE f.owner_id = $1::uuid",
                             1, p);
    int64_t used = res ? db_int64(res, 0, 0) : -1;
    PQclear(res);
    return used;
}

int chatfile_read(PGconn *conn, const char *owner_id, const char *id, chatfile_t *out) {
    memset(out, 0, sizeof *out);
    char errbuf[256];
    db_err_t err;
    const char *p[] = {id, owner_id};
    /* One statement, so the bytes are those of the row read (an eviction cannot fall between);
     * binary results: a text value is its bytes, a chunk too. */
    db_bin_t bin = {.result_format = 1};
    PGresult *res = db_query_bin(conn, &err, errbuf, sizeof errbuf,
                                 "SELECT f.mime_type, f.name, f.size_bytes::text,"
                                 " encode(f.sha256, 'hex'), c.data FROM chat_files f"
                                 " LEFT JOIN chat_file_chunks c ON c.file_id = f.id"
                                 " WHERE f.id = $1::uuid AND f.owner_id = $2::uuid AND f.complete"
                                 " ORDER BY c.seq",
                                 2, p, &bin);
    if (!res) {
        log_warn("chat_file_read_failed", "file_id=%s error=\"%s\"", id, errbuf);
        return -1;
    }
    if (PQntuples(res) == 0) {
        PQclear(res);
        return 0;
    }
    snprintf(out->media_type, sizeof out->media_type, "%s", PQgetvalue(res, 0, 0));
    snprintf(out->name, sizeof out->name, "%s", PQgetvalue(res, 0, 1));
    out->size = strtoll(PQgetvalue(res, 0, 2), NULL, 10);
    snprintf(out->sha256, sizeof out->sha256, "%s", PQgetvalue(res, 0, 3));
    out->chunks = res;
    return 1;
}

void chatfile_clear(chatfile_t *f) {
    PQclear(f->chunks);
    f->chunks = NULL;
}

PGresult *chatfile_load(PGconn *conn, const char *chat_id, const char *ids) {
    char errbuf[256];
    db_err_t err;
    const char *p[] = {chat_id, ids};
    db_bin_t bin = {.result_format = 1};
    PGresult *res = db_query_bin(
        conn, &err, errbuf, sizeof errbuf,
        "SELECT f.id::text, f.mime_type, f.name, (SELECT coalesce(string_agg(c.data, ''"
        " ORDER BY c.seq), '') FROM chat_file_chunks c WHERE c.file_id = f.id)"
        " FROM chat_files f WHERE f.chat_id = $1::uuid AND f.id = ANY($2::uuid[])",
        2, p, &bin);
    if (!res) {
        log_warn("chat_files_load_failed", "chat_id=%s error=\"%s\"", chat_id, errbuf);
    }
    return res;
}

int64_t chatfile_sweep(PGconn *conn) {
    char errbuf[256];
    char ms[DB_PARAM_INT64_LEN];
    const char *p[] = {db_param_int64(ms, CHATFILE_ABANDONED_MS)};
    db_err_t err;
    PGresult *res = db_query(conn, &err, errbuf, sizeof errbuf,
                             "DELETE FROM chat_files WHERE NOT complete AND created_at < now() -"
                             " make_interval(secs => $1::bigint / 1000.0)",
                             1, p);
    int64_t n = res ? strtoll(PQcmdTuples(res), NULL, 10) : -1;
    PQclear(res);
    return n;
}
