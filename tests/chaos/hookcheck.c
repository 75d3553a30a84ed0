/* hookcheck: see hookcheck.h. */
#include "hookcheck.h"

#include "hookcons.h"
#include "hooks.h"
#include "mem.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_SECRET "chaos-hook-secret"

struct hookcheck {
    hookcons_t *cons;
    char *url_env;
};

hookcheck_t *hookcheck_new(void) {
    hookcheck_t *self = mem_calloc(1, sizeof *self);
    self->cons = hookcons_new(0);
    hookcons_answer(self->cons, NULL, 200, "{}", false);
    self->url_env =
        mem_printf("CHATFLEET_HOOKS_URL=http://127.0.0.1:%d/hooks", hookcons_port(self->cons));
    return self;
}

const char *hookcheck_url_env(const hookcheck_t *self) {
    return self->url_env;
}

const char *hookcheck_secret_env(const hookcheck_t *self) {
    (void)self;
    return "CHATFLEET_HOOKS_SECRET=" S_SECRET;
}

int hookcheck_check(hookcheck_t *self) {
    int n = hookcons_seen(self->cons);
    int counts[HOOKS_EVENT_COUNT] = {0};
    int bad = 0;
    int repeated = 0;
    json_t *ids = json_object();
    for (int i = 0; i < n; i++) {
        char *body = hookcons_body(self->cons, i);
        char *sig = hookcons_header(self->cons, i, HOOKS_SIGNATURE_HEADER);
        char want[100];
        bool signed_ok = hooks_sign(S_SECRET, body, strlen(body), want, sizeof want) == 0 && sig &&
                         !strcmp(sig, want);
        json_t *v = json_loads(body, 0, NULL);
        const char *ev = json_string_value(json_object_get(v, "event"));
        const char *id = json_string_value(json_object_get(v, "event_id"));
        const char *chat = json_string_value(json_object_get(v, "chat_id"));
        int k = 0;
        while (ev && k < HOOKS_EVENT_COUNT && strcmp(ev, hooks_event_name((hooks_event_t)k))) {
            k++;
        }
        if (!signed_ok || !ev || k == HOOKS_EVENT_COUNT || !id || !chat) {
            bad++;
        } else {
            counts[k]++;
            repeated += json_object_get(ids, id) != NULL;
            json_object_set_new(ids, id, json_true());
        }
        json_decref(v);
        free(body);
        free(sig);
    }
    json_decref(ids);
    printf("chaos: hooks: %d deliveries kept (of the first %d), %d bad, %d repeated ids:", n,
           HOOKCONS_SEEN_MAX, bad, repeated);
    for (int k = 0; k < HOOKS_EVENT_COUNT; k++) {
        printf(" %s=%d", hooks_event_name((hooks_event_t)k), counts[k]);
    }
    printf("\n");
    /* The workload creates chats, sends prompts, calls tools and ends turns. */
    int failed = bad > 0;
    failed += counts[HOOKS_SESSION_START] == 0 || counts[HOOKS_USER_PROMPT_SUBMIT] == 0;
    failed += counts[HOOKS_PRE_TOOL_USE] == 0 || counts[HOOKS_STOP] == 0;
    printf("chaos: invariant %-22s %s\n", "hooks_signed_and_seen", failed ? "FAILED" : "OK");
    return failed;
}

void hookcheck_destroy(hookcheck_t **self_p) {
    if (!self_p || !*self_p) {
        return;
    }
    hookcheck_t *self = *self_p;
    hookcons_destroy(&self->cons);
    free(self->url_env);
    free(self);
    *self_p = NULL;
}
