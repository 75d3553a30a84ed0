/* usage: see usage.h. */
#include "usage.h"
#include "jsonnumber.h"

#include <math.h>
#include <stdbool.h>

static int64_t s_int(const json_t *obj, const char *key) {
    const json_t *v = json_object_get(obj, key);
    return json_is_integer(v) && json_integer_value(v) >= 0 ? (int64_t)json_integer_value(v) : -1;
}

static int64_t s_zero(int64_t v) {
    return v > 0 ? v : 0;
}

usage_t usage_none(void) {
    return (usage_t){0, 0, -1, -1, -1};
}

usage_t usage_openai(const json_t *wire) {
    usage_t u = usage_none();
    int64_t prompt = s_zero(s_int(wire, "prompt_tokens"));
    u.cache_read_tokens = s_int(json_object_get(wire, "prompt_tokens_details"), "cached_tokens");
    u.input_tokens = prompt - s_zero(u.cache_read_tokens);
    if (u.input_tokens < 0) {
        u.input_tokens = 0;
    }
    u.output_tokens = s_zero(s_int(wire, "completion_tokens"));
    u.reasoning_tokens =
        s_int(json_object_get(wire, "completion_tokens_details"), "reasoning_tokens");
    return u;
}

void usage_anthropic_merge(usage_t *u, const json_t *wire) {
    const char *keys[] = {"input_tokens", "output_tokens", "cache_read_input_tokens",
                          "cache_creation_input_tokens"};
    int64_t *fields[] = {&u->input_tokens, &u->output_tokens, &u->cache_read_tokens,
                         &u->cache_creation_tokens};
    for (int k = 0; k < 4; k++) {
        int64_t v = s_int(wire, keys[k]);
        if (v >= 0) {
            *fields[k] = v;
        }
    }
}

usage_t usage_ollama(const json_t *line) {
    usage_t u = usage_none();
    u.input_tokens = s_zero(s_int(line, "prompt_eval_count"));
    u.output_tokens = s_zero(s_int(line, "eval_count"));
    return u;
}

json_t *usage_json(const usage_t *u) {
    json_t *j = json_pack("{s:I, s:I}", "input_tokens", (json_int_t)u->input_tokens,
                          "output_tokens", (json_int_t)u->output_tokens);
    if (u->cache_read_tokens >= 0) {
        json_object_set_new(j, "cache_read_tokens", json_integer(u->cache_read_tokens));
    }
    if (u->cache_creation_tokens >= 0) {
        json_object_set_new(j, "cache_creation_tokens", json_integer(u->cache_creation_tokens));
    }
    if (u->reasoning_tokens >= 0) {
        json_object_set_new(j, "reasoning_tokens", json_integer(u->reasoning_tokens));
    }
    return j;
}

int64_t usage_context_tokens(const json_t *usage) {
    int64_t ctx = s_int(usage, "context_tokens");
    if (ctx >= 0) {
        return ctx;
    }
    const char *keys[] = {"input_tokens", "cache_read_tokens", "cache_creation_tokens",
                          "output_tokens"};
    int64_t sum = 0;
    bool any = false;
    for (int k = 0; k < 4; k++) {
        int64_t v = s_int(usage, keys[k]);
        any = any || v >= 0;
        sum += s_zero(v);
    }
    return any ? sum : -1;
}

/* A price in USD per million tokens: the micro-USD of one token. -1 when absent. */
static double s_price(const json_t *prices, const char *key) {
    const json_t *v = json_object_get(prices, key);
    return json_is_number(v) && json_number_value(v) >= 0 ? json_number_value(v) : -1;
}

json_t *usage_priced(const json_t *usage, const json_t *prices, int64_t context_limit) {
    if (!usage) {
        return NULL;
    }
    json_t *out = jsonnumber_deep_copy(usage);
    int64_t ctx = usage_context_tokens(usage);
    if (ctx >= 0) {
        json_object_set_new(out, "context_tokens", json_integer(ctx));
    }
    if (context_limit > 0) {
        json_object_set_new(out, "context_limit", json_integer(context_limit));
    }
    double in = s_price(prices, "input");
    double outp = s_price(prices, "output");
    if (json_is_object(prices) && in >= 0 && outp >= 0) {
        double read = s_price(prices, "cache_read");
        double write = s_price(prices, "cache_write");
        double micros =
            (double)s_zero(s_int(usage, "input_tokens")) * in +
            (double)s_zero(s_int(usage, "output_tokens")) * outp +
            (double)s_zero(s_int(usage, "cache_read_tokens")) * (read >= 0 ? read : in) +
            (double)s_zero(s_int(usage, "cache_creation_tokens")) * (write >= 0 ? write : in);
        json_object_set_new(out, "total_cost_micros", json_integer((json_int_t)llround(micros)));
    }
    return out;
}
