/* Cutting an XPUB's subscribers on a revocation (broker/guard.h guard_cut, ARCHITECTURE.md §9
 * "Rotation"): every connection the XPUB accepted is shut down, tcp:// and ipc:// alike, with
 * every descriptor of the process in use; a client's own connection to the same endpoint is
 * left alone; each subscriber connects again by itself and reads again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <czmq.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fdfill.h"
#include "guard.h"
#include "ratelog.h"

/* Publishes token on pub until sub reads it or wait_ms pass. Returns 1 when read. */
static int s_flows(void *pub, void *sub, const char *token, int wait_ms) {
    int64_t end = zclock_mono() + wait_ms;
    char buf[64];
    while (zclock_mono() < end) {
        zmq_send(pub, token, strlen(token), ZMQ_DONTWAIT);
        int n = zmq_recv(sub, buf, sizeof buf - 1, ZMQ_DONTWAIT);
        if (n == (int)strlen(token) && memcmp(buf, token, (size_t)n) == 0) {
            return 1;
        }
        zclock_sleep(10);
    }
    return 0;
}

/* Counts event on monitor (a PAIR) until want of them came or wait_ms passed. */
static int s_events(zsock_t *monitor, uint16_t event, int want, int wait_ms) {
    int64_t end = zclock_mono() + wait_ms;
    int seen = 0;
    while (seen < want && zclock_mono() < end) {
        zmq_pollitem_t item = {zsock_resolve(monitor), 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&item, 1, 50) > 0) {
            zmsg_t *m = zmsg_recv(monitor);
            zframe_t *f = zmsg_first(m);
            uint16_t got = 0;
            if (f && zframe_size(f) == 6) {
                memcpy(&got, zframe_data(f), 2);
            }
            zmsg_destroy(&m);
            seen += got == event;
        }
    }
    return seen;
}

/* An XPUB at endpoint watched by a guard, two subscribers; guard_cut with no descriptor left
 * cuts exactly the two accepted connections, and both subscribers come back. */
static void s_cut(const char *endpoint) {
    static int s_seq;
    ratelog_t *rl = ratelog_new();
    guard_config_t cfg = {0};
    guard_t *guard = guard_new(&cfg, rl);
    zsock_t *xpub = zsock_new(ZMQ_XPUB);
    zsock_set_linger(xpub, 0);
    assert_true(zsock_bind(xpub, "%s", endpoint) >= 0);
    assert_int_equal(guard_watch(guard, 1, xpub), 0);
    char ep[512];
    size_t len = sizeof ep;
    assert_int_equal(zmq_getsockopt(zsock_resolve(xpub), ZMQ_LAST_ENDPOINT, ep, &len), 0);
    zsock_t *subs[2];
    zsock_t *mons[2];
    for (int i = 0; i < 2; i++) {
        char mep[64];
        snprintf(mep, sizeof mep, "inproc://cut-mon-%d-%d", ++s_seq, i);
        subs[i] = zsock_new(ZMQ_SUB);
        zsock_set_linger(subs[i], 0);
        zsock_set_reconnect_ivl(subs[i], 50);
        zsock_set_subscribe(subs[i], "");
        assert_int_equal(zmq_socket_monitor(zsock_resolve(subs[i]), mep,
                                            ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED),
                         0);
        mons[i] = zsock_new_pair(mep);
        assert_int_equal(zsock_connect(subs[i], "%s", ep), 0);
        assert_int_equal(s_flows(zsock_resolve(xpub), zsock_resolve(subs[i]), "before", 5000), 1);
        assert_int_equal(s_events(mons[i], ZMQ_EVENT_CONNECTED, 1, 2000), 1);
    }
    guard_drain(guard, 1, zclock_mono()); /* the ACCEPTED events: the highest descriptor */

    fdfill_t *fill = fdfill_new(256);
    assert_non_null(fill);
    int cut = guard_cut(guard, ep);
    assert_int_equal(fdfill_destroy(&fill), 0);
    printf("%s: %d connections cut\n", ep, cut);
    assert_int_equal(cut, 2); /* the accepted ends only, not the subscribers' own */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(s_events(mons[i], ZMQ_EVENT_DISCONNECTED, 1, 5000), 1);
        assert_int_equal(s_events(mons[i], ZMQ_EVENT_CONNECTED, 1, 5000), 1);
        assert_int_equal(s_flows(zsock_resolve(xpub), zsock_resolve(subs[i]), "after", 5000), 1);
        zsock_destroy(&mons[i]);
        zsock_destroy(&subs[i]);
    }
    guard_destroy(&guard);
    zsock_destroy(&xpub);
    ratelog_destroy(&rl);
}

static void test_tcp_subscribers_are_cut_and_come_back(void **u) {
    (void)u;
    s_cut("tcp://127.0.0.1:*");
}

static void test_ipc_subscribers_are_cut_and_come_back(void **u) {
    (void)u;
    char dir[] = "/tmp/cfcut.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char ep[128];
    snprintf(ep, sizeof ep, "ipc://%s/sub", dir);
    s_cut(ep);
    char path[128];
    snprintf(path, sizeof path, "%s/sub", dir);
    assert_true(unlink(path) == 0 || errno == ENOENT); /* libzmq may have removed it */
    assert_int_equal(rmdir(dir), 0);
}

static void test_other_endpoints_are_refused(void **u) {
    (void)u;
    ratelog_t *rl = ratelog_new();
    guard_config_t cfg = {0};
    guard_t *guard = guard_new(&cfg, rl);
    assert_int_equal(guard_cut(guard, "inproc://x"), -1);
    assert_int_equal(guard_cut(guard, "tcp://127.0.0.1"), -1);
    assert_int_equal(guard_cut(guard, "tcp://127.0.0.1:80x"), -1);
    assert_int_equal(guard_cut(guard, "tcp://127.0.0.1:0"), -1);
    assert_int_equal(guard_cut(guard, "tcp://127.0.0.1:65536"), -1);
    assert_int_equal(guard_cut(guard, "ipc://"), -1);
    guard_destroy(&guard);
    ratelog_destroy(&rl);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tcp_subscribers_are_cut_and_come_back),
        cmocka_unit_test(test_ipc_subscribers_are_cut_and_come_back),
        cmocka_unit_test(test_other_endpoints_are_refused),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    zsys_shutdown();
    return rc;
}
