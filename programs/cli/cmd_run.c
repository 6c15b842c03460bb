/* pipebench run: the benchmark tracks. */
#include <dlfcn.h>
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

static const cli_opt opts[] = {
    {"tracks", "LIST", "tracks to run: 1 per-sample, 2 loader, 3 model loop, 4 stages (default 1,2,3,4)"},
    {"data", "DIR", "a 'pipebench gen' folder or one dataset (default: generate the preset)"},
    {"formats", "LIST", "formats to measure (default: all in --data; raw,tiff,ome-zarr,oa-dataset,ome-parquet when generating)"},
    {"out", "DIR", "results folder (default results/run)"},
    {"preset", "NAME", "default (1000 x 100x100 uint16) or microscopy (200 x 3x1080x1080 uint16)"},
    {"cache", "STATE", "warm (page cache allowed) or cold (files evicted before each round)"},
    {"repeats", "N", "rounds per configuration (default 3)"},
    {"samples", "N", "track 1 and 4: samples measured per round (default 100)"},
    {"warmup", "N", "track 1 and 4: samples run and dropped first (default 10)"},
    {"batches", "N", "track 2: batches measured per round after the first (default 50)"},
    {"window-ms", "MS", "track 2: each round's steady window lasts at least this long (default 100)"},
    {"batch-sizes", "LIST...", "track 2 batch sizes (default 1,4,16,64)"},
    {"workers", "LIST...", "track 2 worker counts (default 0,1,2,4)"},
    {"caches", "LIST", "track 2 cache modes: none, preload, shared (default all)"},
    {"transforms", "LIST", "track 1 transforms: none, normalize, augment (default all)"},
    {"model", "NAME", "track 3 model (default embed)"},
    {"steps", "N", "track 3 steps per round (default 50)"},
    {"emulate-ms", "MS", "track 3: a fixed compute time per batch instead of a model"},
    {"train", NULL, "track 3: an SGD step per batch instead of inference"},
    {"t3-batch", "N", "track 3 batch size (default 16)"},
    {"t3-workers", "N", "track 3 loader workers (default 2)"},
    {"device", "DEV", "track 3 and 4: auto (default: cuda when usable here, else cpu), cpu, cuda"},
    {"dtype", "TYPE", "track 3 compute type (default float32 on cpu, bfloat16 on cuda)"},
    {"framework", "NAME", "track 3: torch: a torch model fed by pipebench, torch's DataLoader and device-resident input"},
    {"torch-model", "FILE.py:FN", "track 3 --framework torch: FN() returns your nn.Module (default: --model from torchvision)"},
    {"no-peer", NULL, "skip the torch DataLoader peer in track 2"},
    {"seed", "S", "seed (default 42)"},
    {"python", "PATH", "Python with numpy and torch (default /usr/bin/python3)"},
    {"ranks", "N", "start N ranks on this host through mpirun (tracks 2 and 3; docs/scaling.md)"},
    {NULL, NULL, NULL},
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
    PB_RETURN_NOT_OK(cli_get_long(a, "run", "ranks", 1, 1, 4096, &n));
    if (pb_mpi_env_size() > 0)
      return cli_usage_error("run", "--ranks starts the ranks itself; under mpirun leave it out");
    return launch_ranks(a, n);
  }
  pb_run_params p = PB_RUN_PARAMS_DEFAULTS;
  long repeats, samples, warmup, batches, steps, seed;
  double emulate;
  PB_RETURN_NOT_OK(cli_get_long(a, "run", "repeats", 3, 1, 1000, &repeats));
  PB_RETURN_NOT_OK(cli_get_long(a, "run", "samples", 100, 1, 10000000, &samples));
  PB_RETURN_NOT_OK(cli_get_long(a, "run", "warmup", 10, 0, 1000000, &warmup));
  PB_RETURN_NOT_OK(cli_get_long(a, "run", "batches", 50, 1, 10000000, &batches));
  PB_RETURN_NOT_OK(cli_get_long(a, "run", "steps", 50, 1, 10000000, &steps));
  PB_RETURN_NOT_OK(cli_get_long(a, "run", "seed", 42, 0, 0x7fffffffffffffffL, &seed));
  PB_RETURN_NOT_OK(cli_get_double(a, "run", "emulate-ms", 0, 0, 1e6, &emulate));
  long t3_batch, t3_workers;
  PB_RETURN_NOT_OK(cli_get_long(a, "run", "t3-batch", 16, 1, 65536, &t3_batch));
  PB_RETURN_NOT_OK(cli_get_long(a, "run", "t3-workers", 2, 0, 1024, &t3_workers));
  p.t3_batch = (int)t3_batch;
  p.t3_workers = (int)t3_workers;
  double window_ms;
  PB_RETURN_NOT_OK(cli_get_double(a, "run", "window-ms", 100, 0, 1e7, &window_ms));
  p.window_ms = window_ms;
  p.repeats = (int)repeats;
  p.samples = (int)samples;
  p.warmup = (int)warmup;
  p.batches = (int)batches;
  p.steps = (int)steps;
  p.seed = (uint64_t)seed;
  p.emulate_ms = emulate;
  p.train = cli_has(a, "train");
  p.peer = !cli_has(a, "no-peer");
  if (cli_get(a, "tracks")) p.tracks = cli_get(a, "tracks");
  if (cli_get(a, "data")) p.data = cli_get(a, "data");
  if (cli_get(a, "formats")) p.formats = cli_get(a, "formats");
  if (cli_get(a, "out")) p.out = cli_get(a, "out");
  if (cli_get(a, "preset")) p.preset = cli_get(a, "preset");
  if (cli_get(a, "batch-sizes")) p.batch_sizes = cli_get(a, "batch-sizes");
  if (cli_get(a, "workers")) p.workers = cli_get(a, "workers");
  if (cli_get(a, "caches")) p.caches = cli_get(a, "caches");
  if (cli_get(a, "transforms")) p.transforms = cli_get(a, "transforms");
  if (cli_get(a, "model")) p.model = cli_get(a, "model");
  if (cli_get(a, "python")) p.python = cli_get(a, "python");
  if (cli_get(a, "device")) p.device = cli_get(a, "device");
  if (cli_get(a, "dtype")) p.dtype = cli_get(a, "dtype");
  if (cli_get(a, "framework")) p.framework = cli_get(a, "framework");
  if (cli_get(a, "torch-model")) p.torch_model = cli_get(a, "torch-model");
  const char *cache = cli_get(a, "cache");
  if (cache != NULL) {
    if (strcmp(cache, "cold") == 0) p.cold = 1;
    else if (strcmp(cache, "warm") != 0)
      return cli_usage_error("run", "--cache must be warm or cold, not '%s'", cache);
  }
  if (strcmp(p.preset, "default") != 0 && strcmp(p.preset, "microscopy") != 0)
    return cli_usage_error("run", "unknown preset '%s' (default, microscopy)", p.preset);
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
    .run = run,
};
