/* tests/check.h itself: every check passes on true cases, and on false ones prints file:line,
 * the expression and both values, stops (CHECK, FAIL) or counts and goes on (EXPECT). Each
 * failing case runs in a child whose stderr is read back. */
#include <math.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

static int bad;

/* Runs fn in a child; returns its exit status and leaves its stderr in out. */
static int run_child(void (*fn)(void), char *out, size_t size) {
  int fds[2];
  if (pipe(fds) != 0) FAIL("pipe failed");
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) FAIL("fork failed");
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 2);
    fn();
    exit(check_failures() != 0 ? 3 : 0);
  }
  close(fds[1]);
  size_t n = 0;
  ssize_t r;
  while (n + 1 < size && (r = read(fds[0], out + n, size - 1 - n)) > 0) n += (size_t)r;
  out[n] = '\0';
  close(fds[0]);
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

/* want_text: what stderr must hold (NULL-terminated); absent: what it must not (or NULL). */
static void expect_child(const char *name, void (*fn)(void), int want_status,
                         const char *const *want_text, const char *absent) {
  char out[4096];
  int status = run_child(fn, out, sizeof out);
  if (status != want_status) {
    fprintf(stderr, "%s: exit status %d, wanted %d; stderr:\n%s", name, status, want_status, out);
    bad++;
  }
  for (const char *const *w = want_text; *w; w++) {
    if (strstr(out, *w) == NULL) {
      fprintf(stderr, "%s: stderr lacks \"%s\"; it was:\n%s", name, *w, out);
      bad++;
    }
  }
  if (absent && strstr(out, absent) != NULL) {
    fprintf(stderr, "%s: went on after the failure:\n%s", name, out);
    bad++;
  }
}

static void all_pass(void) {
  struct pb_error err = {{0}};
  uint64_t big = UINT64_MAX;
  CHECK(1 + 1 == 2);
  CHECK_EQ(big, UINT64_MAX);
  CHECK_EQ((size_t)7, 7);
  CHECK_STREQ("abc", "abc");
  CHECK_NEAR(1.0, 1.0 + 1e-12, 1e-9);
  CHECK_CONTAINS("a needle here", "needle");
  CHECK_OK(pb_error_set(&err, PB_OK, "fine"), &err);
  EXPECT(2 > 1);
  EXPECT_EQ(-3, -3);
  EXPECT_STREQ("x", "x");
  printf("all checks held\n");
}

static void check_stops(void) {
  int answer = 41;
  CHECK_EQ(answer, 42);
  fprintf(stderr, "not reached\n");
}

static void check_unsigned(void) {
  uint64_t v = UINT64_MAX;
  CHECK_EQ(v, 1);
}

static void streq_null(void) {
  const char *none = NULL;
  CHECK_STREQ(none, "x");
}

static void near_nan(void) {
  double v = NAN;
  CHECK_NEAR(v, v, 1.0);
}

static void ok_message(void) {
  struct pb_error err = {{0}};
  CHECK_OK(pb_error_set(&err, PB_EFORMAT, "file a.tif: bad header"), &err);
}

static void expect_goes_on(void) {
  EXPECT(1 == 2);
  EXPECT_EQ(5, 6);
  EXPECT_CONTAINS("haystack", "pin");
  EXPECT_FAIL("worded %d", 7);
  fprintf(stderr, "failures so far: %d\n", check_failures());
}

static void fail_stops(void) {
  FAIL("gave up on %s", "purpose");
  fprintf(stderr, "not reached\n");
}

int main(void) {
  char out[4096];
  if (run_child(all_pass, out, sizeof out) != 0 || out[0] != '\0') {
    fprintf(stderr, "passing checks failed:\n%s", out);
    bad++;
  }
  expect_child("CHECK_EQ", check_stops, 1,
               (const char *const[]){"check_test.c:", ": answer == 42 failed: 41 vs 42", NULL},
               "not reached");
  expect_child("CHECK_EQ unsigned", check_unsigned, 1,
               (const char *const[]){"v == 1 failed: 18446744073709551615 vs 1", NULL}, NULL);
  expect_child("CHECK_STREQ", streq_null, 1,
               (const char *const[]){"none == \"x\" failed: \"(null)\" vs \"x\"", NULL}, NULL);
  expect_child("CHECK_NEAR", near_nan, 1, (const char *const[]){"|v - v| <= 1 failed", NULL},
               NULL);
  expect_child("CHECK_OK", ok_message, 1,
               (const char *const[]){"returned", "file a.tif: bad header", NULL}, NULL);
  expect_child("EXPECT", expect_goes_on, 3,
               (const char *const[]){"1 == 2 failed", "5 == 6 failed: 5 vs 6", "has no \"pin\"",
                                     "worded 7", "failures so far: 4", NULL},
               NULL);
  expect_child("FAIL", fail_stops, 1, (const char *const[]){"gave up on purpose", NULL},
               "not reached");
  if (bad) fprintf(stderr, "%d check.h case(s) wrong\n", bad);
  else printf("check.h: every case behaved\n");
  return bad != 0;
}
