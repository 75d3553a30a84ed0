/*
 * curve: CurveZMQ keys for the bus (ARCHITECTURE.md §9 "Trust", proto/README.md "Security").
 *
 * A client (gateway, worker, test) holds its own certificate, public and secret key, and the
 * broker's public key; curve_apply() makes a socket a CURVE client of the broker with them.
 * Certificates are CZMQ's zcert_save format: NAME.cert (public, with the "role" metadata)
 * and NAME.cert_secret (public and secret, mode 0600).
 *
 * The process-wide default (curve_default) is what bus_publisher_new, bus_subscriber_new,
 * relay_client_new and relay_worker_new use; a process sets it once at start, before it
 * makes any bus socket, from CHATFLEET_CURVE_CERT and CHATFLEET_CURVE_SERVER_PUBLIC
 * (curve_from_env). Without either setting the bus is plain, as it always was.
 */
#ifndef CHATFLEET_CURVE_H
#define CHATFLEET_CURVE_H

#include <stdio.h>
#include <stdbool.h>
#include <stddef.h>

#define CURVE_KEY_TXT_LEN 40 /* z85 text of a 32-byte key */
#define CURVE_ROLE_MAX    16 /* "gateway", "worker", "broker" */
#define CURVE_ENV_CERT    "CHATFLEET_CURVE_CERT"
#define CURVE_ENV_SERVER  "CHATFLEET_CURVE_SERVER_PUBLIC"

/* A key read from a certificate file. secret is "" for a public certificate. */
typedef struct {
    char public_txt[CURVE_KEY_TXT_LEN + 1];
    char secret_txt[CURVE_KEY_TXT_LEN + 1];
    char role[CURVE_ROLE_MAX + 1]; /* the "role" metadata, or "" */
} curve_key_t;

typedef struct curve curve_t;

#define CURVE_CERT_MAX_BYTES 8192 /* a zcert file is a few hundred bytes */

/* Reads a certificate file (one descriptor, once). want_secret: the file must hold a secret
 * key that matches its public key. Returns 0, or -1 with a reason in err (which names the
 * file). */
int curve_key_read(const char *path, bool want_secret, curve_key_t *out, char *err, size_t errlen);

/* Reads all of an open certificate file (at most CURVE_CERT_MAX_BYTES) into a new string
 * *text. Returns 0, or -1 with a reason in err naming name. */
int curve_key_text(FILE *f, const char *name, char **text, char *err, size_t errlen);

/* Parses a certificate's text (zcert format) as curve_key_read does; name is for err. */
int curve_key_parse(const char *text, const char *name, bool want_secret, curve_key_t *out,
                    char *err, size_t errlen);

/* Client keys from the client's secret certificate file and the broker's public certificate
 * file. NULL with a reason in err when either cannot be read or is invalid. */
curve_t *curve_new(const char *cert_path, const char *server_public_path, char *err, size_t errlen);
void curve_destroy(curve_t **self_p);

/* Makes the (unconnected) libzmq socket a CURVE client of the broker with these keys. */
int curve_apply(const curve_t *self, void *zmq_socket);

const char *curve_public(const curve_t *self);
const char *curve_server_public(const curve_t *self);
const char *curve_role(const curve_t *self);

/* Reads CHATFLEET_CURVE_CERT and CHATFLEET_CURVE_SERVER_PUBLIC. Neither set: *out = NULL
 * (plain) and 0. Both set and valid: *out = the keys, and 0. Only one set, or a file that
 * cannot be read or is invalid: -1 with a message naming the setting and the file in err. */
int curve_from_env(curve_t **out, char *err, size_t errlen);

/* A process's start: curve_from_env, then the keys made the process-wide default. A
 * certificate whose role is not role is logged (curve_role_mismatch: the broker would refuse
 * that process's traffic) but kept. -1 when the settings are unusable: the reason is printed
 * on stderr after "process: " and logged (config_invalid); the caller exits 2. */
int curve_start(const char *process, const char *role, curve_t **out);

/* The process-wide client keys (NULL: plain). Set once at start, before any bus socket is
 * made; the caller keeps ownership and destroys them after the last socket is closed. */
void curve_set_default(const curve_t *self);
const curve_t *curve_default(void);

/* Writes a new key pair as DIR/NAME.cert (public, 0644) and DIR/NAME.cert_secret (0600),
 * with the metadata role=ROLE. Returns 0, or -1 with a reason in err. */
int curve_keygen(const char *role, const char *name, const char *dir, char *err, size_t errlen);

#endif
