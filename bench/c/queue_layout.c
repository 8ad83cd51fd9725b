/* Measures librdkafka's two fetch-queue layouts for issue 19's latency goal: what a poll of 500
 * records that serves every partition with data costs right after a pause, what the consumer
 * reaches in throughput, and how much memory a stall holds, at the same total prefetch bound.
 *
 *   queue_layout BOOTSTRAP TOPIC PARTITIONS RECORDS LAYOUT KBYTES MODE
 *
 * LAYOUT  shared     every partition's fetch queue forwarded to the consumer queue (what
 *                    kipconsumer uses): queued.max.messages.kbytes=KBYTES bounds them together;
 *                    a poll that must serve every partition with data takes records in arrival
 *                    order until each partition with data was seen (KIP-41's first poll).
 *         partition  each partition's queue kept apart (rd_kafka_queue_forward(q, NULL)):
 *                    librdkafka applies queued.max.messages.kbytes per partition, so each gets
 *                    KBYTES / PARTITIONS; a poll takes up to 500 / PARTITIONS from each queue.
 * MODE    throughput read RECORDS records as fast as the layout allows, touching each value
 *         pause      10 rounds: stop 1 s (librdkafka prefetches), time the first poll, then 100 more
 *
 * Prints one JSON line. Settings as kipconsumer's defaults: fetch.queue.backoff.ms=10,
 * queued.min.messages=100000 (divided by PARTITIONS for the partition layout). */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <librdkafka/rdkafka.h>

#include "bench_common.h"

#define POLL_RECORDS 500
#define MAX_PARTS    256

static double rss_mib(void) {
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return resident * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0);
}

typedef struct {
    int partitions, per_partition;
    rd_kafka_queue_t *shared;
    rd_kafka_queue_t *pq[MAX_PARTS];
    int wake_fd;
    unsigned long checksum;
    long
        moved; /* records taken from librdkafka (the shared layout's first poll takes more than it returns) */
} layout_t;

static const uint64_t one = 1;

static long take(rd_kafka_queue_t *q, rd_kafka_message_t **buf, size_t n, layout_t *l) {
    ssize_t got = rd_kafka_consume_batch_queue(q, 0, buf, n);
    long ok = 0;
    for (ssize_t i = 0; i < got; i++) {
        if (!buf[i]->err) {
            ok++;
            if (buf[i]->len)
                l->checksum += ((unsigned char *)buf[i]->payload)[0];
        }
        rd_kafka_message_destroy(buf[i]);
    }
    l->moved += got > 0 ? got : 0;
    return ok;
}

/* One poll of up to 500 records. first: the shared layout keeps taking until every partition
 * with data was seen (KIP-41's first poll; the records past 500 would be buffered by the client). */
static long poll_once(layout_t *l, int first) {
    rd_kafka_message_t *buf[POLL_RECORDS];
    if (l->pq[0]) {
        long got = 0;
        for (int p = 0; p < l->partitions; p++)
            got += take(l->pq[p], buf, (size_t)l->per_partition, l);
        return got;
    }
    if (!first)
        return take(l->shared, buf, POLL_RECORDS, l);
    char seen[MAX_PARTS] = {0};
    int nseen = 0;
    long got = 0;
    for (;;) {
        ssize_t n = rd_kafka_consume_batch_queue(l->shared, 0, buf, POLL_RECORDS);
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n; i++) {
            if (!buf[i]->err) {
                got++;
                l->checksum += buf[i]->len ? ((unsigned char *)buf[i]->payload)[0] : 0;
                if (!seen[buf[i]->partition]) {
                    seen[buf[i]->partition] = 1;
                    nseen++;
                }
            }
            rd_kafka_message_destroy(buf[i]);
        }
        l->moved += n;
        if (nseen == l->partitions)
            break;
    }
    return got;
}

static void wait_data(layout_t *l, int ms) {
    struct pollfd pfd = {.fd = l->wake_fd, .events = POLLIN};
    poll(&pfd, 1, ms);
    uint64_t v;
    while (read(l->wake_fd, &v, sizeof(v)) == sizeof(v))
        ;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr,
                "usage: %s BOOTSTRAP TOPIC PARTITIONS RECORDS shared|partition KBYTES throughput|pause\n",
                argv[0]);
        return 2;
    }
    const char *topic = argv[2];
    layout_t l = {.partitions = atoi(argv[3])};
    long want = atol(argv[4]);
    int apart = strcmp(argv[5], "partition") == 0;
    long kbytes = atol(argv[6]);
    int pause_mode = strcmp(argv[7], "pause") == 0;
    if (l.partitions < 1 || l.partitions > MAX_PARTS)
        return 2;
    l.per_partition = (POLL_RECORDS + l.partitions - 1) / l.partitions;
    char kb[32], minmsgs[32], err[512];
    snprintf(kb, sizeof(kb), "%ld", apart ? (kbytes + l.partitions - 1) / l.partitions : kbytes);
    snprintf(minmsgs, sizeof(minmsgs), "%d", apart ? 100000 / l.partitions : 100000);
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    const char *kv[][2] = {{"bootstrap.servers", argv[1]},     {"enable.partition.eof", "false"},
                           {"group.id", "bench-queue-layout"}, {"enable.auto.commit", "false"},
                           {"queued.max.messages.kbytes", kb}, {"queued.min.messages", minmsgs},
                           {"fetch.queue.backoff.ms", "10"}};
    for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]); i++)
        if (rd_kafka_conf_set(conf, kv[i][0], kv[i][1], err, sizeof(err)) != RD_KAFKA_CONF_OK) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
    /* extra librdkafka settings for exploring, e.g. QL_SET="max.partition.fetch.bytes=262144" */
    char extra[1024];
    snprintf(extra, sizeof(extra), "%s", getenv("QL_SET") ? getenv("QL_SET") : "");
    for (char *save = NULL, *item = strtok_r(extra, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq)
            continue;
        *eq = '\0';
        if (rd_kafka_conf_set(conf, item, eq + 1, err, sizeof(err)) != RD_KAFKA_CONF_OK) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
    }
    rd_kafka_t *rk = bench_consumer_new(conf);
    if (!rk)
        return 1;
    l.wake_fd = eventfd(0, EFD_NONBLOCK);
    l.shared = rd_kafka_queue_get_consumer(rk);
    rd_kafka_queue_io_event_enable(l.shared, l.wake_fd, &one, sizeof(one));
    if (apart)
        for (int p = 0; p < l.partitions; p++) {
            l.pq[p] = rd_kafka_queue_get_partition(rk, topic, p);
            rd_kafka_queue_forward(l.pq[p], NULL);
            rd_kafka_queue_io_event_enable(l.pq[p], l.wake_fd, &one, sizeof(one));
        }
    bench_assign_from_beginning(rk, topic, l.partitions);

    long got = 0;
    double t0 = 0, cpu0 = 0, deadline = now_s() + 120;
    if (!pause_mode) {
        while (got < want && now_s() < deadline) {
            long n = poll_once(&l, 0);
            if (n && !t0) {
                t0 = now_s();
                cpu0 = cpu_s();
            }
            got += n;
            if (!n)
                wait_data(&l, getenv("QL_WAIT_MS") ? atoi(getenv("QL_WAIT_MS")) : 100);
        }
        double secs = now_s() - t0, cpu = cpu_s() - cpu0;
        printf(
            "{\"layout\": \"%s\", \"records\": %ld, \"records_per_s\": %.1f, \"cpu_ns_per_record\": %.1f}\n",
            argv[5], got, got / secs, cpu * 1e9 / (double)got);
    } else {
        enum { ROUNDS = 10, POLLS = 100 };
        double first_us[ROUNDS], all_us[ROUNDS * (POLLS + 1)], growth_max = 0;
        long first_moved_max = 0;
        int n_all = 0;
        for (int r = 0; r < ROUNDS; r++) {
            double before = rss_mib();
            sleep(1);
            double growth = rss_mib() - before;
            if (growth > growth_max)
                growth_max = growth;
            for (int i = 0; i <= POLLS; i++) {
                long moved0 = l.moved;
                double s = now_s();
                got += poll_once(&l, i == 0);
                double us = (now_s() - s) * 1e6;
                all_us[n_all++] = us;
                if (i == 0) {
                    first_us[r] = us;
                    if (l.moved - moved0 > first_moved_max)
                        first_moved_max = l.moved - moved0;
                }
            }
        }
        qsort(first_us, ROUNDS, sizeof(double), cmp_double);
        qsort(all_us, (size_t)n_all, sizeof(double), cmp_double);
        printf(
            "{\"layout\": \"%s\", \"first_p50_us\": %.1f, \"first_max_us\": %.1f, \"p99_us\": %.1f, "
            "\"max_us\": %.1f, \"first_moved_max\": %ld, \"rss_growth_max_mib\": %.1f, \"rss_mib\": %.1f}\n",
            argv[5], first_us[ROUNDS / 2], first_us[ROUNDS - 1], all_us[(int)(n_all * 0.99)],
            all_us[n_all - 1], first_moved_max, growth_max, rss_mib());
    }
    for (int p = 0; p < l.partitions; p++)
        if (l.pq[p])
            rd_kafka_queue_destroy(l.pq[p]);
    rd_kafka_queue_destroy(l.shared);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    close(l.wake_fd);
    return 0;
}
