/* fileupload: an upload into chat_files; see fileupload.h. */
#define _GNU_SOURCE /* strcasestr */
#include "fileupload.h"
#include "chatfile.h"
#include "hex.h"
#include "jsonstrict.h"
#include "log.h"
#include "mem.h"

#include <ctype.h>
#include <magic.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct sniffer {
    magic_t cookie;
    pthread_mutex_t lock; /* a libmagic cookie is not thread-safe */
};

sniffer_t *sniffer_new(void) {
    magic_t cookie = magic_open(MAGIC_MIME_TYPE | MAGIC_ERROR);
    if (!cookie || magic_load(cookie, NULL) != 0) {
        log_error("magic_load_failed", "error=\"%s\"",
                  cookie && magic_error(cookie) ? magic_error(cookie) : "no cookie");
        if (cookie) {
            magic_close(cookie);
        }
        return NULL;
    }
    sniffer_t *self = mem_calloc(1, sizeof *self);
    self->cookie = cookie;
    pthread_mutex_init(&self->lock, NULL);
    return self;
}

void sniffer_destroy(sniffer_t **self_p) {
    sniffer_t *self = *self_p;
    if (!self) {
        return;
    }
    magic_close(self->cookie);
    pthread_mutex_destroy(&self->lock);
    free(self);
    *self_p = NULL;
}

/* The media type libmagic reads in data into out ("" when it cannot tell). */
static void s_sniff(sniffer_t *self, const char *data, size_t len, char *out, size_t size) {
    pthread_mutex_lock(&self->lock);
    const char *t = magic_buffer(self->cookie, data, len);
    snprintf(out, size, "%s", t ? t : "");
    pthread_mutex_unlock(&self->lock);
}

struct fileupload {
    sniffer_t *sniffer;
    char owner_id[ID_UUID_LEN + 1];
    char media_type[CHATFILE_MEDIA_MAX + 1];
    char name[CHATFILE_NAME_MAX + 1];
    int64_t quota;
    int64_t used;             /* the owner's other files, read at the first piece */
    char id[ID_UUID_LEN + 1]; /* "" until the row exists */
    int seq;
    int64_t size;
    bool complete;
    bool text;              /* a text type: the bytes must be UTF-8 */
    unsigned char carry[4]; /* a UTF-8 character cut at the end of the last piece */
    size_t carry_len;
    EVP_MD_CTX *sha;
};

/* The media type of a Content-Type value, lower-cased, parameters dropped; a charset other
 * than UTF-8 is refused. 0 or -1. */
static int s_media_type(const char *value, char *out, size_t size) {
    size_t n = strcspn(value, ";");
    while (n > 0 && isspace((unsigned char)value[n - 1])) {
        n--;
    }
    if (n == 0 || n >= size) {
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        out[i] = (char)tolower((unsigned char)value[i]);
    }
    out[n] = '\0';
    const char *cs = strcasestr(value + n, "charset=");
    if (cs) {
        cs += 8;
        cs += *cs == '"';
        if (strncasecmp(cs, "utf-8", 5) != 0 && strncasecmp(cs, "us-ascii", 8) != 0) {
            return -1;
        }
    }
    return chatfile_media_known(out) ? 0 : -1;
}

/* Checks name: UTF-8 without control characters, under size bytes. */
static int s_name_ok(const char *name, size_t size) {
    const unsigned char *p = (const unsigned char *)name;
    const unsigned char *end = p + strlen(name);
    while (p < end) {
        size_t c = jsonstrict_utf8_len(p, end);
        if (c == 0 || (c == 1 && (*p < 0x20 || *p == 0x7f))) {
            return -1;
        }
        p += c;
    }
    return strlen(name) < size ? 0 : -1;
}

int fileupload_disposition_name(const char *value, char *out, size_t size) {
    out[0] = '\0';
    if (!value) {
        return 0;
    }
    char raw[4 * CHATFILE_NAME_MAX];
    size_t n = 0;
    const char *ext = strcasestr(value, "filename*=");
    const char *plain = strcasestr(value, "filename=");
    if (ext && !strncasecmp(ext + 10, "utf-8''", 7)) {
        for (const char *p = ext + 17; *p && *p != ';' && !isspace((unsigned char)*p); p++) {
            unsigned hi, lo;
            if (*p == '%' && sscanf(p + 1, "%1x%1x", &hi, &lo) == 2) {
                raw[n++] = (char)(hi * 16 + lo);
                p += 2;
            } else {
                raw[n++] = *p;
            }
            if (n >= sizeof raw - 1) {
                return -1;
            }
        }
    } else if (plain) {
        const char *p = plain + 9;
        bool quoted = *p == '"';
        p += quoted;
        for (; *p && (quoted ? *p != '"' : *p != ';' && !isspace((unsigned char)*p)); p++) {
            if (quoted && *p == '\\' && p[1]) {
                p++;
            }
            raw[n++] = *p;
            if (n >= sizeof raw - 1) {
                return -1;
            }
        }
    }
    raw[n] = '\0';
    const char *base = raw;
    for (const char *p = raw; *p; p++) {
        if (*p == '/' || *p == '\\') {
            base = p + 1;
        }
    }
    if (s_name_ok(base, size) != 0) {
        return -1;
    }
    snprintf(out, size, "%s", base);
    return 0;
}

fileupload_t *fileupload_new(sniffer_t *sniffer, const char *owner_id, const char *ct,
                             const char *name, int64_t quota_bytes, http_resp_t *resp) {
    char media[CHATFILE_MEDIA_MAX + 1];
    if (!ct || s_media_type(ct, media, sizeof media) != 0) {
        http_invalid(resp, "Content-Type",
                     "must be one of application/json, application/pdf, image/gif, image/jpeg, "
                     "image/png, image/webp, text/csv, text/markdown, text/plain (UTF-8)");
        return NULL;
    }
    if (s_name_ok(name, CHATFILE_NAME_MAX + 1) != 0) {
        http_invalid(resp, "name",
                     "the file name must be UTF-8 without control characters, at most 255 bytes");
        return NULL;
    }
    fileupload_t *self = mem_calloc(1, sizeof *self);
    self->sniffer = sniffer;
    snprintf(self->owner_id, sizeof self->owner_id, "%s", owner_id);
    snprintf(self->media_type, sizeof self->media_type, "%s", media);
    snprintf(self->name, sizeof self->name, "%s", name);
    self->quota = quota_bytes;
    self->text = chatfile_media_text(media);
    self->sha = EVP_MD_CTX_new();
    if (!self->sha || EVP_DigestInit_ex(self->sha, EVP_sha256(), NULL) != 1) {
        fileupload_destroy(&self, NULL);
        http_error(resp, 500, "Internal error.", "no SHA-256");
        return NULL;
    }
    return self;
}

/* True when the sniffed type of the first bytes fits the declared one: the same type for
 * images and PDF, any text (or JSON) for a text type. */
static bool s_fits(const char *declared, const char *sniffed) {
    if (!chatfile_media_text(declared)) {
        return !strcmp(declared, sniffed);
    }
    return !strncmp(sniffed, "text/", 5) || !strcmp(sniffed, "application/json") ||
           !strcmp(sniffed, "application/x-empty") || !strcmp(sniffed, "application/csv");
}

/* Checks that data continues valid UTF-8 (a character cut at the end is carried over). */
static bool s_utf8(fileupload_t *self, const char *data, size_t len) {
    const unsigned char *p = (const unsigned char *)data;
    const unsigned char *end = p + len;
    while (self->carry_len > 0 && p < end) {
        self->carry[self->carry_len++] = *p++;
        size_t c = jsonstrict_utf8_len(self->carry, self->carry + self->carry_len);
        if (c == self->carry_len) {
            self->carry_len = 0;
        } else if (self->carry_len == 4) {
            return false;
        }
    }
    while (p < end) {
        size_t c = jsonstrict_utf8_len(p, end);
        if (c == 0 || *p == 0) {
            /* A lead byte whose character the piece cuts: wait for the rest. */
            if (end - p < 4 && *p >= 0xc2 && *p <= 0xf4) {
                self->carry_len = (size_t)(end - p);
                memcpy(self->carry, p, self->carry_len);
                return true;
            }
            return false;
        }
        p += c;
    }
    return true;
}

static int s_bad_bytes(fileupload_t *self, const char *sniffed, http_resp_t *resp) {
    char detail[256];
    if (sniffed) {
        snprintf(detail, sizeof detail, "the bytes are %s, not the declared %s",
                 sniffed[0] ? sniffed : "of an unknown type", self->media_type);
    } else {
        snprintf(detail, sizeof detail, "the bytes of a %s file must be UTF-8 text",
                 self->media_type);
    }
    http_invalid(resp, "Content-Type", detail);
    return -1;
}

static int s_over_quota(const fileupload_t *self, http_resp_t *resp) {
    char detail[128];
    snprintf(detail, sizeof detail, "the owner's files may take %lld bytes in all",
             (long long)self->quota);
    http_error(resp, 413, "File quota exceeded.", detail);
    return -1;
}

/* The first piece: the type checked, the quota read, the row created. */
static int s_start(fileupload_t *self, PGconn *conn, const char *data, size_t len,
                   http_resp_t *resp) {
    char sniffed[128];
    s_sniff(self->sniffer, data, len, sniffed, sizeof sniffed);
    if (!s_fits(self->media_type, sniffed)) {
        return s_bad_bytes(self, sniffed, resp);
    }
    self->used = chatfile_used(conn, self->owner_id);
    char errbuf[256];
    if (self->used < 0 || chatfile_begin(conn, self->owner_id, self->media_type, self->name,
                                         self->id, errbuf, sizeof errbuf) != 0) {
        self->id[0] = '\0';
        http_error(resp, 500, "Internal error.", "the file could not be stored");
        return -1;
    }
    return 0;
}

int fileupload_write(fileupload_t *self, PGconn *conn, const char *data, size_t len,
                     http_resp_t *resp) {
    if (len == 0) {
        return 0;
    }
    if (!self->id[0] && s_start(self, conn, data, len, resp) != 0) {
        return -1;
    }
    /* Early, against what was stored when the upload began; the completion checks again
     * under the owner's lock (concurrent uploads). */
    if (self->used + self->size + (int64_t)len > self->quota) {
        return s_over_quota(self, resp);
    }
    if (self->text && !s_utf8(self, data, len)) {
        return s_bad_bytes(self, NULL, resp);
    }
    char errbuf[256];
    if (EVP_DigestUpdate(self->sha, data, len) != 1 ||
        chatfile_put(conn, self->id, self->seq, data, len, errbuf, sizeof errbuf) != 0) {
        http_error(resp, 500, "Internal error.", "the file could not be stored");
        return -1;
    }
    self->seq++;
    self->size += (int64_t)len;
    return 0;
}

int fileupload_finish(fileupload_t *self, PGconn *conn, http_resp_t *resp) {
    if (!self->id[0] && s_start(self, conn, "", 0, resp) != 0) {
        return -1;
    }
    if (self->carry_len > 0) {
        return s_bad_bytes(self, NULL, resp);
    }
    unsigned char md[32];
    unsigned int mdlen = 0;
    char errbuf[256];
    int rc =
        EVP_DigestFinal_ex(self->sha, md, &mdlen) != 1 || mdlen != 32
            ? -1
            : chatfile_complete(conn, self->id, self->size, md, self->quota, errbuf, sizeof errbuf);
    if (rc == CHATFILE_OVER_QUOTA) {
        return s_over_quota(self, resp);
    }
    if (rc != 0) {
        http_error(resp, 500, "Internal error.", "the file could not be stored");
        return -1;
    }
    self->complete = true;
    char hex[65];
    hex_encode(md, 32, hex);
    log_info("chat_file_uploaded", "file_id=%s user_id=%s mime_type=%s size_bytes=%lld", self->id,
             self->owner_id, self->media_type, (long long)self->size);
    http_json(resp, 201,
              json_pack("{s:s, s:s, s:s, s:I, s:s}", "id", self->id, "name", self->name,
                        "mime_type", self->media_type, "size_bytes", (json_int_t)self->size,
                        "sha256", hex));
    return 0;
}

const char *fileupload_id(const fileupload_t *self) {
    return self->id;
}

void fileupload_destroy(fileupload_t **self_p, PGconn *conn) {
    fileupload_t *self = *self_p;
    if (!self) {
        return;
    }
    if (self->id[0] && !self->complete && conn) {
        (void)chatfile_delete(conn, self->id);
    }
    EVP_MD_CTX_free(self->sha);
    free(self);
    *self_p = NULL;
}
