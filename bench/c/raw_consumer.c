/* Baseline for the benchmarks: a plain C consumer on librdkafka.
 *
 * Assigns every partition of a topic from the beginning (no group), takes messages with
 * rd_kafka_consume_batch_queue(500 per call), touches each value, and prints one JSON
 * line with records/s measured from the first record to the last.
 *
 *   raw_consumer BOOTSTRAP TOPIC PARTITIONS RECORDS */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <librdkafka/rdkafka.h>

/* CPU seconds of the whole process (every thread, librdkafka's included). */
static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

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
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
    if (!rk) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(partitions);
    for (int p = 0; p < partitions; p++)
        rd_kafka_topic_partition_list_add(parts, topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_assign(rk, parts);
    rd_kafka_topic_partition_list_destroy(parts);
    rd_kafka_queue_t *q = rd_kafka_queue_get_consumer(rk);
    rd_kafka_message_t *batch[500];
    long got = 0;
    unsigned long checksum = 0;
    double t0 = 0, cpu0 = 0, deadline = now_s() + 120;
    while (got < want && now_s() < deadline) {
        ssize_t n = rd_kafka_consume_batch_queue(q, 100, batch, 500);
        for (ssize_t i = 0; i < n; i++) {
            rd_kafka_message_t *m = batch[i];
            if (!m->err) {
                if (!t0) {
                    t0 = now_s();
                    cpu0 = cpu_s();
                }
                got++;
                if (m->len)
                    checksum += ((unsigned char *)m->payload)[0];
            }
            rd_kafka_message_destroy(m);
        }
    }
    double secs = now_s() - t0, cpu = cpu_s() - cpu0;
    printf("{\"records\": %ld, \"seconds\": %.6f, \"records_per_s\": %.1f, \"cpu_s\": %.6f, \"checksum\": "
           "%lu}\n",
           got, secs, got / secs, cpu, checksum);
    rd_kafka_queue_destroy(q);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return got == want ? 0 : 1;
}
