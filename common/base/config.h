/*
 * config: the effective settings of a process, from the environment (CHATFLEET_*,
 * ARCHITECTURE.md §11) over built-in defaults (ARCHITECTURE.md §10). Every process prints them once
 * at start.
 */
#ifndef CHATFLEET_CONFIG_H
#define CHATFLEET_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

/* TLS 1.3 and 1.2 only; on 1.2 forward secrecy (ECDHE) with AEAD ciphers only, no static RSA,
 * no finite-field DHE, no CBC (ARCHITECTURE.md §1.1). TLS 1.3 suites are all ECDHE and AEAD. */
#define CONFIG_TLS_PRIORITIES                                                                      \
    "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:-KX-ALL:+ECDHE-ECDSA:+ECDHE-RSA:-CIPHER-ALL:"      \
    "+CHACHA20-POLY1305:+AES-256-GCM:+AES-128-GCM:-MAC-ALL:+AEAD"

/* The furthest CHATFLEET_TEST_CLOCK_OFFSET_S moves the clock, either way: 100 years. */
#define CONFIG_CLOCK_OFFSET_MAX_S (100LL * 366 * 24 * 3600)

typedef struct {
    char *database_url; /* CHATFLEET_DATABASE_URL, required by DB users */
    char *http_listen;  /* CHATFLEET_HTTP_LISTEN */
    /* The gateway's HTTPS (ARCHITECTURE.md §1.1, "Transport security"): both files or neither
     * (neither: plain HTTP). */
    char *http_tls_cert;       /* CHATFLEET_HTTP_TLS_CERT: PEM certificate chain file */
    char *http_tls_key;        /* CHATFLEET_HTTP_TLS_KEY: PEM private key file */
    char *http_tls_priorities; /* CHATFLEET_HTTP_TLS_PRIORITIES: GnuTLS priority string */
    char *public_url;          /* CHATFLEET_PUBLIC_URL: the gateway's advertised base URL */
    char *console_dir;         /* CHATFLEET_CONSOLE_DIR: the console's files, "off", or NULL */
    char *broker_pub;          /* CHATFLEET_BROKER_PUB */
    char *broker_sub;          /* CHATFLEET_BROKER_SUB */
    char *broker_relay;        /* CHATFLEET_BROKER_RELAY */
    char *config_path;         /* CHATFLEET_CONFIG, or NULL */
    char *log_level;           /* CHATFLEET_LOG */
    int64_t lease_stale_ms;    /* CHATFLEET_LEASE_STALE_MS */
    int64_t heartbeat_ms;      /* CHATFLEET_HEARTBEAT_MS */
    int64_t acquire_poll_ms;   /* CHATFLEET_ACQUIRE_POLL_MS */
    int64_t stream_poll_ms;    /* CHATFLEET_STREAM_POLL_MS */
    int64_t queue_max;         /* CHATFLEET_QUEUE_MAX: queued messages per chat (429 beyond) */
    /* The gateway's HTTP admission (ARCHITECTURE.md §7.1, §10). */
    int64_t http_max_connections; /* CHATFLEET_HTTP_MAX_CONNECTIONS */
    int64_t http_max_per_address; /* CHATFLEET_HTTP_MAX_PER_ADDRESS */
    int64_t http_head_timeout_ms; /* CHATFLEET_HTTP_HEAD_TIMEOUT_MS */
    int64_t http_body_timeout_ms; /* CHATFLEET_HTTP_BODY_TIMEOUT_MS */
    int64_t http_io_threads;      /* CHATFLEET_HTTP_IO_THREADS */
    int64_t http_threads;         /* CHATFLEET_HTTP_THREADS: request handlers */
    int64_t stream_threads;       /* CHATFLEET_STREAM_THREADS: stream and watch reads */
    int64_t streams_per_user;     /* CHATFLEET_STREAMS_PER_USER: open streams and watches */
    int64_t auth_cache_ms;     /* CHATFLEET_AUTH_CACHE_MS: a verified token's lifetime (0: none) */
    int64_t auth_checks_per_s; /* CHATFLEET_AUTH_CHECKS_PER_S: token checks that reach the
                                  database, per client address (0: no limit) */
    int64_t auth_checks_burst; /* CHATFLEET_AUTH_CHECKS_BURST: of those, at once */
    int64_t chats_per_min;     /* CHATFLEET_CHATS_PER_MIN: chats a user creates through one
                                  gateway a minute, all of them at once at most (0: no limit) */
    /* A2A push notifications (api-gateway/a2a/a2a_push.h, deploy/OPERATIONS.md "Push
     * notifications"). The CIDR text is checked where it is used (common/net/egress.h). */
    char *push_allow_cidrs;          /* CHATFLEET_PUSH_ALLOW_CIDRS: allow-listed targets, or NULL */
    int64_t push_configs_max;        /* CHATFLEET_PUSH_CONFIGS_MAX: configs per user */
    int64_t push_deliveries_per_min; /* CHATFLEET_PUSH_DELIVERIES_PER_MIN: per user */
    int64_t push_timeout_ms;         /* CHATFLEET_PUSH_TIMEOUT_MS: one POST's deadline */
    int64_t push_inflight_max;       /* CHATFLEET_PUSH_INFLIGHT_MAX: POSTs at once per gateway */
    int64_t push_user_inflight_max;  /* CHATFLEET_PUSH_USER_INFLIGHT_MAX: one user's, of those */
    int64_t push_config_per_min;     /* CHATFLEET_PUSH_CONFIG_PER_MIN: one config's POSTs */
    /* Files (ARCHITECTURE.md §3, "Files"). */
    int64_t chat_max_attachments; /* CHATFLEET_CHAT_MAX_ATTACHMENTS: files a chat holds */
    int64_t file_quota_bytes;     /* CHATFLEET_FILE_QUOTA_BYTES: all of a user's files */
    /* The worker's auto-archive tick (worker/lease/README.md, "Auto-archive"). */
    int64_t auto_archive_days;        /* CHATFLEET_AUTO_ARCHIVE_DAYS: 0 (off) to 36500 */
    int64_t auto_archive_interval_ms; /* CHATFLEET_AUTO_ARCHIVE_INTERVAL_MS: between ticks */
    int64_t auto_archive_batch;       /* CHATFLEET_AUTO_ARCHIVE_BATCH: 1..1000 per tick */
    /* CHATFLEET_TEST_CLOCK_OFFSET_S: for tests only, seconds added to the wall clock where a
     * process reads the date (the auto-archive cutoff), so a test can move a day ahead; 0
     * in a deployment. At most CONFIG_CLOCK_OFFSET_MAX_S either way. */
    int64_t test_clock_offset_s;
} config_t;

/* True when name is a portable environment variable name, ^[A-Za-z_][A-Za-z0-9_]*$ (a model's
 * api_key_env, an MCP server's env). */
bool config_env_name_ok(const char *name);

/* The integer in the environment variable name: 0 with *out (dflt when it is unset or empty),
 * or -1 when it is set but not an integer of at least min (*out untouched; the caller says
 * why, in its own words). */
int config_env_int(const char *name, int64_t dflt, int64_t min, int64_t *out);

/* Reads the environment. Returns NULL and prints the offending variable and why on stderr
 * when a value is malformed (a number that is not a positive integer, say). */
config_t *config_new(void);
void config_destroy(config_t **self_p);

/* Logs one config line with every effective setting (the database password elided; TLS
 * files by path, never their contents). */
void config_log(const config_t *self);

/* Copies a libpq connection string (URL or key=value form) into out with any password (in
 * user:secret@, a password= parameter or a password keyword) replaced by "***". */
void config_redact_url(const char *url, char *out, size_t size);

#endif
