/*
 * auth: the broker's side of CURVE on the bus (ARCHITECTURE.md §9 "Trust", broker/README.md
 * "Security").
 *
 * It holds the broker's key pair, a map of the admitted keys to their role (the "role"
 * metadata of each certificate: "gateway" or "worker"), re-read by auth_reload, and the ZAP
 * handler's socket: the broker's loop answers each handshake from that map with
 * auth_zap_handle (admitted when the client's public key is in it), so a handshake needs no
 * file and no descriptor, and a refusal is known with the peer's address and key. The
 * broker checks every message's sender against the same map, so a key removed from the
 * directory is refused on its next message, not only at its next handshake.
 *
 * Only one auth may exist per process: the ZAP endpoint serves the whole CZMQ context.
 */
#ifndef CHATFLEET_AUTH_H
#define CHATFLEET_AUTH_H

#include <czmq.h>

#include "curve.h"
#include <stdbool.h>
#include <stddef.h>

#define AUTH_ZAP_DOMAIN     "chatfleet"
#define AUTH_ENV_SERVER_KEY "CHATFLEET_CURVE_SERVER_KEY"
#define AUTH_ENV_ALLOW_DIR  "CHATFLEET_CURVE_ALLOW_DIR"
#define AUTH_ZAP_ENDPOINT   "inproc://zeromq.zap.01" /* libzmq's fixed ZAP address */

typedef struct auth auth_t;

/* Reads the broker's secret certificate and the allow directory and binds the ZAP socket
 * (before any CURVE socket is bound, so no handshake goes unchecked). NULL with
 * a reason in err (naming the file or directory) when either is unreadable or invalid. */
auth_t *auth_new(const char *server_key_path, const char *allow_dir, char *err, size_t errlen);
void auth_destroy(auth_t **self_p);

/* Makes the (unbound) socket a CURVE server with the broker's key, in AUTH_ZAP_DOMAIN. */
int auth_apply(auth_t *self, zsock_t *sock);

/* The role of key (z85 text) if it is in the allow directory as last read, else NULL. */
const char *auth_role(auth_t *self, const char *key);

/* The ZAP socket (a REP), for the loop that calls auth_zap_handle to poll. Owned by self;
 * used by one thread at a time (the broker's actor while it runs). */
zsock_t *auth_zap(auth_t *self);

/* One ZAP decision, for the caller to log. */
typedef struct {
    bool admitted;
    char address[64]; /* the peer's IP address, as libzmq gives it */
    char key[CURVE_KEY_TXT_LEN + 1];
    const char *reason; /* when refused: "unknown_key", "not_curve", "bad_request" */
} auth_zap_t;

/* Answers one waiting ZAP request: 200 with User-Id = the client's key (z85) when the key is
 * in the map as last read, 400 otherwise. Returns 1 and fills *out, or 0 when none waits. */
int auth_zap_handle(auth_t *self, auth_zap_t *out);

/* Re-reads the allow directory when it changed since the last read, or always with force
 * (SIGHUP). The directory stays open and only new or changed files are opened, so a removal
 * takes effect even with every descriptor in use. Returns AUTH_RELOAD_REVOKED when it was
 * re-read and a key it held before is gone, 1 when it was re-read with no key gone, 0 when
 * unchanged, -1 with a reason in err when it cannot be read now (the last map is kept, and
 * the next call tries again, forced if this one was). */
#define AUTH_RELOAD_REVOKED 2
int auth_reload(auth_t *self, bool force, char *err, size_t errlen);

size_t auth_count(auth_t *self);             /* admitted keys */
const char *auth_public(const auth_t *self); /* the broker's public key (z85) */
const char *auth_allow_dir(const auth_t *self);

#endif
