/* proc: child processes and HTTP for end-to-end tests; see proc.h. */
#include "proc.h"
#include "id.h"
#include "mem.h"

#include <dirent.h>
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

static void s_child_env(char *const env[]) {
    for (int i = 0; env && env[i]; i++) {
        char *kv = mem_strdup(env[i]);
        char *eq = strchr(kv, '=');
        ASSERT(eq);
        *eq = '\0';
        setenv(kv, eq + 1, 1);
        free(kv);
    }
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
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        s_child_env(env);
        int fd = open(log_path ? log_path : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

int proc_run(char *const argv[], char *const env[], const char *out_path, int timeout_ms) {
    unlink(out_path);
    pid_t pid = proc_spawn(argv, env, out_path);
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
    ASSERT(pipe(fds) == 0);
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        s_child_env(env);
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) {
            dup2(devnull, 2);
        }
        execv(argv[0], argv);
        _exit(127);
    }
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
