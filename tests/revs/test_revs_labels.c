/* Short labels of branch names in the revs plot: names sharing a long part stay distinct, and
 * what tells them apart is kept. */
#include <stdio.h>
#include <string.h>

#include "revs/revs_internal.h"

#include "check.h"

#define L 64

int main(void) {
  /* the guide's branches: a shared "claude/" and a shared "-014viXtwt7gNsiG4xedaMKNA" */
  const char *guide[] = {"claude/optimize-gpu-performance-014viXtwt7gNsiG4xedaMKNA",
                         "claude/tensorrt-integration-phase2-014viXtwt7gNsiG4xedaMKNA",
                         "claude/advanced-optimizations-phase3-014viXtwt7gNsiG4xedaMKNA",
                         "claude/benchmarking-phase4-014viXtwt7gNsiG4xedaMKNA",
                         "claude/all-optimizations-combined-014viXtwt7gNsiG4xedaMKNA"};
  char out[5][L];
  pb__revs_short_labels(guide, 5, 40, &out[0][0], L);
  for (int i = 0; i < 5; i++) {
    fprintf(stderr, "  %s -> %s\n", guide[i], out[i]);
    EXPECT(strlen(out[i]) <= 40);
    EXPECT(strstr(out[i], "xedaMKNA") == NULL); /* the shared id goes first */
    for (int j = 0; j < i; j++) EXPECT(strcmp(out[i], out[j]) != 0);
  }
  EXPECT_STREQ(out[0], "claude/optimize-gpu-performance...");
  EXPECT_STREQ(out[3], "claude/benchmarking-phase4...");

  /* tighter: the shared start goes too, then the differing part is cut at its end */
  pb__revs_short_labels(guide, 5, 20, &out[0][0], L);
  for (int i = 0; i < 5; i++) {
    fprintf(stderr, "  %s -> %s\n", guide[i], out[i]);
    EXPECT(strlen(out[i]) <= 20);
    EXPECT(strncmp(out[i], "...", 3) == 0);
    for (int j = 0; j < i; j++) EXPECT(strcmp(out[i], out[j]) != 0);
  }
  EXPECT_STREQ(out[1], "...tensorrt-integ...");

  /* names that fit stay whole; one name alone is cut at its end */
  const char *two[] = {"main", "slow"};
  pb__revs_short_labels(two, 2, 40, &out[0][0], L);
  EXPECT_STREQ(out[0], "main");
  EXPECT_STREQ(out[1], "slow");
  const char *one[] = {"feature/a-very-long-branch-name-that-goes-on-and-on"};
  pb__revs_short_labels(one, 1, 20, &out[0][0], L);
  EXPECT(strlen(out[0]) <= 20);
  EXPECT(strncmp(out[0], "feature/a-very", 14) == 0);
  if (check_failures()) fprintf(stderr, "%d check(s) failed\n", check_failures());
  else fprintf(stderr, "all checks passed\n");
  return check_failures() ? 1 : 0;
}
