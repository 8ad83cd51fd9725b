/* Unit tests of csrc/fetch_buffer.c: the KIP-41 drain (proportional and greedy), held partitions,
 * what a drain reports to the owner (on_taken), purge and byte accounting, on fake messages (no
 * broker, no librdkafka I/O). The partitions' positions are partition_state's (test_partition_state.c).
 * Output: one line per failed check, then "N passed, M failed". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fetch_buffer.h"

#include "kc_fake_messages.h"

/* What the drains reported (on_taken): the offset after the last record taken, per partition. */
static int64_t g_next[8];
static void note_taken(kc_fb_part_t *p, int64_t next) {
    g_next[p->partition] = next;
}
/* A buffer whose drains report to note_taken. */
static void init_noting(kc_fetch_buffer_t *fb) {
    for (int i = 0; i < 8; i++)
        g_next[i] = KC_POSITION_UNKNOWN;
    kc_fb_init_owned(fb, sizeof(kc_fb_part_t), note_taken);
}

static void count_by_partition(rd_kafka_message_t **out, size_t n, int *counts, int nparts) {
    memset(counts, 0, sizeof(int) * nparts);
    for (size_t i = 0; i < n; i++)
        counts[out[i]->partition]++;
}

/* Adds partitions 0..n-1 of topic "t" to fb into p[], each holding `records` fakes from offset 0. */
static void add_filled(kc_fetch_buffer_t *fb, kc_fb_part_t **p, int n, int records) {
    for (int i = 0; i < n; i++) {
        p[i] = kc_fb_add(fb, "t", i);
        fill(fb, p[i], records, 0);
    }
}

/* 1 deep + 5 shallow partitions, cap 100: proportional serves all six in one drain,
 * the shallow ones fully, the deep one the rest. */
static void test_proportional_serves_every_partition(void) {
    kc_fetch_buffer_t fb;
    init_noting(&fb);
    kc_fb_part_t *p[6];
    for (int i = 0; i < 6; i++)
        p[i] = kc_fb_add(&fb, "t", i);
    fill(&fb, p[0], 1000, 0);
    for (int i = 1; i < 6; i++)
        fill(&fb, p[i], 10, 0);
    rd_kafka_message_t *out[100];
    size_t n = kc_fb_drain(&fb, 100, KC_FAIRNESS_PROPORTIONAL, out);
    int c[6];
    count_by_partition(out, n, c, 6);
    CHECK(n == 100);
    for (int i = 1; i < 6; i++)
        CHECK(c[i] == 10);
    CHECK(c[0] == 50);
    /* contiguous per partition and in offset order */
    for (size_t i = 1; i < n; i++)
        if (out[i]->partition == out[i - 1]->partition)
            CHECK(out[i]->offset == out[i - 1]->offset + 1);
    CHECK(g_next[0] == 50 && g_next[3] == 10);
    CHECK(fb.records == 950 && fb.bytes == 9500);
    release(out, n);
    destroy_and_check(&fb);
}

/* Even split with a remainder that rotates: 6 partitions x 1000, cap 100 -> 16 or 17 each. */
static void test_proportional_remainder_rotates(void) {
    kc_fetch_buffer_t fb;
    kc_fb_init(&fb);
    kc_fb_part_t *p[6];
    add_filled(&fb, p, 6, 1000);
    int total[6] = {0};
    rd_kafka_message_t *out[100];
    for (int round = 0; round < 6; round++) {
        size_t n = kc_fb_drain(&fb, 100, KC_FAIRNESS_PROPORTIONAL, out);
        int c[6];
        count_by_partition(out, n, c, 6);
        CHECK(n == 100);
        for (int i = 0; i < 6; i++) {
            CHECK(c[i] == 16 || c[i] == 17);
            total[i] += c[i];
        }
        release(out, n);
    }
    for (int i = 0; i < 6; i++)
        CHECK(total[i] == 100); /* six rounds: the extra record went to each partition in turn */
    destroy_and_check(&fb);
}

/* Greedy: drain one partition as far as the cap allows, next poll starts after it. */
static void test_greedy_round_robin(void) {
    kc_fetch_buffer_t fb;
    kc_fb_init(&fb);
    kc_fb_part_t *p[3];
    add_filled(&fb, p, 3, 250);
    rd_kafka_message_t *out[100];
    int order[6];
    for (int round = 0; round < 6; round++) {
        size_t n = kc_fb_drain(&fb, 100, KC_FAIRNESS_GREEDY, out);
        CHECK(n == 100);
        order[round] = out[0]->partition;
        int c[3];
        count_by_partition(out, n, c, 3);
        CHECK(c[order[round]] == 100); /* one partition fills the whole poll */
        release(out, n);
    }
    for (int round = 0; round < 6; round++)
        CHECK(order[round] == round % 3);
    /* the tail: 50 left in each; one poll takes 50 + 50 across two partitions */
    size_t n = kc_fb_drain(&fb, 100, KC_FAIRNESS_GREEDY, out);
    CHECK(n == 100);
    release(out, n);
    n = kc_fb_drain(&fb, 100, KC_FAIRNESS_GREEDY, out);
    CHECK(n == 50);
    release(out, n);
    CHECK(fb.records == 0 && fb.bytes == 0);
    destroy_and_check(&fb);
}

static void test_held_keeps_records(void) {
    kc_fetch_buffer_t fb;
    init_noting(&fb);
    kc_fb_part_t *a = kc_fb_add(&fb, "t", 0), *b = kc_fb_add(&fb, "t", 1);
    fill(&fb, a, 30, 100);
    fill(&fb, b, 30, 0);
    a->held = 1;
    rd_kafka_message_t *out[100];
    CHECK(kc_fb_drainable(&fb) == 30);
    size_t n = kc_fb_drain(&fb, 100, KC_FAIRNESS_PROPORTIONAL, out);
    CHECK(n == 30);
    for (size_t i = 0; i < n; i++)
        CHECK(out[i]->partition == 1);
    release(out, n);
    CHECK(a->len == 30 && g_next[0] == KC_POSITION_UNKNOWN); /* not drained: not reported */
    a->held = 0;
    CHECK(kc_fb_first_offset(a) == 100);
    n = kc_fb_drain(&fb, 100, KC_FAIRNESS_GREEDY, out);
    CHECK(n == 30 && out[0]->offset == 100 && out[29]->offset == 129 && g_next[0] == 130);
    release(out, n);
    destroy_and_check(&fb);
}

/* The newest buffered offset, across the ring's wrap point; unknown when empty. */
static void test_last_offset(void) {
    kc_fetch_buffer_t fb;
    kc_fb_init(&fb);
    kc_fb_part_t *a = kc_fb_add(&fb, "t", 0);
    CHECK(kc_fb_last_offset(a) == KC_POSITION_UNKNOWN && kc_fb_first_offset(a) == KC_POSITION_UNKNOWN);
    fill(&fb, a, 64, 100); /* wraps nothing yet: ring of 64 */
    CHECK(kc_fb_last_offset(a) == 163 && kc_fb_first_offset(a) == 100);
    rd_kafka_message_t *out[64];
    size_t n = kc_fb_drain(&fb, 10, KC_FAIRNESS_GREEDY, out); /* no on_taken: nothing reported */
    release(out, n);
    fill(&fb, a, 5, 164); /* tail now sits after the wrap point */
    CHECK(kc_fb_last_offset(a) == 168 && kc_fb_first_offset(a) == 110);
    kc_fb_purge(&fb, a);
    CHECK(kc_fb_last_offset(a) == KC_POSITION_UNKNOWN);
    destroy_and_check(&fb);
}

static void test_remove_and_purge(void) {
    kc_fetch_buffer_t fb;
    init_noting(&fb);
    kc_fb_part_t *p[4];
    add_filled(&fb, p, 4, 500); /* grows the ring past its first capacity */
    CHECK(fb.records == 2000 && fb.bytes == 20000);
    kc_fb_purge(&fb, p[1]);
    CHECK(fb.records == 1500 && p[1]->len == 0);
    CHECK(kc_fb_remove(&fb, "t", 2) == 1 && kc_fb_remove(&fb, "t", 2) == 0);
    CHECK(fb.n == 3 && fb.records == 1000 && kc_fb_find(&fb, "t", 2) == NULL);
    CHECK(kc_fb_find(&fb, "t", 3) == p[3] && kc_fb_add(&fb, "t", 3) == p[3]);
    /* ring wrap-around: drain some, push more, order kept */
    rd_kafka_message_t *out[300];
    size_t n = kc_fb_drain(&fb, 300, KC_FAIRNESS_GREEDY, out);
    release(out, n);
    fill(&fb, p[0], 400, 500);
    int64_t expect = g_next[0] == KC_POSITION_UNKNOWN ? 0 : g_next[0];
    while (p[0]->len) {
        p[3]->held = 1;
        n = kc_fb_drain(&fb, 64, KC_FAIRNESS_GREEDY, out);
        for (size_t i = 0; i < n; i++)
            if (out[i]->partition == 0)
                CHECK(out[i]->offset == expect++);
        release(out, n);
    }
    CHECK(expect == 900);
    for (size_t i = 0; i < fb.n; i++)
        kc_fb_purge(&fb, fb.parts[i]);
    CHECK(fb.records == 0 && fb.bytes == 0);
    destroy_and_check(&fb);
}

/* The byte totals follow the sizes noted at push (ring_bytes) through ring growth and
 * wrap-around, for records of different sizes, and a drain does not read the sizes back from
 * the messages (it leaves them untouched; here a message changed after the push shows it). */
static void test_bytes_noted_at_push(void) {
    kc_fetch_buffer_t fb;
    kc_fb_init(&fb);
    kc_fb_part_t *a = kc_fb_add(&fb, "t", 0);
    kc_fb_part_t *b = kc_fb_add(&fb, "t", 1);
    size_t expect_a = 0, expect_b = 0;
    int64_t next_a = 0;
    rd_kafka_message_t *out[100];
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < 37; i++) { /* 37 per round: the ring grows and wraps */
            rd_kafka_message_t *m = fake(0, next_a++, (size_t)(round * 7 + i));
            m->key_len = (size_t)i;
            m->key = m; /* any non-NULL pointer: only key_len is counted */
            expect_a += (size_t)(round * 7 + i) + (size_t)i;
            kc_fb_push(&fb, a, &m, 1);
            m->len = 1000000; /* changed after the push: must not count */
        }
        rd_kafka_message_t *m = fake(1, round, 5);
        kc_fb_push(&fb, b, &m, 1);
        expect_b += 5;
        CHECK(a->bytes == expect_a && b->bytes == expect_b && fb.bytes == expect_a + expect_b);
        size_t n = kc_fb_drain(&fb, 30, KC_FAIRNESS_GREEDY, out);
        for (size_t i = 0; i < n; i++) {
            size_t noted = out[i]->partition == 0
                               ? (size_t)((out[i]->offset / 37) * 7 + out[i]->offset % 37) +
                                     (size_t)(out[i]->offset % 37)
                               : 5;
            if (out[i]->partition == 0)
                expect_a -= noted;
            else
                expect_b -= noted;
        }
        release(out, n);
        CHECK(a->bytes == expect_a && b->bytes == expect_b && fb.bytes == expect_a + expect_b);
    }
    CHECK(a->ring_cap >= 64 && a->len > 64); /* grown past the first capacity */
    kc_fb_purge(&fb, a);
    kc_fb_purge(&fb, b);
    CHECK(fb.records == 0 && fb.bytes == 0 && a->bytes == 0 && b->bytes == 0);
    destroy_and_check(&fb);
}

static void test_target_is_twice_the_share(void) {
    kc_fetch_buffer_t fb;
    kc_fb_init(&fb);
    CHECK(kc_fb_target(&fb, 500, 64) == 1000); /* no partition yet: one share */
    for (int i = 0; i < 12; i++)
        kc_fb_add(&fb, "t", i);
    CHECK(kc_fb_target(&fb, 500, 64) == 84);
    CHECK(kc_fb_target(&fb, 100, 64) == 64);
    destroy_and_check(&fb);
}

int main(void) {
    kc_fb_msg_destroy = fake_destroy;
    run_case("proportional_serves_every_partition", test_proportional_serves_every_partition);
    run_case("proportional_remainder_rotates", test_proportional_remainder_rotates);
    run_case("greedy_round_robin", test_greedy_round_robin);
    run_case("held_keeps_records", test_held_keeps_records);
    run_case("last_offset", test_last_offset);
    run_case("remove_and_purge", test_remove_and_purge);
    run_case("target_is_twice_the_share", test_target_is_twice_the_share);
    run_case("bytes_noted_at_push", test_bytes_noted_at_push);
    return kc_test_summary();
}
