/*
 * bench_streams: opens N SSE streams (curl multi) against a running gateway and holds them
 * until each has received its first event, then reports how long that took and waits for
 * a line on stdin before closing them (so the driver can read the gateway's memory).
 *
 *   bench_streams BASE_URL TOKEN N CHAT_ID...
 */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "id.h"
#include "mem.h"

typedef struct {
    int got;
} conn_t;

static size_t s_write(char *data, size_t size, size_t n, void *ctx) {
    (void)data;
    ((conn_t *)ctx)->got = 1;
    return size * n;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: bench_streams BASE_URL TOKEN N CHAT_ID...\n");
        return 2;
    }
    long nl = strtol(argv[3], NULL, 10);
    int n = nl > 0 && nl <= 100000 ? (int)nl : 0;
    int nchats = argc - 4;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    CURLM *multi = curl_multi_init();
    CURL **easy = mem_calloc((size_t)n, sizeof *easy);
    conn_t *conns = mem_calloc((size_t)n, sizeof *conns);
    char auth[256];
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", argv[2]);
    struct curl_slist *h = curl_slist_append(NULL, auth);
    int64_t t0 = id_now_ms();
    for (int i = 0; i < n; i++) {
        char url[512];
        snprintf(url, sizeof url, "%s/api/v2/chats/%s/stream", argv[1], argv[4 + i % nchats]);
        easy[i] = curl_easy_init();
        curl_easy_setopt(easy[i], CURLOPT_URL, url);
        curl_easy_setopt(easy[i], CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(easy[i], CURLOPT_WRITEFUNCTION, s_write);
        curl_easy_setopt(easy[i], CURLOPT_WRITEDATA, &conns[i]);
        curl_multi_add_handle(multi, easy[i]);
    }
    int running = 0;
    int ready = 0;
    int64_t deadline = id_now_ms() + 60000;
    while (ready < n && id_now_ms() < deadline) {
        curl_multi_perform(multi, &running);
        curl_multi_poll(multi, NULL, 0, 100, NULL);
        ready = 0;
        for (int i = 0; i < n; i++) {
            ready += conns[i].got;
        }
    }
    printf("RESULT streams=%d ready=%d open_ms=%lld still_running=%d\n", n, ready,
           (long long)(id_now_ms() - t0), running);
    fflush(stdout);
    char line[16];
    while (fgets(line, sizeof line, stdin) == NULL) {
        /* EOF: close at once */
        break;
    }
    for (int i = 0; i < n; i++) {
        curl_multi_remove_handle(multi, easy[i]);
        curl_easy_cleanup(easy[i]);
    }
    curl_slist_free_all(h);
    curl_multi_cleanup(multi);
    free(easy);
    free(conns);
    return ready == n ? 0 : 1;
}
