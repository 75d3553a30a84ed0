/* sandbox: an MCP stdio server's environment and confinement; see sandbox.h. bwrap's options
 * are its manual's (bwrap(1), bubblewrap 0.4 or later). */
#define _GNU_SOURCE /* posix_spawn_file_actions_addchdir_np, _addclosefrom_np, nftw */
#include "sandbox.h"
#include "id.h"
#include "log.h"
#include "mem.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* What of /etc a sandboxed server sees, read-only: name resolution, users and groups, TLS
 * trust, time zone, the dynamic linker's cache and Debian's alternatives (node and python may be
 * links through /etc/alternatives). Never the rest of /etc: it holds the deployment's own files
 * (/etc/chatfleet: the environment file with the database URL, the CURVE keys), TLS private keys
 * (/etc/ssl/private), /etc/shadow and the SSH host keys. */
static const char *const s_etc[] = {"/etc/alternatives",
                                    "/etc/ca-certificates",
                                    "/etc/gai.conf",
                                    "/etc/group",
                                    "/etc/host.conf",
                                    "/etc/hosts",
                                    "/etc/ld.so.cache",
                                    "/etc/ld.so.conf",
                                    "/etc/ld.so.conf.d",
                                    "/etc/localtime",
                                    "/etc/mime.types",
                                    "/etc/nsswitch.conf",
                                    "/etc/os-release",
                                    "/etc/passwd",
                                    "/etc/resolv.conf",
                                    "/etc/services",
                                    "/etc/ssl/certs",
                                    "/etc/ssl/openssl.cnf",
                                    NULL};

/* The top-level system directories: links into /usr on a merged-/usr system (recreated as
 * links), else bound read-only. */
static const char *const s_sys[] = {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", NULL};

/* Files of the worker's that are secret whatever their name, beside every CHATFLEET_* path. */
static const char *const s_pg_env[] = {"PGPASSFILE", "PGSSLKEY", "PGSSLCERT", "PGSERVICEFILE",
                                       NULL};

/* A growable NULL-terminated array of owned strings. */
typedef struct {
    char **v;
    size_t n;
    size_t cap;
} s_vec_t;

static void s_add(s_vec_t *vec, char *owned) {
    if (vec->n + 2 > vec->cap) {
        vec->cap = vec->cap ? vec->cap * 2 : 32;
        vec->v = mem_realloc(vec->v, vec->cap * sizeof *vec->v);
    }
    vec->v[vec->n++] = owned;
    vec->v[vec->n] = NULL;
}

static void s_addc(s_vec_t *vec, const char *s) {
    s_add(vec, mem_strdup(s));
}

static void s_add3(s_vec_t *vec, const char *a, const char *b, const char *c) {
    s_addc(vec, a);
    s_addc(vec, b);
    if (c) {
        s_addc(vec, c);
    }
}

static void s_clear(s_vec_t *vec) {
    for (size_t i = 0; i < vec->n; i++) {
        free(vec->v[i]);
    }
    free(vec->v);
    *vec = (s_vec_t){0};
}

int sandbox_mode_parse(const char *text, sandbox_mode_t *out) {
    if (!text || !*text || !strcmp(text, "auto")) {
        *out = SANDBOX_AUTO;
    } else if (!strcmp(text, "require")) {
        *out = SANDBOX_REQUIRE;
    } else if (!strcmp(text, "off")) {
        *out = SANDBOX_OFF;
    } else {
        return -1;
    }
    return 0;
}

const char *sandbox_mode_name(sandbox_mode_t mode) {
    return mode == SANDBOX_REQUIRE ? "require" : mode == SANDBOX_OFF ? "off" : "auto";
}

/* The value of NAME in env ("NAME=value" entries), or NULL. */
static const char *s_env_get(const char *const *env, const char *name) {
    size_t n = strlen(name);
    for (size_t i = 0; env && env[i]; i++) {
        if (!strncmp(env[i], name, n) && env[i][n] == '=') {
            return env[i] + n + 1;
        }
    }
    return NULL;
}

/* The scratch directory of server name: under the worker's runtime directory (systemd's
 * RuntimeDirectory=), else TMPDIR, else /tmp; one per worker process and server. */
static void s_scratch_path(const char *name, char *out, size_t size) {
    const char *base = getenv("RUNTIME_DIRECTORY");
    if (!base || base[0] != '/') {
        base = getenv("TMPDIR");
    }
    if (!base || base[0] != '/') {
        base = "/tmp";
    }
    size_t n = strcspn(base, ":"); /* RUNTIME_DIRECTORY may list several */
    snprintf(out, size, "%.*s/chatfleet-mcp-%d-%s", (int)n, base, (int)getpid(), name);
}

/* The directory the scratch directories are made in (see s_scratch_path). */
static void s_scratch_base(char *out, size_t size) {
    char probe[PATH_MAX];
    s_scratch_path("x", probe, sizeof probe);
    *strrchr(probe, '/') = '\0';
    snprintf(out, size, "%s", probe);
}

/* Creates the scratch directory, or checks that the one there is ours (not a link, not another
 * user's, nobody else's to read). */
static int s_scratch_make(const char *path, char *why, size_t size) {
    if (mkdir(path, 0700) != 0 && errno != EEXIST) {
        snprintf(why, size, "cannot create the scratch directory %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & 077)) {
        snprintf(why, size, "the scratch directory %s is not a private directory of ours", path);
        errno = EEXIST;
        return -1;
    }
    return 0;
}

static int s_rm(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    (void)remove(path);
    return 0;
}

void sandbox_scratch_remove(const char *name) {
    char path[PATH_MAX];
    s_scratch_path(name, path, sizeof path);
    (void)nftw(path, s_rm, 16, FTW_DEPTH | FTW_PHYS);
}

void sandbox_scratch_sweep(void) {
    char base[PATH_MAX];
    s_scratch_base(base, sizeof base);
    DIR *d = opendir(base);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char *end = NULL;
        if (strncmp(e->d_name, "chatfleet-mcp-", 14)) {
            continue;
        }
        long pid = strtol(e->d_name + 14, &end, 10);
        char path[PATH_MAX + 256]; /* base and a d_name (at most 255 bytes) */
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", base, e->d_name);
        /* Only ours, and only a worker's that is gone: a live pid (even reused) keeps it. */
        if (pid > 0 && end && *end == '-' && pid != getpid() && kill((pid_t)pid, 0) != 0 &&
            errno == ESRCH && lstat(path, &st) == 0 && S_ISDIR(st.st_mode) &&
            st.st_uid == geteuid()) {
            log_info("mcp_scratch_removed", "path=%s", path);
            (void)nftw(path, s_rm, 16, FTW_DEPTH | FTW_PHYS);
        }
    }
    if (d) {
        closedir(d);
    }
}

/* command as an absolute path: itself, or the first executable file of its name on path. */
static int s_resolve(const char *command, const char *path, char *out, size_t size) {
    struct stat st;
    if (command[0] == '/') {
        snprintf(out, size, "%s", command);
        if (stat(out, &st) != 0 || access(out, X_OK) != 0) {
            return -1; /* errno says why */
        }
        return 0;
    }
    if (strchr(command, '/')) {
        errno = EINVAL; /* relative paths are refused by the configuration (mcpset.c) */
        return -1;
    }
    for (const char *p = path; p && *p;) {
        size_t n = strcspn(p, ":");
        if (n > 0 && p[0] == '/') {
            snprintf(out, size, "%.*s/%s", (int)n, p, command);
            if (stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0) {
                return 0;
            }
        }
        p += n + (p[n] == ':');
    }
    errno = ENOENT;
    return -1;
}

/* The server's whole environment: what its configuration names, then PATH, HOME and LANG
 * unless it named them. */
static void s_env(s_vec_t *envp, const sandbox_conf_t *conf, const char *scratch) {
    for (size_t i = 0; conf->env && conf->env[i]; i++) {
        s_addc(envp, conf->env[i]);
    }
    if (!s_env_get(conf->env, "PATH")) {
        s_add(envp, mem_printf("PATH=%s", SANDBOX_PATH_DEFAULT));
    }
    if (!s_env_get(conf->env, "HOME")) {
        s_add(envp, mem_printf("HOME=%s", scratch));
    }
    if (!s_env_get(conf->env, "LANG")) {
        s_add(envp, mem_printf("LANG=%s", SANDBOX_LANG));
    }
}

/* The worker's secret paths: every absolute path in a CHATFLEET_* variable (the CURVE key, the
 * config file, TLS keys, ...), libpq's key and password files, and ~/.pgpass. */
static void s_secrets(s_vec_t *out) {
    for (char **e = environ; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!strncmp(*e, "CHATFLEET_", 10) && eq && eq[1] == '/') {
            s_addc(out, eq + 1);
        }
    }
    for (int i = 0; s_pg_env[i]; i++) {
        const char *v = getenv(s_pg_env[i]);
        if (v && v[0] == '/') {
            s_addc(out, v);
        }
    }
    const char *home = getenv("HOME");
    if (home && home[0] == '/') {
        s_add(out, mem_printf("%s/.pgpass", home));
        s_add(out, mem_printf("%s/.pg_service.conf", home));
    }
}

/* True when path is base or inside it. */
static bool s_within(const char *path, const char *base) {
    size_t n = strlen(base);
    if (n == 1 && base[0] == '/') {
        return true;
    }
    return !strncmp(path, base, n) && (path[n] == '\0' || path[n] == '/');
}

/* Hides dest in the sandbox: an empty tmpfs over a directory, /dev/null over anything else. */
static void s_mask(s_vec_t *a, const char *dest, bool dir, const char *server) {
    log_info("mcp_sandbox_masked", "server=%s path=%s", server, dest);
    if (dir) {
        s_add3(a, "--tmpfs", dest, NULL);
    } else {
        s_add3(a, "--ro-bind", "/dev/null", dest);
    }
}

/* After every bind (dests, at the same paths as their sources): masks each secret seen through
 * a bind. Paths are compared resolved, so a link in a listed path does not hide an overlap. A
 * listed path inside a secret directory (a CHATFLEET_* directory) stays: the operator chose to
 * show it, and the secret files named by the environment in it are masked one by one. */
static void s_masks(s_vec_t *a, const s_vec_t *dests, const char *server) {
    s_vec_t secrets = {0};
    s_secrets(&secrets);
    for (size_t i = 0; i < secrets.n; i++) {
        char sreal[PATH_MAX];
        struct stat sst;
        if (!realpath(secrets.v[i], sreal) || stat(sreal, &sst) != 0) {
            continue; /* nothing there to hide */
        }
        for (size_t k = 0; k < dests->n; k++) {
            char breal[PATH_MAX];
            if (!realpath(dests->v[k], breal)) {
                continue;
            }
            if (s_within(sreal, breal)) {
                char *dest = mem_printf("%s%s", dests->v[k], sreal + strlen(breal));
                s_mask(a, dest, S_ISDIR(sst.st_mode), server);
                free(dest);
            }
        }
    }
    s_clear(&secrets);
}

/* bwrap's options for conf (NULL: the probe's, with no path of a server's). */
static void s_bwrap(s_vec_t *a, const sandbox_conf_t *conf, const char *scratch,
                    const char *server) {
    s_vec_t dests = {0};
    s_addc(a, SANDBOX_BWRAP);
    s_add3(a, "--die-with-parent", "--new-session", NULL);
    s_addc(a, "--unshare-all");
    if (conf && conf->network) {
        s_addc(a, "--share-net");
    }
    s_add3(a, "--ro-bind", "/usr", "/usr");
    s_addc(&dests, "/usr");
    for (int i = 0; s_sys[i]; i++) {
        struct stat st;
        char target[PATH_MAX];
        ssize_t n;
        if (lstat(s_sys[i], &st) != 0) {
            continue;
        }
        if (S_ISLNK(st.st_mode) && (n = readlink(s_sys[i], target, sizeof target - 1)) > 0) {
            target[n] = '\0';
            s_add3(a, "--symlink", target, s_sys[i]);
        } else if (S_ISDIR(st.st_mode)) {
            s_add3(a, "--ro-bind", s_sys[i], s_sys[i]);
            s_addc(&dests, s_sys[i]);
        }
    }
    for (int i = 0; s_etc[i]; i++) {
        s_add3(a, "--ro-bind-try", s_etc[i], s_etc[i]);
        s_addc(&dests, s_etc[i]);
    }
    s_add3(a, "--proc", "/proc", NULL);
    s_add3(a, "--dev", "/dev", NULL);
    s_add3(a, "--tmpfs", "/tmp", NULL);
    for (size_t i = 0; conf && conf->ro_paths && conf->ro_paths[i]; i++) {
        s_add3(a, "--ro-bind", conf->ro_paths[i], conf->ro_paths[i]);
        s_addc(&dests, conf->ro_paths[i]);
    }
    for (size_t i = 0; conf && conf->rw_paths && conf->rw_paths[i]; i++) {
        s_add3(a, "--bind", conf->rw_paths[i], conf->rw_paths[i]);
        s_addc(&dests, conf->rw_paths[i]);
    }
    if (scratch) {
        s_add3(a, "--bind", scratch, scratch);
        s_addc(&dests, scratch);
    }
    s_masks(a, &dests, server);
    if (scratch) {
        s_add3(a, "--chdir", scratch, NULL);
    }
    s_addc(a, "--");
    s_clear(&dests);
}

/* posix_spawn of exe with argv and envp: stdin, stdout (and stderr when err_fd >= 0) on the fds,
 * in cwd (NULL: the worker's), in a new process group, no other descriptor of the worker's, no
 * signal blocked (the worker blocks its shutdown signals in every thread), SIGPIPE default. */
static int s_run(const char *exe, char *const *argv, char *const *envp, int in_fd, int out_fd,
                 int err_fd, const char *cwd, pid_t *pid) {
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in_fd, 0);
    posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    if (err_fd >= 0) {
        posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
    }
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    if (cwd) {
        posix_spawn_file_actions_addchdir_np(&fa, cwd);
    }
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                        POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup(&attr, 0);
    sigset_t none;
    sigset_t def;
    sigemptyset(&none);
    sigemptyset(&def);
    sigaddset(&def, SIGPIPE);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &def);
    int rc = posix_spawn(pid, exe, &fa, &attr, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    errno = rc;
    return rc == 0 ? 0 : -1;
}

static char s_probe_why[256];
static bool s_probe_ok;
static pthread_once_t s_probe_once = PTHREAD_ONCE_INIT;

/* Runs `true` in the sandbox every server gets (no path of its own), with a deadline. */
static void s_probe(void) {
    if (access(SANDBOX_BWRAP, X_OK) != 0) {
        snprintf(s_probe_why, sizeof s_probe_why, "%s is not installed (Debian: bubblewrap)",
                 SANDBOX_BWRAP);
        return;
    }
    char exe[PATH_MAX];
    if (s_resolve("true", SANDBOX_PATH_DEFAULT, exe, sizeof exe) != 0) {
        snprintf(s_probe_why, sizeof s_probe_why, "no true(1) to probe with");
        return;
    }
    s_vec_t a = {0};
    s_bwrap(&a, NULL, NULL, "probe");
    s_addc(&a, exe);
    char *envp[] = {"PATH=" SANDBOX_PATH_DEFAULT, NULL};
    int err[2];
    int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    pid_t pid = 0;
    if (null_fd < 0 || pipe2(err, O_CLOEXEC | O_NONBLOCK) != 0) {
        snprintf(s_probe_why, sizeof s_probe_why, "cannot probe: %s", strerror(errno));
        s_clear(&a);
        if (null_fd >= 0) {
            close(null_fd);
        }
        return;
    }
    int rc = s_run(SANDBOX_BWRAP, a.v, envp, null_fd, null_fd, err[1], NULL, &pid);
    s_clear(&a);
    close(err[1]);
    close(null_fd);
    int st = 0;
    int64_t end = id_now_ms() + SANDBOX_PROBE_MS;
    pid_t got = 0;
    while (rc == 0 && (got = waitpid(pid, &st, WNOHANG)) == 0 && id_now_ms() < end) {
        struct timespec ms10 = {0, 10 * 1000 * 1000};
        nanosleep(&ms10, NULL);
    }
    if (rc == 0 && got == 0) {
        kill(pid, SIGKILL);
        (void)waitpid(pid, &st, 0);
    }
    char text[200] = "";
    ssize_t n = read(err[0], text, sizeof text - 1);
    close(err[0]);
    text[n > 0 ? n : 0] = '\0';
    text[strcspn(text, "\r\n")] = '\0';
    s_probe_ok = rc == 0 && got == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (!s_probe_ok) {
        snprintf(s_probe_why, sizeof s_probe_why, "a probe run of %s failed: %s", SANDBOX_BWRAP,
                 rc != 0    ? strerror(errno)
                 : got == 0 ? "timed out"
                 : text[0]  ? text
                            : "exit");
    }
}

bool sandbox_usable(char *why, size_t why_size) {
    pthread_once(&s_probe_once, s_probe);
    if (why && why_size) {
        snprintf(why, why_size, "%s", s_probe_why);
    }
    return s_probe_ok;
}

/* Whether to use bwrap: -1 when the mode requires it and it does not work. Warns once when auto
 * falls back. */
static int s_use_bwrap(sandbox_mode_t mode, bool *use, char *why, size_t size) {
    static atomic_bool warned;
    char reason[256];
    *use = false;
    if (mode == SANDBOX_OFF) {
        return 0;
    }
    if (sandbox_usable(reason, sizeof reason)) {
        *use = true;
        return 0;
    }
    if (mode == SANDBOX_REQUIRE) {
        snprintf(why, size, "%s=require but the sandbox is not usable: %s", SANDBOX_ENV_MODE,
                 reason);
        errno = EPERM;
        return -1;
    }
    if (!atomic_exchange(&warned, true)) {
        log_warn("mcp_sandbox_unavailable",
                 "reason=\"%s\" fallback=\"clean environment, the worker's user and files\"",
                 reason);
    }
    return 0;
}

int sandbox_spawn(const sandbox_conf_t *conf, const char *name, const char *command,
                  const char *const *args, int in_fd, int out_fd, pid_t *pid, char *why,
                  size_t why_size) {
    bool use = false;
    char scratch[PATH_MAX];
    char exe[PATH_MAX];
    s_scratch_path(name, scratch, sizeof scratch);
    if (s_use_bwrap(conf->mode, &use, why, why_size) != 0 ||
        s_scratch_make(scratch, why, why_size) != 0) {
        return -1;
    }
    const char *path = s_env_get(conf->env, "PATH");
    if (s_resolve(command, path ? path : SANDBOX_PATH_DEFAULT, exe, sizeof exe) != 0) {
        int e = errno;
        if (command[0] == '/') {
            snprintf(why, why_size, "cannot start %s: %s", command, strerror(e));
        } else {
            snprintf(why, why_size, "cannot start %s: not found on PATH=%s", command,
                     path ? path : SANDBOX_PATH_DEFAULT);
        }
        errno = e;
        return -1;
    }
    s_vec_t argv = {0};
    s_vec_t envp = {0};
    if (use) {
        s_bwrap(&argv, conf, scratch, name);
    }
    s_addc(&argv, exe);
    for (size_t i = 0; args && args[i]; i++) {
        s_addc(&argv, args[i]);
    }
    s_env(&envp, conf, scratch);
    int rc = s_run(use ? SANDBOX_BWRAP : exe, argv.v, envp.v, in_fd, out_fd, -1,
                   use ? NULL : scratch, pid);
    int e = errno;
    if (rc != 0) {
        snprintf(why, why_size, "cannot start %s: %s", use ? SANDBOX_BWRAP : exe, strerror(e));
    } else {
        log_info("mcp_sandbox", "server=%s sandbox=%s network=%s exe=%s home=%s", name,
                 use ? "bwrap" : "none", !use || conf->network ? "shared" : "none", exe, scratch);
    }
    s_clear(&argv);
    s_clear(&envp);
    errno = e;
    return rc;
}
