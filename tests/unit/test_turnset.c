/* turnset (worker/env): every turn closes with exactly one outcome. A turn a task joins and
 * finishes is never abandoned; one the runner exits with open is abandoned once; a newer
 * prompt abandons the older turn, but only after its last holder released it without an
 * outcome, and an outcome its holder records after the newer prompt joined still counts (the
 * seed's late Complete); a second outcome is refused; runners and prompts are kept apart. */
#include "turnset.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#define S_CHAT   "11111111-1111-4111-8111-111111111111"
#define S_RUNNER "22222222-2222-4222-8222-222222222222"
#define S_OTHER  "33333333-3333-4333-8333-333333333333"

typedef struct {
    int count;
    turnset_turn_t last;
} s_seen_t;

static void s_on_abandon(const turnset_turn_t *t, void *arg) {
    s_seen_t *seen = arg;
    seen->count++;
    seen->last = *t;
}

static turnset_turn_t s_turn(const char *runner, int64_t prompt) {
    turnset_turn_t t = {.prompt_id = prompt, .start_ns = 1000, .subagent = true};
    snprintf(t.chat_id, sizeof t.chat_id, "%s", S_CHAT);
    snprintf(t.runner_id, sizeof t.runner_id, "%s", runner);
    snprintf(t.trace.trace_id, sizeof t.trace.trace_id, "%032d", 7);
    snprintf(t.span_id, sizeof t.span_id, "%016d", (int)prompt);
    return t;
}

static void test_a_finished_turn_is_never_abandoned(void **state) {
    (void)state;
    s_seen_t seen = {0};
    turnset_t *set = turnset_new(s_on_abandon, &seen);
    turnset_turn_t t = s_turn(S_RUNNER, 5);
    turnset_ref_t *a = NULL, *b = NULL;
    turnset_join(set, &t, &a); /* two steps of one turn, the second one finishes it */
    turnset_release(set, &a);
    assert_null(a);
    assert_int_equal(turnset_size(set), 1); /* open between its steps */
    turnset_join(set, &t, &b);
    turnset_turn_t again = t;
    turnset_join(set, &again, &b); /* a step read again: the same hold */
    assert_true(turnset_outcome(set, b, 0));
    assert_false(turnset_outcome(set, b, 2)); /* the first outcome is kept */
    turnset_release(set, &b);
    assert_int_equal(turnset_size(set), 0);
    turnset_runner_exit(set, S_CHAT, S_RUNNER);
    assert_int_equal(seen.count, 0);
    turnset_destroy(&set);
    assert_null(set);
}

static void test_a_runner_exit_abandons_its_open_turn_once(void **state) {
    (void)state;
    s_seen_t seen = {0};
    turnset_t *set = turnset_new(s_on_abandon, &seen);
    turnset_turn_t t = s_turn(S_RUNNER, 5);
    turnset_ref_t *a = NULL, *other = NULL;
    turnset_join(set, &t, &a);
    turnset_release(set, &a);              /* fenced out: no outcome */
    turnset_turn_t o = s_turn(S_OTHER, 5); /* the same chat, re-acquired: another runner */
    turnset_join(set, &o, &other);
    turnset_runner_exit(set, S_CHAT, S_RUNNER);
    assert_int_equal(seen.count, 1);
    assert_string_equal(seen.last.runner_id, S_RUNNER);
    assert_true(seen.last.subagent);
    assert_true(seen.last.end_ns > seen.last.start_ns);
    turnset_runner_exit(set, S_CHAT, S_RUNNER);
    assert_int_equal(seen.count, 1);
    assert_int_equal(turnset_size(set), 1); /* the other runner's turn is untouched */
    assert_true(turnset_outcome(set, other, 0));
    turnset_release(set, &other);
    turnset_runner_exit(set, S_CHAT, S_OTHER);
    assert_int_equal(seen.count, 1);
    turnset_destroy(&set);
}

static void test_a_held_turn_is_abandoned_when_its_last_holder_releases_it(void **state) {
    (void)state;
    s_seen_t seen = {0};
    turnset_t *set = turnset_new(s_on_abandon, &seen);
    turnset_turn_t t = s_turn(S_RUNNER, 5);
    turnset_ref_t *gen = NULL, *intr = NULL;
    turnset_join(set, &t, &gen);
    turnset_join(set, &t, &intr); /* a second task of the same turn */
    turnset_runner_exit(set, S_CHAT, S_RUNNER);
    assert_int_equal(seen.count, 0); /* still held */
    turnset_release(set, &gen);
    assert_int_equal(seen.count, 0);
    turnset_release(set, &intr);
    assert_int_equal(seen.count, 1);
    assert_int_equal(turnset_size(set), 0);
    turnset_destroy(&set);
}

static void test_a_newer_prompt_abandons_the_older_turn_unless_it_finishes(void **state) {
    (void)state;
    s_seen_t seen = {0};
    turnset_t *set = turnset_new(s_on_abandon, &seen);
    /* An edit: the old turn's task is cancelled and ends without an outcome. */
    turnset_turn_t old = s_turn(S_RUNNER, 5), edit = s_turn(S_RUNNER, 9);
    turnset_ref_t *a = NULL, *b = NULL;
    turnset_join(set, &old, &a);
    turnset_join(set, &edit, &b);
    assert_int_equal(seen.count, 0);
    turnset_release(set, &a);
    assert_int_equal(seen.count, 1);
    assert_int_equal(seen.last.prompt_id, 5);
    /* A promotion: the finishing task records its outcome after the promoted prompt's task
     * joined (its FinishTurn published first); the late outcome counts. */
    turnset_turn_t promoted = s_turn(S_RUNNER, 12);
    turnset_ref_t *c = NULL;
    turnset_join(set, &promoted, &c);
    assert_true(turnset_outcome(set, b, 0));
    turnset_release(set, &b);
    assert_int_equal(seen.count, 1);
    /* An older prompt never closes a newer one; an idle older turn goes at once. */
    turnset_release(set, &c);
    turnset_turn_t newest = s_turn(S_RUNNER, 20);
    turnset_ref_t *d = NULL;
    turnset_join(set, &newest, &d);
    assert_int_equal(seen.count, 2);
    assert_int_equal(seen.last.prompt_id, 12);
    assert_int_equal(turnset_size(set), 1);
    turnset_release(set, &d);
    turnset_destroy(&set); /* an open turn is dropped without a callback */
    assert_int_equal(seen.count, 2);
}

static void test_a_finished_prompt_read_again_opens_a_new_turn(void **state) {
    (void)state;
    s_seen_t seen = {0};
    turnset_t *set = turnset_new(s_on_abandon, &seen);
    turnset_turn_t t = s_turn(S_RUNNER, 5);
    turnset_ref_t *a = NULL, *b = NULL;
    turnset_join(set, &t, &a);
    assert_true(turnset_outcome(set, a, 0)); /* EnterRequiresAction: the client's now */
    turnset_join(set, &t, &b);               /* the results resume it before a's task ended */
    assert_true(a != b);
    assert_true(turnset_outcome(set, b, 1));
    turnset_release(set, &a);
    turnset_release(set, &b);
    assert_int_equal(turnset_size(set), 0);
    assert_int_equal(seen.count, 0);
    turnset_release(set, &b); /* NULL: nothing */
    turnset_destroy(&set);
    turnset_destroy(&set);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_finished_turn_is_never_abandoned),
        cmocka_unit_test(test_a_runner_exit_abandons_its_open_turn_once),
        cmocka_unit_test(test_a_held_turn_is_abandoned_when_its_last_holder_releases_it),
        cmocka_unit_test(test_a_newer_prompt_abandons_the_older_turn_unless_it_finishes),
        cmocka_unit_test(test_a_finished_prompt_read_again_opens_a_new_turn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
