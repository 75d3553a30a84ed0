/*
 * sandbox: how the worker starts an MCP stdio server (ARCHITECTURE.md §7.9, issue 34) so that it
 * cannot read the worker's secrets. The server gets only the environment its configuration
 * names, plus PATH, HOME and LANG (never the worker's environment), and runs in a private
 * scratch directory; where bubblewrap (bwrap) works it runs inside it: read-only system
 * directories, the paths its configuration lists, no network unless configured, a fresh /tmp
 * and /proc, and none of the worker's key, configuration or other CHATFLEET_* files.
 *
 * CHATFLEET_MCP_SANDBOX chooses: auto (bwrap when it works, else a clean environment only, with
 * one mcp_sandbox_unavailable warning), require (no bwrap, no server) or off. Thread-safe.
 */
#ifndef CHATFLEET_SANDBOX_H
#define CHATFLEET_SANDBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define SANDBOX_ENV_MODE     "CHATFLEET_MCP_SANDBOX"
#define SANDBOX_BWRAP        "/usr/bin/bwrap"
#define SANDBOX_PATH_DEFAULT "/usr/local/bin:/usr/bin:/bin"
#define SANDBOX_LANG         "C.UTF-8"
#define SANDBOX_ENV_MAX      64 /* variables a server's configuration may name */
#define SANDBOX_PATHS_MAX    32 /* ro_paths, and rw_paths, of one server */
#define SANDBOX_PROBE_MS     5000

typedef enum { SANDBOX_AUTO = 0, SANDBOX_REQUIRE, SANDBOX_OFF } sandbox_mode_t;

/* One server's confinement, from its configuration (mcpset.h). Every array is NULL-terminated
 * and may be NULL. */
typedef struct {
    sandbox_mode_t mode;
    const char *const *env;      /* "NAME=value": the server's whole environment but PATH... */
    const char *const *ro_paths; /* absolute paths bound read-only at the same place */
    const char *const *rw_paths; /* absolute paths bound read-write at the same place */
    bool network;                /* share the worker's network; else a namespace of its own */
} sandbox_conf_t;

/* The mode named by text (NULL or empty: auto). 0, or -1 when text names none. */
int sandbox_mode_parse(const char *text, sandbox_mode_t *out);

/* "auto", "require" or "off". */
const char *sandbox_mode_name(sandbox_mode_t mode);

/* True when bwrap is installed and a probe run of it works. The probe runs once per process;
 * why (may be NULL) gets the reason it failed. */
bool sandbox_usable(char *why, size_t why_size);

/* Starts command (an absolute path, or a name looked up on the server's PATH) with args
 * (without the command) for the server called name, its standard input and output on in_fd
 * and out_fd, in a process group of its own with no signal blocked: sandboxed as conf->mode
 * says, in the scratch directory (created on first use). Returns 0 with *pid, or -1 with why;
 * errno is set. */
int sandbox_spawn(const sandbox_conf_t *conf, const char *name, const char *command,
                  const char *const *args, int in_fd, int out_fd, pid_t *pid, char *why,
                  size_t why_size);

/* Removes the scratch directory of the server called name (when the server stops for good). */
void sandbox_scratch_remove(const char *name);

/* Removes the scratch directories that workers no longer running left behind (killed ones). */
void sandbox_scratch_sweep(void);

#endif
