/* runner: see runner.h. */
#include "runner.h"
#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct runner {
    char chat_id[ID_UUID_LEN + 1];
    char worker_id[ID_UUID_LEN + 1];
    char runner_id[ID_UUID_LEN + 1];
    bool seen; /* an event was processed: the fields below are its values */
    int64_t snapshot_version;
    int64_t history_version;
    int64_t generation_attempt;
    char status[16];
    uint64_t active;
};

runner_t *runner_new(const char *chat_id, const char *worker_id, const char *runner_id) {
    runner_t *self = mem_calloc(1, sizeof *self);
    snprintf(self->chat_id, sizeof self->chat_id, "%s", chat_id);
    snprintf(self->worker_id, sizeof self->worker_id, "%s", worker_id);
    snprintf(self->runner_id, sizeof self->runner_id, "%s", runner_id);
    return self;
}

void runner_destroy(runner_t **self_p) {
    free(*self_p);
    *self_p = NULL;
}

const char *runner_chat_id(const runner_t *self) {
    return self->chat_id;
}

const char *runner_runner_id(const runner_t *self) {
    return self->runner_id;
}

static void s_spawn(runner_action_t *act, task_kind_t kind, const char *status, int64_t hv) {
    act->spawn = true;
    act->spawn_kind = kind;
    snprintf(act->status, sizeof act->status, "%s", status);
    act->history_version = hv;
}

void runner_on_event(runner_t *self, const hint_update_t *ev, runner_action_t *act) {
    memset(act, 0, sizeof *act);
    /* 1. Stale or duplicate. */
    if (self->seen && ev->snapshot_version <= self->snapshot_version) {
        act->ignored = true;
        return;
    }
    /* 2. Ownership moved on. */
    if (strcmp(ev->worker_id, self->worker_id) != 0 ||
        strcmp(ev->runner_id, self->runner_id) != 0) {
        act->cleanup = true;
        goto done;
    }
    /* 3. Same work as now. */
    bool status_same = self->seen && strcmp(ev->status, self->status) == 0;
    if (self->seen && ev->history_version == self->history_version && status_same) {
        goto done;
    }
    /* 4. New work: cancel what runs, without waiting. (5, collecting finished tasks, is
     * the manager's: it hears of each end.) */
    if (!self->seen || ev->history_version > self->history_version || !status_same) {
        if (self->active) {
            act->cancel = true;
            act->cancel_id = self->active;
            self->active = 0;
        }
    }
    if (ev->archived) {
        s_spawn(act, TASK_ABANDON, "", ev->history_version); /* 6 */
    } else if (!strcmp(ev->status, "running")) {
        s_spawn(act, TASK_GENERATION, "running", ev->history_version); /* 7 */
    } else if (!strcmp(ev->status, "interrupting")) {
        s_spawn(act, TASK_INTERRUPT, "interrupting", ev->history_version); /* 8 */
    } else if (!strcmp(ev->status, "requires_action")) {
        s_spawn(act, TASK_DEADLINE, "requires_action", ev->history_version); /* 9 */
    } else {
        s_spawn(act, TASK_ABANDON, "", ev->history_version); /* 10 */
    }
done:
    self->seen = true;
    self->snapshot_version = ev->snapshot_version;
    self->history_version = ev->history_version;
    self->generation_attempt = ev->generation_attempt;
    snprintf(self->status, sizeof self->status, "%s", ev->status);
}

void runner_set_active(runner_t *self, uint64_t id) {
    self->active = id;
}

void runner_task_ended(runner_t *self, uint64_t id) {
    if (self->active == id) {
        self->active = 0;
    }
}

uint64_t runner_active(const runner_t *self) {
    return self->active;
}
