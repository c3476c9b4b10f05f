/*
 * cli/eval.c — `pagoda eval`: the logits of every prompt position, for the reference tests.
 * The prompt runs through the runner in chunks of --chunk tokens, each chunk planned and
 * allocated with the scheduler's plan (scheduler/plan.h) over a block table of its own, so the
 * KV cache is paged across steps exactly as when serving.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "common/error.h"
#include "engine/load.h"
#include "kvpool/block_table.h"
#include "kvpool/kvpool.h"
#include "scheduler/plan.h"
#include "scheduler/request.h"

static void eval_usage(FILE *f) {
    fprintf(f,
            "usage: pagoda eval --model PATH --out FILE [--chunk N] (--prompt TEXT | ID...)\n"
            "Run a prompt and write the logits of every position to FILE as raw little-endian\n"
            "float32 [n_tokens][n_vocab]; prints {\"n_tokens\",\"n_vocab\",\"tokens\"} as JSON.\n"
            "--chunk N feeds the prompt N tokens per step (paging across steps).\n\n"
            "engine flags:\n");
    pgd_engine_flags_usage(f);
}

/* Compute prompt[0..n) in steps of `step` tokens, writing every position's logits to f. 0 or 1
 * (printed). */
static int eval_prompt(pgd_runner *runner, const pgd_tokens *prompt, uint32_t step, FILE *f,
                       const char *out_path) {
    const pgd_backend_caps *caps = pgd_runner_caps(runner);
    const pgd_model_info *info = pgd_runner_info(runner);
    uint32_t V = info->n_vocab;
    pgd_kvpool *pool = NULL;
    pgd_plan *plan = NULL;
    pgd_seq *s = NULL;
    pgd_block_table bt;
    pgd_block_table_init(&bt, NULL, 0);
    int status = 1, rc;
    pgd_seq_params sp;
    pgd_seq_params_default(&sp);
    sp.sampling.temperature = 0;
    sp.max_tokens = 1;
    pgd_request req;
    pgd_request_init(&req);
    req.prompt = prompt->ids;
    req.n_prompt = (uint32_t)prompt->n;
    req.params = sp;
    pgd_req_limits lim;
    pgd_req_limits_of(info, caps, 1, &lim);
    if ((rc = pgd_request_check(&req, &lim))) {
        fprintf(stderr, "pagoda eval: %s\n", pgd_error_detail());
        return 1;
    }
    if ((rc = pgd_kvpool_create(caps->n_blocks, caps->block_size, false, &pool)) ||
        (rc = pgd_plan_create(step, &plan)) ||
        (rc = pgd_seq_create(runner, prompt->ids, (uint32_t)prompt->n, &sp, &s))) {
        fprintf(stderr, "pagoda eval: %s\n", pgd_error_detail());
        goto out;
    }
    pgd_block_table_init(&bt, pool, 0);
    while (bt.n_tokens < s->n_prompt) {
        uint32_t n = s->n_prompt - bt.n_tokens, k;
        if (n > step) n = step;
        pgd_step_plan *sp_view;
        pgd_plan_reset(plan);
        if ((rc = pgd_plan_add(plan, s, &bt, bt.n_tokens, n, true, NULL, &k)) ||
            (rc = pgd_plan_finish(plan, &sp_view)) || (rc = pgd_runner_step(runner, sp_view)) ||
            (rc = pgd_plan_commit(plan))) {
            fprintf(stderr, "pagoda eval: %s\n", pgd_error_detail());
            goto out;
        }
        const pgd_step_item *it = pgd_plan_item(plan, 0);
        for (uint32_t j = 0; j < n; j++)
            if (fwrite(pgd_runner_logits(runner, it->logits_row + j), sizeof(float), V, f) != V) {
                fprintf(stderr, "pagoda eval: write error on %s\n", out_path);
                goto out;
            }
    }
    status = 0;
out:
    if (pool) pgd_block_table_destroy(&bt);
    pgd_seq_destroy(s);
    pgd_plan_destroy(plan);
    pgd_kvpool_destroy(pool);
    return status;
}

int pgd_cli_eval(int argc, char **argv) {
    pgd_engine_flags ef = {0};
    pgd_opt_table engine = pgd_engine_flags_table(&ef);
    const char *out_path = NULL, *text = NULL, *v;
    uint64_t chunk = 0;
    pgd_tokens prompt = PGD_TOKENS_INIT;
    int r, status = 2;
    for (int i = 1; i < argc; i++) {
        if ((r = pgd_opt_parse_arg(&engine, 1, argc, argv, &i, "eval")) ||
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
    pgd_load_options lo;
    pgd_sched_config sc;
    if (!out_path || (!text && !prompt.n) || (text && prompt.n)) {
        eval_usage(stderr);
        goto out;
    }
    if (pgd_engine_flags_resolve(&ef, "eval", &lo, &sc)) goto out;
    status = 1;
    pgd_model_info *info = NULL;
    pgd_runner *runner = NULL;
    if (pgd_cli_load("eval", &lo, &info, &runner)) goto out;
    FILE *f = NULL;
    if (text && pgd_encode_text(info, text, strlen(text), false, &prompt)) {
        fprintf(stderr, "pagoda eval: %s\n", pgd_error_detail());
        goto done;
    }
    if (!(f = fopen(out_path, "wb"))) {
        fprintf(stderr, "pagoda eval: cannot write %s\n", out_path);
        goto done;
    }
    const pgd_backend_caps *caps = pgd_runner_caps(runner);
    uint32_t max =
        caps->max_logit_rows < caps->max_tokens ? caps->max_logit_rows : caps->max_tokens;
    uint32_t step = chunk && chunk < max ? (uint32_t)chunk : max;
    if (eval_prompt(runner, &prompt, step, f, out_path)) goto done;
    printf("{\"n_tokens\":%zu,\"n_vocab\":%u,\"tokens\":[", prompt.n, info->n_vocab);
    for (size_t i = 0; i < prompt.n; i++) printf("%s%d", i ? "," : "", prompt.ids[i]);
    printf("]}\n");
    status = 0;
done:
    if (f && fclose(f)) status = 1;
    pgd_runner_destroy(runner);
    pgd_model_info_close(info);
out:
    pgd_tokens_free(&prompt);
    return status;
}
