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
          "'pipebench <command> --help' shows a command's options.\n"
          "exit codes: 0 success, 1 usage error, 2 failure, 3 regression found (revs)\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    print_help(stderr);
    return CLI_USAGE;
  }
  const char *name = argv[1];
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
    rc = commands[i]->run(&args);
    cli_args_free(&args);
    return rc;
  }
  fprintf(stderr, "pipebench: unknown command '%s'\ntry 'pipebench --help'\n", name);
  return CLI_USAGE;
}
