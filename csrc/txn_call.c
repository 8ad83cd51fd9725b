/* txn_call: see txn_call.h. */
#include "txn_call.h"
#include "clock.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

struct kc_txn_call_s {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    rd_kafka_t *rk;
    int op;
    int timeout_ms;
    int hold_ms;
    rd_kafka_topic_partition_list_t *offsets;
    rd_kafka_consumer_group_metadata_t *cgmd;
    rd_kafka_error_t *error;
    int returned;
    int released;
    void (*release)(void *);
    void *release_arg;
};

static volatile int test_hold_ms = 0;

void kc_txn_call_set_test_hold_ms(int ms) {
    test_hold_ms = ms;
}

static void free_call(kc_txn_call_t *c) {
    if (c->error != NULL)
        rd_kafka_error_destroy(c->error);
    if (c->offsets != NULL)
        rd_kafka_topic_partition_list_destroy(c->offsets);
    if (c->cgmd != NULL)
        rd_kafka_consumer_group_metadata_destroy(c->cgmd);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static void *call_thread(void *arg) {
    kc_txn_call_t *c = arg;
    rd_kafka_error_t *error;
    int released;
    switch (c->op) {
        case KC_TXN_INIT:
            error = rd_kafka_init_transactions(c->rk, c->timeout_ms);
            break;
        case KC_TXN_SEND_OFFSETS:
            error = rd_kafka_send_offsets_to_transaction(c->rk, c->offsets, c->cgmd, c->timeout_ms);
            break;
        case KC_TXN_COMMIT:
            error = rd_kafka_commit_transaction(c->rk, c->timeout_ms);
            break;
        default:
            error = rd_kafka_abort_transaction(c->rk, c->timeout_ms);
            break;
    }
    if (c->hold_ms > 0)
        usleep((useconds_t)c->hold_ms * 1000);
    pthread_mutex_lock(&c->lock);
    c->error = error;
    c->returned = 1;
    released = c->released;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    if (released) { /* the owner gave the call up: nobody else refers to it */
        if (c->release != NULL)
            c->release(c->release_arg);
        free_call(c);
    }
    return NULL;
}

kc_txn_call_t *kc_txn_call_start(rd_kafka_t *rk, int op, rd_kafka_topic_partition_list_t *offsets,
                                 rd_kafka_consumer_group_metadata_t *cgmd, int timeout_ms) {
    pthread_t tid;
    kc_txn_call_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        if (offsets != NULL)
            rd_kafka_topic_partition_list_destroy(offsets);
        if (cgmd != NULL)
            rd_kafka_consumer_group_metadata_destroy(cgmd);
        return NULL;
    }
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cond, NULL);
    c->rk = rk;
    c->op = op;
    c->timeout_ms = timeout_ms;
    c->hold_ms = test_hold_ms;
    c->offsets = offsets;
    c->cgmd = cgmd;
    if (pthread_create(&tid, NULL, call_thread, c) != 0) {
        free_call(c);
        return NULL;
    }
    pthread_detach(tid);
    return c;
}

int kc_txn_call_wait(kc_txn_call_t *c, int64_t until_us) {
    struct timespec abs;
    int64_t left_us;
    int returned;
    pthread_mutex_lock(&c->lock);
    while (!c->returned) {
        left_us = until_us - kc_now_us();
        if (left_us <= 0)
            break;
        /* pthread_cond_timedwait takes CLOCK_REALTIME: wait in the remaining interval from now */
        clock_gettime(CLOCK_REALTIME, &abs);
        abs.tv_sec += (time_t)(left_us / 1000000);
        abs.tv_nsec += (long)(left_us % 1000000) * 1000;
        if (abs.tv_nsec >= 1000000000L) {
            abs.tv_sec += 1;
            abs.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&c->cond, &c->lock, &abs);
    }
    returned = c->returned;
    pthread_mutex_unlock(&c->lock);
    return returned;
}

int kc_txn_call_op(const kc_txn_call_t *c) {
    return c->op;
}

rd_kafka_error_t *kc_txn_call_finish(kc_txn_call_t *c) {
    rd_kafka_error_t *error = c->error;
    c->error = NULL;
    free_call(c);
    return error;
}

void kc_txn_call_release(kc_txn_call_t *c, void (*release)(void *), void *arg) {
    int returned;
    pthread_mutex_lock(&c->lock);
    returned = c->returned;
    if (!returned) {
        c->release = release;
        c->release_arg = arg;
        c->released = 1;
    }
    pthread_mutex_unlock(&c->lock);
    if (returned) {
        if (release != NULL)
            release(arg);
        free_call(c);
    }
}
