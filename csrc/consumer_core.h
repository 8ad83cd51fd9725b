/* consumer_core: the consumer's poll loop, run without the GIL.
 *
 * One kc_consumer_t per KafkaConsumer. The application's poll() calls kc_consumer_poll(),
 * which on the calling thread:
 *   1. serves librdkafka's consumer queue (rebalance callbacks, consumer errors, and
 *      messages of partitions not yet forwarded), so librdkafka sees the application poll;
 *   2. refills the fetch buffer, through the record filters (record_filters.h), from the shared
 *      fetch queue, into which every assigned partition's librdkafka queue is forwarded, until the
 *      unpaused partitions hold the prefetch budget (KIP-41 share rule, see kc_consumer_budget());
 *      with the prefetch thread (prefetch_thread.h), which does this between polls, at most one
 *      poll's worth;
 *   3. drains at most max.poll.records into `out` with the configured fairness, unless the rebalance
 *      barrier (rebalance_barrier.h) holds; each partition's position and other state belong to
 *      partition_state.h, whose setters this file calls;
 *   4. otherwise waits on an eventfd that librdkafka signals when the fetch queue (or the
 *      prefetch thread, when the buffer gets records) or the consumer queue becomes non-empty,
 *      or that wakeup() signals, until the timeout; the owner lock is released meanwhile.
 * Why one shared fetch queue: librdkafka's prefetch limits (queued.min.messages,
 * queued.max.messages.kbytes) apply to a partition queue's forward target, so sharing one
 * queue makes them a bound on the whole consumer, as in confluent-kafka, instead of a bound
 * per partition (which grew with the assignment: 12 partitions held 390 MiB while stalled).
 * Each wait is capped so librdkafka's own max.poll.interval.ms check keeps seeing the
 * application poll while poll() blocks. */
#ifndef KC_CONSUMER_CORE_H
#define KC_CONSUMER_CORE_H

#include <stdint.h>
#include <stdatomic.h>
#include "rdk.h"
#include "fetch_buffer.h"
#include "partition_state.h"
#include "rebalance_barrier.h"
#include "poll_timer.h"
#include "heartbeat_monitor.h"
#include "owner_lock.h"
#include "prefetch_thread.h"
#include "stall_pause.h"

#define KC_MAX_PENDING_ERRORS 64

typedef enum {
    KC_POLL_OK = 0,     /* *n_out records (possibly 0 on timeout) */
    KC_POLL_WAKEUP = 1, /* wakeup() was called */
    KC_POLL_EVENT = 2,  /* consumer errors are pending: kc_consumer_take_error() */
    KC_POLL_ABORT = 3,  /* a rebalance callback asked to stop (Python exception pending) */
} kc_poll_status_t;

typedef struct kc_consumer {
    rd_kafka_t *rk;
    rd_kafka_queue_t *cq;     /* the consumer queue (main queue forwarded to it) */
    rd_kafka_queue_t *fetchq; /* every assigned partition's queue is forwarded here */
    int wake_fd;              /* eventfd: librdkafka queue events and wakeup() */
    kc_fetch_buffer_t fb;
    size_t max_poll_records;
    kc_fairness_t fairness;
    size_t prefetch_floor;   /* minimum per-partition prefetch target */
    size_t ring_max_records; /* hard bound of the buffer (queued.min.messages) */
    size_t ring_max_bytes;   /* hard bound of the buffer (queued.max.messages.kbytes) */
    kc_poll_timer_t poll_timer;
    kc_heartbeat_monitor_t *heartbeat; /* not freed by kc_consumer_free(): see there */
    _Atomic int wakeup;
    int abort_poll; /* set by a callback on the poll thread */
    rd_kafka_message_t *errors[KC_MAX_PENDING_ERRORS];
    size_t n_errors;
    uint64_t records_returned;
    uint64_t polls;                   /* poll() calls (the Cython layer counts each once) */
    uint64_t poll_time_us;            /* time spent inside kc_consumer_poll(), summed (metrics) */
    uint64_t dropped_foreign;         /* messages of partitions no longer assigned */
    uint64_t dropped_refetched;       /* copies of offsets already returned or buffered */
    uint64_t dropped_below_committed; /* records below the committed offset a partition started from */
    uint64_t dropped_before_seek;     /* records of a fetch the application's seek() replaced */
    uint64_t seek_retries;            /* seeks re-issued because librdkafka fetched elsewhere (seek guard) */
    uint64_t resets_after_seek;       /* seeks outside the log that librdkafka reset (auto.offset.reset) */
    size_t refetch_forwards;          /* partitions whose restarted fetcher's queue poll forwards again */
    kc_rebalance_barrier_t barrier;   /* rebalance_barrier.h: no records while the group rebalances */
    uint64_t barrier_polls;           /* polls that returned nothing because of the barrier */
    int hold_records;                 /* poll serves events but hands out no records (close/unsubscribe) */
    rd_kafka_message_t **scratch;
    size_t scratch_cap;
    uint64_t batch_seq;       /* counts the batches taken from librdkafka's queues */
    uint64_t poll_moved;      /* records the polling thread moved from the fetch queue itself */
    _Atomic int poll_waiting; /* poll() waits for records (the owner lock released) */
    kc_owner_lock_t lock;     /* guards the above when a thread of the consumer's own runs (owner_lock.h) */
    kc_prefetch_thread_t prefetch; /* see prefetch_thread.h */
    kc_stall_pause_t stall;        /* see stall_pause.h */
} kc_consumer_t;

/* Allocates the core (eventfd, monitor). The heartbeat monitor is installed on `conf`. */
kc_consumer_t *kc_consumer_new(rd_kafka_conf_t *conf, size_t max_poll_records, kc_fairness_t fairness,
                               int64_t max_poll_interval_ms, char *errstr, size_t errlen);
/* Completes set-up once rd_kafka_new() succeeded with the conf given above. */
int kc_consumer_attach(kc_consumer_t *c, rd_kafka_t *rk);
/* Moves up to `limit` records (and the error events among them) from the fetch queue into the
 * buffer, as far as kc_consumer_budget() and the share rule ask; returns how many it moved.
 * `bounded` (the prefetch thread, which also runs while the application stalls): the budget too
 * stops at ring_max_records / ring_max_bytes. The caller holds c->lock if the prefetch thread runs. */
size_t kc_consumer_refill(kc_consumer_t *c, size_t limit, int bounded);

/* Starts the prefetch thread (prefetch_thread.h) with kc_consumer_refill as its refill: 0, or -1 if
 * it could not be started (poll() then moves the records itself). */
int kc_consumer_prefetch_start(kc_consumer_t *c);
/* Stops and joins it (see kc_prefetch_stop); any thread; idempotent. */
void kc_consumer_prefetch_stop(kc_consumer_t *c);

/* Starts the stall thread (stall_pause.h, poll.stall.fetch.pause.ms) with pause_ms > 0, and with
 * kc_consumer_release_fetched as its release; 0, or -1 if it could not be started (fetching then goes
 * on as without the setting). Set c->stall.mallctl before. */
int kc_consumer_stall_start(kc_consumer_t *c, int64_t pause_ms);
/* Stops and joins it (see kc_stall_stop); any thread; idempotent. */
void kc_consumer_stall_stop(kc_consumer_t *c);

/* Frees everything but rk and the heartbeat monitor (the caller closes and destroys rk
 * after this; librdkafka's threads may call the monitor until rd_kafka_destroy() returns,
 * so the caller frees c->heartbeat with kc_hb_free() then, or at once if rd_kafka_new()
 * failed). */
void kc_consumer_free(kc_consumer_t *c);

/* Adds a newly assigned partition to the buffer and forwards its librdkafka queue to the
 * shared fetch queue. NULL on OOM. */
kc_partition_t *kc_consumer_add_partition(kc_consumer_t *c, const char *topic, int32_t partition);

/* Records the buffer fills up to from the fetch queue in any case: the unpaused partitions'
 * prefetch targets (kc_fb_target) plus one max.poll.records, so a poll is not cut short.
 * Beyond it the buffer keeps taking from the fetch queue while an unpaused partition holds
 * less than its target (its records may sit behind another partition's in the queue), up
 * to ring_max_records / ring_max_bytes, which it overshoots by less than one target. */
size_t kc_consumer_budget(const kc_consumer_t *c);

/* Records that still fit below the buffer's hard bounds (ring_max_records, ring_max_bytes), estimated
 * from the average size of what is buffered (1 KiB if nothing is); at least 1 while below both, 0
 * at or past either. What a bounded kc_consumer_refill may take. */
size_t kc_consumer_room(const kc_consumer_t *c);

/* Moves p's position (kc_ps_step_to) past what librdkafka skipped after p's last returned record: a trailing
 * control record (a transaction's COMMIT/ABORT marker) or records of aborted transactions under
 * read_committed, as librdkafka's and Java's positions do. Only with nothing of p buffered (every
 * record librdkafka handed over was returned) and p trusted (records buffered since the last purge
 * or seek-guard drop: until then librdkafka's position may count records that were dropped). Returns 1 if
 * the position moved. Calls rd_kafka_position(): not for the per-record path. */
int kc_consumer_step_over_markers(kc_consumer_t *c, kc_partition_t *p);

/* Takes everything from the fetch queue once, without waiting: librdkafka drops the messages a
 * pause or seek made outdated (and frees them); what is still current goes into the buffer and the
 * pending errors as poll() would put it (past the budget: it is little). Returns how many queued
 * entries librdkafka dropped. Counts as an application poll for librdkafka (stall_pause.h). The
 * caller holds c->lock if another thread of the consumer runs. */
size_t kc_consumer_release_fetched(kc_consumer_t *c);

kc_poll_status_t kc_consumer_poll(kc_consumer_t *c, int timeout_ms, rd_kafka_message_t **out, size_t *n_out);
/* The rebalance barrier of c holds (kc_rebalance_barrier_holds in rebalance_barrier.h). */
int kc_consumer_rebalance_pending(kc_consumer_t *c);
/* librdkafka is rejoining c's group by itself (kc_barrier_rejoining in rebalance_barrier.h). */
int kc_consumer_rejoining(kc_consumer_t *c);
/* The owner lock (owner_lock.h): the application's thread holds it during consumer calls,
 * once a prefetch or stall thread was started (without one nothing else touches the buffer). */
static inline void kc_consumer_hold(kc_consumer_t *c) {
    if (c->prefetch.locking || c->stall.locking)
        kc_owner_hold(&c->lock);
}
static inline void kc_consumer_release(kc_consumer_t *c) {
    kc_owner_release(&c->lock);
}
/* Releases every level the calling thread holds (close(), once the prefetch thread is stopped). */
static inline void kc_consumer_release_all(kc_consumer_t *c) {
    kc_owner_release_all(&c->lock);
}

/* A seek() restarted librdkafka's fetcher of p (kc_ps_fetch_restarted; `seeked`: p is the partition
 * the seek was about, not one an EAGER reassignment restarted along): poll() forwards p's queue to
 * the fetch queue again until a record of p comes. */
void kc_consumer_fetch_restarted(kc_consumer_t *c, kc_partition_t *p, int seeked);
/* Destroys the pending _AUTO_OFFSET_RESET errors of p (a seek() gave it a position); returns how
 * many. */
size_t kc_consumer_drop_offset_errors(kc_consumer_t *c, const kc_partition_t *p);
/* Pops the oldest pending consumer error (caller destroys it), or NULL. */
rd_kafka_message_t *kc_consumer_take_error(kc_consumer_t *c);
/* Serves the consumer queue once without waiting and without handing out records: error and
 * rebalance callbacks run, errors are kept for kc_consumer_take_error(), fetched messages go into
 * the buffer. For calls other than poll() on a consumer without a subscription (no rebalance
 * callback can come), so that they learn of a refused login or group. */
void kc_consumer_serve(kc_consumer_t *c);
/* Makes a blocked or the next kc_consumer_poll() return KC_POLL_WAKEUP. Any thread. */
void kc_consumer_wakeup(kc_consumer_t *c);

#endif
