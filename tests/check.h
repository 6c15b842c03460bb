/* The checks every C test uses. Two families with the same arguments:
 *
 *   CHECK...  stops the test (exit status 1) at the first failure: for a call or a value the
 *             rest of the test depends on.
 *   EXPECT... records the failure and goes on, so one run reports every bad case; a test that
 *             uses them ends main() with `return check_failures() != 0;`.
 *
 *   CHECK(cond)                  cond is true
 *   CHECK_EQ(a, b)               two integers (any width or signedness; compared as long long,
 *                                printed as the type each operand has)
 *   CHECK_STREQ(a, b)            two strings, NULL equal to nothing
 *   CHECK_NEAR(a, b, tol)        |a - b| <= tol for doubles (NaN is never near)
 *   CHECK_CONTAINS(hay, needle)  needle occurs in hay
 *   CHECK_OK(call, errp)         call returned PB_OK; otherwise prints the status, its name and
 *                                errp's message (errp: a struct pb_error *, may be NULL)
 *   FAIL(fmt, ...)               a failure the test words itself (printf-style message);
 *                                EXPECT_FAIL counts it and goes on
 *
 * Every failure prints file:line, the expression, and the values involved, on stderr. The
 * header is self-contained (no test framework to install): the tests stay plain programs that
 * CTest runs and that can be run by hand. */
#ifndef PB_TESTS_CHECK_H
#define PB_TESTS_CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipebench/core.h"

/* ---- internals (check__ names): one failure counter per test program ---------------------- */

static inline int *check__count(void) {
  static int n;
  return &n;
}

/* Number of EXPECT failures so far. */
static inline int check_failures(void) { return *check__count(); }

static inline void check__record(void) { (*check__count())++; }

static inline _Noreturn void check__stop(void) {
  fflush(stdout);
  exit(1);
}

static inline void check__vprint(const char *file, int line, const char *fmt, va_list ap) {
  fprintf(stderr, "%s:%d: ", file, line);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
}

static inline _Noreturn __attribute__((format(printf, 3, 4))) void
check__failf(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  check__vprint(file, line, fmt, ap);
  va_end(ap);
  check__stop();
}

static inline __attribute__((format(printf, 3, 4))) void
check__expect_failf(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  check__vprint(file, line, fmt, ap);
  va_end(ap);
  check__record();
}

#define CHECK__UNSIGNED(x)                                                                     \
  _Generic((x), unsigned char: 1, unsigned short: 1, unsigned int: 1, unsigned long: 1,        \
           unsigned long long: 1, default: 0)

static inline void check__print_int(long long v, int is_unsigned) {
  if (is_unsigned)
    fprintf(stderr, "%llu", (unsigned long long)v);
  else
    fprintf(stderr, "%lld", v);
}

static inline void check__eq_failed(const char *file, int line, const char *ea, const char *eb,
                                    long long a, int ua, long long b, int ub) {
  fprintf(stderr, "%s:%d: %s == %s failed: ", file, line, ea, eb);
  check__print_int(a, ua);
  fprintf(stderr, " vs ");
  check__print_int(b, ub);
  fputc('\n', stderr);
}

static inline int check__streq(const char *a, const char *b) {
  return a != NULL && b != NULL && strcmp(a, b) == 0;
}

static inline const char *check__str(const char *s) { return s ? s : "(null)"; }

static inline const char *check__msg(const struct pb_error *err) {
  return err && err->message[0] ? err->message : "(no message)";
}

/* on_fail is check__stop() or check__record(). */
#define CHECK__TRUE(on_fail, cond)                                                             \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #cond);                        \
      on_fail;                                                                                 \
    }                                                                                          \
  } while (0)

#define CHECK__EQ(on_fail, a, b)                                                               \
  do {                                                                                         \
    long long check_a_ = (long long)(a), check_b_ = (long long)(b);                            \
    if (check_a_ != check_b_) {                                                                \
      check__eq_failed(__FILE__, __LINE__, #a, #b, check_a_, CHECK__UNSIGNED(a), check_b_,     \
                       CHECK__UNSIGNED(b));                                                    \
      on_fail;                                                                                 \
    }                                                                                          \
  } while (0)

#define CHECK__STREQ(on_fail, a, b)                                                            \
  do {                                                                                         \
    const char *check_a_ = (a), *check_b_ = (b);                                               \
    if (!check__streq(check_a_, check_b_)) {                                                   \
      fprintf(stderr, "%s:%d: %s == %s failed: \"%s\" vs \"%s\"\n", __FILE__, __LINE__, #a,    \
              #b, check__str(check_a_), check__str(check_b_));                                 \
      on_fail;                                                                                 \
    }                                                                                          \
  } while (0)

#define CHECK__NEAR(on_fail, a, b, tol)                                                        \
  do {                                                                                         \
    double check_a_ = (double)(a), check_b_ = (double)(b), check_t_ = (double)(tol);           \
    double check_d_ = check_a_ > check_b_ ? check_a_ - check_b_ : check_b_ - check_a_;        \
    if (!(check_d_ <= check_t_)) {                                                             \
      fprintf(stderr, "%s:%d: |%s - %s| <= %g failed: %.9g vs %.9g\n", __FILE__, __LINE__,    \
              #a, #b, check_t_, check_a_, check_b_);                                           \
      on_fail;                                                                                 \
    }                                                                                          \
  } while (0)

#define CHECK__CONTAINS(on_fail, hay, needle)                                                  \
  do {                                                                                         \
    const char *check_h_ = (hay), *check_n_ = (needle);                                        \
    if (check_h_ == NULL || check_n_ == NULL || strstr(check_h_, check_n_) == NULL) {          \
      fprintf(stderr, "%s:%d: %s contains %s failed: \"%s\" has no \"%s\"\n", __FILE__,        \
              __LINE__, #hay, #needle, check__str(check_h_), check__str(check_n_));            \
      on_fail;                                                                                 \
    }                                                                                          \
  } while (0)

#define CHECK__OK(on_fail, call, errp)                                                         \
  do {                                                                                         \
    int check_rc_ = (call);                                                                    \
    if (check_rc_ != PB_OK) {                                                                  \
      fprintf(stderr, "%s:%d: %s returned %d (%s): %s\n", __FILE__, __LINE__, #call,           \
              check_rc_, pb_strerror(check_rc_), check__msg(errp));                            \
      on_fail;                                                                                 \
    }                                                                                          \
  } while (0)

/* ---- the checks --------------------------------------------------------------------------- */

#define CHECK(cond) CHECK__TRUE(check__stop(), cond)
#define CHECK_EQ(a, b) CHECK__EQ(check__stop(), a, b)
#define CHECK_STREQ(a, b) CHECK__STREQ(check__stop(), a, b)
#define CHECK_NEAR(a, b, tol) CHECK__NEAR(check__stop(), a, b, tol)
#define CHECK_CONTAINS(hay, needle) CHECK__CONTAINS(check__stop(), hay, needle)
#define CHECK_OK(call, errp) CHECK__OK(check__stop(), call, errp)

#define EXPECT(cond) CHECK__TRUE(check__record(), cond)
#define EXPECT_EQ(a, b) CHECK__EQ(check__record(), a, b)
#define EXPECT_STREQ(a, b) CHECK__STREQ(check__record(), a, b)
#define EXPECT_NEAR(a, b, tol) CHECK__NEAR(check__record(), a, b, tol)
#define EXPECT_CONTAINS(hay, needle) CHECK__CONTAINS(check__record(), hay, needle)
#define EXPECT_OK(call, errp) CHECK__OK(check__record(), call, errp)

#define FAIL(...) check__failf(__FILE__, __LINE__, __VA_ARGS__)
#define EXPECT_FAIL(...) check__expect_failf(__FILE__, __LINE__, __VA_ARGS__)

#endif
