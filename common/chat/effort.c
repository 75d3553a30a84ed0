/* effort: the reasoning effort scale; see effort.h. */
#include "effort.h"

#include <stddef.h>
#include <string.h>

static const char *const s_names[EFFORT_LEVELS] = {"none", "minimal", "low", "medium",
                                                   "high", "xhigh",   "max"};

int effort_rank(const char *name) {
    for (int i = 0; name && i < EFFORT_LEVELS; i++) {
        if (!strcmp(name, s_names[i])) {
            return i + 1;
        }
    }
    return 0;
}

const char *effort_name(int rank) {
    return rank >= 1 && rank <= EFFORT_LEVELS ? s_names[rank - 1] : NULL;
}

const char *effort_resolve(const char *chosen, const char *dflt, const char *max) {
    int d = effort_rank(dflt);
    int m = effort_rank(max);
    if (!d || !m) {
        return NULL;
    }
    int c = effort_rank(chosen);
    int r = c ? c : d;
    return effort_name(r < m ? r : m);
}
