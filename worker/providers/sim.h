/*
 * sim: the built-in deterministic model provider (worker/README.md, "The sim provider"), scripted
 * by directives in the last user message so that tests, benchmarks and chaos runs can choose what
 * the "model" does. The directives are listed in worker/README.md ("The sim provider"); without
 * any, the reply is a text derived only from the prompt, streamed word by word. When the request
 * offers submit_structured_output, the sim answers with a valid instance of its schema
 * (schemagen.h) unless a schema directive scripts a mistake first. When the request carries
 * a native schema (provider.h), the reply is the JSON text of such an instance instead, the
 * schema directives scripting the same mistakes as text; a native schema together with tools
 * fails the call with 400, as a grammar-constrained server would. A summary request (provider.h)
 * gets "Summary of N messages:" and the start of each user and assistant text, streamed as text.
 * With [sim:spawn N], after any [sim:tool] steps, the turn plays the subagent script of
 * simagents.h (spawn, message or interrupt, wait), then answers as after any tool results, or
 * submits as above when structured.
 */
#ifndef CHATFLEET_SIM_H
#define CHATFLEET_SIM_H

#include "provider.h"
#include "simagents.h"

#define SIM_WORDS_DEFAULT     8     /* filler words after the echo of the prompt */
#define SIM_WORDS_MAX         20000 /* [sim:words N] is clamped to this */
#define SIM_REPEAT_MAX        1000  /* the xN of tool, dynamic and fail; the N of spawn */
#define SIM_SUMMARY_MAX_BYTES 4096  /* a summary stops adding rows past this length */

/* Parsed directives of one prompt (exposed for unit tests). */
typedef struct {
    char tool[65];    /* [sim:tool NAME xN]: call the local tool NAME on the first N steps */
    int tool_steps;   /* N, default 1 */
    char dynamic[65]; /* [sim:dynamic NAME xN]: call the dynamic tool NAME likewise */
    int dynamic_steps;
    int fail_status;     /* [sim:fail STATUS xN retry-after MS]: attempts 1..N fail */
    int fail_attempts;   /* N, default 1 */
    int64_t retry_after; /* MS, or -1 */
    int64_t slow_ms;     /* [sim:slow MS]: pace between text chunks; -1: the configured one */
    bool stall;          /* [sim:stall]: never answer; wait to be cancelled */
    int words;           /* [sim:words N]: filler words (SIM_WORDS_DEFAULT) */
    /* Structured requests (while the finalizer is on offer, or in native mode), in order: */
    int schema_text;       /* [sim:schema-text N]: the first N answers are text only (no N: all) */
    int schema_wrong;      /* [sim:schema-wrong N]: then N submissions of an invalid value */
    int schema_siblings;   /* [sim:schema-siblings N]: then N batches: finalizer plus `time` */
    int schema_double;     /* [sim:schema-double N]: then N batches of two finalizer calls */
    int schema_unsafe;     /* [sim:schema-unsafe N]: then N submissions with a duplicate key */
    int schema_truncate;   /* [sim:schema-truncate N]: then N valid submissions cut short
                              (finish "length"), which can never become a candidate */
    bool schema_refuse;    /* [sim:schema-refuse]: refuse (finish "refusal") instead */
    bool schema_stall;     /* [sim:schema-stall-after-candidate]: attempt 1 of the step after an
                              accepted submission stalls until cancelled */
    int64_t usage_input;   /* [sim:usage N]: the reply reports N input tokens; -1: counted */
    bool title_fail;       /* [sim:title-fail]: a title call fails with 400 */
    bool title_invalid;    /* [sim:title-invalid]: a title call answers {"name": ...} */
    int64_t title_slow_ms; /* [sim:title-slow MS]: a title call's pace; -1: slow_ms's */
    bool clock;            /* [sim:clock]: each text part, as it is handed to the worker, starts
                              with "@MICROS@ ": the monotonic clock's microseconds then (benches
                              measure delivery from there; the reply's message is not stamped) */
    simagents_script_t agents; /* [sim:spawn N], [sim:child TEXT], [sim:child-schema],
                                  [sim:nowait], [sim:wait-all], [sim:agents VERB] */
} sim_script_t;

/* Parses the directives in text into *out (defaults for those absent); unknown directives
 * are ignored. Writes the prompt with the directives removed (trimmed) into clean (bounded
 * by size). */
void sim_parse(const char *text, sim_script_t *out, char *clean, size_t size);

/* The start function of provider "sim" (provider.h): the reply is computed at once and
 * played out on the loop's timers at its pace. */
void sim_start(provider_call_t *call, const provider_request_t *req);

#endif
