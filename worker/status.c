/* status: /healthz and /metrics for the worker; see status.h. */
#include "status.h"
#include "id.h"
#include "log.h"
#include "mem.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct status {
    struct MHD_Daemon *daemon;
    pthread_mutex_t lock;
    char *metrics;
    char worker_id[ID_UUID_LEN + 1];
};

static enum MHD_Result s_reply(struct MHD_Connection *conn, unsigned code, const char *type,
                               const char *body) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ok = MHD_queue_response(conn, code, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result s_access(void *cls, struct MHD_Connection *conn, const char *url,
                                const char *method, const char *version, const char *upload,
                                size_t *upload_size, void **req_cls) {
    (void)version;
    (void)upload;
    (void)upload_size;
    (void)req_cls;
    status_t *self = cls;
    if (strcmp(method, "GET") != 0) {
        return s_reply(conn, 405, "application/json", "{\"message\":\"Method not allowed.\"}");
    }
    if (!strcmp(url, "/healthz")) {
        char body[96];
        snprintf(body, sizeof body, "{\"status\":\"ok\",\"worker_id\":\"%s\"}", self->worker_id);
        return s_reply(conn, 200, "application/json", body);
    }
    if (!strcmp(url, "/metrics")) {
        pthread_mutex_lock(&self->lock);
        char *text = mem_strdup(self->metrics ? self->metrics : "");
        pthread_mutex_unlock(&self->lock);
        enum MHD_Result ok = s_reply(conn, 200, "text/plain; version=0.0.4", text);
        free(text);
        return ok;
    }
    return s_reply(conn, 404, "application/json", "{\"message\":\"Not found.\"}");
}

status_t *status_new(const char *listen, const char *worker_id) {
    char host[64];
    int port = 0;
    const char *colon = strrchr(listen, ':');
    struct sockaddr_in addr = {.sin_family = AF_INET};
    if (!colon || colon - listen >= (int)sizeof host || sscanf(colon + 1, "%d", &port) != 1 ||
        port <= 0 || port > 65535) {
        log_error("worker_status_listen_invalid", "listen=%s", listen);
        return NULL;
    }
    snprintf(host, sizeof host, "%.*s", (int)(colon - listen), listen);
    addr.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        log_error("worker_status_listen_invalid", "listen=%s", listen);
        return NULL;
    }
    status_t *self = mem_calloc(1, sizeof *self);
    pthread_mutex_init(&self->lock, NULL);
    snprintf(self->worker_id, sizeof self->worker_id, "%s", worker_id);
    self->daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL,
                                    NULL, s_access, self, MHD_OPTION_SOCK_ADDR,
                                    (struct sockaddr *)&addr, MHD_OPTION_END);
    if (!self->daemon) {
        log_error("worker_status_start_failed", "listen=%s", listen);
        pthread_mutex_destroy(&self->lock);
        free(self);
        return NULL;
    }
    log_info("worker_status_listening", "listen=%s", listen);
    return self;
}

void status_destroy(status_t **self_p) {
    status_t *self = *self_p;
    if (!self) {
        return;
    }
    MHD_stop_daemon(self->daemon);
    pthread_mutex_destroy(&self->lock);
    free(self->metrics);
    free(self);
    *self_p = NULL;
}

void status_set(status_t *self, char *text) {
    pthread_mutex_lock(&self->lock);
    free(self->metrics);
    self->metrics = text;
    pthread_mutex_unlock(&self->lock);
}
