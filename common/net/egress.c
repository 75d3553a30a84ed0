/* egress: the outgoing address policy; see egress.h. */
#include "egress.h"

#include "mem.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* One CIDR: family AF_INET (addr[0..3]) or AF_INET6 (addr[0..15]) and its prefix length. */
typedef struct {
    int family;
    unsigned char addr[16];
    int prefix;
} s_cidr_t;

struct egress {
    char *text;
    int n;
    s_cidr_t cidrs[EGRESS_CIDRS_MAX];
};

/* The ranges that are never a public target, most specific first (the first match names the
 * refusal). IPv6 outside 2000::/3 is refused as a whole below. */
static const struct {
    const char *cidr;
    const char *what;
} s_refused[] = {
    {"255.255.255.255/32", "broadcast"},
    {"0.0.0.0/8", "unspecified (0.0.0.0/8)"},
    {"10.0.0.0/8", "private (10/8)"},
    {"100.64.0.0/10", "shared CGNAT (100.64/10)"},
    {"127.0.0.0/8", "loopback"},
    {"169.254.0.0/16", "link-local (cloud metadata included)"},
    {"172.16.0.0/12", "private (172.16/12)"},
    {"192.0.0.0/24", "IETF protocol assignments"},
    {"192.0.2.0/24", "documentation"},
    {"192.88.99.0/24", "6to4 relay"},
    {"192.168.0.0/16", "private (192.168/16)"},
    {"198.18.0.0/15", "benchmarking"},
    {"198.51.100.0/24", "documentation"},
    {"203.0.113.0/24", "documentation"},
    {"224.0.0.0/4", "multicast"},
    {"240.0.0.0/4", "reserved (240/4)"},
    {"::/128", "unspecified (::)"},
    {"::1/128", "loopback (::1)"},
    {"::/96", "IPv4-compatible"},
    {"64:ff9b::/96", "NAT64 (64:ff9b::/96)"},
    {"64:ff9b:1::/48", "local NAT64"},
    {"100::/64", "discard-only"},
    {"2001:db8::/32", "documentation (2001:db8::/32)"},
    {"2001::/23", "IETF protocol assignments (Teredo included)"},
    {"2002::/16", "6to4"},
    {"3fff::/20", "documentation (3fff::/20)"},
    {"fc00::/7", "unique local (fc00::/7, cloud metadata included)"},
    {"fe80::/10", "link-local (fe80::/10)"},
    {"fec0::/10", "site-local"},
    {"ff00::/8", "multicast (ff00::/8)"},
};

static void __attribute__((format(printf, 3, 4)))
s_why(char *why, size_t size, const char *fmt, ...) {
    if (why && size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, size, fmt, ap);
        va_end(ap);
    }
}

/* Parses "addr/prefix" (len bytes of text, no spaces) into *out. Returns 0, or -1 with why. */
static int s_cidr_parse(const char *text, size_t len, s_cidr_t *out, char *why, size_t size) {
    char buf[INET6_ADDRSTRLEN + 8];
    if (len == 0 || len >= sizeof buf) {
        snprintf(why, size, "\"%.*s\" is not a CIDR", (int)(len < 64 ? len : 64), text);
        return -1;
    }
    memcpy(buf, text, len);
    buf[len] = '\0';
    char *slash = strchr(buf, '/');
    if (!slash) {
        snprintf(why, size, "\"%s\" has no /prefix (write %s/32 or %s/128 for one address)", buf,
                 buf, buf);
        return -1;
    }
    *slash = '\0';
    memset(out, 0, sizeof *out);
    out->family = strchr(buf, ':') ? AF_INET6 : AF_INET;
    int max = out->family == AF_INET ? 32 : 128;
    char *end = NULL;
    errno = 0;
    long prefix = strtol(slash + 1, &end, 10);
    if (inet_pton(out->family, buf, out->addr) != 1 || slash[1] == '\0' || *end || errno ||
        prefix < 0 || prefix > max || slash[1] == '+' || slash[1] == '-') {
        *slash = '/';
        snprintf(why, size, "\"%s\" is not a CIDR (an IPv4 or IPv6 address, /, a prefix 0-%d)", buf,
                 max);
        return -1;
    }
    out->prefix = (int)prefix;
    int bytes = max / 8;
    for (int i = 0; i < bytes; i++) {
        int keep = out->prefix - 8 * i;
        unsigned char mask = keep >= 8 ? 0xff : keep <= 0 ? 0 : (unsigned char)(0xff << (8 - keep));
        if (out->addr[i] & (unsigned char)~mask) {
            *slash = '/';
            snprintf(why, size, "\"%s\" has bits set past its /%ld prefix", buf, prefix);
            return -1;
        }
    }
    return 0;
}

/* Whether the address (family, bytes) lies in c. */
static bool s_in(const s_cidr_t *c, int family, const unsigned char *addr) {
    if (c->family != family) {
        return false;
    }
    int full = c->prefix / 8;
    int rest = c->prefix % 8;
    if (memcmp(c->addr, addr, (size_t)full) != 0) {
        return false;
    }
    if (rest == 0) {
        return true;
    }
    unsigned char mask = (unsigned char)(0xff << (8 - rest));
    return (c->addr[full] & mask) == (addr[full] & mask);
}

#define S_REFUSED_COUNT (sizeof s_refused / sizeof s_refused[0])

/* s_refused parsed once, on the first check: every connect is checked against it. */
static s_cidr_t s_refused_cidrs[S_REFUSED_COUNT];
static pthread_once_t s_refused_once = PTHREAD_ONCE_INIT;

static void s_refused_parse(void) {
    for (size_t i = 0; i < S_REFUSED_COUNT; i++) {
        char why[EGRESS_WHY_MAX];
        int rc = s_cidr_parse(s_refused[i].cidr, strlen(s_refused[i].cidr), &s_refused_cidrs[i],
                              why, sizeof why);
        ASSERT(rc == 0); /* the table is ours */
    }
}

egress_t *egress_new(const char *cidrs, char *why, size_t why_size) {
    egress_t *self = mem_calloc(1, sizeof *self);
    self->text = mem_strdup(cidrs ? cidrs : "");
    for (const char *p = self->text; *p;) {
        p += strspn(p, " \t");
        size_t len = strcspn(p, ",");
        size_t trimmed = len;
        while (trimmed > 0 && (p[trimmed - 1] == ' ' || p[trimmed - 1] == '\t')) {
            trimmed--;
        }
        if (trimmed == 0 && p[len] == '\0' && self->n > 0) {
            break; /* a trailing comma */
        }
        if (self->n == EGRESS_CIDRS_MAX) {
            snprintf(why, why_size, "more than %d CIDRs", EGRESS_CIDRS_MAX);
            egress_destroy(&self);
            return NULL;
        }
        if (s_cidr_parse(p, trimmed, &self->cidrs[self->n], why, why_size) != 0) {
            egress_destroy(&self);
            return NULL;
        }
        self->n++;
        p += len + (p[len] == ',' ? 1 : 0);
    }
    return self;
}

void egress_destroy(egress_t **self_p) {
    egress_t *self = *self_p;
    if (!self) {
        return;
    }
    free(self->text);
    free(self);
    *self_p = NULL;
}

const char *egress_cidrs(const egress_t *self) {
    return self ? self->text : "";
}

bool egress_addr_ok(const egress_t *self, const struct sockaddr *addr, bool plain, char *why,
                    size_t why_size) {
    unsigned char bytes[16];
    int family = addr->sa_family;
    if (family == AF_INET) {
        memcpy(bytes, &((const struct sockaddr_in *)(const void *)addr)->sin_addr, 4);
    } else if (family == AF_INET6) {
        memcpy(bytes, &((const struct sockaddr_in6 *)(const void *)addr)->sin6_addr, 16);
        static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (!memcmp(bytes, mapped, sizeof mapped)) {
            /* ::ffff:a.b.c.d is a.b.c.d on the wire: judged as that address. */
            memmove(bytes, bytes + 12, 4);
            family = AF_INET;
        }
    } else {
        s_why(why, why_size, "not an IP address");
        return false;
    }
    char text[INET6_ADDRSTRLEN];
    inet_ntop(family, bytes, text, sizeof text);
    for (int i = 0; self && i < self->n; i++) {
        if (s_in(&self->cidrs[i], family, bytes)) {
            return true;
        }
    }
    if (plain) {
        s_why(why, why_size, "%s is outside the allow-list: a public target needs https", text);
        return false;
    }
    pthread_once(&s_refused_once, s_refused_parse);
    for (size_t i = 0; i < S_REFUSED_COUNT; i++) {
        if (s_in(&s_refused_cidrs[i], family, bytes)) {
            s_why(why, why_size, "%s is %s, not a public address", text, s_refused[i].what);
            return false;
        }
    }
    if (family == AF_INET6 && (bytes[0] & 0xe0) != 0x20) {
        s_why(why, why_size, "%s is outside global unicast (2000::/3)", text);
        return false;
    }
    return true;
}

/* The scheme and host of url (host without IPv6 brackets), newly allocated. 0, or -1 with why
 * (no http(s) URL, user info in it). */
static int s_url_parts(const char *url, char **scheme, char **host, char *why, size_t size) {
    *scheme = NULL;
    *host = NULL;
    CURLU *u = curl_url();
    if (!u) {
        snprintf(why, size, "out of memory");
        return -1;
    }
    char *s = NULL;
    char *h = NULL;
    char *user = NULL;
    int rc = -1;
    if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &s, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &h, 0) != CURLUE_OK || !h[0] ||
        (strcmp(s, "http") && strcmp(s, "https"))) {
        snprintf(why, size, "not an http or https URL with a host");
    } else if (curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK) {
        snprintf(why, size, "a URL may not hold user info (put credentials in authentication)");
    } else {
        size_t n = strlen(h);
        bool bracket = n >= 2 && h[0] == '[' && h[n - 1] == ']';
        *host = bracket ? mem_strndup(h + 1, n - 2) : mem_strdup(h);
        *scheme = mem_strdup(s);
        rc = 0;
    }
    curl_free(s);
    curl_free(h);
    curl_free(user);
    curl_url_cleanup(u);
    return rc;
}

int egress_url_check(const egress_t *self, const char *url, char *why, size_t why_size) {
    char *scheme = NULL;
    char *host = NULL;
    if (!url || s_url_parts(url, &scheme, &host, why, why_size) != 0) {
        return -1;
    }
    bool plain = !strcmp(scheme, "http");
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rc = -1;
    int gai = getaddrinfo(host, NULL, &hints, &res);
    if (gai != 0 || !res) {
        snprintf(why, why_size, "host %s does not resolve (%s)", host,
                 gai ? gai_strerror(gai) : "no address");
    } else {
        rc = 0;
        for (struct addrinfo *a = res; a && rc == 0; a = a->ai_next) {
            if (!egress_addr_ok(self, a->ai_addr, plain, why, why_size)) {
                rc = -1;
            }
        }
    }
    if (res) {
        freeaddrinfo(res);
    }
    free(scheme);
    free(host);
    return rc;
}

/* Right before each connect: the address curl resolved, checked; CURL_SOCKET_BAD refuses. */
static curl_socket_t s_open(void *ctx, curlsocktype purpose, struct curl_sockaddr *a) {
    egress_call_t *call = ctx;
    if (purpose != CURLSOCKTYPE_IPCXN ||
        !egress_addr_ok(call->policy, &a->addr, call->plain, call->why, sizeof call->why)) {
        call->refused = true;
        return CURL_SOCKET_BAD;
    }
    return socket(a->family, a->socktype, a->protocol);
}

/* The response body is not used: counted and cut off past the bound. */
static size_t s_body(char *p, size_t size, size_t n, void *ctx) {
    (void)p;
    egress_call_t *call = ctx;
    call->body_bytes += size * n;
    if (call->body_bytes > EGRESS_BODY_MAX_BYTES) {
        call->cut = true;
        return 0; /* fewer bytes than given: curl ends the transfer (CURLE_WRITE_ERROR) */
    }
    return size * n;
}

int egress_curl_apply(const egress_t *self, CURL *h, const char *url, long timeout_ms,
                      egress_call_t *call) {
    memset(call, 0, sizeof *call);
    call->policy = self;
    char *scheme = NULL;
    char *host = NULL;
    if (s_url_parts(url, &scheme, &host, call->why, sizeof call->why) != 0) {
        return -1;
    }
    call->plain = !strcmp(scheme, "http");
    free(scheme);
    free(host);
    CURLcode rc = curl_easy_setopt(h, CURLOPT_URL, url);
    rc = rc ? rc : curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    rc = rc ? rc : curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    rc = rc ? rc : curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    rc = rc ? rc : curl_easy_setopt(h, CURLOPT_PROXY, ""); /* never a proxy from the env */
    rc = rc ? rc : curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    rc = rc ? rc : curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    rc = rc ? rc : curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
    rc = rc ? rc : curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, s_open);
    rc = rc ? rc : curl_easy_setopt(h, CURLOPT_OPENSOCKETDATA, call);
    rc = rc ? rc : curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, s_body);
    rc = rc ? rc : curl_easy_setopt(h, CURLOPT_WRITEDATA, call);
    if (rc != CURLE_OK) {
        snprintf(call->why, sizeof call->why, "curl refused an option: %s", curl_easy_strerror(rc));
        return -1;
    }
    return 0;
}
