/*
 * cli/serve.c — `pagoda serve`: the server's settings from flags, the environment and a config
 * file, then server/serve.h runs it.
 *
 * Settings come from, in increasing precedence: built-in defaults, a JSON config file
 * (--config FILE or PAGODA_CONFIG; keys are the flag names with '_' for '-'), PAGODA_*
 * environment variables (PAGODA_PORT, PAGODA_API_KEY, ...), and command-line flags. The engine
 * flags are the table every model-running command shares (cli/flags.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "common/error.h"
#include "server/serve.h"
#include "server/tenants.h"

#define O(field) offsetof(pgd_serve_config, field)
static const pgd_opt k_server_opts[] = {
    {"host", PGD_OPT_STR, O(host), "address to listen on (default 127.0.0.1)"},
    {"port", PGD_OPT_U64, O(port), "port (default 8000; 0 = any free port, printed at start)"},
    {"served-model-name", PGD_OPT_STR, O(served_model_name),
     "model name in the API (default: file name)"},
    {"api-key", PGD_OPT_STR, O(api_key), "require 'Authorization: Bearer KEY' on the API routes"},
    {"tenants", PGD_OPT_STR, O(tenants),
     "tenants file: keys (sha256), weights, limits (see configs/tenants.example.json); "
     "SIGHUP reloads it"},
    {"allowed-origins", PGD_OPT_STR, O(allowed_origins),
     "origins of browser pages on other sites that may call the API (CORS), comma-separated, "
     "e.g. http://localhost:3000; * for any (default: none)"},
    {"metrics-prefix", PGD_OPT_STR, O(metrics_prefix), "metric name prefix (default pagoda_)"},
    {"max-body-mb", PGD_OPT_U64, O(max_body_mb), "largest request body in MiB (4; 413 beyond)"},
    {"responses-store-mb", PGD_OPT_U64, O(responses_store_mb),
     "memory in MiB for stored /v1/responses answers, the least recently used dropped first "
     "(64; 0: none kept, no previous_response_id)"},
    {"pooling", PGD_OPT_STR, O(pooling),
     "how /v1/embeddings pool a prompt's final hidden states: last (token), mean, or auto (the "
     "model's pooling_type when it has one, else last; the default)"},
    {"reasoning-parser", PGD_OPT_STR, O(reasoning_parser),
     "chat answers' <think>...</think> into message.reasoning_content: think, none, or auto (on "
     "when the model's vocabulary has <think> and </think> tokens, as Qwen3's and DeepSeek-R1's "
     "do; the default)"},
    {"max-connections", PGD_OPT_U64, O(max_connections), "concurrent connections (1024)"},
    {"idle-timeout", PGD_OPT_U64, O(idle_timeout_s), "seconds an idle connection is kept (30)"},
    {"request-timeout", PGD_OPT_U64, O(request_timeout_s),
     "seconds to receive a whole request (60)"},
    {"shutdown-timeout", PGD_OPT_U64, O(shutdown_timeout_s),
     "seconds in-flight requests may finish after SIGTERM (30)"},
    {"no-access-log", PGD_OPT_BOOL, O(no_access_log),
     "no line on stderr per request (its time, client, route, status, duration, tokens)"},
    {"no-warmup", PGD_OPT_BOOL, O(no_warmup),
     "ready without running a few short sequences first (the first request then pays each "
     "kernel's first use)"},
};
#undef O

static void usage(FILE *f, pgd_opt_table *tables) {
    fprintf(f,
            "usage: pagoda serve --model PATH [options]\n"
            "Serve the OpenAI-compatible API (chat, completions, models, metrics, web page).\n\n");
    pgd_opt_usage_line(f, "--config FILE",
                       "JSON file with the same settings (keys: flag names with '_' for '-'); "
                       "PAGODA_<NAME> environment variables override it, flags override both");
    pgd_opt_usage(f, &tables[0]);
    fprintf(f, "\nengine flags:\n");
    pgd_engine_flags_usage(f);
}

/* Strings from the config file live as long as the json tree (kept until exit). */
static int load_config_file(pgd_opt_table *tables, const char *path, json_t **keep) {
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
        const pgd_opt_table *t;
        const pgd_opt *d = pgd_opt_find(tables, 2, key, strlen(key), &t);
        if (!d) {
            fprintf(stderr, "pagoda serve: config %s: unknown setting '%s'\n", path, key);
            return -1;
        }
        char buf[32];
        const char *s = NULL;
        if (d->type == PGD_OPT_STR) {
            if (!json_is_string(v)) {
                fprintf(stderr, "pagoda serve: config %s: '%s' must be a string\n", path, key);
                return -1;
            }
            s = json_string_value(v);
        } else if (json_is_string(v)) {
            s = json_string_value(v);
        } else if (json_is_integer(v) && json_integer_value(v) >= 0) {
            snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
            s = buf;
        } else if (json_is_boolean(v)) {
            s = json_is_true(v) ? "true" : "false";
        }
        if (!s) {
            fprintf(stderr, "pagoda serve: config %s: '%s' has the wrong type\n", path, key);
            return -1;
        }
        if (pgd_opt_set(t, d, s, "serve", path)) return -1;
    }
    return 0;
}

/* Flags, environment and config file into cfg. 0 = go on, else the exit status. */
static int parse(int argc, char **argv, pgd_serve_config *cfg, json_t **config_json) {
    pgd_engine_flags ef = {0};
    pgd_opt_table tables[2] = {{k_server_opts, PGD_ARRAY_LEN(k_server_opts), cfg, NULL},
                               pgd_engine_flags_table(&ef)};
    /* The config file first (flag or env), then env, then flags. */
    const char *config_path = getenv("PAGODA_CONFIG");
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r = pgd_cli_flag_value(argc, argv, &i, "--config", &v);
        if (r < 0) return 2;
        if (r) config_path = v;
    }
    if ((config_path && load_config_file(tables, config_path, config_json)) ||
        pgd_opt_load_env(tables, 2, "serve"))
        return 2;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (pgd_cli_flag_value(argc, argv, &i, "--config", &v) > 0) continue;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout, tables);
            return -1;
        }
        int r = pgd_opt_parse_arg(tables, 2, argc, argv, &i, "serve");
        if (r < 0) return 2;
        if (r == 0) {
            fprintf(stderr, "pagoda serve: unknown argument '%s'\n", argv[i]);
            usage(stderr, tables);
            return 2;
        }
    }
    if (!ef.model_path && !ef.model_preset) {
        fprintf(stderr, "pagoda serve: --model PATH is required (or PAGODA_MODEL, or \"model\" in "
                        "the config file; or --model-preset NAME for dummy weights)\n");
        return 2;
    }
    if (cfg->port > 65535) {
        fprintf(stderr, "pagoda serve: port %llu is out of range\n", (unsigned long long)cfg->port);
        return 2;
    }
    if (pgd_engine_flags_resolve(&ef, "serve", &cfg->load, &cfg->sched)) return 2;
    return 0;
}

int pgd_cli_serve(int argc, char **argv) {
    pgd_serve_config cfg;
    pgd_serve_config_default(&cfg);
    json_t *config_json = NULL;
    int st = parse(argc, argv, &cfg, &config_json);
    if (st == 0) st = pgd_serve_run(&cfg);
    json_decref(config_json);
    return st < 0 ? 0 : st;
}

/* `pagoda hash-key`: the sha256 of a key read from stdin (one trailing newline dropped), as the
 * tenants file wants it. The key never appears in argv (ps, shell history). */
int pgd_cli_hash_key(int argc, char **argv) {
    if (argc > 1) {
        FILE *f = strcmp(argv[1], "--help") && strcmp(argv[1], "-h") ? stderr : stdout;
        fprintf(f, "usage: echo -n KEY | pagoda hash-key\n"
                   "Print the sha256 of the API key on stdin (a trailing newline is dropped), "
                   "for keys_sha256\nand admin_keys_sha256 in the tenants file.\n");
        return f == stdout ? 0 : 2;
    }
    char key[4096];
    size_t n = fread(key, 1, sizeof key, stdin);
    if (n == sizeof key || ferror(stdin)) {
        fprintf(stderr, "pagoda hash-key: %s\n",
                n == sizeof key ? "the key is too long" : "cannot read stdin");
        return 1;
    }
    if (n && key[n - 1] == '\n') n--;
    if (n && key[n - 1] == '\r') n--;
    if (!n) {
        fprintf(stderr, "pagoda hash-key: no key on stdin\n");
        return 2;
    }
    char hex[65];
    if (pgd_key_sha256_hex(key, n, hex)) {
        fprintf(stderr, "pagoda hash-key: %s\n", pgd_error_detail());
        return 1;
    }
    printf("%s\n", hex);
    return 0;
}
