/*
 * client: the chatfleet gateway's REST API over libcurl, for the chatfleet CLI. One client
 * holds the base URL, bearer token and CA file; each call is one request whose JSON answer is
 * parsed through the strict boundary (the server's text is untrusted like any other input).
 * An https base URL is spoken over TLS only (libcurl is limited to https for it, so nothing
 * falls back to plain HTTP), with the server's certificate and host name always verified,
 * against the CA file when one is given and the system's trust store otherwise
 * (ARCHITECTURE.md §1.1, "Transport security").
 */
#ifndef CHATFLEET_CLI_CLIENT_H
#define CHATFLEET_CLI_CLIENT_H

#include <curl/curl.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "jsonstrict.h"

#define CLIENT_RESPONSE_MAX_BYTES (16 * 1024 * 1024) /* one REST answer; more is an error */
#define CLIENT_TIMEOUT_MS         30000              /* one REST request, connect included */

typedef struct client client_t;

/* The caps for server JSON (REST answers and stream events): larger than the request
 * defaults because a message list or a long answer is bigger than one request. */
extern const jsonstrict_limits_t client_limits;

/* A client of base_url ("http://host:port" or "https://host:port", no trailing slash
 * needed) with token and ca_file (a PEM bundle of trusted CAs for https; either may be NULL).
 * NULL when base_url is empty. */
client_t *client_new(const char *base_url, const char *token, const char *ca_file);
void client_destroy(client_t **self_p);

const char *client_base(const client_t *self);
const char *client_token(const client_t *self);

/* method path (under the base URL) with body (NULL: none). Returns the HTTP status, or -1
 * when no answer arrived, its text was refused, or client_headers refused a header and nothing
 * was sent (reason on stderr). *out receives the
 * parsed answer (NULL for an empty body); the caller json_decref()s it. */
long client_call(client_t *self, const char *method, const char *path, const json_t *body,
                 json_t **out);

/* POST path with the size bytes of file as the body, read from it as they are sent (the file is
 * never held in memory), content_type and disposition (NULL: none) its Content-Type and
 * Content-Disposition. A transfer is given up on only when it stalls (no byte for
 * CLIENT_TIMEOUT_MS), since a file's time grows with its size. Returns and fills *out as
 * client_call; -1 also when the file could not be read or a header is refused (reason on
 * stderr). The caller keeps file. */
long client_post_file(client_t *self, const char *path, const char *content_type,
                      const char *disposition, FILE *file, int64_t size, json_t **out);

/* Appends the headers of one request to *list, each through header.h (common/net): name:
 * value (e.g. Accept or Content-Type), then the bearer token when the client has one. Returns
 * 0, or -1 (reason on stderr, *list freed and NULL) when a value holds a control character:
 * the caller sends nothing. main refuses such a token where it is given; this refuses again. */
int client_headers(const client_t *self, const char *name, const char *value,
                   struct curl_slist **list);

/* Sets c's transport options for this client's base URL: allowed protocols, certificate
 * and host verification, the CA file. Every request to the gateway goes through it. */
void client_transport(const client_t *self, CURL *c);

/* A one-line reason for a failed transfer (rc and libcurl's error buffer, may be empty),
 * naming the CA file setting when the server's certificate was not trusted. */
void client_describe(const client_t *self, CURLcode rc, const char *errbuf, char *out, size_t size);

/* Prints the gateway's error envelope {"message","detail"?,"validations"?} to stderr, after
 * what (the operation). */
void client_print_error(const char *what, long status, const json_t *envelope);

#endif
