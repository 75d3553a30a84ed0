/* proc: child processes and HTTP for end-to-end tests; see proc.h. */
#define _GNU_SOURCE /* pipe2 */
#include "proc.h"
#include "id.h"
#include "mem.h"

#include <dirent.h>
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <netinet/in.h>
#include <unistd.h>

extern char **environ;

int proc_free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    socklen_t len = sizeof a;
    ASSERT(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* Whether "K=V" entry a names the variable that entry b names. */
static bool s_same_name(const char *a, const char *b) {
    const char *eq = strchr(b, '=');
    ASSERT(eq);
    return strncmp(a, b, (size_t)(eq - b) + 1) == 0;
}

/* Whether env[from..] names the variable that entry kv names. */
static bool s_named_in(char *const env[], size_t from, const char *kv) {
    for (size_t j = from; env && env[j]; j++) {
        if (s_same_name(kv, env[j])) {
            return true;
        }
    }
    return false;
}

/* environ with env's "K=V" entries set over it, in order (a later entry for a name wins, as
 * with setenv); NULL-terminated. The array is the caller's to free, the strings borrowed. */
static char **s_envp(char *const env[]) {
    size_t n_env = 0;
    while (env && env[n_env]) {
        n_env++;
    }
    size_t n_own = 0;
    while (environ[n_own]) {
        n_own++;
    }
    char **out = mem_calloc(n_own + n_env + 1, sizeof *out);
    size_t n = 0;
    for (size_t i = 0; i < n_own; i++) {
        if (!s_named_in(env, 0, environ[i])) {
            out[n++] = environ[i];
        }
    }
    for (size_t j = 0; j < n_env; j++) {
        if (!s_named_in(env, j + 1, env[j])) {
            out[n++] = env[j];
        }
    }
    return out;
}

/* posix_spawn of argv with env added and the file actions fa: the child runs no code of
 * this process, so a fork beside threads that hold malloc's or the sanitizer's locks cannot
 * hang it before exec. Aborts when the program cannot be started. */
static pid_t s_spawn(char *const argv[], char *const env[], posix_spawn_file_actions_t *fa) {
    char **envp = s_envp(env);
    pid_t pid = 0;
    int rc = posix_spawn(&pid, argv[0], fa, NULL, argv, envp);
    free(envp);
    if (rc != 0) {
        fprintf(stderr, "proc: cannot start %s: %s\n", argv[0], strerror(rc));
        abort();
    }
    return pid;
}

/* Spawns argv with stdout opened on out (NULL: /dev/null) and stderr on err (NULL: with
 * stdout), both with the given open flags. */
static pid_t s_spawn_logged(char *const argv[], char *const env[], const char *out, const char *err,
                            int flags) {
    posix_spawn_file_actions_t fa;
    ASSERT(posix_spawn_file_actions_init(&fa) == 0);
    ASSERT(posix_spawn_file_actions_addopen(&fa, 1, out ? out : "/dev/null",
                                            O_WRONLY | O_CREAT | flags, 0644) == 0);
    if (err) {
        ASSERT(posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | flags, 0644) ==
               0);
    } else {
        ASSERT(posix_spawn_file_actions_adddup2(&fa, 1, 2) == 0);
    }
    pid_t pid = s_spawn(argv, env, &fa);
    posix_spawn_file_actions_destroy(&fa);
    return pid;
}

void proc_die_with_parent(void) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    /* The parent may have died before the call took effect (then init adopted us, unless a
     * subreaper did, which this cannot tell). */
    if (getppid() == 1) {
        _exit(127);
    }
}

pid_t proc_spawn(char *const argv[], char *const env[], const char *log_path) {
    return s_spawn_logged(argv, env, log_path, NULL, O_APPEND);
}

pid_t proc_spawn_io(char *const argv[], char *const env[], const char *out_path,
                    const char *err_path) {
    return s_spawn_logged(argv, env, out_path, err_path, O_TRUNC);
}

int proc_run(char *const argv[], char *const env[], const char *out_path, int timeout_ms) {
    pid_t pid = s_spawn_logged(argv, env, out_path, NULL, O_TRUNC);
    int64_t deadline = id_now_ms() + timeout_ms;
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (id_now_ms() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        struct timespec ts = {0, 10 * 1000 * 1000}; /* poll interval */
        nanosleep(&ts, NULL);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int proc_stop(pid_t pid, int timeout_ms) {
    kill(pid, SIGTERM);
    int64_t deadline = id_now_ms() + timeout_ms;
    int status = 0;
    while (id_now_ms() < deadline) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) {
            return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

void proc_build_path(const char *given, const char *sub, char *out, size_t size) {
    const char *bd = getenv("CHATFLEET_BUILD_DIR");
    if (given) {
        snprintf(out, size, "%s", given);
    } else if (bd) {
        snprintf(out, size, "%s/%s", bd, sub);
    } else {
        char self[900];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        self[n > 0 ? n : 0] = '\0';
        char *slash = strrchr(self, '/');
        if (slash) {
            *slash = '\0';
        }
        snprintf(out, size, "%s/../%s", self, sub);
    }
}

char *proc_file_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        return mem_strdup("");
    }
    char *buf = mem_calloc(1, 1 << 20);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

char *proc_output(char *const argv[], char *const env[]) {
    int fds[2];
    ASSERT(pipe2(fds, O_CLOEXEC) == 0);
    posix_spawn_file_actions_t fa;
    ASSERT(posix_spawn_file_actions_init(&fa) == 0);
    ASSERT(posix_spawn_file_actions_adddup2(&fa, fds[1], 1) == 0);
    ASSERT(posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0) == 0);
    pid_t pid = s_spawn(argv, env, &fa);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    size_t cap = 4096;
    size_t len = 0;
    char *out = mem_alloc(cap);
    ssize_t n;
    while ((n = read(fds[0], out + len, cap - len - 1)) > 0) {
        len += (size_t)n;
        if (cap - len < 2) {
            cap *= 2;
            out = mem_realloc(out, cap);
        }
    }
    close(fds[0]);
    out[len] = '\0';
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        free(out);
        return NULL;
    }
    return out;
}

typedef struct {
    char *buf;
    size_t len;
} sink_t;

static size_t s_write(char *data, size_t size, size_t n, void *ctx) {
    sink_t *s = ctx;
    size_t add = size * n;
    s->buf = mem_realloc(s->buf, s->len + add + 1);
    memcpy(s->buf + s->len, data, add);
    s->len += add;
    s->buf[s->len] = '\0';
    return add;
}

int proc_http(const char *method, const char *url, const char *token, const char *body,
              proc_http_t *out) {
    return proc_https(method, url, token, body, NULL, out);
}

int proc_https(const char *method, const char *url, const char *token, const char *body,
               const char *ca_file, proc_http_t *out) {
    CURL *c = curl_easy_init();
    ASSERT(c);
    sink_t s = {mem_strdup(""), 0};
    struct curl_slist *h = NULL;
    char auth[256];
    if (token) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
        h = curl_slist_append(h, auth);
    }
    h = curl_slist_append(h, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, s_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 20000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
    if (ca_file) {
        curl_easy_setopt(c, CURLOPT_CAINFO, ca_file);
    }
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    }
    CURLcode rc = curl_easy_perform(c);
    out->status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
    out->body = s.buf;
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return rc == CURLE_OK ? 0 : -1;
}

void proc_http_free(proc_http_t *r) {
    free(r->body);
    r->body = NULL;
}

int proc_wait_http(const char *url, int timeout_ms) {
    return proc_wait_https(url, NULL, timeout_ms);
}

int proc_wait_https(const char *url, const char *ca_file, int timeout_ms) {
    int64_t deadline = id_now_ms() + timeout_ms;
    while (id_now_ms() < deadline) {
        proc_http_t r;
        int rc = proc_https("GET", url, NULL, NULL, ca_file, &r);
        long st = r.status;
        proc_http_free(&r);
        if (rc == 0 && st == 200) {
            return 0;
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return -1;
}

int proc_tcp_to_port(int port, proc_sock_t *out, int cap) {
    FILE *f = fopen("/proc/net/tcp", "r");
    if (!f) {
        return 0;
    }
    char line[512];
    int n = 0;
    bool header = true;
    while (n < cap && fgets(line, sizeof line, f)) {
        unsigned lport = 0;
        unsigned rport = 0;
        unsigned st = 0;
        unsigned long inode = 0;
        /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode; state 1 is established */
        if (!header &&
            sscanf(line, " %*s %*x:%x %*x:%x %x %*s %*s %*s %*s %*s %lu", &lport, &rport, &st,
                   &inode) == 4 &&
            (int)rport == port && st == 1) {
            out[n++] = (proc_sock_t){.inode = inode, .port = lport};
        }
        header = false;
    }
    fclose(f);
    return n;
}

int proc_sockets_of(pid_t pid, proc_sock_t *socks, int n) {
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
    DIR *d = pid > 0 ? opendir(dir) : NULL;
    if (!d) {
        return 0;
    }
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char path[400];
        char target[64];
        unsigned long inode = 0;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        ssize_t len = readlink(path, target, sizeof target - 1);
        if (len <= 0) {
            continue;
        }
        target[len] = '\0';
        if (sscanf(target, "socket:[%lu]", &inode) != 1) {
            continue;
        }
        for (int i = 0; i < n; i++) {
            if (socks[i].inode == inode) {
                socks[i].mine = true;
                count++;
                break;
            }
        }
    }
    closedir(d);
    return count;
}

long proc_status_value(pid_t pid, const char *key) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) {
        return -1;
    }
    char line[256];
    long v = -1;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, key, kl)) {
            v = strtol(line + kl, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v;
}

int proc_listen(const char *addr, int backlog, int *port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t len = sizeof a;
    if (fd < 0 || inet_pton(AF_INET, addr, &a.sin_addr) != 1 ||
        bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, backlog) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0) {
            close(fd);
        }
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}
