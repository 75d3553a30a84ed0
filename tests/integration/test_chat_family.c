/*
 * Chat families (issue 36, ARCHITECTURE.md §3, "Families"), end to end on a real PostgreSQL,
 * a real broker and a real chatfleet-gateway: children are created through the state machine
 * (chatstate_create with a parent, as the subagent tools will), and read, listed and archived
 * through the gateway's HTTP API. Each test has a user of its own, so a listing shows only
 * that test's chats. Proves the embedded children and their ids, the depth and children caps,
 * the owner check, the family archive (all or nothing, refused while a descendant runs), the
 * refused unarchive of a child under an archived parent, and one update hint per member.
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

#include "bus.h"
#include "chatsetup.h"
#include "chatstate.h"
#include "cluster.h"
#include "db.h"
#include "mem.h"
#include "proc.h"
#include "protocol.h"
#include "testdb.h"

#define WAIT_MS 8000
#define EMPTY   "{\"content\":[]}" /* a chat with no user message: waiting */

static cluster_t *s_c;     /* PostgreSQL, a broker and one gateway; no worker */
static PGconn *s_conn;     /* the harness's connection (cluster_db) */
static const char *s_base; /* the gateway's URL */
static const char *s_sub;  /* the broker's subscriber endpoint, to read the gateway's hints */
static char s_gw_bin[512];

/* One test's user: its bearer token and its id. */
typedef struct {
    char *token;
    char id[ID_UUID_LEN + 1];
} user_t;

static void s_user(const char *name, user_t *u) {
    char *url = mem_printf("CHATFLEET_DATABASE_URL=%s", cluster_db_url(s_c));
    char *env[] = {url, NULL};
    char *argv[] = {s_gw_bin, "user-add", (char *)name, NULL};
    u->token = proc_output(argv, env);
    free(url);
    assert_non_null(u->token);
    u->token[strcspn(u->token, "\n")] = '\0';
    char *sql = mem_printf("SELECT id FROM users WHERE name = '%s'", name);
    char *id = testdb_scalar(s_conn, sql);
    assert_non_null(id);
    snprintf(u->id, sizeof u->id, "%s", id);
    free(id);
    free(sql);
}

/* ---- HTTP ---- */

static json_t *s_req(const user_t *u, const char *method, const char *path, const char *body,
                     long want) {
    char url[1024];
    snprintf(url, sizeof url, "%s%s", s_base, path);
    proc_http_t r;
    if (proc_http(method, url, u->token, body, &r) != 0) {
        fail_msg("%s %s: no response", method, path);
    }
    if (r.status != want) {
        fail_msg("%s %s %s: want %ld, got %ld: %.300s", method, path, body ? body : "", want,
                 r.status, r.body);
    }
    json_t *v = r.body[0] ? json_loads(r.body, 0, NULL) : json_null();
    if (!v) {
        fail_msg("%s %s: the body is not JSON: %.300s", method, path, r.body);
    }
    proc_http_free(&r);
    if (want >= 400 && !json_is_string(json_object_get(v, "message"))) {
        fail_msg("%s %s: the %ld has no error message", method, path, want);
    }
    return v;
}

static const char *s_str(json_t *o, const char *key) {
    return json_string_value(json_object_get(o, key));
}

/* A root chat of u through POST /api/v2/chats; caller frees. */
static char *s_root(const user_t *u, const char *body) {
    json_t *c = s_req(u, "POST", "/api/v2/chats", body, 201);
    char *id = mem_strdup(s_str(c, "id"));
    json_decref(c);
    return id;
}

static json_t *s_chat(const user_t *u, const char *chat) {
    char *p = mem_printf("/api/v2/chats/%s", chat);
    json_t *c = s_req(u, "GET", p, NULL, 200);
    free(p);
    return c;
}

static void s_archive(const user_t *u, const char *chat, bool archived, long want) {
    char *p = mem_printf("/api/v2/chats/%s", chat);
    json_decref(
        s_req(u, "PATCH", p, archived ? "{\"archived\":true}" : "{\"archived\":false}", want));
    free(p);
}

static bool s_archived(const user_t *u, const char *chat) {
    json_t *c = s_chat(u, chat);
    bool a = json_is_true(json_object_get(c, "archived"));
    json_decref(c);
    return a;
}

/* ---- Children through the state machine ---- */

/* Creates a chat of owner under parent with the caps given (0: none), running when it has a
 * first user message, waiting otherwise. Returns 0 with its id in out, or -1 with err. */
static int s_try_child(const char *owner, const char *parent, bool running, int max_depth,
                       int max_children, char out[ID_UUID_LEN + 1], cs_error_t *err) {
    cs_message_t first = {.role = "user", .content = CHATSETUP_USER_MSG};
    cs_create_t c = {.owner_id = owner,
                     .messages = running ? &first : NULL,
                     .message_count = running ? 1 : 0,
                     .parent_chat_id = parent,
                     .max_depth = max_depth,
                     .max_children = max_children};
    return chatstate_create(s_conn, &chatsetup_settings, &c, NULL, out, err);
}

static void s_child(const user_t *u, const char *parent, bool running, char out[ID_UUID_LEN + 1]) {
    cs_error_t err;
    if (s_try_child(u->id, parent, running, 0, 0, out, &err) != 0) {
        fail_msg("a child of %s: %s", parent, err.message);
    }
}

/* Expects the create under parent to be refused with rc and to leave no row behind. */
static void s_refused(const char *owner, const char *parent, int max_depth, int max_children,
                      cs_rc_t rc, const char *what) {
    static const char count_sql[] = "SELECT (SELECT count(*) FROM chats) || ' ' ||"
                                    " (SELECT count(*) FROM chat_messages)";
    char *before = testdb_scalar(s_conn, count_sql);
    char id[ID_UUID_LEN + 1] = "";
    cs_error_t err = {.rc = CS_OK};
    if (s_try_child(owner, parent, true, max_depth, max_children, id, &err) == 0) {
        fail_msg("%s: created %s, want a refusal", what, id);
    }
    if (err.rc != rc) {
        fail_msg("%s: want rc %d, got %d (%s)", what, (int)rc, (int)err.rc, err.message);
    }
    printf("  %s: refused: %s\n", what, err.message);
    char *after = testdb_scalar(s_conn, count_sql);
    if (strcmp(before, after) != 0) {
        fail_msg("%s: refused, but the chats and messages counts went from %s to %s", what, before,
                 after);
    }
    free(after);
    free(before);
}

/* Asserts a chat object's family fields: a root (parent NULL) has neither id; a child both. */
static void s_expect_family(json_t *c, const char *parent, const char *root) {
    if (!parent) {
        assert_null(json_object_get(c, "parent_chat_id"));
        assert_null(json_object_get(c, "root_chat_id"));
        return;
    }
    if (!s_str(c, "parent_chat_id") || !s_str(c, "root_chat_id")) {
        char *d = json_dumps(c, 0);
        fail_msg("child %s has no parent_chat_id or root_chat_id: %s", s_str(c, "id"), d);
    }
    assert_string_equal(s_str(c, "parent_chat_id"), parent);
    assert_string_equal(s_str(c, "root_chat_id"), root);
}

/* ---- Tests ---- */

static void test_children_are_embedded_flat_in_the_root_and_listed_only_there(void **state) {
    (void)state;
    user_t u;
    s_user("fam-embed", &u);
    char *root = s_root(&u, EMPTY);
    char child[ID_UUID_LEN + 1];
    char grand[ID_UUID_LEN + 1];
    s_child(&u, root, false, child);
    s_child(&u, child, false, grand);
    json_t *list = s_req(&u, "GET", "/api/v2/chats", NULL, 200);
    assert_int_equal(json_array_size(list), 1);
    json_t *r = json_array_get(list, 0);
    assert_string_equal(s_str(r, "id"), root);
    s_expect_family(r, NULL, NULL);
    json_t *kids = json_object_get(r, "children");
    assert_true(json_is_array(kids));
    assert_int_equal(json_array_size(kids), 2);
    /* Flat, in creation order: the child, then the grandchild, each with its own parent. */
    json_t *k0 = json_array_get(kids, 0);
    json_t *k1 = json_array_get(kids, 1);
    assert_string_equal(s_str(k0, "id"), child);
    s_expect_family(k0, root, root);
    assert_string_equal(s_str(k1, "id"), grand);
    s_expect_family(k1, child, root);
    for (size_t i = 0; i < 2; i++) {
        json_t *k = json_array_get(kids, i);
        assert_true(json_is_array(json_object_get(k, "children")));
        assert_int_equal(json_array_size(json_object_get(k, "children")), 0);
        assert_string_equal(s_str(k, "status"), "waiting");
        assert_false(json_is_true(json_object_get(k, "archived")));
        assert_string_equal(s_str(k, "owner_id"), u.id);
    }
    /* A child is still readable by its id, with its ids and no children of its own. */
    json_t *c = s_chat(&u, child);
    s_expect_family(c, root, root);
    assert_int_equal(json_array_size(json_object_get(c, "children")), 0);
    json_t *g = s_chat(&u, grand);
    s_expect_family(g, child, root);
    assert_int_equal(json_array_size(json_object_get(g, "children")), 0);
    json_t *rc = s_chat(&u, root);
    assert_int_equal(json_array_size(json_object_get(rc, "children")), 2);
    json_decref(rc);
    json_decref(g);
    json_decref(c);
    json_decref(list);
    free(root);
    free(u.token);
}

static void
test_depth_and_children_caps_and_a_foreign_parent_are_refused_creating_nothing(void **state) {
    (void)state;
    user_t u;
    s_user("fam-caps", &u);
    char *root = s_root(&u, EMPTY);
    char child[ID_UUID_LEN + 1];
    char grand[ID_UUID_LEN + 1];
    cs_error_t err;
    /* Depth: a child of the root sits at depth 1, which a cap of 1 allows; its child not. */
    assert_int_equal(s_try_child(u.id, root, false, 1, 0, child, &err), 0);
    s_refused(u.id, child, 1, 0, CS_CONFLICT, "depth 2 over a depth cap of 1");
    assert_int_equal(s_try_child(u.id, child, false, 2, 0, grand, &err), 0);
    char *depth = mem_printf("SELECT depth FROM chats WHERE id = '%s'", grand);
    char *d = testdb_scalar(s_conn, depth);
    assert_string_equal(d, "2");
    free(d);
    free(depth);
    /* Children: the root holds one; a cap of 2 allows a second and refuses a third. */
    char second[ID_UUID_LEN + 1];
    assert_int_equal(s_try_child(u.id, root, false, 0, 2, second, &err), 0);
    s_refused(u.id, root, 0, 2, CS_CONFLICT, "a third child over a children cap of 2");
    /* The cap counts the parent's own children: the grandchild is not the root's. */
    s_refused(u.id, child, 0, 1, CS_CONFLICT, "a second child of the child over a cap of 1");
    char third[ID_UUID_LEN + 1];
    assert_int_equal(s_try_child(u.id, root, false, 0, 3, third, &err), 0);
    /* Another user's chat, or no chat at all, is not a parent. */
    user_t other;
    s_user("fam-caps-other", &other);
    char *foreign = s_root(&other, EMPTY);
    s_refused(u.id, foreign, 0, 0, CS_NOT_FOUND, "another user's root as the parent");
    char ochild[ID_UUID_LEN + 1];
    s_child(&other, foreign, false, ochild);
    s_refused(u.id, ochild, 0, 0, CS_NOT_FOUND, "another user's child as the parent");
    s_refused(other.id, root, 0, 0, CS_NOT_FOUND, "the first user's root, for the other");
    s_refused(u.id, "00000000-0000-4000-8000-00000000dead", 0, 0, CS_NOT_FOUND,
              "a parent that does not exist");
    json_t *r = s_chat(&u, root);
    assert_int_equal(json_array_size(json_object_get(r, "children")), 4);
    json_decref(r);
    free(foreign);
    free(other.token);
    free(root);
    free(u.token);
}

static void test_archiving_the_root_archives_the_family_and_unarchiving_restores_it(void **state) {
    (void)state;
    user_t u;
    s_user("fam-archive", &u);
    char *root = s_root(&u, EMPTY);
    char child[ID_UUID_LEN + 1];
    char grand[ID_UUID_LEN + 1];
    s_child(&u, root, false, child);
    s_child(&u, child, false, grand);
    const char *members[] = {root, child, grand};
    s_archive(&u, root, true, 204);
    for (int i = 0; i < 3; i++) {
        if (!s_archived(&u, members[i])) {
            fail_msg("member %d (%s) is not archived after the root's archive", i, members[i]);
        }
    }
    json_t *live = s_req(&u, "GET", "/api/v2/chats", NULL, 200);
    assert_int_equal(json_array_size(live), 0);
    json_t *arch = s_req(&u, "GET", "/api/v2/chats?archived=true", NULL, 200);
    assert_int_equal(json_array_size(arch), 1);
    json_t *r = json_array_get(arch, 0);
    assert_string_equal(s_str(r, "id"), root);
    assert_true(json_is_true(json_object_get(r, "archived")));
    json_t *kids = json_object_get(r, "children");
    assert_int_equal(json_array_size(kids), 2);
    for (size_t i = 0; i < 2; i++) {
        assert_true(json_is_true(json_object_get(json_array_get(kids, i), "archived")));
    }
    s_archive(&u, root, false, 204);
    for (int i = 0; i < 3; i++) {
        if (s_archived(&u, members[i])) {
            fail_msg("member %d (%s) is still archived after the root's unarchive", i, members[i]);
        }
    }
    json_t *again = s_req(&u, "GET", "/api/v2/chats", NULL, 200);
    assert_int_equal(json_array_size(again), 1);
    assert_int_equal(json_array_size(json_object_get(json_array_get(again, 0), "children")), 2);
    json_t *none = s_req(&u, "GET", "/api/v2/chats?archived=true", NULL, 200);
    assert_int_equal(json_array_size(none), 0);
    json_decref(none);
    json_decref(again);
    json_decref(arch);
    json_decref(live);
    free(root);
    free(u.token);
}

static void
test_a_child_alone_archives_alone_and_cannot_unarchive_under_an_archived_parent(void **state) {
    (void)state;
    user_t u;
    s_user("fam-lone", &u);
    char *root = s_root(&u, EMPTY);
    char a[ID_UUID_LEN + 1];
    char b[ID_UUID_LEN + 1];
    char g[ID_UUID_LEN + 1];
    s_child(&u, root, false, a);
    s_child(&u, root, false, b);
    s_child(&u, a, false, g);
    /* A lone child's archive changes only that child: not the root, its sibling or its own
     * child. */
    s_archive(&u, a, true, 204);
    assert_true(s_archived(&u, a));
    assert_false(s_archived(&u, root));
    assert_false(s_archived(&u, b));
    assert_false(s_archived(&u, g));
    /* The grandchild archived too; its parent (not the root) is archived, so its unarchive is
     * refused and changes nothing. */
    s_archive(&u, g, true, 204);
    char *dg = chatsetup_digest(s_conn, g);
    s_archive(&u, g, false, 409);
    char *dg2 = chatsetup_digest(s_conn, g);
    assert_string_equal(dg, dg2);
    assert_true(s_archived(&u, g));
    free(dg2);
    free(dg);
    /* With the root archived (the family with it), a child's unarchive is refused. */
    s_archive(&u, a, false, 204);
    s_archive(&u, g, false, 204);
    s_archive(&u, root, true, 204);
    const char *members[] = {root, a, b, g};
    char *before[4];
    for (int i = 0; i < 4; i++) {
        before[i] = chatsetup_digest(s_conn, members[i]);
    }
    s_archive(&u, b, false, 409);
    s_archive(&u, g, false, 409);
    for (int i = 0; i < 4; i++) {
        char *after = chatsetup_digest(s_conn, members[i]);
        if (strcmp(before[i], after) != 0) {
            fail_msg("member %d (%s) changed on a refused unarchive", i, members[i]);
        }
        assert_true(s_archived(&u, members[i]));
        free(after);
        free(before[i]);
    }
    free(root);
    free(u.token);
}

static void test_a_running_descendant_refuses_the_root_archive_and_nothing_changes(void **state) {
    (void)state;
    user_t u;
    s_user("fam-running", &u);
    char *root = s_root(&u, EMPTY);
    char a[ID_UUID_LEN + 1];
    char b[ID_UUID_LEN + 1];
    char g[ID_UUID_LEN + 1];
    s_child(&u, root, false, a);
    s_child(&u, a, false, g);
    s_child(&u, root, true, b); /* created with a user message: running */
    json_t *bc = s_chat(&u, b);
    assert_string_equal(s_str(bc, "status"), "running");
    json_decref(bc);
    const char *members[] = {root, a, g, b};
    char *before[4];
    for (int i = 0; i < 4; i++) {
        before[i] = chatsetup_digest(s_conn, members[i]);
    }
    s_archive(&u, root, true, 409);
    for (int i = 0; i < 4; i++) {
        char *after = chatsetup_digest(s_conn, members[i]);
        if (strcmp(before[i], after) != 0) {
            fail_msg("member %d (%s) changed on a refused family archive", i, members[i]);
        }
        assert_false(s_archived(&u, members[i]));
        free(after);
        free(before[i]);
    }
    json_t *arch = s_req(&u, "GET", "/api/v2/chats?archived=true", NULL, 200);
    assert_int_equal(json_array_size(arch), 0);
    json_decref(arch);
    free(root);
    free(u.token);
}

static void test_an_archived_family_refuses_a_new_child(void **state) {
    (void)state;
    user_t u;
    s_user("fam-closed", &u);
    char *root = s_root(&u, EMPTY);
    char a[ID_UUID_LEN + 1];
    s_child(&u, root, false, a);
    s_archive(&u, root, true, 204);
    s_refused(u.id, root, 0, 0, CS_CONFLICT, "a child of an archived root");
    s_refused(u.id, a, 0, 0, CS_CONFLICT, "a grandchild in an archived family");
    /* Unarchived, the family takes children again. */
    s_archive(&u, root, false, 204);
    char g[ID_UUID_LEN + 1];
    s_child(&u, a, false, g);
    json_t *r = s_chat(&u, root);
    assert_int_equal(json_array_size(json_object_get(r, "children")), 2);
    json_decref(r);
    free(root);
    free(u.token);
}

/* A family holds at most CS_FAMILY_MAX chats besides its root, with no caps set: the next
 * child is refused and nothing is written. */
static void test_a_family_at_its_size_limit_refuses_another_child(void **state) {
    (void)state;
    user_t u;
    s_user("fam-full", &u);
    char *root = s_root(&u, EMPTY);
    char *fill =
        mem_printf("INSERT INTO chats (id, owner_id, title, parent_chat_id, root_chat_id, depth)"
                   " SELECT gen_random_uuid(), '%s', 'member ' || n, '%s', '%s', 1"
                   " FROM generate_series(1, %d) n",
                   u.id, root, root, CS_FAMILY_MAX);
    char why[256] = "";
    if (db_exec(s_conn, why, sizeof why, fill, 0, NULL) != DB_OK) {
        fail_msg("filling the family: %s", why);
    }
    free(fill);
    s_refused(u.id, root, 0, 0, CS_CONFLICT, "a child past the family's size limit");
    json_t *r = s_chat(&u, root);
    assert_int_equal(json_array_size(json_object_get(r, "children")), CS_FAMILY_MAX);
    json_decref(r);
    free(root);
    free(u.token);
}

static void test_the_family_archive_publishes_an_update_hint_for_each_member(void **state) {
    (void)state;
    user_t u;
    s_user("fam-hints", &u);
    char *root = s_root(&u, EMPTY);
    char a[ID_UUID_LEN + 1];
    char g[ID_UUID_LEN + 1];
    s_child(&u, root, false, a);
    s_child(&u, a, false, g);
    const char *members[] = {root, a, g};
    bus_subscriber_t *sub = bus_subscriber_new(s_sub);
    assert_non_null(sub);
    for (int i = 0; i < 3; i++) {
        char topic[PROTO_TOPIC_MAX_BYTES];
        snprintf(topic, sizeof topic, "%s%s", PROTO_TOPIC_UPDATE, members[i]);
        assert_int_equal(bus_subscriber_subscribe(sub, topic), 0);
    }
    /* A subscription reaches the broker a little after it is made: retitle the root until its
     * hint arrives, then drain, so the next hints are the archive's. */
    char *path = mem_printf("/api/v2/chats/%s", root);
    wire_msg_t m;
    int64_t deadline = id_now_ms() + WAIT_MS;
    for (int n = 0;; n++) {
        assert_true(id_now_ms() < deadline);
        char *body = mem_printf("{\"title\":\"warm-up %d\"}", n);
        json_decref(s_req(&u, "PATCH", path, body, 204));
        free(body);
        if (bus_subscriber_recv(sub, &m, 200) == 1) {
            wire_msg_clear(&m);
            break;
        }
    }
    while (bus_subscriber_recv(sub, &m, 300) == 1) {
        wire_msg_clear(&m);
    }
    s_archive(&u, root, true, 204);
    bool seen[3] = {false, false, false};
    int left = 3;
    deadline = id_now_ms() + WAIT_MS;
    while (left > 0 && id_now_ms() < deadline) {
        if (bus_subscriber_recv(sub, &m, 200) != 1) {
            continue;
        }
        assert_int_equal(m.type, WIRE_UPDATE);
        for (int i = 0; i < 3; i++) {
            if (strcmp(m.u.update.chat_id, members[i]) != 0) {
                continue;
            }
            assert_true(m.u.update.archived);
            assert_string_equal(m.u.update.owner_id, u.id);
            json_t *c = s_chat(&u, members[i]);
            assert_int_equal(m.u.update.snapshot_version,
                             json_integer_value(json_object_get(c, "snapshot_version")));
            json_decref(c);
            left -= !seen[i];
            seen[i] = true;
        }
        wire_msg_clear(&m);
    }
    for (int i = 0; i < 3; i++) {
        if (!seen[i]) {
            fail_msg("no update hint for member %d (%s) of the archived family", i, members[i]);
        }
    }
    bus_subscriber_destroy(&sub);
    free(path);
    free(root);
    free(u.token);
}

/* ---- Agent waits through the state machine ---- */

/* Runs one worker move on chat under its current fence: acquired first when unowned. */
typedef int (*s_move_fn)(chatstate_t *cs, const cs_fence_t *f, void *arg, cs_error_t *err);

static void s_worker_move(const char *chat, s_move_fn fn, void *arg) {
    cs_error_t err;
    char *owned = mem_printf("SELECT worker_id IS NOT NULL FROM chats WHERE id = '%s'", chat);
    char *is = testdb_scalar(s_conn, owned);
    free(owned);
    if (is && !strcmp(is, "f")) {
        chatstate_t *cs = chatstate_begin(s_conn, &chatsetup_settings, chat, &err);
        if (!cs || chatstate_acquire(cs, CHATSETUP_WORKER, CHATSETUP_RUNNER, &err) != 0 ||
            chatstate_commit(&cs, NULL, NULL, &err) != 0) {
            fail_msg("acquire %s: %s", chat, err.message);
        }
    }
    free(is);
    cs_fence_t f;
    chatsetup_fence(s_conn, chat, &f);
    chatstate_t *cs = chatstate_begin(s_conn, &chatsetup_settings, chat, &err);
    if (!cs || fn(cs, &f, arg, &err) != 0 || chatstate_commit(&cs, NULL, NULL, &err) != 0) {
        chatstate_destroy(&cs);
        fail_msg("worker move on %s: %s", chat, err.message);
    }
}

static int s_step_fn(chatstate_t *cs, const cs_fence_t *f, void *arg, cs_error_t *err) {
    cs_message_t m = {.role = "assistant", .content = arg};
    return chatstate_commit_step(cs, f, &m, 1, err);
}

static int s_wait_fn(chatstate_t *cs, const cs_fence_t *f, void *arg, cs_error_t *err) {
    (void)arg;
    return chatstate_enter_agent_wait(cs, f, err);
}

static int s_finish_fn(chatstate_t *cs, const cs_fence_t *f, void *arg, cs_error_t *err) {
    (void)arg;
    return chatstate_finish_turn(cs, f, NULL, 0, err);
}

typedef struct {
    const char *parent;
    int resumed;
    int failed;
} s_resumer_t;

static void *s_resumer(void *arg) {
    s_resumer_t *r = arg;
    PGconn *conn = PQconnectdb(cluster_db_url(s_c));
    bool resumed = false;
    cs_error_t err;
    for (int tries = 0; tries < 5; tries++) {
        if (chatstate_agents_resume(conn, &chatsetup_settings, r->parent, NULL, &resumed, &err) ==
            0) {
            r->resumed = resumed;
            PQfinish(conn);
            return NULL;
        }
    }
    r->failed = 1;
    PQfinish(conn);
    return NULL;
}

/* Eight resumptions of one agent wait at once (as many children's ends would make): exactly
 * one answers the wait; the parent held no owner while it waited, and none can take it then. */
static void test_concurrent_resumptions_of_one_agent_wait_resume_it_exactly_once(void **st) {
    (void)st;
    user_t u;
    s_user("resume", &u);
    char *parent = s_root(&u, "{\"content\":[{\"type\":\"text\",\"text\":\"go\"}]}");
    char kids[2][ID_UUID_LEN + 1];
    s_child(&u, parent, true, kids[0]);
    s_child(&u, parent, true, kids[1]);
    s_worker_move(parent, s_step_fn,
                  "[{\"type\":\"tool-call\",\"tool_call_id\":\"w1\",\"tool_name\":"
                  "\"wait_agent\",\"args\":{}}]");
    s_worker_move(parent, s_wait_fn, NULL);
    char *q = mem_printf("SELECT status || ':' || waiting_on_agents || ':' || (worker_id IS NULL)"
                         " || ':' || (SELECT count(*) FROM chat_heartbeats WHERE chat_id = c.id)"
                         " FROM chats c WHERE id = '%s'",
                         parent);
    char *v = testdb_scalar(s_conn, q);
    assert_string_equal(v, "requires_action:true:true:0");
    free(v);
    /* Acquire refuses an agent wait. */
    cs_error_t err;
    chatstate_t *cs = chatstate_begin(s_conn, &chatsetup_settings, parent, &err);
    assert_non_null(cs);
    assert_int_equal(chatstate_acquire(cs, CHATSETUP_WORKER, CHATSETUP_RUNNER, &err), -1);
    assert_int_equal(err.rc, CS_CONFLICT);
    chatstate_destroy(&cs);
    /* A child still runs: an attempt leaves the wait alone. */
    s_worker_move(kids[0], s_finish_fn, NULL);
    bool resumed = true;
    assert_int_equal(
        chatstate_agents_resume(s_conn, &chatsetup_settings, parent, NULL, &resumed, &err), 0);
    assert_false(resumed);
    s_worker_move(kids[1], s_finish_fn, NULL);
    pthread_t t[8];
    s_resumer_t r[8];
    for (int i = 0; i < 8; i++) {
        r[i] = (s_resumer_t){.parent = parent};
        assert_int_equal(pthread_create(&t[i], NULL, s_resumer, &r[i]), 0);
    }
    int once = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(r[i].failed, 0);
        once += r[i].resumed;
    }
    assert_int_equal(once, 1);
    v = testdb_scalar(s_conn, q);
    assert_string_equal(v, "running:false:true:0");
    free(v);
    free(q);
    q = mem_printf(
        "SELECT count(*) || ':' || string_agg(jsonb_array_length(e.p -> 'result' ->"
        " 'agents')::text, ',') FROM chat_messages m, jsonb_array_elements(m.content::jsonb)"
        " e(p) WHERE m.chat_id = '%s' AND m.role = 'tool' AND e.p ->> 'tool_call_id' ="
        " 'w1'",
        parent);
    v = testdb_scalar(s_conn, q);
    assert_string_equal(v, "1:2");
    free(v);
    free(q);
    free(parent);
    free(u.token);
}

static int s_setup(void **state) {
    (void)state;
    cluster_opts_t o = {.name = "test_chat_family", .gateways = 1, .workers = 0};
    s_c = cluster_new(&o);
    s_conn = cluster_db(s_c);
    s_base = cluster_url(s_c, 0);
    s_sub = cluster_endpoint(s_c, "sub");
    snprintf(s_gw_bin, sizeof s_gw_bin, "%s/api-gateway/chatfleet-gateway",
             getenv("CHATFLEET_BUILD_DIR"));
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    return cluster_destroy(&s_c) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_children_are_embedded_flat_in_the_root_and_listed_only_there),
        cmocka_unit_test(
            test_depth_and_children_caps_and_a_foreign_parent_are_refused_creating_nothing),
        cmocka_unit_test(test_archiving_the_root_archives_the_family_and_unarchiving_restores_it),
        cmocka_unit_test(
            test_a_child_alone_archives_alone_and_cannot_unarchive_under_an_archived_parent),
        cmocka_unit_test(test_a_running_descendant_refuses_the_root_archive_and_nothing_changes),
        cmocka_unit_test(test_an_archived_family_refuses_a_new_child),
        cmocka_unit_test(test_a_family_at_its_size_limit_refuses_another_child),
        cmocka_unit_test(test_the_family_archive_publishes_an_update_hint_for_each_member),
        cmocka_unit_test(test_concurrent_resumptions_of_one_agent_wait_resume_it_exactly_once),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
