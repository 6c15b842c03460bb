/* pipebench: the command-line tool. Dispatches to one file per command. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "pipebench/core.h"

/* Every command the tool has, in the order help lists them. */
static const cli_command *const commands[] = {
    &cli_cmd_run,
    &cli_cmd_gen,
    &cli_cmd_convert,
    &cli_cmd_inspect,
    &cli_cmd_verify,
    &cli_cmd_calibrate,
    &cli_cmd_infer,
    &cli_cmd_train,
    &cli_cmd_report,
    &cli_cmd_revs,
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void print_help(FILE *f) {
  fprintf(f,
          "usage: pipebench <command> [options]\n\n"
          "pipebench measures which storage format and loader configuration feeds an image model\n"
          "fastest, where the time goes, and whether the job is data-bound.\n\ncommands:\n");
  for (size_t i = 0; i < N_COMMANDS; i++)
    fprintf(f, "  %-11s %s\n", commands[i]->name, commands[i]->summary);
  fprintf(f,
          "\n  --version   print version and git commit\n"
          "  --help      show this help\n\n"
          "'pipebench <command> --help' shows a command's options;\n"
          "'pipebench help --options-json [command]' prints the option tables as JSON.\n"
          "exit codes: 0 success, 1 usage error, 2 failure, 3 regression found (revs)\n");
}

/* pipebench help --options-json [COMMAND...]: the option tables as JSON (one object per
 * command, in a list when no command is named), for the docs and Python checks. */
static int options_json(int argc, char **argv) {
  int all = argc == 0;
  for (int k = 0; k < argc; k++) {
    size_t i = 0;
    while (i < N_COMMANDS && strcmp(commands[i]->name, argv[k]) != 0) i++;
    if (i == N_COMMANDS) {
      fprintf(stderr, "pipebench help: unknown command '%s'\ntry 'pipebench --help'\n", argv[k]);
      return CLI_USAGE;
    }
  }
  if (all || argc > 1) printf("[");
  int n = 0;
  for (size_t i = 0; i < N_COMMANDS; i++) {
    int want = all;
    for (int k = 0; k < argc; k++) want |= strcmp(commands[i]->name, argv[k]) == 0;
    if (!want) continue;
    if (n++ > 0) printf(",");
    cli_print_options_json(commands[i], stdout);
  }
  if (all || argc > 1) printf("]\n");
  return CLI_OK;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    print_help(stderr);
    return CLI_USAGE;
  }
  const char *name = argv[1];
  if (strcmp(name, "help") == 0 && argc >= 3 && strcmp(argv[2], "--options-json") == 0)
    return options_json(argc - 3, argv + 3);
  if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
    print_help(stdout);
    return CLI_OK;
  }
  if (strcmp(name, "--version") == 0 || strcmp(name, "version") == 0) {
    printf("pipebench %s (git %s)\n", pb_version(), pb_git_commit());
    return CLI_OK;
  }
  for (size_t i = 0; i < N_COMMANDS; i++) {
    if (strcmp(commands[i]->name, name) != 0) continue;
    cli_args args;
    int rc = cli_parse(commands[i], argc - 2, argv + 2, &args);
    if (rc == -1) return CLI_OK;
    if (rc != CLI_OK) return rc;
    rc = cli_remote_apply(&args);
    if (rc == CLI_OK) rc = commands[i]->run(&args);
    cli_args_free(&args);
    return rc;
  }
  fprintf(stderr, "pipebench: unknown command '%s'\ntry 'pipebench --help'\n", name);
  return CLI_USAGE;
}
