/* curve: CurveZMQ client keys and certificate files; see curve.h. */
#include "curve.h"
#include "log.h"
#include "mem.h"

#include <czmq.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct curve {
    curve_key_t own;
    char server_public[CURVE_KEY_TXT_LEN + 1];
};

static const curve_t *s_default; /* set once at start, before any bus socket exists */

static bool s_key_txt_ok(const char *txt) {
    uint8_t bin[32];
    return txt && strlen(txt) == CURVE_KEY_TXT_LEN && zmq_z85_decode(bin, txt) != NULL;
}

int curve_key_parse(const char *text, const char *name, bool want_secret, curve_key_t *out,
                    char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    zconfig_t *root = zconfig_str_load(text);
    if (!root) {
        snprintf(err, errlen, "%s is not a certificate (zcert format)", name);
        return -1;
    }
    const char *pub = zconfig_get(root, "curve/public-key", NULL);
    const char *sec = zconfig_get(root, "curve/secret-key", NULL);
    const char *role = zconfig_get(root, "metadata/role", "");
    int rc = -1;
    if (!s_key_txt_ok(pub)) {
        snprintf(err, errlen, "%s has no valid curve/public-key", name);
    } else if (want_secret && !s_key_txt_ok(sec)) {
        snprintf(err, errlen, "%s has no valid curve/secret-key (is it the .cert_secret file?)",
                 name);
    } else if (strlen(role) > CURVE_ROLE_MAX) {
        snprintf(err, errlen, "%s has an over-long role", name);
    } else {
        rc = 0;
        memcpy(out->public_txt, pub, CURVE_KEY_TXT_LEN + 1);
        snprintf(out->role, sizeof out->role, "%s", role);
        if (want_secret) {
            char derived[CURVE_KEY_TXT_LEN + 1];
            if (zmq_curve_public(derived, sec) != 0 || strcmp(derived, pub) != 0) {
                snprintf(err, errlen, "%s: the secret key does not match the public key", name);
                rc = -1;
            } else {
                memcpy(out->secret_txt, sec, CURVE_KEY_TXT_LEN + 1);
            }
        }
    }
    zconfig_destroy(&root);
    return rc;
}

int curve_key_text(FILE *f, const char *name, char **text, char *err, size_t errlen) {
    char *buf = mem_alloc(CURVE_CERT_MAX_BYTES + 1);
    size_t n = fread(buf, 1, CURVE_CERT_MAX_BYTES + 1, f);
    if (ferror(f) || n > CURVE_CERT_MAX_BYTES) {
        int e = errno;
        if (ferror(f)) {
            snprintf(err, errlen, "cannot read %s: %s", name, strerror(e));
        } else {
            snprintf(err, errlen, "%s is over %d bytes", name, CURVE_CERT_MAX_BYTES);
        }
        explicit_bzero(buf, CURVE_CERT_MAX_BYTES + 1); /* a secret file's text, maybe */
        free(buf);
        errno = e;
        return -1;
    }
    buf[n] = '\0';
    *text = buf;
    return 0;
}

int curve_key_read(const char *path, bool want_secret, curve_key_t *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    char *text = NULL;
    int rc = curve_key_text(f, path, &text, err, errlen);
    fclose(f);
    if (rc == 0) {
        rc = curve_key_parse(text, path, want_secret, out, err, errlen);
        explicit_bzero(text, strlen(text));
        free(text);
    }
    return rc;
}

curve_t *curve_new(const char *cert_path, const char *server_public_path, char *err,
                   size_t errlen) {
    curve_t *self = mem_calloc(1, sizeof *self);
    curve_key_t server;
    if (curve_key_read(cert_path, true, &self->own, err, errlen) != 0 ||
        curve_key_read(server_public_path, false, &server, err, errlen) != 0) {
        explicit_bzero(self, sizeof *self);
        free(self);
        return NULL;
    }
    memcpy(self->server_public, server.public_txt, sizeof self->server_public);
    return self;
}

void curve_destroy(curve_t **self_p) {
    curve_t *self = *self_p;
    if (!self) {
        return;
    }
    explicit_bzero(self, sizeof *self);
    free(self);
    *self_p = NULL;
}

int curve_apply(const curve_t *self, void *zmq_socket) {
    if (zmq_setsockopt(zmq_socket, ZMQ_CURVE_SERVERKEY, self->server_public, CURVE_KEY_TXT_LEN) !=
            0 ||
        zmq_setsockopt(zmq_socket, ZMQ_CURVE_PUBLICKEY, self->own.public_txt, CURVE_KEY_TXT_LEN) !=
            0 ||
        zmq_setsockopt(zmq_socket, ZMQ_CURVE_SECRETKEY, self->own.secret_txt, CURVE_KEY_TXT_LEN) !=
            0) {
        log_error("curve_apply_failed", "error=\"%s\"", zmq_strerror(zmq_errno()));
        return -1;
    }
    return 0;
}

const char *curve_public(const curve_t *self) {
    return self->own.public_txt;
}

const char *curve_server_public(const curve_t *self) {
    return self->server_public;
}

const char *curve_role(const curve_t *self) {
    return self->own.role;
}

int curve_from_env(curve_t **out, char *err, size_t errlen) {
    *out = NULL;
    const char *cert = getenv(CURVE_ENV_CERT);
    const char *server = getenv(CURVE_ENV_SERVER);
    bool has_cert = cert && *cert;
    bool has_server = server && *server;
    if (!has_cert && !has_server) {
        return 0;
    }
    if (!has_cert || !has_server) {
        snprintf(err, errlen, "%s is set but %s is not: set both for CURVE, or neither for plain",
                 has_cert ? CURVE_ENV_CERT : CURVE_ENV_SERVER,
                 has_cert ? CURVE_ENV_SERVER : CURVE_ENV_CERT);
        return -1;
    }
    char why[384];
    curve_key_t probe;
    if (curve_key_read(cert, true, &probe, why, sizeof why) != 0) {
        snprintf(err, errlen, "%s: %s", CURVE_ENV_CERT, why);
        return -1;
    }
    explicit_bzero(&probe, sizeof probe);
    if (curve_key_read(server, false, &probe, why, sizeof why) != 0) {
        snprintf(err, errlen, "%s: %s", CURVE_ENV_SERVER, why);
        return -1;
    }
    *out = curve_new(cert, server, why, sizeof why);
    if (!*out) {
        snprintf(err, errlen, "%s", why);
        return -1;
    }
    log_info("curve_config", "cert=%s public=%s role=%s server_public_file=%s server_public=%s",
             cert, curve_public(*out), curve_role(*out)[0] ? curve_role(*out) : "(none)", server,
             curve_server_public(*out));
    return 0;
}

void curve_set_default(const curve_t *self) {
    s_default = self;
}

const curve_t *curve_default(void) {
    return s_default;
}

int curve_keygen(const char *role, const char *name, const char *dir, char *err, size_t errlen) {
    if (!role || (!streq(role, "gateway") && !streq(role, "worker") && !streq(role, "broker"))) {
        snprintf(err, errlen, "role must be gateway, worker or broker");
        return -1;
    }
    if (!name || !*name || strchr(name, '/') || name[0] == '.') {
        snprintf(err, errlen, "NAME must be a plain file name");
        return -1;
    }
    char pub[1024];
    char sec[1100];
    snprintf(pub, sizeof pub, "%s/%s.cert", dir, name);
    snprintf(sec, sizeof sec, "%s_secret", pub);
    if (zsys_dir_create("%s", dir) != 0) {
        snprintf(err, errlen, "cannot create %s: %s", dir, strerror(errno));
        return -1;
    }
    zcert_t *cert = zcert_new();
    if (!cert) {
        snprintf(err, errlen, "cannot make a key pair (libzmq without CURVE?)");
        return -1;
    }
    zcert_set_meta(cert, "role", "%s", role);
    /* The secret file is created 0600 (umask 077 while it is written), never readable by
     * others even for a moment; the public one is chmod'ed 0644 after. */
    mode_t old = umask(077);
    int rc = zcert_save_public(cert, pub);
    if (rc == 0) {
        rc = zcert_save_secret(cert, sec);
    }
    umask(old);
    if (rc == 0 && (chmod(sec, 0600) != 0 || chmod(pub, 0644) != 0)) {
        rc = -1;
    }
    zcert_destroy(&cert);
    if (rc != 0) {
        snprintf(err, errlen, "cannot write %s or %s: %s", pub, sec, strerror(errno));
        return -1;
    }
    return 0;
}

int curve_start(const char *process, const char *role, curve_t **out) {
    char err[700];
    if (curve_from_env(out, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", process, err);
        log_error("config_invalid", "detail=\"%s\"", err);
        return -1;
    }
    if (*out && strcmp(curve_role(*out), role) != 0) {
        log_warn("curve_role_mismatch", "role=%s expected=%s", curve_role(*out), role);
    }
    curve_set_default(*out);
    return 0;
}
