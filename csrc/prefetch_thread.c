/* prefetch_thread: see prefetch_thread.h. */
#include "prefetch_thread.h"

#include <poll.h>
#include <unistd.h>

#include "event_fd.h"

/* Longest wait of the idle thread: it also checks the buffer's room that often. */
#define KC_PREFETCH_IDLE_MS 100
/* An application that polled less than this ago is polling in a loop (see app_busy_polling); the
 * thread looks again that much later. */
#define KC_PREFETCH_BUSY_MS 2

/* True while the thread may take records from librdkafka's queue: every take counts as an
 * application poll for librdkafka's max.poll.interval.ms (rd_kafka_app_polled), so the thread
 * stops taking once the application has not polled for a grace of interval / 20 (at most 1 s):
 * a stalled application still leaves the group, at most that much later. Before the first poll
 * (a manual assignment: no group membership to keep) it may. */
static int app_polls(const kc_prefetch_source_t *s) {
    int64_t since = kc_poll_timer_since(s->poll_timer);
    int64_t grace = s->poll_timer->interval_ms / 20;
    if (grace > 1000)
        grace = 1000;
    return since < 0 || since <= grace;
}

/* True while the application polls so often that poll() keeps the buffer filled itself (it moves
 * one poll's worth each time): the thread stays out of its way, so neither waits for the other
 * and no lock changes hands between cores for every batch. Not while poll() waits for records. */
static int app_busy_polling(const kc_prefetch_source_t *s) {
    if (atomic_load(s->poll_waiting))
        return 0;
    int64_t since = kc_poll_timer_since(s->poll_timer);
    return since >= 0 && since < KC_PREFETCH_BUSY_MS;
}

static void *prefetch_main(void *arg) {
    kc_prefetch_thread_t *t = arg;
    const kc_prefetch_source_t *s = &t->src;
    int pending = 0; /* records are waiting for the application to pause or to leave its call */
    while (!atomic_load(&t->stop)) {
        struct pollfd pfd = {.fd = t->fd, .events = POLLIN};
        poll(&pfd, 1, pending ? KC_PREFETCH_BUSY_MS : KC_PREFETCH_IDLE_MS);
        kc_event_fd_drain(t->fd);
        pending = 0;
        while (!atomic_load(&t->stop)) {
            if (!app_polls(s) || !rd_kafka_queue_length(s->fetchq))
                break;
            /* the owner goes first: a poll() waits for at most one chunk */
            if (atomic_load(&s->lock->wanted) || app_busy_polling(s) ||
                pthread_mutex_trylock(&s->lock->m) != 0) {
                pending = 1;
                break;
            }
            int news = 0;
            size_t moved = s->refill(s->ctx, KC_PREFETCH_CHUNK, &news);
            pthread_mutex_unlock(&s->lock->m);
            if (moved)
                atomic_fetch_add(&t->moved, moved);
            /* a poll() (or an event loop) waits on wake_fd only while nothing can be drained */
            if (news)
                kc_event_fd_signal(s->wake_fd);
            if (moved < KC_PREFETCH_CHUNK)
                break;
        }
    }
    return NULL;
}

void kc_prefetch_init(kc_prefetch_thread_t *t) {
    t->running = 0;
    t->locking = 0;
    t->fd = -1;
    atomic_store(&t->stop, 0);
    atomic_store(&t->moved, 0);
}

int kc_prefetch_start(kc_prefetch_thread_t *t, const kc_prefetch_source_t *src) {
    if (t->running)
        return 0;
    t->src = *src;
    t->fd = kc_event_fd_new();
    if (t->fd < 0)
        return -1;
    atomic_store(&t->stop, 0);
    t->locking = 1;
    rd_kafka_queue_io_event_enable(src->fetchq, t->fd, &kc_event_fd_one, sizeof(kc_event_fd_one));
    if (pthread_create(&t->tid, NULL, prefetch_main, t) != 0) {
        rd_kafka_queue_io_event_enable(src->fetchq, src->wake_fd, &kc_event_fd_one, sizeof(kc_event_fd_one));
        close(t->fd);
        t->fd = -1;
        return -1;
    }
    t->running = 1;
    /* whatever was queued before the events were redirected */
    kc_prefetch_poke(t);
    return 0;
}

void kc_prefetch_stop(kc_prefetch_thread_t *t) {
    if (!t->running)
        return;
    atomic_store(&t->stop, 1);
    kc_prefetch_poke(t);
    pthread_join(t->tid, NULL);
    t->running = 0;
    rd_kafka_queue_io_event_enable(t->src.fetchq, t->src.wake_fd, &kc_event_fd_one, sizeof(kc_event_fd_one));
    close(t->fd);
    t->fd = -1;
    /* records queued meanwhile: poll() moves them itself now */
    kc_event_fd_signal(t->src.wake_fd);
}

void kc_prefetch_poke(kc_prefetch_thread_t *t) {
    if (t->fd < 0)
        return;
    kc_event_fd_signal(t->fd);
}
