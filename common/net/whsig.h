/*
 * whsig: Standard Webhooks signatures (https://www.standardwebhooks.com, "Signature scheme")
 * for outgoing deliveries. A secret is "whsec_" and the base64 of 24 to 64 random bytes (the
 * key); a delivery carries webhook-id, webhook-timestamp (unix seconds) and webhook-signature
 * "v1,<base64 of HMAC-SHA256(key, "<id>.<timestamp>.<body>")>", which a receiver recomputes
 * with any Standard Webhooks library (deploy/OPERATIONS.md, "Push notifications").
 */
#ifndef CHATFLEET_WHSIG_H
#define CHATFLEET_WHSIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WHSIG_KEY_BYTES     24  /* random bytes in a new secret */
#define WHSIG_KEY_MAX_BYTES 64  /* the longest key a secret may decode to */
#define WHSIG_SECRET_MAX    100 /* "whsec_" + base64 of WHSIG_KEY_MAX_BYTES, NUL included */
#define WHSIG_SIGNATURE_MAX 48  /* "v1," + 44 base64 characters, NUL included */
#define WHSIG_SECRET_PREFIX "whsec_"

/* A new secret into out ("whsec_" + base64 of WHSIG_KEY_BYTES bytes from the CSPRNG). Returns
 * 0, or -1 when the random generator failed (out is then empty). */
int whsig_secret_new(char out[WHSIG_SECRET_MAX]);

/* The webhook-signature value of one delivery into out: "v1,<base64>". Returns 0, or -1 when
 * secret is not "whsec_" and base64 of 24..WHSIG_KEY_MAX_BYTES bytes, or id holds a '.' or
 * is over 256 bytes (out is then empty). */
int whsig_sign(const char *secret, const char *id, int64_t timestamp, const char *body,
               size_t body_len, char out[WHSIG_SIGNATURE_MAX]);

/* Whether header (a webhook-signature value: space-separated "v1,<base64>" entries) holds the
 * signature of this delivery under secret; compared in constant time. */
bool whsig_verify(const char *secret, const char *id, int64_t timestamp, const char *body,
                  size_t body_len, const char *header);

#endif
