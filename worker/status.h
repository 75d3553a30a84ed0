/*
 * status: the worker's /healthz and /metrics on a loopback port (CHATFLEET_WORKER_HTTP_LISTEN,
 * host:port; unset = off). The owner refreshes the metrics text (status_set) from its own
 * thread, where the actors can be asked; the HTTP thread only serves the latest text.
 */
#ifndef CHATFLEET_STATUS_H
#define CHATFLEET_STATUS_H

typedef struct status status_t;

/* Serves on listen ("127.0.0.1:9101"). NULL (logged) when it cannot bind or parse it. */
status_t *status_new(const char *listen, const char *worker_id);
void status_destroy(status_t **self_p);

/* Replaces the metrics text; takes ownership of text (heap). Thread-safe. */
void status_set(status_t *self, char *text);

#endif
