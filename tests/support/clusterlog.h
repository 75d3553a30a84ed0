/*
 * clusterlog: reading the logfmt lines that a test cluster's processes write to their log
 * files (cluster_log), for end-to-end tests that assert on what a process did: how many lines
 * name an event for a chat, and the value of a key on an event's line (a worker's id from
 * event=worker_started). A missing file reads as an empty log: a process may not have
 * written yet.
 */
#ifndef CHATFLEET_CLUSTERLOG_H
#define CHATFLEET_CLUSTERLOG_H

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

#endif
