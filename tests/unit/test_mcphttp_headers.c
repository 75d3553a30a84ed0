/*
 * The MCP Streamable HTTP transport's request headers (worker/mcp/mcphttp.h, issue 34), against the
 * in-process mock server: a session id the server gives with a control character, a space or
 * over the length we keep is refused where it is read and the transfer fails naming
 * Mcp-Session-Id; a protocol version or a configured header with a control character is never
 * sent and the next perform fails naming it; good values go out on the next request.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "id.h"
#include "mcphttp.h"
#include "mem.h"
#include "mockprov.h"

#define WAIT_MS  10000
#define S_ANSWER "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}"

typedef struct {
    mockprov_t *mp;
    int wake[2]; /* mcphttp_wait's wake-up descriptor; never written */
    int msgs;    /* messages delivered */
} s_fix_t;

static int s_setup(void **state) {
    s_fix_t *f = mem_calloc(1, sizeof *f);
    f->mp = mockprov_new();
    if (!f->mp || pipe(f->wake) != 0) {
        return -1;
    }
    *state = f;
    return 0;
}

static int s_teardown(void **state) {
    s_fix_t *f = *state;
    mockprov_destroy(&f->mp);
    close(f->wake[0]);
    close(f->wake[1]);
    free(f);
    return 0;
}

static void s_on_msg(void *arg, const char *text, size_t len) {
    (void)text;
    (void)len;
    ((s_fix_t *)arg)->msgs++;
}

/* Queues a JSON answer carrying session as its Mcp-Session-Id (NULL: none). */
static void s_answer(s_fix_t *f, const char *session) {
    mockprov_reply_t *r = mockprov_reply_new(200, "application/json");
    if (session) {
        mockprov_reply_header(r, "Mcp-Session-Id", session);
    }
    mockprov_reply_body(r, S_ANSWER, 0, 0);
    mockprov_push(f->mp, &r);
}

/* Moves the transport on until a message arrives or a perform fails: that perform's result,
 * with why. */
static int s_run(s_fix_t *f, mcphttp_t *h, char *why, size_t size) {
    int64_t deadline = id_now_ms() + WAIT_MS;
    int before = f->msgs;
    why[0] = 0;
    while (id_now_ms() < deadline) {
        mcphttp_wait(h, f->wake[0], 50);
        if (mcphttp_perform(h, s_on_msg, f, why, size) != 0) {
            return -1;
        }
        if (f->msgs > before) {
            return 0;
        }
    }
    fail_msg("no message and no failure within %d ms", WAIT_MS);
    return -1;
}

static void test_a_session_id_that_is_not_visible_ascii_fails_the_transfer(void **state) {
    s_fix_t *f = *state;
    char *url = mem_printf("%s/mcp", mockprov_url(f->mp));
    mcphttp_t *h = mcphttp_new(url, NULL);
    char long_id[300];
    memset(long_id, 'a', sizeof long_id - 1);
    long_id[sizeof long_id - 1] = 0;
    const char *bad[] = {"sess\x01ion", "sess\tion", "sess ion", long_id};
    char why[160];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        s_answer(f, bad[i]);
        mcphttp_post(h, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\"}", 1);
        assert_int_equal(s_run(f, h, why, sizeof why), -1);
        printf("  refused: %s\n", why);
        assert_non_null(strstr(why, "Mcp-Session-Id"));
        mcphttp_reset(h); /* what mcp.c does on a failure */
    }
    assert_int_equal(f->msgs, 0);
    /* A good id is kept and goes back on the next request. */
    s_answer(f, "good-session.1");
    mcphttp_post(h, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\"}", 1);
    assert_int_equal(s_run(f, h, why, sizeof why), 0);
    s_answer(f, NULL);
    mcphttp_set_protocol(h, "2025-06-18");
    mcphttp_post(h, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}", 1);
    assert_int_equal(s_run(f, h, why, sizeof why), 0);
    int n = mockprov_request_count(f->mp);
    json_t *sent = mockprov_request(f->mp, n - 1);
    const json_t *hd = json_object_get(sent, "headers");
    assert_string_equal(json_string_value(json_object_get(hd, "mcp-session-id")), "good-session.1");
    assert_string_equal(json_string_value(json_object_get(hd, "mcp-protocol-version")),
                        "2025-06-18");
    json_decref(sent);
    mcphttp_destroy(&h);
    free(url);
}

static void test_a_protocol_version_with_a_control_character_is_never_sent(void **state) {
    s_fix_t *f = *state;
    char *url = mem_printf("%s/mcp", mockprov_url(f->mp));
    mcphttp_t *h = mcphttp_new(url, NULL);
    char why[160];
    mcphttp_set_protocol(h, "2025-06-18\r\nX-Injected: 1");
    mcphttp_post(h, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", 0);
    assert_int_equal(s_run(f, h, why, sizeof why), -1);
    printf("  refused: %s\n", why);
    assert_non_null(strstr(why, "protocolVersion"));
    assert_int_equal(mockprov_request_count(f->mp), 0);
    mcphttp_destroy(&h);
    free(url);
}

static void test_a_configured_header_with_a_control_character_is_never_sent(void **state) {
    s_fix_t *f = *state;
    char *url = mem_printf("%s/mcp", mockprov_url(f->mp));
    const char *bad[] = {"X-Api-Key: k1", "X-Other: a\x01b", NULL};
    mcphttp_t *h = mcphttp_new(url, bad);
    char why[160];
    mcphttp_post(h, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\"}", 1);
    assert_int_equal(s_run(f, h, why, sizeof why), -1);
    printf("  refused: %s\n", why);
    assert_non_null(strstr(why, "configured header 1"));
    assert_null(strstr(why, "a\x01")); /* a header's value may be a credential: not quoted */
    assert_int_equal(mockprov_request_count(f->mp), 0);
    mcphttp_destroy(&h);
    /* Good configured headers are sent as given. */
    const char *good[] = {"X-Api-Key: k1", "Authorization: Bearer t\tt", NULL};
    h = mcphttp_new(url, good);
    s_answer(f, NULL);
    mcphttp_post(h, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\"}", 1);
    assert_int_equal(s_run(f, h, why, sizeof why), 0);
    json_t *sent = mockprov_request(f->mp, 0);
    const json_t *hd = json_object_get(sent, "headers");
    assert_string_equal(json_string_value(json_object_get(hd, "x-api-key")), "k1");
    assert_string_equal(json_string_value(json_object_get(hd, "authorization")), "Bearer t\tt");
    assert_string_equal(json_string_value(json_object_get(hd, "accept")),
                        "application/json, text/event-stream");
    json_decref(sent);
    mcphttp_destroy(&h);
    free(url);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_a_session_id_that_is_not_visible_ascii_fails_the_transfer, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(
            test_a_protocol_version_with_a_control_character_is_never_sent, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(
            test_a_configured_header_with_a_control_character_is_never_sent, s_setup, s_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
