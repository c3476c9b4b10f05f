/*
 * cli/flags.h — option tables, and the one table of engine flags that `serve`, `generate`,
 * `eval` and `bench` share.
 *
 * An option table lists flags by name (without "--"), type and the offset of the field they set
 * in a plain struct of strings, integers and booleans. The same table reads the command line
 * (--name VALUE, --name=VALUE; a boolean flag alone means true), PAGODA_NAME environment
 * variables and, for `serve`, the keys of a JSON config file (flag names with '_' for '-'), and
 * prints the usage lines. The engine flags land in pgd_engine_flags; pgd_engine_flags_resolve
 * turns them into what the engine and the scheduler take (engine/load.h, scheduler/sched.h),
 * where each default is written once.
 *
 * Threading: the main thread.
 */
#ifndef PGD_CLI_FLAGS_H
#define PGD_CLI_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/load.h"
#include "scheduler/sched.h"

typedef enum { PGD_OPT_STR, PGD_OPT_U64, PGD_OPT_BOOL } pgd_opt_type;

typedef struct pgd_opt {
    const char *name; /* without "--" */
    pgd_opt_type type;
    size_t off; /* of a const char *, uint64_t or bool field */
    const char *help;
} pgd_opt;

typedef struct pgd_opt_table {
    const pgd_opt *opts;
    size_t n;
    void *base;     /* the struct the offsets point into */
    uint64_t *seen; /* may be NULL; bit i set when opts[i] was given (any source; n <= 64) */
} pgd_opt_table;

/* The option named name[0..len) ('_' matches '-'), or NULL. *table gets its table. */
const pgd_opt *pgd_opt_find(const pgd_opt_table *tables, size_t n_tables, const char *name,
                            size_t len, const pgd_opt_table **table);

/* Set option o of table t from text v (`src` names where it came from, for the message). 0 or
 * -1 (printed). */
int pgd_opt_set(const pgd_opt_table *t, const pgd_opt *o, const char *v, const char *cmd,
                const char *src);

/* If argv[*i] is a flag of one of the tables, consume it (and its value): 1; 0 if it is none of
 * theirs; -1 after printing an error. */
int pgd_opt_parse_arg(const pgd_opt_table *tables, size_t n_tables, int argc, char **argv, int *i,
                      const char *cmd);

/* Read PAGODA_<NAME> ('-' as '_', upper case) for every option. 0 or -1 (printed). */
int pgd_opt_load_env(const pgd_opt_table *tables, size_t n_tables, const char *cmd);

/* Width of the flag column of the usage lines, and of a whole line (the help wraps). */
#define PGD_OPT_USAGE_COL   30
#define PGD_OPT_USAGE_WIDTH 100

/* One usage entry: `left` (the flag) in its column, then `help`, wrapped at
 * PGD_OPT_USAGE_WIDTH with every line starting at the column; a flag wider than the column
 * gets its help on the next line, so the help texts stay aligned. */
void pgd_opt_usage_line(FILE *f, const char *left, const char *help);

/* One usage line per option. */
void pgd_opt_usage(FILE *f, const pgd_opt_table *t);

/* ---- the engine flags ----------------------------------------------------------------------- */

typedef struct pgd_engine_flags {
    const char *model_path, *load_format, *model_preset, *chat_template, *kv_cache_dtype, *device,
        *gpu_memory_utilization, *gpu_weights, *sched_policy, *fair_prompt_factor,
        *fair_output_factor;
    uint64_t ctx_size, kv_cache_mb, block_size, max_num_batched_tokens, max_num_seqs, max_waiting,
        threads;
    bool f32, act_q8, no_prefix_caching, enforce_eager, batch_invariant, no_decode_gemv;
    uint64_t seen; /* which flags were given (pgd_opt_table.seen) */
} pgd_engine_flags;

/* The engine flags' table over f (all unset: zeros). Flags whose value 0 would mean "the
 * default" are refused when given as 0 (--kv-cache-mb, --block-size, --max-num-batched-tokens,
 * --max-num-seqs, --max-waiting); --ctx-size 0 and --threads 0 mean the default, as --help
 * says. */
pgd_opt_table pgd_engine_flags_table(pgd_engine_flags *f);

/* Their usage lines. */
void pgd_engine_flags_usage(FILE *f);

/* What the flags ask of the engine and the scheduler (unset = the component's default). 0 or
 * -1 (printed, prefixed "pagoda CMD:"): neither --model nor --model-preset, a bad
 * --load-format, --kv-cache-dtype or --sched-policy, a value out of range (fair factors must be
 * >= 0 and not both 0; the flags above given as 0). */
int pgd_engine_flags_resolve(const pgd_engine_flags *f, const char *cmd, pgd_load_options *load,
                             pgd_sched_config *sched);

/* pgd_load, or print why not (prefixed "pagoda CMD:"). 0 or 1. A --ctx-size beyond the
 * model's context is lowered to it with a note on stderr. */
int pgd_cli_load(const char *cmd, const pgd_load_options *load, pgd_model_info **info,
                 pgd_runner **runner);

#endif
