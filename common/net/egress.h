/*
 * egress: where an outgoing request the cluster makes on a user's behalf (an A2A push
 * delivery) may go. By default only https to a public address: never loopback, private,
 * CGNAT, link-local (cloud metadata at 169.254.169.254 and fd00:ec2::254 included), multicast,
 * unspecified, broadcast, reserved, documentation or translation ranges; an IPv4-mapped IPv6
 * address is judged as the IPv4 address inside it. A deployment's allow-list
 * (CHATFLEET_PUSH_ALLOW_CIDRS: comma-separated CIDRs) admits targets inside it, over http too.
 * A URL is checked where it is accepted (its host resolved) and the address is checked again
 * right before each connect (egress_curl_apply), so that a name that resolves elsewhere later
 * (DNS rebinding) gains nothing. See deploy/OPERATIONS.md, "Push notifications".
 */
#ifndef CHATFLEET_EGRESS_H
#define CHATFLEET_EGRESS_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#define EGRESS_CIDRS_MAX      64          /* allow-list entries */
#define EGRESS_BODY_MAX_BYTES (64 * 1024) /* a response body read past this is cut off */
#define EGRESS_WHY_MAX        256         /* a refusal's explanation, NUL included */

typedef struct egress egress_t;

/* The policy with the allow-list cidrs ("10.1.0.0/16, fd12::/64"; NULL or empty: none).
 * Returns NULL with why (why_size bytes) naming the entry that is not a CIDR (no "/prefix",
 * a prefix out of range, host bits set, more than EGRESS_CIDRS_MAX entries). The caller owns
 * the policy; it is read-only after this, so threads may share it. */
egress_t *egress_new(const char *cidrs, char *why, size_t why_size);
void egress_destroy(egress_t **self_p);

/* The allow-list as given (for the effective-config line), or "" without one. */
const char *egress_cidrs(const egress_t *self);

/* Whether a connect to addr (AF_INET or AF_INET6) is allowed: inside the allow-list, or
 * (unless plain, an http request) a public address. self may be NULL (no allow-list). When
 * refused, why (when non-NULL) says which range the address is in. */
bool egress_addr_ok(const egress_t *self, const struct sockaddr *addr, bool plain, char *why,
                    size_t why_size);

/* Whether url may be a target: an http(s) URL without user info whose host (an IP literal, or
 * a name every address of which getaddrinfo returns is checked) passes egress_addr_ok. This
 * resolves names, so it may block for the resolver's timeout. Returns 0; or -1 with why. */
int egress_url_check(const egress_t *self, const char *url, char *why, size_t why_size);

/* One request's state for egress_curl_apply; the caller keeps it alive until the transfer ends
 * and reads refused and cut afterwards. */
typedef struct {
    const egress_t *policy;
    bool plain;        /* the URL is http: only the allow-list admits it */
    bool refused;      /* a connect was refused by the policy */
    bool cut;          /* the response body passed EGRESS_BODY_MAX_BYTES and was cut off */
    size_t body_bytes; /* response body bytes seen */
    char why[EGRESS_WHY_MAX];
} egress_call_t;

/* Sets h up for url under self: the URL, http and https only (redirects too), no proxy from
 * the environment, no redirect followed (a 3xx is the answer), every connect checked with
 * egress_addr_ok on the address actually connected to (CURLOPT_OPENSOCKETFUNCTION), the
 * response body discarded and cut off past EGRESS_BODY_MAX_BYTES, and timeout_ms for the whole
 * request. Returns 0; or -1 when the URL or an option is refused by curl. */
int egress_curl_apply(const egress_t *self, CURL *h, const char *url, long timeout_ms,
                      egress_call_t *call);

#endif
