/* Baseline for the benchmarks: a plain C consumer on librdkafka.
 *
 * Gets the topic's metadata (untimed, as the Java peer's partitionsFor()), assigns every partition from
 * offset 0 (no group), takes messages with
 * rd_kafka_consume_batch_queue(500 per call), touches each value, and prints one JSON
 * line with records/s measured from the start of the first call that returned records to the last
 * record, and the seconds and CPU from
 * assign() on (what the Java client's poll loop is timed from: it prefetches nothing before it).
 *
 *   raw_consumer BOOTSTRAP TOPIC PARTITIONS RECORDS */
#include <stdio.h>
#include <stdlib.h>
#include <librdkafka/rdkafka.h>

#include "bench_common.h"

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s BOOTSTRAP TOPIC PARTITIONS RECORDS\n", argv[0]);
        return 2;
    }
    const char *topic = argv[2];
    int partitions = atoi(argv[3]);
    long want = atol(argv[4]);
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", argv[1], err, sizeof(err)) != RD_KAFKA_CONF_OK ||
        rd_kafka_conf_set(conf, "enable.partition.eof", "false", err, sizeof(err)) != RD_KAFKA_CONF_OK ||
        /* assign() needs a group handle; nothing is joined or committed */
        rd_kafka_conf_set(conf, "group.id", "bench-raw-c", err, sizeof(err)) != RD_KAFKA_CONF_OK ||
        rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, sizeof(err)) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    rd_kafka_t *rk = bench_consumer_new(conf);
    if (!rk || bench_wait_metadata(rk, topic) != 0)
        return 1;
    double t_assign = now_s(), cpu_assign = cpu_s();
    bench_assign_from_beginning(rk, topic, partitions);
    rd_kafka_queue_t *q = rd_kafka_queue_get_consumer(rk);
    rd_kafka_message_t *batch[500];
    long got = 0;
    unsigned long checksum = 0;
    double t0 = 0, cpu0 = 0, deadline = now_s() + 120;
    while (got < want && now_s() < deadline) {
        /* from the start of the first call that returns records, as the Python workers and Java */
        double s = t0 ? 0 : now_s(), cs = t0 ? 0 : cpu_s();
        ssize_t n = rd_kafka_consume_batch_queue(q, 100, batch, 500);
        for (ssize_t i = 0; i < n; i++) {
            rd_kafka_message_t *m = batch[i];
            if (!m->err) {
                if (!t0) {
                    t0 = s;
                    cpu0 = cs;
                }
                got++;
                if (m->len)
                    checksum += ((unsigned char *)m->payload)[0];
            }
            rd_kafka_message_destroy(m);
        }
    }
    double end = now_s(), cpu_end = cpu_s();
    double secs = end - t0, cpu = cpu_end - cpu0;
    printf("{\"records\": %ld, \"seconds\": %.6f, \"records_per_s\": %.1f, \"cpu_s\": %.6f, "
           "\"seconds_from_assign\": %.6f, \"cpu_s_from_assign\": %.6f, \"checksum\": %lu}\n",
           got, secs, got / secs, cpu, end - t_assign, cpu_end - cpu_assign, checksum);
    rd_kafka_queue_destroy(q);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return got == want ? 0 : 1;
}
