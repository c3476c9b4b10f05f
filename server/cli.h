/*
 * server/cli.h — the `pagoda` subcommands. main.c dispatches argv[1] to one of these; each
 * takes the remaining arguments (argv[0] is the subcommand name), prints its own usage on bad
 * flags, and returns the process exit status (0 ok, 1 failure, 2 usage error).
 *
 * Threading: called once from the main thread.
 */
#ifndef PGD_SERVER_CLI_H
#define PGD_SERVER_CLI_H

int pgd_cli_info(int argc, char **argv);       /* cli_info.c */
int pgd_cli_tokenize(int argc, char **argv);   /* cli_tokenize.c */
int pgd_cli_detokenize(int argc, char **argv); /* cli_tokenize.c */
int pgd_cli_template(int argc, char **argv);   /* cli_template.c */
int pgd_cli_dequant(int argc, char **argv);    /* cli_dequant.c */
int pgd_cli_generate(int argc, char **argv);   /* cli_generate.c */
int pgd_cli_eval(int argc, char **argv);       /* cli_generate.c */
int pgd_cli_bench(int argc, char **argv);      /* cli_bench.c */
int pgd_cli_serve(int argc, char **argv);      /* serve.c (PGD_SERVER builds) */

/* Shared helpers (cli_common.c). */

/* Find "--name VALUE" or "--name=VALUE" at argv[*i]; on a match stores VALUE, advances *i past
 * it and returns 1; returns 0 if argv[*i] is not that flag; -1 (after printing) when the value
 * is missing. */
int pgd_cli_flag_value(int argc, char **argv, int *i, const char *name, const char **value);

/* Seconds on the monotonic clock. */
double pgd_cli_now_s(void);

#endif
