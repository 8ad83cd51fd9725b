#include "log_ring.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t ring_mu = PTHREAD_MUTEX_INITIALIZER;
static kc_log_entry_t ring[KC_LOG_RING_CAP];
static size_t ring_head, ring_len;
static uint64_t ring_dropped;
static _Atomic size_t ring_pending;

static void copy_str(char *dst, size_t cap, const char *src) {
    if (!src)
        src = "";
    size_t n = strlen(src);
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

void kc_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    const char *name = rk ? rd_kafka_name(rk) : "";
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    pthread_mutex_lock(&ring_mu);
    if (ring_len == KC_LOG_RING_CAP) {
        ring_head = (ring_head + 1) % KC_LOG_RING_CAP;
        ring_len--;
        ring_dropped++;
    }
    kc_log_entry_t *e = &ring[(ring_head + ring_len) % KC_LOG_RING_CAP];
    e->ts = (double)now.tv_sec + (double)now.tv_nsec / 1e9;
    e->level = level;
    copy_str(e->name, sizeof(e->name), name);
    copy_str(e->fac, sizeof(e->fac), fac);
    copy_str(e->msg, sizeof(e->msg), buf);
    ring_len++;
    atomic_store(&ring_pending, ring_len);
    pthread_mutex_unlock(&ring_mu);
}

size_t kc_log_pending(void) {
    return atomic_load(&ring_pending);
}

size_t kc_log_take(kc_log_entry_t *out, size_t max, uint64_t *dropped) {
    size_t n = 0;
    pthread_mutex_lock(&ring_mu);
    while (n < max && ring_len) {
        out[n++] = ring[ring_head];
        ring_head = (ring_head + 1) % KC_LOG_RING_CAP;
        ring_len--;
    }
    *dropped = ring_dropped;
    ring_dropped = 0;
    atomic_store(&ring_pending, ring_len);
    pthread_mutex_unlock(&ring_mu);
    return n;
}
