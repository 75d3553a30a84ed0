/*
 * schemagen: a JSON value that satisfies a JSON Schema (the sim provider's answer to a
 * structured request, issue 7 item 5), and one that does not (its scripted mistakes).
 *
 * Pure computation over the schema document; no I/O, thread-safe. The generator covers what
 * the sim needs, not every schema: type (first listed), const, enum, properties and required,
 * minProperties, items (schema or tuple), minItems, uniqueItems (items vary), minimum,
 * maximum and their exclusive forms, multipleOf, minLength, maxLength, the known formats,
 * anyOf/oneOf (first branch), allOf (merged one level), boolean schemas. `pattern` is not
 * honoured. Callers that must be sure check the result with jsonschema_validate
 * (schemagen_valid does exactly that, trying each branch and type in turn).
 */
#ifndef CHATFLEET_SCHEMAGEN_H
#define CHATFLEET_SCHEMAGEN_H

#include <jansson.h>

#include "jsonschema.h"

#define SCHEMAGEN_DEPTH_MAX 32 /* nesting the generator follows; deeper becomes null */

/* A value built from schema (new reference, never NULL; null for a null or empty schema).
 * variant shifts numbers and strings so that sibling array items differ. */
json_t *schemagen_instance(const json_t *schema, int variant);

/* A value that compiled accepts, trying the plain instance, then each anyOf/oneOf branch
 * and each listed type. Returns a new reference, or NULL when none of them validates. */
json_t *schemagen_valid(const json_t *schema, const jsonschema_t *compiled);

/* A value that compiled rejects (a wrong type, out of range, or a missing member), or NULL
 * when every candidate tried is accepted (the schema accepts anything). */
json_t *schemagen_invalid(const json_t *schema, const jsonschema_t *compiled);

#endif
