/*
 * cli/bench.c — `pagoda bench`: throughput and latency of the engine on this machine.
 *
 * Offline mode (default): for each batch size B, B sequences of random prompts of --prompt-len
 * tokens are prefilled (chunked under the step's token budget), then decoded together for
 * --gen-len steps. Prefill tokens/s = B * L / prefill time; decode tokens/s = B * G / decode
 * time, both measured after --warmup N untimed runs (default 1) of the first batch size with the
 * same prompt length and up to 3 tokens. Prompts are random token ids (no control tokens), so
 * nothing stops early (EOS is ignored). Tokens are greedy unless --temperature (with --top-p,
 * --top-k, --min-p) asks for sampling, which then runs as a request's would (on the device where
 * the backend samples), each sequence with its own seed derived from --seed: what sampling costs a
 * step.
 *
 * Offline batches run through scheduler/offline.h: the scheduler's plan over block tables of
 * their own, the runner driven directly.
 *
 * Online mode (--num-prompts N): after the warm-up `pagoda serve` runs before its first request
 * (scheduler/offline.h; --warmup 0: none), N requests go through the in-process worker (the
 * scheduler thread of scheduler/worker.h, no HTTP) with Poisson arrivals at --request-rate R per
 * second
 * (`inf`: all at once) and/or at most --concurrency C in flight. Each prompt is --prompt-len
 * random tokens whose first --shared-prefix-len are common to all; each asks for exactly
 * --gen-len tokens (EOS ignored; greedy, or sampled as above). Times come from the events'
 * scheduler timestamps: TTFT = first token - submit; TPOT = (end - first token) / (tokens - 1); ITL
 * = gaps between successive tokens of a request; E2E = end - submit. Reported: request throughput,
 * output and total (prompt + output) tokens/s over the run, and mean/p50/p90/p99 of TTFT, TPOT,
 * ITL, E2E.
 *
 * Threading: the main thread submits and consumes events; the worker runs its own thread.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "common/clock.h"
#include "common/error.h"
#include "engine/load.h"
#include "engine/sampling/sampler.h"
#include "scheduler/offline.h"
#include "scheduler/worker.h"

#define MAX_BATCHES 16

static void usage(FILE *f) {
    fprintf(f,
            "usage: pagoda bench --model PATH [--prompt-len L] [--gen-len G] [--batch 1,4,16]\n"
            "                    [--warmup N] [--seed S] [--json] [sampling]\n"
            "       pagoda bench --model PATH --num-prompts N [--request-rate R|inf]\n"
            "                    [--concurrency C] [--prompt-len L] [--shared-prefix-len K]\n"
            "                    [--gen-len G] [--warmup 0|1] [--seed S] [--json] [sampling]\n"
            "Offline (default): prefill and decode tokens/s for each batch size, after N\n"
            "untimed warm-up runs of the first (default 1; up to 3 tokens each).\n"
            "Online (--num-prompts): N requests through the scheduler with Poisson arrivals at R\n"
            "per second (default inf: all at once) and at most C in flight (default: no limit),\n"
            "after the warm-up `pagoda serve` runs (--warmup 0: none); reports request and token\n"
            "throughput, TTFT, TPOT, ITL and E2E latency.\n"
            "sampling: --temperature T (default 0: greedy) --top-p P --top-k K --min-p P, as a\n"
            "request's; each sequence draws with its own seed from --seed.\n\n"
            "engine flags:\n");
    pgd_engine_flags_usage(f);
}

/* The sampling asked for, in words ("greedy", or its parameters), into buf[n]. */
static const char *sampling_words(const pgd_sampling_params *p, char *buf, size_t n) {
    if (p->temperature < PGD_SAMPLER_GREEDY_EPS) /* the sampler's own rule */
        snprintf(buf, n, "greedy");
    else
        snprintf(buf, n, "temperature %g, top-p %g, top-k %d, min-p %g", (double)p->temperature,
                 (double)p->top_p, (int)p->top_k, (double)p->min_p);
    return buf;
}

/* The same as JSON members (without braces). */
static void sampling_json(const pgd_sampling_params *p) {
    printf("\"temperature\":%g,\"top_p\":%g,\"top_k\":%d,\"min_p\":%g", (double)p->temperature,
           (double)p->top_p, (int)p->top_k, (double)p->min_p);
}

typedef struct {
    uint32_t batch;
    double prefill_s, decode_s;
    uint64_t prefill_tokens, decode_tokens;
} bench_row;

/* Says why run_batch failed (rc) for the batch of B sequences (`what`: "batch", ...). */
static void batch_failed(const char *what, uint32_t B, int rc) {
    fprintf(stderr, "pagoda bench: %s %u: %s\n", what, B,
            rc == PGD_ENOBLOCKS ? "the KV cache is too small (raise --kv-cache-mb)"
                                : pgd_error_detail());
}

/* B sequences of L random prompt tokens, G tokens out each (scheduler/offline.h: prefill, each
 * step filled up to the step budget, sequence after sequence, then the decode steps). */
static int run_batch(pgd_runner *runner, uint32_t B, uint32_t L, uint32_t G, uint64_t seed,
                     const pgd_sampling_params *samp, bench_row *row) {
    const uint32_t V = pgd_runner_info(runner)->n_vocab;
    pgd_offline_seq *seqs = calloc(B, sizeof *seqs);
    int32_t *prompts = malloc((size_t)B * L * sizeof *prompts);
    int rc = PGD_ENOMEM;
    if (!seqs || !prompts) goto out;
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (uint32_t b = 0; b < B; b++) {
        int32_t *prompt = prompts + (size_t)b * L;
        for (uint32_t i = 0; i < L; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            prompt[i] = (int32_t)(V / 8 + x % (V / 2));
        }
        seqs[b].prompt = prompt;
        seqs[b].n_prompt = L;
        pgd_seq_params_default(&seqs[b].params);
        seqs[b].params.sampling = *samp;
        seqs[b].params.sampling.seed = seed * 0x2545F4914F6CDD1Dull + b;
        seqs[b].params.max_tokens = G;
        seqs[b].params.ignore_eos = true;
    }
    pgd_offline_stats st;
    if ((rc = pgd_offline_run(runner, seqs, B, &st))) goto out;
    row->batch = B;
    row->prefill_s = st.prefill_s;
    row->decode_s = st.decode_s;
    row->prefill_tokens = st.prefill_tokens;
    row->decode_tokens = st.decode_tokens;
out:
    free(seqs);
    free(prompts);
    return rc;
}

/* ---- online mode ----------------------------------------------------------------------------- */

typedef struct online_opts {
    uint64_t num_prompts, concurrency, prompt_len, shared_prefix, gen_len, seed;
    double rate; /* requests per second; INFINITY = all at once */
    int json;
    bool warmup;              /* the server's warm-up first (scheduler/offline.h) */
    pgd_sampling_params samp; /* every request's; its seed: derived per request */
} online_opts;

typedef struct online_req {
    uint64_t id;
    double t_submit, t_first, t_last, t_end;
    uint32_t n_tokens;
    bool done, failed;
    double *tok_t; /* [gen_len] token times */
} online_req;

typedef struct online_run {
    online_req *reqs;
    uint64_t n, n_done, n_failed, gen_len;
    uint64_t *by_id; /* engine id -> request index + 1 (ids are small and dense) */
    uint64_t id_cap;
    char first_error[256];
} online_run;

static double ns_s(uint64_t ns) {
    return (double)ns * 1e-9;
}

static void online_event(const pgd_event *ev, void *ud) {
    online_run *run = ud;
    if (ev->id >= run->id_cap || !run->by_id[ev->id]) return;
    online_req *q = &run->reqs[run->by_id[ev->id] - 1];
    double t = ns_s(ev->t_ns);
    if (ev->kind == PGD_EVENT_TOKEN) {
        if (!q->n_tokens) q->t_first = t;
        if (q->n_tokens < run->gen_len) q->tok_t[q->n_tokens] = t;
        q->n_tokens++;
        q->t_last = t;
    } else if (ev->kind == PGD_EVENT_ERROR) {
        q->failed = true;
        if (!run->n_failed++)
            snprintf(run->first_error, sizeof run->first_error, "%s", ev->message);
    }
    if (ev->done) {
        q->done = true;
        q->t_end = t;
        run->n_done++;
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct dist {
    double mean, p50, p90, p99;
    uint64_t n;
} dist;

/* Mean and percentiles (linear interpolation, as numpy's default) of v[n], sorted in place,
 * in milliseconds. */
static dist summarize(double *v, uint64_t n) {
    dist d = {0};
    d.n = n;
    if (!n) return d;
    qsort(v, n, sizeof *v, cmp_double);
    double sum = 0;
    for (uint64_t i = 0; i < n; i++) sum += v[i];
    d.mean = sum / n * 1e3;
    double q[3] = {0.5, 0.9, 0.99}, *out[3] = {&d.p50, &d.p90, &d.p99};
    for (int k = 0; k < 3; k++) {
        double pos = q[k] * (double)(n - 1);
        uint64_t lo = (uint64_t)pos;
        uint64_t hi = lo + 1 < n ? lo + 1 : lo;
        *out[k] = (v[lo] + (v[hi] - v[lo]) * (pos - (double)lo)) * 1e3;
    }
    return d;
}

/* Exponential inter-arrival gap for rate r (Poisson process), from a xorshift state. */
static double exp_gap(uint64_t *x, double r) {
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    double u = ((double)(*x >> 11) + 0.5) / 9007199254740992.0; /* (0, 1) */
    return -log(u) / r;
}

/* Takes the runner (the worker owns it, also on failure here). */
static int run_online(pgd_runner *runner, const pgd_sched_config *sc_in, const online_opts *op) {
    const char *kv_dtype = pgd_kv_dtype_name(pgd_runner_caps(runner)->kv_dtype);
    const uint32_t V = pgd_runner_info(runner)->n_vocab;
    pgd_worker_config ec;
    pgd_worker_config_default(&ec);
    ec.sched = *sc_in;
    uint64_t N = op->num_prompts, L = op->prompt_len, G = op->gen_len;
    online_run run = {0};
    run.n = N;
    run.gen_len = G;
    run.reqs = calloc(N, sizeof *run.reqs);
    run.id_cap = 4 * N + 16;
    run.by_id = calloc(run.id_cap, sizeof *run.by_id);
    double *arrival = malloc(N * sizeof *arrival);
    int32_t *prompt = malloc(L * sizeof *prompt);
    double *tmp = malloc((N * (G ? G : 1) + 1) * sizeof *tmp);
    pgd_worker *e = NULL;
    int status = 1;
    if (!run.reqs || !run.by_id || !arrival || !prompt || !tmp) {
        fprintf(stderr, "pagoda bench: out of memory\n");
        pgd_runner_destroy(runner);
        goto out;
    }
    for (uint64_t i = 0; i < N; i++)
        if (!(run.reqs[i].tok_t = malloc((G ? G : 1) * sizeof(double)))) {
            fprintf(stderr, "pagoda bench: out of memory\n");
            pgd_runner_destroy(runner);
            goto out;
        }
    if (op->warmup) { /* as `pagoda serve` does before its first request */
        pgd_warmup_stats ws;
        int rc = pgd_warmup(runner, &ws);
        if (rc) {
            fprintf(stderr, "pagoda bench: the warm-up failed: %s\n", pgd_error_detail());
            pgd_runner_destroy(runner);
            goto out;
        }
        fprintf(
            stderr, "pagoda bench: warm-up (serve's): %u run%s, %u steps, %llu tokens in %.3f s\n",
            ws.runs, ws.runs == 1 ? "" : "s", ws.steps, (unsigned long long)ws.tokens, ws.seconds);
    }
    if (pgd_worker_create(runner, &ec, &e)) {
        fprintf(stderr, "pagoda bench: cannot start the scheduler: %s\n", pgd_error_detail());
        pgd_runner_destroy(runner);
        goto out;
    }
    const pgd_sched_config *sc = pgd_worker_config_of(e);
    uint64_t x = op->seed * 0x9E3779B97F4A7C15ull + 7, shared_x = op->seed * 31 + 5;
    double t = 0;
    for (uint64_t i = 0; i < N; i++) {
        if (isfinite(op->rate)) t += exp_gap(&x, op->rate);
        arrival[i] = t;
    }

    double t0 = pgd_now_s();
    uint64_t next = 0, inflight = 0, prompt_tokens = 0;
    while (run.n_done < N) {
        double now = pgd_now_s() - t0;
        while (next < N && arrival[next] <= now &&
               (!op->concurrency || inflight < op->concurrency)) {
            /* the shared prefix is the same for all; the rest is per request */
            uint64_t px = shared_x, rx = op->seed * 0x2545F4914F6CDD1Dull + next * 0x9E37ull + 1;
            for (uint64_t k = 0; k < L; k++) {
                uint64_t *s = k < op->shared_prefix ? &px : &rx;
                *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
                prompt[k] = (int32_t)(V / 8 + *s % (V / 2));
            }
            pgd_request r;
            pgd_request_init(&r);
            r.prompt = prompt;
            r.n_prompt = (uint32_t)L;
            r.params.sampling = op->samp;
            r.params.sampling.seed = op->seed * 0x9E3779B97F4A7C15ull + next;
            r.params.max_tokens = (int64_t)G;
            r.params.ignore_eos = true;
            uint64_t id;
            int rc = pgd_worker_submit(e, &r, &id);
            if (rc == PGD_EFULL) break; /* the queue is full: retry after some events */
            if (rc) {
                fprintf(stderr, "pagoda bench: submit: %s\n", pgd_error_detail());
                goto out;
            }
            if (id >= run.id_cap) {
                fprintf(stderr, "pagoda bench: unexpected request id %llu\n",
                        (unsigned long long)id);
                goto out;
            }
            run.by_id[id] = next + 1;
            run.reqs[next].id = id;
            run.reqs[next].t_submit = pgd_now_s();
            prompt_tokens += L;
            next++;
            inflight++;
        }
        uint64_t before = run.n_done;
        pgd_worker_drain(e, online_event, &run);
        inflight -= run.n_done - before;
        if (run.n_done >= N) break;
        int wait_ms = 100;
        if (next < N && (!op->concurrency || inflight < op->concurrency)) {
            double dt = arrival[next] - (pgd_now_s() - t0);
            wait_ms = dt <= 0 ? 0 : (int)(dt * 1e3) + 1;
            if (wait_ms > 100) wait_ms = 100;
        }
        if (wait_ms > 0) pgd_worker_wait(e, wait_ms);
    }
    double t_end = 0;
    for (uint64_t i = 0; i < N; i++)
        if (run.reqs[i].t_end > t_end) t_end = run.reqs[i].t_end;
    double duration = t_end - t0;
    pgd_sched_stats st;
    pgd_worker_shutdown(e, 0);
    pgd_worker_get_stats(e, &st);

    /* metrics */
    uint64_t out_tokens = 0, n_ok = 0, m;
    for (uint64_t i = 0; i < N; i++) {
        out_tokens += run.reqs[i].n_tokens;
        n_ok += !run.reqs[i].failed;
    }
    dist ttft, tpot, itl, e2e;
    m = 0;
    for (uint64_t i = 0; i < N; i++)
        if (run.reqs[i].n_tokens) tmp[m++] = run.reqs[i].t_first - run.reqs[i].t_submit;
    ttft = summarize(tmp, m);
    m = 0;
    for (uint64_t i = 0; i < N; i++)
        if (run.reqs[i].n_tokens > 1)
            tmp[m++] = (run.reqs[i].t_last - run.reqs[i].t_first) / (run.reqs[i].n_tokens - 1);
    tpot = summarize(tmp, m);
    m = 0;
    for (uint64_t i = 0; i < N; i++) {
        uint32_t nt = run.reqs[i].n_tokens < G ? run.reqs[i].n_tokens : (uint32_t)G;
        for (uint32_t k = 1; k < nt; k++)
            tmp[m++] = run.reqs[i].tok_t[k] - run.reqs[i].tok_t[k - 1];
    }
    itl = summarize(tmp, m);
    m = 0;
    for (uint64_t i = 0; i < N; i++) tmp[m++] = run.reqs[i].t_end - run.reqs[i].t_submit;
    e2e = summarize(tmp, m);
    double req_s = N / duration, out_s = out_tokens / duration,
           tot_s = (prompt_tokens + out_tokens) / duration;
    const dist *ds[4] = {&ttft, &tpot, &itl, &e2e};
    static const char *const names[4] = {"ttft", "tpot", "itl", "e2e"};
    char rate[32];
    if (isfinite(op->rate))
        snprintf(rate, sizeof rate, "%g", op->rate);
    else
        snprintf(rate, sizeof rate, "inf");
    if (op->json) {
        printf("{\"mode\":\"online\",\"num_prompts\":%llu,\"request_rate\":\"%s\","
               "\"concurrency\":%llu,\"prompt_len\":%llu,\"shared_prefix_len\":%llu,"
               "\"gen_len\":%llu,\"max_num_batched_tokens\":%u,\"max_num_seqs\":%u,"
               "\"kv_cache_dtype\":\"%s\",\"completed\":%llu,\"failed\":%llu,\"duration_s\":%.4f,"
               "\"request_throughput\":%.4f,\"output_tokens_per_s\":%.2f,"
               "\"total_tokens_per_s\":%.2f,\"prompt_tokens\":%llu,\"output_tokens\":%llu,"
               "\"preemptions\":%llu,\"prefix_hit_tokens\":%llu,\"prefix_query_tokens\":%llu,"
               "\"warmup\":%d",
               (unsigned long long)N, rate, (unsigned long long)op->concurrency,
               (unsigned long long)L, (unsigned long long)op->shared_prefix, (unsigned long long)G,
               sc->max_num_batched_tokens, sc->max_num_seqs, kv_dtype, (unsigned long long)n_ok,
               (unsigned long long)(N - n_ok), duration, req_s, out_s, tot_s,
               (unsigned long long)prompt_tokens, (unsigned long long)out_tokens,
               (unsigned long long)st.n_preemptions, (unsigned long long)st.prefix_hit_tokens,
               (unsigned long long)st.prefix_query_tokens, op->warmup ? 1 : 0);
        putchar(',');
        sampling_json(&op->samp);
        for (int k = 0; k < 4; k++)
            printf(",\"%s_ms\":{\"mean\":%.3f,\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f}", names[k],
                   ds[k]->mean, ds[k]->p50, ds[k]->p90, ds[k]->p99);
        printf("}\n");
    } else {
        char conc[32];
        if (op->concurrency)
            snprintf(conc, sizeof conc, "%llu", (unsigned long long)op->concurrency);
        else
            snprintf(conc, sizeof conc, "unlimited");
        char words[96];
        printf("online: %llu prompts of %llu tokens (%llu shared), %llu output tokens each (%s), "
               "rate %s/s, concurrency %s; step budget %u tokens, %u sequences; KV cache %s\n\n",
               (unsigned long long)N, (unsigned long long)L, (unsigned long long)op->shared_prefix,
               (unsigned long long)G, sampling_words(&op->samp, words, sizeof words), rate, conc,
               sc->max_num_batched_tokens, sc->max_num_seqs, kv_dtype);
        printf("| metric | value |\n|---|---:|\n"
               "| completed / failed | %llu / %llu |\n"
               "| duration (s) | %.3f |\n"
               "| request throughput (req/s) | %.3f |\n"
               "| output throughput (tok/s) | %.1f |\n"
               "| total throughput (tok/s) | %.1f |\n"
               "| preemptions | %llu |\n"
               "| prefix cache hit (tokens) | %llu / %llu |\n\n",
               (unsigned long long)n_ok, (unsigned long long)(N - n_ok), duration, req_s, out_s,
               tot_s, (unsigned long long)st.n_preemptions,
               (unsigned long long)st.prefix_hit_tokens,
               (unsigned long long)st.prefix_query_tokens);
        printf("| latency (ms) | mean | p50 | p90 | p99 |\n|---|---:|---:|---:|---:|\n");
        static const char *const labels[4] = {"TTFT", "TPOT", "ITL", "E2E"};
        for (int k = 0; k < 4; k++)
            printf("| %s | %.1f | %.1f | %.1f | %.1f |\n", labels[k], ds[k]->mean, ds[k]->p50,
                   ds[k]->p90, ds[k]->p99);
    }
    if (run.n_failed)
        fprintf(stderr, "pagoda bench: %llu requests failed: %s\n",
                (unsigned long long)run.n_failed, run.first_error);
    status = run.n_failed ? 1 : 0;
out:
    pgd_worker_destroy(e); /* destroys the runner */
    for (uint64_t i = 0; run.reqs && i < N; i++) free(run.reqs[i].tok_t);
    free(run.reqs);
    free(run.by_id);
    free(arrival);
    free(prompt);
    free(tmp);
    return status;
}

int pgd_cli_bench(int argc, char **argv) {
    pgd_engine_flags ef = {0};
    pgd_opt_table engine = pgd_engine_flags_table(&ef);
    uint64_t L = 128, G = 128, seed = 1, warmup = 1;
    uint32_t batches[MAX_BATCHES] = {1, 4, 16};
    int n_batches = 3, json = 0;
    online_opts on = {.rate = INFINITY};
    pgd_sampling_params samp;
    pgd_sampling_params_default(&samp);
    samp.temperature = 0; /* greedy unless asked */
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r;
        if ((r = pgd_opt_parse_arg(&engine, 1, argc, argv, &i, "bench"))) {
            if (r < 0) return 2;
        } else if ((r = pgd_cli_flag_value(argc, argv, &i, "--num-prompts", &v))) {
            if (r < 0 || pgd_cli_parse_u64("bench", "--num-prompts", v, &on.num_prompts) ||
                !on.num_prompts || on.num_prompts > 1000000)
                return 2;
        } else if ((r = pgd_cli_flag_value(argc, argv, &i, "--request-rate", &v))) {
            float rate;
            if (r < 0) return 2;
            if (!strcmp(v, "inf")) {
                on.rate = INFINITY;
            } else if (pgd_cli_parse_f32("bench", "--request-rate", v, &rate) || rate <= 0) {
                fprintf(stderr, "pagoda bench: --request-rate wants a positive number or inf\n");
                return 2;
            } else {
                on.rate = rate;
            }
        } else if ((r = pgd_cli_flag_value(argc, argv, &i, "--concurrency", &v))) {
            if (r < 0 || pgd_cli_parse_u64("bench", "--concurrency", v, &on.concurrency)) return 2;
        } else if ((r = pgd_cli_flag_value(argc, argv, &i, "--shared-prefix-len", &v))) {
            if (r < 0 || pgd_cli_parse_u64("bench", "--shared-prefix-len", v, &on.shared_prefix))
                return 2;
        } else if ((r = pgd_cli_flag_value(argc, argv, &i, "--prompt-len", &v))) {
            if (r < 0 || pgd_cli_parse_u64("bench", "--prompt-len", v, &L) || !L) return 2;
        } else if ((r = pgd_cli_flag_value(argc, argv, &i, "--gen-len", &v))) {
            if (r < 0 || pgd_cli_parse_u64("bench", "--gen-len", v, &G) || !G) return 2;
        } else if ((r = pgd_cli_flag_value(argc, argv, &i, "--seed", &v))) {
            if (r < 0 || pgd_cli_parse_u64("bench", "--seed", v, &seed)) return 2;
        } else if ((r = pgd_cli_flag_value(argc, argv, &i, "--warmup", &v))) {
            if (r < 0 || pgd_cli_parse_u64("bench", "--warmup", v, &warmup)) return 2;
            if (warmup > 100) {
                fprintf(stderr, "pagoda bench: --warmup wants 0 to 100 runs\n");
                return 2;
            }
        } else if ((r = pgd_cli_flag_value(argc, argv, &i, "--temperature", &v))) {
            if (r < 0 || pgd_cli_parse_f32("bench", "--temperature", v, &samp.temperature))
                return 2;
        } else if ((r = pgd_cli_flag_value(argc, argv, &i, "--top-p", &v))) {
            if (r < 0 || pgd_cli_parse_f32("bench", "--top-p", v, &samp.top_p)) return 2;
        } else if ((r = pgd_cli_flag_value(argc, argv, &i, "--min-p", &v))) {
            if (r < 0 || pgd_cli_parse_f32("bench", "--min-p", v, &samp.min_p)) return 2;
        } else if ((r = pgd_cli_flag_value(argc, argv, &i, "--top-k", &v))) {
            uint64_t k;
            if (r < 0 || pgd_cli_parse_u64("bench", "--top-k", v, &k) || k > INT32_MAX) return 2;
            samp.top_k = (int32_t)k;
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
    if (on.num_prompts && warmup > 1) {
        fprintf(stderr, "pagoda bench: the online mode warms up once, as `pagoda serve` does "
                        "(--warmup 0 or 1)\n");
        return 2;
    }
    if (on.shared_prefix > L) {
        fprintf(stderr, "pagoda bench: --shared-prefix-len exceeds --prompt-len\n");
        return 2;
    }
    /* the vocabulary matters only to logit_bias, which bench does not take: checked before the
     * model loads */
    if (pgd_sampling_params_validate(&samp, INT32_MAX, NULL)) {
        fprintf(stderr, "pagoda bench: %s\n", pgd_error_detail());
        return 2;
    }
    pgd_load_options lo;
    pgd_sched_config sc;
    if (pgd_engine_flags_resolve(&ef, "bench", &lo, &sc)) return 2;
    pgd_model_info *info = NULL;
    pgd_runner *runner = NULL;
    if (pgd_cli_load("bench", &lo, &info, &runner)) return 1;
    if (pgd_runner_device_note(runner)) /* a benchmark says what it measures */
        fprintf(stderr, "pagoda bench: on the CPU (--device auto: %s)\n",
                pgd_runner_device_note(runner));
    else if (pgd_runner_caps(runner)->device)
        fprintf(stderr, "pagoda bench: on %s\n", pgd_runner_caps(runner)->device);
    if (L + G > info->n_ctx) {
        fprintf(stderr, "pagoda bench: prompt + generation (%llu) exceed the context (%u)\n",
                (unsigned long long)(L + G), info->n_ctx);
        pgd_runner_destroy(runner);
        pgd_model_info_close(info);
        return 1;
    }
    if (on.num_prompts) {
        on.prompt_len = L;
        on.gen_len = G;
        on.seed = seed;
        on.json = json;
        on.samp = samp;
        on.warmup = warmup > 0;
        int st = run_online(runner, &sc, &on); /* takes the runner */
        pgd_model_info_close(info);
        return st;
    }
    /* Untimed warm-up runs of the first batch size, the same prompt length and up to 3 tokens
     * (a prefill, an eager decode step and the one that captures its CUDA graph): the timed runs
     * then measure the steady state, not the first use of each kernel (module loading, cuBLASLt's
     * first launches), the first touch of the weights' pages or a graph capture — as the PyTorch
     * peer of scripts/gpu-check measures after its own warm-up. */
    const double tw = pgd_now_s();
    const uint32_t warm_gen = G < 3 ? (uint32_t)G : 3;
    for (uint64_t w = 0; w < warmup; w++) {
        bench_row row = {0};
        int rc = run_batch(runner, batches[0], (uint32_t)L, warm_gen, seed + 0x5EED0000u + w, &samp,
                           &row);
        if (rc) {
            batch_failed("warm-up, batch", batches[0], rc);
            pgd_runner_destroy(runner);
            pgd_model_info_close(info);
            return 1;
        }
    }
    if (warmup)
        fprintf(stderr, "pagoda bench: %llu warm-up run%s (batch %u, %llu + %u tokens) in %.3f s\n",
                (unsigned long long)warmup, warmup == 1 ? "" : "s", batches[0],
                (unsigned long long)L, warm_gen, pgd_now_s() - tw);
    if (!json) {
        char words[96];
        printf("tokens: %s; %llu warm-up run%s\n\n", sampling_words(&samp, words, sizeof words),
               (unsigned long long)warmup, warmup == 1 ? "" : "s");
        printf("| batch | prompt | gen | prefill tok/s | decode tok/s | prefill s | decode s |\n"
               "|---:|---:|---:|---:|---:|---:|---:|\n");
    } else
        printf("[");
    int status = 0;
    for (int i = 0; i < n_batches; i++) {
        bench_row row = {0};
        int rc = run_batch(runner, batches[i], (uint32_t)L, (uint32_t)G, seed + i, &samp, &row);
        if (rc) {
            batch_failed("batch", batches[i], rc);
            status = 1;
            break;
        }
        double pf = row.prefill_tokens / row.prefill_s,
               dc = row.decode_s > 0 ? row.decode_tokens / row.decode_s : 0;
        if (json) {
            printf("%s{\"batch\":%u,\"prompt_len\":%llu,\"gen_len\":%llu,\"prefill_tokens_per_s\":"
                   "%.2f,\"decode_tokens_per_s\":%.2f,\"prefill_s\":%.4f,\"decode_s\":%.4f,"
                   "\"warmup\":%llu,",
                   i ? "," : "", row.batch, (unsigned long long)L, (unsigned long long)G, pf, dc,
                   row.prefill_s, row.decode_s, (unsigned long long)warmup);
            sampling_json(&samp);
            putchar('}');
        } else
            printf("| %u | %llu | %llu | %.1f | %.1f | %.3f | %.3f |\n", row.batch,
                   (unsigned long long)L, (unsigned long long)G, pf, dc, row.prefill_s,
                   row.decode_s);
        fflush(stdout);
    }
    if (json) printf("]\n");
#if defined(PGD_HAVE_CUDA)
    if (pgd_runner_caps(runner)->kind == PGD_DEVICE_CUDA) { /* whether decode replayed graphs */
        pgd_cuda_graph_stats gs;
        pgd_backend_cuda_graph_stats(pgd_runner_backend(runner), &gs);
        fprintf(stderr, "pagoda bench: CUDA graphs %s: %u captured, %llu decode steps replayed\n",
                gs.off ? "off" : "on", gs.captured, (unsigned long long)gs.replays);
    }
#endif
    pgd_runner_destroy(runner);
    pgd_model_info_close(info);
    return status;
}
