/*
 * cli/cli.h — the `pagoda` subcommands and the helpers they share. main.c dispatches argv[1] to
 * one of these; each takes the remaining arguments (argv[0] is the subcommand name), prints its
 * own usage on bad flags, and returns the process exit status (0 ok, 1 failure, 2 usage error).
 *
 * Threading: called once from the main thread.
 */
#ifndef PGD_CLI_CLI_H
#define PGD_CLI_CLI_H

#include <stdint.h>

int pgd_cli_info(int argc, char **argv);       /* info.c */
int pgd_cli_tokenize(int argc, char **argv);   /* tokenize.c */
int pgd_cli_detokenize(int argc, char **argv); /* tokenize.c */
int pgd_cli_template(int argc, char **argv);   /* template.c */
int pgd_cli_dequant(int argc, char **argv);    /* dequant.c */
int pgd_cli_generate(int argc, char **argv);   /* generate.c */
int pgd_cli_eval(int argc, char **argv);       /* eval.c */
int pgd_cli_bench(int argc, char **argv);      /* bench.c */
int pgd_cli_serve(int argc, char **argv);      /* serve.c (PGD_SERVER builds) */
int pgd_cli_hash_key(int argc, char **argv);   /* serve.c (PGD_SERVER builds) */

/* Shared helpers (common.c). */

/* Find "--name VALUE" or "--name=VALUE" at argv[*i]; on a match stores VALUE, advances *i past
 * it and returns 1; returns 0 if argv[*i] is not that flag; -1 (after printing) when the value
 * is missing. */
int pgd_cli_flag_value(int argc, char **argv, int *i, const char *name, const char **value);

/* Parse an unsigned integer / float flag value; -1 (printed, naming cmd and flag) on garbage. */
int pgd_cli_parse_u64(const char *cmd, const char *flag, const char *v, uint64_t *out);
int pgd_cli_parse_f32(const char *cmd, const char *flag, const char *v, float *out);

#endif
