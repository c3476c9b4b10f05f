/*
 * server/server.h — the HTTP server's shared state (internal to server/): configuration, the
 * libuv loop, the HTTP transport, the engine (scheduler thread), metrics, and the list of
 * in-flight requests.
 *
 * Threading: everything here lives on the loop thread, except that the scheduler thread calls
 * the engine's wake callback (uv_async_send) and the threadpool runs tokenization jobs that
 * only read the engine's immutable parts (tokenizer, chat template).
 */
#ifndef PGD_SERVER_SERVER_H
#define PGD_SERVER_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "engine/llm.h"
#include "scheduler/engine.h"
#include "server/http.h"
#include "server/metrics.h"

typedef struct pgd_serve_config {
    const char *config_path;
    const char *model_path;
    const char *host;
    uint64_t port;
    const char *served_model_name; /* default: the model file's name without .gguf */
    const char *api_key;           /* NULL: no authentication */
    const char *metrics_prefix;    /* "pagoda_" */
    uint64_t shutdown_timeout_s;   /* in-flight requests may finish for this long */
    uint64_t max_body_mb;
    uint64_t max_connections;
    uint64_t idle_timeout_s;
    uint64_t request_timeout_s; /* whole request (headers + body) must arrive within it */
    uint64_t max_num_batched_tokens, max_num_seqs, max_waiting;
    /* engine (llm) */
    uint64_t kv_cache_mb, block_size, ctx_size, threads;
    bool f32, act_q8, no_prefix_caching;
    const char *chat_template;
    const char *kv_cache_dtype; /* "auto" (default), "f16" or "f32" */
} pgd_serve_config;

typedef enum { PGD_SRV_LOADING, PGD_SRV_READY, PGD_SRV_DRAINING, PGD_SRV_FAILED } pgd_srv_state;

typedef struct pgd_rctx pgd_rctx; /* one in-flight API request (routes.c) */

typedef struct pgd_srv {
    pgd_serve_config cfg;
    char served_name[256];
    uv_loop_t *loop;
    pgd_http_server *http;
    pgd_engine *engine; /* NULL until loaded */
    const pgd_llm *llm; /* the engine's llm (immutable parts) */
    pgd_metrics *registry;
    pgd_pagoda_metrics pm;
    bool metrics_ready;
    pgd_srv_state state;
    int64_t created; /* unix seconds at start (for /v1/models) */
    uv_async_t wake;
    uv_signal_t sigint, sigterm;
    uv_timer_t drain_timer;
    uint64_t drain_deadline_ns;
    bool drain_aborted;
    pgd_rctx *inflight; /* doubly linked list */
    uint32_t n_inflight;
    int exit_code;
} pgd_srv;

/* routes.c */
void pgd_srv_handle(void *arg, pgd_http_request *req); /* the HTTP handler */
void pgd_srv_drain_events(pgd_srv *srv);               /* engine events -> responses */
void pgd_srv_abort_all(pgd_srv *srv);                  /* abort every in-flight request */
int pgd_srv_error_body(void *arg, int status, const char *message, pgd_buf *out);

/* Nanoseconds on the scheduler's clock (CLOCK_MONOTONIC). */
uint64_t pgd_srv_now_ns(void);

#endif
