/* What the C benchmark consumers in bench/c share: clocks and a consumer assigned every partition. */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#include <stdio.h>
#include <sys/resource.h>
#include <time.h>
#include <librdkafka/rdkafka.h>

/* CPU seconds of the whole process (every thread, librdkafka's included). */
static inline double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* Monotonic wall-clock seconds. */
static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A consumer from conf (which it takes) serving the consumer queue, or NULL (the reason printed). */
static inline rd_kafka_t *bench_consumer_new(rd_kafka_conf_t *conf) {
    char err[512];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
    if (!rk) {
        fprintf(stderr, "%s\n", err);
        return NULL;
    }
    rd_kafka_poll_set_consumer(rk);
    return rk;
}

/* Waits (at most 30 s) for the topic's metadata: what the Java peer has before its clock starts (it
 * calls partitionsFor()). Returns 0, or -1 (the reason printed). */
static inline int bench_wait_metadata(rd_kafka_t *rk, const char *topic) {
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t err = rkt ? rd_kafka_metadata(rk, 0, rkt, &md, 30000) : rd_kafka_last_error();
    if (md)
        rd_kafka_metadata_destroy(md);
    if (rkt)
        rd_kafka_topic_destroy(rkt);
    if (err)
        fprintf(stderr, "metadata of %s: %s\n", topic, rd_kafka_err2str(err));
    return err ? -1 : 0;
}

/* Assigns partitions 0..n-1 of topic from offset 0 (the Java peer's assign() + seek(tp, 0); no group:
 * nothing joined or committed). */
static inline void bench_assign_from_beginning(rd_kafka_t *rk, const char *topic, int n) {
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(n);
    for (int p = 0; p < n; p++)
        rd_kafka_topic_partition_list_add(parts, topic, p)->offset = 0;
    rd_kafka_assign(rk, parts);
    rd_kafka_topic_partition_list_destroy(parts);
}

#endif
