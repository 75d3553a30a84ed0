/* tools: see tools.h. */
#include "tools.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

typedef json_t *(s_tool_fn)(const json_t *args, bool *is_error);

static json_t *s_time(const json_t *args, bool *is_error) {
    (void)args;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char buf[40];
    strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    *is_error = false;
    return json_pack("{s:s, s:I}", "utc", buf, "unix", (json_int_t)ts.tv_sec);
}

static json_t *s_echo(const json_t *args, bool *is_error) {
    *is_error = false;
    return json_pack("{s:O}", "echo", args ? (json_t *)args : json_null());
}

static const struct {
    const char *name;
    const char *description;
    const char *schema;
    s_tool_fn *fn;
} s_tools[] = {
    {"time", "Returns the current UTC time.", "{\"type\":\"object\",\"properties\":{}}", s_time},
    {"echo", "Returns its arguments unchanged.", "{\"type\":\"object\"}", s_echo},
};

#define S_NTOOLS (sizeof s_tools / sizeof s_tools[0])

bool tools_is_local(const char *name) {
    for (size_t i = 0; name && i < S_NTOOLS; i++) {
        if (strcmp(s_tools[i].name, name) == 0) {
            return true;
        }
    }
    return false;
}

static json_t *s_specs[S_NTOOLS]; /* built once, never changed, shared by every offer */
static pthread_once_t s_specs_once = PTHREAD_ONCE_INIT;

static void s_specs_build(void) {
    for (size_t i = 0; i < S_NTOOLS; i++) {
        json_t *schema = json_loads(s_tools[i].schema, 0, NULL);
        /* json_pack's "o" steals the schema reference. */
        s_specs[i] = json_pack("{s:s, s:s, s:o}", "name", s_tools[i].name, "description",
                               s_tools[i].description, "input_schema", schema);
    }
}

json_t *tools_local_specs(void) {
    pthread_once(&s_specs_once, s_specs_build);
    json_t *arr = json_array();
    for (size_t i = 0; i < S_NTOOLS; i++) {
        json_array_append(arr, s_specs[i]);
    }
    return arr;
}

json_t *tools_run(const char *name, const json_t *args, bool *is_error) {
    for (size_t i = 0; name && i < S_NTOOLS; i++) {
        if (strcmp(s_tools[i].name, name) == 0) {
            return s_tools[i].fn(args, is_error);
        }
    }
    *is_error = true;
    return json_pack("{s:s}", "error", "unknown tool");
}
