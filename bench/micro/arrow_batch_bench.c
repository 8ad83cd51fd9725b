/* Micro-benchmark of kc_arrow_build_ex (csrc/arrow_batch.c): build + release batches
 * of hand-made messages (one topic, 16 B keys), timestamps passed explicitly.
 *
 * Build (from the repository root), binary outside the checkout:
 *   LIB=$(.venv/bin/python -c 'from kipconsumer import _loader; print(_loader.librdkafka_path())')
 *   cc -std=gnu11 -Wall -O2 -Icsrc bench/micro/arrow_batch_bench.c csrc/arrow_batch.c \
 *      -o /tmp/arrow_batch_bench -L"$(dirname "$LIB")" -l:"$(basename "$LIB")" \
 *      -Wl,-rpath,"$(dirname "$LIB")" -pthread
 * Run:   /tmp/arrow_batch_bench [messages_per_batch=500] [value_bytes=100] [iterations=20000]
 *
 * Messages and payloads are hot in cache here: an upper bound for real consumed
 * messages (see docs/arrow.md, "Performance notes"). */
#include "arrow_batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double kc_bench_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? (size_t)atol(argv[1]) : 500;
    size_t vlen = argc > 2 ? (size_t)atol(argv[2]) : 100;
    int iters = argc > 3 ? atoi(argv[3]) : 20000;
    char err[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_t *rk;
    rd_kafka_topic_t *rkt;
    rd_kafka_message_t *msgs, **ptrs;
    int64_t *ts;
    int32_t *tt;
    char *vals, *keys;
    size_t i;
    int flags;

    rd_kafka_conf_set(conf, "log_level", "0", err, sizeof(err));
    rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (!rk) {
        fprintf(stderr, "rd_kafka_new: %s\n", err);
        return 1;
    }
    rkt = rd_kafka_topic_new(rk, "bench-topic", NULL);
    msgs = calloc(n ? n : 1, sizeof(*msgs));
    ptrs = malloc((n ? n : 1) * sizeof(*ptrs));
    ts = malloc((n ? n : 1) * sizeof(*ts));
    tt = malloc((n ? n : 1) * sizeof(*tt));
    vals = malloc(n * vlen + 1);
    keys = malloc(n * 16 + 1);
    memset(vals, 'v', n * vlen);
    memset(keys, 'k', n * 16);
    for (i = 0; i < n; i++) {
        msgs[i] = (rd_kafka_message_t){.rkt = rkt,
                                       .partition = (int32_t)(i % 12),
                                       .offset = (int64_t)i,
                                       .key = keys + i * 16,
                                       .key_len = 16,
                                       .payload = vals + i * vlen,
                                       .len = vlen};
        ptrs[i] = &msgs[i];
        ts[i] = 1700000000000LL + (int64_t)i;
        tt[i] = RD_KAFKA_TIMESTAMP_CREATE_TIME;
    }
    for (flags = 0; flags <= KC_ARROW_WITH_TIMESTAMP_TYPE; flags++) {
        struct ArrowSchema s;
        struct ArrowArray a;
        double t0 = kc_bench_now(), dt;
        int k;
        for (k = 0; k < iters; k++) {
            if (kc_arrow_build_ex(ptrs, n, flags, ts, tt, &s, &a, err, sizeof(err)) != 0) {
                fprintf(stderr, "%s\n", err);
                return 1;
            }
            a.release(&a);
            s.release(&s);
        }
        dt = kc_bench_now() - t0;
        printf("flags=%d n=%zu value=%zuB: %.2f us/batch, %.1f M records/s, %.2f GB/s of values\n", flags, n,
               vlen, dt / iters * 1e6, (double)n * iters / dt / 1e6, (double)n * vlen * iters / dt / 1e9);
    }
    free(msgs);
    free(ptrs);
    free(ts);
    free(tt);
    free(vals);
    free(keys);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_destroy(rk);
    return 0;
}
