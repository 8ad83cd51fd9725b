/* Unit tests of csrc/record_filters.c: the seek guard, the refetch filter and the committed floor
 * (the rebalance barrier: test_partition_state.c), with a fake clock, a fake seek and fake watermarks (no
 * broker, no librdkafka I/O). Output: one line per failed check, then "N passed, M failed". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "record_filters.h"

#include "kc_fake_seek.h"
#include "kc_test.h"

/* ---- fakes ---- */

static int64_t g_now = 1000000;
static int64_t fake_now(void) {
    return g_now;
}

static rd_kafka_resp_err_t g_wm_err;
static int64_t g_wm_high;
static int g_wm_calls;
static rd_kafka_resp_err_t fake_watermarks(rd_kafka_t *rk, const char *topic, int32_t partition, int64_t *low,
                                           int64_t *high) {
    (void)rk;
    (void)topic;
    (void)partition;
    g_wm_calls++;
    *low = 0;
    *high = g_wm_high;
    return g_wm_err;
}

static void reset_fakes(void) {
    g_now = 1000000;
    g_seeks = 0;
    g_seek_offset = KC_POSITION_UNKNOWN;
    g_seek_fails = 0;
    g_wm_err = RD_KAFKA_RESP_ERR_NO_ERROR;
    g_wm_high = -1;
    g_wm_calls = 0;
}

static kc_seek_guard_verdict_t check(kc_partition_filters_t *f, int64_t offset, int64_t expect,
                                     uint64_t batch) {
    return kc_seek_guard_check(f, NULL, "t", 0, offset, expect, batch);
}

/* ---- 1. seek guard ---- */

static void test_init_is_inactive(void) {
    kc_partition_filters_t f;
    memset(&f, 0x5a, sizeof(f));
    kc_filters_init(&f);
    CHECK(!kc_seek_guard_active(&f));
    CHECK(f.floor == KC_POSITION_UNKNOWN);
    CHECK(f.seek_seen == KC_POSITION_UNKNOWN);
    CHECK(f.seek_retries == 0);
}

/* Records that continue from the seek are taken; the guard stays armed. */
static void test_seek_guard_takes_contiguous(void) {
    reset_fakes();
    kc_partition_filters_t f;
    kc_filters_init(&f);
    kc_seek_guard_start(&f, 100);
    CHECK(kc_seek_guard_active(&f));
    CHECK(f.seek_until_ms == g_now + KC_SEEK_GUARD_MS);
    /* nothing buffered yet: the expected offset is the seek's */
    CHECK(check(&f, 100, KC_POSITION_UNKNOWN, 1) == KC_SEEK_GUARD_TAKE);
    CHECK(check(&f, 101, 101, 1) == KC_SEEK_GUARD_TAKE);
    /* below the expected offset: left to the refetch filter */
    CHECK(check(&f, 50, 102, 1) == KC_SEEK_GUARD_TAKE);
    CHECK(g_seeks == 0);
    CHECK(kc_seek_guard_active(&f));
}

/* A jump seeks to the expected offset again and drops the rest of that batch; the same jump after
 * the re-seek is a gap in the log: taken, and the guard stops. */
static void test_seek_guard_reseeks_then_accepts_a_gap(void) {
    reset_fakes();
    kc_partition_filters_t f;
    kc_filters_init(&f);
    kc_seek_guard_start(&f, 100);
    CHECK(check(&f, 500, KC_POSITION_UNKNOWN, 7) == KC_SEEK_GUARD_RESEEK);
    CHECK(g_seeks == 1 && g_seek_offset == 100);
    CHECK(f.seek_seen == 500 && f.seek_retries == 1 && f.seek_batch == 7);
    /* the rest of batch 7, even a record that would fit */
    CHECK(check(&f, 501, KC_POSITION_UNKNOWN, 7) == KC_SEEK_GUARD_DROP);
    CHECK(check(&f, 100, KC_POSITION_UNKNOWN, 7) == KC_SEEK_GUARD_DROP);
    /* the next batch jumps to 500 again: a gap */
    CHECK(check(&f, 500, KC_POSITION_UNKNOWN, 8) == KC_SEEK_GUARD_TAKE);
    CHECK(!kc_seek_guard_active(&f));
    CHECK(g_seeks == 1);
}

/* After KC_SEEK_RETRIES re-seeks, a jump is taken. */
static void test_seek_guard_gives_up_after_retries(void) {
    reset_fakes();
    kc_partition_filters_t f;
    kc_filters_init(&f);
    kc_seek_guard_start(&f, 0);
    uint64_t batch = 1;
    for (int i = 0; i < KC_SEEK_RETRIES; i++, batch++)
        CHECK_MSG(check(&f, 1000 + i, 0, batch) == KC_SEEK_GUARD_RESEEK, "retry %d", i);
    CHECK(g_seeks == KC_SEEK_RETRIES);
    CHECK(check(&f, 5000, 0, batch) == KC_SEEK_GUARD_TAKE);
    CHECK(!kc_seek_guard_active(&f));
    CHECK(g_seeks == KC_SEEK_RETRIES);
}

/* The guard watches KC_SEEK_GUARD_MS (fake clock): a jump at the window's end is still re-sought,
 * one after it is taken. */
static void test_seek_guard_window(void) {
    reset_fakes();
    kc_partition_filters_t f;
    kc_filters_init(&f);
    kc_seek_guard_start(&f, 10);
    g_now += KC_SEEK_GUARD_MS;
    CHECK(check(&f, 20, 10, 1) == KC_SEEK_GUARD_RESEEK);
    g_now += 1;
    CHECK(check(&f, 30, 10, 2) == KC_SEEK_GUARD_TAKE);
    CHECK(!kc_seek_guard_active(&f));
    CHECK(g_seeks == 1);
}

/* A seek librdkafka refuses ends the guard: the record is taken. */
static void test_seek_guard_refused_seek(void) {
    reset_fakes();
    kc_partition_filters_t f;
    kc_filters_init(&f);
    kc_seek_guard_start(&f, 10);
    g_seek_fails = 1;
    CHECK(check(&f, 20, 10, 1) == KC_SEEK_GUARD_TAKE);
    CHECK(!kc_seek_guard_active(&f));
    CHECK(f.seek_retries == 0);
}

/* A new seek() restarts the guard: retries and the seen jump are forgotten. */
static void test_seek_guard_restart(void) {
    reset_fakes();
    kc_partition_filters_t f;
    kc_filters_init(&f);
    kc_seek_guard_start(&f, 10);
    CHECK(check(&f, 20, 10, 1) == KC_SEEK_GUARD_RESEEK);
    g_now += 5;
    kc_seek_guard_start(&f, 40);
    CHECK(f.seek_target == 40 && f.seek_retries == 0 && f.seek_seen == KC_POSITION_UNKNOWN);
    CHECK(f.seek_until_ms == g_now + KC_SEEK_GUARD_MS);
    /* batch 1 again is not "the rest of the re-sought batch": retries were reset */
    CHECK(check(&f, 40, KC_POSITION_UNKNOWN, 1) == KC_SEEK_GUARD_TAKE);
}

/* ---- 2. refetch filter ---- */

static void test_refetched(void) {
    CHECK(!kc_refetched(5, KC_POSITION_UNKNOWN));
    CHECK(!kc_refetched(INT64_MIN + 1, KC_POSITION_UNKNOWN));
    CHECK(kc_refetched(4, 5));
    CHECK(!kc_refetched(5, 5));
    CHECK(!kc_refetched(6, 5));
}

/* ---- 3. committed floor ---- */

static int below(kc_partition_filters_t *f, int64_t offset) {
    return kc_below_floor(f, NULL, "t", 0, offset);
}

static void test_floor(void) {
    reset_fakes();
    kc_partition_filters_t f;
    kc_filters_init(&f);
    CHECK(!below(&f, 0)); /* no floor */
    f.floor = 100;
    g_wm_high = 150;
    CHECK(!below(&f, 100));
    CHECK(!below(&f, 120));
    CHECK(g_wm_calls == 0); /* at or above the floor: no look-up */
    CHECK(below(&f, 99));
    CHECK(below(&f, 0));
    CHECK(f.floor == 100);
    /* unknown watermarks (none cached yet, or a look-up error): the floor holds */
    g_wm_high = -1;
    CHECK(below(&f, 5));
    g_wm_high = 10;
    g_wm_err = RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION;
    CHECK(below(&f, 5));
    CHECK(f.floor == 100);
}

/* The log no longer reaches the floor (high watermark below it): the floor is given up. */
static void test_floor_given_up(void) {
    reset_fakes();
    kc_partition_filters_t f;
    kc_filters_init(&f);
    f.floor = 100;
    g_wm_high = 99;
    CHECK(!below(&f, 5));
    CHECK(f.floor == KC_POSITION_UNKNOWN);
    int calls = g_wm_calls;
    CHECK(!below(&f, 6));
    CHECK(g_wm_calls == calls);
    /* a high watermark equal to the floor: the log reaches it */
    f.floor = 100;
    g_wm_high = 100;
    CHECK(below(&f, 5));
}

int main(void) {
    kc_filters_now_ms = fake_now;
    kc_filters_seek = fake_seek;
    kc_filters_watermarks = fake_watermarks;
    run_case("init_is_inactive", test_init_is_inactive);
    run_case("seek_guard_takes_contiguous", test_seek_guard_takes_contiguous);
    run_case("seek_guard_reseeks_then_accepts_a_gap", test_seek_guard_reseeks_then_accepts_a_gap);
    run_case("seek_guard_gives_up_after_retries", test_seek_guard_gives_up_after_retries);
    run_case("seek_guard_window", test_seek_guard_window);
    run_case("seek_guard_refused_seek", test_seek_guard_refused_seek);
    run_case("seek_guard_restart", test_seek_guard_restart);
    run_case("refetched", test_refetched);
    run_case("floor", test_floor);
    run_case("floor_given_up", test_floor_given_up);
    return kc_test_summary();
}
