/* Unit tests of csrc/partition_state.c (each partition's position, stored offset, pause, trust,
 * fetch stop/restart and filter state, through its setters) and csrc/rebalance_barrier.h (the
 * barrier's setters and its one rule), on fake messages (no broker, no librdkafka I/O).
 * Output: one line per failed check, then "N passed, M failed". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partition_state.h"
#include "rebalance_barrier.h"

#include "kc_fake_messages.h"
#include "kc_fake_seek.h"

/* The end of a case: removes fb's partitions, then destroy_and_check(). */
static void remove_all_and_check(kc_fetch_buffer_t *fb) {
    kc_ps_remove_all(fb);
    destroy_and_check(fb);
}

/* A new partition: no position, nothing stored, no floor, unpaused; the same one is found again. */
static void test_add_find_remove(void) {
    kc_fetch_buffer_t fb;
    kc_ps_init_buffer(&fb);
    kc_partition_t *a = kc_ps_add(&fb, "t", 0), *b = kc_ps_add(&fb, "u", 3);
    CHECK(a && b && a != b);
    CHECK(a->position == KC_POSITION_UNKNOWN && a->stored == KC_POSITION_UNKNOWN);
    CHECK(a->filters.floor == KC_POSITION_UNKNOWN && !kc_seek_guard_active(&a->filters));
    CHECK(!kc_ps_paused(a) && !a->app_pos_trusted && !a->fetch_stopped && a->queue == NULL);
    CHECK(kc_ps_find(&fb, "u", 3) == b && kc_ps_add(&fb, "u", 3) == b && kc_ps_at(&fb, 1) == b);
    CHECK(kc_ps_find(&fb, "u", 4) == NULL && kc_ps_find(&fb, "t", 3) == NULL);
    fill(&fb, &b->q, 5, 0);
    CHECK(kc_ps_remove(&fb, "u", 3) == 1 && kc_ps_remove(&fb, "u", 3) == 0 && g_live == 0);
    CHECK(fb.n == 1 && kc_ps_at(&fb, 0) == a);
    fill(&fb, &a->q, 5, 0);
    kc_ps_remove_all(&fb);
    CHECK(fb.n == 0 && fb.records == 0 && g_live == 0);
    kc_fb_destroy(&fb);
}

/* A drain advances each drained partition's position past the last record taken (and no other);
 * a paused partition keeps its records and its position. */
static void test_drain_advances_position(void) {
    kc_fetch_buffer_t fb;
    kc_ps_init_buffer(&fb);
    kc_partition_t *a = kc_ps_add(&fb, "t", 0), *b = kc_ps_add(&fb, "t", 1);
    fill(&fb, &a->q, 30, 100);
    fill(&fb, &b->q, 30, 0);
    kc_ps_set_paused(a, 1);
    CHECK(kc_ps_paused(a) && kc_fb_drainable(&fb) == 30);
    rd_kafka_message_t *out[100];
    size_t n = kc_fb_drain(&fb, 100, KC_FAIRNESS_PROPORTIONAL, out);
    release(out, n);
    CHECK(n == 30 && b->position == 30 && a->position == KC_POSITION_UNKNOWN && a->q.len == 30);
    kc_ps_set_paused(a, 0);
    CHECK(!kc_ps_paused(a));
    n = kc_fb_drain(&fb, 10, KC_FAIRNESS_GREEDY, out);
    release(out, n);
    CHECK(n == 10 && a->position == 110 && b->position == 30);
    remove_all_and_check(&fb);
}

/* The next offset: past what was returned and past what is buffered, across the ring's wrap. */
static void test_next_offset(void) {
    kc_fetch_buffer_t fb;
    kc_ps_init_buffer(&fb);
    kc_partition_t *a = kc_ps_add(&fb, "t", 0);
    CHECK(kc_ps_next_offset(a) == KC_POSITION_UNKNOWN); /* nothing known: take anything */
    fill(&fb, &a->q, 64, 100);
    CHECK(kc_ps_next_offset(a) == 164 && kc_ps_first_offset(a) == 100);
    rd_kafka_message_t *out[64];
    size_t n = kc_fb_drain(&fb, 10, KC_FAIRNESS_GREEDY, out);
    release(out, n);
    fill(&fb, &a->q, 5, 164); /* the tail after the ring's wrap point */
    CHECK(a->position == 110 && kc_ps_next_offset(a) == 169);
    while ((n = kc_fb_drain(&fb, 64, KC_FAIRNESS_GREEDY, out)) != 0)
        release(out, n);
    CHECK(a->q.len == 0 && kc_ps_next_offset(a) == 169); /* empty: the position */
    kc_ps_seek(&fb, a, 50);                              /* a seek back */
    CHECK(kc_ps_next_offset(a) == 50);
    remove_all_and_check(&fb);
}

/* seek(): purges, sets the position (unknown for BEGINNING/END), gives up the floor, starts the
 * seek guard (an offset) and notes the seek for kc_reset_after_seek. */
static void test_seek(void) {
    kc_fetch_buffer_t fb;
    kc_ps_init_buffer(&fb);
    kc_partition_t *a = kc_ps_add(&fb, "t", 0);
    CHECK(kc_ps_start_floor(a, 40) && a->filters.floor == 40);
    fill(&fb, &a->q, 10, 40);
    kc_ps_records_routed(a, 10, 0);
    CHECK(a->app_pos_trusted);
    kc_ps_seek(&fb, a, 7);
    CHECK(a->q.len == 0 && g_live == 0 && a->position == 7 && a->filters.floor == KC_POSITION_UNKNOWN);
    CHECK(!a->app_pos_trusted && kc_seek_guard_active(&a->filters) && a->filters.seek_target == 7);
    CHECK(a->filters.sought == 7 && kc_reset_after_seek(&a->filters, 3) &&
          !kc_reset_after_seek(&a->filters, 7));
    kc_ps_seek(&fb, a, -2); /* OFFSET_BEGINNING */
    CHECK(a->position == KC_POSITION_UNKNOWN && a->filters.sought == KC_POSITION_UNKNOWN);
    remove_all_and_check(&fb);
}

/* The committed floor is set only while nothing of the partition was returned or buffered. */
static void test_start_floor(void) {
    kc_fetch_buffer_t fb;
    kc_ps_init_buffer(&fb);
    kc_partition_t *a = kc_ps_add(&fb, "t", 0), *b = kc_ps_add(&fb, "t", 1);
    fill(&fb, &a->q, 1, 0);
    CHECK(!kc_ps_start_floor(a, 5) && a->filters.floor == KC_POSITION_UNKNOWN); /* buffered */
    kc_ps_drained(b, 9);
    CHECK(!kc_ps_start_floor(b, 5) && b->filters.floor == KC_POSITION_UNKNOWN); /* returned */
    remove_all_and_check(&fb);
}

/* Trust: set by buffered records, cleared by a purge and by a record the seek guard dropped; a
 * routed run with no record taken leaves it; any routed run ends a refetch forward. */
static void test_trust_and_routing(void) {
    kc_fetch_buffer_t fb;
    kc_ps_init_buffer(&fb);
    kc_partition_t *a = kc_ps_add(&fb, "t", 0);
    kc_ps_records_routed(a, 0, 0);
    CHECK(!a->app_pos_trusted);
    kc_ps_records_routed(a, 3, 0);
    CHECK(a->app_pos_trusted);
    kc_ps_records_routed(a, 0, 0);
    CHECK(a->app_pos_trusted);
    kc_ps_records_routed(a, 2, 1);
    CHECK(!a->app_pos_trusted);
    kc_ps_records_routed(a, 1, 0);
    kc_ps_purge(&fb, a);
    CHECK(!a->app_pos_trusted);
    kc_ps_records_routed(a, 1, 0);
    kc_ps_purge_all(&fb);
    CHECK(!a->app_pos_trusted);
    kc_ps_fetch_restarted(a, 0);
    CHECK(a->refetch_forward);
    kc_ps_records_routed(a, 0, 0);
    CHECK(!a->refetch_forward);
    remove_all_and_check(&fb);
}

/* A reset after a seek outside the log: the position follows and the seek is no longer watched. */
static void test_reset_after_seek(void) {
    kc_fetch_buffer_t fb;
    kc_ps_init_buffer(&fb);
    kc_partition_t *a = kc_ps_add(&fb, "t", 0);
    kc_ps_seek(&fb, a, 1000);
    kc_ps_reset_after_seek(a, 12);
    CHECK(a->position == 12 && a->filters.sought == KC_POSITION_UNKNOWN);
    remove_all_and_check(&fb);
}

/* Stepping over markers moves the position forward only; storing notes the position. */
static void test_step_and_store(void) {
    kc_fetch_buffer_t fb;
    kc_ps_init_buffer(&fb);
    kc_partition_t *a = kc_ps_add(&fb, "t", 0);
    CHECK(!kc_ps_step_to(a, 5) && a->position == KC_POSITION_UNKNOWN); /* nothing returned */
    kc_ps_drained(a, 10);
    CHECK(!kc_ps_step_to(a, 9) && !kc_ps_step_to(a, 10) && a->position == 10);
    CHECK(kc_ps_step_to(a, 12) && a->position == 12);
    kc_ps_mark_stored(a);
    CHECK(a->stored == 12);
    remove_all_and_check(&fb);
}

/* librdkafka's fetch stop: a report with no offset counts until a seek restarted the partition at an
 * offset; one with an offset only if it is the current position. A seek's restart clears the stop;
 * a restart along (an EAGER reassignment) only forwards the queue again. */
static void test_fetch_stop_and_restart(void) {
    kc_fetch_buffer_t fb;
    kc_ps_init_buffer(&fb);
    kc_partition_t *a = kc_ps_add(&fb, "t", 0);
    CHECK(kc_ps_fetch_stop_reported(a, -1001) && a->fetch_stopped && a->stopped_offset == -1001);
    kc_ps_fetch_restarted(a, 0);
    CHECK(a->fetch_stopped && !a->fetch_restarted && a->refetch_forward);
    kc_ps_fetch_restarted(a, 1);
    CHECK(!a->fetch_stopped && a->fetch_restarted && a->refetch_forward);
    CHECK(!kc_ps_fetch_stop_reported(a, -1001) && !a->fetch_stopped); /* stale: queued before the seek */
    kc_ps_drained(a, 40);
    CHECK(!kc_ps_fetch_stop_reported(a, 39) && !a->fetch_stopped); /* not the current position */
    CHECK(kc_ps_fetch_stop_reported(a, 40) && a->fetch_stopped && a->stopped_offset == 40);
    remove_all_and_check(&fb);
}

/* The stall thread's release: the buffer forgets p's records, the position stays, the seek guard
 * watches the refetch from the first released offset. */
static void test_refetch_from(void) {
    kc_fetch_buffer_t fb;
    kc_ps_init_buffer(&fb);
    kc_partition_t *a = kc_ps_add(&fb, "t", 0);
    fill(&fb, &a->q, 10, 40);
    kc_ps_records_routed(a, 10, 0);
    rd_kafka_message_t *out[4];
    size_t n = kc_fb_drain(&fb, 4, KC_FAIRNESS_GREEDY, out);
    release(out, n);
    CHECK(a->position == 44 && a->q.len == 6);
    kc_ps_refetch_from(&fb, a, 44);
    CHECK(a->q.len == 0 && g_live == 0 && kc_ps_next_offset(a) == 44 && a->position == 44);
    CHECK(!a->app_pos_trusted && kc_seek_guard_active(&a->filters) && a->filters.seek_target == 44);
    remove_all_and_check(&fb);
}

/* A resume's wake-up seeks the fetcher to where it resumes anyway: past the buffer, else the
 * position, else the offset a stall released from; nothing without any of them or once stopped. */
static void test_wake_fetcher(void) {
    kc_fetch_buffer_t fb;
    kc_ps_init_buffer(&fb);
    kc_partition_t *a = kc_ps_add(&fb, "t", 0);
    g_seeks = 0;
    CHECK(!kc_ps_wake_fetcher(NULL, a) && g_seeks == 0); /* no position yet: the start offset rules */
    fill(&fb, &a->q, 5, 10);
    kc_ps_records_routed(a, 5, 0);
    CHECK(kc_ps_wake_fetcher(NULL, a) && g_seeks == 1 && g_seek_offset == 15 && !a->app_pos_trusted);
    kc_ps_refetch_from(&fb, a, 10); /* released before any record was returned */
    CHECK(a->position == KC_POSITION_UNKNOWN);
    a->filters.seek_until_ms = 0; /* a stall longer than the guard's window */
    CHECK(kc_ps_wake_fetcher(NULL, a) && g_seeks == 2 && g_seek_offset == 10);
    CHECK(a->filters.seek_target == 10 && a->filters.seek_until_ms > 0); /* watched from the resume */
    kc_ps_drained(a, 30);
    CHECK(kc_ps_wake_fetcher(NULL, a) && g_seek_offset == 30);
    g_seek_fails = 1;
    CHECK(!kc_ps_wake_fetcher(NULL, a));
    g_seek_fails = 0;
    CHECK(kc_ps_fetch_stop_reported(a, 30) && !kc_ps_wake_fetcher(NULL, a) && g_seeks == 3);
    remove_all_and_check(&fb);
}

/* The rebalance barrier's rule, driven through its setters. */
static void test_barrier(void) {
    kc_heartbeat_monitor_t hb;
    kc_hb_init(&hb);
    kc_rebalance_barrier_t b;
    kc_rebalance_barrier_init(&b);
    CHECK(b.enabled);
    CHECK(!kc_rebalance_barrier_holds(&b, &hb) && !kc_barrier_rejoining(&b, &hb));
    /* a heartbeat answered REBALANCE_IN_PROGRESS */
    atomic_store(&hb.last_any_ms, 1000);
    atomic_store(&hb.last_error, RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS);
    CHECK(kc_rebalance_barrier_holds(&b, &hb) && kc_barrier_rejoining(&b, &hb));
    b.enabled = 0;
    CHECK(!kc_rebalance_barrier_holds(&b, &hb) && kc_barrier_rejoining(&b, &hb));
    b.enabled = 1;
    /* a rebalance callback since: served */
    kc_barrier_rebalanced(&b, 1000);
    CHECK(!kc_rebalance_barrier_holds(&b, &hb) && !kc_barrier_rejoining(&b, &hb));
    kc_barrier_rebalanced(&b, 999);
    CHECK(kc_rebalance_barrier_holds(&b, &hb) && kc_barrier_rejoining(&b, &hb));
    /* a successful heartbeat since */
    atomic_store(&hb.last_ok_ms, 1000);
    CHECK(!kc_rebalance_barrier_holds(&b, &hb) && !kc_barrier_rejoining(&b, &hb));
    /* another error than REBALANCE_IN_PROGRESS does not hold */
    atomic_store(&hb.last_any_ms, 2000);
    atomic_store(&hb.last_error, RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT);
    CHECK(!kc_rebalance_barrier_holds(&b, &hb));
    /* a commit refused after the last rebalance and heartbeat: holds, but is not a rejoin */
    kc_barrier_commit_refused(&b, 1001);
    CHECK(kc_rebalance_barrier_holds(&b, &hb) && !kc_barrier_rejoining(&b, &hb));
    kc_barrier_rebalanced(&b, 1001);
    CHECK(!kc_rebalance_barrier_holds(&b, &hb));
    atomic_store(&hb.last_ok_ms, 1500);
    kc_barrier_commit_refused(&b, 1500);
    CHECK(!kc_rebalance_barrier_holds(&b, &hb));
}

int main(void) {
    kc_fb_msg_destroy = fake_destroy;
    kc_filters_seek = fake_seek;
    run_case("add_find_remove", test_add_find_remove);
    run_case("drain_advances_position", test_drain_advances_position);
    run_case("next_offset", test_next_offset);
    run_case("seek", test_seek);
    run_case("start_floor", test_start_floor);
    run_case("trust_and_routing", test_trust_and_routing);
    run_case("reset_after_seek", test_reset_after_seek);
    run_case("step_and_store", test_step_and_store);
    run_case("fetch_stop_and_restart", test_fetch_stop_and_restart);
    run_case("refetch_from", test_refetch_from);
    run_case("wake_fetcher", test_wake_fetcher);
    run_case("barrier", test_barrier);
    return kc_test_summary();
}
