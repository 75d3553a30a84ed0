/* id: random UUIDs, the monotonic clock and deadlines on it; see id.h. */
#include "id.h"
#include "mem.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

int id_random(void *buf, size_t len) {
    unsigned char *p = buf;
    while (len > 0) {
        ssize_t n = getrandom(p, len, 0);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int id_uuid_new(char out[ID_UUID_LEN + 1]) {
    unsigned char b[16];
    if (id_random(b, sizeof b) != 0) {
        return -1;
    }
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    snprintf(out, ID_UUID_LEN + 1,
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
             b[15]);
    return 0;
}

int id_uuid_valid(const char *s) {
    if (!s) {
        return 0;
    }
    for (int i = 0; i < ID_UUID_LEN; i++) {
        int dash = (i == 8 || i == 13 || i == 18 || i == 23);
        if (dash ? s[i] != '-' : !isxdigit((unsigned char)s[i])) {
            return 0;
        }
    }
    return s[ID_UUID_LEN] == '\0';
}

int64_t id_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t id_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

struct timespec id_timespec_at(int64_t at_ms) {
    if (at_ms < 0) {
        at_ms = 0;
    }
    return (struct timespec){.tv_sec = (time_t)(at_ms / 1000),
                             .tv_nsec = (long)(at_ms % 1000) * 1000000L};
}

void id_cond_init(pthread_cond_t *cond) {
    pthread_condattr_t attr;
    ASSERT(pthread_condattr_init(&attr) == 0);
    ASSERT(pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0);
    ASSERT(pthread_cond_init(cond, &attr) == 0);
    pthread_condattr_destroy(&attr);
}

void id_wall_rfc3339_ms(char out[ID_RFC3339_MS_LEN + 1]) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char buf[64];
    int n = snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     (int)(ts.tv_nsec / 1000000L));
    ASSERT(n == ID_RFC3339_MS_LEN); /* years 0 to 9999 */
    memcpy(out, buf, ID_RFC3339_MS_LEN + 1);
}
