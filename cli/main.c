/*
 * chatfleet: the command-line client of a chatfleet gateway (cli/README.md).
 *
 *   chatfleet [--url URL] [--token TOKEN] [--cacert FILE] COMMAND ...
 *
 * URL, token and CA file come from the flags or CHATFLEET_URL, CHATFLEET_TOKEN and
 * CHATFLEET_CA_FILE. This file only
 * parses the command line; the work is in ask, command, clistream and client.
 */
#include <curl/curl.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ask.h"
#include "command.h"
#include "header.h"
#include "mem.h"
#include "sigs.h"

static volatile sig_atomic_t s_cancel;

static void s_on_sigint(int sig) {
    (void)sig;
    s_cancel = 1;
}

static int s_usage(void) {
    fputs("usage: chatfleet [--url URL] [--token TOKEN] [--cacert FILE] COMMAND\n"
          "  chat create [--title T] [--model M] [--system S] [--effort E] [--plan]\n"
          "      [--file PATH]... [TEXT]\n"
          "  chat list [--archived] [--search TEXT] [--label K:V]... [--limit N] [--offset N]\n"
          "      [--after ID]                   chat show ID\n"
          "  chat label ID [K:V]... (none: clear)  chat pin ID [POSITION]  chat unpin ID\n"
          "  chat send ID [--interrupt] [--model M] [--effort E] [--plan] [--file PATH]... TEXT\n"
          "  chat edit ID MESSAGE_ID [--model M] [--effort E] [--file PATH]... TEXT\n"
          "  chat interrupt ID                  chat compact ID\n"
          "  chat clear ID                      chat usage ID\n"
          "  chat archive ID [--undo]           chat queue ID [delete|promote QUEUED_ID]\n"
          "  watch [ID]\n"
          "  ask [-v] [--model M] [--system S] [--schema FILE|JSON] [--chat ID]\n"
          "      [--tool NAME=COMMAND]... [--file PATH]... PROMPT\n"
          "--file: " UPLOAD_EXTENSIONS ", uploaded and attached to the message\n"
          "--effort: none|minimal|low|medium|high|xhigh|max; --plan: plan mode (read-only tools)\n"
          "environment: CHATFLEET_URL, CHATFLEET_TOKEN, CHATFLEET_CA_FILE (PEM CAs for https)\n",
          stderr);
    return ASK_USAGE;
}

/* Parses ask's options into o; returns 0, or -1 on a usage error. prompt is argv's tail. */
static int s_ask_opts(int argc, char **argv, ask_opts_t *o, char **prompt) {
    int i = 0;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--")) {
            i++;
            break;
        }
        if (!strcmp(argv[i], "-v")) {
            o->verbose = true;
            continue;
        }
        if (i + 1 >= argc) {
            return -1;
        }
        const char *v = argv[++i];
        if (!strcmp(argv[i - 1], "--schema")) {
            o->schema = v;
        } else if (!strcmp(argv[i - 1], "--chat")) {
            o->chat_id = v;
        } else if (!strcmp(argv[i - 1], "--model")) {
            o->model = v;
        } else if (!strcmp(argv[i - 1], "--system")) {
            o->system = v;
        } else if (!strcmp(argv[i - 1], "--file")) {
            if (upload_list_add(&o->files, v) != 0) {
                return -1;
            }
        } else if (!strcmp(argv[i - 1], "--tool") && strchr(v, '=') && o->ntools < ASK_TOOLS_MAX) {
            char *eq = strchr(v, '=');
            argv[i][eq - v] = '\0';
            o->tools[o->ntools++] = (ask_tool_t){argv[i], eq + 1};
        } else {
            return -1;
        }
    }
    if (i >= argc) {
        return -1;
    }
    *prompt = mem_strdup("");
    for (int k = i; k < argc; k++) {
        char *n = mem_printf("%s%s%s", *prompt, k > i ? " " : "", argv[k]);
        free(*prompt);
        *prompt = n;
    }
    o->prompt = *prompt;
    return 0;
}

static int s_ask(client_t *c, int argc, char **argv) {
    ask_opts_t o = {.tty = isatty(STDOUT_FILENO) == 1};
    char *prompt = NULL;
    if (s_ask_opts(argc, argv, &o, &prompt) != 0) {
        free(prompt);
        return s_usage();
    }
    int rc = ask_run(c, &o, &s_cancel);
    free(prompt);
    return rc;
}

static int s_dispatch(client_t *c, int argc, char **argv) {
    if (!strcmp(argv[0], "ask")) {
        return s_ask(c, argc - 1, argv + 1);
    }
    if (!strcmp(argv[0], "watch")) {
        return command_watch(c, argc - 1, argv + 1, &s_cancel);
    }
    if (!strcmp(argv[0], "chat")) {
        int rc = command_chat(c, argc - 1, argv + 1);
        return rc == COMMAND_USAGE ? s_usage() : rc == COMMAND_BAD_FILE ? ASK_USAGE : rc;
    }
    return s_usage();
}

int main(int argc, char **argv) {
    const char *url = getenv("CHATFLEET_URL");
    const char *token = getenv("CHATFLEET_TOKEN");
    const char *ca_file = getenv("CHATFLEET_CA_FILE");
    int i = 1;
    for (; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--url")) {
            url = argv[i + 1];
        } else if (!strcmp(argv[i], "--token")) {
            token = argv[i + 1];
        } else if (!strcmp(argv[i], "--cacert")) {
            ca_file = argv[i + 1];
        } else {
            break;
        }
    }
    if (i >= argc || !strcmp(argv[i], "--help") || !strcmp(argv[i], "help")) {
        return s_usage();
    }
    if (!url || !*url) {
        fputs("chatfleet: no gateway URL (--url or CHATFLEET_URL)\n", stderr);
        return ASK_USAGE;
    }
    /* Both go into every request (its line and its Authorization header): a control
     * character would let them write headers of their own, so it is refused here, naming
     * where it came from (client_headers refuses it again). */
    if (!header_text_ok(url)) {
        fputs("chatfleet: the gateway URL (--url or CHATFLEET_URL) holds a control character\n",
              stderr);
        return ASK_USAGE;
    }
    if (token && !header_text_ok(token)) {
        fputs("chatfleet: the token (--token or CHATFLEET_TOKEN) holds a control character\n",
              stderr);
        return ASK_USAGE;
    }
    if (ca_file && *ca_file && access(ca_file, R_OK) != 0) {
        fprintf(stderr, "chatfleet: CA file %s (--cacert or CHATFLEET_CA_FILE): %s\n", ca_file,
                strerror(errno));
        return ASK_USAGE;
    }
    sigs_install(s_on_sigint, (const int[]){SIGINT, SIGTERM, 0}, 0, SIGS_PIPE_KEEP);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    client_t *c = client_new(url, token, ca_file);
    int rc = c ? s_dispatch(c, argc - i, argv + i) : ASK_TRANSPORT;
    client_destroy(&c);
    curl_global_cleanup();
    return rc;
}
