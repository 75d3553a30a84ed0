/*
 * The chatfleet CLI end to end against a running cluster (the fixture's PostgreSQL,
 * chatfleet-broker, chatfleet-gateway, two chatfleet-worker with the sim model): ask piped
 * prints exactly the answer (text, or the structured value), a gateway killed and restarted
 * mid-turn is redialed and the output is the committed answer exactly once, a dynamic tool
 * round trip through --tool, exit codes for failed, canceled and Ctrl-C'd requests, the
 * chat subcommands, and --file: uploads named by the message's file parts, an unknown
 * extension refused before anything is sent.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"
#include "id.h"
#include "mem.h"
#include "proc.h"

#define S_NWORKERS 2
#define S_TURN_MS  20000

static cluster_t *s_cluster;

static void s_nap(int ms) {
    struct timespec ts = {0, ms * 1000 * 1000}; /* poll interval, not a wait for state */
    nanosleep(&ts, NULL);
}

/* --- Running the CLI. --- */

typedef struct {
    pid_t pid;
    char out[64];
    char err[64];
} s_cli_t;

/* Starts `chatfleet ARGS...` (NULL-terminated) with stdout and stderr in files. */
static void s_cli_start(s_cli_t *c, const char *name, ...) {
    snprintf(c->out, sizeof c->out, "test_cli.%s.out", name);
    snprintf(c->err, sizeof c->err, "test_cli.%s.err", name);
    char bin[600];
    snprintf(bin, sizeof bin, "%s/cli/chatfleet", getenv("CHATFLEET_BUILD_DIR"));
    char *argv[32] = {bin};
    int n = 1;
    va_list ap;
    va_start(ap, name);
    for (char *a; n < 31 && (a = va_arg(ap, char *));) {
        argv[n++] = a;
    }
    va_end(ap);
    argv[n] = NULL;
    char url[300];
    char token[300];
    snprintf(url, sizeof url, "CHATFLEET_URL=%s", cluster_url(s_cluster, 0));
    snprintf(token, sizeof token, "CHATFLEET_TOKEN=%s", cluster_token(s_cluster));
    char *env[] = {url, token, NULL};
    /* the files are truncated: a stale one from an earlier run must not look like progress */
    c->pid = proc_spawn_io(argv, env, c->out, c->err);
}

/* Waits for the CLI to exit; returns its exit status (fails past the deadline). */
static int s_cli_wait(s_cli_t *c, int timeout_ms) {
    int64_t deadline = id_now_ms() + timeout_ms;
    int status = 0;
    while (waitpid(c->pid, &status, WNOHANG) == 0) {
        if (id_now_ms() > deadline) {
            kill(c->pid, SIGKILL);
            waitpid(c->pid, &status, 0);
            fail_msg("chatfleet did not exit within %d ms", timeout_ms);
        }
        s_nap(10);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The committed text of the newest chat's assistant messages (what ask must print). */
static char *s_last_chat(void) {
    return cluster_sql(s_cluster, "SELECT id FROM chats ORDER BY created_at DESC, id DESC LIMIT 1");
}

static char *s_answer(const char *chat) {
    return cluster_sql(s_cluster,
                       "SELECT coalesce(string_agg(p ->> 'text', '' ORDER BY m.id, o), '') FROM"
                       " chat_messages m CROSS JOIN LATERAL jsonb_array_elements(m.content::jsonb)"
                       " WITH ORDINALITY AS x(p, o) WHERE m.chat_id = '%s' AND m.role = 'assistant'"
                       " AND m.structured_output IS NULL AND p ->> 'type' = 'text'",
                       chat);
}

/* Waits until the newest chat is generating (owned, model call started). */
static char *s_wait_generating(void) {
    int64_t deadline = id_now_ms() + S_TURN_MS;
    for (;;) {
        char *v = cluster_sql(
            s_cluster, "SELECT id FROM chats WHERE status = 'running' AND generation_attempt >= 1"
                       " ORDER BY created_at DESC LIMIT 1");
        if (v || id_now_ms() > deadline) {
            assert_non_null(v);
            return v;
        }
        s_nap(10);
    }
}

/* --- Tests. --- */

static void test_ask_text_piped_prints_exactly_the_answer(void **u) {
    (void)u;
    s_cli_t c;
    s_cli_start(&c, "text", "ask", "[sim:words 6] hello cli", NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 0);
    char *out = proc_file_text(c.out);
    char *chat = s_last_chat();
    char *answer = s_answer(chat);
    char *want = mem_printf("%s\n", answer);
    assert_non_null(strstr(answer, "Echo: hello cli."));
    assert_string_equal(out, want);
    free(want);
    free(answer);
    free(chat);
    free(out);
}

static void test_ask_schema_piped_prints_exactly_the_value(void **u) {
    (void)u;
    s_cli_t c;
    s_cli_start(&c, "schema", "ask", "--schema",
                "{\"type\":\"object\",\"properties\":{\"id\":{\"const\":9007199254740993},"
                "\"ratio\":{\"const\":0.1},\"big\":{\"const\":"
                "12345678910111213141516171819202122232425262728293031},\"far\":{\"const\":1e300}},"
                "\"required\":[\"id\",\"ratio\",\"big\",\"far\"]}",
                "give me the record", NULL);
    int rc = s_cli_wait(&c, S_TURN_MS);
    char *out = proc_file_text(c.out);
    char *err = proc_file_text(c.err);
    if (rc != 0) {
        fail_msg("ask --schema exited %d: %s", rc, err);
    }
    /* Every number as the schema wrote it (ARCHITECTURE.md §8, the number policy). */
    assert_string_equal(out,
                        "{\"id\":9007199254740993,\"ratio\":0.1,\"big\":"
                        "12345678910111213141516171819202122232425262728293031,\"far\":1e300}\n");
    free(err);
    free(out);
}

static void test_stream_killed_mid_turn_is_redialed_without_duplicates(void **u) {
    (void)u;
    s_cli_t c;
    s_cli_start(&c, "redial", "ask", "[sim:slow 50] [sim:words 80] redial me", NULL);
    /* Some text has streamed before the gateway dies. */
    int64_t deadline = id_now_ms() + S_TURN_MS;
    struct stat st = {0};
    while ((stat(c.out, &st) != 0 || st.st_size < 40) && id_now_ms() < deadline) {
        s_nap(10);
    }
    assert_true(st.st_size >= 40);
    char *chat = s_last_chat();
    cluster_signal(s_cluster, CLUSTER_GATEWAY, 0, SIGKILL);
    s_nap(300); /* the gap the client must survive: a dial or two fails */
    cluster_start(s_cluster, CLUSTER_GATEWAY, 0); /* on the same port */
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 0);
    char *out = proc_file_text(c.out);
    char *answer = s_answer(chat);
    char *want = mem_printf("%s\n", answer);
    char *status = cluster_sql(s_cluster, "SELECT status FROM chats WHERE id = '%s'", chat);
    assert_string_equal(status, "waiting"); /* the run was not interrupted by the drop */
    assert_string_equal(out, want);         /* complete, and nothing twice */
    printf("redial: %zu bytes streamed, identical to the committed answer\n", strlen(out));
    free(status);
    free(want);
    free(answer);
    free(out);
    free(chat);
}

static void test_dynamic_tool_round_trip_through_tool(void **u) {
    (void)u;
    s_cli_t c;
    s_cli_start(&c, "tool", "ask", "--tool",
                "ask=cat > test_cli.tool.args; printf '{\"answer\":42}'",
                "[sim:dynamic ask] should I ship it", NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 0);
    char *out = proc_file_text(c.out);
    char *args = proc_file_text("test_cli.tool.args");
    assert_non_null(strstr(args, "question")); /* the call's arguments arrived on stdin */
    assert_non_null(strstr(out, "ask="));
    assert_non_null(strstr(out, "42"));
    char *chat = s_last_chat();
    char *status = cluster_sql(s_cluster, "SELECT status FROM chats WHERE id = '%s'", chat);
    assert_string_equal(status, "waiting"); /* never stranded in requires_action */
    free(status);
    free(chat);
    free(args);
    free(out);
}

static void test_failed_turn_exits_1_with_the_error_on_stderr(void **u) {
    (void)u;
    s_cli_t c;
    s_cli_start(&c, "fail", "ask", "[sim:fail 400] this fails", NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 1);
    char *err = proc_file_text(c.err);
    assert_non_null(strstr(err, "the turn failed"));
    free(err);
}

static void test_failed_structured_request_exits_1_with_the_code(void **u) {
    (void)u;
    s_cli_t c;
    s_cli_start(&c, "sfail", "ask", "--schema", "{\"type\":\"object\"}", "[sim:fail 400] no value",
                NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 1);
    char *err = proc_file_text(c.err);
    char *out = proc_file_text(c.out);
    assert_non_null(strstr(err, "structured output failed: "));
    assert_null(strstr(err, "no_receipt")); /* a real receipt's code, not a missing one */
    assert_string_equal(out, "");
    free(out);
    free(err);
}

static void test_canceled_structured_request_exits_4_with_the_code(void **u) {
    (void)u;
    s_cli_t c;
    s_cli_start(&c, "cancel", "ask", "--schema", "{\"type\":\"object\"}",
                "[sim:stall] wait forever", NULL);
    char *chat = s_wait_generating();
    char url[256];
    snprintf(url, sizeof url, "%s/api/v2/chats/%s/interrupt", cluster_url(s_cluster, 0), chat);
    proc_http_t r;
    assert_int_equal(proc_http("POST", url, cluster_token(s_cluster), NULL, &r), 0);
    assert_int_equal(r.status, 200);
    proc_http_free(&r);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 4);
    char *err = proc_file_text(c.err);
    assert_non_null(strstr(err, "structured output canceled: "));
    free(err);
    free(chat);
}

static void test_ctrl_c_interrupts_the_server_side_run(void **u) {
    (void)u;
    s_cli_t c;
    s_cli_start(&c, "sigint", "ask", "[sim:stall] until Ctrl-C", NULL);
    char *chat = s_wait_generating();
    kill(c.pid, SIGINT);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 130);
    char *q = mem_printf("SELECT status FROM chats WHERE id = '%s'", chat);
    (void)cluster_wait(s_cluster, q, "waiting", S_TURN_MS); /* the assertion below judges it */
    char *status = cluster_sql(s_cluster, "%s", q);
    assert_string_equal(status, "waiting");
    free(status);
    free(q);
    free(chat);
}

/* Reads c's stdout as JSON (the test fails when it is not). */
static json_t *s_out_json(const s_cli_t *c) {
    char *out = proc_file_text(c->out);
    json_t *v = json_loads(out, 0, NULL);
    if (!v) {
        fail_msg("%s printed no JSON: %s", c->out, out);
    }
    free(out);
    return v;
}

/* Each subcommand's exit status and what it printed, on a chat whose turn stalls so that
 * interrupt has a running turn to stop. */
static void test_chat_subcommands(void **u) {
    (void)u;
    s_cli_t c;
    s_cli_start(&c, "create", "chat", "create", "--title", "from the cli", NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 0);
    json_t *chat = s_out_json(&c);
    const char *id = json_string_value(json_object_get(chat, "id"));
    assert_non_null(id);
    assert_string_equal(json_string_value(json_object_get(chat, "title")), "from the cli");
    assert_string_equal(json_string_value(json_object_get(chat, "status")), "waiting");
    s_cli_start(&c, "send", "chat", "send", id, "[sim:stall] hi", NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 0);
    json_t *sent = s_out_json(&c);
    json_decref(sent);
    s_cli_start(&c, "list", "chat", "list", NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 0);
    char *list = proc_file_text(c.out);
    assert_non_null(strstr(list, id));
    s_cli_start(&c, "show", "chat", "show", id, NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 0);
    json_t *shown = s_out_json(&c);
    assert_string_equal(json_string_value(json_object_get(json_object_get(shown, "chat"), "id")),
                        id);
    json_t *msgs = json_object_get(json_object_get(shown, "messages"), "messages");
    json_t *first = json_array_get(msgs, 0);
    assert_string_equal(json_string_value(json_object_get(first, "role")), "user");
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(first, "content"), 0), "text")),
                        "[sim:stall] hi");
    json_decref(shown);
    s_cli_start(&c, "queue", "chat", "queue", id, NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 0);
    json_t *queued = s_out_json(&c);
    assert_true(json_is_array(queued));
    assert_int_equal(json_array_size(queued), 0);
    json_decref(queued);
    /* The stalled turn is running: interrupt stops it and the chat returns to waiting. */
    char *q = mem_printf("SELECT status FROM chats WHERE id = '%s'", id);
    assert_true(cluster_wait(s_cluster, q, "running", S_TURN_MS) >= 0);
    s_cli_start(&c, "interrupt", "chat", "interrupt", id, NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 0);
    assert_true(cluster_wait(s_cluster, q, "waiting", S_TURN_MS) >= 0);
    free(q);
    /* Interrupting a waiting chat is refused by the gateway (409): exit 3. */
    s_cli_start(&c, "interrupt-again", "chat", "interrupt", id, NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 3);
    s_cli_start(&c, "missing", "chat", "show", "00000000-0000-0000-0000-000000000000", NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 3);
    free(list);
    json_decref(chat);
}

/* The first id column of each line chat list printed, in order ("" when none). */
static char *s_list_ids(const s_cli_t *c) {
    char *out = proc_file_text(c->out);
    assert_non_null(out);
    char *ids = mem_strdup("");
    char *save = NULL;
    for (char *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] != ' ') { /* roots only: members are indented */
            line[strcspn(line, "\t")] = '\0';
            char *n = mem_printf("%s%s%s", ids, ids[0] ? " " : "", line);
            free(ids);
            ids = n;
        }
    }
    free(out);
    return ids;
}

/* chat create --effort --plan, label, pin, and list --search/--label/--limit/--offset: each
 * reaches the API (the chat's JSON shows it) and list prints what the gateway filtered. */
static void test_organization_subcommands(void **u) {
    (void)u;
    s_cli_t c;
    s_cli_start(&c, "org-create", "chat", "create", "--title", "quokka notes", "--effort", "low",
                "--plan", "first words", NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 0);
    json_t *chat = s_out_json(&c);
    const char *made = json_string_value(json_object_get(chat, "id"));
    assert_non_null(made);
    char *id = mem_strdup(made);
    assert_string_equal(json_string_value(json_object_get(chat, "plan_mode")), "plan");
    json_decref(chat);
    char *q = mem_printf("SELECT reasoning_effort FROM chat_messages WHERE chat_id = '%s'"
                         " AND role = 'user'",
                         id);
    char *effort = cluster_sql(s_cluster, "%s", q);
    assert_non_null(effort);
    assert_string_equal(effort, "low");
    s_cli_start(&c, "org-label", "chat", "label", id, "team:blue", "env:prod", NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 0);
    s_cli_start(&c, "org-pin", "chat", "pin", id, NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 0);
    s_cli_start(&c, "org-search", "chat", "list", "--search", "quokka", "--label", "team:blue",
                NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 0);
    char *ids = s_list_ids(&c);
    assert_string_equal(ids, id);
    free(ids);
    /* Pinned: first of the whole list. */
    s_cli_start(&c, "org-first", "chat", "list", "--limit", "1", NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 0);
    ids = s_list_ids(&c);
    assert_string_equal(ids, id);
    free(ids);
    s_cli_start(&c, "org-offset", "chat", "list", "--limit", "1", "--offset", "1", NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 0);
    ids = s_list_ids(&c);
    assert_true(ids[0] != '\0' && strcmp(ids, id) != 0);
    free(ids);
    /* Both labels must hold: one the chat does not have leaves nothing. */
    s_cli_start(&c, "org-and", "chat", "list", "--label", "team:blue", "--label", "env:dev", NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 0);
    ids = s_list_ids(&c);
    assert_string_equal(ids, "");
    free(ids);
    /* label with no pairs clears; unpin; a malformed pair is a usage error, sent nowhere. */
    s_cli_start(&c, "org-clear", "chat", "label", id, NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 0);
    s_cli_start(&c, "org-unpin", "chat", "unpin", id, NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 0);
    char *state = cluster_sql(s_cluster,
                              "SELECT labels::text || ' ' || pin_order FROM chats"
                              " WHERE id = '%s'",
                              id);
    assert_non_null(state);
    assert_string_equal(state, "{} 0");
    s_cli_start(&c, "org-bad", "chat", "label", id, "nocolon", NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 2);
    free(state);
    free(effort);
    free(q);
    free(id);
}

/* Waits until the chat is idle with n compressed rows. */
static void s_wait_compressed(const char *id, const char *n) {
    char *q = mem_printf("SELECT status || ':' || (SELECT count(*) FROM chat_messages WHERE"
                         " chat_id = c.id AND compressed) FROM chats c WHERE id = '%s'",
                         id);
    char *want = mem_printf("waiting:%s", n);
    assert_true(cluster_wait(s_cluster, q, want, S_TURN_MS) >= 0);
    free(want);
    free(q);
}

/* Issue 17's commands: ask with a model, a system prompt and its usage (-v); send with a
 * model; compact; clear; usage. */
static void test_model_system_compact_clear_and_usage(void **u) {
    (void)u;
    s_cli_t c;
    s_cli_start(&c, "ask-v", "ask", "-v", "--model", "sim", "--system", "Be brief.",
                "Tell me about tides", NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 0);
    char *err = proc_file_text(c.err);
    assert_non_null(strstr(err, "usage: chat="));
    assert_non_null(strstr(err, " messages=1 "));
    assert_non_null(strstr(err, " output_tokens="));
    free(err);
    char *id = s_last_chat();
    char *sys = cluster_sql(s_cluster,
                            "SELECT content -> 0 ->> 'text' FROM chat_messages WHERE chat_id ="
                            " '%s' AND role = 'system'",
                            id);
    assert_string_equal(sys, "Be brief.");
    free(sys);
    s_cli_start(&c, "send-model", "chat", "send", id, "--model", "sim", "And the moon?", NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 0);
    s_wait_compressed(id, "0");
    s_cli_start(&c, "send-bad-model", "chat", "send", id, "--model", "nope", "x", NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 3);
    s_cli_start(&c, "compact", "chat", "compact", id, NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 0);
    s_wait_compressed(id, "3"); /* the sim's summary triplet */
    /* A clear needs something after the boundary: one more turn. */
    s_cli_start(&c, "send-after", "chat", "send", id, "And the sun?", NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 0);
    char *q = mem_printf("SELECT count(*) FROM chat_messages WHERE chat_id = '%s' AND role ="
                         " 'assistant' AND NOT compressed",
                         id);
    assert_true(cluster_wait(s_cluster, q, "3", S_TURN_MS) >= 0);
    free(q);
    s_wait_compressed(id, "3");
    s_cli_start(&c, "clear", "chat", "clear", id, NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 0);
    s_wait_compressed(id, "6"); /* and the clear's */
    s_cli_start(&c, "usage", "chat", "usage", id, NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 0);
    json_t *usage = s_out_json(&c);
    /* Three replies and the summary. */
    assert_int_equal(json_integer_value(json_object_get(usage, "messages")), 4);
    assert_true(json_integer_value(json_object_get(usage, "output_tokens")) > 0);
    json_decref(usage);
    free(id);
}

/* A 1x1 PNG (what libmagic reads as image/png) and a text file, written beside the test. */
static const unsigned char s_png[] = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48,
    0x44, 0x52, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00,
    0x00, 0x1f, 0x15, 0xc4, 0x89, 0x00, 0x00, 0x00, 0x0b, 0x49, 0x44, 0x41, 0x54, 0x78,
    0x9c, 0x63, 0x60, 0x00, 0x02, 0x00, 0x00, 0x05, 0x00, 0x01, 0x7a, 0x5e, 0xab, 0x3f,
    0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82};
static const char s_note[] = "Notes for the model: tides follow the moon.\n";

static void s_write(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* The SHA-256 of data in lower-case hex, computed by PostgreSQL from the local bytes (caller
 * frees). */
static char *s_sha256(const void *data, size_t len) {
    char *hex = mem_calloc(1, 2 * len + 1);
    for (size_t i = 0; i < len; i++) {
        snprintf(hex + 2 * i, 3, "%02x", ((const unsigned char *)data)[i]);
    }
    char *sha = cluster_sql(s_cluster, "SELECT encode(sha256(decode('%s', 'hex')), 'hex')", hex);
    free(hex);
    return sha;
}

/* The entry of files (the chat's files list) named name; the test fails without one. */
static json_t *s_file_named(json_t *files, const char *name) {
    size_t i;
    json_t *f;
    json_array_foreach(files, i, f) {
        if (!strcmp(json_string_value(json_object_get(f, "name")), name)) {
            return f;
        }
    }
    fail_msg("no file named %s in the chat's files", name);
    return NULL;
}

static void test_chat_create_with_files_attaches_each_upload(void **u) {
    (void)u;
    s_write("test_cli.note.txt", s_note, strlen(s_note));
    s_write("test_cli.pixel.png", s_png, sizeof s_png);
    s_cli_t c;
    s_cli_start(&c, "files", "chat", "create", "--file", "test_cli.note.txt", "--file",
                "test_cli.pixel.png", "What do these say? [sim:words 3]", NULL);
    int rc = s_cli_wait(&c, S_TURN_MS);
    if (rc != 0) {
        char *err = proc_file_text(c.err);
        fail_msg("chat create --file exited %d: %s", rc, err);
    }
    json_t *chat = s_out_json(&c);
    const char *id = json_string_value(json_object_get(chat, "id"));
    assert_non_null(id);
    /* The chat's files: both, with the media types of their extensions and the SHA-256 of
     * the local bytes. */
    char *url = mem_printf("%s/api/v2/chats/%s", cluster_url(s_cluster, 0), id);
    proc_http_t r = {0};
    assert_int_equal(proc_http("GET", url, cluster_token(s_cluster), NULL, &r), 0);
    assert_int_equal(r.status, 200);
    json_t *shown = json_loads(r.body, 0, NULL);
    assert_non_null(shown);
    json_t *files = json_object_get(shown, "files");
    assert_int_equal(json_array_size(files), 2);
    json_t *note = s_file_named(files, "test_cli.note.txt");
    json_t *pixel = s_file_named(files, "test_cli.pixel.png");
    char *note_sha = s_sha256(s_note, strlen(s_note));
    char *png_sha = s_sha256(s_png, sizeof s_png);
    assert_string_equal(json_string_value(json_object_get(note, "mime_type")), "text/plain");
    assert_string_equal(json_string_value(json_object_get(note, "sha256")), note_sha);
    assert_int_equal(json_integer_value(json_object_get(note, "size_bytes")), strlen(s_note));
    assert_string_equal(json_string_value(json_object_get(pixel, "mime_type")), "image/png");
    assert_string_equal(json_string_value(json_object_get(pixel, "sha256")), png_sha);
    assert_int_equal(json_integer_value(json_object_get(pixel, "size_bytes")), sizeof s_png);
    /* The user message: its text, then one file part per --file in the order given. */
    char *parts = cluster_sql(s_cluster,
                              "SELECT string_agg(concat_ws(':', p ->> 'type', p ->> 'file_id',"
                              " p ->> 'media_type'), ' ' ORDER BY o) FROM chat_messages m CROSS"
                              " JOIN LATERAL jsonb_array_elements(m.content::jsonb) WITH ORDINALITY"
                              " AS x(p, o) WHERE m.chat_id = '%s' AND m.role = 'user'",
                              id);
    char *want = mem_printf("text file:%s:text/plain file:%s:image/png",
                            json_string_value(json_object_get(note, "id")),
                            json_string_value(json_object_get(pixel, "id")));
    assert_string_equal(parts, want);
    printf("  files: %s\n", parts);
    free(want);
    free(parts);
    free(png_sha);
    free(note_sha);
    json_decref(shown);
    proc_http_free(&r);
    free(url);
    json_decref(chat);
}

static void test_an_unknown_extension_is_refused_before_anything_is_sent(void **u) {
    (void)u;
    s_write("test_cli.data.bin", s_png, sizeof s_png);
    const char *counts = "SELECT (SELECT count(*) FROM chats) || '/' ||"
                         " (SELECT count(*) FROM chat_files)";
    char *before = cluster_sql(s_cluster, "%s", counts);
    s_cli_t c;
    s_cli_start(&c, "badfile", "chat", "create", "--file", "test_cli.pixel.png", "--file",
                "test_cli.data.bin", "never sent", NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 2);
    char *err = proc_file_text(c.err);
    printf("  %s", err);
    assert_non_null(strstr(err, "test_cli.data.bin"));
    assert_non_null(strstr(err, "the accepted extensions are .png .jpg .jpeg"));
    assert_null(strstr(err, "usage:"));
    free(err);
    /* A missing file likewise, named with the system's reason. */
    s_cli_start(&c, "nofile", "chat", "send", "00000000-0000-0000-0000-000000000000", "--file",
                "test_cli.absent.txt", "never sent", NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 2);
    err = proc_file_text(c.err);
    printf("  %s", err);
    assert_non_null(strstr(err, "test_cli.absent.txt: No such file or directory"));
    free(err);
    char *after = cluster_sql(s_cluster, "%s", counts);
    assert_string_equal(after, before); /* no chat, no upload */
    free(after);
    free(before);
}

/* An upload the gateway refuses (the bytes are not of the extension's type) fails the command
 * with the gateway's message; no chat is created, and the file uploaded before it is deleted
 * again. */
static void test_an_upload_refused_by_the_gateway_prints_its_message(void **u) {
    (void)u;
    s_write("test_cli.fake.png", s_note, strlen(s_note));
    s_write("test_cli.pixel.png", s_png, sizeof s_png);
    const char *counts = "SELECT (SELECT count(*) FROM chats) || '/' ||"
                         " (SELECT count(*) FROM chat_files)";
    char *before = cluster_sql(s_cluster, "%s", counts);
    s_cli_t c;
    s_cli_start(&c, "refused", "ask", "--file", "test_cli.pixel.png", "--file", "test_cli.fake.png",
                "never asked", NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 3);
    char *err = proc_file_text(c.err);
    printf("  %s", err);
    assert_non_null(strstr(err, "upload test_cli.fake.png: HTTP 400"));
    assert_non_null(
        strstr(err, "Content-Type: the bytes are text/plain, not the declared image/png"));
    free(err);
    char *after = cluster_sql(s_cluster, "%s", counts);
    assert_string_equal(after, before);
    free(after);
    free(before);
}

/* ask --file: a name outside ASCII (with a quote) reaches the gateway as it is on disk (RFC
 * 6266 filename*) and the file reaches the model (the sim echoes an inlined text file); a file
 * over the gateway's 10 MiB is refused with its 413 message. */
static void test_ask_with_a_utf8_named_file_and_an_oversized_one(void **u) {
    (void)u;
    const char *name = "test_cli.\xc3\xbc"
                       "ber \"q\".md";
    s_write(name, s_note, strlen(s_note));
    s_cli_t c;
    s_cli_start(&c, "utf8", "ask", "--file", name, "[sim:words 2] read it", NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 0);
    char *out = proc_file_text(c.out);
    assert_non_null(strstr(out, "tides follow the moon"));
    free(out);
    char *chat = s_last_chat();
    char *stored = cluster_sql(s_cluster,
                               "SELECT name || ' ' || mime_type FROM chat_files WHERE"
                               " chat_id = '%s'",
                               chat);
    char *want = mem_printf("%s text/markdown", name);
    assert_string_equal(stored, want);
    free(want);
    free(stored);
    free(chat);
    size_t big = 10 * 1024 * 1024 + 1;
    char *bytes = mem_calloc(1, big);
    memset(bytes, 'a', big);
    s_write("test_cli.big.txt", bytes, big);
    free(bytes);
    s_cli_start(&c, "big", "chat", "create", "--file", "test_cli.big.txt", "never sent", NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 3);
    char *err = proc_file_text(c.err);
    printf("  %s", err);
    assert_non_null(strstr(err, "upload test_cli.big.txt: HTTP 413: "));
    free(err);
    unlink("test_cli.big.txt");
}

/* --- Setup. --- */

static int s_setup(void **state) {
    (void)state;
    /* The processes' default lease and heartbeat (30 s, 9 s), not the harness's short ones:
     * no worker dies here. A quick acquire and stream poll, and one retry. */
    const char *env[] = {"CHATFLEET_LEASE_STALE_MS=30000",
                         "CHATFLEET_HEARTBEAT_MS=9000",
                         "CHATFLEET_ACQUIRE_POLL_MS=200",
                         "CHATFLEET_STREAM_POLL_MS=200",
                         "CHATFLEET_MAX_GENERATION_RETRIES=1",
                         "CHATFLEET_WORKER_RETRY_BASE_MS=20",
                         "CHATFLEET_LOG=info",
                         NULL};
    cluster_opts_t o = {.name = "test_cli", .gateways = 1, .workers = S_NWORKERS, .env = env};
    s_cluster = cluster_new(&o);
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    /* Judges the CLI, not how the cluster's processes stop. */
    (void)cluster_destroy(&s_cluster);
    return 0;
}

/* Issue 34: a token or a gateway URL with a control character (CR LF would let it write
 * headers of its own) is refused before any request, exit 2 naming where it came from; the
 * same command with the cluster's good token, given by --token, works. */
static void test_a_token_or_url_with_a_control_character_is_refused_unsent(void **u) {
    (void)u;
    s_cli_t c;
    char *bad = mem_printf("%s\r\nX-Injected: 1", cluster_token(s_cluster));
    s_cli_start(&c, "bad-token", "--token", bad, "chat", "list", NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 2);
    char *err = proc_file_text(c.err);
    printf("  %s", err);
    assert_non_null(strstr(err, "--token or CHATFLEET_TOKEN"));
    assert_non_null(strstr(err, "control character"));
    free(err);
    char *out = proc_file_text(c.out);
    assert_string_equal(out, "");
    free(out);
    char *url = mem_printf("%s/\x01", cluster_url(s_cluster, 0));
    s_cli_start(&c, "bad-url", "--url", url, "chat", "list", NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 2);
    err = proc_file_text(c.err);
    printf("  %s", err);
    assert_non_null(strstr(err, "--url or CHATFLEET_URL"));
    free(err);
    s_cli_start(&c, "good-token", "--token", cluster_token(s_cluster), "chat", "list", NULL);
    assert_int_equal(s_cli_wait(&c, S_TURN_MS), 0);
    free(url);
    free(bad);
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ask_text_piped_prints_exactly_the_answer),
        cmocka_unit_test(test_ask_schema_piped_prints_exactly_the_value),
        cmocka_unit_test(test_stream_killed_mid_turn_is_redialed_without_duplicates),
        cmocka_unit_test(test_dynamic_tool_round_trip_through_tool),
        cmocka_unit_test(test_failed_turn_exits_1_with_the_error_on_stderr),
        cmocka_unit_test(test_failed_structured_request_exits_1_with_the_code),
        cmocka_unit_test(test_canceled_structured_request_exits_4_with_the_code),
        cmocka_unit_test(test_ctrl_c_interrupts_the_server_side_run),
        cmocka_unit_test(test_chat_subcommands),
        cmocka_unit_test(test_organization_subcommands),
        cmocka_unit_test(test_model_system_compact_clear_and_usage),
        cmocka_unit_test(test_a_token_or_url_with_a_control_character_is_refused_unsent),
        cmocka_unit_test(test_chat_create_with_files_attaches_each_upload),
        cmocka_unit_test(test_an_unknown_extension_is_refused_before_anything_is_sent),
        cmocka_unit_test(test_an_upload_refused_by_the_gateway_prints_its_message),
        cmocka_unit_test(test_ask_with_a_utf8_named_file_and_an_oversized_one),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
