/*
 * runner: the event processing of one chat runner (ARCHITECTURE.md §1.3), as a pure state
 * machine.
 *
 * A runner is scoped to one (chat, runner_id). It is fed events (update hints, rows of the
 * manager's sync loop, the rows its own tasks committed) and answers, for each, what must
 * happen: nothing, ask the manager to clean the runner up, cancel the active task, and/or
 * spawn a task of a kind with a fence (status, history version). It performs no I/O and
 * owns no threads: the manager hosts every runner in its loop and carries out the actions.
 * That keeps the rules unit-testable, and costs an idle chat a few hundred bytes instead of
 * a thread (ARCHITECTURE.md §1.2; worker/sched/README.md, "Why runners are not threads").
 */
#ifndef CHATFLEET_RUNNER_H
#define CHATFLEET_RUNNER_H

#include <stdbool.h>
#include <stdint.h>

#include "hint.h"
#include "task.h"

typedef struct {
    bool ignored; /* stale snapshot_version: nothing happened, local state unchanged */
    bool cleanup; /* the runner no longer owns the chat: the manager cleans it up */
    bool cancel;  /* cancel the active task (cancel_id) without waiting for it */
    uint64_t cancel_id;
    bool spawn; /* spawn a task of spawn_kind with the fence below */
    task_kind_t spawn_kind;
    char status[16]; /* the spawned task's expected status ("" for abandon: any) */
    int64_t history_version;
} runner_action_t;

typedef struct runner runner_t;

runner_t *runner_new(const char *chat_id, const char *worker_id, const char *runner_id);
void runner_destroy(runner_t **self_p);

const char *runner_chat_id(const runner_t *self);
const char *runner_runner_id(const runner_t *self);

/* Processes one event, the ten steps of ARCHITECTURE.md §1.3 in order, and fills *act. When
 * act->spawn is set the caller spawns the task and reports its id with runner_set_active. */
void runner_on_event(runner_t *self, const hint_update_t *ev, runner_action_t *act);

/* Marks task id as the active one. */
void runner_set_active(runner_t *self, uint64_t id);

/* A task ended: when it was the active one, there is none now. */
void runner_task_ended(runner_t *self, uint64_t id);

/* The active task id, or 0. */
uint64_t runner_active(const runner_t *self);

#endif
