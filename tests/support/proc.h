/*
 * proc: the real processes an end-to-end test runs (gateway, broker, worker), and a small
 * HTTP client for talking to them.
 */
#ifndef CHATFLEET_PROC_H
#define CHATFLEET_PROC_H

#include <stdbool.h>
#include <sys/types.h>

/* A free TCP port on 127.0.0.1 (bound and released; a tiny race is accepted in tests). */
int proc_free_port(void);

/* In a forked child: be killed when the test process dies, so that a test that crashes
 * leaves no server behind holding ports or ctest's output pipe (test_broker's brokers write
 * to the test's own stdout). Only for children forked by the main thread: the signal comes
 * when the forking thread exits, so proc_spawn, which the chaos run calls from its fault
 * thread, does not use it. */
void proc_die_with_parent(void);

/* Starts argv[0] with the current environment plus env ("K=V" strings, NULL-terminated);
 * stdout and stderr go to log_path (appended). Returns the pid; aborts on failure. The
 * child is started with posix_spawn, safe beside threads (a test's workload threads may hold
 * the allocator's locks at any instant). */
pid_t proc_spawn(char *const argv[], char *const env[], const char *log_path);

/* proc_spawn with stdout and stderr truncated into files of their own. */
pid_t proc_spawn_io(char *const argv[], char *const env[], const char *out_path,
                    const char *err_path);

/* A TCP socket listening on IPv4 addr at a free port (backlog queued connections), its port
 * into *port: the fd, or -1 when any step failed. */
int proc_listen(const char *addr, int backlog, int *port);

/* SIGTERM, then SIGKILL after timeout_ms; reaps the child. Returns its exit status or -1. */
int proc_stop(pid_t pid, int timeout_ms);

/* Runs argv with env added (as proc_spawn), stdout and stderr truncated into out_path, and
 * waits for it: its exit status (128 + signal when killed by one), or -1 when it was still
 * running after timeout_ms (it is killed then). */
int proc_run(char *const argv[], char *const env[], const char *out_path, int timeout_ms);

/* Runs argv to completion and returns its stdout (caller frees); NULL on failure. */
char *proc_output(char *const argv[], char *const env[]);

/* The path of a build-tree program into out: given when not NULL, else
 * $CHATFLEET_BUILD_DIR/sub, else sub beside the calling executable's directory's parent
 * (a bench run from BUILD/tests). */
void proc_build_path(const char *given, const char *sub, char *out, size_t size);

/* The text of the file at path, up to its first MiB (a process's output or log); "" when it
 * cannot be opened. Caller frees. */
char *proc_file_text(const char *path);

typedef struct {
    long status;
    char *body; /* NUL-terminated; caller frees via proc_http_free() */
} proc_http_t;

/* One HTTP request. token may be NULL (no Authorization); body may be NULL. Returns 0 when
 * a response arrived (any status), -1 when the connection failed. */
int proc_http(const char *method, const char *url, const char *token, const char *body,
              proc_http_t *out);
void proc_http_free(proc_http_t *r);

/* proc_http, trusting the PEM CAs in ca_file for an https url (NULL: the system's store);
 * the certificate and host name are always verified. */
int proc_https(const char *method, const char *url, const char *token, const char *body,
               const char *ca_file, proc_http_t *out);

/* Polls url until it answers 200 or timeout_ms passes. Returns 0 when it did. */
int proc_wait_http(const char *url, int timeout_ms);
/* The same, trusting ca_file for an https url (as proc_https). */
int proc_wait_https(const char *url, const char *ca_file, int timeout_ms);

/* An established TCP connection to a local port, from /proc/net/tcp. */
typedef struct {
    unsigned long inode;
    unsigned port; /* its local port (pg_stat_activity's client_port for a database) */
    bool mine;     /* set by proc_sockets_of: a descriptor of that process */
} proc_sock_t;

/* The established TCP connections to port on this host; at most cap. */
int proc_tcp_to_port(int port, proc_sock_t *out, int cap);

/* How many of the n connections are descriptors of pid (0 for pid <= 0 or no such
 * process); marks each one found (mine). */
int proc_sockets_of(pid_t pid, proc_sock_t *socks, int n);

/* The number after key (e.g. "VmRSS:", "Threads:") in /proc/PID/status, in its unit (kB for
 * memory), or -1 when the process or the key is not there. */
long proc_status_value(pid_t pid, const char *key);

#endif
