/* otlp (worker/env): adding a span never waits on the network. With a receiver that accepts
 * and never answers, the queue fills to OTLP_QUEUE_MAX (less the batch the thread holds) and
 * every span past it is refused at once and counted as dropped; shutdown then ends within
 * three posts' timeouts (the one in flight, its retry, one last batch), not one per batch. No
 * endpoint: no exporter. */
#include "id.h"
#include "otlp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

static void test_no_endpoint_makes_no_exporter(void **state) {
    (void)state;
    assert_null(otlp_new(NULL, "w"));
    assert_null(otlp_new("", "w"));
}

static void test_a_full_queue_drops_without_blocking(void **state) {
    (void)state;
    /* A listener that never accepts: connects succeed (the backlog), answers never come. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 4), 0);
    socklen_t al = sizeof a;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", ntohs(a.sin_port));
    otlp_t *o = otlp_new(url, "w");
    assert_non_null(o);
    otlp_span_t s = {.trace_id = "0af7651916cd43dd8448eb211c80319c",
                     .span_id = "b7ad6b7169203331",
                     .name = "commit",
                     .start_ns = 1,
                     .end_ns = 2};
    int64_t t0 = id_now_ms();
    int added = 0, refused = 0;
    for (int i = 0; i < 2 * OTLP_QUEUE_MAX; i++) {
        if (otlp_add(o, &s)) {
            added++;
        } else {
            refused++;
        }
    }
    int64_t took = id_now_ms() - t0;
    printf("added=%d refused=%d took_ms=%lld\n", added, refused, (long long)took);
    assert_true(took < 1000); /* nothing waited for the receiver */
    assert_true(added >= OTLP_QUEUE_MAX && added <= OTLP_QUEUE_MAX + OTLP_BATCH_MAX);
    otlp_stats_t st;
    otlp_stats(o, &st);
    assert_int_equal(st.dropped, refused);
    assert_int_equal(st.exported, 0);
    t0 = id_now_ms();
    otlp_destroy(&o);
    close(fd);
    int64_t shut = id_now_ms() - t0;
    printf("shutdown_ms=%lld\n", (long long)shut);
    assert_true(shut < 3 * OTLP_TIMEOUT_MS + 1000);
    assert_null(o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_endpoint_makes_no_exporter),
        cmocka_unit_test(test_a_full_queue_drops_without_blocking),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
