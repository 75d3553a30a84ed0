/*
 * The reasoning effort scale (common/chat/effort.h) and the model configs that carry it
 * (api-gateway/core/models.c): the order none < minimal < low < medium < high < xhigh < max,
 * the effective effort (the chat's, else the config's default, clamped to the config's max;
 * none without a config), and a config file whose options.reasoning_effort is refused with the
 * field path before anything is stored.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "effort.h"
#include "mem.h"
#include "models.h"
#include "proc.h"

static void test_the_scale_is_ordered_and_exact(void **u) {
    (void)u;
    const char *order[] = {"none", "minimal", "low", "medium", "high", "xhigh", "max"};
    for (int i = 0; i < 7; i++) {
        assert_int_equal(effort_rank(order[i]), i + 1);
        assert_string_equal(effort_name(i + 1), order[i]);
    }
    assert_int_equal(effort_rank("High"), 0);
    assert_int_equal(effort_rank(""), 0);
    assert_int_equal(effort_rank(NULL), 0);
    assert_int_equal(effort_rank("maximum"), 0);
    assert_null(effort_name(0));
    assert_null(effort_name(8));
}

static void test_the_effective_effort_is_chosen_then_default_clamped_to_max(void **u) {
    (void)u;
    assert_string_equal(effort_resolve("medium", "low", "high"), "medium");
    assert_string_equal(effort_resolve(NULL, "low", "high"), "low");
    assert_string_equal(effort_resolve("", "low", "high"), "low");
    assert_string_equal(effort_resolve("max", "low", "high"), "high");
    assert_string_equal(effort_resolve("xhigh", "none", "none"), "none");
    assert_string_equal(effort_resolve("none", "medium", "max"), "none");
    assert_string_equal(effort_resolve("bogus", "medium", "max"), "medium");
    /* A config without reasoning_effort: nothing, whatever the chat chose. */
    assert_null(effort_resolve("high", NULL, NULL));
    assert_null(effort_resolve("high", "low", NULL));
    assert_null(effort_resolve("high", "loud", "high"));
}

/* models_sync of a config file holding text: its return and what it printed (caller frees). */
static int s_sync(const char *text, char **printed) {
    char path[64];
    char errs[64];
    snprintf(path, sizeof path, "/tmp/cf-effort-models-%d.json", (int)getpid());
    snprintf(errs, sizeof errs, "/tmp/cf-effort-models-%d.err", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    fflush(stderr);
    int saved = dup(2);
    int fd = open(errs, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    /* Every check runs before the database is touched: no connection is needed to refuse. */
    int rc = models_sync(NULL, path);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    *printed = proc_file_text(errs);
    unlink(path);
    unlink(errs);
    return rc;
}

static void s_refused(const char *options, const char *field) {
    char *text = mem_printf("{\"models\":[{\"name\":\"a\",\"provider\":\"openai\",\"model\":\"m\","
                            "\"default\":true,\"options\":%s}]}",
                            options);
    char *printed = NULL;
    assert_int_equal(s_sync(text, &printed), -1);
    char *want = mem_printf("models[0].%s ", field);
    if (!printed || !strstr(printed, want)) {
        fail_msg("options %s: want an error naming %s, got %s", options, want,
                 printed ? printed : "(nothing)");
    }
    printf("  %s", printed);
    free(want);
    free(printed);
    free(text);
}

static void test_a_config_s_reasoning_effort_is_checked_with_its_field_path(void **u) {
    (void)u;
    s_refused("[]", "options");
    s_refused("{\"effort\":1}", "options.effort");
    s_refused("{\"reasoning_effort\":\"high\"}", "options.reasoning_effort");
    s_refused("{\"reasoning_effort\":{\"default\":\"low\",\"max\":\"high\",\"min\":\"none\"}}",
              "options.reasoning_effort.min");
    s_refused("{\"reasoning_effort\":{\"default\":\"loud\",\"max\":\"high\"}}",
              "options.reasoning_effort.default");
    s_refused("{\"reasoning_effort\":{\"default\":\"low\"}}", "options.reasoning_effort.max");
    s_refused("{\"reasoning_effort\":{\"default\":\"low\",\"max\":7}}",
              "options.reasoning_effort.max");
    s_refused("{\"reasoning_effort\":{\"default\":\"high\",\"max\":\"low\"}}",
              "options.reasoning_effort.default");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_scale_is_ordered_and_exact),
        cmocka_unit_test(test_the_effective_effort_is_chosen_then_default_clamped_to_max),
        cmocka_unit_test(test_a_config_s_reasoning_effort_is_checked_with_its_field_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
