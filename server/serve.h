/*
 * server/serve.h — running the HTTP server: its configuration and the call that serves until a
 * signal stops it. The CLI (cli/serve.c) fills the configuration from flags, the environment and
 * a config file.
 *
 * Threading: pgd_serve_run runs the libuv loop on the calling thread (the main thread).
 */
#ifndef PGD_SERVER_SERVE_H
#define PGD_SERVER_SERVE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/load.h"
#include "scheduler/sched.h"

typedef struct pgd_serve_config {
    const char *host;
    uint64_t port;                 /* 0 = any free port (printed at start) */
    const char *served_model_name; /* default: the model file's name without .gguf */
    const char *api_key;           /* one key, one tenant; NULL: no authentication */
    const char *tenants;           /* tenants file (server/tenants.h); overrides api_key */
    const char *allowed_origins;   /* CORS: origins of browser pages that may call, comma-
                                      separated, or "*" (server/cors.h); NULL: none */
    const char *metrics_prefix;    /* "pagoda_" */
    uint64_t shutdown_timeout_s;   /* in-flight requests may finish for this long */
    uint64_t max_body_mb;
    uint64_t responses_store_mb;  /* memory for stored /v1/responses answers; 0: none kept */
    const char *pooling;          /* /v1/embeddings: "auto" (the model's; NULL too), "last",
                                     "mean" */
    const char *reasoning_parser; /* chat: "auto" (NULL too: on when the vocabulary has <think>
                                     and </think>), "none", "think" (api/reasoning.h) */
    uint64_t max_connections;
    uint64_t idle_timeout_s;
    uint64_t request_timeout_s; /* whole request (headers + body) must arrive within it */
    bool no_warmup;             /* skip the warm-up before ready (scheduler/offline.h) */
    bool no_access_log;         /* no line on stderr per request */
    pgd_load_options load;      /* the model and its runner */
    pgd_sched_config sched;     /* budgets, max_waiting, prefix caching */
} pgd_serve_config;

/* The server's defaults: 127.0.0.1:8000, 4 MiB bodies, 64 MiB of stored responses, 1024
 * connections, 30 s idle, 60 s per request, 30 s to drain at shutdown; the engine's own defaults.
 */
void pgd_serve_config_default(pgd_serve_config *c);

/* Listen, load the model (GET /health answers 503 "loading" meanwhile), serve until SIGINT or
 * SIGTERM, drain, stop; SIGHUP reloads the tenants file (a bad one is logged and the old
 * tenants stay). Returns the process exit status (2: the tenants file is wrong at start). */
int pgd_serve_run(const pgd_serve_config *c);

#endif
