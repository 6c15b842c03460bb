/* What exists once: the temporary folder (pb_tmp_dir), the MPI launcher's rank and size read
 * from the environment (pb_mpi_env_rank, pb_mpi_env_size), and the installed tree's lookup,
 * which finds nothing in a build tree (pb_install_path). */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pipebench/bench.h"
#include "pipebench/sys.h"

static void clear_launcher(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK",
                                     "PMI_SIZE", "PMIX_RANK", "PMIX_SIZE", NULL};
  for (int k = 0; vars[k] != NULL; k++) unsetenv(vars[k]);
}

int main(void) {
  /* TMPDIR: an absolute path is used as it is; unset, empty or relative falls back to /tmp */
  unsetenv("TMPDIR");
  EXPECT_STREQ(pb_tmp_dir(), "/tmp");
  setenv("TMPDIR", "", 1);
  EXPECT_STREQ(pb_tmp_dir(), "/tmp");
  setenv("TMPDIR", "relative/dir", 1);
  EXPECT_STREQ(pb_tmp_dir(), "/tmp");
  setenv("TMPDIR", "/var/tmp/pb test", 1);
  EXPECT_STREQ(pb_tmp_dir(), "/var/tmp/pb test");
  char longdir[1100];
  memset(longdir, 'a', sizeof longdir - 1);
  longdir[0] = '/';
  longdir[sizeof longdir - 1] = '\0';
  setenv("TMPDIR", longdir, 1);
  EXPECT_STREQ(pb_tmp_dir(), "/tmp");
  unsetenv("TMPDIR");

  /* no launcher: rank 0 of none */
  clear_launcher();
  EXPECT_EQ(pb_mpi_env_rank(), 0);
  EXPECT_EQ(pb_mpi_env_size(), 0);
  /* Open MPI's mpirun */
  setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  EXPECT_EQ(pb_mpi_env_rank(), 3);
  EXPECT_EQ(pb_mpi_env_size(), 4);
  /* a PMIx launcher that sets only the rank (train and infer read it; run did not) */
  clear_launcher();
  setenv("PMIX_RANK", "2", 1);
  EXPECT_EQ(pb_mpi_env_rank(), 2);
  EXPECT_EQ(pb_mpi_env_size(), 1);
  /* PMI (Hydra, Slurm's PMI-1) */
  clear_launcher();
  setenv("PMI_RANK", "1", 1);
  setenv("PMI_SIZE", "2", 1);
  EXPECT_EQ(pb_mpi_env_rank(), 1);
  EXPECT_EQ(pb_mpi_env_size(), 2);
  clear_launcher();

  /* a build tree has no share/pipebench beside the library */
  char buf[4096] = "x";
  EXPECT_EQ(pb_install_path("python", "pipebench_peer.py", buf, sizeof buf), 0);
  EXPECT_STREQ(buf, "");
  return check_failures() != 0;
}
