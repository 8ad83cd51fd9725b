/* Micro-benchmark of kc_fb_push + kc_fb_drain (csrc/fetch_buffer.c), no broker: fake messages
 * (preallocated, released by a no-op), P partitions, drains of max.poll.records in both fairness
 * modes, in two shapes: "even" (every partition holds the same backlog) and "skewed" (partition 0
 * holds most of it, as in bench/fairness.py).
 *
 * Build (from the repository root), binary outside the checkout:
 *   LIB=$(.venv/bin/python -c 'from kipconsumer import _loader; print(_loader.librdkafka_path())')
 *   cc -std=gnu11 -Wall -O2 -Icsrc bench/micro/fetch_buffer_bench.c csrc/fetch_buffer.c \
 *      -o /tmp/fetch_buffer_bench -L"$(dirname "$LIB")" -l:"$(basename "$LIB")" \
 *      -Wl,-rpath,"$(dirname "$LIB")"
 * Run:   /tmp/fetch_buffer_bench [partitions=12] [max_poll_records=500] [records=2000000] [repeat=5]
 * Prints one line per mode and shape: ns per record and per drain, min and median of `repeat`
 * passes (the push of every record is timed separately). */
#include "fetch_buffer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void no_destroy(rd_kafka_message_t *m) {
    (void)m;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One pass: push `total` records spread by `shape`, then drain everything; returns drain seconds. */
static double pass(rd_kafka_message_t *msgs, size_t total, int parts, size_t max, kc_fairness_t mode,
                   int skewed, double *push_s, size_t *drains) {
    kc_fetch_buffer_t fb;
    kc_fb_part_t **p = malloc(sizeof(*p) * (size_t)parts);
    rd_kafka_message_t **out = malloc(sizeof(*out) * max);
    size_t i, got = 0, k = 0;
    double t0, t1;
    kc_fb_init(&fb);
    for (int j = 0; j < parts; j++)
        p[j] = kc_fb_add(&fb, "bench", j);
    t0 = now_s();
    for (i = 0; i < total; i++) {
        /* skewed: 97% to partition 0, the rest round robin over the others */
        int j = skewed ? ((i % 100) < 97 || parts == 1 ? 0 : 1 + (int)(i % (size_t)(parts - 1)))
                       : (int)(i % (size_t)parts);
        rd_kafka_message_t *m = &msgs[i];
        m->partition = j;
        kc_fb_push(&fb, p[j], &m, 1);
    }
    t1 = now_s();
    *push_s = t1 - t0;
    t0 = now_s();
    while (got < total) {
        size_t n = kc_fb_drain(&fb, max, mode, out);
        if (n == 0)
            break;
        got += n;
        k++;
    }
    t1 = now_s();
    *drains = k;
    kc_fb_destroy(&fb);
    free(out);
    free(p);
    return t1 - t0;
}

int main(int argc, char **argv) {
    int parts = argc > 1 ? atoi(argv[1]) : 12;
    size_t max = argc > 2 ? (size_t)atol(argv[2]) : 500;
    size_t total = argc > 3 ? (size_t)atol(argv[3]) : 2000000;
    int repeat = argc > 4 ? atoi(argv[4]) : 5;
    rd_kafka_message_t *msgs = calloc(total, sizeof(*msgs));
    double *drain = malloc(sizeof(double) * (size_t)repeat), *push = malloc(sizeof(double) * (size_t)repeat);
    kc_fb_msg_destroy = no_destroy;
    for (size_t i = 0; i < total; i++) {
        msgs[i].offset = (int64_t)i;
        msgs[i].len = 100;
    }
    for (int skewed = 0; skewed <= 1; skewed++) {
        for (int mode = KC_FAIRNESS_PROPORTIONAL; mode <= KC_FAIRNESS_GREEDY; mode++) {
            size_t drains = 0;
            for (int r = 0; r < repeat; r++)
                drain[r] = pass(msgs, total, parts, max, (kc_fairness_t)mode, skewed, &push[r], &drains);
            qsort(drain, (size_t)repeat, sizeof(double), cmp_double);
            qsort(push, (size_t)repeat, sizeof(double), cmp_double);
            printf("{\"shape\": \"%s\", \"mode\": \"%s\", \"partitions\": %d, \"max_poll_records\": %zu, "
                   "\"records\": %zu, \"drains\": %zu, \"drain_ns_per_record_min\": %.2f, "
                   "\"drain_ns_per_record_median\": %.2f, \"drain_us_per_poll_median\": %.3f, "
                   "\"push_ns_per_record_median\": %.2f}\n",
                   skewed ? "skewed" : "even", mode == KC_FAIRNESS_GREEDY ? "greedy" : "proportional", parts,
                   max, total, drains, drain[0] / (double)total * 1e9,
                   drain[repeat / 2] / (double)total * 1e9, drain[repeat / 2] / (double)drains * 1e6,
                   push[repeat / 2] / (double)total * 1e9);
        }
    }
    free(msgs);
    free(drain);
    free(push);
    return 0;
}
