/* log: logfmt lines on stderr; see log.h. */
#include "log.h"
#include "mem.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char s_proc[32] = "chatfleet";
static log_level_t s_level = LOG_LEVEL_INFO;
static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *s_names[] = {"debug", "info", "warn", "error"};

int log_init(const char *proc, const char *level) {
    snprintf(s_proc, sizeof s_proc, "%s", proc ? proc : "chatfleet");
    if (!level || !*level) {
        return 0;
    }
    for (int i = 0; i < 4; i++) {
        if (strcmp(level, s_names[i]) == 0) {
            s_level = (log_level_t)i;
            return 0;
        }
    }
    return -1;
}

bool log_enabled(log_level_t level) {
    return level >= s_level;
}

void log_event(log_level_t level, const char *event, const char *fmt, ...) {
    if (!log_enabled(level)) {
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    char *rest = NULL;
    if (fmt && *fmt) {
        va_list ap;
        va_start(ap, fmt);
        rest = mem_vprintf(fmt, ap);
        va_end(ap);
    }
    pthread_mutex_lock(&s_lock);
    fprintf(stderr, "ts=%s.%03ldZ level=%s proc=%s event=%s%s%s\n", when, ts.tv_nsec / 1000000,
            s_names[level], s_proc, event, rest ? " " : "", rest ? rest : "");
    fflush(stderr);
    pthread_mutex_unlock(&s_lock);
    free(rest);
}

const char *log_quote(const char *s, char *buf, int size) {
    ASSERT(size >= 3);
    int o = 0;
    buf[o++] = '"';
    for (; s && *s && o < size - 3; s++) {
        char c = *s;
        if (c == '"' || c == '\\') {
            buf[o++] = '\\';
        } else if (c == '\n' || c == '\r' || c == '\t') {
            c = ' ';
        }
        buf[o++] = c;
    }
    buf[o++] = '"';
    buf[o] = '\0';
    return buf;
}
