/*
 * clusterlog: reading the logfmt lines that a test cluster's processes write to their log
 * files (cluster_log), for end-to-end tests that assert on what a process did: how many lines
 * name an event for a chat, and the value of a key on an event's line (a worker's id from
 * event=worker_started). A missing file reads as an empty log: a process may not have
 * written yet. Also the cmocka-failing waits the worker tests share (a value in the
 * database, a chat's status, a worker ready).
 */
#ifndef CHATFLEET_CLUSTERLOG_H
#define CHATFLEET_CLUSTERLOG_H

#include "cluster.h"

#include <stdint.h>
#include <sys/types.h>

/* The number of lines of path that contain a and, when b is not NULL, b too; 0 when the file
 * cannot be opened. Lines longer than 8 KiB count once per 8 KiB piece that matches. */
int clusterlog_count(const char *path, const char *a, const char *b);

/* The value of key on the first line of path with "event=EVENT " (logfmt: " key=value", up to
 * the next space), newly allocated (caller frees), or NULL when no such line has been
 * written yet. */
char *clusterlog_value(const char *path, const char *event, const char *key);

/* Polls clusterlog_value until it finds the value, pid exits or timeout_ms passes; the value
 * (caller frees) or NULL. The exit check does not reap pid, so its owner (the cluster) still
 * can. */
char *clusterlog_wait_value(const char *path, const char *event, const char *key, pid_t pid,
                            int64_t timeout_ms);

/* The id worker (an index of c) gave itself in its current log (event=worker_started), newly
 * allocated (caller frees); waits up to timeout_ms for the line, and returns NULL when it did
 * not appear or the worker exited first. */
char *clusterlog_worker_id(const cluster_t *c, int worker, int64_t timeout_ms);

/* The index among the first workers of c whose current log names worker_id as its own, or
 * -1: which process owns a chat that the database says worker_id owns. */
int clusterlog_worker_of(const cluster_t *c, int workers, const char *worker_id);

/* cluster_wait that fails the test past the deadline (naming the last value seen); the
 * milliseconds it took. */
int64_t clusterlog_expect(cluster_t *c, const char *sql, const char *want, int64_t timeout_ms);

/* The same for a chat's status. */
int64_t clusterlog_expect_status(cluster_t *c, const char *chat, const char *status,
                                 int64_t timeout_ms);

/* Waits until worker i has written its id (fails the test otherwise). */
void clusterlog_worker_ready(cluster_t *c, int worker);

/* (Re)starts worker i and waits until it is ready. */
void clusterlog_worker_start(cluster_t *c, int worker);

#endif
