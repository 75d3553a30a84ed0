/*
 * The hook dispatcher (common/hooks/hooks.h) against a consumer this test runs: a small HTTP server
 * on 127.0.0.1 in a thread of its own, answering each POST as the test scripts it and keeping
 * every request it saw. Proves: the event id is stable and the signature verifies; allow with
 * an input override, deny and context reach the caller; a consumer that is down, hangs past
 * the timeout, answers non-2xx or answers an invalid decision fails the dispatch (fail closed),
 * and a consumer back up serves the next one; the same event delivered twice carries the same
 * id; the admission share of the cap cannot take what admitted work needs; the blocking call
 * (the gateway's) answers the same way, fails closed and never waits for a slot.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hookcons.h"
#include "hooks.h"
#include "hookstep.h"
#include "id.h"
#include "mem.h"

#define WAIT_MS  20000
#define S_SECRET "test-secret"

/* What a done callback copied out of its result. */
typedef struct {
    int runs;
    hooks_rc_t rc;
    bool deny;
    char reason[64];
    char context[64];
    char *input; /* JSON text of the override, or NULL */
    char error[HOOKS_ERROR_MAX];
} s_done_t;

static void s_on_done(void *arg, const hooks_result_t *res) {
    s_done_t *d = arg;
    d->runs++;
    d->rc = res->rc;
    d->deny = res->deny;
    snprintf(d->reason, sizeof d->reason, "%s", res->reason ? res->reason : "");
    snprintf(d->context, sizeof d->context, "%s", res->model_context ? res->model_context : "");
    d->input = res->input ? json_dumps(res->input, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    snprintf(d->error, sizeof d->error, "%s", res->error);
}

typedef struct {
    evloop_t *loop;
    hooks_t *hooks;
} s_env_t;

static s_env_t s_env(int port, int64_t timeout_ms, int64_t max_inflight, int64_t admission_max) {
    char *url = mem_printf("http://127.0.0.1:%d/hook", port);
    hooks_config_t cfg = {.url = url,
                          .secret = S_SECRET,
                          .timeout_ms = timeout_ms,
                          .max_inflight = max_inflight,
                          .admission_max = admission_max};
    s_env_t e = {.loop = evloop_new()};
    hooks_runner_t runner = hookstep_runner(e.loop);
    e.hooks = hooks_new(&cfg, &runner);
    free(url);
    return e;
}

static void s_env_end(s_env_t *e) {
    hooks_destroy(&e->hooks);
    evloop_destroy(&e->loop);
}

/* Runs the private loop until every done in ds ran (or the deadline). */
static void s_wait(s_env_t *e, s_done_t *ds, int n) {
    int64_t deadline = id_now_ms() + WAIT_MS;
    for (;;) {
        int left = 0;
        for (int i = 0; i < n; i++) {
            left += ds[i].runs == 0;
        }
        if (!left || id_now_ms() > deadline) {
            break;
        }
        evloop_run_once(e->loop, 50);
    }
    for (int i = 0; i < n; i++) {
        assert_int_equal(ds[i].runs, 1);
    }
}

static void s_dispatch_one(s_env_t *e, hooks_event_t ev, const char *id, const char *payload,
                           s_done_t *d) {
    json_t *p = json_loads(payload, 0, NULL);
    assert_non_null(p);
    hooks_dispatch(e->hooks, HOOKS_ADMITTED, ev, id, "chat-1", p, s_on_done, d);
    json_decref(p);
    s_wait(e, d, 1);
}

static void test_event_ids_are_stable_and_the_signature_is_hmac_sha256(void **state) {
    (void)state;
    char a[HOOKS_EVENT_ID_LEN + 1];
    char b[HOOKS_EVENT_ID_LEN + 1];
    char c[HOOKS_EVENT_ID_LEN + 1];
    hooks_event_id("chat-1", 3, 1, HOOKS_PRE_TOOL_USE, "call_a", a);
    hooks_event_id("chat-1", 3, 1, HOOKS_PRE_TOOL_USE, "call_a", b);
    assert_string_equal(a, b);
    assert_int_equal(strlen(a), HOOKS_EVENT_ID_LEN);
    hooks_event_id("chat-1", 3, 1, HOOKS_POST_TOOL_USE, "call_a", c);
    assert_string_not_equal(a, c);
    hooks_event_id("chat-1", 3, 2, HOOKS_PRE_TOOL_USE, "call_a", c);
    assert_string_not_equal(a, c);
    hooks_event_id("chat-1", 3, 1, HOOKS_PRE_TOOL_USE, "call_b", c);
    assert_string_not_equal(a, c);
    /* RFC 4231 test case 2. */
    char sig[100];
    const char *data = "what do ya want for nothing?";
    assert_int_equal(hooks_sign("Jefe", data, strlen(data), sig, sizeof sig), 0);
    assert_string_equal(sig, "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b9"
                             "64ec3843");
}

static void s_check(hooks_event_t ev, const char *answer, int want_rc, const char *want_error) {
    json_t *a = json_loads(answer, 0, NULL);
    assert_non_null(a);
    hooks_result_t res;
    assert_int_equal(hooks_answer_check(ev, a, &res), want_rc);
    if (want_error) {
        assert_string_equal(res.error, want_error);
    }
    json_decref(a);
}

static void test_only_prompt_and_pre_tool_answers_may_decide_or_override(void **state) {
    (void)state;
    s_check(HOOKS_PRE_TOOL_USE, "{\"decision\":\"deny\",\"reason\":\"no\"}", 0, NULL);
    s_check(HOOKS_USER_PROMPT_SUBMIT, "{\"input\":\"new prompt\"}", 0, NULL);
    s_check(HOOKS_STOP, "{\"model_context\":\"keep going\"}", 0, NULL);
    s_check(HOOKS_POST_TOOL_USE, "{\"decision\":\"allow\"}", -1,
            "hook answer: decision: not accepted on post_tool_use");
    s_check(HOOKS_PRE_COMPACT, "{\"input\":{}}", -1,
            "hook answer: input: not accepted on pre_compact");
    s_check(HOOKS_PRE_TOOL_USE, "{\"input\":\"x\"}", -1, "hook answer: input: must be an object");
    s_check(HOOKS_USER_PROMPT_SUBMIT, "{\"decision\":\"maybe\"}", -1,
            "hook answer: decision: must be \"allow\" or \"deny\"");
    s_check(HOOKS_PRE_TOOL_USE, "{\"decision\":\"deny\",\"input\":{}}", -1,
            "hook answer: input: not accepted with a deny decision");
    s_check(HOOKS_STOP, "{\"extra\":1}", -1, "hook answer: extra: unknown field");
    s_check(HOOKS_STOP, "[]", -1, "hook answer: must be a JSON object");
}

static void test_a_signed_event_gets_its_override_deny_and_context(void **state) {
    (void)state;
    hookcons_t *c = hookcons_new(0);
    s_env_t e = s_env(hookcons_port(c), 5000, 8, 4);
    char id[HOOKS_EVENT_ID_LEN + 1];
    hooks_event_id("chat-1", 4, 1, HOOKS_PRE_TOOL_USE, "call_1", id);

    hookcons_answer(c, NULL, 200, "{\"decision\":\"allow\",\"input\":{\"text\":\"rewritten\"}}",
                    false);
    s_done_t d1 = {0};
    s_dispatch_one(
        &e, HOOKS_PRE_TOOL_USE, id,
        "{\"tool_name\":\"echo\",\"tool_call_id\":\"call_1\",\"input\":{\"text\":\"a\"}}", &d1);
    assert_int_equal(d1.rc, HOOKS_OK);
    assert_false(d1.deny);
    assert_string_equal(d1.input, "{\"text\":\"rewritten\"}");

    hookcons_answer(c, NULL, 200, "{\"decision\":\"deny\",\"reason\":\"not today\"}", false);
    s_done_t d2 = {0};
    s_dispatch_one(&e, HOOKS_PRE_TOOL_USE, id, "{\"tool_name\":\"echo\"}", &d2);
    assert_int_equal(d2.rc, HOOKS_OK);
    assert_true(d2.deny);
    assert_string_equal(d2.reason, "not today");

    hookcons_answer(c, NULL, 200, "{\"model_context\":\"be brief\"}", false);
    s_done_t d3 = {0};
    s_dispatch_one(&e, HOOKS_STOP, "stop-id", "{}", &d3);
    assert_int_equal(d3.rc, HOOKS_OK);
    assert_string_equal(d3.context, "be brief");

    /* What the consumer saw: the body names the event and its id, the header signs the body,
     * and the same event delivered twice carried the same id both times. */
    assert_int_equal(hookcons_seen(c), 3);
    char *ids[3];
    for (int i = 0; i < 3; i++) {
        char *body = hookcons_body(c, i);
        char *got = hookcons_header(c, i, HOOKS_SIGNATURE_HEADER);
        ids[i] = hookcons_header(c, i, "X-Chatfleet-Event-Id");
        char sig[100];
        assert_int_equal(hooks_sign(S_SECRET, body, strlen(body), sig, sizeof sig), 0);
        assert_string_equal(got, sig);
        json_t *b = json_loads(body, 0, NULL);
        assert_non_null(b);
        assert_string_equal(json_string_value(json_object_get(b, "event_id")), ids[i]);
        assert_string_equal(json_string_value(json_object_get(b, "chat_id")), "chat-1");
        json_decref(b);
        free(body);
        free(got);
    }
    assert_string_equal(ids[0], id);
    assert_string_equal(ids[1], id);
    for (int i = 0; i < 3; i++) {
        free(ids[i]);
    }
    char *body0 = hookcons_body(c, 0);
    json_t *b0 = json_loads(body0, 0, NULL);
    free(body0);
    assert_string_equal(json_string_value(json_object_get(b0, "event")), "pre_tool_use");
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_object_get(b0, "data"), "input"), "text")),
                        "a");
    json_decref(b0);
    free(d1.input);
    s_env_end(&e);
    hookcons_destroy(&c);
}

static void test_a_failing_consumer_fails_closed_then_recovers(void **state) {
    (void)state;
    hookcons_t *c = hookcons_new(0);
    int port = hookcons_port(c);
    s_env_t e = s_env(port, 300, 8, 4);

    hookcons_answer(c, NULL, 500, "{}", false);
    s_done_t d = {0};
    s_dispatch_one(&e, HOOKS_POST_TOOL_USE, "x1", "{}", &d);
    assert_int_equal(d.rc, HOOKS_E_TRANSPORT);
    assert_string_equal(d.error, "hook consumer: HTTP status 500");

    hookcons_answer(c, NULL, 200, "not json", false);
    memset(&d, 0, sizeof d);
    s_dispatch_one(&e, HOOKS_POST_TOOL_USE, "x2", "{}", &d);
    assert_int_equal(d.rc, HOOKS_E_INVALID);

    hookcons_answer(c, NULL, 200, "{\"decision\":\"deny\"}", false);
    memset(&d, 0, sizeof d);
    s_dispatch_one(&e, HOOKS_SESSION_START, "x3", "{}", &d);
    assert_int_equal(d.rc, HOOKS_E_INVALID);
    assert_string_equal(d.error, "hook answer: decision: not accepted on session_start");

    /* A consumer that takes the request and never answers: the timeout fails it. */
    hookcons_answer(c, NULL, 200, "{}", true);
    memset(&d, 0, sizeof d);
    s_dispatch_one(&e, HOOKS_PRE_COMPACT, "x4", "{}", &d);
    assert_int_equal(d.rc, HOOKS_E_TRANSPORT);

    /* Down: nothing listens on the port. */
    hookcons_destroy(&c);
    memset(&d, 0, sizeof d);
    s_dispatch_one(&e, HOOKS_STOP, "x5", "{}", &d);
    assert_int_equal(d.rc, HOOKS_E_TRANSPORT);

    /* Back on the same port: the next dispatch succeeds. */
    c = hookcons_new(port);
    memset(&d, 0, sizeof d);
    s_dispatch_one(&e, HOOKS_STOP, "x5", "{}", &d);
    assert_int_equal(d.rc, HOOKS_OK);
    assert_int_equal(hookcons_seen(c), 1);
    s_env_end(&e);
    hookcons_destroy(&c);
}

static void test_admission_holds_only_its_share_of_the_cap(void **state) {
    (void)state;
    hookcons_t *c = hookcons_new(0);
    hookcons_answer(c, NULL, 200, "{}", true); /* every dispatch stays until its timeout */
    s_env_t e = s_env(hookcons_port(c), 500, 3, 1);
    json_t *p = json_object();
    s_done_t d[5] = {0};
    hooks_dispatch(e.hooks, HOOKS_ADMISSION, HOOKS_USER_PROMPT_SUBMIT, "a1", "c", p, s_on_done,
                   &d[0]);
    hooks_dispatch(e.hooks, HOOKS_ADMISSION, HOOKS_USER_PROMPT_SUBMIT, "a2", "c", p, s_on_done,
                   &d[1]);
    hooks_dispatch(e.hooks, HOOKS_ADMITTED, HOOKS_PRE_TOOL_USE, "b1", "c", p, s_on_done, &d[2]);
    hooks_dispatch(e.hooks, HOOKS_ADMITTED, HOOKS_PRE_TOOL_USE, "b2", "c", p, s_on_done, &d[3]);
    hooks_dispatch(e.hooks, HOOKS_ADMITTED, HOOKS_PRE_TOOL_USE, "b3", "c", p, s_on_done, &d[4]);
    int64_t adm = 0;
    int64_t admitted = 0;
    int64_t waiting = 0;
    hooks_inflight(e.hooks, &adm, &admitted, &waiting);
    assert_int_equal(adm, 1);      /* a2 is over the admission share */
    assert_int_equal(admitted, 2); /* admitted work still had the rest of the cap */
    assert_int_equal(waiting, 1);  /* b3 waits for a slot instead of failing */
    json_decref(p);
    s_wait(&e, d, 5);
    assert_int_equal(d[0].rc, HOOKS_E_TRANSPORT); /* in flight, then timed out */
    assert_int_equal(d[1].rc, HOOKS_E_BUSY);
    assert_string_equal(d[1].error, "hook dispatch cap reached (admission)");
    assert_int_equal(d[2].rc, HOOKS_E_TRANSPORT);
    assert_int_equal(d[3].rc, HOOKS_E_TRANSPORT);
    assert_int_equal(d[4].rc, HOOKS_E_TRANSPORT); /* it ran once a slot freed */
    assert_int_equal(hookcons_seen(c), 4);        /* a1, b1, b2, then b3; never a2 */
    char *last = hookcons_header(c, 3, "X-Chatfleet-Event-Id");
    assert_string_equal(last, "b3");
    free(last);
    hooks_inflight(e.hooks, &adm, &admitted, &waiting);
    assert_int_equal(adm + admitted + waiting, 0);
    s_env_end(&e);
    hookcons_destroy(&c);
}

/* The configuration: the worker's admission share is half the cap; the gateway's (threads >
 * 0, blocking on its request threads) defaults below its request threads, and a share set at
 * or above them is refused naming both settings; with hooks off nothing is refused. */
static void test_the_gateway_admission_share_stays_below_its_request_threads(void **state) {
    (void)state;
    setenv("CHATFLEET_HOOKS_URL", "http://127.0.0.1:9/hooks", 1);
    setenv("CHATFLEET_HOOKS_SECRET", "s", 1);
    unsetenv("CHATFLEET_HOOKS_MAX_INFLIGHT");
    unsetenv("CHATFLEET_HOOKS_ADMISSION_MAX");
    hooks_config_t cfg;
    char err[256] = "";
    assert_int_equal(hooks_config_read(&cfg, 0, err, sizeof err), 0); /* the worker */
    assert_int_equal(cfg.max_inflight, 64);
    assert_int_equal(cfg.admission_max, 32);
    hooks_config_clear(&cfg);
    assert_int_equal(hooks_config_read(&cfg, 12, err, sizeof err), 0); /* the gateway's default */
    assert_int_equal(cfg.admission_max, 6);
    hooks_config_clear(&cfg);
    assert_int_equal(hooks_config_read(&cfg, 1, err, sizeof err), -1); /* no share fits */
    setenv("CHATFLEET_HOOKS_ADMISSION_MAX", "12", 1);
    assert_int_equal(hooks_config_read(&cfg, 12, err, sizeof err), -1);
    printf("  refused: %s\n", err);
    assert_non_null(strstr(err, "CHATFLEET_HOOKS_ADMISSION_MAX (12)"));
    assert_non_null(strstr(err, "CHATFLEET_HTTP_THREADS (12)"));
    assert_int_equal(hooks_config_read(&cfg, 13, err, sizeof err), 0);
    assert_int_equal(cfg.admission_max, 12);
    hooks_config_clear(&cfg);
    assert_int_equal(hooks_config_read(&cfg, 0, err, sizeof err), 0); /* the worker: any share */
    hooks_config_clear(&cfg);
    unsetenv("CHATFLEET_HOOKS_URL");
    assert_int_equal(hooks_config_read(&cfg, 12, err, sizeof err), 0); /* hooks off */
    hooks_config_clear(&cfg);
    unsetenv("CHATFLEET_HOOKS_SECRET");
    unsetenv("CHATFLEET_HOOKS_ADMISSION_MAX");
}

/* Issue 34: what goes into the consumer's request is checked where it is accepted and again
 * where the request is built. A URL or a secret with a control character (or a URL that is not
 * http(s)) is refused at start naming its setting; an event id with one fails the dispatch, on
 * the loop and blocking, without a request; good values are delivered as before. */
static void test_control_characters_are_refused_at_start_and_never_sent(void **state) {
    (void)state;
    unsetenv("CHATFLEET_HOOKS_MAX_INFLIGHT");
    unsetenv("CHATFLEET_HOOKS_ADMISSION_MAX");
    hooks_config_t cfg;
    char err[256] = "";
    static const struct {
        const char *url;
        const char *secret;
        const char *field;
    } bad[] = {
        {"http://127.0.0.1:9/hook\r\nX-Injected: 1", "s", "CHATFLEET_HOOKS_URL"},
        {"http://127.0.0.1:9/ho\tok", "s", "CHATFLEET_HOOKS_URL"},
        {"ftp://127.0.0.1:9/hook", "s", "CHATFLEET_HOOKS_URL"},
        {"http://127.0.0.1:9/hook", "sec\nret", "CHATFLEET_HOOKS_SECRET"},
        {"http://127.0.0.1:9/hook", "sec\x7fret", "CHATFLEET_HOOKS_SECRET"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("CHATFLEET_HOOKS_URL", bad[i].url, 1);
        setenv("CHATFLEET_HOOKS_SECRET", bad[i].secret, 1);
        err[0] = 0;
        assert_int_equal(hooks_config_read(&cfg, 0, err, sizeof err), -1);
        printf("  refused: %s\n", err);
        assert_true(strncmp(err, bad[i].field, strlen(bad[i].field)) == 0);
        assert_null(cfg.url);
    }
    setenv("CHATFLEET_HOOKS_URL", "https://hooks.example.com/a?b=c", 1);
    setenv("CHATFLEET_HOOKS_SECRET", "a good secret", 1);
    assert_int_equal(hooks_config_read(&cfg, 0, err, sizeof err), 0);
    assert_string_equal(cfg.url, "https://hooks.example.com/a?b=c");
    hooks_config_clear(&cfg);
    unsetenv("CHATFLEET_HOOKS_URL");
    unsetenv("CHATFLEET_HOOKS_SECRET");

    /* At request time: an event id with CR LF is refused by the header builder, unsent. */
    hookcons_t *c = hookcons_new(0);
    hookcons_answer(c, NULL, 200, "{}", false);
    s_env_t e = s_env(hookcons_port(c), 5000, 8, 4);
    s_done_t d1 = {0};
    s_dispatch_one(&e, HOOKS_STOP, "id\r\nX-Injected: 1", "{}", &d1);
    assert_int_equal(d1.rc, HOOKS_E_TRANSPORT);
    assert_non_null(strstr(d1.error, "event id"));
    int64_t in_flight[3];
    hooks_inflight(e.hooks, &in_flight[0], &in_flight[1], &in_flight[2]);
    assert_int_equal(in_flight[0] + in_flight[1] + in_flight[2], 0); /* no slot was kept */
    json_t *p = json_object();
    hooks_result_t res;
    json_t *answer = NULL;
    assert_int_equal(hooks_call(e.hooks, HOOKS_ADMISSION, HOOKS_USER_PROMPT_SUBMIT, "id\x01",
                                "chat-1", p, &res, &answer),
                     HOOKS_E_TRANSPORT);
    assert_null(answer);
    assert_non_null(strstr(res.error, "event id"));
    assert_int_equal(hookcons_seen(c), 0);
    /* A good id on the same dispatcher is delivered, with every header intact. */
    s_done_t d2 = {0};
    s_dispatch_one(&e, HOOKS_STOP, "good-id", "{}", &d2);
    assert_int_equal(d2.rc, HOOKS_OK);
    assert_int_equal(hookcons_seen(c), 1);
    char *id = hookcons_header(c, 0, "X-Chatfleet-Event-Id");
    char *type = hookcons_header(c, 0, "Content-Type");
    assert_string_equal(id, "good-id");
    assert_string_equal(type, "application/json");
    free(id);
    free(type);
    json_decref(p);
    s_env_end(&e);
    hookcons_destroy(&c);
}

/* The blocking call (the gateway's): the same answer on the calling thread; a consumer that is
 * down fails it; with the admission share taken by a call that hangs, another is refused at
 * once instead of waiting. */
typedef struct {
    hooks_t *hooks;
    hooks_rc_t rc;
} s_call_t;

static void *s_hanging_call(void *arg) {
    s_call_t *c = arg;
    json_t *p = json_object();
    hooks_result_t res;
    json_t *answer = NULL;
    c->rc = hooks_call(c->hooks, HOOKS_ADMISSION, HOOKS_USER_PROMPT_SUBMIT, "id-hang", "chat-1", p,
                       &res, &answer);
    json_decref(answer);
    json_decref(p);
    return NULL;
}

static void test_a_blocking_call_answers_fails_closed_and_never_waits(void **state) {
    (void)state;
    hookcons_t *cons = hookcons_new(0);
    hookcons_answer(cons, NULL, 200, "{\"input\":\"rewritten\",\"reason\":\"policy\"}", false);
    char *url = mem_printf("http://127.0.0.1:%d/hook", hookcons_port(cons));
    hooks_config_t cfg = {
        .url = url, .secret = S_SECRET, .timeout_ms = 20000, .max_inflight = 2, .admission_max = 1};
    hooks_t *h = hooks_new(&cfg, NULL);
    json_t *p = json_pack("{s:s}", "prompt", "original");
    hooks_result_t res;
    json_t *answer = NULL;
    assert_int_equal(hooks_call(h, HOOKS_ADMISSION, HOOKS_USER_PROMPT_SUBMIT, "id-1", "chat-1", p,
                                &res, &answer),
                     HOOKS_OK);
    assert_string_equal(json_string_value(res.input), "rewritten");
    assert_string_equal(res.reason, "policy");
    json_decref(answer);
    assert_int_equal(hookcons_seen(cons), 1);
    char *body = hookcons_body(cons, 0);
    assert_non_null(strstr(body, "\"prompt\":\"original\""));
    free(body);
    /* One call hangs and holds the admission share: the next is refused without a request. */
    hookcons_answer(cons, NULL, 200, "{}", true);
    s_call_t c = {.hooks = h};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, s_hanging_call, &c), 0);
    int64_t end = id_now_ms() + WAIT_MS;
    while (hookcons_seen(cons) < 2 && id_now_ms() < end) {
        usleep(10 * 1000);
    }
    assert_int_equal(hookcons_seen(cons), 2);
    assert_int_equal(hooks_call(h, HOOKS_ADMISSION, HOOKS_USER_PROMPT_SUBMIT, "id-2", "chat-1", p,
                                &res, &answer),
                     HOOKS_E_BUSY);
    assert_null(answer);
    assert_int_equal(hookcons_seen(cons), 2);
    /* The consumer goes down: the hanging call fails closed. */
    hookcons_destroy(&cons);
    pthread_join(t, NULL);
    assert_int_equal(c.rc, HOOKS_E_TRANSPORT);
    assert_int_equal(hooks_call(h, HOOKS_ADMISSION, HOOKS_USER_PROMPT_SUBMIT, "id-3", "chat-1", p,
                                &res, &answer),
                     HOOKS_E_TRANSPORT);
    assert_null(answer);
    json_decref(p);
    hooks_destroy(&h);
    free(url);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_event_ids_are_stable_and_the_signature_is_hmac_sha256),
        cmocka_unit_test(test_only_prompt_and_pre_tool_answers_may_decide_or_override),
        cmocka_unit_test(test_a_signed_event_gets_its_override_deny_and_context),
        cmocka_unit_test(test_a_failing_consumer_fails_closed_then_recovers),
        cmocka_unit_test(test_admission_holds_only_its_share_of_the_cap),
        cmocka_unit_test(test_the_gateway_admission_share_stays_below_its_request_threads),
        cmocka_unit_test(test_a_blocking_call_answers_fails_closed_and_never_waits),
        cmocka_unit_test(test_control_characters_are_refused_at_start_and_never_sent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
