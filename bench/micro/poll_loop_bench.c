/* poll_loop_bench: a fixed kc_consumer_poll() loop on librdkafka's in-process mock cluster (no
 * Python, no network), for instruction counts of poll() that a shared machine's load does not skew.
 * Produces `records` records (100 B values) over `partitions` partitions, assigns them from offset 0
 * (manual assignment), waits until librdkafka has fetched them all, then polls until every record was
 * returned; prints records and polls.
 *
 * Build (from the repository root), binary outside the checkout:
 *   LIB=$(.venv/bin/python -c 'from kipconsumer import _loader; print(_loader.librdkafka_path())')
 *   PY_INC=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
 *   cc -std=gnu11 -Wall -O2 -g -Icsrc -I"$PY_INC" bench/micro/poll_loop_bench.c csrc/?*.c \
 *      -o /tmp/poll_loop_bench -L"$(dirname "$LIB")" -l:"$(basename "$LIB")" \
 *      -Wl,-rpath,"$(dirname "$LIB")" -pthread
 * Run:   valgrind --tool=callgrind --toggle-collect=kc_consumer_poll /tmp/poll_loop_bench 4 40000 500
 *        (args: [partitions=4] [records=20000] [max_poll_records=500]; "Collected" is the poll cost;
 *        runs differ a little as librdkafka's fetch batches differ). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "consumer_core.h"

int main(int argc, char **argv) {
    int parts = argc > 1 ? atoi(argv[1]) : 4;
    long total = argc > 2 ? atol(argv[2]) : 20000;
    size_t mpr = argc > 3 ? (size_t)atol(argv[3]) : 500;
    char errstr[512];
    rd_kafka_conf_t *pc = rd_kafka_conf_new();
    rd_kafka_conf_set(pc, "test.mock.num.brokers", "1", errstr, sizeof(errstr));
    rd_kafka_conf_set(pc, "log_level", "3", errstr, sizeof(errstr));
    rd_kafka_conf_set(pc, "linger.ms", "5", errstr, sizeof(errstr));
    rd_kafka_t *prod = rd_kafka_new(RD_KAFKA_PRODUCER, pc, errstr, sizeof(errstr));
    if (!prod) {
        fprintf(stderr, "producer: %s\n", errstr);
        return 1;
    }
    rd_kafka_mock_cluster_t *mc = rd_kafka_handle_mock_cluster(prod);
    const char *bs = rd_kafka_mock_cluster_bootstraps(mc);
    rd_kafka_mock_topic_create(mc, "bench", parts, 1);
    char val[100];
    memset(val, 'v', sizeof(val));
    for (long i = 0; i < total; i++) {
        while (rd_kafka_producev(prod, RD_KAFKA_V_TOPIC("bench"), RD_KAFKA_V_PARTITION((int32_t)(i % parts)),
                                 RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_VALUE(val, sizeof(val)),
                                 RD_KAFKA_V_END) == RD_KAFKA_RESP_ERR__QUEUE_FULL)
            rd_kafka_poll(prod, 10);
    }
    rd_kafka_flush(prod, 30000);

    rd_kafka_conf_t *cc = rd_kafka_conf_new();
    rd_kafka_conf_set(cc, "bootstrap.servers", bs, errstr, sizeof(errstr));
    rd_kafka_conf_set(cc, "group.id", "bench", errstr, sizeof(errstr));
    rd_kafka_conf_set(cc, "enable.auto.commit", "false", errstr, sizeof(errstr));
    rd_kafka_conf_set(cc, "log_level", "3", errstr, sizeof(errstr));
    kc_consumer_t *c = kc_consumer_new(cc, mpr, KC_FAIRNESS_PROPORTIONAL, 300000, errstr, sizeof(errstr));
    if (!c) {
        fprintf(stderr, "core: %s\n", errstr);
        return 1;
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, cc, errstr, sizeof(errstr));
    if (!rk || kc_consumer_attach(c, rk) != 0) {
        fprintf(stderr, "consumer: %s\n", errstr);
        return 1;
    }
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(parts);
    for (int j = 0; j < parts; j++) {
        rd_kafka_topic_partition_list_add(l, "bench", j)->offset = 0;
        kc_consumer_add_partition(c, "bench", j);
    }
    rd_kafka_assign(rk, l);
    rd_kafka_topic_partition_list_destroy(l);
    /* every record fetched before the first poll: the loop's work is then the same in every run
     * (no poll finds the fetch queue empty and waits) */
    time_t fetched_by = time(NULL) + 60;
    while (rd_kafka_queue_length(c->fetchq) < (size_t)total && time(NULL) < fetched_by)
        usleep(10000);
    rd_kafka_message_t **out = malloc(mpr * sizeof(*out));
    long got = 0, polls = 0;
    time_t deadline = time(NULL) + 120;
    while (got < total && time(NULL) < deadline) {
        size_t n = 0;
        kc_poll_status_t st = kc_consumer_poll(c, 100, out, &n);
        polls++;
        for (size_t i = 0; i < n; i++)
            rd_kafka_message_destroy(out[i]);
        got += (long)n;
        if (st == KC_POLL_EVENT) {
            rd_kafka_message_t *e;
            while ((e = kc_consumer_take_error(c)) != NULL)
                rd_kafka_message_destroy(e);
        }
    }
    printf("records %ld polls %ld\n", got, polls);
    free(out);
    rd_kafka_assign(rk, NULL);
    kc_heartbeat_monitor_t *hb = c->heartbeat;
    kc_consumer_free(c);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    kc_hb_free(hb);
    rd_kafka_destroy(prod);
    return got == total ? 0 : 1;
}
