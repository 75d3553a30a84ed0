/*
 * bench_jsonschema: validations per second of jsonschema on the corpus in
 * tests/bench/jsonschema_corpus (NAME.schema.json + NAME.instances.json, a JSON array).
 *
 *   bench_jsonschema [CORPUS_DIR [SECONDS_PER_CASE]]
 *
 * Prints one line per case: the instance count, how many are valid, validations per second on
 * already-parsed instances (tapes, which is what the validator reads; fail-fast, as ajv's
 * default), and per second including the strict parse of the instances text into a tape
 * (amortised over the array). tests/bench/jsonschema-vs-ajv runs
 * ajv on the same files in the same run and prints the ratio. Never fails a build.
 */
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jsonschema.h"
#include "jsonstrict.h"

static const jsonstrict_limits_t s_limits = {
    .max_bytes = 1 << 20,
    .max_depth = JSONSTRICT_MAX_DEPTH_DEFAULT,
    .max_values = 1 << 16,
    .max_keys = JSONSTRICT_MAX_KEYS_DEFAULT,
    .max_items = JSONSTRICT_MAX_ITEMS_DEFAULT,
    .max_string_bytes = JSONSTRICT_MAX_STRING_BYTES_DEFAULT,
    .max_number_chars = JSONSTRICT_MAX_NUMBER_CHARS_DEFAULT,
};

static double s_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static char *s_read(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    *len = fread(buf, 1, (size_t)n, f);
    buf[*len] = '\0';
    fclose(f);
    return buf;
}

static json_t *s_load(const char *dir, const char *name, const char *suffix, char **text,
                      size_t *len) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s%s", dir, name, suffix);
    *text = s_read(path, len);
    if (!*text) {
        fprintf(stderr, "bench_jsonschema: cannot read %s\n", path);
        return NULL;
    }
    json_t *v = NULL;
    jsonstrict_error_t err;
    if (jsonstrict_parse(*text, *len, &s_limits, &v, &err)) {
        fprintf(stderr, "bench_jsonschema: %s: %s at %zu\n", path, err.message, err.offset);
    }
    return v;
}

/* Verdicts of the timed paths that differ from the tree path's (results): each is a bug,
 * printed, and the bench exits 1. */
static size_t s_mismatches;

static void s_check(const char *name, const char *path, size_t i, bool ok, const char *results) {
    if (i < 511 && results[i] != (ok ? '1' : '0')) {
        if (s_mismatches++ < 10) {
            fprintf(stderr, "bench_jsonschema: %s: instance %zu: the %s path says %s\n", name, i,
                    path, ok ? "valid" : "invalid");
        }
    }
}

/* Validations per second of the tapes (each checked against results). */
static double s_time_tapes(const jsonschema_t *schema, jsontape_t **tapes, size_t n, double seconds,
                           const char *name, const char *path, const char *results) {
    size_t total = 0;
    double t0 = s_now();
    double t = t0;
    while (t - t0 < seconds) {
        for (int rep = 0; rep < 64; rep++) {
            for (size_t i = 0; i < n; i++) {
                bool ok = jsonschema_validate_tape(schema, tapes[i], 0, JSONSCHEMA_FAIL_FAST,
                                                   NULL) == JSONSCHEMA_VALID;
                s_check(name, path, i, ok, results);
            }
            total += n;
        }
        t = s_now();
    }
    return (double)total / (t - t0);
}

/* Instances per second from the text of the instances array to each verdict. */
static double s_time_text(const jsonschema_t *schema, const char *itext, size_t ilen,
                          double seconds, const char *name, const char *path, const char *results) {
    size_t parsed = 0;
    jsontape_t *doc = jsontape_new(); /* reused, as a caller that validates many texts would */
    double t0 = s_now();
    double t = t0;
    while (t - t0 < seconds) {
        for (int rep = 0; rep < 16; rep++) {
            if (jsonstrict_parse_tape(itext, ilen, &s_limits, doc, NULL) != 0) {
                fprintf(stderr, "bench_jsonschema: %s: the instances no longer parse\n", name);
                s_mismatches++;
                break;
            }
            const jsontape_entry_t *root = jsontape_at(doc, 0);
            size_t i = 0;
            for (uint32_t it = 1; it < root->next; it = jsontape_at(doc, it)->next, i++) {
                bool ok = jsonschema_validate_tape(schema, doc, it, JSONSCHEMA_FAIL_FAST, NULL) ==
                          JSONSCHEMA_VALID;
                s_check(name, path, i, ok, results);
            }
            parsed += root->size;
        }
        t = s_now();
    }
    jsontape_destroy(&doc);
    return (double)parsed / (t - t0);
}

static void s_case(const char *dir, const char *name, double seconds) {
    char *stext = NULL;
    char *itext = NULL;
    size_t slen = 0;
    size_t ilen = 0;
    json_t *sdoc = s_load(dir, name, ".schema.json", &stext, &slen);
    json_t *instances = s_load(dir, name, ".instances.json", &itext, &ilen);
    jsonschema_t *schema = NULL;
    jsonschema_error_t err;
    if (!sdoc || !instances || jsonschema_compile(sdoc, &schema, &err)) {
        fprintf(stderr, "bench_jsonschema: %s: unusable case\n", name);
        goto done;
    }
    size_t n = json_array_size(instances);
    /* The validator reads tapes: one per instance, as jsonstrict_parse_tape would give. */
    jsontape_t **tapes = calloc(n ? n : 1, sizeof *tapes);
    for (size_t i = 0; i < n; i++) {
        tapes[i] = jsontape_new();
        (void)jsontape_from_json(tapes[i], json_array_get(instances, i));
    }
    char results[512] = {0};
    size_t valid = 0;
    for (size_t i = 0; i < n && i < sizeof results - 1; i++) {
        int ok = jsonschema_validate(schema, json_array_get(instances, i), JSONSCHEMA_FAIL_FAST,
                                     NULL) == JSONSCHEMA_VALID;
        results[i] = ok ? '1' : '0';
        valid += (size_t)ok;
    }
    double per_s = s_time_tapes(schema, tapes, n, seconds, name, "tape", results);
    double text_per_s = s_time_text(schema, itext, ilen, seconds, name, "text", results);
    /* The same schema compiled to native code (jsonschema_native), on the same inputs. */
    char why[256];
    double c0 = s_now();
    if (jsonschema_native(schema, why, sizeof why) != 0) {
        fprintf(stderr, "bench_jsonschema: %s: no native code: %s\n", name, why);
        s_mismatches++;
        goto done_tapes;
    }
    double compile_ms = (s_now() - c0) * 1e3;
    double native_per_s = s_time_tapes(schema, tapes, n, seconds, name, "native tape", results);
    double native_text_per_s =
        s_time_text(schema, itext, ilen, seconds, name, "native text", results);
    printf("case=%s instances=%zu valid=%zu validate_per_s=%.0f parse_validate_per_s=%.0f "
           "native_validate_per_s=%.0f native_parse_validate_per_s=%.0f native_compile_ms=%.0f "
           "results=%s\n",
           name, n, valid, per_s, text_per_s, native_per_s, native_text_per_s, compile_ms, results);
done_tapes:
    for (size_t i = 0; i < n; i++) {
        jsontape_destroy(&tapes[i]);
    }
    free(tapes);
done:
    jsonschema_destroy(&schema);
    json_decref(sdoc);
    json_decref(instances);
    free(stext);
    free(itext);
}

static int s_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
    char dflt[1024];
    const char *src = getenv("CHATFLEET_SOURCE_DIR");
    snprintf(dflt, sizeof dflt, "%s/tests/bench/jsonschema_corpus", src ? src : ".");
    const char *dir = argc > 1 ? argv[1] : dflt;
    double seconds = argc > 2 ? strtod(argv[2], NULL) : 1.0;
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "bench_jsonschema: cannot open %s\n", dir);
        return 1;
    }
    char *names[64];
    size_t n = 0;
    struct dirent *e = NULL;
    while ((e = readdir(d)) && n < 64) {
        const char *suffix = strstr(e->d_name, ".schema.json");
        if (suffix && suffix[12] == '\0') {
            names[n++] = strndup(e->d_name, (size_t)(suffix - e->d_name));
        }
    }
    closedir(d);
    qsort(names, n, sizeof *names, s_cmp);
    for (size_t i = 0; i < n; i++) {
        s_case(dir, names[i], seconds);
        free(names[i]);
    }
    if (s_mismatches > 0) {
        fprintf(stderr, "bench_jsonschema: %zu verdicts of the timed paths were wrong\n",
                s_mismatches);
        return 1;
    }
    return 0;
}
