/* sigs: see sigs.h. */
#include "sigs.h"

#include "mem.h"

void sigs_install(void (*handler)(int), const int *signals, int sa_flags, sigs_pipe_t pipe) {
    struct sigaction sa = {0};
    sa.sa_handler = handler;
    sa.sa_flags = sa_flags;
    sigemptyset(&sa.sa_mask);
    for (const int *s = signals; *s; s++) {
        int rc = sigaction(*s, &sa, NULL);
        ASSERT(rc == 0);
    }
    if (pipe == SIGS_PIPE_IGNORE) {
        struct sigaction ign = {0};
        ign.sa_handler = SIG_IGN;
        sigemptyset(&ign.sa_mask);
        int rc = sigaction(SIGPIPE, &ign, NULL);
        ASSERT(rc == 0);
    }
}

void sigs_block(const int *signals, sigset_t *old) {
    sigset_t set;
    sigemptyset(&set);
    for (const int *s = signals; *s; s++) {
        int rc = sigaddset(&set, *s);
        ASSERT(rc == 0);
    }
    int rc = sigprocmask(SIG_BLOCK, &set, old);
    ASSERT(rc == 0);
}
