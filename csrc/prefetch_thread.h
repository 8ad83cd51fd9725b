/* prefetch_thread: moves fetched records from librdkafka's fetch queue into the fetch buffer on a
 * thread of its own, while the application is busy between polls or waits inside poll().
 *
 * Why: moving a record out of librdkafka's queue costs a lock round trip per message
 * (rd_kafka_q_serve_rkmessages), and KIP-41's share rule may have to move a whole prefetch (80k
 * records of 100 B) before every partition with fetched data is in the buffer. Done by poll()
 * itself, the first poll after a pause pays for all of it; done here, poll() only drains the
 * buffer (figures: docs/benchmarks.md, appendix).
 *
 * The fetch buffer, the pending errors and the seek guard are then shared by two threads. The
 * consumer's owner lock (owner_lock.h) guards them: the application's thread holds it for the
 * whole of each consumer call (KafkaConsumer's thread contract takes it when a call starts and
 * releases it when the outermost call returns; calls made from callbacks on that thread nest), and
 * kc_consumer_poll() releases it only while it waits. The prefetch thread only tries the lock
 * (never waits for it), takes it for one chunk of at most KC_PREFETCH_CHUNK records at a time and
 * steps back while the owner wants it, so a call waits at most one chunk (~50 us) for the thread.
 * It also stays away while the application polls in a loop (last poll less than
 * KC_PREFETCH_BUSY_MS ago, and poll() not waiting): poll() then keeps the buffer filled itself,
 * one poll's worth at a time, and no lock changes hands between cores for every batch. The thread
 * never takes the GIL.
 *
 * KIP-62: librdkafka counts every take from its queue as an application poll (its
 * max.poll.interval.ms timer restarts), so the thread takes nothing once the application has not
 * called poll() for interval / 20 (at most 1 s): a stalled application leaves the group at most
 * that much later than max.poll.interval.ms.
 *
 * Memory: the thread moves what poll() would have moved (kc_consumer_budget(), then the share
 * rule up to ring_max_records / ring_max_bytes), only earlier: the bounds are unchanged.
 *
 * The thread knows nothing of the consumer: its owner (consumer_core.c) hands it a
 * kc_prefetch_source_t, the refill callback and what the thread waits on and looks at, so the
 * consumer calls the thread and never the other way round. */
#ifndef KC_PREFETCH_THREAD_H
#define KC_PREFETCH_THREAD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "rdk.h"
#include "owner_lock.h"
#include "poll_timer.h"

#define KC_PREFETCH_CHUNK 1024

/* What the thread moves records for (kc_prefetch_start). */
typedef struct kc_prefetch_source {
    void *ctx; /* the refill callback's argument */
    /* Moves up to `limit` records into the owner's buffer, bounded by its hard limits; returns how
     * many it took from the fetch queue and sets *news when a waiting poll() should wake (the buffer
     * had nothing drainable and has now, or errors came). Called with `lock` held. */
    size_t (*refill)(void *ctx, size_t limit, int *news);
    rd_kafka_queue_t *fetchq;    /* where fetched records wait; its I/O events go to the thread */
    int wake_fd;                 /* the owner's eventfd: signalled on news, and the fetch queue's
                                    events go back to it when the thread stops */
    kc_owner_lock_t *lock;       /* the owner lock the thread tries before each chunk */
    kc_poll_timer_t *poll_timer; /* the application's last poll() */
    _Atomic int *poll_waiting;   /* poll() waits for records (the owner lock released) */
} kc_prefetch_source_t;

typedef struct kc_prefetch_thread {
    pthread_t tid;
    int running;
    int locking; /* set once the thread was started, never cleared: the owner's calls take the owner
                    lock only then (set before any other thread can call the consumer) */
    int fd;      /* eventfd: the fetch queue's I/O events, pokes, stop */
    _Atomic int stop;
    _Atomic uint64_t moved;   /* records this thread moved into the buffer */
    kc_prefetch_source_t src; /* set by kc_prefetch_start */
} kc_prefetch_thread_t;

/* Sets t up stopped (fd -1). */
void kc_prefetch_init(kc_prefetch_thread_t *t);
/* Starts the thread for `src` (the fetch queue's events go to it from then on). 0, or -1 if it
 * could not be started (the owner then works as before: poll() moves the records itself). */
int kc_prefetch_start(kc_prefetch_thread_t *t, const kc_prefetch_source_t *src);
/* Stops and joins the thread (the fetch queue's events go back to src.wake_fd, which is signalled).
 * Any thread, the owner lock held or not (the thread stops waiting for the lock when told to stop).
 * Idempotent. */
void kc_prefetch_stop(kc_prefetch_thread_t *t);
/* Tells the thread to look at the fetch queue now. */
void kc_prefetch_poke(kc_prefetch_thread_t *t);

#endif
