/* stagemeter (worker/env): every observation lands in the series of its labels, from any
 * thread, however many; model names past the cap share the "other" series; the exposition
 * names each series once with its count. */
#include "stagemeter.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* The count of the series whose _count line carries labels (after worker="w"), or -1. */
static long long s_count(const char *text, const char *family, const char *labels) {
    char key[512];
    snprintf(key, sizeof key, "%s_count{worker=\"w\",%s} ", family, labels);
    const char *at = strstr(text, key);
    if (!at || strstr(at + 1, key)) {
        return -1; /* absent, or named twice */
    }
    return atoll(at + strlen(key));
}

static char *s_text(stagemeter_t *m) {
    dynbuf_t b;
    dynbuf_init(&b, 1 << 24);
    assert_int_equal(stagemeter_append(m, &b, "w"), 0);
    char *text = strdup(dynbuf_str(&b));
    dynbuf_free(&b);
    return text;
}

static void *s_observe_many(void *arg) {
    stagemeter_t *m = arg;
    for (int i = 0; i < 20000; i++) {
        stagemeter_observe(m, STAGE_COMMIT, STAGE_SCOPE_TURN, i % 2 == 0, 100 + i);
        stagemeter_observe_model(m, STAGE_STREAM, false, "sim", 1000);
    }
    return NULL;
}

static void test_observations_count_in_their_series_from_every_thread(void **state) {
    (void)state;
    stagemeter_t *m = stagemeter_new();
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_create(&t[i], NULL, s_observe_many, m), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
    }
    stagemeter_observe(m, STAGE_PROVIDER_ATTEMPT, STAGE_SCOPE_BACKGROUND, false, 5);
    char *text = s_text(m);
    const char *stages = "chatfleet_stage_duration_seconds";
    assert_int_equal(s_count(text, stages, "stage=\"commit\",scope=\"turn\",chat_kind=\"root\""),
                     40000);
    assert_int_equal(
        s_count(text, stages, "stage=\"commit\",scope=\"turn\",chat_kind=\"subagent\""), 40000);
    assert_int_equal(s_count(text, stages, "stage=\"stream\",scope=\"turn\",chat_kind=\"root\""),
                     80000);
    assert_int_equal(
        s_count(text, stages, "stage=\"provider_attempt\",scope=\"background\",chat_kind=\"root\""),
        1);
    assert_int_equal(s_count(text, "chatfleet_model_stage_duration_seconds",
                             "stage=\"stream\",chat_kind=\"root\",model=\"sim\""),
                     80000);
    assert_int_equal(stagemeter_count(m, STAGE_COMMIT), 80000);
    free(text);
    stagemeter_destroy(&m);
    assert_null(m);
}

static void test_models_past_the_cap_share_other(void **state) {
    (void)state;
    stagemeter_t *m = stagemeter_new();
    char name[32];
    for (int i = 0; i < 70; i++) { /* 64 names get series of their own */
        snprintf(name, sizeof name, "model-%d", i);
        stagemeter_observe_model(m, STAGE_TIME_TO_FIRST_TOKEN, true, name, 10);
        stagemeter_observe_model(m, STAGE_TIME_TO_FIRST_TOKEN, true, name, 20);
    }
    stagemeter_observe_model(m, STAGE_TIME_TO_FIRST_TOKEN, true, "", 30); /* no name */
    stagemeter_observe_model(m, STAGE_TIME_TO_FIRST_TOKEN, true, "a\"b", 40);
    char *text = s_text(m);
    const char *family = "chatfleet_model_stage_duration_seconds";
    assert_int_equal(s_count(text, family,
                             "stage=\"time_to_first_token\",chat_kind=\"subagent\","
                             "model=\"model-0\""),
                     2);
    assert_int_equal(s_count(text, family,
                             "stage=\"time_to_first_token\",chat_kind=\"subagent\","
                             "model=\"model-63\""),
                     2);
    assert_int_equal(s_count(text, family,
                             "stage=\"time_to_first_token\",chat_kind=\"subagent\","
                             "model=\"model-64\""),
                     -1);
    /* 6 names past the cap (12), the nameless one and the one past the cap with a quote. */
    assert_int_equal(s_count(text, family,
                             "stage=\"time_to_first_token\",chat_kind=\"subagent\","
                             "model=\"other\""),
                     14);
    free(text);
    stagemeter_destroy(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_observations_count_in_their_series_from_every_thread),
        cmocka_unit_test(test_models_past_the_cap_share_other),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
