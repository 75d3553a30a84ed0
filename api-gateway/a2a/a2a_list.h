/*
 * a2a_list: ListTasks (A2A v1.0 §3.1.4) over the tasks a2a_task.h derives: every turn of the
 * caller's chats (its user message), every queued message, and every recorded outcome that
 * no row carries any more (a canceled queued message, a refused request). Sorted by status
 * timestamp, newest first (task id descending on a tie); cursor pagination, the cursor being
 * the last task's (timestamp, id), so a page never repeats one an earlier page gave.
 */
#ifndef CHATFLEET_A2A_LIST_H
#define CHATFLEET_A2A_LIST_H

#include <jansson.h>
#include <libpq-fe.h>

#define A2A_LIST_PAGE_DEFAULT 50  /* tasks in a page when pageSize is absent */
#define A2A_LIST_PAGE_MAX     100 /* the largest pageSize (the spec's bound) */

/* Answers ListTasks params for user_id: 0 with *result the ListTasksResponse (tasks,
 * nextPageToken, "" on the last page, pageSize, totalSize); -1 with *data naming the invalid
 * field (params.pageSize, params.status, params.pageToken, params.contextId,
 * params.statusTimestampAfter, params.historyLength, params.includeArtifacts); -2 on a
 * database error. Filters: contextId, status (a v1 state name), statusTimestampAfter (ISO
 * 8601, inclusive); includeArtifacts (default false) keeps the artifacts, else the member is
 * left out; historyLength is accepted (tasks carry no history). */
int a2a_list_tasks(PGconn *conn, const char *user_id, json_t *params, json_t **result,
                   json_t **data);

#endif
