/*
 * server/server.h — the HTTP server's shared state (internal to server/): configuration, the
 * libuv loop, the HTTP transport, the worker (scheduler thread), the model info, what was
 * learnt of the runner at start-up, metrics, and the list of in-flight requests.
 *
 * Threading: everything here lives on the loop thread, except that the scheduler thread calls
 * the worker's wake callback (uv_async_send) and the threadpool runs tokenization jobs that
 * only read the model info (immutable: tokenizer, chat template). The server never touches the
 * runner: the numbers it shows come from the worker's copies (limits, caps) and stats.
 */
#ifndef PGD_SERVER_SERVER_H
#define PGD_SERVER_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "api/error.h"
#include "api/request.h"
#include "engine/info.h"
#include "scheduler/worker.h"
#include "server/access.h"
#include "server/cors.h"
#include "server/serve.h"
#include "server/http.h"
#include "server/metrics.h"
#include "server/resp_store.h"

typedef enum { PGD_SRV_LOADING, PGD_SRV_READY, PGD_SRV_DRAINING, PGD_SRV_FAILED } pgd_srv_state;

/* Retry-After (seconds) of the 503s answered while the model loads (GET /health and the routes
 * that need the model). */
#define PGD_SRV_LOADING_RETRY_S "1"

typedef struct pgd_rctx pgd_rctx; /* one in-flight API request (routes.c) */

typedef struct pgd_srv {
    pgd_serve_config cfg;
    char served_name[256];
    uv_loop_t *loop;
    pgd_http_server *http;
    pgd_worker *worker;   /* NULL until loaded */
    pgd_model_info *info; /* NULL until loaded; closed after the worker */
    pgd_req_limits lim;   /* the worker's (valid once loaded) */
    pgd_pooling pooling;  /* how /v1/embeddings pool (valid once loaded) */
    int reasoning;        /* chat answers' reasoning split off (api/reasoning.h): 1 on, 0 off,
                             -1 auto until the model is loaded */
    int32_t think_open, think_close; /* the <think> and </think> token ids, -1 when the
                                        vocabulary has none (valid once loaded) */
    pgd_metrics *registry;
    pgd_metric *http_requests; /* http_requests_total{model_name,method,route,status} */
    pgd_pagoda_metrics pm;
    pgd_access *access; /* keys, tenants, quotas (server/access.h) */
    pgd_cors *cors;     /* origins of browser pages allowed to call (server/cors.h); NULL: none */
    pgd_resp_store *responses; /* stored /v1/responses answers (server/resp_store.h); NULL:
                                  none kept (--responses-store-mb 0) */
    bool metrics_ready;
    pgd_srv_state state;
    int64_t created; /* unix seconds at start (for /v1/models) */
    uv_async_t wake;
    uv_signal_t sigint, sigterm, sighup;
    uv_timer_t drain_timer;
    uint64_t drain_deadline_ns;
    bool drain_aborted;
    pgd_rctx *inflight; /* doubly linked list */
    uint32_t n_inflight;
    int exit_code;
} pgd_srv;

/* router.c */
void pgd_srv_handle(void *arg, pgd_http_request *req); /* the HTTP handler */
void pgd_srv_head(void *arg, pgd_http_request *req);   /* on_head: CORS headers */
/* The route a path reaches, as metrics name it ("/v1/models/{id}"), or "other": a label of
 * bounded cardinality. */
const char *pgd_srv_route_label(const char *path);

/* routes.c: the completion endpoints. A request routed to POST /v1/chat/completions (kind CHAT),
 * /v1/completions (COMPLETION), /v1/responses (CHAT, responses) or /v1/embeddings (EMBEDDING)
 * by a caller allowed to use it, with the model ready: parsed, checked against the caller's
 * quotas, tokenized, submitted, answered. */
void pgd_srv_start_completion(pgd_srv *srv, pgd_http_request *req, pgd_api_kind kind,
                              bool responses, const pgd_caller *who);
void pgd_srv_drain_events(pgd_srv *srv); /* engine events -> responses */
void pgd_srv_abort_all(pgd_srv *srv);    /* abort every in-flight request */
int pgd_srv_error_body(void *arg, int status, const char *message, pgd_buf *out);

/* endpoints.c: the answers every route builds, and the endpoints other than completions */
void pgd_srv_respond_json(pgd_http_request *req, int status, const pgd_buf *b,
                          const pgd_http_header *h, size_t nh);
/* e's body with its status (headers decided earlier, Retry-After or x-ratelimit-*, are on the
 * request already) */
void pgd_srv_respond_error(pgd_http_request *req, pgd_api_error *e);
void pgd_srv_respond_simple_error(pgd_http_request *req, int status, const char *param,
                                  const char *code, const char *msg);
bool pgd_srv_model_ok(pgd_srv *srv, pgd_str model); /* empty, or the served name */
void pgd_srv_tokenize(pgd_srv *srv, pgd_http_request *req, bool detok); /* POST /[de]tokenize */
/* GET /v1/models (id NULL: the list) or GET /v1/models/{id} */
void pgd_srv_models(pgd_srv *srv, pgd_http_request *req, const char *id);
void pgd_srv_metrics(pgd_srv *srv, pgd_http_request *req);
void pgd_srv_admin_tenants(pgd_srv *srv, pgd_http_request *req);
void pgd_srv_health(pgd_srv *srv, pgd_http_request *req);
/* GET /v1/responses/{id} (the stored object) or DELETE (drops it): the caller's own only */
void pgd_srv_stored_response(pgd_srv *srv, pgd_http_request *req, const char *id,
                             const pgd_caller *who, bool del);
/* The owner of what a caller stores: its tenant's id, 0 without one */
uint64_t pgd_srv_owner(const pgd_caller *who);

/* embeddings.c: POST /v1/embeddings beside the completion path of routes.c */
/* One input's tokens (any thread): its ids, or its text encoded (BOS, and EOS when the model
 * adds one). 0, or the tokenizer's error. */
int pgd_srv_embed_encode(const pgd_model_info *info, const pgd_api_prompt *in, pgd_tokens *out);
/* The pooling embeddings use: `asked` (--pooling), or with NONE (auto) the model's own (GGUF
 * pooling_type mean or last; last otherwise, with *note saying why when the model asks for one
 * pagoda does not do). */
pgd_pooling pgd_srv_pooling_of(const pgd_model_info *info, pgd_pooling asked, const char **note);
/* The answer from each input's pooled vector (n_embd floats, in input order). 0 or
 * PGD_ENOMEM. */
int pgd_srv_embeddings_answer(const pgd_srv *srv, const pgd_api_request *rq, float *const *pooled,
                              size_t n, int64_t prompt_tokens, pgd_buf *out);

/* reasoning.c: --reasoning-parser. Parse its value (NULL: auto) into srv->reasoning at start;
 * 0, or PGD_EINVAL naming the choices. Once the model is loaded: the tags' token ids, auto
 * resolved, and a log line when on. */
int pgd_srv_reasoning_parse(pgd_srv *srv, const char *name);
void pgd_srv_reasoning_resolve(pgd_srv *srv);
/* A chat prompt's tokens end inside an open reasoning block (a <think> after the last
 * </think>: the template opened it, as DeepSeek-R1's does). */
bool pgd_srv_reasoning_open(const pgd_srv *srv, const int32_t *ids, size_t n);

#endif
