/* consumer_close: see consumer_close.h. */
#include "consumer_close.h"

#include <pthread.h>
#include <stdlib.h>

#include "poll_timer.h"

int kc_close_drain_stale(rd_kafka_queue_t *q) {
    int n = 0;
    rd_kafka_event_t *ev;
    while ((ev = rd_kafka_queue_poll(q, 0)) != NULL) {
        if (rd_kafka_event_type(ev) == RD_KAFKA_EVENT_REBALANCE)
            n++;
        rd_kafka_event_destroy(ev);
    }
    return n;
}

kc_reaper_t *kc_reaper_new(rd_kafka_t *rk, rd_kafka_queue_t *q, kc_consumer_t *core, int cooperative,
                           int unassigned) {
    kc_reaper_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->rk = rk;
    r->q = q;
    r->core = core;
    r->cooperative = cooperative;
    r->unassigned = unassigned;
    return r;
}

static void answer_close_event(kc_reaper_t *r, rd_kafka_event_t *ev) {
    rd_kafka_error_t *error;
    if (rd_kafka_event_type(ev) != RD_KAFKA_EVENT_REBALANCE)
        return;
    /* after the full unassign, a closed handle waits for nothing more */
    if (r->unassigned && rd_kafka_consumer_closed(r->rk))
        return;
    error = kc_answer_rebalance(r->rk, rd_kafka_event_error(ev), rd_kafka_event_topic_partition_list(ev),
                                r->cooperative);
    if (error != NULL)
        rd_kafka_error_destroy(error);
    if (!r->unassigned) {
        r->unassigned = 1;
        kc_close_drain_stale(r->q);
    }
}

void kc_reaper_run(kc_reaper_t *r) {
    rd_kafka_error_t *error;
    rd_kafka_event_t *ev;
    r->give_up_ms = kc_now_ms() + KC_REAPER_GIVE_UP_MS;
    if (r->q == NULL) {
        r->q = rd_kafka_queue_new(r->rk);
        error = rd_kafka_consumer_close_queue(r->rk, r->q);
        if (error != NULL) { /* closed already, or a fatal error (destroy then skips the close) */
            rd_kafka_error_destroy(error);
            r->give_up_ms = 0;
        }
    }
    while (kc_now_ms() < r->give_up_ms && !rd_kafka_consumer_closed(r->rk)) {
        ev = rd_kafka_queue_poll(r->q, 100);
        if (ev == NULL)
            continue;
        answer_close_event(r, ev);
        rd_kafka_event_destroy(ev);
    }
    if (r->core != NULL)
        kc_consumer_free(r->core);
    rd_kafka_queue_destroy(r->q);
    rd_kafka_destroy_flags(r->rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
    kc_hb_free(r->hb);
    free(r);
}

static void *reaper_thread(void *arg) {
    kc_reaper_run(arg);
    return NULL;
}

void kc_reaper_start(kc_reaper_t *r) {
    pthread_t tid;
    if (pthread_create(&tid, NULL, reaper_thread, r) == 0)
        pthread_detach(tid);
    else
        kc_reaper_run(r);
}
