/* auth: the broker's CURVE keys, its ZAP handler, and the admitted keys' roles; see auth.h. */
#include "auth.h"
#include "log.h"
#include "mem.h"

#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

struct auth {
    curve_key_t server;
    char allow_dir[1024];
    zsock_t *zap;       /* REP bound at AUTH_ZAP_ENDPOINT */
    zhashx_t *roles;    /* public key (z85) -> role (owned strings) */
    uint64_t signature; /* of the directory listing at the last read */
};

static void s_str_free(void **item) {
    free(*item);
    *item = NULL;
}

static bool s_ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s);
    size_t m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* A cheap fingerprint of the directory: names, sizes and modification times of its files.
 * Returns 0 and sets *out, or -1 when the directory cannot be read. */
static int s_signature(const char *dir, uint64_t *out) {
    DIR *d = opendir(dir);
    if (!d) {
        return -1;
    }
    uint64_t h = 1469598103934665603ULL;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') {
            continue;
        }
        char path[2048];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (stat(path, &st) != 0) {
            continue;
        }
        uint64_t x = (uint64_t)st.st_size * 1000003ULL ^ (uint64_t)st.st_mtim.tv_sec * 7919ULL ^
                     (uint64_t)st.st_mtim.tv_nsec ^ (uint64_t)st.st_ino;
        for (const char *c = e->d_name; *c; c++) {
            x = (x ^ (uint8_t)*c) * 1099511628211ULL;
        }
        h += x; /* order-independent: readdir order is not stable */
    }
    closedir(d);
    *out = h;
    return 0;
}

/* Reads every public certificate in dir into a new map. NULL when dir cannot be read. */
static zhashx_t *s_read_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        return NULL;
    }
    zhashx_t *roles = zhashx_new();
    ASSERT(roles);
    zhashx_set_destructor(roles, s_str_free);
    zhashx_set_duplicator(roles, (zhashx_duplicator_fn *)mem_strdup);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || s_ends_with(e->d_name, "_secret")) {
            continue;
        }
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        curve_key_t key;
        char why[512];
        if (curve_key_read(path, false, &key, why, sizeof why) != 0) {
            log_warn("curve_allow_skipped", "detail=\"%s\"", why);
            continue;
        }
        zhashx_update(roles, key.public_txt, key.role);
    }
    closedir(d);
    return roles;
}

auth_t *auth_new(const char *server_key_path, const char *allow_dir, char *err, size_t errlen) {
    auth_t *self = mem_calloc(1, sizeof *self);
    char why[512];
    if (curve_key_read(server_key_path, true, &self->server, why, sizeof why) != 0) {
        snprintf(err, errlen, "%s: %s", AUTH_ENV_SERVER_KEY, why);
        free(self);
        return NULL;
    }
    struct stat st;
    errno = 0;
    if (stat(allow_dir, &st) != 0 || !S_ISDIR(st.st_mode) ||
        s_signature(allow_dir, &self->signature) != 0) {
        snprintf(err, errlen, "%s: cannot read the directory %s: %s", AUTH_ENV_ALLOW_DIR, allow_dir,
                 errno ? strerror(errno) : "not a directory");
        explicit_bzero(self, sizeof *self);
        free(self);
        return NULL;
    }
    snprintf(self->allow_dir, sizeof self->allow_dir, "%s", allow_dir);
    self->roles = s_read_dir(allow_dir);
    self->zap = zsock_new_rep("@" AUTH_ZAP_ENDPOINT);
    if (!self->roles || !self->zap) {
        snprintf(err, errlen, "cannot start the ZAP handler on %s", allow_dir);
        auth_destroy(&self);
        return NULL;
    }
    return self;
}

void auth_destroy(auth_t **self_p) {
    auth_t *self = *self_p;
    if (!self) {
        return;
    }
    zsock_destroy(&self->zap);
    zhashx_destroy(&self->roles);
    explicit_bzero(self, sizeof *self);
    free(self);
    *self_p = NULL;
}

int auth_apply(auth_t *self, zsock_t *sock) {
    void *h = zsock_resolve(sock);
    int one = 1;
    if (zmq_setsockopt(h, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
        zmq_setsockopt(h, ZMQ_CURVE_PUBLICKEY, self->server.public_txt, CURVE_KEY_TXT_LEN) != 0 ||
        zmq_setsockopt(h, ZMQ_CURVE_SECRETKEY, self->server.secret_txt, CURVE_KEY_TXT_LEN) != 0 ||
        zmq_setsockopt(h, ZMQ_ZAP_DOMAIN, AUTH_ZAP_DOMAIN, strlen(AUTH_ZAP_DOMAIN)) != 0) {
        log_error("curve_server_failed", "error=\"%s\"", zmq_strerror(zmq_errno()));
        return -1;
    }
    return 0;
}

const char *auth_role(auth_t *self, const char *key) {
    return key ? zhashx_lookup(self->roles, key) : NULL;
}

int auth_reload(auth_t *self, bool force) {
    uint64_t sig = 0;
    if (s_signature(self->allow_dir, &sig) != 0) {
        return -1;
    }
    if (sig == self->signature && !force) {
        return 0;
    }
    zhashx_t *roles = s_read_dir(self->allow_dir);
    if (!roles) {
        return -1;
    }
    size_t gone = 0;
    for (void *r = zhashx_first(self->roles); r; r = zhashx_next(self->roles)) {
        gone += zhashx_lookup(roles, zhashx_cursor(self->roles)) == NULL;
    }
    zhashx_destroy(&self->roles);
    self->roles = roles;
    self->signature = sig;
    log_info("curve_allow_reloaded", "dir=%s keys=%zu revoked=%zu trigger=%s", self->allow_dir,
             zhashx_size(roles), gone, force ? "signal" : "change");
    return gone ? AUTH_RELOAD_REVOKED : 1;
}

zsock_t *auth_zap(auth_t *self) {
    return self->zap;
}

/* Copies frame i of m (text, bounded by len) into out; "" when absent. */
static void s_frame_text(zmsg_t *m, int i, char *out, size_t len) {
    zframe_t *f = zmsg_first(m);
    for (int k = 0; f && k < i; k++) {
        f = zmsg_next(m);
    }
    size_t n = f ? zframe_size(f) : 0;
    n = n < len - 1 ? n : len - 1;
    if (n) {
        memcpy(out, zframe_data(f), n);
    }
    out[n] = '\0';
}

int auth_zap_handle(auth_t *self, auth_zap_t *out) {
    if (!(zsock_events(self->zap) & ZMQ_POLLIN)) {
        return 0;
    }
    zmsg_t *req = zmsg_recv(self->zap);
    if (!req) {
        return 0;
    }
    /* [version][request id][domain][address][identity][mechanism][credentials] (ZAP 1.0,
     * rfc.zeromq.org/spec/27). */
    memset(out, 0, sizeof *out);
    char version[8];
    char request_id[256]; /* bound: libzmq sends "1" */
    char mechanism[16];
    s_frame_text(req, 0, version, sizeof version);
    s_frame_text(req, 1, request_id, sizeof request_id);
    s_frame_text(req, 3, out->address, sizeof out->address);
    s_frame_text(req, 5, mechanism, sizeof mechanism);
    zframe_t *cred = zmsg_size(req) >= 7 ? zmsg_last(req) : NULL;
    snprintf(out->key, sizeof out->key, "-");
    if (strcmp(version, "1.0") != 0 || zmsg_size(req) < 6) {
        out->reason = "bad_request";
    } else if (strcmp(mechanism, "CURVE") != 0 || !cred || zframe_size(cred) != 32) {
        out->reason = "not_curve";
    } else {
        zmq_z85_encode(out->key, zframe_data(cred), 32);
        out->admitted = zhashx_lookup(self->roles, out->key) != NULL;
        out->reason = out->admitted ? "" : "unknown_key";
    }
    zmsg_destroy(&req);
    zmsg_t *rep = zmsg_new();
    zmsg_addstr(rep, "1.0");
    zmsg_addstr(rep, request_id);
    zmsg_addstr(rep, out->admitted ? "200" : "400");
    zmsg_addstr(rep, out->admitted ? "OK" : out->reason);
    zmsg_addstr(rep, out->admitted ? out->key : "");
    zmsg_addmem(rep, NULL, 0); /* no metadata */
    if (zmsg_send(&rep, self->zap) != 0) {
        zmsg_destroy(&rep);
        log_error("zap_reply_failed", "error=\"%s\"", zmq_strerror(zmq_errno()));
    }
    return 1;
}

size_t auth_count(auth_t *self) {
    return zhashx_size(self->roles);
}

const char *auth_public(const auth_t *self) {
    return self->server.public_txt;
}

const char *auth_allow_dir(const auth_t *self) {
    return self->allow_dir;
}
