/*
 * pgload: the uploads bench's reference (tests/bench/uploads/run). It runs the statements an
 * upload costs the gateway (api-gateway/core/fileupload.c, common/chat/chatfile.c) straight
 * from libpq, without HTTP: for each of UPLOADS copies of FILE, a chat_files row, one INSERT
 * into chat_file_chunks per 64 KiB piece (binary parameter, autocommit, as the gateway sends
 * them) and the UPDATE that completes the row, over THREADS connections at once. No SHA-256,
 * no libmagic, no quota query: what PostgreSQL alone takes for the same bytes.
 *
 *   pgload CONNINFO FILE UPLOADS THREADS OWNER_ID
 *
 * Prints "seconds=S bytes=B" on stdout; exits 1 on any failed statement.
 */
#include <libpq-fe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PIECE_BYTES (64 * 1024) /* HTTP_CHUNK_BYTES: the pieces the gateway stores */

static const char *s_conninfo;
static const char *s_owner;
static char *s_data;
static size_t s_len;
static int s_uploads;
static int s_next; /* the next upload to run, under s_lock */
static int s_failed;
static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;

static int s_ok(PGconn *conn, PGresult *res, const char *what) {
    ExecStatusType st = PQresultStatus(res);
    int ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
    if (!ok) {
        fprintf(stderr, "pgload: %s: %s", what, PQerrorMessage(conn));
    }
    PQclear(res);
    return ok;
}

static int s_upload(PGconn *conn) {
    PGresult *res = PQexecParams(conn,
                                 "INSERT INTO chat_files (id, owner_id, mime_type, name)"
                                 " VALUES (gen_random_uuid(), $1::uuid, 'image/png', 'ref.png')"
                                 " RETURNING id",
                                 1, NULL, (const char *[]){s_owner}, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        return s_ok(conn, res, "insert file");
    }
    char id[40];
    snprintf(id, sizeof id, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    int seq = 0;
    for (size_t at = 0; at < s_len; at += PIECE_BYTES, seq++) {
        size_t n = s_len - at < PIECE_BYTES ? s_len - at : PIECE_BYTES;
        char seqs[16];
        snprintf(seqs, sizeof seqs, "%d", seq);
        const char *p[] = {id, seqs, s_data + at};
        const int lengths[] = {0, 0, (int)n};
        const int formats[] = {0, 0, 1};
        res = PQexecParams(conn,
                           "INSERT INTO chat_file_chunks (file_id, seq, data)"
                           " VALUES ($1::uuid, $2::int, $3::bytea)",
                           3, NULL, p, lengths, formats, 0);
        if (!s_ok(conn, res, "insert chunk")) {
            return 0;
        }
    }
    char size[24];
    snprintf(size, sizeof size, "%zu", s_len);
    res = PQexecParams(conn,
                       "UPDATE chat_files SET complete = true, size_bytes = $2::bigint,"
                       " sha256 = decode(repeat('00', 32), 'hex') WHERE id = $1::uuid",
                       2, NULL, (const char *[]){id, size}, NULL, NULL, 0);
    return s_ok(conn, res, "complete");
}

static void *s_thread(void *arg) {
    (void)arg;
    PGconn *conn = PQconnectdb(s_conninfo);
    if (PQstatus(conn) != CONNECTION_OK) {
        fprintf(stderr, "pgload: connect: %s", PQerrorMessage(conn));
        PQfinish(conn);
        pthread_mutex_lock(&s_lock);
        s_failed = 1;
        pthread_mutex_unlock(&s_lock);
        return NULL;
    }
    for (;;) {
        pthread_mutex_lock(&s_lock);
        int mine = s_failed ? s_uploads : s_next++;
        pthread_mutex_unlock(&s_lock);
        if (mine >= s_uploads) {
            break;
        }
        if (!s_upload(conn)) {
            pthread_mutex_lock(&s_lock);
            s_failed = 1;
            pthread_mutex_unlock(&s_lock);
        }
    }
    PQfinish(conn);
    return NULL;
}

static double s_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: pgload CONNINFO FILE UPLOADS THREADS OWNER_ID\n");
        return 2;
    }
    s_conninfo = argv[1];
    s_uploads = (int)strtol(argv[3], NULL, 10);
    int threads = (int)strtol(argv[4], NULL, 10);
    s_owner = argv[5];
    FILE *f = fopen(argv[2], "rb");
    if (!f || fseek(f, 0, SEEK_END) != 0) {
        fprintf(stderr, "pgload: cannot read %s\n", argv[2]);
        return 2;
    }
    s_len = (size_t)ftell(f);
    rewind(f);
    s_data = malloc(s_len ? s_len : 1);
    if (!s_data || fread(s_data, 1, s_len, f) != s_len || s_uploads < 1 || threads < 1 ||
        threads > 256) {
        fprintf(stderr, "pgload: bad arguments or unreadable file\n");
        return 2;
    }
    fclose(f);
    pthread_t t[256];
    double t0 = s_now();
    for (int i = 0; i < threads; i++) {
        if (pthread_create(&t[i], NULL, s_thread, NULL) != 0) {
            fprintf(stderr, "pgload: no thread\n");
            return 1;
        }
    }
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
    }
    double secs = s_now() - t0;
    free(s_data);
    if (s_failed) {
        return 1;
    }
    printf("seconds=%.3f bytes=%zu\n", secs, s_len * (size_t)s_uploads);
    return 0;
}
