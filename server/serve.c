/*
 * server/serve.c — running the server: start-up, loading, signals and graceful shutdown (see
 * serve.h). The flags, environment and config file that configure it are the CLI's
 * (cli/serve.c).
 *
 * Start-up: the HTTP server listens at once (GET /health answers 503 "loading"), the model loads
 * on libuv's threadpool and runs its warm-up there (scheduler/offline.h; --no-warmup skips it),
 * then the worker (scheduler thread) starts and /health turns 200.
 * SIGINT/SIGTERM: stop accepting, let in-flight requests finish for up to shutdown_timeout_s
 * seconds, abort the rest (streams get an SSE error event and [DONE]), exit 0. A second signal
 * aborts at once. A device lost for good (a GPU's sticky error: pgd_worker_lost) fails every
 * request (503) and stops the server the same way, exit 1.
 *
 * Threading: main thread = the libuv loop thread; the model loads on the threadpool; the worker
 * wakes the loop with uv_async_send from the scheduler thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/error.h"
#include "scheduler/offline.h"
#include "server/server.h"

void pgd_serve_config_default(pgd_serve_config *c) {
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8000;
    c->shutdown_timeout_s = 30;
    c->max_body_mb = 4;
    c->responses_store_mb = 64;
    c->max_connections = 1024;
    c->idle_timeout_s = 30;
    c->request_timeout_s = 60;
    c->metrics_prefix = "pagoda_";
    pgd_load_options_default(&c->load);
    pgd_sched_config_default(&c->sched);
}

/* ---- loading and lifecycle ---------------------------------------------------------------- */

typedef struct {
    uv_work_t work;
    pgd_srv *srv;
    pgd_model_info *info;
    pgd_runner *runner;
    pgd_warmup_stats warm;
    int rc;
    char err[512];
} load_job;

static void begin_shutdown(pgd_srv *srv, int code);

static void wake_cb(void *ud) {
    uv_async_send(&((pgd_srv *)ud)->wake);
}
static void on_wake(uv_async_t *a) {
    pgd_srv *srv = a->data;
    pgd_srv_drain_events(srv);
    const char *why;
    if (srv->worker && srv->state == PGD_SRV_READY && pgd_worker_lost(srv->worker, &why)) {
        /* every request got its error; nothing can run again in this process: stop, with a
         * status that tells a supervisor to restart it */
        fprintf(stderr, "pagoda serve: %s; nothing more can run: stopping (exit status 1)\n", why);
        srv->state = PGD_SRV_FAILED;
        begin_shutdown(srv, 1);
    }
}

/* On the threadpool, which owns the runner until load_done hands it to the worker: the model,
 * then the warm-up (a device that cannot run it fails the start here). */
static void load_work(uv_work_t *w) {
    load_job *j = w->data;
    j->rc = pgd_load(&j->srv->cfg.load, &j->info, &j->runner);
    if (j->rc) {
        snprintf(j->err, sizeof j->err, "%s", pgd_error_detail());
        return;
    }
    if (j->srv->cfg.no_warmup) return;
    j->rc = pgd_warmup(j->runner, &j->warm);
    if (j->rc) {
        snprintf(j->err, sizeof j->err, "the warm-up failed: %s", pgd_error_detail());
        pgd_runner_destroy(j->runner);
        pgd_model_info_close(j->info);
        j->runner = NULL;
        j->info = NULL;
    }
}

static double mib(uint64_t bytes) {
    return (double)bytes / (1024.0 * 1024.0);
}

/* A KV pool that cannot hold one request of the whole context would refuse requests forever
 * (or every one): refuse to start instead, with the arithmetic. The context is the model's,
 * or --ctx-size when the user set it. 0, or -1 after printing why. */
static int check_kv_pool(const pgd_srv *srv, const pgd_model_info *info,
                         const pgd_backend_caps *caps) {
    const pgd_load_options *lo = &srv->cfg.load;
    uint64_t bs = caps->block_size, usable = caps->n_blocks - 1;
    uint64_t holds = usable * bs + 1; /* the last token of a sequence needs no slot */
    uint32_t n_ctx = info->n_ctx;
    if (holds >= n_ctx) return 0;
    uint64_t block_bytes = caps->kv_bytes / caps->n_blocks;
    uint64_t need_blocks = (n_ctx - 1 + bs - 1) / bs + 1; /* + the reserved null block */
    uint64_t need_mib = (need_blocks * block_bytes + (1u << 20) - 1) >> 20;
    uint64_t asked = lo->runner.backend.kv_cache_bytes;
    char from[96];
    if (asked)
        snprintf(from, sizeof from, "--kv-cache-mb %llu", (unsigned long long)(asked >> 20));
    else if (caps->kind == PGD_DEVICE_CPU)
        snprintf(from, sizeof from, "the default --kv-cache-mb %d", PGD_DEFAULT_KV_CACHE_MB);
    else
        snprintf(from, sizeof from, "what --gpu-memory-utilization leaves for it");
    bool user_ctx = lo->max_ctx && lo->max_ctx <= n_ctx;
    fprintf(stderr,
            "pagoda serve: the KV cache cannot hold one request of the whole context (%u tokens, "
            "%s): %s gives %u KV blocks of %llu tokens (%.2f MiB each, one of them reserved), "
            "room for %llu tokens, but %u tokens need %llu blocks (%.1f MiB); %s %llu, or %s "
            "--ctx-size to %llu or less\n",
            n_ctx, user_ctx ? "--ctx-size" : "the model's", from, caps->n_blocks,
            (unsigned long long)bs, mib(block_bytes), (unsigned long long)holds, n_ctx,
            (unsigned long long)need_blocks, mib(need_blocks * block_bytes),
            caps->kind == PGD_DEVICE_CPU || asked ? "raise --kv-cache-mb to at least"
                                                  : "raise --gpu-memory-utilization, or set "
                                                    "--kv-cache-mb to at least",
            (unsigned long long)need_mib, user_ctx ? "lower" : "set", (unsigned long long)holds);
    return -1;
}

/* Scheduler flags lowered to what the device and the step can take: say so (not errors). */
static void note_clamped(const pgd_srv *srv, const pgd_sched_config *got) {
    const pgd_serve_config *c = &srv->cfg;
    if (c->sched.max_num_seqs && got->max_num_seqs < c->sched.max_num_seqs)
        fprintf(stderr,
                "pagoda serve: note: --max-num-seqs %u is more than this device and step size "
                "take; using %u\n",
                c->sched.max_num_seqs, got->max_num_seqs);
    if (c->sched.max_num_batched_tokens &&
        got->max_num_batched_tokens < c->sched.max_num_batched_tokens)
        fprintf(stderr,
                "pagoda serve: note: --max-num-batched-tokens %u is more than this device takes; "
                "using %u\n",
                c->sched.max_num_batched_tokens, got->max_num_batched_tokens);
}

static void load_done(uv_work_t *w, int status) {
    load_job *j = w->data;
    pgd_srv *srv = j->srv;
    if (status || j->rc) {
        fprintf(stderr, "pagoda serve: cannot load %s: %s\n",
                srv->cfg.load.model_path ? srv->cfg.load.model_path : srv->cfg.load.model_preset,
                j->err[0] ? j->err : "canceled");
        srv->state = PGD_SRV_FAILED;
        free(j);
        begin_shutdown(srv, 1);
        return;
    }
    if (srv->state == PGD_SRV_DRAINING) { /* a signal came while loading */
        pgd_runner_destroy(j->runner);
        pgd_model_info_close(j->info);
        free(j);
        return;
    }
    if (srv->cfg.load.max_ctx > j->info->n_ctx)
        fprintf(stderr,
                "pagoda serve: note: --ctx-size %u is more than the model's context; using %u\n",
                srv->cfg.load.max_ctx, j->info->n_ctx);
    if (check_kv_pool(srv, j->info, pgd_runner_caps(j->runner))) {
        pgd_runner_destroy(j->runner);
        pgd_model_info_close(j->info);
        srv->state = PGD_SRV_FAILED;
        free(j);
        begin_shutdown(srv, 1);
        return;
    }
    pgd_worker_config wc;
    pgd_worker_config_default(&wc);
    wc.sched = srv->cfg.sched;
    wc.wake = wake_cb;
    wc.wake_ud = srv;
    if (pgd_worker_create(j->runner, &wc, &srv->worker)) {
        fprintf(stderr, "pagoda serve: cannot start the scheduler: %s\n", pgd_error_detail());
        pgd_runner_destroy(j->runner);
        pgd_model_info_close(j->info);
        srv->state = PGD_SRV_FAILED;
        free(j);
        begin_shutdown(srv, 1);
        return;
    }
    srv->info = j->info;
    pgd_worker_limits(srv->worker, &srv->lim);
    const char *pool_note;
    srv->pooling = pgd_srv_pooling_of(srv->info, srv->pooling, &pool_note);
    if (pool_note) fprintf(stderr, "pagoda serve: /v1/embeddings: %s\n", pool_note);
    pgd_srv_reasoning_resolve(srv);
    const pgd_backend_caps *caps = pgd_worker_caps(srv->worker);
    const pgd_sched_config *sc = pgd_worker_config_of(srv->worker);
    note_clamped(srv, sc);
    if (pgd_pagoda_metrics_register(srv->registry, srv->cfg.metrics_prefix, srv->served_name,
                                    srv->lim.n_ctx, &srv->pm) == 0 &&
        pgd_access_attach_metrics(srv->access, srv->registry, srv->cfg.metrics_prefix,
                                  srv->pm.model_name, srv->lim.n_ctx) == 0)
        srv->metrics_ready = true;
    srv->state = PGD_SRV_READY;
    if (srv->cfg.no_warmup)
        fprintf(stderr, "pagoda serve: no warm-up (--no-warmup)\n");
    else if (!j->warm.runs)
        fprintf(
            stderr,
            "pagoda serve: no warm-up: the step, the context or the KV cache is too small for a "
            "short prompt\n");
    else
        fprintf(stderr, "pagoda serve: warm-up: %u run%s, %u steps, %llu tokens in %.3f s\n",
                j->warm.runs, j->warm.runs == 1 ? "" : "s", j->warm.steps,
                (unsigned long long)j->warm.tokens, j->warm.seconds);
    const char *note = pgd_runner_device_note(j->runner);
    const pgd_model_config *mc = &srv->info->cfg;
    char experts[64] = "";
    if (mc->n_expert)
        snprintf(experts, sizeof experts, ", %u experts, %u per token", mc->n_expert,
                 mc->n_expert_used);
    char weights[48] = "";
    if (caps->weight_bytes)
        snprintf(weights, sizeof weights, ", weights %.2f GiB", mib(caps->weight_bytes) / 1024);
    fprintf(stderr,
            "pagoda serve: model '%s' ready (%u layers%s, context %u, %u KV blocks of %u tokens, "
            "%s); %s backend%s%s%s%s%s%s%s, steps of up to %u tokens and %u sequences\n",
            srv->served_name, mc->n_layer, experts, srv->lim.n_ctx, srv->lim.usable_blocks,
            caps->block_size, pgd_kv_dtype_name(caps->kv_dtype), caps->name,
            caps->device ? " (" : "", caps->device ? caps->device : "", caps->device ? ")" : "",
            weights, note ? " (--device auto: " : "", note ? note : "", note ? ")" : "",
            sc->max_num_batched_tokens, sc->max_num_seqs);
    free(j);
}

static void close_handles(pgd_srv *srv) {
    if (srv->http) {
        pgd_http_server_destroy(srv->http);
        srv->http = NULL;
    }
    uv_close((uv_handle_t *)&srv->sigint, NULL);
    uv_close((uv_handle_t *)&srv->sigterm, NULL);
    uv_close((uv_handle_t *)&srv->sighup, NULL);
    uv_close((uv_handle_t *)&srv->drain_timer, NULL);
    uv_close((uv_handle_t *)&srv->wake, NULL);
}

/* Every 20 ms while draining: done when nothing is in flight; past the deadline, abort. */
static void on_drain_tick(uv_timer_t *t) {
    pgd_srv *srv = t->data;
    pgd_srv_drain_events(srv);
    if (srv->n_inflight == 0) {
        uv_timer_stop(t);
        close_handles(srv);
        return;
    }
    if (!srv->drain_aborted && pgd_now_ns() >= srv->drain_deadline_ns) {
        fprintf(stderr, "pagoda serve: aborting %u in-flight requests\n", srv->n_inflight);
        srv->drain_aborted = true;
        pgd_srv_abort_all(srv);
    }
}

static void begin_shutdown(pgd_srv *srv, int code) {
    if (srv->state == PGD_SRV_DRAINING) { /* second signal: abort now */
        srv->drain_deadline_ns = 0;
        return;
    }
    if (code) srv->exit_code = code;
    srv->state = srv->state == PGD_SRV_FAILED ? PGD_SRV_FAILED : PGD_SRV_DRAINING;
    if (srv->http) pgd_http_server_stop_accepting(srv->http);
    srv->drain_deadline_ns = pgd_now_ns() + srv->cfg.shutdown_timeout_s * 1000000000ull;
    uv_timer_start(&srv->drain_timer, on_drain_tick, 0, 20);
}

static void on_signal(uv_signal_t *s, int signum) {
    pgd_srv *srv = s->data;
    fprintf(stderr, "pagoda serve: %s, shutting down (%u in flight)\n",
            signum == SIGINT ? "SIGINT" : "SIGTERM", srv->n_inflight);
    begin_shutdown(srv, 0);
}

/* SIGHUP: reload the tenants file; a broken one changes nothing. */
static void on_reload(uv_signal_t *s, int signum) {
    (void)signum;
    pgd_srv *srv = s->data;
    if (!pgd_access_has_tenants(srv->access)) {
        fprintf(stderr, "pagoda serve: SIGHUP: no tenants file to reload\n");
        return;
    }
    if (pgd_access_reload(srv->access))
        fprintf(stderr, "pagoda serve: SIGHUP: keeping the current tenants: %s\n",
                pgd_error_detail());
    else
        fprintf(stderr, "pagoda serve: SIGHUP: tenants reloaded from %s\n", srv->cfg.tenants);
}

static void model_name_of(const char *path, char *out, size_t cap) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 5 && !strcmp(base + n - 5, ".gguf")) n -= 5;
    snprintf(out, cap, "%.*s", (int)n, base);
}

/* The access log: one line on stderr per request as it ends (server/http.h's on_done), logfmt —
 * key=value pairs, the path's bytes outside printable ASCII, '%', '"' and '\\' percent-encoded
 * so that a line is always one line of words:
 *   pagoda serve: access ts=2026-11-28T11:31:02.123Z remote=127.0.0.1:40312 method=POST
 *   path=/v1/chat/completions status=200 ms=412 end=completed id=chatcmpl-... prompt_tokens=31
 *   completion_tokens=12 cached_tokens=16 ttft_ms=40 finish=stop
 * status=0: no answer was sent (the client left first); end: completed, client_gone, timeout,
 * shutdown or error; what follows comes from the route (routes.c: access_note). */
static void access_log(const pgd_http_done *d) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[32], path[512];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)d->path; *p && n + 4 < sizeof path; p++) {
        if (*p > ' ' && *p < 0x7f && *p != '%' && *p != '"' && *p != '\\')
            path[n++] = (char)*p;
        else
            n += (size_t)snprintf(path + n, sizeof path - n, "%%%02X", *p);
    }
    path[n] = '\0';
    fprintf(stderr,
            "pagoda serve: access ts=%s.%03ldZ remote=%s method=%s path=%s status=%u ms=%llu "
            "end=%s%s%s\n",
            when, ts.tv_nsec / 1000000, *d->remote ? d->remote : "-", *d->method ? d->method : "-",
            n ? path : "-", d->status, (unsigned long long)d->ms,
            pgd_http_close_reason_name(d->reason), *d->note ? " " : "", d->note);
}

/* Every request as it ends (server/http.h's on_done): counted in http_requests_total by method
 * (the common ones, else "other"), route (pgd_srv_route_label) and status ("none": no answer
 * was sent), then the access log's line unless --no-access-log. */
static void http_done(void *arg, const pgd_http_done *d) {
    pgd_srv *srv = arg;
    static const char *const methods[] = {"GET", "POST",   "HEAD", "OPTIONS",
                                          "PUT", "DELETE", "PATCH"};
    const char *method = "other";
    for (size_t i = 0; i < PGD_ARRAY_LEN(methods); i++)
        if (!strcmp(d->method, methods[i])) method = methods[i];
    char status[16] = "none";
    if (d->status) snprintf(status, sizeof status, "%u", d->status);
    const char *v[] = {srv->served_name, method, pgd_srv_route_label(d->path), status};
    if (srv->http_requests) pgd_metric_add(srv->http_requests, v, 1);
    if (!srv->cfg.no_access_log) access_log(d);
}

/* http_requests_total, before the server listens (the other families wait for the model). */
static int register_http_metrics(pgd_srv *srv) {
    static const char *const labels[] = {"model_name", "method", "route", "status"};
    char name[256];
    if ((size_t)snprintf(name, sizeof name, "%shttp_requests_total", srv->cfg.metrics_prefix) >=
        sizeof name)
        return pgd_error_set(PGD_EINVAL, "metrics: prefix too long");
    return pgd_metrics_add_counter(srv->registry, name,
                                   "HTTP requests as they end, by method, route and status "
                                   "(\"none\": no answer was sent).",
                                   labels, 4, &srv->http_requests);
}

int pgd_serve_run(const pgd_serve_config *cfg_in) {
    static pgd_srv srv_storage;
    pgd_srv *srv = &srv_storage;
    srv->cfg = *cfg_in;
    const pgd_serve_config *cfg = &srv->cfg;
    srv->created = (int64_t)time(NULL);
    srv->state = PGD_SRV_LOADING;
    if (cfg->served_model_name)
        snprintf(srv->served_name, sizeof srv->served_name, "%s", cfg->served_model_name);
    else
        model_name_of(cfg->load.model_path ? cfg->load.model_path : cfg->load.model_preset,
                      srv->served_name, sizeof srv->served_name);
    pgd_pooling pooling = PGD_POOL_NONE;
    if ((cfg->pooling && pgd_pooling_parse(cfg->pooling, &pooling)) ||
        pgd_srv_reasoning_parse(srv, cfg->reasoning_parser) ||
        pgd_access_create(cfg->tenants, cfg->api_key, &srv->access) ||
        pgd_cors_create(cfg->allowed_origins, &srv->cors) ||
        (cfg->responses_store_mb &&
         pgd_resp_store_new((size_t)cfg->responses_store_mb << 20, &srv->responses))) {
        fprintf(stderr, "pagoda serve: %s\n", pgd_error_detail());
        pgd_access_destroy(srv->access);
        return 2;
    }
    srv->pooling = pooling; /* NONE (auto) resolved once the model is loaded */
    srv->loop = uv_default_loop();
    signal(SIGPIPE, SIG_IGN);
    if (pgd_metrics_create(&srv->registry)) {
        fprintf(stderr, "pagoda serve: out of memory\n");
        return 1;
    }
    if (register_http_metrics(srv)) /* a bad prefix: /metrics will say so (metrics_ready) */
        srv->http_requests = NULL;
    uv_async_init(srv->loop, &srv->wake, on_wake);
    srv->wake.data = srv;
    uv_timer_init(srv->loop, &srv->drain_timer);
    srv->drain_timer.data = srv;
    uv_signal_init(srv->loop, &srv->sigint);
    uv_signal_init(srv->loop, &srv->sigterm);
    uv_signal_init(srv->loop, &srv->sighup);
    srv->sigint.data = srv->sigterm.data = srv->sighup.data = srv;
    uv_signal_start(&srv->sigint, on_signal, SIGINT);
    uv_signal_start(&srv->sigterm, on_signal, SIGTERM);
    uv_signal_start(&srv->sighup, on_reload, SIGHUP);

    pgd_http_config hc;
    pgd_http_config_init(&hc);
    hc.host = cfg->host;
    hc.port = (uint16_t)cfg->port;
    hc.max_body_bytes = (size_t)cfg->max_body_mb << 20;
    hc.max_connections = (unsigned)cfg->max_connections;
    hc.idle_timeout_s = (unsigned)cfg->idle_timeout_s;
    hc.request_timeout_ms = (unsigned)(cfg->request_timeout_s * 1000);
    hc.handler = pgd_srv_handle;
    hc.handler_arg = srv;
    hc.error_body = pgd_srv_error_body;
    hc.error_body_arg = srv;
    hc.on_head = pgd_srv_head;
    hc.on_head_arg = srv;
    hc.on_done = http_done;
    hc.on_done_arg = srv;
    if (pgd_http_server_create(srv->loop, &hc, &srv->http)) {
        fprintf(stderr, "pagoda serve: cannot listen on %s:%llu: %s\n", cfg->host,
                (unsigned long long)cfg->port, pgd_error_detail());
        return 1;
    }
    printf("pagoda serve: listening on http://%s:%u (model loading)\n", cfg->host,
           pgd_http_server_port(srv->http));
    fflush(stdout);

    load_job *j = calloc(1, sizeof *j);
    if (!j) {
        fprintf(stderr, "pagoda serve: out of memory\n");
        return 1;
    }
    j->srv = srv;
    j->work.data = j;
    uv_queue_work(srv->loop, &j->work, load_work, load_done);

    uv_run(srv->loop, UV_RUN_DEFAULT);

    if (srv->worker) {
        pgd_worker_shutdown(srv->worker, 0);
        pgd_worker_destroy(srv->worker);
    }
    pgd_model_info_close(srv->info);
    pgd_metrics_destroy(srv->registry);
    pgd_access_destroy(srv->access);
    pgd_cors_destroy(srv->cors);
    pgd_resp_store_free(srv->responses);
    uv_loop_close(srv->loop);
    fprintf(stderr, "pagoda serve: stopped\n");
    return srv->exit_code;
}
