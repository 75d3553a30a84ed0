/*
 * models: the model configs the deployment offers, from the config file (ARCHITECTURE.md §10) or
 * the built-in `sim` model, written into model_configs at start so chats can reference them.
 */
#ifndef CHATFLEET_MODELS_H
#define CHATFLEET_MODELS_H

#include <libpq-fe.h>

/* Reads path (NULL: the built-in sim model only), validates every entry, and upserts them
 * with exactly one default. Returns 0, or -1 after printing the field path and reason. */
int models_sync(PGconn *conn, const char *path);

#endif
