/*
 * bench_stagemeter: what the stage histograms cost a turn (issue 40, item 4). Replays, on 2
 * threads, the observations one single-step turn makes (acquisition, prepare, generation_step,
 * commit; stream, time_to_first_token and provider_attempt also by model; one outcome) and
 * prints the meter's nanoseconds per turn, with the nanoseconds of an empty replay (the loop
 * and the clock) measured in the same run as the reference.
 *
 *   bench_stagemeter [TURNS_PER_THREAD]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "stagemeter.h"

static double s_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct {
    stagemeter_t *m; /* NULL: the empty replay */
    long turns;
    long long sink;
} s_job_t;

/* One turn's observations, with durations that vary as real ones do. */
static void *s_run(void *arg) {
    s_job_t *job = arg;
    static const char *const models[] = {"sim", "gpt-4.1-mini"};
    for (long i = 0; i < job->turns; i++) {
        int64_t us = 100 + (i * 7919) % 400000;
        bool sub = (i % 5) == 0;
        const char *model = models[i & 1];
        if (!job->m) {
            job->sink += us + sub + model[0];
            continue;
        }
        stagemeter_observe(job->m, STAGE_ACQUISITION, STAGE_SCOPE_TURN, sub, us);
        stagemeter_observe(job->m, STAGE_PREPARE, STAGE_SCOPE_TURN, sub, us / 3);
        stagemeter_observe_model(job->m, STAGE_TIME_TO_FIRST_TOKEN, sub, model, us / 2);
        stagemeter_observe_model(job->m, STAGE_STREAM, sub, model, us);
        stagemeter_observe_model(job->m, STAGE_PROVIDER_ATTEMPT, sub, model, us + 5);
        stagemeter_observe(job->m, STAGE_COMMIT, STAGE_SCOPE_TURN, sub, us / 7);
        stagemeter_observe(job->m, STAGE_GENERATION_STEP, STAGE_SCOPE_TURN, sub, us + 50);
        stagemeter_count_outcome(job->m, TURN_COMPLETED, sub);
    }
    return NULL;
}

/* Seconds for 2 threads to replay turns each, with the meter m (or none). */
static double s_time(stagemeter_t *m, long turns) {
    s_job_t jobs[2] = {{m, turns, 0}, {m, turns, 0}};
    pthread_t t[2];
    double t0 = s_now();
    for (int i = 0; i < 2; i++) {
        pthread_create(&t[i], NULL, s_run, &jobs[i]);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
    }
    return s_now() - t0;
}

int main(int argc, char **argv) {
    long turns = argc > 1 ? atol(argv[1]) : 1000000;
    stagemeter_t *m = stagemeter_new();
    double best = 1e9, empty = 1e9;
    for (int r = 0; r < 5; r++) { /* best of five, alternating */
        double t = s_time(m, turns);
        double e = s_time(NULL, turns);
        best = t < best ? t : best;
        empty = e < empty ? e : empty;
    }
    long long seen = stagemeter_count(m, STAGE_COMMIT);
    stagemeter_destroy(&m);
    double per_turn = (best - empty) / (double)turns * 1e9; /* per thread, wall */
    printf("stagemeter: %ld turns on each of 2 threads, best of 5: %.1f ns per turn "
           "(11 observations, 1 outcome; empty replay %.1f ns); %lld commits observed\n",
           turns, per_turn, empty / (double)turns * 1e9, seen);
    return seen == 10LL * turns ? 0 : 1;
}
