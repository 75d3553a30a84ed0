/*
 * actor (proto/actor.h): the caller of actor_new learns whether its actor started, and an
 * actor that could not start leaves nothing running. Also the two users whose start can
 * fail on a bad endpoint: the relay worker and the broker.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <czmq.h>

#include "actor.h"
#include "broker.h"
#include "id.h"
#include "relay.h"

typedef struct {
    int status; /* what the actor reports */
    int seen;   /* set by the actor: it read these args */
} s_args_t;

static void s_actor(zsock_t *pipe, void *start) {
    s_args_t *args = actor_args(start);
    args->seen = 1;
    actor_ready(pipe, start, args->status);
    if (args->status != 0) {
        return;
    }
    char *cmd = NULL;
    while ((cmd = zstr_recv(pipe)) && !streq(cmd, "$TERM")) {
        zstr_send(pipe, "PONG");
        zstr_free(&cmd);
    }
    zstr_free(&cmd);
}

static void test_an_actor_that_reports_started_runs_with_its_args(void **u) {
    (void)u;
    s_args_t args = {.status = 0};
    zactor_t *a = actor_new(s_actor, &args);
    assert_non_null(a);
    assert_int_equal(args.seen, 1);
    zstr_send(a, "PING");
    char *reply = zstr_recv(a);
    assert_string_equal(reply, "PONG");
    zstr_free(&reply);
    zactor_destroy(&a);
    assert_null(a);
}

static void test_an_actor_that_reports_failure_gives_null(void **u) {
    (void)u;
    s_args_t args = {.status = -1};
    assert_null(actor_new(s_actor, &args));
    assert_int_equal(args.seen, 1);
}

static int s_handler(void *ctx, const wire_request_t *req, wire_reply_t *reply) {
    (void)ctx;
    (void)req;
    (void)reply;
    return 0;
}

static void test_relay_worker_on_an_endpoint_it_cannot_use_is_null(void **u) {
    (void)u;
    char wid[ID_UUID_LEN + 1];
    assert_int_equal(id_uuid_new(wid), 0);
    /* The arguments are valid: the same call on a usable endpoint starts a worker. */
    relay_worker_t *ok =
        relay_worker_new("inproc://test-actor-relay-ok", wid, 100, s_handler, NULL);
    assert_non_null(ok);
    relay_worker_destroy(&ok);
    assert_null(relay_worker_new("nonsense://endpoint", wid, 100, s_handler, NULL));
}

static void test_broker_on_an_endpoint_it_cannot_bind_is_null(void **u) {
    (void)u;
    broker_config_t cfg = {.pub_endpoint = "inproc://test-actor-pub",
                           .sub_endpoint = "inproc://test-actor-sub",
                           .relay_endpoint = "nonsense://endpoint"};
    assert_null(broker_new(&cfg));
    /* Nothing was left bound: the same inproc endpoints become free for a broker that starts
     * (libzmq releases a closed socket's endpoint a moment later, hence the deadline). */
    cfg.relay_endpoint = "inproc://test-actor-relay";
    int64_t deadline = id_now_ms() + 5000;
    broker_t *b = NULL;
    while (!(b = broker_new(&cfg)) && id_now_ms() < deadline) {
        zclock_sleep(10);
    }
    assert_non_null(b);
    broker_destroy(&b);
    assert_null(b);
}

int main(void) {
    zsys_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_an_actor_that_reports_started_runs_with_its_args),
        cmocka_unit_test(test_an_actor_that_reports_failure_gives_null),
        cmocka_unit_test(test_relay_worker_on_an_endpoint_it_cannot_use_is_null),
        cmocka_unit_test(test_broker_on_an_endpoint_it_cannot_bind_is_null),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    zsys_shutdown();
    return rc;
}
