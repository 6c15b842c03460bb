/* pipebench run: the benchmark tracks. */
#include <dlfcn.h>
#include <stddef.h>
#include <signal.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "pipebench/bench.h"
#include "pipebench/engine.h"
#include "pipebench/loader.h"

#define P pb_run_params
static const P run_defaults = PB_RUN_PARAMS_DEFAULTS;

/* One line per option (docs/options.md): the parser, --help, the range checks and
 * `pipebench help --options-json run` all come from here. */
static const cli_opt opts[] = {
    {.name = "tracks", .arg = "LIST", .type = CLI_LIST, CLI_AT(P, tracks), .help = "tracks to run: 1 per-sample, 2 loader, 3 model loop, 4 stages (default 1,2,3,4)"},
    {.name = "data", .arg = "DIR", .type = CLI_STRING, CLI_AT(P, data), .help = "a 'pipebench gen' folder or one dataset (default: generate the preset)"},
    {.name = "formats", .arg = "LIST", .type = CLI_LIST, CLI_AT(P, formats), .help = "formats to measure (default: all in --data; raw,tiff,ome-zarr,oa-dataset,ome-parquet when generating)"},
    {.name = "out", .arg = "DIR", .type = CLI_STRING, CLI_AT(P, out), .help = "results folder (default {})"},
    {.name = "preset", .arg = "NAME", .type = CLI_ENUM, CLI_AT(P, preset), .choices = "default,microscopy", .flags = CLI_UNKNOWN, .help = "default (1000 x 100x100 uint16) or microscopy (200 x 3x1080x1080 uint16)"},
    {.name = "cache", .arg = "STATE", .type = CLI_ENUM, CLI_AT(P, cold), .choices = "warm,cold", .flags = CLI_INDEX, .help = "warm (page cache allowed) or cold (files evicted before each round)"},
    {.name = "repeats", .arg = "N", .type = CLI_INT, CLI_AT(P, repeats), .lo = 1, .hi = 1000, .help = "rounds per configuration (default {})"},
    {.name = "samples", .arg = "N", .type = CLI_INT, CLI_AT(P, samples), .lo = 1, .hi = 10000000, .help = "track 1 and 4: samples measured per round (default {})"},
    {.name = "warmup", .arg = "N", .type = CLI_INT, CLI_AT(P, warmup), .lo = 0, .hi = 1000000, .help = "track 1 and 4: samples run and dropped first (default {})"},
    {.name = "batches", .arg = "N", .type = CLI_INT, CLI_AT(P, batches), .lo = 1, .hi = 10000000, .help = "track 2: batches measured per round after the first (default {})"},
    {.name = "window-ms", .arg = "MS", .type = CLI_DOUBLE, CLI_AT(P, window_ms), .dlo = 0, .dhi = 1e7, .help = "track 2: each round's steady window lasts at least this long (default {})"},
    {.name = "batch-sizes", .arg = "LIST...", .type = CLI_LIST, CLI_AT(P, batch_sizes), .help = "track 2 batch sizes (default {})"},
    {.name = "workers", .arg = "LIST...", .type = CLI_LIST, CLI_AT(P, workers), .help = "track 2 worker counts (default {})"},
    {.name = "caches", .arg = "LIST", .type = CLI_LIST, CLI_AT(P, caches), .help = "track 2 cache modes: none, preload, shared (default all)"},
    {.name = "transforms", .arg = "LIST", .type = CLI_LIST, CLI_AT(P, transforms), .help = "track 1 transforms: none, normalize, augment (default all)"},
    {.name = "model", .arg = "NAME", .type = CLI_STRING, CLI_AT(P, model), .help = "track 3 model (default {})"},
    {.name = "steps", .arg = "N", .type = CLI_INT, CLI_AT(P, steps), .lo = 1, .hi = 10000000, .help = "track 3 steps per round (default {})"},
    {.name = "emulate-ms", .arg = "MS", .type = CLI_DOUBLE, CLI_AT(P, emulate_ms), .dlo = 0, .dhi = 1e6, .help = "track 3: a fixed compute time per batch instead of a model"},
    {.name = "train", .type = CLI_FLAG, CLI_AT(P, train), .help = "track 3: an SGD step per batch instead of inference"},
    {.name = "t3-batch", .arg = "N", .type = CLI_INT, CLI_AT(P, t3_batch), .lo = 1, .hi = 65536, .help = "track 3 batch size (default {})"},
    {.name = "t3-workers", .arg = "N", .type = CLI_INT, CLI_AT(P, t3_workers), .lo = 0, .hi = 1024, .help = "track 3 loader workers (default {})"},
    {.name = "reads-in-flight", .arg = "N", .type = CLI_INT, CLI_AT(P, reads_in_flight), .lo = 0, .hi = 4096, .help = "tracks 2 and 3: sample reads in flight across the loader's workers (0: auto, 32 for a URL, one per worker for a path); --in-flight is requests inside one read"},
    {.name = "bytes-in-flight", .arg = "SIZE", .type = CLI_STRING, CLI_AT(P, bytes_in_flight), .set = cli_set_bytes_in_flight, .show = cli_show_i64, .help = "tracks 2 and 3: most bytes those reads hold at once, an image's decoded size each (K, M, G suffixes; 0: auto, 64M)"},
    {.name = "decode", .arg = "WHERE", .type = CLI_ENUM, CLI_AT(P, decode), .choices = "cpu,gpu,auto", .help = "track 3 on cuda over an image folder: where JPEGs are decoded and cropped: cpu (default), gpu (nvJPEG), auto (each batch split between the workers and nvJPEG, where nvJPEG loads)"},
    {.name = "device", .arg = "DEV", .type = CLI_STRING, CLI_AT(P, device), .help = "track 3 and 4: auto (default: cuda when usable here, else cpu), cpu, cuda"},
    {.name = "dtype", .arg = "TYPE", .type = CLI_STRING, CLI_AT(P, dtype), .help = "track 3 compute type (default float32 on cpu, bfloat16 on cuda)"},
    {.name = "framework", .arg = "NAME", .type = CLI_STRING, CLI_AT(P, framework), .help = "track 3: torch: a torch model fed by pipebench, torch's DataLoader and device-resident input"},
    {.name = "torch-model", .arg = "FILE.py:FN", .type = CLI_STRING, CLI_AT(P, torch_model), .help = "track 3 --framework torch: FN() returns your nn.Module (default: --model from torchvision)"},
    {.name = "calibration", .arg = "FILE", .type = CLI_STRING, CLI_AT(P, calibration), .help = "take the machine's limits from FILE (saved by 'pipebench calibrate --out FILE' on this machine) instead of measuring them (default: PIPEBENCH_CALIBRATION, else measured)"},
    {.name = "torch-compile", .type = CLI_FLAG, CLI_AT(P, torch_compile), .help = "track 3 --framework torch: run the model through torch.compile (its compile bound is the resident row)"},
    {.name = "no-peer", .type = CLI_FLAG, CLI_AT(P, peer), .flags = CLI_NEGATE, .help = "skip the torch DataLoader peer in track 2"},
    {.name = "seed", .arg = "S", .type = CLI_INT, CLI_AT(P, seed), .lo = 0, .hi = 0x7fffffffffffffffL, .help = "seed (default {})"},
    {.name = "python", .arg = "PATH", .type = CLI_STRING, CLI_AT(P, python), .help = "Python with numpy and torch (default {})"},
    {.name = "ranks", .arg = "N", .type = CLI_INT, .lo = 1, .hi = 4096, .help = "start N ranks on this host through mpirun (tracks 2 and 3; docs/scaling.md)"},
    CLI_REMOTE_OPTS,
    {.name = NULL},
};

/* The signal that asked the run to stop (0: none). The handler only stores it: pb_run's loops
 * and child-process waits look at it and unwind within a second. */
static volatile sig_atomic_t stop_signal = 0;

static void on_signal(int sig) { stop_signal = sig; }

static void on_progress(void *ctx, const char *what, long done, long total) {
  int64_t *start = ctx;
  cli_progress(what, done, total, (double)(pb_now_ns() - *start) / 1e9);
}

static void on_report(void *ctx, const char *line) {
  (void)ctx;
  cli_progress(NULL, 0, 0, 0);
  fprintf(stderr, "run: %s\n", line);
}

static volatile sig_atomic_t g_ranks_child, g_ranks_signal;

/* mpirun shares this process's group, so a Ctrl-C at the terminal (sent by the kernel to the
 * whole group) reaches it already; a signal another process sent to this one alone is passed
 * on. Passing the terminal's on too would be a second Ctrl-C, which makes mpirun kill the ranks
 * at once instead of letting them stop cleanly. */
static void forward_to_ranks(int sig, siginfo_t *info, void *uctx) {
  (void)uctx;
  g_ranks_signal = sig;
  if (g_ranks_child > 0 && (info == NULL || info->si_code == SI_USER || info->si_code == SI_QUEUE))
    kill((pid_t)g_ranks_child, sig);
}

/* --ranks N: the same command, without --ranks, as N processes under mpirun on this host
 * (oversubscribed when N exceeds the cores; not bound to cores, so each rank's loader threads
 * can spread). Returns mpirun's exit status. */
static int launch_ranks(const cli_args *a, long n) {
  char exe[4096];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0) return cli_fail("run", "--ranks: cannot find this program (/proc/self/exe)");
  exe[len] = '\0';
  char np[24];
  snprintf(np, sizeof np, "%ld", n);
  const char *argv[2 * CLI_MAX_OPTS + 16];
  int k = 0;
  argv[k++] = "mpirun";
  if (geteuid() == 0) argv[k++] = "--allow-run-as-root";
  argv[k++] = "--oversubscribe";
  argv[k++] = "--bind-to";
  argv[k++] = "none";
  argv[k++] = "-np";
  argv[k++] = np;
  argv[k++] = exe;
  argv[k++] = "run";
  char names[CLI_MAX_OPTS][64];
  for (int i = 0; i < a->n_opts; i++) {
    if (!a->set[i] || strcmp(a->opts[i].name, "ranks") == 0) continue;
    snprintf(names[i], sizeof names[i], "--%s", a->opts[i].name);
    argv[k++] = names[i];
    if (a->opts[i].arg != NULL && a->values[i] != NULL) argv[k++] = a->values[i];
  }
  argv[k] = NULL;
  /* A signal to this process alone (kill PID, a job scheduler's SIGTERM) goes on to mpirun,
   * which passes it to the ranks: nothing keeps running after the launcher. The handlers are in
   * place before the fork, so no signal falls between the two; exec resets them in the child. */
  struct sigaction fw, old_int, old_term, old_hup;
  memset(&fw, 0, sizeof fw);
  fw.sa_sigaction = forward_to_ranks;
  fw.sa_flags = SA_SIGINFO;
  sigemptyset(&fw.sa_mask);
  g_ranks_child = 0;
  g_ranks_signal = 0;
  sigaction(SIGINT, &fw, &old_int);
  sigaction(SIGTERM, &fw, &old_term);
  sigaction(SIGHUP, &fw, &old_hup);
  fflush(NULL);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGHUP, &old_hup, NULL);
    return cli_fail("run", "--ranks: fork: %s", strerror(e));
  }
  if (pid == 0) {
    /* A SIGKILL of this launcher (no handler passes it on) reaches mpirun as SIGTERM, which it
     * passes to the ranks; had we died before the prctl, the parent is another by now. */
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent) _exit(127);
    execvp(argv[0], (char *const *)argv);
    fprintf(stderr, "pipebench run: --ranks needs mpirun (Debian: openmpi-bin): %s\n", strerror(errno));
    _exit(127);
  }
  g_ranks_child = pid;
  if (g_ranks_signal != 0) kill(pid, (int)g_ranks_signal); /* it came before mpirun started */
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  sigaction(SIGHUP, &old_hup, NULL);
  g_ranks_child = 0;
  if (g_ranks_signal != 0) {
    fprintf(stderr, "pipebench run: stopped by signal %d; the %ld ranks were stopped with it\n",
            (int)g_ranks_signal, n);
    return 128 + (int)g_ranks_signal;
  }
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return CLI_OK;
  if (WIFEXITED(st) && WEXITSTATUS(st) == CLI_USAGE) return CLI_USAGE;
  if (WIFEXITED(st) && WEXITSTATUS(st) == 127) return CLI_FAIL;
  fprintf(stderr, "pipebench run: the %ld ranks failed (mpirun %s %d)\n", n,
          WIFEXITED(st) ? "exit status" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
  return CLI_FAIL;
}

static int run(const cli_args *a) {
  if (cli_get(a, "ranks") != NULL) {
    long n;
    PB_RETURN_NOT_OK(cli_long(a, "ranks", &n));
    if (pb_mpi_env_size() > 0)
      return cli_usage_error("run", "--ranks starts the ranks itself; under mpirun leave it out");
    return launch_ranks(a, n);
  }
  pb_run_params p = run_defaults;
  PB_RETURN_NOT_OK(cli_fill(a, &p));
  /* The Python binding loads the same library this program runs with (libpipebench, which
   * holds pb_version; the benchmark library beside it comes with it). */
  Dl_info info;
  void *sym = dlsym(RTLD_DEFAULT, "pb_version");
  if (sym != NULL && dladdr(sym, &info) != 0 && info.dli_fname != NULL) p.library = info.dli_fname;

  int64_t start = pb_now_ns();
  p.progress = on_progress;
  p.progress_ctx = &start;
  p.report = on_report;
  /* SIGINT/SIGTERM stop the run cleanly: the earlier results stay, exit 128 + the signal as a
   * shell reports it. SA_RESETHAND: a second Ctrl-C ends the program at once. SA_RESTART: the
   * loader's reads are not disturbed, only our waits look at the flag. */
  struct sigaction sa, old_int, old_term;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = (int)(SA_RESETHAND | SA_RESTART);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  p.cancel = &stop_signal;
  struct pb_error err = {{0}};
  int rc = pb_run(&p, &err);
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  cli_progress(NULL, 0, 0, 0);
  int sig = stop_signal;
  /* Under mpirun every rank ends with the same (agreed) status and message: rank 0 says it. */
  if (pb_mpi_env_rank() != 0)
    return rc == PB_OK ? CLI_OK : rc == PB_ECANCELED && sig ? 128 + sig : rc == PB_EINVAL ? CLI_USAGE : CLI_FAIL;
  if (rc == PB_ECANCELED && sig != 0) {
    fprintf(stderr, "pipebench run: %s; the earlier results in %s are as they were, and "
                    "%s/data/pipebench_summary_failed.json says what was finished\n",
            err.message, p.out, p.out);
    return 128 + sig;
  }
  if (rc == PB_EINVAL) return cli_usage_error("run", "%s", err.message);
  if (rc != PB_OK) return cli_fail("run", "%s", err.message);
  fprintf(stderr, "run: done in %.0f s; results in %s/data\n", (double)(pb_now_ns() - start) / 1e9, p.out);
  return CLI_OK;
}

const cli_command cli_cmd_run = {
    .name = "run",
    .summary = "run the benchmark tracks over formats, loader settings and cache modes",
    .usage = "[--tracks 1,2,3,4] [--data DIR] [--formats LIST] [--out OUT] [--preset P] [--cache warm|cold]",
    .details = "Track 1: per-sample latency (sequential/random, transforms, cache none/preload).\n"
               "Track 2: loader throughput over batch sizes x workers x cache modes, with the\n"
               "         torch DataLoader peer over the same TIFF, OME-Zarr and image-folder\n"
               "         files (tifffile, zarr-python, torchvision's ImageFolder with PIL and\n"
               "         with decode_jpeg): cache none at every batch size x workers, preload\n"
               "         at batch 16 with 2 workers; other formats and mpirun get no peer.\n"
               "Track 3: loader -> model loop: step time, data wait, accelerator utilisation.\n"
               "Track 4: where one sample's time goes, and the hand-off to torch (DLPack).\n"
               "Writes OUT/data/pipebench_track{1,2,3,4}.parquet and pipebench_summary.json.\n"
               "SIGINT/SIGTERM stop it within a second, keep the earlier results and exit\n"
               "130/143; a failed run writes OUT/data/pipebench_summary_failed.json.",
    .opts = opts,
    .defaults = &run_defaults,
    .params = "pb_run_params",
    .run = run,
};
