/* console: the operator console's static files; see console.h. */
#include "console.h"
#include "log.h"
#include "mem.h"

#include <fcntl.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_NAME_MAX 64 /* longest file name served */

const char *console_content_type(const char *name) {
    static const struct {
        const char *ext;
        const char *type;
    } types[] = {{"html", "text/html; charset=utf-8"},
                 {"js", "text/javascript; charset=utf-8"},
                 {"css", "text/css; charset=utf-8"},
                 {"svg", "image/svg+xml"}};
    size_t n = strlen(name);
    const char *dot = strchr(name, '.');
    if (n == 0 || n > S_NAME_MAX || !dot || dot == name) {
        return NULL;
    }
    for (const char *c = name; c < dot; c++) {
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '-' || *c == '_')) {
            return NULL;
        }
    }
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        if (!strcmp(dot + 1, types[i].ext)) {
            return types[i].type;
        }
    }
    return NULL;
}

/* The file's bytes (caller frees) and their length, or NULL when it cannot be read or is
 * larger than the cap. */
static char *s_read(const char *path, size_t *len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return NULL;
    }
    struct stat st;
    char *buf = NULL;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= CONSOLE_FILE_MAX_BYTES) {
        buf = mem_alloc((size_t)st.st_size + 1);
        size_t got = 0;
        while (got < (size_t)st.st_size) {
            ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
            if (r <= 0) {
                break;
            }
            got += (size_t)r;
        }
        if (got != (size_t)st.st_size) {
            free(buf);
            buf = NULL;
        }
        *len = got;
    }
    close(fd);
    return buf;
}

static void s_serve(gateway_t *gw, const char *name, http_resp_t *resp) {
    const char *type = console_content_type(name);
    if (!gw->console_dir || !type) {
        http_error(resp, 404, "Not found.", NULL);
        return;
    }
    char *path = mem_printf("%s/%s", gw->console_dir, name);
    size_t len = 0;
    char *body = s_read(path, &len);
    if (!body) {
        log_warn("console_file_missing", "path=\"%s\"", path);
        free(path);
        http_error(resp, 404, "Not found.", NULL);
        return;
    }
    free(path);
    resp->status = 200;
    resp->raw = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(resp->raw, "Content-Type", type);
    MHD_add_response_header(resp->raw, "Cache-Control", "no-cache");
    MHD_add_response_header(resp->raw, "X-Content-Type-Options", "nosniff");
    /* Same origin only: the page talks to the gateway that served it. It is never framed
     * (frame-ancestors, and X-Frame-Options for browsers without CSP 2), so no other site
     * can overlay it to click the operator's buttons, and it sends no Referer anywhere. */
    MHD_add_response_header(resp->raw, "Content-Security-Policy",
                            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'");
    MHD_add_response_header(resp->raw, "X-Frame-Options", "DENY");
    MHD_add_response_header(resp->raw, "Referrer-Policy", "no-referrer");
}

static void s_root(void *app, http_req_t *req, http_resp_t *resp) {
    (void)app;
    (void)req;
    resp->status = 302;
    resp->raw = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(resp->raw, "Location", "/console/index.html");
}

static void s_file(void *app, http_req_t *req, http_resp_t *resp) {
    s_serve(app, req->params[0], resp);
}

const http_route_t console_route_table[] = {
    {"GET", "/console", s_root, true, NULL, NULL},
    {"GET", "/console/{}", s_file, true, NULL, NULL},
};
const int console_route_count = sizeof console_route_table / sizeof console_route_table[0];
