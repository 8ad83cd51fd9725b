/* stall_pause: pauses librdkafka's fetchers while the application does not call poll(), and resumes
 * them at its next poll() (poll.stall.fetch.pause.ms: 5000 by default where max.poll.interval.ms / 20
 * allows it, config.py).
 *
 * Why: librdkafka keeps fetching up to its prefetch bounds (queued.min.messages,
 * queued.max.messages.kbytes) while nobody polls, and each queued message keeps its whole fetch
 * response buffer alive, so a stalled consumer's memory grows; Java's classic consumer fetches only
 * inside poll() and holds nothing more (figures: docs/benchmarks.md, "Memory").
 *
 * A thread of the consumer's own looks at the poll timer (poll_timer.h). Once the application has not
 * polled for pause_ms (and poll() is not waiting), it takes the owner lock (try only, as the prefetch
 * thread does; owner_lock.h) and:
 *   1. pauses, with librdkafka's pause (rd_kafka_pause_partitions), every assigned partition the
 *      application has not paused itself, and marks them (kc_partition_t.stall_paused). librdkafka's
 *      pause bumps the partition's op version: what it queued but nobody took is outdated, and its
 *      fetcher restarts, on resume, at the position after the last record taken from its queue (the
 *      application position, rktp_app_pos), i.e. after the last record kipconsumer's buffer took;
 *   2. empties the fetch queue (kc_consumer_release_fetched): librdkafka drops the outdated
 *      messages there (their fetch buffers are freed), anything still current goes into the fetch
 *      buffer or the pending errors as poll() would put it;
 *   3. with release_buffer (the owner's prefetch thread runs, and keeps the buffer deep), releases the
 *      fetch buffer's records of the paused partitions too, each partition's fetcher sought back to its
 *      first one (release_buffered);
 *   4. gives the memory back to the system (glibc's malloc_trim, or a purge of the bundled jemalloc's
 *      arenas when librdkafka is bound to it).
 * Fetch responses that were in flight at the pause land later, outdated: the thread empties the queue again
 * whenever it holds some, until the grace below is over. Without release_buffer the fetch buffer keeps what
 * poll() moved (a poll's share of each partition) and takes nothing more. kc_stall_resume(), called by
 * kc_consumer_poll() before it serves records, resumes exactly the marked partitions that the application
 * has not paused since, and wakes their fetchers (kc_ps_wake_fetcher: librdkafka's resume alone left them
 * idle up to 1 s). Nothing is lost or fetched twice: the fetchers restart after what the buffer holds, a copy
 * below it is dropped by the refetch filter (record_filters.h), and a released partition's refetch is
 * watched by the seek guard as after the application's seek().
 *
 * KIP-62: taking from librdkafka's queue counts as an application poll for its
 * max.poll.interval.ms timer, so the thread takes nothing past 1 s after the pause, nor past
 * max.poll.interval.ms / 20 (config.py keeps pause_ms within that): a stalled member leaves the group
 * at most that much later.
 *
 * The marks and `paused` are written under the owner lock only (the thread, or the owner in
 * kc_stall_resume and pause()/resume()). Never takes the GIL.
 *
 * The thread knows nothing of the consumer: its owner (consumer_core.c) hands it a kc_stall_source_t,
 * the release callback and the parts of the consumer the thread pauses and looks at, so the consumer
 * calls the thread and never the other way round (as with the prefetch thread, prefetch_thread.h). */
#ifndef KC_STALL_PAUSE_H
#define KC_STALL_PAUSE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "rdk.h"
#include "owner_lock.h"
#include "partition_state.h"
#include "poll_timer.h"

/* jemalloc's mallctl() */
typedef int (*kc_mallctl_fn)(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);

/* What the thread pauses the fetchers of (kc_stall_start). */
typedef struct kc_stall_source {
    void *ctx; /* the release callback's argument */
    /* Empties the owner's fetch queue once (kc_consumer_release_fetched): returns how many queued
     * entries librdkafka dropped. Called with `lock` held. */
    size_t (*release_fetched)(void *ctx);
    rd_kafka_t *rk;              /* whose fetchers are paused and resumed */
    kc_fetch_buffer_t *fb;       /* the assigned partitions (partition_state.h) and their stall marks */
    rd_kafka_queue_t *fetchq;    /* where fetched records wait (late responses show there) */
    kc_owner_lock_t *lock;       /* the owner lock the thread tries before it pauses or releases */
    kc_poll_timer_t *poll_timer; /* the application's last poll() */
    _Atomic int *poll_waiting;   /* poll() waits for records (not a stall) */
} kc_stall_source_t;

typedef struct kc_stall_pause {
    pthread_t tid;
    int running;
    int locking; /* set before the thread starts, never cleared: the owner's calls take the owner lock
                    (kc_consumer_hold), as with the prefetch thread */
    int fd;      /* eventfd: stop */
    _Atomic int stop;
    int64_t pause_ms;          /* poll.stall.fetch.pause.ms (0: no thread) */
    _Atomic int paused;        /* partitions are paused by the thread (until kc_stall_resume) */
    _Atomic uint64_t pauses;   /* stalls that paused the fetchers */
    _Atomic uint64_t released; /* records librdkafka had queued that the pauses released */
    /* set before the thread starts: a pause also releases the fetch buffer's records, each partition's
     * fetcher sought back to its first one (the owner's prefetch thread keeps the buffer deep) */
    int release_buffer;
    _Atomic uint64_t refetched; /* buffered records the pauses released, to be fetched again */
    /* the bundled jemalloc's mallctl when librdkafka allocates with it (kipconsumer/_loader.py), else
     * NULL: its unused pages are purged after a release, as glibc's are trimmed */
    kc_mallctl_fn mallctl;
    kc_stall_source_t src; /* set by kc_stall_start */
} kc_stall_pause_t;

/* Sets s up stopped (fd -1, nothing paused, no mallctl, the fetch buffer kept). */
void kc_stall_init(kc_stall_pause_t *s);
/* Starts the thread for `src` with pause_ms > 0; 0, or -1 if it could not be started (the owner then
 * fetches as without the setting). Before any other thread can call the owner. */
int kc_stall_start(kc_stall_pause_t *s, const kc_stall_source_t *src, int64_t pause_ms);
/* Stops and joins the thread (the fetchers it paused stay paused: close() or poll() follows). Any
 * thread, the owner lock held or not. Idempotent. */
void kc_stall_stop(kc_stall_pause_t *s);
/* Resumes the partitions the thread paused and the application has not paused since. The owner,
 * with the owner lock held. Cheap when nothing is paused. */
void kc_stall_resume(kc_stall_pause_t *s);

#endif
