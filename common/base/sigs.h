/*
 * sigs: how a chatfleet process takes its signals. Each main installs one handler for the
 * signals it acts on (stop, log the counters, wake its loop) and, when it writes to peers
 * that may close first, ignores SIGPIPE so that such a write fails with EPIPE instead of
 * ending the process. The handler is the main's own: it only sets flags (sig_atomic_t).
 */
#ifndef CHATFLEET_SIGS_H
#define CHATFLEET_SIGS_H

#include <signal.h>

/* What sigs_install does with SIGPIPE. */
typedef enum {
    SIGS_PIPE_KEEP = 0, /* leaves it as the process has it */
    SIGS_PIPE_IGNORE,   /* SIG_IGN: a write to a closed pipe or socket returns EPIPE */
} sigs_pipe_t;

/* Installs handler (sigaction) for each of signals, a list ended by 0, with an empty mask
 * (the signal being handled stays blocked while its handler runs) and sa_flags as given: 0
 * makes a slow call the signal interrupts fail with EINTR, SA_RESTART restarts it. Then
 * applies pipe to SIGPIPE. A signal that cannot be caught (SIGKILL, SIGSTOP, no such
 * number) is a programmer error: asserted. */
void sigs_install(void (*handler)(int), const int *signals, int sa_flags, sigs_pipe_t pipe);

/* Blocks signals (a list ended by 0) in the calling thread, and so in every thread it starts
 * afterwards, which inherit its mask; the mask before goes to *old, for sigsuspend(old) to
 * wait for one of them without a lost wake-up. */
void sigs_block(const int *signals, sigset_t *old);

#endif
