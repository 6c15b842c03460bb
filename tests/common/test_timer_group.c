/* pb__timer_group: how many items each timed interval holds so that the timer costs under 1%
 * of it. Worked cases with a 25 ns timer: 200 * 25 ns = 5 us is the interval wanted. */
#include <math.h>
#include <stdio.h>

#include "tracks/harness.h"

#include "check.h"


int main(void) {
  double slow[] = {40e-6, 12e-6, 30e-6};        /* shortest 12 us >= 5 us: one at a time */
  EXPECT_EQ(pb__timer_group(25.0, slow, 3, 1024), 1);
  double pops[] = {20e-6, 0.3e-6, 15e-6, 0.5e-6}; /* shortest 0.3 us: ceil(5 / 0.3) = 17 */
  EXPECT_EQ(pb__timer_group(25.0, pops, 4, 1024), 17);
  double exact[] = {1e-6};                      /* 5 us / 1 us = 5 exactly */
  EXPECT_EQ(pb__timer_group(25.0, exact, 1, 1024), 5);
  EXPECT_EQ(pb__timer_group(25.0, pops, 4, 8), 8); /* capped */
  double zero[] = {2e-6, 0.0};                  /* below the clock's resolution: the cap */
  EXPECT_EQ(pb__timer_group(25.0, zero, 2, 64), 64);
  EXPECT_EQ(pb__timer_group(25.0, pops, 0, 1024), 1); /* no pilot */
  EXPECT_EQ(pb__timer_group(0.0, pops, 4, 1024), 1);  /* no timer cost measured */
  double nan_[] = {NAN};
  EXPECT_EQ(pb__timer_group(25.0, nan_, 1, 32), 32);
  /* Every interval of g items of the pilot's shortest length then costs the timer <= 0.5%. */
  int g = pb__timer_group(27.0, pops, 4, 1 << 20);
  if (27e-9 / (g * 0.3e-6) > 0.005) {
    EXPECT_FAIL("group %d leaves the timer at %.4f of an interval", g, 27e-9 / (g * 0.3e-6));
  }
  /* A restarted window: at least twice the old group, more when the interval asks for it. */
  EXPECT_EQ(pb__timer_regroup(25.0, 4e-6, 4, 1024), 8);     /* 1 us per item: 5, so twice 4 */
  EXPECT_EQ(pb__timer_regroup(25.0, 0.4e-6, 4, 1024), 50);  /* 0.1 us per item: 50 */
  EXPECT_EQ(pb__timer_regroup(25.0, 0.4e-6, 4, 32), 32);    /* capped */
  EXPECT_EQ(pb__timer_regroup(25.0, 4e-6, 3, 7), 6);        /* twice, under an odd cap */
  EXPECT_EQ(pb__timer_regroup(25.0, 4e-6, 4, 7), 7);        /* twice would pass the cap */
  if (check_failures() == 0) printf("timer_group: all checks passed\n");
  return check_failures() != 0;
}
