/* tool: local execution of a dynamic tool call; see tool.h. */
#include "tool.h"
#include "client.h"
#include "mem.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Writes all of buf to fd; a reader that exits early is not an error. */
static void s_write_all(int fd, const char *buf, size_t len) {
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return;
        }
        buf += n;
        len -= (size_t)n;
    }
}

static char *s_read_all(int fd, size_t *len) {
    char *out = mem_alloc(TOOL_OUTPUT_MAX_BYTES + 1);
    *len = 0;
    char chunk[4096];
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            break;
        }
        size_t keep = (size_t)n;
        if (*len + keep > TOOL_OUTPUT_MAX_BYTES) {
            keep = TOOL_OUTPUT_MAX_BYTES - *len;
        }
        memcpy(out + *len, chunk, keep);
        *len += keep;
    }
    out[*len] = '\0';
    return out;
}

static pid_t s_spawn(const char *command, int in[2], int out[2]) {
    pid_t pid = fork();
    if (pid == 0) {
        dup2(in[0], STDIN_FILENO);
        dup2(out[1], STDOUT_FILENO);
        close(in[0]);
        close(in[1]);
        close(out[0]);
        close(out[1]);
        signal(SIGINT, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        execl("/bin/sh", "sh", "-c", command, (char *)NULL);
        _exit(127);
    }
    return pid;
}

json_t *tool_run(const char *command, const char *args, bool *is_error) {
    int in[2];
    int out[2];
    *is_error = true;
    if (pipe(in) != 0) {
        return json_string("the tool could not be started");
    }
    if (pipe(out) != 0) {
        close(in[0]);
        close(in[1]);
        return json_string("the tool could not be started");
    }
    void (*old)(int) = signal(SIGPIPE, SIG_IGN);
    pid_t pid = s_spawn(command, in, out);
    close(in[0]);
    close(out[1]);
    if (pid > 0) {
        s_write_all(in[1], args, strlen(args));
    }
    close(in[1]);
    size_t len = 0;
    char *text = s_read_all(out[0], &len);
    close(out[0]);
    int status = -1;
    while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    signal(SIGPIPE, old);
    *is_error = pid <= 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r')) {
        text[--len] = '\0';
    }
    json_t *v = NULL;
    if (len == 0 || jsonstrict_parse(text, len, NULL, &v, NULL) != 0) {
        v = json_stringn(text, len);
    }
    free(text);
    return v ? v : json_string("the tool wrote text that is not UTF-8");
}
