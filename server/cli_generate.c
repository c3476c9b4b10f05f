/*
 * server/cli_generate.c — `pagoda generate` (one prompt, streamed) and `pagoda eval` (logits of
 * every prompt position, for the reference tests). Both run the engine on the calling thread
 * through pgd_llm_step, the same step the scheduler uses.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef PGD_HAVE_JANSSON
#include <jansson.h>

#include "api/messages.h"
#endif

#include "common/error.h"
#include "engine/llm.h"
#include "server/cli.h"
#include "server/cli_run.h"

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
            "timings}\n\n" PGD_CLI_RUN_FLAGS_HELP);
}

typedef struct {
    const char *prompt, *chat;
    bool special, json;
    pgd_seq_params sp;
    pgd_str stops[MAX_STOPS];
} gen_args;

static int parse_gen_args(int argc, char **argv, pgd_llm_options *o, gen_args *a) {
    pgd_seq_params_default(&a->sp);
    a->sp.max_tokens = 256;
    a->sp.sampling.seed = pgd_sampler_random_seed();
    a->sp.stop = a->stops;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r;
        uint64_t u;
        if ((r = pgd_cli_run_flag(argc, argv, &i, o))) {
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
static int encode_prompt(pgd_llm *llm, const gen_args *a, pgd_tokens *out) {
    int rc;
    if (a->prompt) {
        rc = pgd_llm_encode_text(llm, a->prompt, strlen(a->prompt), a->special, out);
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
        if (!rc) rc = pgd_llm_encode_chat(llm, msgs.msgs, msgs.n, true, out);
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

static void print_json_result(const pgd_seq *s, double t0, double t_first, double t_end,
                              const char *text, size_t text_len) {
    uint32_t n_out = (uint32_t)s->tokens.n - s->n_prompt;
    printf("{\"text\":");
#ifdef PGD_HAVE_JANSSON
    json_t *js = json_stringn(text, text_len);
    char *enc = js ? json_dumps(js, JSON_ENCODE_ANY | JSON_ENSURE_ASCII) : NULL;
    printf("%s", enc ? enc : "null");
    free(enc);
    json_decref(js);
#else
    (void)text;
    (void)text_len;
    printf("null");
#endif
    printf(",\"token_ids\":[");
    for (uint32_t i = 0; i < n_out; i++)
        printf("%s%d", i ? "," : "", s->tokens.ids[s->n_prompt + i]);
    double prefill = t_first - t0, decode = t_end - t_first;
    printf("],\"prompt_token_ids\":[");
    for (uint32_t i = 0; i < s->n_prompt; i++) printf("%s%d", i ? "," : "", s->tokens.ids[i]);
    printf("],\"finish_reason\":\"%s\",\"usage\":{\"prompt_tokens\":%u,\"completion_tokens\":%u,"
           "\"total_tokens\":%u,\"cached_tokens\":%u},",
           pgd_finish_str(s->finish), s->n_prompt, n_out, s->n_prompt + n_out, s->n_cached_prompt);
    printf("\"timings\":{\"prompt_ms\":%.3f,\"prompt_tokens_per_s\":%.2f,\"decode_ms\":%.3f,"
           "\"decode_tokens_per_s\":%.2f,\"total_ms\":%.3f}}\n",
           prefill * 1e3, prefill > 0 ? s->n_prompt / prefill : 0.0, decode * 1e3,
           decode > 0 && n_out > 1 ? (n_out - 1) / decode : 0.0, (t_end - t0) * 1e3);
}

int pgd_cli_generate(int argc, char **argv) {
    pgd_llm_options o;
    pgd_llm_options_default(&o);
    gen_args a;
    memset(&a, 0, sizeof a);
    int st = parse_gen_args(argc, argv, &o, &a);
    if (st >= 0) return st;
    pgd_llm *llm = NULL;
    if (pgd_cli_run_open("generate", &o, &llm)) return 1;
    pgd_tokens prompt = PGD_TOKENS_INIT;
    pgd_seq *s = NULL;
    pgd_buf all = PGD_BUF_INIT;
    int status = 1, rc;
    if (encode_prompt(llm, &a, &prompt)) goto out;
    if ((rc = pgd_seq_create(llm, prompt.ids, (uint32_t)prompt.n, &a.sp, &s))) {
        fprintf(stderr, "pagoda generate: %s\n", pgd_error_detail());
        goto out;
    }
    double t0 = pgd_cli_now_s(), t_first = 0;
    while (s->finish == PGD_FINISH_NONE) {
        uint32_t n = pgd_seq_pending(s);
        if (n > llm->opt.max_batch_tokens) n = llm->opt.max_batch_tokens;
        pgd_step_item it = {.seq = s, .n_tokens = n};
        if ((rc = pgd_llm_step(llm, &it, 1))) {
            fprintf(stderr, "\npagoda generate: %s\n",
                    rc == PGD_ENOBLOCKS ? "the KV cache is too small for this sequence "
                                          "(raise --kv-cache-mb)"
                                        : pgd_error_detail());
            goto out;
        }
        if (s->sampled && t_first == 0) t_first = pgd_cli_now_s();
        if (s->delta.len) {
            if (!a.json) {
                fwrite(s->delta.data, 1, s->delta.len, stdout);
                fflush(stdout);
            }
            pgd_buf_append(&all, s->delta.data, s->delta.len);
            pgd_buf_reset(&s->delta);
        }
    }
    double t_end = pgd_cli_now_s();
    if (a.json)
        print_json_result(s, t0, t_first, t_end, all.data ? all.data : "", all.len);
    else
        putchar('\n');
    status = 0;
out:
    pgd_buf_free(&all);
    pgd_seq_destroy(s);
    pgd_tokens_free(&prompt);
    pgd_llm_close(llm);
    return status;
}

/* ---- eval ---------------------------------------------------------------------------------- */

static void eval_usage(FILE *f) {
    fprintf(f,
            "usage: pagoda eval --model PATH --out FILE [--chunk N] (--prompt TEXT | ID...)\n"
            "Run a prompt and write the logits of every position to FILE as raw little-endian\n"
            "float32 [n_tokens][n_vocab]; prints {\"n_tokens\",\"n_vocab\",\"tokens\"} as JSON.\n"
            "--chunk N feeds the prompt N tokens per step (paging across "
            "steps).\n\n" PGD_CLI_RUN_FLAGS_HELP);
}

int pgd_cli_eval(int argc, char **argv) {
    pgd_llm_options o;
    pgd_llm_options_default(&o);
    const char *out_path = NULL, *text = NULL, *v;
    uint64_t chunk = 0;
    pgd_tokens prompt = PGD_TOKENS_INIT;
    int r, status = 2;
    for (int i = 1; i < argc; i++) {
        if ((r = pgd_cli_run_flag(argc, argv, &i, &o)) ||
            (r = pgd_cli_flag_value(argc, argv, &i, "--out", &out_path)) ||
            (r = pgd_cli_flag_value(argc, argv, &i, "--prompt", &text))) {
            if (r < 0) goto out;
        } else if ((r = pgd_cli_flag_value(argc, argv, &i, "--chunk", &v))) {
            if (r < 0 || pgd_cli_parse_u64("eval", "--chunk", v, &chunk)) goto out;
        } else if (!strcmp(argv[i], "--help")) {
            eval_usage(stdout);
            status = 0;
            goto out;
        } else {
            uint64_t id;
            if (pgd_cli_parse_u64("eval", "token id", argv[i], &id) || id > INT32_MAX) goto out;
            pgd_tokens_push(&prompt, (int32_t)id);
        }
    }
    if (!out_path || (!text && !prompt.n) || (text && prompt.n)) {
        eval_usage(stderr);
        goto out;
    }
    status = 1;
    pgd_llm *llm = NULL;
    if (pgd_cli_run_open("eval", &o, &llm)) goto out;
    pgd_seq *s = NULL;
    FILE *f = NULL;
    if (text && pgd_llm_encode_text(llm, text, strlen(text), false, &prompt)) {
        fprintf(stderr, "pagoda eval: %s\n", pgd_error_detail());
        goto done;
    }
    pgd_seq_params sp;
    pgd_seq_params_default(&sp);
    sp.sampling.temperature = 0;
    if (pgd_seq_create(llm, prompt.ids, (uint32_t)prompt.n, &sp, &s)) {
        fprintf(stderr, "pagoda eval: %s\n", pgd_error_detail());
        goto done;
    }
    if (!(f = fopen(out_path, "wb"))) {
        fprintf(stderr, "pagoda eval: cannot write %s\n", out_path);
        goto done;
    }
    uint32_t step = chunk ? (uint32_t)chunk : llm->opt.max_batch_tokens;
    if (step > llm->opt.max_batch_tokens) step = llm->opt.max_batch_tokens;
    while (s->n_computed < s->n_prompt) {
        uint32_t n = s->n_prompt - s->n_computed;
        if (n > step) n = step;
        pgd_step_item it = {.seq = s, .n_tokens = n, .all_logits = true};
        if ((r = pgd_llm_step(llm, &it, 1))) {
            fprintf(stderr, "pagoda eval: %s\n",
                    r == PGD_ENOBLOCKS ? "the KV cache is too small" : pgd_error_detail());
            goto done;
        }
        if (fwrite(llm->logits + (uint64_t)it.logits_row * llm->n_vocab, sizeof(float),
                   (uint64_t)n * llm->n_vocab, f) != (uint64_t)n * llm->n_vocab) {
            fprintf(stderr, "pagoda eval: write error on %s\n", out_path);
            goto done;
        }
    }
    printf("{\"n_tokens\":%u,\"n_vocab\":%u,\"tokens\":[", s->n_prompt, llm->n_vocab);
    for (uint32_t i = 0; i < s->n_prompt; i++) printf("%s%d", i ? "," : "", s->tokens.ids[i]);
    printf("]}\n");
    status = 0;
done:
    if (f && fclose(f)) status = 1;
    pgd_seq_destroy(s);
    pgd_llm_close(llm);
out:
    pgd_tokens_free(&prompt);
    return status;
}
