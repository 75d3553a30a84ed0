/* steer: see steer.h. */
#include "steer.h"
#include "agents.h"
#include "effort.h"
#include "mcpset.h"
#include "tools.h"

#include <string.h>

static const char *s_str(const json_t *obj, const char *key) {
    const char *v = json_string_value(json_object_get(obj, key));
    return v ? v : "";
}

const char *steer_effort(const history_t *h) {
    const json_t *re = json_object_get(json_object_get(h->model, "options"), "reasoning_effort");
    return effort_resolve(h->reasoning_effort, json_string_value(json_object_get(re, "default")),
                          json_string_value(json_object_get(re, "max")));
}

/* The subagent tools, only those that change nothing in plan mode. A new array. */
static json_t *s_agent_tools(bool plan) {
    json_t *all = agents_specs();
    if (!plan) {
        return all;
    }
    json_t *kept = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(all, i, t) {
        if (agents_changes_nothing(s_str(t, "name"))) {
            json_array_append(kept, t);
        }
    }
    json_decref(all);
    return kept;
}

json_t *steer_tools(const taskctx_env_t *env, const history_t *h, const structured_turn_t *turn) {
    if (turn && turn->native) {
        return json_array(); /* native mode: the schema constrains the text; no tools at all */
    }
    bool plan = h->plan_mode;
    json_t *tools = tools_local_specs(); /* each only reads (tools.h) */
    if (env->opts.subagent_max_depth > 0) {
        json_t *agents = s_agent_tools(plan);
        json_array_extend(tools, agents);
        json_decref(agents);
    }
    json_t *remote = mcpset_specs(env->mcp, h->mcp_servers, plan);
    json_array_extend(tools, remote);
    json_decref(remote);
    size_t i;
    json_t *t;
    json_array_foreach(plan ? NULL : h->dynamic_tools, i, t) {
        json_array_append_new(tools, json_pack("{s:s, s:s, s:O?}", "name", s_str(t, "name"),
                                               "description", s_str(t, "description"),
                                               "input_schema", json_object_get(t, "input_schema")));
    }
    if (turn) {
        json_array_append_new(tools, structured_tool_spec(turn->fmt->schema));
    }
    return tools;
}

bool steer_offers(const json_t *tools, const char *name) {
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        if (name && !strcmp(s_str(t, "name"), name)) {
            return true;
        }
    }
    return false;
}

json_t *steer_plan_block(const taskctx_options_t *opts) {
    const char *text =
        opts->plan_instructions[0] ? opts->plan_instructions : STEER_PLAN_INSTRUCTIONS;
    return json_pack("{s:s, s:[{s:s, s:s}]}", "role", "system", "content", "type", "text", "text",
                     text);
}
