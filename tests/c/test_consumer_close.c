/* Unit tests of csrc/rebalance.c (the *assign() answer to rebalance events) and
 * csrc/consumer_close.c (the reaper that finishes a consumer's close without Python), against
 * librdkafka's in-process mock cluster.
 * Output: one line per failed check, then "N passed, M failed". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "consumer_close.h"
#include "poll_timer.h"
#include "rebalance.h"

#include "kc_test.h"

static rd_kafka_t *g_mock_owner;
static const char *g_bootstraps;

/* The rebalance callback answers with kc_answer_rebalance for the protocol in the opaque. */
static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *parts,
                         void *opaque) {
    int cooperative = *(int *)opaque;
    rd_kafka_error_t *error = kc_answer_rebalance(rk, err, parts, cooperative);
    if (error != NULL) {
        printf("FAIL rebalance answer: %s\n", rd_kafka_error_string(error));
        g_case_failed = 1;
        rd_kafka_error_destroy(error);
    }
}

static int g_eager = 0, g_coop = 1;

static int g_store_by_hand = 0; /* enable.auto.offset.store=false for the next member */

static rd_kafka_t *member(const char *group, const char *topic, int *cooperative) {
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (g_store_by_hand)
        rd_kafka_conf_set(conf, "enable.auto.offset.store", "false", errstr, sizeof(errstr));
    rd_kafka_conf_set(conf, "bootstrap.servers", g_bootstraps, errstr, sizeof(errstr));
    rd_kafka_conf_set(conf, "group.id", group, errstr, sizeof(errstr));
    rd_kafka_conf_set(conf, "session.timeout.ms", "30000", errstr, sizeof(errstr));
    rd_kafka_conf_set(conf, "heartbeat.interval.ms", "200", errstr, sizeof(errstr));
    rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof(errstr));
    if (*cooperative)
        rd_kafka_conf_set(conf, "partition.assignment.strategy", "cooperative-sticky", errstr,
                          sizeof(errstr));
    rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
    rd_kafka_conf_set_opaque(conf, cooperative);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    if (rk == NULL) {
        printf("FAIL consumer: %s\n", errstr);
        return NULL;
    }
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t *sub = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(sub, topic, RD_KAFKA_PARTITION_UA);
    rd_kafka_subscribe(rk, sub);
    rd_kafka_topic_partition_list_destroy(sub);
    return rk;
}

static int assigned_count(rd_kafka_t *rk) {
    rd_kafka_topic_partition_list_t *parts = NULL;
    int n = -1;
    if (rd_kafka_assignment(rk, &parts) == RD_KAFKA_RESP_ERR_NO_ERROR && parts != NULL) {
        n = parts->cnt;
        rd_kafka_topic_partition_list_destroy(parts);
    }
    return n;
}

/* Polls rk until it holds `want` partitions or `ms` passed; returns the count held. */
static int poll_until_assigned(rd_kafka_t *rk, int want, int64_t ms) {
    int64_t until = kc_now_ms() + ms;
    int n = 0;
    while (kc_now_ms() < until) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
        if (m != NULL)
            rd_kafka_message_destroy(m);
        n = assigned_count(rk);
        if (n == want)
            break;
    }
    return n;
}

/* A member of `group` holding all 4 partitions of close-topic, or NULL (a failed check). */
static rd_kafka_t *assigned_member(const char *group, int *cooperative) {
    rd_kafka_t *rk = member(group, "close-topic", cooperative);
    CHECK(rk != NULL);
    if (rk == NULL)
        return NULL;
    int n = poll_until_assigned(rk, 4, 60000);
    CHECK_MSG(n == 4, "member of %s holds %d of 4 partitions", group, n);
    return rk;
}

/* Runs the reaper on rk (q: a close already started, or NULL) and checks that it took < 20 s. */
static void reap(rd_kafka_t *rk, rd_kafka_queue_t *q, int cooperative, int unassigned) {
    int64_t t0 = kc_now_ms();
    kc_reaper_t *r = kc_reaper_new(rk, q, NULL, cooperative, unassigned);
    CHECK(r != NULL);
    if (r == NULL)
        return;
    kc_reaper_run(r);
    CHECK_MSG(kc_now_ms() - t0 < 20000, "reaper took %lld ms", (long long)(kc_now_ms() - t0));
}

/* A member dropped without close(): the reaper starts librdkafka's close, answers its rebalance
 * events and destroys the handle, in bounded time and without leaks (valgrind run). */
static void reaper_closes_member(int *cooperative, const char *group) {
    rd_kafka_t *a = assigned_member(group, cooperative);
    if (a != NULL)
        reap(a, NULL, *cooperative, 0);
}

static void test_reaper_eager(void) {
    reaper_closes_member(&g_eager, "close-eager");
}
static void test_reaper_cooperative(void) {
    reaper_closes_member(&g_coop, "close-coop");
}

/* A consumer of `group` that does not subscribe: it reads the group's committed offsets. */
static rd_kafka_t *group_reader(const char *group) {
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", g_bootstraps, errstr, sizeof(errstr));
    rd_kafka_conf_set(conf, "group.id", group, errstr, sizeof(errstr));
    rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof(errstr));
    return rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
}

/* Offsets stored by hand (enable.auto.offset.store=false, as kipconsumer does) on partitions with
 * no records: the reaper's close commits them (auto-commit) and finishes in bounded time.
 * A list passed to rd_kafka_offsets_store() keeps references to the partitions it named until it
 * is destroyed, and rd_kafka_destroy() waits for them: destroy it before the reap (a list kept
 * across the reap hung this test in rd_kafka_destroy; kipconsumer destroys its lists at once). */
static rd_kafka_topic_partition_list_t *four_partitions(int64_t offset) {
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(4);
    for (int i = 0; i < 4; i++)
        rd_kafka_topic_partition_list_add(parts, "close-topic", i)->offset = offset;
    return parts;
}

static void test_reaper_commits_stored_offsets(void) {
    rd_kafka_topic_partition_list_t *parts;
    rd_kafka_t *a, *b;
    g_store_by_hand = 1;
    a = assigned_member("close-stored", &g_eager);
    g_store_by_hand = 0;
    if (a != NULL) {
        parts = four_partitions(7);
        CHECK(rd_kafka_offsets_store(a, parts) == RD_KAFKA_RESP_ERR_NO_ERROR);
        rd_kafka_topic_partition_list_destroy(parts);
        reap(a, NULL, 0, 0);
    }
    b = group_reader("close-stored");
    CHECK(b != NULL);
    if (b != NULL) {
        parts = four_partitions(RD_KAFKA_OFFSET_INVALID);
        CHECK(rd_kafka_committed(b, parts, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR);
        for (int i = 0; i < 4; i++)
            CHECK_MSG(parts->elems[i].offset == 7, "partition %d committed %lld", i,
                      (long long)parts->elems[i].offset);
        rd_kafka_topic_partition_list_destroy(parts);
        rd_kafka_destroy(b);
    }
}

/* A close started by the application (close() that reached its deadline) is handed to the reaper
 * with its queue, before any event on it was served. */
static void test_reaper_takes_over_started_close(void) {
    rd_kafka_t *a = assigned_member("close-started", &g_coop);
    rd_kafka_queue_t *q;
    rd_kafka_error_t *error;
    if (a == NULL)
        return;
    q = rd_kafka_queue_new(a);
    error = rd_kafka_consumer_close_queue(a, q);
    CHECK(error == NULL);
    if (error != NULL)
        rd_kafka_error_destroy(error);
    reap(a, q, 1, 0);
}

/* The answer has to match the protocol: an incremental call in an eager group is an error. */
static void test_answer_must_match_protocol(void) {
    rd_kafka_t *a = assigned_member("close-mismatch", &g_eager);
    rd_kafka_topic_partition_list_t *parts = NULL;
    rd_kafka_error_t *error;
    if (a == NULL)
        return;
    CHECK(rd_kafka_assignment(a, &parts) == RD_KAFKA_RESP_ERR_NO_ERROR);
    error = kc_answer_rebalance(a, RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS, parts, 1);
    CHECK_MSG(error != NULL, "incremental unassign accepted in an eager group");
    if (error != NULL)
        rd_kafka_error_destroy(error);
    rd_kafka_topic_partition_list_destroy(parts);
    CHECK(assigned_count(a) == 4);
    reap(a, NULL, 0, 0);
}

/* close() served by hand as NativeConsumer.close() does: the first event (the revoke) gets its
 * answer, the queue is drained, and the reaper finishes the close with `unassigned` set. */
static void test_close_served_then_reaped(void) {
    rd_kafka_t *a = assigned_member("close-drain", &g_eager);
    rd_kafka_queue_t *q;
    rd_kafka_event_t *ev = NULL;
    rd_kafka_error_t *error;
    if (a == NULL)
        return;
    q = rd_kafka_queue_new(a);
    CHECK(kc_close_drain_stale(q) == 0);
    error = rd_kafka_consumer_close_queue(a, q);
    CHECK(error == NULL);
    if (error != NULL)
        rd_kafka_error_destroy(error);
    int64_t until = kc_now_ms() + 10000;
    while (ev == NULL && kc_now_ms() < until)
        ev = rd_kafka_queue_poll(q, 100);
    CHECK_MSG(ev != NULL && rd_kafka_event_type(ev) == RD_KAFKA_EVENT_REBALANCE,
              "no revoke event from the close");
    if (ev != NULL) {
        CHECK(rd_kafka_event_error(ev) == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS);
        CHECK(rd_kafka_event_topic_partition_list(ev)->cnt == 4);
        CHECK(kc_answer_rebalance(a, rd_kafka_event_error(ev), rd_kafka_event_topic_partition_list(ev), 0) ==
              NULL);
        rd_kafka_event_destroy(ev);
    }
    CHECK(kc_close_drain_stale(q) >= 0);
    CHECK(rd_kafka_queue_length(q) == 0);
    CHECK(assigned_count(a) == 0);
    reap(a, q, 0, 1);
}

int main(void) {
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_mock_cluster_t *mc;
    rd_kafka_conf_set(conf, "test.mock.num.brokers", "1", errstr, sizeof(errstr));
    rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof(errstr));
    g_mock_owner = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (g_mock_owner == NULL) {
        printf("rd_kafka_new failed: %s\n0 passed, 1 failed\n", errstr);
        return 1;
    }
    mc = rd_kafka_handle_mock_cluster(g_mock_owner);
    rd_kafka_mock_group_initial_rebalance_delay_ms(mc, 0);
    rd_kafka_mock_topic_create(mc, "close-topic", 4, 1);
    g_bootstraps = rd_kafka_mock_cluster_bootstraps(mc);

    run_case("reaper closes an eager member", test_reaper_eager);
    run_case("reaper closes a cooperative member", test_reaper_cooperative);
    run_case("reaper commits offsets stored by hand", test_reaper_commits_stored_offsets);
    run_case("reaper takes over a close already started", test_reaper_takes_over_started_close);
    run_case("answer must match the group's protocol", test_answer_must_match_protocol);
    run_case("close served by hand, then reaped", test_close_served_then_reaped);

    rd_kafka_destroy(g_mock_owner);
    return kc_test_summary();
}
