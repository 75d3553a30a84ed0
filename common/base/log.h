/*
 * log: one structured line per significant event, on stderr.
 *
 * Lines are logfmt: `ts=... level=info proc=worker event=acquire chat_id=... key=value`.
 * The process name and level threshold are set once at start (CHATFLEET_LOG); the callers
 * pass the event name and their own key=value pairs (chat id, worker id, versions).
 */
#ifndef CHATFLEET_LOG_H
#define CHATFLEET_LOG_H

#include <stdbool.h>

/* Named LOG_LEVEL_* because <syslog.h> (pulled in by czmq.h) owns LOG_INFO and friends. */
typedef enum { LOG_LEVEL_DEBUG = 0, LOG_LEVEL_INFO, LOG_LEVEL_WARN, LOG_LEVEL_ERROR } log_level_t;

/* Sets the process name used in every line and the threshold ("debug", "info", "warn",
 * "error"). Returns -1 (and keeps "info") when the level name is unknown. */
int log_init(const char *proc, const char *level);

/* True when lines at this level are written. */
bool log_enabled(log_level_t level);

/* Writes one line: the event name, then the caller's key=value text (may be NULL). Values
 * with spaces must be quoted by the caller with log_quote(). Thread-safe. */
void log_event(log_level_t level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define log_debug(ev, ...) log_event(LOG_LEVEL_DEBUG, ev, __VA_ARGS__)
#define log_info(ev, ...)  log_event(LOG_LEVEL_INFO, ev, __VA_ARGS__)
#define log_warn(ev, ...)  log_event(LOG_LEVEL_WARN, ev, __VA_ARGS__)
#define log_error(ev, ...) log_event(LOG_LEVEL_ERROR, ev, __VA_ARGS__)

/* Quotes s for a logfmt value into buf (bounded by size, truncating); returns buf. */
const char *log_quote(const char *s, char *buf, int size);

#endif
