/* header: outgoing HTTP header lines; see header.h. */
#include "header.h"

#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool header_name_ok(const char *name) {
    if (!name || !name[0]) {
        return false;
    }
    for (const unsigned char *c = (const unsigned char *)name; *c; c++) {
        bool alnum =
            (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9');
        if (!alnum && !strchr("!#$%&'*+-.^_`|~", *c)) {
            return false;
        }
    }
    return true;
}

static bool s_clean(const char *text, bool tab) {
    for (const unsigned char *c = (const unsigned char *)(text ? text : ""); *c; c++) {
        if ((*c < 0x20 && !(tab && *c == '\t')) || *c == 0x7f) {
            return false;
        }
    }
    return true;
}

bool header_value_ok(const char *value) {
    return s_clean(value, true);
}

bool header_text_ok(const char *text) {
    return s_clean(text, false);
}

int header_append(struct curl_slist **list, const char *name, const char *value) {
    if (!header_name_ok(name) || !header_value_ok(value)) {
        return -1;
    }
    char line[HEADER_LINE_MAX_BYTES];
    /* An empty value is written "Name:", which is how curl is told to send none of its own. */
    int n = value && value[0] ? snprintf(line, sizeof line, "%s: %s", name, value)
                              : snprintf(line, sizeof line, "%s:", name);
    if (n < 0 || (size_t)n >= sizeof line) {
        return -1;
    }
    struct curl_slist *grown = curl_slist_append(*list, line);
    if (!grown) {
        return -1;
    }
    *list = grown;
    return 0;
}

int header_append_line(struct curl_slist **list, const char *line) {
    const char *colon = line ? strchr(line, ':') : NULL;
    if (!colon || (size_t)(colon - line) >= 256) {
        return -1;
    }
    char name[256];
    memcpy(name, line, (size_t)(colon - line));
    name[colon - line] = '\0';
    const char *value = colon + 1;
    while (*value == ' ' || *value == '\t') {
        value++;
    }
    return header_append(list, name, value);
}
