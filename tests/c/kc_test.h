/* The harness of the C unit tests (tests/c/README.md): cases, checks and the summary line.
 * Each test program includes it once; run_case() runs a case, CHECK/CHECK_MSG record failures
 * (the first 20 of a case are printed), kc_test_summary() prints "N passed, M failed" and returns
 * the exit code. */
#ifndef KC_TEST_H
#define KC_TEST_H

#include <stdio.h>

static int g_passed, g_failed, g_case_failed, g_case_fail_prints;
static const char *g_case;

#define CHECK_MSG(cond, ...)                                                                                 \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            g_case_failed = 1;                                                                               \
            if (g_case_fail_prints++ < 20) {                                                                 \
                printf("FAIL [%s] %s:%d: %s: ", g_case, __FILE__, __LINE__, #cond);                          \
                printf(__VA_ARGS__);                                                                         \
                printf("\n");                                                                                \
            }                                                                                                \
        }                                                                                                    \
    } while (0)

#define CHECK(cond) CHECK_MSG(cond, "%s", "")

static void run_case(const char *name, void (*fn)(void)) {
    g_case = name;
    g_case_failed = 0;
    g_case_fail_prints = 0;
    fn();
    if (g_case_failed) {
        g_failed++;
        printf("not ok - %s\n", name);
    } else {
        g_passed++;
        printf("ok - %s\n", name);
    }
    fflush(stdout);
}

static int kc_test_summary(void) {
    printf("%d passed, %d failed\n", g_passed, g_failed);
    return g_failed ? 1 : 0;
}

#endif
