/*
 * File links at the state-machine level (ARCHITECTURE.md §3, "Files"): the transition that
 * persists a message naming files links them in its own transaction. A file belongs to at most
 * one chat; a chat holds at most max_attachments files, its earliest other uploads evicted
 * (deleted) to make room; the files of the message itself are never evicted by it, so only a
 * message over the cap on its own is refused; a cap below 1 fails the write. Clearing a chat
 * releases its files.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chatfile.h"
#include "chatsetup.h"
#include "chatstate.h"
#include "mem.h"
#include "testdb.h"

static testdb_t *s_db;
static PGconn *s_conn;
static char s_owner[ID_UUID_LEN + 1];
static char s_other[ID_UUID_LEN + 1];
static cs_settings_t s_settings; /* chatsetup_settings with a cap of 3 */

/* A complete text file of owner's. */
static void s_file(const char *owner, char id[ID_UUID_LEN + 1]) {
    char err[256];
    static const unsigned char sha[32] = {0};
    assert_int_equal(chatfile_begin(s_conn, owner, "text/plain", "a.txt", id, err, sizeof err), 0);
    assert_int_equal(chatfile_put(s_conn, id, 0, "abc", 3, err, sizeof err), 0);
    assert_int_equal(chatfile_complete(s_conn, id, 3, sha, -1, err, sizeof err), 0);
}

/* A content array: a text part, then a file part per id. Caller frees. */
static char *s_content(const char *const *ids, int n) {
    char *c = mem_strdup("[{\"type\":\"text\",\"text\":\"see\"}");
    for (int i = 0; i < n; i++) {
        char *next = mem_printf("%s,{\"type\":\"file\",\"file_id\":\"%s\"}", c, ids[i]);
        free(c);
        c = next;
    }
    char *closed = mem_printf("%s]", c);
    free(c);
    return closed;
}

static int s_create(const char *const *ids, int n, char chat[ID_UUID_LEN + 1], cs_error_t *err) {
    char *content = s_content(ids, n);
    cs_message_t first = {.role = "user", .content = content};
    cs_create_t c = {.owner_id = s_owner, .messages = &first, .message_count = 1};
    int rc = chatstate_create(s_conn, &s_settings, &c, NULL, chat, err);
    free(content);
    return rc;
}

/* Sends a message naming ids to chat (queued: the chat is running). 0 or -1 with err. */
static int s_send(const char *chat, const char *const *ids, int n, cs_error_t *err) {
    char *content = s_content(ids, n);
    cs_message_t m = {.role = "user", .content = content};
    chatstate_t *cs = chatstate_begin(s_conn, &s_settings, chat, err);
    assert_non_null(cs);
    int64_t mid = 0, qid = 0;
    int rc = chatstate_send_message(cs, &m, CS_BUSY_QUEUE, 0, &mid, &qid, err);
    if (rc == 0) {
        rc = chatstate_commit(&cs, NULL, NULL, err);
    }
    chatstate_destroy(&cs);
    free(content);
    return rc;
}

/* The chat a file is linked to ("" for none), or "gone" when the file no longer exists. */
static char *s_holder(const char *file) {
    char *sql = mem_printf("SELECT coalesce((SELECT coalesce(chat_id::text, '') FROM chat_files"
                           " WHERE id = '%s'), 'gone')",
                           file);
    char *v = testdb_scalar(s_conn, sql);
    free(sql);
    return v;
}

static void s_expect_holder(const char *file, const char *want) {
    char *got = s_holder(file);
    assert_non_null(got);
    assert_string_equal(got, want);
    free(got);
}

static void test_a_fourth_file_evicts_the_earliest_upload(void **u) {
    (void)u;
    char f[4][ID_UUID_LEN + 1];
    for (int i = 0; i < 4; i++) {
        s_file(s_owner, f[i]);
    }
    const char *ids[] = {f[0], f[1], f[2], f[3]};
    char chat[ID_UUID_LEN + 1];
    cs_error_t err;
    assert_int_equal(s_create(ids, 1, chat, &err), 0);
    assert_int_equal(s_send(chat, ids + 1, 1, &err), 0); /* queued: links written too */
    assert_int_equal(s_send(chat, ids + 2, 1, &err), 0);
    for (int i = 0; i < 3; i++) {
        s_expect_holder(f[i], chat);
    }
    assert_int_equal(s_send(chat, ids + 3, 1, &err), 0);
    s_expect_holder(f[0], "gone");
    for (int i = 1; i < 4; i++) {
        s_expect_holder(f[i], chat);
    }
    /* The bytes went with the row. */
    char *sql = mem_printf("SELECT count(*) FROM chat_file_chunks WHERE file_id = '%s'", f[0]);
    char *n = testdb_scalar(s_conn, sql);
    assert_string_equal(n, "0");
    free(n);
    free(sql);
}

static void test_a_message_over_the_cap_alone_is_refused_and_changes_nothing(void **u) {
    (void)u;
    char f[4][ID_UUID_LEN + 1];
    for (int i = 0; i < 4; i++) {
        s_file(s_owner, f[i]);
    }
    const char *ids[] = {f[0], f[1], f[2], f[3]};
    char chat[ID_UUID_LEN + 1];
    cs_error_t err;
    assert_int_equal(s_create(ids, 4, chat, &err), -1);
    assert_int_equal(err.rc, CS_BAD_INPUT);
    assert_non_null(strstr(err.message, "over the chat's cap of 3"));
    for (int i = 0; i < 4; i++) {
        s_expect_holder(f[i], "");
    }
    /* The same file twice is one file: three distinct fit. */
    const char *twice[] = {f[0], f[1], f[2], f[0]};
    assert_int_equal(s_create(twice, 4, chat, &err), 0);
    s_expect_holder(f[0], chat);
}

static void test_the_message_s_own_files_are_never_evicted_by_it(void **u) {
    (void)u;
    char f[5][ID_UUID_LEN + 1];
    for (int i = 0; i < 5; i++) {
        s_file(s_owner, f[i]);
    }
    const char *ids[] = {f[0], f[1], f[2]};
    char chat[ID_UUID_LEN + 1];
    cs_error_t err;
    assert_int_equal(s_create(ids, 3, chat, &err), 0);
    /* f[0] (the earliest) again, with two new ones: the two others make room. */
    const char *next[] = {f[0], f[3], f[4]};
    assert_int_equal(s_send(chat, next, 3, &err), 0);
    s_expect_holder(f[0], chat);
    s_expect_holder(f[1], "gone");
    s_expect_holder(f[2], "gone");
    s_expect_holder(f[3], chat);
    s_expect_holder(f[4], chat);
}

static void test_a_file_belongs_to_one_chat_and_one_owner(void **u) {
    (void)u;
    char mine[ID_UUID_LEN + 1], theirs[ID_UUID_LEN + 1];
    s_file(s_owner, mine);
    s_file(s_other, theirs);
    const char *a_ids[] = {mine};
    char a[ID_UUID_LEN + 1], b[ID_UUID_LEN + 1];
    cs_error_t err;
    assert_int_equal(s_create(a_ids, 1, a, &err), 0);
    const char *none[] = {NULL};
    assert_int_equal(s_create(none, 0, b, &err), 0);
    assert_int_equal(s_send(b, a_ids, 1, &err), -1);
    assert_int_equal(err.rc, CS_BAD_INPUT);
    assert_non_null(strstr(err.message, "attached to another chat"));
    s_expect_holder(mine, a);
    const char *t_ids[] = {theirs};
    assert_int_equal(s_send(b, t_ids, 1, &err), -1);
    assert_int_equal(err.rc, CS_BAD_INPUT);
    s_expect_holder(theirs, "");
    /* A file that does not exist is refused the same way. */
    const char *ghost[] = {"99999999-9999-4999-8999-999999999999"};
    assert_int_equal(s_send(b, ghost, 1, &err), -1);
    assert_int_equal(err.rc, CS_BAD_INPUT);
}

static void test_a_cap_below_one_fails_the_write(void **u) {
    (void)u;
    char f[ID_UUID_LEN + 1];
    s_file(s_owner, f);
    cs_settings_t saved = s_settings;
    s_settings.max_attachments = 0;
    const char *ids[] = {f};
    char chat[ID_UUID_LEN + 1];
    cs_error_t err;
    assert_int_equal(s_create(ids, 1, chat, &err), -1);
    s_settings = saved;
    assert_int_equal(err.rc, CS_BAD_INPUT);
    assert_non_null(strstr(err.message, "no attachment cap"));
    s_expect_holder(f, "");
}

static void test_an_edit_naming_an_evicted_file_is_refused(void **u) {
    (void)u;
    char f[4][ID_UUID_LEN + 1];
    for (int i = 0; i < 4; i++) {
        s_file(s_owner, f[i]);
    }
    const char *ids[] = {f[0], f[1], f[2], f[3]};
    char chat[ID_UUID_LEN + 1];
    cs_error_t err;
    assert_int_equal(s_create(ids, 1, chat, &err), 0);
    assert_int_equal(s_send(chat, ids + 1, 3, &err), 0); /* evicts f[0] */
    s_expect_holder(f[0], "gone");
    char *sql = mem_printf("SELECT min(id) FROM chat_messages WHERE chat_id = '%s'"
                           " AND role = 'user'",
                           chat);
    char *mid = testdb_scalar(s_conn, sql);
    free(sql);
    char *content = s_content(ids, 1);
    cs_message_t m = {.role = "user", .content = content};
    chatstate_t *cs = chatstate_begin(s_conn, &s_settings, chat, &err);
    assert_non_null(cs);
    assert_int_equal(
        chatstate_edit_message(cs, strtoll(mid, NULL, 10), &m, CS_EDIT_SET_FORMAT, &err), -1);
    assert_int_equal(err.rc, CS_BAD_INPUT);
    chatstate_destroy(&cs);
    free(content);
    /* Without the evicted file the edit goes through. */
    cs = chatstate_begin(s_conn, &s_settings, chat, &err);
    cs_message_t plain = {.role = "user", .content = "[{\"type\":\"text\",\"text\":\"no file\"}]"};
    assert_int_equal(
        chatstate_edit_message(cs, strtoll(mid, NULL, 10), &plain, CS_EDIT_SET_FORMAT, &err), 0);
    assert_int_equal(chatstate_commit(&cs, NULL, NULL, &err), 0);
    free(mid);
}

static void test_clearing_releases_the_chat_s_files(void **u) {
    (void)u;
    char f[2][ID_UUID_LEN + 1];
    s_file(s_owner, f[0]);
    s_file(s_owner, f[1]);
    const char *ids[] = {f[0], f[1]};
    char chat[ID_UUID_LEN + 1];
    cs_error_t err;
    assert_int_equal(s_create(ids, 2, chat, &err), 0);
    /* The unowned running chat's interruption finishes at once: it waits, and may be cleared. */
    chatstate_t *cs = chatstate_begin(s_conn, &s_settings, chat, &err);
    assert_non_null(cs);
    assert_int_equal(chatstate_interrupt(cs, "test", &err), 0);
    assert_int_equal(chatstate_commit(&cs, NULL, NULL, &err), 0);
    cs = chatstate_begin(s_conn, &s_settings, chat, &err);
    assert_non_null(cs);
    assert_int_equal(chatstate_clear_context(cs, NULL, &err), 0);
    assert_int_equal(chatstate_commit(&cs, NULL, NULL, &err), 0);
    s_expect_holder(f[0], "gone");
    s_expect_holder(f[1], "gone");
}

static int s_group_setup(void **state) {
    (void)state;
    s_db = testdb_new();
    s_conn = testdb_connect(s_db);
    ASSERT(testdb_user_new(s_conn, "files", s_owner) == 0);
    ASSERT(testdb_user_new(s_conn, "other", s_other) == 0);
    s_settings = chatsetup_settings;
    s_settings.max_attachments = 3;
    return 0;
}

static int s_group_teardown(void **state) {
    (void)state;
    PQfinish(s_conn);
    testdb_destroy(&s_db);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_fourth_file_evicts_the_earliest_upload),
        cmocka_unit_test(test_a_message_over_the_cap_alone_is_refused_and_changes_nothing),
        cmocka_unit_test(test_the_message_s_own_files_are_never_evicted_by_it),
        cmocka_unit_test(test_a_file_belongs_to_one_chat_and_one_owner),
        cmocka_unit_test(test_a_cap_below_one_fails_the_write),
        cmocka_unit_test(test_an_edit_naming_an_evicted_file_is_refused),
        cmocka_unit_test(test_clearing_releases_the_chat_s_files),
    };
    return cmocka_run_group_tests(tests, s_group_setup, s_group_teardown);
}
