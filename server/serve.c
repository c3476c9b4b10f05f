/*
 * server/serve.c — `pagoda serve`: configuration, start-up, signals and graceful shutdown.
 *
 * Settings come from, in increasing precedence: built-in defaults, a JSON config file
 * (--config FILE or PAGODA_CONFIG; keys are the flag names with '_' for '-'), PAGODA_* environment
 * variables (PAGODA_PORT, PAGODA_API_KEY, ...), and command-line flags.
 *
 * Start-up: the HTTP server listens at once (GET /health answers 503 "loading"), the model loads
 * on libuv's threadpool, then the engine (scheduler thread) starts and /health turns 200.
 * SIGINT/SIGTERM: stop accepting, let in-flight requests finish for up to --shutdown-timeout
 * seconds, abort the rest (streams get an SSE error event and [DONE]), exit 0. A second signal
 * aborts at once.
 *
 * Threading: main thread = the libuv loop thread; the model loads on the threadpool; the engine
 * wakes the loop with uv_async_send from the scheduler thread.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "common/error.h"
#include "server/cli.h"
#include "server/server.h"

typedef enum { OPT_STR, OPT_U64, OPT_BOOL } opt_type;

typedef struct {
    const char *name; /* flag name without "--" */
    opt_type type;
    size_t off;
    const char *help;
} opt_def;

#define O(field) offsetof(pgd_serve_config, field)
static const opt_def k_opts[] = {
    {"model", OPT_STR, O(model_path), "GGUF model file (required)"},
    {"host", OPT_STR, O(host), "address to listen on (default 127.0.0.1)"},
    {"port", OPT_U64, O(port), "port (default 8000; 0 = any free port, printed at start)"},
    {"served-model-name", OPT_STR, O(served_model_name),
     "model name in the API (default: file name)"},
    {"api-key", OPT_STR, O(api_key), "require 'Authorization: Bearer KEY' on the API routes"},
    {"metrics-prefix", OPT_STR, O(metrics_prefix), "metric name prefix (default pagoda_)"},
    {"max-num-batched-tokens", OPT_U64, O(max_num_batched_tokens), "tokens per step (512 CPU)"},
    {"max-num-seqs", OPT_U64, O(max_num_seqs), "sequences per step (64 CPU)"},
    {"max-waiting", OPT_U64, O(max_waiting), "waiting requests before 429 (1024)"},
    {"kv-cache-mb", OPT_U64, O(kv_cache_mb), "KV cache memory in MiB (1024)"},
    {"block-size", OPT_U64, O(block_size), "tokens per KV block (16)"},
    {"ctx-size", OPT_U64, O(ctx_size), "context limit (default: the model's)"},
    {"threads", OPT_U64, O(threads), "compute threads (default: one per core)"},
    {"f32", OPT_BOOL, O(f32), "dequantize every weight to f32"},
    {"int8-activations", OPT_BOOL, O(act_q8),
     "int8 activation blocks in the matmuls (faster, "
     "less exact)"},
    {"kv-cache-dtype", OPT_STR, O(kv_cache_dtype),
     "KV cache elements: auto (f16; f32 with --f32), f16 or f32"},
    {"no-prefix-caching", OPT_BOOL, O(no_prefix_caching), "disable the prefix cache"},
    {"chat-template", OPT_STR, O(chat_template), "override the model's chat template family"},
    {"max-body-mb", OPT_U64, O(max_body_mb), "largest request body in MiB (4; 413 beyond)"},
    {"max-connections", OPT_U64, O(max_connections), "concurrent connections (1024)"},
    {"idle-timeout", OPT_U64, O(idle_timeout_s), "seconds an idle connection is kept (30)"},
    {"request-timeout", OPT_U64, O(request_timeout_s), "seconds to receive a whole request (60)"},
    {"shutdown-timeout", OPT_U64, O(shutdown_timeout_s),
     "seconds in-flight requests may finish "
     "after SIGTERM (30)"},
};
#undef O

static void usage(FILE *f) {
    fprintf(f, "usage: pagoda serve --model PATH [options]\n"
               "Serve the OpenAI-compatible API (chat, completions, models, metrics, web page).\n\n"
               "  --config FILE            JSON file with the same settings (keys: flag names\n"
               "                           with '_' for '-'); PAGODA_<NAME> environment variables\n"
               "                           override it, flags override both\n");
    for (size_t i = 0; i < PGD_ARRAY_LEN(k_opts); i++) {
        char left[64];
        snprintf(left, sizeof left, "--%s%s", k_opts[i].name,
                 k_opts[i].type == OPT_BOOL  ? ""
                 : k_opts[i].type == OPT_U64 ? " N"
                                             : " VALUE");
        fprintf(f, "  %-24s %s\n", left, k_opts[i].help);
    }
}

/* Set option `d` from a string. 0 or -1 (printed, `src` says where it came from). */
static int set_opt(pgd_serve_config *c, const opt_def *d, const char *v, const char *src) {
    char *p = (char *)c + d->off;
    switch (d->type) {
    case OPT_STR:
        *(const char **)p = v;
        return 0;
    case OPT_BOOL:
        if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes"))
            *(bool *)p = true;
        else if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "no"))
            *(bool *)p = false;
        else {
            fprintf(stderr, "pagoda serve: %s: %s wants true or false, got '%s'\n", src, d->name,
                    v);
            return -1;
        }
        return 0;
    case OPT_U64: {
        char *end;
        errno = 0;
        unsigned long long x = strtoull(v, &end, 10);
        if (errno || end == v || *end || v[0] == '-') {
            fprintf(stderr, "pagoda serve: %s: %s wants a non-negative integer, got '%s'\n", src,
                    d->name, v);
            return -1;
        }
        *(uint64_t *)p = x;
        return 0;
    }
    }
    return -1;
}

static const opt_def *find_opt(const char *name, size_t len) {
    for (size_t i = 0; i < PGD_ARRAY_LEN(k_opts); i++) {
        const char *o = k_opts[i].name;
        if (strlen(o) != len) continue;
        size_t j = 0;
        while (j < len && (o[j] == name[j] || (o[j] == '-' && name[j] == '_'))) j++;
        if (j == len) return &k_opts[i];
    }
    return NULL;
}

/* Strings from the config file live as long as the json tree (kept until exit). */
static int load_config_file(pgd_serve_config *c, const char *path, json_t **keep) {
    json_error_t err;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        fprintf(stderr, "pagoda serve: config %s: line %d: %s\n", path, err.line, err.text);
        return -1;
    }
    if (!json_is_object(root)) {
        fprintf(stderr, "pagoda serve: config %s: must be a JSON object\n", path);
        json_decref(root);
        return -1;
    }
    *keep = root;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        const opt_def *d = find_opt(key, strlen(key));
        if (!d) {
            fprintf(stderr, "pagoda serve: config %s: unknown setting '%s'\n", path, key);
            return -1;
        }
        char buf[32];
        const char *s = NULL;
        if (json_is_string(v))
            s = json_string_value(v);
        else if (json_is_integer(v) && json_integer_value(v) >= 0) {
            snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
            s = buf;
        } else if (json_is_boolean(v))
            s = json_is_true(v) ? "true" : "false";
        if (!s) {
            fprintf(stderr, "pagoda serve: config %s: '%s' has the wrong type\n", path, key);
            return -1;
        }
        if (d->type == OPT_STR) s = json_string_value(v) ? json_string_value(v) : s;
        if (d->type == OPT_STR && !json_is_string(v)) {
            fprintf(stderr, "pagoda serve: config %s: '%s' must be a string\n", path, key);
            return -1;
        }
        if (set_opt(c, d, s, path)) return -1;
    }
    return 0;
}

static int load_env(pgd_serve_config *c) {
    for (size_t i = 0; i < PGD_ARRAY_LEN(k_opts); i++) {
        char name[64] = "PAGODA_";
        size_t n = strlen(name);
        for (const char *p = k_opts[i].name; *p && n < sizeof name - 1; p++)
            name[n++] = *p == '-' ? '_' : (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
        name[n] = '\0';
        const char *v = getenv(name);
        if (v && *v && set_opt(c, &k_opts[i], v, name)) return -1;
    }
    return 0;
}

static void config_defaults(pgd_serve_config *c) {
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8000;
    c->shutdown_timeout_s = 30;
    c->max_body_mb = 4;
    c->max_connections = 1024;
    c->idle_timeout_s = 30;
    c->request_timeout_s = 60;
    c->kv_cache_mb = 1024;
    c->block_size = 16;
    c->metrics_prefix = "pagoda_";
}

/* ---- loading and lifecycle ---------------------------------------------------------------- */

typedef struct {
    uv_work_t work;
    pgd_srv *srv;
    pgd_llm_options o;
    pgd_llm *llm;
    int rc;
    char err[512];
} load_job;

static void wake_cb(void *ud) {
    uv_async_send(&((pgd_srv *)ud)->wake);
}
static void on_wake(uv_async_t *a) {
    pgd_srv_drain_events(a->data);
}

static void load_work(uv_work_t *w) {
    load_job *j = w->data;
    j->rc = pgd_llm_open(&j->o, &j->llm);
    if (j->rc) snprintf(j->err, sizeof j->err, "%s", pgd_error_detail());
}

static void begin_shutdown(pgd_srv *srv, int code);

static void load_done(uv_work_t *w, int status) {
    load_job *j = w->data;
    pgd_srv *srv = j->srv;
    if (status || j->rc) {
        fprintf(stderr, "pagoda serve: cannot load %s: %s\n", j->o.model_path,
                j->err[0] ? j->err : "canceled");
        srv->state = PGD_SRV_FAILED;
        free(j);
        begin_shutdown(srv, 1);
        return;
    }
    if (srv->state == PGD_SRV_DRAINING) { /* a signal came while loading */
        pgd_llm_close(j->llm);
        free(j);
        return;
    }
    pgd_engine_config ec;
    pgd_engine_config_default(&ec);
    ec.sched.max_num_batched_tokens = (uint32_t)srv->cfg.max_num_batched_tokens;
    ec.sched.max_num_seqs = (uint32_t)srv->cfg.max_num_seqs;
    ec.sched.max_waiting = (uint32_t)srv->cfg.max_waiting;
    ec.wake = wake_cb;
    ec.wake_ud = srv;
    srv->llm = j->llm;
    if (pgd_engine_create(j->llm, &ec, &srv->engine)) {
        fprintf(stderr, "pagoda serve: cannot start the engine: %s\n", pgd_error_detail());
        srv->llm = NULL;
        srv->state = PGD_SRV_FAILED;
        free(j);
        begin_shutdown(srv, 1);
        return;
    }
    if (pgd_pagoda_metrics_register(srv->registry, srv->cfg.metrics_prefix, srv->served_name,
                                    srv->llm->n_ctx, &srv->pm) == 0)
        srv->metrics_ready = true;
    srv->state = PGD_SRV_READY;
    fprintf(stderr,
            "pagoda serve: model '%s' ready (%u layers, context %u, %u KV blocks of %u tokens, "
            "%s)\n",
            srv->served_name, srv->llm->model->cfg.n_layer, srv->llm->n_ctx,
            pgd_kvpool_num_blocks(srv->llm->pool), srv->llm->opt.block_size,
            pgd_kv_dtype_name(srv->llm->backend->cfg.kv_dtype));
    free(j);
}

static void close_handles(pgd_srv *srv) {
    if (srv->http) {
        pgd_http_server_destroy(srv->http);
        srv->http = NULL;
    }
    uv_close((uv_handle_t *)&srv->sigint, NULL);
    uv_close((uv_handle_t *)&srv->sigterm, NULL);
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
    if (!srv->drain_aborted && pgd_srv_now_ns() >= srv->drain_deadline_ns) {
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
    srv->drain_deadline_ns = pgd_srv_now_ns() + srv->cfg.shutdown_timeout_s * 1000000000ull;
    uv_timer_start(&srv->drain_timer, on_drain_tick, 0, 20);
}

static void on_signal(uv_signal_t *s, int signum) {
    pgd_srv *srv = s->data;
    fprintf(stderr, "pagoda serve: %s, shutting down (%u in flight)\n",
            signum == SIGINT ? "SIGINT" : "SIGTERM", srv->n_inflight);
    begin_shutdown(srv, 0);
}

static void model_name_of(const char *path, char *out, size_t cap) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 5 && !strcmp(base + n - 5, ".gguf")) n -= 5;
    snprintf(out, cap, "%.*s", (int)n, base);
}

int pgd_cli_serve(int argc, char **argv) {
    pgd_serve_config cfg;
    config_defaults(&cfg);
    json_t *config_json = NULL;
    /* The config file first (flag or env), then env, then flags. */
    const char *config_path = getenv("PAGODA_CONFIG");
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r = pgd_cli_flag_value(argc, argv, &i, "--config", &v);
        if (r < 0) return 2;
        if (r) config_path = v;
    }
    if ((config_path && load_config_file(&cfg, config_path, &config_json)) || load_env(&cfg)) {
        json_decref(config_json);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (pgd_cli_flag_value(argc, argv, &i, "--config", &v) > 0) continue;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            json_decref(config_json);
            return 0;
        }
        const opt_def *d = NULL;
        const char *eq = strchr(a, '=');
        if (!strncmp(a, "--", 2)) d = find_opt(a + 2, eq ? (size_t)(eq - a - 2) : strlen(a + 2));
        if (!d) {
            fprintf(stderr, "pagoda serve: unknown argument '%s'\n", a);
            usage(stderr);
            json_decref(config_json);
            return 2;
        }
        if (d->type == OPT_BOOL && !eq) {
            *(bool *)((char *)&cfg + d->off) = true;
            continue;
        }
        char flag[64];
        snprintf(flag, sizeof flag, "--%s", d->name);
        int r = pgd_cli_flag_value(argc, argv, &i, flag, &v);
        if (r <= 0 || set_opt(&cfg, d, v, "command line")) {
            json_decref(config_json);
            return 2;
        }
    }
    if (!cfg.model_path) {
        fprintf(stderr, "pagoda serve: --model PATH is required (or PAGODA_MODEL, or \"model\" in "
                        "the config file)\n");
        json_decref(config_json);
        return 2;
    }
    if (cfg.port > 65535) {
        fprintf(stderr, "pagoda serve: port %llu is out of range\n", (unsigned long long)cfg.port);
        json_decref(config_json);
        return 2;
    }
    pgd_kv_dtype kv_dtype = PGD_KV_AUTO;
    if (cfg.kv_cache_dtype && pgd_kv_dtype_parse(cfg.kv_cache_dtype, &kv_dtype)) {
        fprintf(stderr, "pagoda serve: --kv-cache-dtype: %s\n", pgd_error_detail());
        json_decref(config_json);
        return 2;
    }

    static pgd_srv srv_storage;
    pgd_srv *srv = &srv_storage;
    srv->cfg = cfg;
    srv->created = (int64_t)time(NULL);
    srv->state = PGD_SRV_LOADING;
    if (cfg.served_model_name)
        snprintf(srv->served_name, sizeof srv->served_name, "%s", cfg.served_model_name);
    else
        model_name_of(cfg.model_path, srv->served_name, sizeof srv->served_name);
    srv->loop = uv_default_loop();
    signal(SIGPIPE, SIG_IGN);
    if (pgd_metrics_create(&srv->registry)) {
        fprintf(stderr, "pagoda serve: out of memory\n");
        return 1;
    }
    uv_async_init(srv->loop, &srv->wake, on_wake);
    srv->wake.data = srv;
    uv_timer_init(srv->loop, &srv->drain_timer);
    srv->drain_timer.data = srv;
    uv_signal_init(srv->loop, &srv->sigint);
    uv_signal_init(srv->loop, &srv->sigterm);
    srv->sigint.data = srv->sigterm.data = srv;
    uv_signal_start(&srv->sigint, on_signal, SIGINT);
    uv_signal_start(&srv->sigterm, on_signal, SIGTERM);

    pgd_http_config hc;
    pgd_http_config_init(&hc);
    hc.host = cfg.host;
    hc.port = (uint16_t)cfg.port;
    hc.max_body_bytes = (size_t)cfg.max_body_mb << 20;
    hc.max_connections = (unsigned)cfg.max_connections;
    hc.idle_timeout_s = (unsigned)cfg.idle_timeout_s;
    hc.request_timeout_ms = (unsigned)(cfg.request_timeout_s * 1000);
    hc.handler = pgd_srv_handle;
    hc.handler_arg = srv;
    hc.error_body = pgd_srv_error_body;
    hc.error_body_arg = srv;
    if (pgd_http_server_create(srv->loop, &hc, &srv->http)) {
        fprintf(stderr, "pagoda serve: cannot listen on %s:%llu: %s\n", cfg.host,
                (unsigned long long)cfg.port, pgd_error_detail());
        return 1;
    }
    printf("pagoda serve: listening on http://%s:%u (model loading)\n", cfg.host,
           pgd_http_server_port(srv->http));
    fflush(stdout);

    load_job *j = calloc(1, sizeof *j);
    pgd_llm_options_default(&j->o);
    j->srv = srv;
    j->o.model_path = cfg.model_path;
    j->o.model_flags = cfg.f32 ? PGD_MODEL_F32 : 0;
    j->o.chat_template = cfg.chat_template;
    j->o.kv_cache_bytes = cfg.kv_cache_mb << 20;
    j->o.block_size = (uint32_t)cfg.block_size;
    j->o.max_ctx = (uint32_t)cfg.ctx_size;
    j->o.n_threads = (uint32_t)cfg.threads;
    j->o.prefix_caching = !cfg.no_prefix_caching;
    j->o.act_q8 = cfg.act_q8;
    j->o.kv_dtype = kv_dtype;
    j->o.max_batch_tokens = cfg.max_num_batched_tokens ? (uint32_t)cfg.max_num_batched_tokens : 512;
    j->work.data = j;
    uv_queue_work(srv->loop, &j->work, load_work, load_done);

    uv_run(srv->loop, UV_RUN_DEFAULT);

    if (srv->engine) {
        pgd_engine_shutdown(srv->engine, 0);
        pgd_engine_destroy(srv->engine);
    }
    pgd_metrics_destroy(srv->registry);
    uv_loop_close(srv->loop);
    json_decref(config_json);
    fprintf(stderr, "pagoda serve: stopped\n");
    return srv->exit_code;
}
