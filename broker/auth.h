/*
 * auth: the broker's side of CURVE on the bus (ARCHITECTURE.md §9 "Trust", broker/README.md
 * "Security").
 *
 * It holds the broker's key pair, runs CZMQ's zauth (the ZAP handler, which admits a
 * connection only when the client's public key has a certificate in the allow directory;
 * zauth re-reads the directory when it changes, at the next handshake), and keeps its own
 * map of the admitted keys to their role (the "role" metadata of each certificate:
 * "gateway" or "worker"), re-read by auth_reload when the directory changes. The broker
 * checks every message's sender against that map, so a key removed from the directory is
 * refused on its next message, not only at its next handshake.
 *
 * Only one auth may exist per process: zauth serves the whole CZMQ context.
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

typedef struct auth auth_t;

/* Reads the broker's secret certificate and the allow directory and starts zauth. NULL with
 * a reason in err (naming the file or directory) when either is unreadable or invalid. */
auth_t *auth_new(const char *server_key_path, const char *allow_dir, char *err, size_t errlen);
void auth_destroy(auth_t **self_p);

/* Makes the (unbound) socket a CURVE server with the broker's key, in AUTH_ZAP_DOMAIN. */
int auth_apply(auth_t *self, zsock_t *sock);

/* The role of key (z85 text) if it is in the allow directory as last read, else NULL. */
const char *auth_role(auth_t *self, const char *key);

/* Re-reads the allow directory when it changed since the last read. Returns
 * AUTH_RELOAD_REVOKED when it was re-read and a key it held before is gone, 1 when it was
 * re-read with no key gone, 0 when unchanged, -1 when it cannot be read (the last map is
 * kept). */
#define AUTH_RELOAD_REVOKED 2
int auth_reload(auth_t *self);

size_t auth_count(auth_t *self);             /* admitted keys */
const char *auth_public(const auth_t *self); /* the broker's public key (z85) */
const char *auth_allow_dir(const auth_t *self);

#endif
