/*
 * server/cli_bench.c — `pagoda bench`: offline throughput of the engine on this machine.
 *
 * Offline mode: for each batch size B, B sequences of random prompts of --prompt-len tokens are
 * prefilled (chunked under the step's token budget), then decoded together for --gen-len steps.
 * Prefill tokens/s = B * L / prefill time; decode tokens/s = B * G / decode time. Prompts are
 * random token ids (no control tokens), so nothing stops early (EOS is ignored).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "engine/llm.h"
#include "server/cli.h"
#include "server/cli_run.h"

#define MAX_BATCHES 16

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(FILE *f) {
    fprintf(f, "usage: pagoda bench --model PATH [--prompt-len L] [--gen-len G] [--batch 1,4,16]\n"
               "                    [--seed S] [--json]\n"
               "Offline throughput: prefill and decode tokens/s for each batch "
               "size.\n\n" PGD_CLI_RUN_FLAGS_HELP);
}

typedef struct {
    uint32_t batch;
    double prefill_s, decode_s;
    uint64_t prefill_tokens, decode_tokens;
} bench_row;

static int run_batch(pgd_llm *llm, uint32_t B, uint32_t L, uint32_t G, uint64_t seed,
                     bench_row *row) {
    pgd_seq **seqs = calloc(B, sizeof *seqs);
    pgd_step_item *items = calloc(B, sizeof *items);
    int32_t *prompt = malloc(L * sizeof *prompt);
    int rc = PGD_ENOMEM;
    if (!seqs || !items || !prompt) goto out;
    pgd_seq_params sp;
    pgd_seq_params_default(&sp);
    sp.sampling.temperature = 0;
    sp.max_tokens = G;
    sp.ignore_eos = true;
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (uint32_t b = 0; b < B; b++) {
        for (uint32_t i = 0; i < L; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            prompt[i] = (int32_t)(llm->n_vocab / 8 + x % (llm->n_vocab / 2));
        }
        if ((rc = pgd_seq_create(llm, prompt, L, &sp, &seqs[b]))) goto out;
    }
    /* Prefill: fill each step up to the token budget, sequence after sequence. */
    double t0 = now_s();
    uint32_t budget = llm->opt.max_batch_tokens;
    for (;;) {
        uint32_t n = 0, used = 0;
        for (uint32_t b = 0; b < B && used < budget; b++) {
            pgd_seq *s = seqs[b];
            if (s->n_computed >= s->n_prompt) continue;
            uint32_t take = s->n_prompt - s->n_computed;
            if (take > budget - used) take = budget - used;
            items[n++] = (pgd_step_item){.seq = s, .n_tokens = take};
            used += take;
        }
        if (!n) break;
        if ((rc = pgd_llm_step(llm, items, n))) goto out;
    }
    double t1 = now_s();
    /* Decode: every sequence one token per step (the first output token came with prefill). */
    for (uint32_t step = 1; step < G; step++) {
        uint32_t n = 0;
        for (uint32_t b = 0; b < B; b++)
            if (seqs[b]->finish == PGD_FINISH_NONE)
                items[n++] = (pgd_step_item){.seq = seqs[b], .n_tokens = 1};
        if (!n) break;
        if ((rc = pgd_llm_step(llm, items, n))) goto out;
    }
    double t2 = now_s();
    row->batch = B;
    row->prefill_s = t1 - t0;
    row->decode_s = t2 - t1;
    row->prefill_tokens = (uint64_t)B * L;
    row->decode_tokens = (uint64_t)B * (G > 1 ? G - 1 : 0);
    rc = 0;
out:
    for (uint32_t b = 0; seqs && b < B; b++) pgd_seq_destroy(seqs[b]);
    free(seqs);
    free(items);
    free(prompt);
    return rc;
}

int pgd_cli_bench(int argc, char **argv) {
    pgd_llm_options o;
    pgd_llm_options_default(&o);
    uint64_t L = 128, G = 128, seed = 1;
    uint32_t batches[MAX_BATCHES] = {1, 4, 16};
    int n_batches = 3, json = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r;
        if ((r = pgd_cli_run_flag(argc, argv, &i, &o))) {
            if (r < 0) return 2;
        } else if ((r = pgd_cli_flag_value(argc, argv, &i, "--prompt-len", &v))) {
            if (r < 0 || pgd_cli_parse_u64("bench", "--prompt-len", v, &L) || !L) return 2;
        } else if ((r = pgd_cli_flag_value(argc, argv, &i, "--gen-len", &v))) {
            if (r < 0 || pgd_cli_parse_u64("bench", "--gen-len", v, &G) || !G) return 2;
        } else if ((r = pgd_cli_flag_value(argc, argv, &i, "--seed", &v))) {
            if (r < 0 || pgd_cli_parse_u64("bench", "--seed", v, &seed)) return 2;
        } else if ((r = pgd_cli_flag_value(argc, argv, &i, "--batch", &v))) {
            if (r < 0) return 2;
            n_batches = 0;
            char *dup = strdup(v), *save = NULL;
            for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                uint64_t b;
                if (n_batches == MAX_BATCHES || pgd_cli_parse_u64("bench", "--batch", tok, &b) ||
                    !b || b > 4096) {
                    free(dup);
                    return 2;
                }
                batches[n_batches++] = (uint32_t)b;
            }
            free(dup);
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "pagoda bench: unknown argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    pgd_llm *llm = NULL;
    if (pgd_cli_run_open("bench", &o, &llm)) return 1;
    if (L + G > llm->n_ctx) {
        fprintf(stderr, "pagoda bench: prompt + generation (%llu) exceed the context (%u)\n",
                (unsigned long long)(L + G), llm->n_ctx);
        pgd_llm_close(llm);
        return 1;
    }
    if (!json)
        printf("| batch | prompt | gen | prefill tok/s | decode tok/s | prefill s | decode s |\n"
               "|---:|---:|---:|---:|---:|---:|---:|\n");
    else
        printf("[");
    int status = 0;
    for (int i = 0; i < n_batches; i++) {
        bench_row row = {0};
        int rc = run_batch(llm, batches[i], (uint32_t)L, (uint32_t)G, seed + i, &row);
        if (rc) {
            fprintf(stderr, "pagoda bench: batch %u: %s\n", batches[i],
                    rc == PGD_ENOBLOCKS ? "the KV cache is too small (raise --kv-cache-mb)"
                                        : pgd_error_detail());
            status = 1;
            break;
        }
        double pf = row.prefill_tokens / row.prefill_s,
               dc = row.decode_s > 0 ? row.decode_tokens / row.decode_s : 0;
        if (json)
            printf("%s{\"batch\":%u,\"prompt_len\":%llu,\"gen_len\":%llu,\"prefill_tokens_per_s\":"
                   "%.2f,\"decode_tokens_per_s\":%.2f,\"prefill_s\":%.4f,\"decode_s\":%.4f}",
                   i ? "," : "", row.batch, (unsigned long long)L, (unsigned long long)G, pf, dc,
                   row.prefill_s, row.decode_s);
        else
            printf("| %u | %llu | %llu | %.1f | %.1f | %.3f | %.3f |\n", row.batch,
                   (unsigned long long)L, (unsigned long long)G, pf, dc, row.prefill_s,
                   row.decode_s);
        fflush(stdout);
    }
    if (json) printf("]\n");
    pgd_llm_close(llm);
    return status;
}
