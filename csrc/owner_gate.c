/* owner_gate: see owner_gate.h. */
#include "owner_gate.h"
#include "clock.h"

void kc_owner_gate_init(kc_owner_gate_t *g) {
    pthread_condattr_t ca;
    pthread_mutex_init(&g->m, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->c, &ca);
    pthread_condattr_destroy(&ca);
    g->generation = 0;
}

void kc_owner_gate_destroy(kc_owner_gate_t *g) {
    pthread_cond_destroy(&g->c);
    pthread_mutex_destroy(&g->m);
}

uint64_t kc_owner_gate_generation(kc_owner_gate_t *g) {
    uint64_t gen;
    pthread_mutex_lock(&g->m);
    gen = g->generation;
    pthread_mutex_unlock(&g->m);
    return gen;
}

void kc_owner_gate_open(kc_owner_gate_t *g) {
    pthread_mutex_lock(&g->m);
    g->generation++;
    pthread_cond_broadcast(&g->c);
    pthread_mutex_unlock(&g->m);
}

void kc_owner_gate_wait(kc_owner_gate_t *g, uint64_t seen, int64_t until_us) {
    struct timespec ts;
    ts.tv_sec = (time_t)(until_us / 1000000);
    ts.tv_nsec = (long)(until_us % 1000000) * 1000;
    pthread_mutex_lock(&g->m);
    while (g->generation == seen && kc_now_us() < until_us) {
        pthread_cond_timedwait(&g->c, &g->m, &ts);
    }
    pthread_mutex_unlock(&g->m);
}
