/* auth: the broker's CURVE keys, its ZAP handler, and the admitted keys' roles; see auth.h. */
#include "auth.h"
#include "log.h"
#include "mem.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct auth {
    curve_key_t server;
    char allow_dir[1024];
    zsock_t *zap;     /* REP bound at AUTH_ZAP_ENDPOINT */
    DIR *dir;         /* the allow directory, kept open: listing it takes no new descriptor */
    zhashx_t *files;  /* file name -> s_file_t: what each file held at its last read */
    zhashx_t *roles;  /* public key (z85) -> role (owned strings), from files */
    bool retry;       /* the last reload failed: the next call tries again */
    bool retry_force; /* ... and it was forced */
};

/* One file of the allow directory as last read: its identity and what it held. */
typedef struct {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
    bool valid; /* a public certificate; else skipped (and logged once) */
    curve_key_t key;
} s_file_t;

static void s_str_free(void **item) {
    free(*item);
    *item = NULL;
}

static bool s_ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s);
    size_t m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static zhashx_t *s_map_new(zhashx_destructor_fn *destructor) {
    zhashx_t *m = zhashx_new();
    ASSERT(m);
    zhashx_set_destructor(m, destructor);
    return m;
}

static bool s_same(const s_file_t *a, const struct stat *st) {
    return a->dev == st->st_dev && a->ino == st->st_ino && a->size == st->st_size &&
           a->mtime.tv_sec == st->st_mtim.tv_sec && a->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

/* Reads the certificate name (in the kept directory) into f. Returns 0 (f->valid says whether
 * it is one), 1 when it vanished meanwhile, or -1 with errno set when it cannot be opened or
 * read now (out of descriptors, say): then nothing about the directory may be concluded. */
static int s_read_file(auth_t *self, const char *name, s_file_t *f) {
    int fd = openat(dirfd(self->dir), name, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        return errno == ENOENT ? 1 : -1;
    }
    FILE *in = fdopen(fd, "r");
    if (!in) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    char *text = NULL;
    char why[512];
    int rc = curve_key_text(in, name, &text, why, sizeof why);
    int e = errno;
    bool unread = rc != 0 && ferror(in);
    fclose(in);
    if (unread) {
        errno = e;
        return -1;
    }
    f->valid = rc == 0 && curve_key_parse(text, name, false, &f->key, why, sizeof why) == 0;
    if (!f->valid) {
        log_warn("curve_allow_skipped", "dir=%s detail=\"%s\"", self->allow_dir, why);
    }
    if (text) {
        explicit_bzero(text, strlen(text));
        free(text);
    }
    return 0;
}

/* Lists the kept directory into a new file map, reading only the files that are new or
 * changed since *self's map. Returns the map (*changed: the listing differs), or NULL with
 * errno set when it cannot be listed or a new file cannot be read now. */
static zhashx_t *s_scan(auth_t *self, bool *changed) {
    zhashx_t *files = s_map_new(s_str_free);
    *changed = false;
    rewinddir(self->dir);
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(self->dir);
        if (!e) {
            if (errno == 0) {
                break;
            }
            zhashx_destroy(&files);
            return NULL;
        }
        struct stat st;
        if (e->d_name[0] == '.' || s_ends_with(e->d_name, "_secret")) {
            continue;
        }
        if (fstatat(dirfd(self->dir), e->d_name, &st, 0) != 0 || !S_ISREG(st.st_mode)) {
            continue; /* gone meanwhile, a dangling link, or not a file */
        }
        const s_file_t *old = self->files ? zhashx_lookup(self->files, e->d_name) : NULL;
        s_file_t *f = mem_calloc(1, sizeof *f);
        if (old && s_same(old, &st)) {
            *f = *old;
        } else {
            int rc = s_read_file(self, e->d_name, f);
            if (rc != 0) {
                int saved = errno;
                free(f);
                if (rc == 1) {
                    continue;
                }
                zhashx_destroy(&files);
                errno = saved;
                return NULL;
            }
            f->dev = st.st_dev;
            f->ino = st.st_ino;
            f->size = st.st_size;
            f->mtime = st.st_mtim;
            *changed = true;
        }
        zhashx_update(files, e->d_name, f);
    }
    /* Same names and no file new or changed: only a removal can make the sizes differ. */
    *changed = *changed || !self->files || zhashx_size(files) != zhashx_size(self->files);
    return files;
}

/* The role map the file map gives (a key in two files: the last one listed). */
static zhashx_t *s_roles(zhashx_t *files) {
    zhashx_t *roles = s_map_new(s_str_free);
    zhashx_set_duplicator(roles, (zhashx_duplicator_fn *)mem_strdup);
    for (s_file_t *f = zhashx_first(files); f; f = zhashx_next(files)) {
        if (f->valid) {
            zhashx_update(roles, f->key.public_txt, f->key.role);
        }
    }
    return roles;
}

/* Opens the allow directory again when its path now names another directory (replaced as
 * a whole). Returns 0, or -1 with errno set. */
static int s_reopen_if_replaced(auth_t *self) {
    struct stat now;
    struct stat kept;
    if (stat(self->allow_dir, &now) != 0 || fstat(dirfd(self->dir), &kept) != 0) {
        return -1;
    }
    if (now.st_dev == kept.st_dev && now.st_ino == kept.st_ino) {
        return 0;
    }
    DIR *d = opendir(self->allow_dir);
    if (!d) {
        return -1;
    }
    closedir(self->dir);
    self->dir = d;
    return 0;
}

auth_t *auth_new(const char *server_key_path, const char *allow_dir, char *err, size_t errlen) {
    auth_t *self = mem_calloc(1, sizeof *self);
    char why[512];
    if (curve_key_read(server_key_path, true, &self->server, why, sizeof why) != 0) {
        snprintf(err, errlen, "%s: %s", AUTH_ENV_SERVER_KEY, why);
        free(self);
        return NULL;
    }
    snprintf(self->allow_dir, sizeof self->allow_dir, "%s", allow_dir);
    errno = 0;
    self->dir = opendir(allow_dir);
    bool changed = false;
    self->files = self->dir ? s_scan(self, &changed) : NULL;
    if (!self->files) {
        snprintf(err, errlen, "%s: cannot read the directory %s: %s", AUTH_ENV_ALLOW_DIR, allow_dir,
                 errno ? strerror(errno) : "not a directory");
        auth_destroy(&self);
        return NULL;
    }
    self->roles = s_roles(self->files);
    self->zap = zsock_new_rep("@" AUTH_ZAP_ENDPOINT);
    if (!self->zap) {
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
    if (self->dir) {
        closedir(self->dir);
    }
    zhashx_destroy(&self->files);
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

int auth_reload(auth_t *self, bool force, char *err, size_t errlen) {
    force = force || (self->retry && self->retry_force);
    bool changed = false;
    zhashx_t *files = s_reopen_if_replaced(self) == 0 ? s_scan(self, &changed) : NULL;
    if (!files) {
        snprintf(err, errlen, "dir=%s error=\"%s\"", self->allow_dir, strerror(errno));
        self->retry = true;
        self->retry_force = force;
        return -1;
    }
    self->retry = false;
    if (!changed && !force) {
        zhashx_destroy(&files);
        return 0;
    }
    zhashx_t *roles = s_roles(files);
    size_t gone = 0;
    for (void *r = zhashx_first(self->roles); r; r = zhashx_next(self->roles)) {
        gone += zhashx_lookup(roles, zhashx_cursor(self->roles)) == NULL;
    }
    zhashx_destroy(&self->files);
    zhashx_destroy(&self->roles);
    self->files = files;
    self->roles = roles;
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
