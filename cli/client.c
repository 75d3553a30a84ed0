/* client: REST calls to the gateway; see client.h. */
#include "client.h"
#include "dynbuf.h"
#include "header.h"
#include "jsonout.h"
#include "mem.h"

#include <curl/curl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const jsonstrict_limits_t client_limits = {
    .max_bytes = CLIENT_RESPONSE_MAX_BYTES,
    .max_depth = 64,
    .max_values = 1 << 22,
    .max_keys = 65536,
    .max_items = 1 << 20,
    .max_string_bytes = 8 * 1024 * 1024,
    .max_number_chars = JSONSTRICT_MAX_NUMBER_CHARS_DEFAULT,
    /* The gateway's answers carry stored values: read their numbers as stored text is (a row
     * written before the number policy may hold 1e300, which the gateway prints as is). */
    .numbers = JSONSTRICT_NUMBERS_NEAREST,
};

struct client {
    char *base;
    char *token;
    char *ca_file;
    bool https;
    CURL *curl;
};

/* A REST answer as it arrives. */
typedef struct {
    dynbuf_t body; /* at most CLIENT_RESPONSE_MAX_BYTES */
    bool overflow;
} s_answer_t;

client_t *client_new(const char *base_url, const char *token, const char *ca_file) {
    if (!base_url || !*base_url) {
        return NULL;
    }
    client_t *self = mem_calloc(1, sizeof *self);
    size_t n = strlen(base_url);
    while (n > 0 && base_url[n - 1] == '/') {
        n--;
    }
    self->base = mem_strndup(base_url, n);
    self->token = token && *token ? mem_strdup(token) : NULL;
    self->ca_file = ca_file && *ca_file ? mem_strdup(ca_file) : NULL;
    self->https = strncasecmp(self->base, "https://", 8) == 0;
    self->curl = curl_easy_init();
    if (!self->curl) {
        client_destroy(&self);
    }
    return self;
}

void client_destroy(client_t **self_p) {
    if (!self_p || !*self_p) {
        return;
    }
    client_t *self = *self_p;
    if (self->curl) {
        curl_easy_cleanup(self->curl);
    }
    free(self->base);
    free(self->token);
    free(self->ca_file);
    free(self);
    *self_p = NULL;
}

const char *client_base(const client_t *self) {
    return self->base;
}

const char *client_token(const client_t *self) {
    return self->token;
}

int client_headers(const client_t *self, const char *name, const char *value,
                   struct curl_slist **list) {
    int rc = header_append(list, name, value);
    if (rc == 0 && self->token) {
        char *bearer = mem_printf("Bearer %s", self->token);
        rc = header_append(list, "Authorization", bearer);
        free(bearer);
        if (rc != 0) {
            fprintf(stderr,
                    "chatfleet: the token (--token or CHATFLEET_TOKEN) is not a valid "
                    "header value (a control character, or over %d bytes); the request "
                    "was not sent\n",
                    HEADER_LINE_MAX_BYTES);
        }
    } else if (rc != 0) {
        fprintf(stderr, "chatfleet: the %s header holds a control character; not sent\n", name);
    }
    if (rc != 0) {
        curl_slist_free_all(*list);
        *list = NULL;
    }
    return rc;
}

void client_transport(const client_t *self, CURL *c) {
    /* An https URL is only ever spoken over TLS; a redirect is never followed. */
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, self->https ? "https" : "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
    curl_easy_setopt(c, CURLOPT_SSLVERSION, (long)CURL_SSLVERSION_TLSv1_2);
    if (self->ca_file) {
        curl_easy_setopt(c, CURLOPT_CAINFO, self->ca_file);
    }
}

void client_describe(const client_t *self, CURLcode rc, const char *errbuf, char *out,
                     size_t size) {
    const char *detail = errbuf && *errbuf ? errbuf : curl_easy_strerror(rc);
    bool trust = rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CACERT_BADFILE ||
                 rc == CURLE_SSL_ISSUER_ERROR;
    if (trust) {
        snprintf(out, size,
                 "TLS: the gateway's certificate is not trusted: %s (trusted CAs: %s; set "
                 "--cacert or CHATFLEET_CA_FILE to the CA that signed it)",
                 detail, self->ca_file ? self->ca_file : "the system store");
    } else if (rc == CURLE_SSL_CONNECT_ERROR) {
        snprintf(out, size, "TLS handshake failed: %s (is the gateway serving https?)", detail);
    } else if (rc == CURLE_UNSUPPORTED_PROTOCOL) {
        snprintf(out, size, "%s (only http and https URLs are spoken)", detail);
    } else {
        snprintf(out, size, "%s", detail);
    }
}

static size_t s_collect(char *ptr, size_t size, size_t nmemb, void *ud) {
    s_answer_t *b = ud;
    size_t n = size * nmemb;
    if (dynbuf_add(&b->body, ptr, n) != 0) {
        b->overflow = true;
        return 0; /* aborts the transfer */
    }
    return n;
}

/* What a request sends as its body: nothing, text, or a file read as it is sent. */
typedef struct {
    const char *text; /* NULL: no text body */
    FILE *file;       /* NULL: no file body */
    int64_t size;     /* the file's bytes */
    bool failed;      /* the file could not be read */
} s_body_t;

static size_t s_read_file(char *buf, size_t size, size_t nitems, void *ud) {
    s_body_t *b = ud;
    size_t n = fread(buf, 1, size * nitems, b->file);
    if (n == 0 && ferror(b->file)) {
        b->failed = true;
        return CURL_READFUNC_ABORT;
    }
    return n;
}

/* One request of h's headers (freed here) and body; the status, the answer in *out. */
static long s_perform(client_t *self, const char *method, const char *path, struct curl_slist *h,
                      s_body_t *body, json_t **out) {
    char *url = mem_printf("%s%s", self->base, path);
    s_answer_t b = {.overflow = false};
    dynbuf_init(&b.body, CLIENT_RESPONSE_MAX_BYTES);
    CURL *c = self->curl;
    char errbuf[CURL_ERROR_SIZE] = "";
    curl_easy_reset(c);
    client_transport(self, c);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, s_collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    if (body->file) {
        /* A file's time grows with its size: only a stalled transfer is given up on. */
        curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)CLIENT_TIMEOUT_MS);
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, (long)(CLIENT_TIMEOUT_MS / 1000));
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body->size);
        curl_easy_setopt(c, CURLOPT_READFUNCTION, s_read_file);
        curl_easy_setopt(c, CURLOPT_READDATA, body);
    } else {
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)CLIENT_TIMEOUT_MS);
        if (body->text) {
            curl_easy_setopt(c, CURLOPT_POSTFIELDS, body->text);
        }
    }
    CURLcode rc = curl_easy_perform(c);
    long status = -1;
    if (rc != CURLE_OK) {
        char why[CURL_ERROR_SIZE + 256];
        client_describe(self, rc, errbuf, why, sizeof why);
        fprintf(stderr, "chatfleet: %s %s: %s\n", method, url,
                b.overflow     ? "answer too large"
                : body->failed ? "the file could not be read"
                               : why);
    } else {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        jsonstrict_error_t err;
        if (b.body.len > 0 &&
            jsonstrict_parse(dynbuf_str(&b.body), b.body.len, &client_limits, out, &err) != 0) {
            fprintf(stderr, "chatfleet: %s %s: HTTP %ld with an unreadable answer: %s at %s\n",
                    method, url, status, err.message, err.path[0] ? err.path : "/");
            status = -1;
        }
    }
    curl_slist_free_all(h);
    dynbuf_free(&b.body);
    free(url);
    return status;
}

long client_call(client_t *self, const char *method, const char *path, const json_t *body,
                 json_t **out) {
    *out = NULL;
    struct curl_slist *h = NULL;
    if (client_headers(self, "Content-Type", "application/json", &h) != 0) {
        return -1;
    }
    char *text = body ? jsonout_dumps(body) : NULL;
    s_body_t b = {.text = text};
    long status = s_perform(self, method, path, h, &b, out);
    free(text);
    return status;
}

long client_post_file(client_t *self, const char *path, const char *content_type,
                      const char *disposition, FILE *file, int64_t size, json_t **out) {
    *out = NULL;
    struct curl_slist *h = NULL;
    if (client_headers(self, "Content-Type", content_type, &h) != 0) {
        return -1;
    }
    if (disposition && header_append(&h, "Content-Disposition", disposition) != 0) {
        fprintf(stderr,
                "chatfleet: the Content-Disposition header is refused (a control "
                "character, or over %d bytes); not sent\n",
                HEADER_LINE_MAX_BYTES);
        curl_slist_free_all(h);
        return -1;
    }
    s_body_t b = {.file = file, .size = size};
    return s_perform(self, "POST", path, h, &b, out);
}

void client_print_error(const char *what, long status, const json_t *envelope) {
    const char *msg = json_string_value(json_object_get(envelope, "message"));
    const char *detail = json_string_value(json_object_get(envelope, "detail"));
    fprintf(stderr, "chatfleet: %s: HTTP %ld: %s%s%s\n", what, status, msg ? msg : "error",
            detail ? " " : "", detail ? detail : "");
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(envelope, "validations"), i, v) {
        const char *f = json_string_value(json_object_get(v, "field"));
        const char *d = json_string_value(json_object_get(v, "detail"));
        fprintf(stderr, "  %s: %s\n", f ? f : "?", d ? d : "?");
    }
}
