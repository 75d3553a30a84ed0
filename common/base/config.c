/* config: environment over defaults; see config.h. */
#include "config.h"
#include "log.h"
#include "mem.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *s_str(const char *name, const char *dflt) {
    const char *v = getenv(name);
    if (v && *v) {
        return mem_strdup(v);
    }
    return dflt ? mem_strdup(dflt) : NULL;
}

bool config_env_name_ok(const char *name) {
    if (!name ||
        !((*name >= 'A' && *name <= 'Z') || (*name >= 'a' && *name <= 'z') || *name == '_')) {
        return false;
    }
    for (const char *c = name; *c; c++) {
        if (!((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') ||
              *c == '_')) {
            return false;
        }
    }
    return true;
}

int config_env_int(const char *name, int64_t dflt, int64_t min, int64_t *out) {
    const char *v = getenv(name);
    if (!v || !*v) {
        *out = dflt;
        return 0;
    }
    errno = 0;
    char *end = NULL;
    long long n = strtoll(v, &end, 10);
    if (errno || *end || n < min) {
        return -1;
    }
    *out = n;
    return 0;
}

static int s_num(const char *name, int64_t dflt, int64_t *out) {
    if (config_env_int(name, dflt, 1, out) != 0) {
        fprintf(stderr, "config: %s=%s is not a positive integer\n", name, getenv(name));
        return -1;
    }
    return 0;
}

/* s_num where 0 is a value too (it turns a feature off). */
static int s_num_or_zero(const char *name, int64_t dflt, int64_t *out) {
    if (config_env_int(name, dflt, 0, out) != 0) {
        fprintf(stderr, "config: %s=%s is not a non-negative integer\n", name, getenv(name));
        return -1;
    }
    return 0;
}

/* The auto-archive settings and the test clock offset: 0, or -1 (printed). */
static int s_auto_archive(config_t *self) {
    if (s_num_or_zero("CHATFLEET_AUTO_ARCHIVE_DAYS", 0, &self->auto_archive_days) ||
        s_num("CHATFLEET_AUTO_ARCHIVE_INTERVAL_MS", 3600000, &self->auto_archive_interval_ms) ||
        s_num("CHATFLEET_AUTO_ARCHIVE_BATCH", 100, &self->auto_archive_batch)) {
        return -1;
    }
    if (self->auto_archive_days > 36500 || self->auto_archive_batch > 1000) {
        fprintf(stderr,
                "config: CHATFLEET_AUTO_ARCHIVE_DAYS=%lld must be 0 (off) to 36500 and "
                "CHATFLEET_AUTO_ARCHIVE_BATCH=%lld 1 to 1000\n",
                (long long)self->auto_archive_days, (long long)self->auto_archive_batch);
        return -1;
    }
    if (config_env_int("CHATFLEET_TEST_CLOCK_OFFSET_S", 0, -CONFIG_CLOCK_OFFSET_MAX_S,
                       &self->test_clock_offset_s) != 0 ||
        self->test_clock_offset_s > CONFIG_CLOCK_OFFSET_MAX_S) {
        fprintf(stderr,
                "config: CHATFLEET_TEST_CLOCK_OFFSET_S=%s must be an integer of seconds within "
                "%lld either way (a setting for tests only)\n",
                getenv("CHATFLEET_TEST_CLOCK_OFFSET_S"), (long long)CONFIG_CLOCK_OFFSET_MAX_S);
        return -1;
    }
    return 0;
}

config_t *config_new(void) {
    config_t *self = mem_calloc(1, sizeof *self);
    self->database_url = s_str("CHATFLEET_DATABASE_URL", NULL);
    self->http_listen = s_str("CHATFLEET_HTTP_LISTEN", "127.0.0.1:8080");
    self->http_tls_cert = s_str("CHATFLEET_HTTP_TLS_CERT", NULL);
    self->http_tls_key = s_str("CHATFLEET_HTTP_TLS_KEY", NULL);
    self->http_tls_priorities = s_str("CHATFLEET_HTTP_TLS_PRIORITIES", CONFIG_TLS_PRIORITIES);
    self->public_url = s_str("CHATFLEET_PUBLIC_URL", NULL);
    self->console_dir = s_str("CHATFLEET_CONSOLE_DIR", NULL);
    self->broker_pub = s_str("CHATFLEET_BROKER_PUB", "tcp://127.0.0.1:5601");
    self->broker_sub = s_str("CHATFLEET_BROKER_SUB", "tcp://127.0.0.1:5602");
    self->broker_relay = s_str("CHATFLEET_BROKER_RELAY", "tcp://127.0.0.1:5603");
    self->config_path = s_str("CHATFLEET_CONFIG", NULL);
    self->log_level = s_str("CHATFLEET_LOG", "info");
    self->push_allow_cidrs = s_str("CHATFLEET_PUSH_ALLOW_CIDRS", NULL);
    if (s_num("CHATFLEET_LEASE_STALE_MS", 30000, &self->lease_stale_ms) ||
        s_num("CHATFLEET_HEARTBEAT_MS", 9000, &self->heartbeat_ms) ||
        s_num("CHATFLEET_ACQUIRE_POLL_MS", 30000, &self->acquire_poll_ms) ||
        s_num("CHATFLEET_STREAM_POLL_MS", 10000, &self->stream_poll_ms) ||
        s_num("CHATFLEET_QUEUE_MAX", 100, &self->queue_max) ||
        s_num("CHATFLEET_HTTP_MAX_CONNECTIONS", 10000, &self->http_max_connections) ||
        s_num("CHATFLEET_HTTP_MAX_PER_ADDRESS", 256, &self->http_max_per_address) ||
        s_num("CHATFLEET_HTTP_HEAD_TIMEOUT_MS", 10000, &self->http_head_timeout_ms) ||
        s_num("CHATFLEET_HTTP_BODY_TIMEOUT_MS", 30000, &self->http_body_timeout_ms) ||
        s_num("CHATFLEET_HTTP_IO_THREADS", 2, &self->http_io_threads) ||
        s_num("CHATFLEET_HTTP_THREADS", 12, &self->http_threads) ||
        s_num("CHATFLEET_STREAM_THREADS", 4, &self->stream_threads) ||
        s_num("CHATFLEET_STREAMS_PER_USER", 100, &self->streams_per_user) ||
        s_num_or_zero("CHATFLEET_AUTH_CACHE_MS", 5000, &self->auth_cache_ms) ||
        s_num_or_zero("CHATFLEET_AUTH_CHECKS_PER_S", 20, &self->auth_checks_per_s) ||
        s_num("CHATFLEET_AUTH_CHECKS_BURST", 100, &self->auth_checks_burst) ||
        s_num_or_zero("CHATFLEET_CHATS_PER_MIN", 600, &self->chats_per_min) ||
        s_num("CHATFLEET_PUSH_CONFIGS_MAX", 100, &self->push_configs_max) ||
        s_num("CHATFLEET_PUSH_DELIVERIES_PER_MIN", 600, &self->push_deliveries_per_min) ||
        s_num("CHATFLEET_PUSH_TIMEOUT_MS", 5000, &self->push_timeout_ms) ||
        s_num("CHATFLEET_PUSH_INFLIGHT_MAX", 256, &self->push_inflight_max) ||
        s_num("CHATFLEET_PUSH_USER_INFLIGHT_MAX", 8, &self->push_user_inflight_max) ||
        s_num("CHATFLEET_PUSH_CONFIG_PER_MIN", 60, &self->push_config_per_min) ||
        s_num("CHATFLEET_CHAT_MAX_ATTACHMENTS", 50, &self->chat_max_attachments) ||
        s_num("CHATFLEET_FILE_QUOTA_BYTES", 1024LL * 1024 * 1024, &self->file_quota_bytes) ||
        s_auto_archive(self)) {
        config_destroy(&self);
        return NULL;
    }
    if (self->http_max_connections > 1000000 || self->http_io_threads > 64 ||
        self->http_threads > 256 || self->stream_threads > 256 ||
        self->chat_max_attachments > 10000) {
        fprintf(stderr, "config: CHATFLEET_HTTP_MAX_CONNECTIONS must be at most 1000000 and "
                        "CHATFLEET_HTTP_IO_THREADS, CHATFLEET_HTTP_THREADS and "
                        "CHATFLEET_STREAM_THREADS at most 64, 256 and 256, and "
                        "CHATFLEET_CHAT_MAX_ATTACHMENTS at most 10000\n");
        config_destroy(&self);
        return NULL;
    }
    if (!self->http_tls_cert != !self->http_tls_key) {
        fprintf(stderr,
                "config: %s is set but %s is not: HTTPS needs both files, plain HTTP "
                "neither\n",
                self->http_tls_cert ? "CHATFLEET_HTTP_TLS_CERT" : "CHATFLEET_HTTP_TLS_KEY",
                self->http_tls_cert ? "CHATFLEET_HTTP_TLS_KEY" : "CHATFLEET_HTTP_TLS_CERT");
        config_destroy(&self);
        return NULL;
    }
    if (self->heartbeat_ms * 3 > self->lease_stale_ms) {
        fprintf(stderr,
                "config: CHATFLEET_HEARTBEAT_MS=%lld must be at most a third of "
                "CHATFLEET_LEASE_STALE_MS=%lld\n",
                (long long)self->heartbeat_ms, (long long)self->lease_stale_ms);
        config_destroy(&self);
        return NULL;
    }
    return self;
}

void config_destroy(config_t **self_p) {
    config_t *self = *self_p;
    if (!self) {
        return;
    }
    free(self->database_url);
    free(self->http_listen);
    free(self->http_tls_cert);
    free(self->http_tls_key);
    free(self->http_tls_priorities);
    free(self->public_url);
    free(self->console_dir);
    free(self->broker_pub);
    free(self->broker_sub);
    free(self->broker_relay);
    free(self->config_path);
    free(self->log_level);
    free(self->push_allow_cidrs);
    free(self);
    *self_p = NULL;
}

/* Replaces out[from, to) with "***" in place (out holds size bytes; a text that no longer
 * fits is cut at the end). Returns the position after the stars. */
static char *s_stars(char *out, size_t size, char *from, char *to) {
    size_t tail = strlen(to) + 1;
    size_t at = (size_t)(from - out) + 3;
    if (at >= size) {
        *from = '\0';
        return from;
    }
    if (at + tail > size) {
        tail = size - at;
        to[tail - 1] = '\0';
    }
    memmove(out + at, to, tail);
    memcpy(from, "***", 3);
    return out + at;
}

/* Replaces the value after each "password=" in out (a URL query parameter or a keyword of
 * the key=value form, quoted or not) with "***". */
static void s_redact_param(char *out, size_t size) {
    for (char *p = out; (p = strstr(p, "password="));) {
        bool starts = p == out || p[-1] == '?' || p[-1] == '&' || p[-1] == ' ';
        p += strlen("password=");
        if (!starts) {
            continue;
        }
        char *end = p;
        if (*end == '\'') {
            for (end++; *end && *end != '\''; end += end[0] == '\\' && end[1] ? 2 : 1) {
            }
            end += *end ? 1 : 0;
        } else {
            end += strcspn(end, "& ");
        }
        p = s_stars(out, size, p, end);
    }
}

void config_redact_url(const char *url, char *out, size_t size) {
    /* Redacted whole first, then cut to size: a cut never leaves part of a password. Each
     * "***" replaces at least a separator ("user:@", "password=") of 2+ bytes, so twice the
     * length is room enough. */
    const char *src = url ? url : "(unset)";
    size_t room = 2 * strlen(src) + 16;
    char *full = mem_calloc(1, room);
    snprintf(full, room, "%s", src);
    char *scheme = strstr(full, "://");
    char *at = scheme ? strchr(scheme + 3, '@') : NULL;
    char *colon = scheme ? strchr(scheme + 3, ':') : NULL;
    char *slash = scheme ? strchr(scheme + 3, '/') : NULL;
    if (at && colon && colon < at && (!slash || at < slash)) {
        s_stars(full, room, colon + 1, at);
    }
    s_redact_param(full, room);
    snprintf(out, size, "%s", full);
    free(full);
}

void config_log(const config_t *self) {
    char url[1024];
    config_redact_url(self->database_url, url, sizeof url);
    log_info(
        "config",
        "database_url=%s http_listen=%s http_tls_cert=%s http_tls_key=%s "
        "http_tls_priorities=%s public_url=%s console_dir=%s broker_pub=%s broker_sub=%s "
        "broker_relay=%s "
        "config=%s log=%s lease_stale_ms=%lld heartbeat_ms=%lld acquire_poll_ms=%lld "
        "stream_poll_ms=%lld queue_max=%lld http_max_connections=%lld "
        "http_max_per_address=%lld http_head_timeout_ms=%lld http_body_timeout_ms=%lld "
        "http_io_threads=%lld http_threads=%lld stream_threads=%lld streams_per_user=%lld "
        "auth_cache_ms=%lld auth_checks_per_s=%lld auth_checks_burst=%lld chats_per_min=%lld "
        "push_allow_cidrs=%s "
        "push_configs_max=%lld "
        "push_deliveries_per_min=%lld push_timeout_ms=%lld push_inflight_max=%lld "
        "push_user_inflight_max=%lld push_config_per_min=%lld chat_max_attachments=%lld "
        "file_quota_bytes=%lld "
        "auto_archive_days=%lld auto_archive_interval_ms=%lld auto_archive_batch=%lld "
        "test_clock_offset_s=%lld",
        url, self->http_listen, self->http_tls_cert ? self->http_tls_cert : "(unset)",
        self->http_tls_key ? self->http_tls_key : "(unset)", self->http_tls_priorities,
        self->public_url ? self->public_url : "(listen address)",
        self->console_dir ? self->console_dir : "(built-in)", self->broker_pub, self->broker_sub,
        self->broker_relay, self->config_path ? self->config_path : "(built-in sim)",
        self->log_level, (long long)self->lease_stale_ms, (long long)self->heartbeat_ms,
        (long long)self->acquire_poll_ms, (long long)self->stream_poll_ms,
        (long long)self->queue_max, (long long)self->http_max_connections,
        (long long)self->http_max_per_address, (long long)self->http_head_timeout_ms,
        (long long)self->http_body_timeout_ms, (long long)self->http_io_threads,
        (long long)self->http_threads, (long long)self->stream_threads,
        (long long)self->streams_per_user, (long long)self->auth_cache_ms,
        (long long)self->auth_checks_per_s, (long long)self->auth_checks_burst,
        (long long)self->chats_per_min, self->push_allow_cidrs ? self->push_allow_cidrs : "(none)",
        (long long)self->push_configs_max, (long long)self->push_deliveries_per_min,
        (long long)self->push_timeout_ms, (long long)self->push_inflight_max,
        (long long)self->push_user_inflight_max, (long long)self->push_config_per_min,
        (long long)self->chat_max_attachments, (long long)self->file_quota_bytes,
        (long long)self->auto_archive_days, (long long)self->auto_archive_interval_ms,
        (long long)self->auto_archive_batch, (long long)self->test_clock_offset_s);
}
