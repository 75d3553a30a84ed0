/* trace: W3C trace context; see trace.h. */
#include "trace.h"
#include "hex.h"
#include "id.h"

#include <stdio.h>
#include <string.h>

static bool s_lower_hex(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

/* n lowercase hex digits at s, not all zero. */
static bool s_hex_id(const char *s, int n) {
    bool nonzero = false;
    for (int i = 0; i < n; i++) {
        if (!s_lower_hex(s[i])) {
            return false;
        }
        nonzero = nonzero || s[i] != '0';
    }
    return nonzero;
}

int trace_parse(const char *value, trace_ctx_t *out) {
    size_t len = value ? strlen(value) : 0;
    if (len < TRACE_PARENT_LEN || value[2] != '-' || value[35] != '-' || value[52] != '-' ||
        !s_lower_hex(value[0]) || !s_lower_hex(value[1]) || !s_lower_hex(value[53]) ||
        !s_lower_hex(value[54])) {
        return -1;
    }
    int version = hex_digit(value[0]) * 16 + hex_digit(value[1]);
    /* Version ff is invalid; 00 is exactly 55 characters; a later one may add "-...". */
    if (version == 0xff || (version == 0 && len != TRACE_PARENT_LEN) ||
        (len > TRACE_PARENT_LEN && value[TRACE_PARENT_LEN] != '-')) {
        return -1;
    }
    if (!s_hex_id(value + 3, TRACE_ID_HEX) || !s_hex_id(value + 36, TRACE_SPAN_HEX)) {
        return -1;
    }
    memcpy(out->trace_id, value + 3, TRACE_ID_HEX);
    out->trace_id[TRACE_ID_HEX] = '\0';
    memcpy(out->span_id, value + 36, TRACE_SPAN_HEX);
    out->span_id[TRACE_SPAN_HEX] = '\0';
    out->flags = (uint8_t)(hex_digit(value[53]) * 16 + hex_digit(value[54]));
    return 0;
}

/* n random bytes as 2n hex digits into out (NUL-terminated), never all zero. */
static int s_random_hex(char *out, size_t n) {
    unsigned char b[16];
    do {
        if (id_random(b, n) != 0) {
            return -1;
        }
    } while (!s_hex_id((hex_encode(b, n, out), out), (int)(2 * n)));
    out[2 * n] = '\0';
    return 0;
}

int trace_span_id(char out[TRACE_SPAN_HEX + 1]) {
    return s_random_hex(out, TRACE_SPAN_HEX / 2);
}

int trace_new(trace_ctx_t *out) {
    trace_ctx_t t = {.flags = 1};
    if (s_random_hex(t.trace_id, TRACE_ID_HEX / 2) != 0 || trace_span_id(t.span_id) != 0) {
        return -1;
    }
    *out = t;
    return 0;
}

void trace_format(const trace_ctx_t *ctx, char out[TRACE_PARENT_LEN + 1]) {
    snprintf(out, TRACE_PARENT_LEN + 1, "00-%s-%s-%02x", ctx->trace_id, ctx->span_id, ctx->flags);
}

bool trace_from_header(const char *value, char out[TRACE_PARENT_LEN + 1]) {
    trace_ctx_t t;
    bool given = trace_parse(value, &t) == 0;
    if (!given && trace_new(&t) != 0) {
        out[0] = '\0';
        return false;
    }
    trace_format(&t, out);
    return given;
}
