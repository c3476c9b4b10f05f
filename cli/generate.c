/*
 * cli/generate.c — `pagoda generate`: one prompt or chat, streamed to stdout as it is produced.
 * The request goes through the scheduler (scheduler/sched.h) on the calling thread, step by
 * step: the same checks, planning, allocation and step as the server's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef PGD_HAVE_JANSSON
#include <jansson.h>

#include "api/messages.h"
#endif

#include "cli/cli.h"
#include "cli/flags.h"
#include "common/clock.h"
#include "common/error.h"
#include "engine/load.h"
#include "scheduler/sched.h"

#define MAX_STOPS 16

static void generate_usage(FILE *f) {
    fprintf(f,
            "usage: pagoda generate --model PATH (--prompt TEXT | --chat MESSAGES_JSON) [options]\n"
            "Generate a continuation, streaming text to stdout as it is produced.\n\n"
            "  --prompt TEXT           plain prompt (control tokens only with --special)\n"
            "  --chat JSON             OpenAI messages array, rendered with the chat template\n"
            "  --max-tokens N          output tokens (default 256)\n"
            "  --temperature T         0 = greedy (default 1)\n"
            "  --top-p P  --top-k K  --min-p P\n"
            "  --repetition-penalty R  --presence-penalty P  --frequency-penalty F\n"
            "  --seed S                sampling seed (default: random)\n"
            "  --stop TEXT             stop string (repeatable, up to 16)\n"
            "  --ignore-eos            keep going past end-of-sequence tokens\n"
            "  --special               recognise control tokens in --prompt\n"
            "  --json                  print {text, token_ids, finish_reason, usage, "
            "timings}\n\nengine flags:\n");
    pgd_engine_flags_usage(f);
}

typedef struct {
    const char *prompt, *chat;
    bool special, json, max_tokens_given;
    pgd_seq_params sp;
    pgd_str stops[MAX_STOPS];
} gen_args;

static int parse_gen_args(int argc, char **argv, pgd_engine_flags *ef, gen_args *a) {
    pgd_opt_table engine = pgd_engine_flags_table(ef);
    pgd_seq_params_default(&a->sp);
    a->sp.max_tokens = 256;
    a->sp.sampling.seed = pgd_sampler_random_seed();
    a->sp.stop = a->stops;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r;
        uint64_t u;
        if ((r = pgd_opt_parse_arg(&engine, 1, argc, argv, &i, "generate"))) {
            if (r < 0) return 2;
            continue;
        }
        if ((r = pgd_cli_flag_value(argc, argv, &i, "--prompt", &a->prompt)) ||
            (r = pgd_cli_flag_value(argc, argv, &i, "--chat", &a->chat))) {
            if (r < 0) return 2;
            continue;
        }
        if ((r = pgd_cli_flag_value(argc, argv, &i, "--stop", &v))) {
            if (r < 0) return 2;
            if (a->sp.n_stop == MAX_STOPS) {
                fprintf(stderr, "pagoda generate: at most %d --stop strings\n", MAX_STOPS);
                return 2;
            }
            a->stops[a->sp.n_stop].ptr = v;
            a->stops[a->sp.n_stop++].len = strlen(v);
            continue;
        }
        struct {
            const char *name;
            float *f;
        } fl[] = {{"--temperature", &a->sp.sampling.temperature},
                  {"--top-p", &a->sp.sampling.top_p},
                  {"--min-p", &a->sp.sampling.min_p},
                  {"--repetition-penalty", &a->sp.sampling.repetition_penalty},
                  {"--presence-penalty", &a->sp.sampling.presence_penalty},
                  {"--frequency-penalty", &a->sp.sampling.frequency_penalty}};
        bool done = false;
        for (size_t f = 0; f < PGD_ARRAY_LEN(fl) && !done; f++) {
            if (!(r = pgd_cli_flag_value(argc, argv, &i, fl[f].name, &v))) continue;
            if (r < 0 || pgd_cli_parse_f32("generate", fl[f].name, v, fl[f].f)) return 2;
            done = true;
        }
        if (done) continue;
        if ((r = pgd_cli_flag_value(argc, argv, &i, "--top-k", &v))) {
            if (r < 0 || pgd_cli_parse_u64("generate", "--top-k", v, &u) || u > INT32_MAX) return 2;
            a->sp.sampling.top_k = (int32_t)u;
        } else if ((r = pgd_cli_flag_value(argc, argv, &i, "--max-tokens", &v))) {
            if (r < 0 || pgd_cli_parse_u64("generate", "--max-tokens", v, &u) || u > INT32_MAX)
                return 2;
            a->sp.max_tokens = (int64_t)u;
            a->max_tokens_given = true;
        } else if ((r = pgd_cli_flag_value(argc, argv, &i, "--seed", &v))) {
            if (r < 0 || pgd_cli_parse_u64("generate", "--seed", v, &u)) return 2;
            a->sp.sampling.seed = u;
        } else if (!strcmp(argv[i], "--ignore-eos")) {
            a->sp.ignore_eos = true;
        } else if (!strcmp(argv[i], "--special")) {
            a->special = true;
        } else if (!strcmp(argv[i], "--json")) {
            a->json = true;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            generate_usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "pagoda generate: unknown argument '%s'\n", argv[i]);
            generate_usage(stderr);
            return 2;
        }
    }
    if (!a->prompt == !a->chat) {
        fprintf(stderr, "pagoda generate: give exactly one of --prompt and --chat\n");
        generate_usage(stderr);
        return 2;
    }
    return -1; /* go on */
}

/* Encode the prompt of `a` into out. 0 or 1 (printed). */
static int encode_prompt(const pgd_model_info *info, const gen_args *a, pgd_tokens *out) {
    int rc;
    if (a->prompt) {
        rc = pgd_encode_text(info, a->prompt, strlen(a->prompt), a->special, out);
    } else {
#ifdef PGD_HAVE_JANSSON
        json_error_t jerr;
        json_t *root = json_loads(a->chat, JSON_REJECT_DUPLICATES, &jerr);
        if (!root) {
            fprintf(stderr, "pagoda generate: --chat is not valid JSON: %s (line %d)\n", jerr.text,
                    jerr.line);
            return 1;
        }
        pgd_messages msgs;
        char param[96];
        rc = pgd_messages_parse(root, &msgs, param, sizeof param);
        if (!rc) rc = pgd_encode_chat(info, msgs.msgs, msgs.n, true, out);
        pgd_messages_free(&msgs);
        json_decref(root);
#else
        fprintf(stderr, "pagoda generate: built without JSON support (jansson); use --prompt\n");
        return 1;
#endif
    }
    if (rc) {
        fprintf(stderr, "pagoda generate: %s\n", pgd_error_detail());
        return 1;
    }
    return 0;
}

/* What the scheduler's events said about the one request. */
typedef struct gen_run {
    bool json;
    pgd_buf text;
    pgd_tokens out;
    double t_first;
    const char *finish;
    pgd_usage usage;
    int error;
    char message[512];
} gen_run;

static void on_event(const pgd_event *ev, void *ud) {
    gen_run *g = ud;
    switch (ev->kind) {
    case PGD_EVENT_TOKEN:
        if (!g->t_first) g->t_first = pgd_now_s();
        pgd_tokens_push(&g->out, ev->token);
        if (ev->text_len) {
            if (!g->json) {
                fwrite(ev->text, 1, ev->text_len, stdout);
                fflush(stdout);
            }
            pgd_buf_append(&g->text, ev->text, ev->text_len);
        }
        break;
    case PGD_EVENT_FINISH:
        g->finish = pgd_finish_reason_str(ev->reason);
        break;
    case PGD_EVENT_ERROR:
        g->error = ev->error;
        snprintf(g->message, sizeof g->message, "%s", ev->message);
        break;
    case PGD_EVENT_PROMPT_LOGPROBS: /* not asked for */
        break;
    }
    if (ev->done) g->usage = ev->usage;
}

static void print_json_result(const gen_run *g, const pgd_tokens *prompt, double t0, double t_end) {
    uint32_t n_out = (uint32_t)g->out.n, n_prompt = (uint32_t)prompt->n;
    printf("{\"text\":");
#ifdef PGD_HAVE_JANSSON
    json_t *js = json_stringn(g->text.data ? g->text.data : "", g->text.len);
    char *enc = js ? json_dumps(js, JSON_ENCODE_ANY | JSON_ENSURE_ASCII) : NULL;
    printf("%s", enc ? enc : "null");
    free(enc);
    json_decref(js);
#else
    printf("null");
#endif
    printf(",\"token_ids\":[");
    for (uint32_t i = 0; i < n_out; i++) printf("%s%d", i ? "," : "", g->out.ids[i]);
    double t_first = g->t_first ? g->t_first : t_end;
    double prefill = t_first - t0, decode = t_end - t_first;
    printf("],\"prompt_token_ids\":[");
    for (uint32_t i = 0; i < n_prompt; i++) printf("%s%d", i ? "," : "", prompt->ids[i]);
    printf("],\"finish_reason\":\"%s\",\"usage\":{\"prompt_tokens\":%u,\"completion_tokens\":%u,"
           "\"total_tokens\":%u,\"cached_tokens\":%u},",
           g->finish ? g->finish : "", n_prompt, n_out, n_prompt + n_out, g->usage.cached_tokens);
    printf("\"timings\":{\"prompt_ms\":%.3f,\"prompt_tokens_per_s\":%.2f,\"decode_ms\":%.3f,"
           "\"decode_tokens_per_s\":%.2f,\"total_ms\":%.3f}}\n",
           prefill * 1e3, prefill > 0 ? n_prompt / prefill : 0.0, decode * 1e3,
           decode > 0 && n_out > 1 ? (n_out - 1) / decode : 0.0, (t_end - t0) * 1e3);
}

int pgd_cli_generate(int argc, char **argv) {
    pgd_engine_flags ef = {0};
    gen_args a;
    memset(&a, 0, sizeof a);
    int st = parse_gen_args(argc, argv, &ef, &a);
    if (st >= 0) return st;
    pgd_load_options lo;
    pgd_sched_config sc;
    if (pgd_engine_flags_resolve(&ef, "generate", &lo, &sc)) return 2;
    pgd_model_info *info = NULL;
    pgd_runner *runner = NULL;
    if (pgd_cli_load("generate", &lo, &info, &runner)) return 1;
    pgd_tokens prompt = PGD_TOKENS_INIT;
    pgd_sched *S = NULL;
    gen_run g = {.json = a.json};
    int status = 1, rc;
    if (encode_prompt(info, &a, &prompt)) goto out;
    if ((rc = pgd_sched_create(runner, &sc, on_event, &g, &S))) {
        fprintf(stderr, "pagoda generate: %s\n", pgd_error_detail());
        goto out;
    }
    /* Without --max-tokens, the default stops at the context's end instead of being refused. */
    if (!a.max_tokens_given && prompt.n < info->n_ctx &&
        (uint64_t)prompt.n + (uint64_t)a.sp.max_tokens > info->n_ctx)
        a.sp.max_tokens = (int64_t)(info->n_ctx - prompt.n);
    pgd_request r;
    pgd_request_init(&r);
    r.prompt = prompt.ids;
    r.n_prompt = (uint32_t)prompt.n;
    r.params = a.sp;
    double t0 = pgd_now_s();
    if ((rc = pgd_sched_submit(S, 1, &r))) {
        const char *param = pgd_error_param();
        fprintf(stderr, "pagoda generate: %s%s%s\n", param ? param : "", param ? ": " : "",
                pgd_error_detail());
        goto out;
    }
    while (pgd_sched_has_work(S))
        if (pgd_sched_step(S, NULL)) break; /* the request got an ERROR event */
    double t_end = pgd_now_s();
    if (g.error) {
        fprintf(stderr, "\npagoda generate: %s\n", g.message);
        goto out;
    }
    if (a.json)
        print_json_result(&g, &prompt, t0, t_end);
    else
        putchar('\n');
    status = 0;
out:
    pgd_sched_destroy(S);
    pgd_buf_free(&g.text);
    pgd_tokens_free(&g.out);
    pgd_tokens_free(&prompt);
    pgd_runner_destroy(runner);
    pgd_model_info_close(info);
    return status;
}
