/* command: chat subcommands and watch; see command.h. */
#include "command.h"
#include "jsonout.h"
#include "mem.h"
#include "clistream.h"
#include "upload.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    CMD_OK = COMMAND_OK,
    CMD_USAGE = COMMAND_USAGE,
    CMD_REFUSED = COMMAND_REFUSED,
    CMD_BAD_FILE = COMMAND_BAD_FILE
};

static void s_print(const json_t *v) {
    char *t = jsonout_dumps(v);
    fprintf(stdout, "%s\n", t);
    free(t);
}

/* One call; prints the answer (or the error) and maps it to an exit status. want 0: any
 * 2xx. */
static int s_call(client_t *c, const char *method, const char *path, json_t *body, long want) {
    json_t *out = NULL;
    long st = client_call(c, method, path, body, &out);
    json_decref(body);
    int rc = CMD_OK;
    if (want ? st != want : st < 200 || st > 299) {
        client_print_error(path, st, out);
        rc = CMD_REFUSED;
    } else if (out) {
        s_print(out);
    }
    json_decref(out);
    return rc;
}

/* The words from argv[from] on, joined by spaces (caller frees). */
static char *s_join(int argc, char **argv, int from) {
    char *t = mem_strdup("");
    for (int i = from; i < argc; i++) {
        char *n = mem_printf("%s%s%s", t, i > from ? " " : "", argv[i]);
        free(t);
        t = n;
    }
    return t;
}

/* The content of a message: its text part (none for NULL) then one file part per --file, each
 * uploaded first. Sets body's "content"; CMD_OK, CMD_BAD_FILE when a file was refused before
 * anything was sent, CMD_REFUSED when an upload failed (reasons on stderr). */
static int s_content(client_t *c, json_t *body, const char *text, const upload_list_t *files) {
    if (upload_check(files) != 0) {
        return CMD_BAD_FILE;
    }
    json_t *content = text ? json_pack("[{s:s,s:s}]", "type", "text", "text", text) : json_array();
    json_object_set_new(body, "content", content); /* steals content; body keeps it alive */
    return upload_all(c, files, content) == 0 ? CMD_OK : CMD_REFUSED;
}

/* Reads the leading "--NAME VALUE" options among names (NULL-terminated) into body under
 * the keys of the same index (a "--interrupt" flag sets busy_behavior, "--plan" plan mode,
 * each "--file PATH" is added to files); returns the index of the first other word, or -1 for an
 * option without its value or a --file too many. */
static int s_options(int argc, char **argv, const char *const *names, const char *const *keys,
                     json_t *body, upload_list_t *files) {
    int i = 0;
    while (i < argc) {
        if (!strcmp(argv[i], "--interrupt")) {
            json_object_set_new(body, "busy_behavior", json_string("interrupt"));
            i++;
            continue;
        }
        if (!strcmp(argv[i], "--plan")) {
            json_object_set_new(body, "plan_mode", json_string("plan"));
            i++;
            continue;
        }
        if (!strcmp(argv[i], "--file")) {
            if (i + 1 >= argc || upload_list_add(files, argv[i + 1]) != 0) {
                return -1;
            }
            i += 2;
            continue;
        }
        int k = 0;
        while (names[k] && strcmp(names[k], argv[i])) {
            k++;
        }
        if (!names[k]) {
            break;
        }
        if (i + 1 >= argc) {
            return -1;
        }
        json_object_set_new(body, keys[k], json_string(argv[i + 1]));
        i += 2;
    }
    return i;
}

static int s_create(client_t *c, int argc, char **argv) {
    json_t *body = json_object();
    static const char *const names[] = {"--title", "--model", "--system", "--effort", NULL};
    static const char *const keys[] = {"title", "model", "system_prompt", "reasoning_effort", NULL};
    upload_list_t files = {.n = 0};
    int i = s_options(argc, argv, names, keys, body, &files);
    if (i < 0) {
        json_decref(body);
        return CMD_USAGE;
    }
    /* No text and no file: a chat with no turn yet (empty content). */
    char *text = i < argc ? s_join(argc, argv, i) : NULL;
    int rc = s_content(c, body, text, &files);
    free(text);
    if (rc != CMD_OK) {
        json_decref(body);
        return rc;
    }
    return s_call(c, "POST", "/api/v2/chats", body, 201);
}

/* One line of chat list: id, status (an agent wait as waiting_on_agents), title, indented two
 * spaces per level below its root. */
static void s_list_line(const json_t *chat, int depth) {
    const char *title = json_string_value(json_object_get(chat, "title"));
    const char *status = json_is_true(json_object_get(chat, "waiting_on_agents"))
                             ? "waiting_on_agents"
                             : json_string_value(json_object_get(chat, "status"));
    fprintf(stdout, "%*s%s\t%s\t%s\n", 2 * depth, "",
            json_string_value(json_object_get(chat, "id")), status ? status : "",
            title ? title : "");
}

/* The members of family (a root's flat children, oldest first) whose parent is parent, each
 * followed by its own, depth first: the family as a tree. The API bounds a family (1,024), and
 * every member's parent is older than it, so the walk ends. */
static void s_list_family(const json_t *family, const char *parent, int depth) {
    size_t i;
    json_t *m;
    json_array_foreach(family, i, m) {
        const char *p = json_string_value(json_object_get(m, "parent_chat_id"));
        if (p && !strcmp(p, parent)) {
            s_list_line(m, depth);
            s_list_family(family, json_string_value(json_object_get(m, "id")), depth + 1);
        }
    }
}

/* Appends name=value (escaped) to the query string q (caller frees both). */
static char *s_query_add(char *q, const char *name, const char *value) {
    char *v = curl_easy_escape(NULL, value, 0);
    char *n = mem_printf("%s%s%s=%s", q, q[0] ? "&" : "?", name, v ? v : "");
    curl_free(v);
    free(q);
    return n;
}

/* chat list's options as GET /chats's query: --archived, --search TEXT, --label K:V (each one
 * more, all must hold), --limit N, --offset N, --after ID. NULL on a usage error. */
static char *s_list_query(int argc, char **argv) {
    static const char *const valued[][2] = {{"--search", "q"},
                                            {"--label", "label"},
                                            {"--limit", "limit"},
                                            {"--offset", "offset"},
                                            {"--after", "after_id"}};
    char *q = mem_strdup("");
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--archived")) {
            q = s_query_add(q, "archived", "true");
            continue;
        }
        size_t k = 0;
        while (k < sizeof valued / sizeof valued[0] && strcmp(argv[i], valued[k][0])) {
            k++;
        }
        if (k == sizeof valued / sizeof valued[0] || i + 1 >= argc) {
            free(q);
            return NULL;
        }
        q = s_query_add(q, valued[k][1], argv[++i]);
    }
    return q;
}

/* One line per chat as GET /chats orders them (pins first), each family as a tree; the
 * gateway's 400 (a bad label, an unknown cursor) is printed as any refusal. */
static int s_list(client_t *c, int argc, char **argv) {
    char *q = s_list_query(argc, argv);
    if (!q) {
        return CMD_USAGE;
    }
    char *path = mem_printf("/api/v2/chats%s", q);
    json_t *out = NULL;
    long st = client_call(c, "GET", path, NULL, &out);
    free(q);
    free(path);
    if (st != 200) {
        client_print_error("list", st, out);
        json_decref(out);
        return CMD_REFUSED;
    }
    size_t i;
    json_t *chat;
    json_array_foreach(out, i, chat) {
        const char *id = json_string_value(json_object_get(chat, "id"));
        s_list_line(chat, 0);
        s_list_family(json_object_get(chat, "children"), id ? id : "", 1);
    }
    json_decref(out);
    return CMD_OK;
}

static int s_show(client_t *c, const char *id) {
    char *p1 = mem_printf("/api/v2/chats/%s", id);
    char *p2 = mem_printf("/api/v2/chats/%s/messages?limit=200", id);
    json_t *chat = NULL;
    json_t *msgs = NULL;
    long s1 = client_call(c, "GET", p1, NULL, &chat);
    long s2 = s1 == 200 ? client_call(c, "GET", p2, NULL, &msgs) : s1;
    int rc = CMD_OK;
    if (s1 != 200 || s2 != 200) {
        client_print_error("show", s1 != 200 ? s1 : s2, s1 != 200 ? chat : msgs);
        rc = CMD_REFUSED;
    } else {
        json_t *out = json_pack("{s:O,s:O}", "chat", chat, "messages", msgs);
        s_print(out);
        json_decref(out);
    }
    json_decref(chat);
    json_decref(msgs);
    free(p1);
    free(p2);
    return rc;
}

/* send and edit: [--interrupt] [--model M] [--file PATH]... TEXT (an edit takes no
 * --interrupt). */
static int s_send(client_t *c, const char *id, const char *edit_id, int argc, char **argv) {
    static const char *const names[] = {"--model", "--effort", NULL};
    static const char *const keys[] = {"model", "reasoning_effort", NULL};
    json_t *body = json_object();
    upload_list_t files = {.n = 0};
    int i = s_options(argc, argv, names, keys, body, &files);
    if (i < 0 || i >= argc || (edit_id && json_object_get(body, "busy_behavior"))) {
        json_decref(body);
        return CMD_USAGE;
    }
    char *text = s_join(argc, argv, i);
    int rc = s_content(c, body, text, &files);
    free(text);
    if (rc != CMD_OK) {
        json_decref(body);
        return rc;
    }
    char *path = edit_id ? mem_printf("/api/v2/chats/%s/messages/%s", id, edit_id)
                         : mem_printf("/api/v2/chats/%s/messages", id);
    rc = s_call(c, edit_id ? "PATCH" : "POST", path, body, 200);
    free(path);
    return rc;
}

static int s_queue(client_t *c, const char *id, int argc, char **argv) {
    if (argc >= 2 && (!strcmp(argv[0], "delete") || !strcmp(argv[0], "promote"))) {
        bool del = !strcmp(argv[0], "delete");
        char *path = mem_printf("/api/v2/chats/%s/queue/%s%s", id, argv[1], del ? "" : "/promote");
        int rc = s_call(c, del ? "DELETE" : "POST", path, NULL, del ? 204 : 202);
        free(path);
        return rc;
    }
    char *path = mem_printf("/api/v2/chats/%s/messages?limit=1", id);
    json_t *out = NULL;
    long st = client_call(c, "GET", path, NULL, &out);
    free(path);
    if (st != 200) {
        client_print_error("queue", st, out);
        json_decref(out);
        return CMD_REFUSED;
    }
    s_print(json_object_get(out, "queued_messages"));
    json_decref(out);
    return CMD_OK;
}

/* chat label's K:V words as a labels object (none: {}, which clears), or NULL when a word
 * has no key and colon. */
static json_t *s_labels(int argc, char **argv) {
    json_t *labels = json_object();
    for (int i = 0; i < argc; i++) {
        const char *colon = strchr(argv[i], ':');
        if (!colon || colon == argv[i]) {
            fprintf(stderr, "chatfleet: label %s: write KEY:VALUE\n", argv[i]);
            json_decref(labels);
            return NULL;
        }
        char *key = mem_strndup(argv[i], (size_t)(colon - argv[i]));
        json_object_set_new(labels, key, json_string(colon + 1));
        free(key);
    }
    return labels;
}

static int s_chat_op(client_t *c, const char *op, const char *id, int argc, char **argv) {
    if (!strcmp(op, "show")) {
        return s_show(c, id);
    }
    if (!strcmp(op, "send") && argc > 0) {
        return s_send(c, id, NULL, argc, argv);
    }
    if (!strcmp(op, "edit") && argc >= 2) {
        return s_send(c, id, argv[0], argc - 1, argv + 1);
    }
    if (!strcmp(op, "queue")) {
        return s_queue(c, id, argc, argv);
    }
    char *path = NULL;
    int rc = CMD_USAGE;
    if (!strcmp(op, "interrupt") || !strcmp(op, "clear") || !strcmp(op, "compact")) {
        /* compact is accepted and done later by a worker: any 2xx is success. */
        path = mem_printf("/api/v2/chats/%s/%s", id, op);
        rc = s_call(c, "POST", path, NULL, strcmp(op, "compact") ? 200 : 0);
    } else if (!strcmp(op, "usage")) {
        path = mem_printf("/api/v2/chats/%s/usage", id);
        rc = s_call(c, "GET", path, NULL, 200);
    } else if (!strcmp(op, "label")) {
        path = mem_printf("/api/v2/chats/%s", id);
        json_t *labels = s_labels(argc, argv);
        rc = labels ? s_call(c, "PATCH", path, json_pack("{s:o}", "labels", labels), 204)
                    : CMD_USAGE;
    } else if (!strcmp(op, "pin") || !strcmp(op, "unpin")) {
        char *end = NULL;
        long at = !strcmp(op, "pin") ? (argc > 0 ? strtol(argv[0], &end, 10) : 1) : 0;
        path = mem_printf("/api/v2/chats/%s", id);
        rc = end && (*end || argc > 1)
                 ? CMD_USAGE
                 : s_call(c, "PATCH", path, json_pack("{s:I}", "pin_order", (json_int_t)at), 204);
    } else if (!strcmp(op, "archive")) {
        bool undo = argc > 0 && !strcmp(argv[0], "--undo");
        path = mem_printf("/api/v2/chats/%s", id);
        rc = s_call(c, "PATCH", path, json_pack("{s:b}", "archived", !undo), 204);
    }
    free(path);
    return rc;
}

int command_chat(client_t *client, int argc, char **argv) {
    if (argc < 1) {
        return CMD_USAGE;
    }
    if (!strcmp(argv[0], "create")) {
        return s_create(client, argc - 1, argv + 1);
    }
    if (!strcmp(argv[0], "list")) {
        return s_list(client, argc - 1, argv + 1);
    }
    if (argc < 2) {
        return CMD_USAGE;
    }
    return s_chat_op(client, argv[0], argv[1], argc - 2, argv + 2);
}

static bool s_watch_event(void *ctx, const char *type, json_t *data, int64_t id) {
    (void)ctx;
    json_t *line = json_pack("{s:s,s:I,s:O}", "event", type, "id", (json_int_t)id, "data", data);
    s_print(line);
    fflush(stdout);
    json_decref(line);
    return false;
}

int command_watch(client_t *client, int argc, char **argv, volatile sig_atomic_t *cancel) {
    char *path = argc > 0 ? mem_printf("/api/v2/chats/%s/stream", argv[0])
                          : mem_strdup("/api/v2/chats/watch");
    clistream_t *s = clistream_new(client, path, 0, cancel);
    clistream_end_t end = clistream_run(s, s_watch_event, NULL);
    clistream_destroy(&s);
    free(path);
    return end == CLISTREAM_CANCELLED ? CMD_OK : CMD_REFUSED;
}
