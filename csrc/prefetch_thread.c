#include "prefetch_thread.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "consumer_core.h"

/* Longest wait of the idle thread: it also checks the buffer's room that often. */
#define KC_PREFETCH_IDLE_MS 100
/* An application that polled less than this ago is polling in a loop (see app_busy_polling); the
 * thread looks again that much later. */
#define KC_PREFETCH_BUSY_MS 2

static const uint64_t kc_prefetch_one = 1;

void kc_drain_eventfd(int fd) {
    uint64_t v;
    while (read(fd, &v, sizeof(v)) == sizeof(v))
        ;
}

/* True while the thread may take records from librdkafka's queue: every take counts as an
 * application poll for librdkafka's max.poll.interval.ms (rd_kafka_app_polled), so the thread
 * stops taking once the application has not polled for a grace of interval / 20 (at most 1 s):
 * a stalled application still leaves the group, at most that much later. Before the first poll
 * (a manual assignment: no group membership to keep) it may. */
static int app_polls(kc_consumer_t *c) {
    int64_t since = kc_poll_timer_since(&c->poll_timer);
    int64_t grace = c->poll_timer.interval_ms / 20;
    if (grace > 1000)
        grace = 1000;
    return since < 0 || since <= grace;
}

/* True while the application polls so often that poll() keeps the buffer filled itself (it moves
 * one poll's worth each time): the thread stays out of its way, so neither waits for the other
 * and no lock changes hands between cores for every batch. Not while poll() waits for records. */
static int app_busy_polling(kc_consumer_t *c) {
    if (atomic_load(&c->poll_waiting))
        return 0;
    int64_t since = kc_poll_timer_since(&c->poll_timer);
    return since >= 0 && since < KC_PREFETCH_BUSY_MS;
}

static void *prefetch_main(void *arg) {
    kc_consumer_t *c = arg;
    int pending = 0; /* records are waiting for the application to pause or to leave its call */
    while (!atomic_load(&c->prefetch.stop)) {
        struct pollfd pfd = {.fd = c->prefetch.fd, .events = POLLIN};
        poll(&pfd, 1, pending ? KC_PREFETCH_BUSY_MS : KC_PREFETCH_IDLE_MS);
        kc_drain_eventfd(c->prefetch.fd);
        pending = 0;
        while (!atomic_load(&c->prefetch.stop)) {
            if (!app_polls(c) || !rd_kafka_queue_length(c->fetchq))
                break;
            /* the owner goes first: a poll() waits for at most one chunk */
            if (atomic_load(&c->lock.wanted) || app_busy_polling(c) ||
                pthread_mutex_trylock(&c->lock.m) != 0) {
                pending = 1;
                break;
            }
            size_t errors = c->n_errors;
            size_t before = kc_fb_drainable(&c->fb);
            size_t moved = kc_consumer_refill(c, KC_PREFETCH_CHUNK, 1);
            /* a poll() (or an event loop) waits on wake_fd only while nothing can be drained */
            int news = (before == 0 && kc_fb_drainable(&c->fb) > 0) || c->n_errors != errors;
            pthread_mutex_unlock(&c->lock.m);
            if (moved)
                atomic_fetch_add(&c->prefetch.moved, moved);
            if (news) {
                ssize_t r = write(c->wake_fd, &kc_prefetch_one, sizeof(kc_prefetch_one));
                (void)r;
            }
            if (moved < KC_PREFETCH_CHUNK)
                break;
        }
    }
    return NULL;
}

int kc_prefetch_start(kc_consumer_t *c) {
    if (c->prefetch.running)
        return 0;
    c->prefetch.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->prefetch.fd < 0)
        return -1;
    atomic_store(&c->prefetch.stop, 0);
    c->prefetch.locking = 1;
    rd_kafka_queue_io_event_enable(c->fetchq, c->prefetch.fd, &kc_prefetch_one, sizeof(kc_prefetch_one));
    if (pthread_create(&c->prefetch.tid, NULL, prefetch_main, c) != 0) {
        rd_kafka_queue_io_event_enable(c->fetchq, c->wake_fd, &kc_prefetch_one, sizeof(kc_prefetch_one));
        close(c->prefetch.fd);
        c->prefetch.fd = -1;
        return -1;
    }
    c->prefetch.running = 1;
    /* whatever was queued before the events were redirected */
    kc_prefetch_poke(c);
    return 0;
}

void kc_prefetch_stop(kc_consumer_t *c) {
    if (!c->prefetch.running)
        return;
    atomic_store(&c->prefetch.stop, 1);
    kc_prefetch_poke(c);
    pthread_join(c->prefetch.tid, NULL);
    c->prefetch.running = 0;
    rd_kafka_queue_io_event_enable(c->fetchq, c->wake_fd, &kc_prefetch_one, sizeof(kc_prefetch_one));
    close(c->prefetch.fd);
    c->prefetch.fd = -1;
    /* records queued meanwhile: poll() moves them itself now */
    ssize_t r = write(c->wake_fd, &kc_prefetch_one, sizeof(kc_prefetch_one));
    (void)r;
}

void kc_prefetch_poke(kc_consumer_t *c) {
    if (c->prefetch.fd < 0)
        return;
    ssize_t r = write(c->prefetch.fd, &kc_prefetch_one, sizeof(kc_prefetch_one));
    (void)r;
}
