/* upload: --file uploads; see upload.h. */
#include "upload.h"
#include "mem.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

static const struct {
    const char *ext;
    const char *media_type;
} s_types[] = {
    {".png", "image/png"},         {".jpg", "image/jpeg"},  {".jpeg", "image/jpeg"},
    {".gif", "image/gif"},         {".webp", "image/webp"}, {".pdf", "application/pdf"},
    {".json", "application/json"}, {".csv", "text/csv"},    {".md", "text/markdown"},
    {".txt", "text/plain"},
};

int upload_list_add(upload_list_t *list, const char *path) {
    if (list->n == UPLOAD_FILES_MAX) {
        fprintf(stderr, "chatfleet: at most %d --file options\n", UPLOAD_FILES_MAX);
        return -1;
    }
    list->paths[list->n++] = path;
    return 0;
}

/* The last component of path. */
static const char *s_base(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

const char *upload_media_type(const char *path) {
    const char *dot = strrchr(s_base(path), '.');
    for (size_t i = 0; dot && i < sizeof s_types / sizeof s_types[0]; i++) {
        if (!strcasecmp(dot, s_types[i].ext)) {
            return s_types[i].media_type;
        }
    }
    return NULL;
}

/* Opens path for reading as a regular file, its size in *size; NULL with the reason on
 * stderr. */
static FILE *s_open(const char *path, int64_t *size) {
    FILE *f = fopen(path, "rb");
    struct stat st;
    const char *why = NULL;
    if (!f) {
        why = strerror(errno);
    } else if (fstat(fileno(f), &st) != 0) {
        why = strerror(errno);
    } else if (!S_ISREG(st.st_mode)) {
        why = "not a regular file";
    }
    if (why) {
        fprintf(stderr, "chatfleet: --file %s: %s\n", path, why);
        if (f) {
            fclose(f);
        }
        return NULL;
    }
    *size = (int64_t)st.st_size;
    return f;
}

/* True when name holds no control character (the gateway refuses them in a file name). */
static bool s_name_ok(const char *name) {
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        if (*p < 0x20 || *p == 0x7f) {
            return false;
        }
    }
    return true;
}

int upload_check(const upload_list_t *list) {
    for (int i = 0; i < list->n; i++) {
        const char *path = list->paths[i];
        const char *name = s_base(path);
        if (!upload_media_type(path)) {
            fprintf(stderr,
                    "chatfleet: --file %s: an unknown file type; the accepted extensions are "
                    "%s\n",
                    path, UPLOAD_EXTENSIONS);
            return -1;
        }
        if (!s_name_ok(name) || strlen(name) > UPLOAD_NAME_MAX) {
            fprintf(stderr,
                    "chatfleet: --file %s: the file name must hold no control character and "
                    "be at most %d bytes\n",
                    path, UPLOAD_NAME_MAX);
            return -1;
        }
        int64_t size = 0;
        FILE *f = s_open(path, &size);
        if (!f) {
            return -1;
        }
        fclose(f);
    }
    return 0;
}

/* The Content-Disposition of name (RFC 6266): the name quoted, and as RFC 8187 UTF-8 too when
 * it is not plain ASCII (the quoted form then has '_' for each byte it cannot carry). Caller
 * frees. */
static char *s_disposition(const char *name) {
    size_t n = strlen(name);
    char *quoted = mem_calloc(1, 2 * n + 1); /* each byte at most escaped */
    char *pct = mem_calloc(1, 3 * n + 1);
    size_t q = 0;
    size_t at = 0;
    bool ascii = true;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c >= 0x80) {
            ascii = false;
            quoted[q++] = '_';
        } else {
            if (c == '"' || c == '\\') {
                quoted[q++] = '\\';
            }
            quoted[q++] = (char)c;
        }
        bool plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                     (c && strchr("!#$&+-.^_`|~", c));
        at += (size_t)snprintf(pct + at, 4, plain ? "%c" : "%%%02X", c);
    }
    char *out = ascii ? mem_printf("attachment; filename=\"%s\"", quoted)
                      : mem_printf("attachment; filename=\"%s\"; filename*=UTF-8''%s", quoted, pct);
    free(quoted);
    free(pct);
    return out;
}

/* Uploads path; its id appended to content as a file part. 0 or -1 (reason on stderr). */
static int s_upload(client_t *client, const char *path, json_t *content) {
    int64_t size = 0;
    FILE *f = s_open(path, &size);
    if (!f) {
        return -1;
    }
    char *disposition = s_disposition(s_base(path));
    json_t *out = NULL;
    long st = client_post_file(client, "/api/v2/chats/files", upload_media_type(path), disposition,
                               f, size, &out);
    fclose(f);
    free(disposition);
    const char *id = json_string_value(json_object_get(out, "id"));
    int rc = 0;
    if (st != 201 || !id) {
        char *what = mem_printf("upload %s", path);
        if (st > 0) {
            client_print_error(what, st, out);
        } else {
            fprintf(stderr, "chatfleet: %s failed\n", what);
        }
        free(what);
        rc = -1;
    } else {
        json_array_append_new(content, json_pack("{s:s,s:s}", "type", "file", "file_id", id));
    }
    json_decref(out);
    return rc;
}

/* Deletes the uploads content's parts from index from on name (they will not be sent). */
static void s_discard(client_t *client, json_t *content, size_t from) {
    while (json_array_size(content) > from) {
        const char *id =
            json_string_value(json_object_get(json_array_get(content, from), "file_id"));
        if (id) {
            char *path = mem_printf("/api/v2/chats/files/%s", id);
            json_t *out = NULL;
            (void)client_call(client, "DELETE", path, NULL, &out);
            json_decref(out);
            free(path);
        }
        json_array_remove(content, from);
    }
}

int upload_all(client_t *client, const upload_list_t *list, json_t *content) {
    size_t from = json_array_size(content);
    for (int i = 0; i < list->n; i++) {
        if (s_upload(client, list->paths[i], content) != 0) {
            s_discard(client, content, from);
            return -1;
        }
    }
    return 0;
}
