/* hint: the logging sink; see hint.h. */
#include "hint.h"
#include "log.h"

static void s_log_update(void *ctx, const hint_update_t *h) {
    (void)ctx;
    log_debug("hint_update",
              "chat_id=%s snapshot_version=%lld worker_id=%s runner_id=%s history_version=%lld "
              "queue_version=%lld retry_state_version=%lld generation_attempt=%lld status=%s "
              "archived=%d",
              h->chat_id, (long long)h->snapshot_version, h->worker_id, h->runner_id,
              (long long)h->history_version, (long long)h->queue_version,
              (long long)h->retry_state_version, (long long)h->generation_attempt, h->status,
              h->archived);
}

static void s_log_ownership(void *ctx, const hint_ownership_t *h) {
    (void)ctx;
    log_debug("hint_ownership", "chat_id=%s snapshot_version=%lld", h->chat_id,
              (long long)h->snapshot_version);
}

const hint_sink_t hint_sink_log = {s_log_update, s_log_ownership, NULL};
