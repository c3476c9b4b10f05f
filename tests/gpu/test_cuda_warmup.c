/*
 * tests/gpu/test_cuda_warmup.c — the server's warm-up (scheduler/offline.h) on the CUDA backend,
 * as `pagoda serve` runs it before it says ready, over dummy weights of a small Llama shape
 * (head_dim 64: prefill chunks' attention on tensor cores):
 *   - pgd_warmup makes its two runs and six steps, and leaves what its header says: the 1-row
 *     decode graph captured and replayed once (run 1's third token), run 2 eager (its penalty
 *     row needs its full logits back);
 *   - afterwards a greedy sequence run to its end (pgd_offline_run) replays that graph for its
 *     decode steps and gives, token for token, what the same sequence gives on a runner that
 *     never captures a graph (--enforce-eager) and was not warmed up — a graph captured during
 *     the warm-up, on the loading thread's turn, serves later steps as eager steps would.
 * Exit 77 (skipped) without a GPU. Label `cuda`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/backends/cuda.h"
#include "engine/load.h"
#include "scheduler/offline.h"
#include "support/preset_json.h"
#include "testutil.h"
#include "gpu_testutil.h"

static char g_preset[64]; /* the model's config.json (a temporary file) */

/* A runner over dummy weights of the preset, on the GPU; eager: no CUDA graphs. */
static int open_runner(bool eager, pgd_model_info **info, pgd_runner **runner) {
    pgd_load_options lo;
    pgd_load_options_default(&lo);
    lo.format = PGD_LOAD_DUMMY;
    lo.model_preset = g_preset;
    lo.runner.device.device = PGD_DEVICE_CUDA;
    lo.runner.device.cuda.enforce_eager = eager;
    lo.runner.backend.kv_blocks = 64;
    lo.runner.backend.max_tokens = 64;
    int rc = pgd_load(&lo, info, runner);
    if (rc) fprintf(stderr, "  load: %s\n", pgd_error_detail());
    return rc;
}

/* 40 prompt tokens, 8 greedy tokens out, into out[8]. */
static int greedy(pgd_runner *r, int32_t *out) {
    int32_t prompt[40];
    for (int i = 0; i < 40; i++) prompt[i] = (int32_t)(100 + (i * 37) % 700);
    uint32_t n = 0;
    pgd_offline_seq s = {.prompt = prompt, .n_prompt = 40, .out = out, .n_out = &n};
    pgd_seq_params_default(&s.params);
    s.params.sampling.temperature = 0;
    s.params.max_tokens = 8;
    s.params.ignore_eos = true;
    pgd_offline_stats st;
    int rc = pgd_offline_run(r, &s, 1, &st);
    if (rc) fprintf(stderr, "  run: %s\n", pgd_error_detail());
    return rc ? rc : n == 8 ? 0 : -1;
}

static void test_warmup(void) {
    pgd_model_info *info = NULL, *info_e = NULL;
    pgd_runner *r = NULL, *e = NULL;
    REQUIRE(open_runner(false, &info, &r) == 0);
    pgd_warmup_stats ws;
    CHECK_EQ_INT(pgd_warmup(r, &ws), 0);
    CHECK_EQ_INT(ws.runs, 2);
    CHECK_EQ_INT(ws.steps, 6);
    CHECK_EQ_INT(ws.tokens, 88);
    pgd_cuda_graph_stats gs;
    pgd_backend_cuda_graph_stats(pgd_runner_backend(r), &gs);
    fprintf(stderr, "    after the warm-up: %u graph(s) captured, %llu replay(s)\n", gs.captured,
            (unsigned long long)gs.replays);
    CHECK(gs.captured == 1 && gs.replays == 1 && !gs.off);

    int32_t got[8], want[8];
    CHECK_EQ_INT(greedy(r, got), 0);
    pgd_backend_cuda_graph_stats(pgd_runner_backend(r), &gs);
    CHECK(gs.captured == 1 && gs.replays == 1 + 7); /* the 7 decode steps: the warm-up's graph */
    REQUIRE(open_runner(true, &info_e, &e) == 0);
    CHECK_EQ_INT(greedy(e, want), 0);
    CHECK(memcmp(got, want, sizeof want) == 0);
    pgd_runner_destroy(e);
    pgd_model_info_close(info_e);
    pgd_runner_destroy(r);
    pgd_model_info_close(info);
}

int main(void) {
    if (!gt_start()) return 77;
    if (pgd_test_preset_file(
            "{\"model_type\": \"llama\", \"hidden_size\": 256, \"intermediate_size\": 512, "
            "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
            "\"vocab_size\": 1000, \"max_position_embeddings\": 512, \"rope_theta\": 10000, "
            "\"tie_word_embeddings\": false}",
            g_preset, sizeof g_preset)) {
        fprintf(stderr, "preset: %s\n", pgd_error_detail());
        return 1;
    }
    RUN(test_warmup);
    remove(g_preset);
    return test_summary();
}
