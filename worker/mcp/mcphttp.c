/* mcphttp: the MCP Streamable HTTP transport; see mcphttp.h. The transport is the MCP
 * specification's "Transports: Streamable HTTP" (2025-06-18). */
#include "mcphttp.h"
#include "dynbuf.h"
#include "header.h"
#include "mem.h"

#include <curl/curl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define S_SESSION_MAX  256 /* bytes of a session id, NUL included; a longer one is refused */
#define S_PROTOCOL_MAX 32  /* bytes of a protocol version, NUL included; a longer one is refused */
#define S_FAILED_MAX   160 /* bytes of a pending failure's reason */

/* One POST and what its answer has brought so far. */
typedef struct s_xfer {
    CURL *easy;
    struct curl_slist *hdrs;
    char *body;
    uint64_t id;
    bool sse;         /* the answer is an event stream */
    dynbuf_t answer;  /* unparsed answer bytes, at most MCPHTTP_MESSAGE_MAX_BYTES */
    bool too_large;   /* the answer went over the cap */
    bool bad_session; /* the server's Mcp-Session-Id is not one we may send back */
    char session[S_SESSION_MAX];
    struct s_xfer *next;
} s_xfer_t;

/* A complete message waiting for mcphttp_perform to deliver it. */
typedef struct s_msg {
    char *text;
    size_t len;
    struct s_msg *next;
} s_msg_t;

struct mcphttp {
    CURLM *multi;
    char *url;
    char **headers;
    char session[S_SESSION_MAX];
    char protocol[S_PROTOCOL_MAX];
    /* A request that could not be built (header.h refused a value), or a protocol version
     * the server gave that cannot be sent back: mcphttp_perform reports it as a failed
     * transfer, and nothing is posted until the reset that follows. */
    char failed[S_FAILED_MAX];
    s_xfer_t *xfers;
    s_msg_t *msgs;
    s_msg_t **msgs_tail;
    uint64_t resets; /* mcphttp_reset calls, so that a delivery loop sees one happen */
};

static void s_queue(mcphttp_t *self, const char *text, size_t len) {
    if (len == 0) {
        return;
    }
    s_msg_t *m = mem_calloc(1, sizeof *m);
    m->text = mem_strndup(text, len);
    m->len = len;
    *self->msgs_tail = m;
    self->msgs_tail = &m->next;
}

/* Queues one SSE event of elen bytes: its data lines, joined by newlines, are one message. */
static void s_event(mcphttp_t *self, const char *p, size_t elen) {
    char *data = mem_alloc(elen + 1);
    size_t dlen = 0;
    const char *stop = p + elen;
    while (p < stop) {
        const char *nl = memchr(p, '\n', (size_t)(stop - p));
        const char *le = nl ? nl : stop;
        size_t n = (size_t)(le - p);
        if (n > 0 && p[n - 1] == '\r') {
            n--;
        }
        if (n >= 5 && !memcmp(p, "data:", 5)) {
            size_t off = n > 5 && p[5] == ' ' ? 6 : 5;
            if (dlen > 0) {
                data[dlen++] = '\n';
            }
            memcpy(data + dlen, p + off, n - off);
            dlen += n - off;
        }
        p = nl ? nl + 1 : stop;
    }
    s_queue(self, data, dlen);
    free(data);
}

/* Takes the complete events out of an SSE answer (event names and ids are not needed: every
 * event here is a message); at the end of the answer, what is left is the last event. */
static void s_sse(mcphttp_t *self, s_xfer_t *x, bool final) {
    const char *buf = dynbuf_str(&x->answer);
    size_t len = x->answer.len;
    size_t start = 0;
    for (;;) {
        const char *end = NULL;
        size_t skip = 0;
        for (size_t i = start; i + 1 < len; i++) {
            if (buf[i] == '\n' && buf[i + 1] == '\n') {
                end = buf + i, skip = 2;
                break;
            }
            if (i + 3 < len && !memcmp(buf + i, "\r\n\r\n", 4)) {
                end = buf + i, skip = 4;
                break;
            }
        }
        if (!end && !(final && start < len)) {
            break;
        }
        size_t elen = end ? (size_t)(end - (buf + start)) : len - start;
        s_event(self, buf + start, elen);
        start += elen + (end ? skip : 0);
        if (!end) {
            break;
        }
    }
    dynbuf_consume(&x->answer, start);
}

static size_t s_on_body(char *ptr, size_t size, size_t n, void *arg) {
    s_xfer_t *x = arg;
    size_t bytes = size * n;
    if (dynbuf_add(&x->answer, ptr, bytes) != 0) {
        x->too_large = true;
        return 0; /* ends the transfer with an error */
    }
    return bytes;
}

static size_t s_on_header(char *ptr, size_t size, size_t n, void *arg) {
    s_xfer_t *x = arg;
    size_t bytes = size * n;
    size_t len = bytes;
    while (len > 0 && (ptr[len - 1] == '\r' || ptr[len - 1] == '\n' || ptr[len - 1] == ' ')) {
        len--;
    }
    static const char sid[] = "mcp-session-id:";
    static const char ct[] = "content-type:";
    if (len > sizeof sid - 1 && !strncasecmp(ptr, sid, sizeof sid - 1)) {
        size_t off = sizeof sid - 1;
        while (off < len && ptr[off] == ' ') {
            off++;
        }
        /* The server's session id goes back in every later request's header: MCP allows
         * visible ASCII only (0x21-0x7e, "Session Management"), so a control character (a
         * hostile server's header injection) or an id too long to keep is refused here and
         * the transfer fails (s_done), never sent. */
        size_t v = len - off;
        x->bad_session = v == 0 || v >= S_SESSION_MAX;
        for (size_t i = off; i < len && !x->bad_session; i++) {
            x->bad_session = (unsigned char)ptr[i] < 0x21 || (unsigned char)ptr[i] > 0x7e;
        }
        if (!x->bad_session) {
            memcpy(x->session, ptr + off, v);
            x->session[v] = 0;
        } else {
            x->session[0] = 0;
        }
    } else if (len > sizeof ct - 1 && !strncasecmp(ptr, ct, sizeof ct - 1)) {
        char value[64] = "";
        size_t off = sizeof ct - 1;
        while (off < len && ptr[off] == ' ') {
            off++;
        }
        snprintf(value, sizeof value, "%.*s", (int)(len - off), ptr + off);
        x->sse = !strncasecmp(value, "text/event-stream", 17);
    }
    return bytes;
}

static void s_xfer_free(mcphttp_t *self, s_xfer_t *x) {
    curl_multi_remove_handle(self->multi, x->easy);
    curl_easy_cleanup(x->easy);
    curl_slist_free_all(x->hdrs);
    free(x->body);
    dynbuf_free(&x->answer);
    free(x);
}

mcphttp_t *mcphttp_new(const char *url, const char *const *headers) {
    mcphttp_t *self = mem_calloc(1, sizeof *self);
    self->multi = curl_multi_init();
    ASSERT(self->multi);
    self->url = mem_strdup(url);
    size_t n = 0;
    while (headers && headers[n]) {
        n++;
    }
    self->headers = mem_calloc(n + 1, sizeof *self->headers);
    for (size_t i = 0; i < n; i++) {
        self->headers[i] = mem_strdup(headers[i]);
    }
    self->msgs_tail = &self->msgs;
    return self;
}

void mcphttp_reset(mcphttp_t *self) {
    while (self->xfers) {
        s_xfer_t *x = self->xfers;
        self->xfers = x->next;
        s_xfer_free(self, x);
    }
    while (self->msgs) {
        s_msg_t *m = self->msgs;
        self->msgs = m->next;
        free(m->text);
        free(m);
    }
    self->msgs_tail = &self->msgs;
    self->session[0] = 0;
    self->protocol[0] = 0;
    self->failed[0] = 0;
    self->resets++;
}

void mcphttp_destroy(mcphttp_t **self_p) {
    mcphttp_t *self = self_p ? *self_p : NULL;
    if (!self) {
        return;
    }
    mcphttp_reset(self);
    curl_multi_cleanup(self->multi);
    for (size_t i = 0; self->headers[i]; i++) {
        free(self->headers[i]);
    }
    free(self->headers);
    free(self->url);
    free(self);
    *self_p = NULL;
}

/* Records the first failure that mcphttp_perform is to report. */
static void s_fail(mcphttp_t *self, const char *why) {
    if (!self->failed[0]) {
        snprintf(self->failed, sizeof self->failed, "%s", why);
    }
}

void mcphttp_set_protocol(mcphttp_t *self, const char *version) {
    /* The version comes from the server's answer and goes into every later request's
     * header: one we could not send back intact is the server's failure. */
    if (version && (strlen(version) >= sizeof self->protocol || !header_text_ok(version))) {
        self->protocol[0] = 0;
        s_fail(self, "the server's protocolVersion is not a valid header value");
        return;
    }
    snprintf(self->protocol, sizeof self->protocol, "%s", version ? version : "");
}

/* The headers of one POST, each through header.h. Returns 0, or -1 with the failure recorded
 * (a configured header's value is not quoted: it may be a credential). */
static int s_headers(mcphttp_t *self, struct curl_slist **list) {
    if (header_append(list, "Content-Type", "application/json") != 0 ||
        header_append(list, "Accept", "application/json, text/event-stream") != 0) {
        s_fail(self, "cannot build the request headers");
        return -1;
    }
    if (self->session[0] && header_append(list, "Mcp-Session-Id", self->session) != 0) {
        s_fail(self, "the server's Mcp-Session-Id is not a valid header value");
        return -1;
    }
    if (self->protocol[0] && header_append(list, "MCP-Protocol-Version", self->protocol) != 0) {
        s_fail(self, "the server's protocolVersion is not a valid header value");
        return -1;
    }
    for (size_t i = 0; self->headers[i]; i++) {
        if (header_append_line(list, self->headers[i]) != 0) {
            char why[S_FAILED_MAX];
            snprintf(why, sizeof why,
                     "configured header %zu is refused (a control character or no \"Name:\")", i);
            s_fail(self, why);
            return -1;
        }
    }
    return 0;
}

void mcphttp_post(mcphttp_t *self, const char *text, uint64_t id) {
    if (self->failed[0]) {
        return; /* the session is failing: the reset that follows drops everything */
    }
    struct curl_slist *hdrs = NULL;
    if (s_headers(self, &hdrs) != 0) {
        curl_slist_free_all(hdrs);
        return; /* never sent: mcphttp_perform reports why */
    }
    s_xfer_t *x = mem_calloc(1, sizeof *x);
    x->id = id;
    dynbuf_init(&x->answer, MCPHTTP_MESSAGE_MAX_BYTES);
    x->body = mem_strdup(text);
    x->easy = curl_easy_init();
    ASSERT(x->easy);
    x->hdrs = hdrs;
    curl_easy_setopt(x->easy, CURLOPT_URL, self->url);
    curl_easy_setopt(x->easy, CURLOPT_HTTPHEADER, x->hdrs);
    curl_easy_setopt(x->easy, CURLOPT_POSTFIELDS, x->body);
    curl_easy_setopt(x->easy, CURLOPT_WRITEFUNCTION, s_on_body);
    curl_easy_setopt(x->easy, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(x->easy, CURLOPT_HEADERFUNCTION, s_on_header);
    curl_easy_setopt(x->easy, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(x->easy, CURLOPT_CONNECTTIMEOUT_MS, (long)MCPHTTP_CONNECT_MS);
    curl_easy_setopt(x->easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(x->easy, CURLOPT_PRIVATE, x);
    curl_multi_add_handle(self->multi, x->easy);
    x->next = self->xfers;
    self->xfers = x;
}

void mcphttp_abort(mcphttp_t *self, uint64_t id) {
    for (s_xfer_t **pp = &self->xfers; *pp; pp = &(*pp)->next) {
        if ((*pp)->id == id) {
            s_xfer_t *x = *pp;
            *pp = x->next;
            s_xfer_free(self, x);
            return;
        }
    }
}

void mcphttp_wait(mcphttp_t *self, int wake_fd, int timeout_ms) {
    if (self->failed[0]) {
        return; /* a failure waits to be reported: no I/O to wait for */
    }
    struct curl_waitfd extra = {.fd = wake_fd, .events = CURL_WAIT_POLLIN};
    int numfds = 0;
    (void)curl_multi_poll(self->multi, &extra, 1, timeout_ms, &numfds);
}

/* A finished transfer: its last messages, and whether it failed. */
static int s_done(mcphttp_t *self, s_xfer_t *x, CURLcode rc, char *why, size_t size) {
    long status = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
    if (rc != CURLE_OK || status >= 400) {
        if (x->too_large) {
            snprintf(why, size, "an answer over %d bytes", MCPHTTP_MESSAGE_MAX_BYTES);
        } else if (status == 404 && self->session[0]) {
            snprintf(why, size, "the session expired (HTTP 404)");
        } else if (rc != CURLE_OK) {
            snprintf(why, size, "HTTP transfer failed: %s", curl_easy_strerror(rc));
        } else {
            snprintf(why, size, "HTTP %ld from the server", status);
        }
        return -1;
    }
    if (x->bad_session) {
        snprintf(why, size, "the server's Mcp-Session-Id is not visible ASCII of at most %d bytes",
                 S_SESSION_MAX - 1);
        return -1;
    }
    if (x->session[0]) {
        snprintf(self->session, sizeof self->session, "%s", x->session);
    }
    if (x->sse) {
        s_sse(self, x, true);
    } else {
        s_queue(self, dynbuf_str(&x->answer), x->answer.len);
    }
    return 0;
}

int mcphttp_perform(mcphttp_t *self, mcphttp_msg_fn *on_msg, void *arg, char *why,
                    size_t why_size) {
    if (self->failed[0]) {
        snprintf(why, why_size, "%s", self->failed);
        self->failed[0] = 0;
        return -1;
    }
    int running = 0;
    (void)curl_multi_perform(self->multi, &running);
    for (s_xfer_t *x = self->xfers; x; x = x->next) {
        if (x->sse) {
            s_sse(self, x, false); /* events that are complete, while the stream goes on */
        }
    }
    int rc = 0;
    CURLMsg *m;
    int left = 0;
    while (rc == 0 && (m = curl_multi_info_read(self->multi, &left))) {
        if (m->msg != CURLMSG_DONE) {
            continue;
        }
        s_xfer_t *x = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
        CURLcode code = m->data.result;
        rc = s_done(self, x, code, why, why_size);
        for (s_xfer_t **pp = &self->xfers; *pp; pp = &(*pp)->next) {
            if (*pp == x) {
                *pp = x->next;
                break;
            }
        }
        s_xfer_free(self, x);
    }
    /* Delivered after curl is left: on_msg may post, abort or reset. A reset drops the rest. */
    uint64_t resets = self->resets;
    s_msg_t *list = self->msgs;
    self->msgs = NULL;
    self->msgs_tail = &self->msgs;
    while (list) {
        s_msg_t *next = list->next;
        if (rc == 0 && resets == self->resets) {
            on_msg(arg, list->text, list->len);
        }
        free(list->text);
        free(list);
        list = next;
    }
    return rc;
}
