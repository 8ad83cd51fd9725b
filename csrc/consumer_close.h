/* consumer_close: the parts of a consumer's close that run without Python.
 *
 * kipconsumer closes with librdkafka's asynchronous close (rd_kafka_consumer_close_queue): the
 * close posts the group's last rebalance events to a queue, and each needs the *assign() call
 * librdkafka waits for. close() serves them itself while it may run listeners; what is left when
 * close() reaches its deadline, or the whole close of a consumer dropped without close(), is
 * finished here on a detached thread (the reaper), which then frees the core and destroys the
 * handle. */
#ifndef KC_CONSUMER_CLOSE_H
#define KC_CONSUMER_CLOSE_H

#include <stdint.h>
#include "rdk.h"
#include "consumer_core.h"
#include "heartbeat_monitor.h"
#include "rebalance.h"

/* How long the reaper serves librdkafka's close before it gives up and destroys the handle. */
#define KC_REAPER_GIVE_UP_MS 600000

/* Destroys every event already on the close queue `q`; returns how many were rebalance events.
 * Called right after close's full unassign: those events were queued before it and name
 * partitions already given back, and librdkafka waits for no call on them. */
int kc_close_drain_stale(rd_kafka_queue_t *q);

typedef struct kc_reaper {
    rd_kafka_t *rk;
    rd_kafka_queue_t *q;        /* the close queue; NULL: librdkafka's close is not started yet */
    kc_consumer_t *core;        /* freed once librdkafka is closed, before rd_kafka_destroy; may be NULL */
    kc_heartbeat_monitor_t *hb; /* freed after rd_kafka_destroy (librdkafka's threads write to it) */
    int cooperative;            /* the group's protocol, for kc_answer_rebalance (rebalance.h) */
    int unassigned;             /* close's full unassign was made */
    int64_t give_up_ms;         /* kc_now_ms() after which the reaper stops serving the close */
} kc_reaper_t;

/* A reaper that will take over rk (and core, q, hb); NULL on OOM. */
kc_reaper_t *kc_reaper_new(rd_kafka_t *rk, rd_kafka_queue_t *q, kc_consumer_t *core, int cooperative,
                           int unassigned);
/* Finishes librdkafka's close (starting it when q is NULL: commits stored offsets with
 * auto-commit, leaves the group), answering rebalance events, until rd_kafka_consumer_closed()
 * or give-up; then frees core, q, rk (rd_kafka_destroy without a second close), hb and r. */
void kc_reaper_run(kc_reaper_t *r);
/* kc_reaper_run on a detached thread (on the calling thread if none can be started). */
void kc_reaper_start(kc_reaper_t *r);

#endif
