/* Unit tests of the seams of csrc/consumer_core.c: the prefetch budget (kc_consumer_budget), the room
 * below the buffer's hard bounds (kc_consumer_room), the refill from librdkafka's fetch queue
 * (kc_consumer_refill: limit, budget, share rule, bounds) and the prefetch thread driving it through
 * its refill callback (kc_consumer_prefetch_start), the last two on records produced to
 * librdkafka's in-process mock cluster. Output: one line per failed check, then "N passed, M failed". */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "consumer_core.h"
#include "event_fd.h"

#include "kc_fake_messages.h"

/* A core without a librdkafka handle: the buffer's arithmetic only. */
static kc_consumer_t *bare_core(size_t max_poll_records) {
    char errstr[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    kc_consumer_t *c =
        kc_consumer_new(conf, max_poll_records, KC_FAIRNESS_PROPORTIONAL, 300000, errstr, sizeof(errstr));
    rd_kafka_conf_destroy(conf);
    CHECK_MSG(c != NULL, "kc_consumer_new: %s", errstr);
    return c;
}

static void free_bare(kc_consumer_t *c) {
    kc_heartbeat_monitor_t *hb = c->heartbeat;
    kc_consumer_free(c);
    kc_hb_free(hb);
}

/* Budget: each unpaused partition's target (twice its share of max.poll.records, at least the
 * floor) plus one max.poll.records; paused partitions count for nothing. */
static void test_budget(void) {
    kc_consumer_t *c = bare_core(500);
    if (!c)
        return;
    CHECK(kc_consumer_budget(c) == 0); /* nothing assigned */
    kc_partition_t *p[4];
    for (int i = 0; i < 4; i++)
        p[i] = kc_ps_add(&c->fb, "t", i);
    /* target: 2 * ceil(500 / 4) = 250 (above the floor of 64) */
    CHECK(kc_fb_target(&c->fb, 500, c->prefetch_floor) == 250);
    CHECK(kc_consumer_budget(c) == 4 * 250 + 500);
    kc_ps_set_paused(p[1], 1);
    kc_ps_set_paused(p[2], 1);
    CHECK(kc_consumer_budget(c) == 2 * 250 + 500);
    for (int i = 0; i < 4; i++)
        kc_ps_set_paused(p[i], 1);
    CHECK(kc_consumer_budget(c) == 0);
    c->max_poll_records = 10; /* target: the floor */
    kc_ps_set_paused(p[0], 0);
    CHECK(kc_consumer_budget(c) == 64 + 10);
    free_bare(c);
}

/* Room: records below ring_max_records, or below ring_max_bytes at the buffered average size
 * (1 KiB while empty), at least 1 while below both, 0 at either bound. */
static void test_room(void) {
    kc_consumer_t *c = bare_core(500);
    if (!c)
        return;
    c->ring_max_records = 100;
    c->ring_max_bytes = 1000000;
    CHECK(kc_consumer_room(c) == 100); /* empty: 1000000 / 1024 + 1 = 977 by bytes */
    kc_partition_t *p = kc_ps_add(&c->fb, "t", 0);
    for (int i = 0; i < 40; i++) {
        rd_kafka_message_t *m = fake(0, i, 100);
        kc_fb_push(&c->fb, &p->q, &m, 1);
    }
    CHECK(kc_consumer_room(c) == 60);
    c->ring_max_bytes = 5000; /* 4000 buffered, 100 B each: 10 more, + 1 */
    CHECK(kc_consumer_room(c) == 11);
    c->ring_max_bytes = 4001;
    CHECK(kc_consumer_room(c) == 1);
    c->ring_max_bytes = 4000;
    CHECK(kc_consumer_room(c) == 0);
    c->ring_max_bytes = 1000000;
    c->ring_max_records = 40;
    CHECK(kc_consumer_room(c) == 0);
    free_bare(c);
    CHECK(g_live == 0);
}

/* ---- on the mock cluster ---- */

#define PARTS    2
#define PER_PART 600

typedef struct {
    rd_kafka_t *prod, *rk;
    kc_consumer_t *c;
} fixture_t;

static int64_t now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Produces PER_PART records (100 B) to each of PARTS partitions, creates a consumer core on the
 * cluster with max.poll.records `mpr`, assigns every partition from offset 0 and waits until
 * librdkafka's fetch queue holds at least `queued` records. */
static int setup(fixture_t *f, size_t mpr, size_t queued) {
    char errstr[512], val[100];
    memset(f, 0, sizeof(*f));
    memset(val, 'v', sizeof(val));
    rd_kafka_conf_t *pc = rd_kafka_conf_new();
    rd_kafka_conf_set(pc, "test.mock.num.brokers", "1", errstr, sizeof(errstr));
    rd_kafka_conf_set(pc, "log_level", "3", errstr, sizeof(errstr));
    f->prod = rd_kafka_new(RD_KAFKA_PRODUCER, pc, errstr, sizeof(errstr));
    CHECK_MSG(f->prod != NULL, "producer: %s", errstr);
    if (!f->prod)
        return -1;
    rd_kafka_mock_cluster_t *mc = rd_kafka_handle_mock_cluster(f->prod);
    CHECK(rd_kafka_mock_topic_create(mc, "t", PARTS, 1) == RD_KAFKA_RESP_ERR_NO_ERROR);
    for (int i = 0; i < PARTS * PER_PART; i++)
        CHECK(rd_kafka_producev(f->prod, RD_KAFKA_V_TOPIC("t"), RD_KAFKA_V_PARTITION(i % PARTS),
                                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_VALUE(val, sizeof(val)),
                                RD_KAFKA_V_END) == RD_KAFKA_RESP_ERR_NO_ERROR);
    CHECK(rd_kafka_flush(f->prod, 30000) == RD_KAFKA_RESP_ERR_NO_ERROR);

    rd_kafka_conf_t *cc = rd_kafka_conf_new();
    rd_kafka_conf_set(cc, "bootstrap.servers", rd_kafka_mock_cluster_bootstraps(mc), errstr, sizeof(errstr));
    rd_kafka_conf_set(cc, "group.id", "g", errstr, sizeof(errstr));
    rd_kafka_conf_set(cc, "enable.auto.commit", "false", errstr, sizeof(errstr));
    rd_kafka_conf_set(cc, "log_level", "3", errstr, sizeof(errstr));
    f->c = kc_consumer_new(cc, mpr, KC_FAIRNESS_PROPORTIONAL, 300000, errstr, sizeof(errstr));
    CHECK_MSG(f->c != NULL, "core: %s", errstr);
    if (!f->c) {
        rd_kafka_conf_destroy(cc);
        return -1;
    }
    f->rk = rd_kafka_new(RD_KAFKA_CONSUMER, cc, errstr, sizeof(errstr));
    CHECK_MSG(f->rk != NULL, "consumer: %s", errstr);
    if (!f->rk) {
        rd_kafka_conf_destroy(cc);
        return -1;
    }
    CHECK(kc_consumer_attach(f->c, f->rk) == 0);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(PARTS);
    for (int j = 0; j < PARTS; j++) {
        rd_kafka_topic_partition_list_add(l, "t", j)->offset = 0;
        CHECK(kc_consumer_add_partition(f->c, "t", j) != NULL);
    }
    CHECK(rd_kafka_assign(f->rk, l) == RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_topic_partition_list_destroy(l);
    int64_t deadline = now_ms() + 20000;
    while ((size_t)rd_kafka_queue_length(f->c->fetchq) < queued && now_ms() < deadline)
        usleep(5000);
    CHECK_MSG((size_t)rd_kafka_queue_length(f->c->fetchq) >= queued, "fetch queue holds %zu",
              (size_t)rd_kafka_queue_length(f->c->fetchq));
    return 0;
}

static void teardown(fixture_t *f) {
    kc_heartbeat_monitor_t *hb = f->c ? f->c->heartbeat : NULL;
    if (f->rk)
        rd_kafka_assign(f->rk, NULL);
    if (f->c)
        kc_consumer_free(f->c);
    if (f->rk) {
        rd_kafka_consumer_close(f->rk);
        rd_kafka_destroy(f->rk);
    }
    if (hb)
        kc_hb_free(hb);
    if (f->prod)
        rd_kafka_destroy(f->prod);
}

static size_t min_len(const kc_consumer_t *c) {
    size_t m = SIZE_MAX;
    for (size_t i = 0; i < c->fb.n; i++)
        if (c->fb.parts[i]->len < m)
            m = c->fb.parts[i]->len;
    return m;
}

/* Refill: at most `limit` per call; an unbounded refill fills past the budget until every
 * partition holds its target (the share rule); a bounded one stops at the hard bound; what it moved
 * is in the buffer, in each partition's offset order from 0. */
static void test_refill(void) {
    fixture_t f;
    if (setup(&f, 10, PARTS * PER_PART) == 0) {
        kc_consumer_t *c = f.c;
        size_t target = kc_fb_target(&c->fb, 10, c->prefetch_floor); /* the floor: 64 */
        CHECK(target == 64 && kc_consumer_budget(c) == PARTS * 64 + 10);
        size_t moved = kc_consumer_refill(c, 7, 0);
        CHECK_MSG(moved == 7 && c->fb.records == 7, "moved %zu, buffered %zu", moved, c->fb.records);
        moved += kc_consumer_refill(c, SIZE_MAX, 0);
        CHECK_MSG(c->fb.records == moved && c->fb.records >= kc_consumer_budget(c), "moved %zu, buffered %zu",
                  moved, c->fb.records);
        CHECK_MSG(min_len(c) >= target, "a partition holds %zu < target %zu", min_len(c), target);
        /* satisfied: nothing more moves without a drain */
        CHECK(kc_consumer_refill(c, SIZE_MAX, 0) == 0);
        for (size_t i = 0; i < c->fb.n; i++) {
            kc_partition_t *p = kc_ps_at(&c->fb, i);
            CHECK(kc_ps_first_offset(p) == 0 && kc_fb_last_offset(&p->q) == (int64_t)p->q.len - 1);
            CHECK(p->app_pos_trusted);
        }
        /* bounded: never past ring_max_records, however hungry a partition is */
        kc_ps_purge_all(&c->fb);
        c->ring_max_records = 50;
        moved = kc_consumer_refill(c, SIZE_MAX, 1);
        CHECK_MSG(c->fb.records <= 50 && moved > 0, "buffered %zu", c->fb.records);
        CHECK(kc_consumer_room(c) == 0 || kc_consumer_refill(c, SIZE_MAX, 1) == 0);
    }
    teardown(&f);
}

/* The prefetch thread moves records through its refill callback without any poll(), and signals the
 * consumer's eventfd when the buffer gets drainable records. */
static void test_prefetch_thread_refills(void) {
    fixture_t f;
    if (setup(&f, 10, PARTS * 100) == 0) {
        kc_consumer_t *c = f.c;
        kc_event_fd_drain(c->wake_fd);
        CHECK(kc_consumer_prefetch_start(c) == 0 && c->prefetch.running && c->prefetch.locking);
        struct pollfd pfd = {.fd = c->wake_fd, .events = POLLIN};
        CHECK(poll(&pfd, 1, 10000) == 1);
        int64_t deadline = now_ms() + 10000;
        while (atomic_load(&c->prefetch.moved) == 0 && now_ms() < deadline)
            usleep(1000);
        kc_consumer_prefetch_stop(c);
        CHECK(!c->prefetch.running && c->prefetch.fd == -1);
        CHECK_MSG(atomic_load(&c->prefetch.moved) > 0 && c->fb.records > 0, "moved %llu, buffered %zu",
                  (unsigned long long)atomic_load(&c->prefetch.moved), c->fb.records);
        kc_consumer_prefetch_stop(c); /* idempotent */
    }
    teardown(&f);
}

int main(void) {
    run_case("budget", test_budget);
    kc_fb_msg_destroy = fake_destroy;
    run_case("room", test_room);
    kc_fb_msg_destroy = rd_kafka_message_destroy;
    run_case("refill", test_refill);
    run_case("prefetch_thread_refills", test_prefetch_thread_refills);
    return kc_test_summary();
}
