/*
 * header: the one way an outgoing HTTP header is built (push deliveries, hooks, MCP over
 * HTTP, model providers, the CLI). A header's name must be an RFC 9110 token and its value
 * may hold no control character (CR, LF, NUL, the rest of 0x00-0x1f and DEL; tab is allowed):
 * a value with CR LF would end the header and let its author write their own request.
 * Callers check what they accept where it enters (a 400 naming the field) and this module
 * refuses it again where the request is built.
 */
#ifndef CHATFLEET_HEADER_H
#define CHATFLEET_HEADER_H

#include <curl/curl.h>
#include <stdbool.h>

/* The longest header line built here ("Name: value"), in bytes. */
#define HEADER_LINE_MAX_BYTES 8192

/* True when name is a non-empty RFC 9110 token (letters, digits, !#$%&'*+-.^_`|~). */
bool header_name_ok(const char *name);

/* True when value (NULL counts as empty) holds no control character but tab. */
bool header_value_ok(const char *value);

/* True when text (NULL counts as empty) holds no control character at all, tab included:
 * what a URL or an identifier that ends up in a request line may hold. */
bool header_text_ok(const char *text);

/* Appends "name: value" ("name:" for an empty value: curl then sends no header of that name)
 * to *list (a new list when *list is NULL). Returns 0; or -1, leaving
 * *list as it was, when the name or the value is refused, the line is over
 * HEADER_LINE_MAX_BYTES, or curl could not grow the list. */
int header_append(struct curl_slist **list, const char *name, const char *value);

/* Appends a whole "Name: value" line after checking it as header_append does (the form a
 * configuration holds). Returns 0 or -1 as header_append. */
int header_append_line(struct curl_slist **list, const char *line);

#endif
