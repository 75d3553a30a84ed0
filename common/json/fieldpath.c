/* fieldpath: the field names of validation errors; see fieldpath.h. */
#include "fieldpath.h"
#include "hex.h"
#include "mem.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static bool s_identifier(const char *key) {
    if (!((key[0] >= 'a' && key[0] <= 'z') || (key[0] >= 'A' && key[0] <= 'Z') || key[0] == '_')) {
        return false;
    }
    for (const char *c = key + 1; *c; c++) {
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '_')) {
            return false;
        }
    }
    return true;
}

char *fieldpath_member(const char *parent, const char *key) {
    if (s_identifier(key)) {
        return mem_printf("%s%s%s", parent, parent[0] ? "." : "", key);
    }
    /* The key as a JSON string literal: '"', '\\' and control characters escaped, every
     * other byte (the '/' and '~' of a pointer, non-ASCII letters) kept as it is. At most six
     * bytes per key byte, plus the quotes. */
    size_t n = strlen(key);
    char *quoted = mem_alloc(6 * n + 3);
    size_t o = 0;
    quoted[o++] = '"';
    for (const unsigned char *c = (const unsigned char *)key; *c; c++) {
        if (*c == '"' || *c == '\\') {
            quoted[o++] = '\\';
            quoted[o++] = (char)*c;
        } else if (*c < 0x20) {
            memcpy(quoted + o, "\\u00", 4);
            hex_encode(c, 1, quoted + o + 4); /* its NUL is overwritten next or ends below */
            o += 6;
        } else {
            quoted[o++] = (char)*c;
        }
    }
    quoted[o++] = '"';
    quoted[o] = '\0';
    char *path = mem_printf("%s[%s]", parent, quoted);
    free(quoted);
    return path;
}

char *fieldpath_element(const char *parent, size_t index) {
    return mem_printf("%s[%zu]", parent, index);
}
