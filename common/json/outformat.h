/*
 * outformat: a request's response_format (ARCHITECTURE.md §8): {"type":"text"}
 * or {"type":"json_schema","json_schema":{"name","description"?,"schema"}}, validated and its
 * schema compiled before anything is persisted. The same parser reads formats back from
 * storage (recovered metadata is untrusted too).
 */
#ifndef CHATFLEET_OUTFORMAT_H
#define CHATFLEET_OUTFORMAT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "jsonschema.h"

#define OUTFORMAT_NAME_MAX        64   /* bytes of json_schema.name, ^[A-Za-z0-9_-]{1,64}$ */
#define OUTFORMAT_DESCRIPTION_MAX 1024 /* UTF-8 bytes of json_schema.description */
#define OUTFORMAT_FIELD_MAX       512  /* bytes of an error's field path */

/* The finalizer tool a structured request adds; no dynamic tool may take this name. */
#define OUTFORMAT_FINALIZER "submit_structured_output"

typedef struct {
    bool structured; /* false: {"type":"text"} */
    char name[OUTFORMAT_NAME_MAX + 1];
    char *description;      /* or NULL */
    json_t *schema;         /* the caller's schema document */
    jsonschema_t *compiled; /* immutable; safe to share */
} outformat_t;

typedef struct {
    char field[OUTFORMAT_FIELD_MAX]; /* "response_format.json_schema.schema.properties" */
    char message[256];
} outformat_error_t;

/* Parses v (a value that passed the strict boundary), naming fields from prefix. Returns 0
 * with a new format in *out, or -1 with *out NULL and err filled. */
int outformat_parse(const json_t *v, const char *prefix, outformat_t **out, outformat_error_t *err);
void outformat_destroy(outformat_t **self_p);

/* The canonical JSON of a structured format, for storage (caller frees); NULL for text. */
char *outformat_json(const outformat_t *self);

#endif
