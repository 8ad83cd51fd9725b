#include "stall_pause.h"

#include <poll.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <unistd.h>

#include "consumer_core.h"
#include "event_fd.h"

/* The thread looks at the poll timer every pause_ms / 4, within these bounds. */
#define KC_STALL_TICK_MIN_MS 5
#define KC_STALL_TICK_MAX_MS 100

/* True while the application has not called poll() for pause_ms and is not waiting inside one. */
static int stalled(kc_consumer_t *c) {
    if (atomic_load(&c->poll_waiting))
        return 0;
    int64_t since = kc_poll_timer_since(&c->poll_timer);
    return since >= c->stall.pause_ms;
}

/* Gives the memory the release freed back to the system: librdkafka's allocator keeps it otherwise
 * (glibc kept 20 of 33 MiB of freed fetch responses mapped on the embedded broker). */
static void give_back(kc_consumer_t *c) {
    if (c->stall.mallctl) /* MALLCTL_ARENAS_ALL (4096): every arena */
        c->stall.mallctl("arena.4096.purge", NULL, NULL, NULL, 0);
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}

/* Pauses the unpaused assigned partitions and releases what librdkafka queued. Owner lock held. */
static void pause_fetchers(kc_consumer_t *c) {
    if (!c->fb.n)
        return;
    rd_kafka_topic_partition_list_t *lst = rd_kafka_topic_partition_list_new((int)c->fb.n);
    if (!lst)
        return;
    for (size_t i = 0; i < c->fb.n; i++) {
        kc_partition_t *p = kc_ps_at(&c->fb, i);
        if (!kc_ps_paused(p) && !p->stall_paused)
            rd_kafka_topic_partition_list_add(lst, p->q.topic, p->q.partition);
    }
    if (lst->cnt && rd_kafka_pause_partitions(c->rk, lst) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        int any = 0;
        for (int i = 0; i < lst->cnt; i++) {
            kc_partition_t *p;
            if (lst->elems[i].err || !(p = kc_ps_find(&c->fb, lst->elems[i].topic, lst->elems[i].partition)))
                continue;
            kc_ps_set_stall_paused(p, 1);
            any = 1;
        }
        if (any) {
            atomic_store(&c->stall.paused, 1);
            atomic_fetch_add(&c->stall.pauses, 1);
            atomic_fetch_add(&c->stall.released, kc_consumer_release_fetched(c));
            give_back(c);
        }
    }
    rd_kafka_topic_partition_list_destroy(lst);
}

/* How long into a stall the thread may take from librdkafka's queue: the prefetch thread's grace,
 * max.poll.interval.ms / 20 (at most 1 s), or pause_ms if longer (config.py keeps it within). */
static int64_t release_grace_ms(const kc_consumer_t *c) {
    int64_t grace = c->poll_timer.interval_ms / 20;
    if (grace > 1000)
        grace = 1000;
    return grace > c->stall.pause_ms ? grace : c->stall.pause_ms;
}

/* Fetch responses in flight when the pause landed arrive outdated in librdkafka's queue after the
 * release: release them too, while within the grace (each release counts as a poll for librdkafka). */
static int late_release_due(kc_consumer_t *c) {
    if (atomic_load(&c->poll_waiting) || !rd_kafka_queue_length(c->fetchq))
        return 0;
    return kc_poll_timer_since(&c->poll_timer) <= release_grace_ms(c);
}

static void release_late(kc_consumer_t *c) {
    size_t released = kc_consumer_release_fetched(c);
    atomic_fetch_add(&c->stall.released, released);
    if (released)
        give_back(c);
}

static void *stall_main(void *arg) {
    kc_consumer_t *c = arg;
    int64_t tick = c->stall.pause_ms / 4;
    if (tick < KC_STALL_TICK_MIN_MS)
        tick = KC_STALL_TICK_MIN_MS;
    if (tick > KC_STALL_TICK_MAX_MS)
        tick = KC_STALL_TICK_MAX_MS;
    while (!atomic_load(&c->stall.stop)) {
        struct pollfd pfd = {.fd = c->stall.fd, .events = POLLIN};
        poll(&pfd, 1, (int)tick);
        kc_event_fd_drain(c->stall.fd);
        if (atomic_load(&c->stall.stop))
            continue;
        if (atomic_load(&c->stall.paused)) {
            if (!late_release_due(c) || atomic_load(&c->lock.wanted) ||
                pthread_mutex_trylock(&c->lock.m) != 0)
                continue;
            if (atomic_load(&c->stall.paused) && late_release_due(c))
                release_late(c);
            pthread_mutex_unlock(&c->lock.m);
            continue;
        }
        if (!stalled(c))
            continue;
        /* the owner goes first: it may be in another call (commit, seek, ...) */
        if (atomic_load(&c->lock.wanted) || pthread_mutex_trylock(&c->lock.m) != 0)
            continue;
        /* again under the lock: a poll() may have started meanwhile */
        if (!atomic_load(&c->stall.paused) && stalled(c))
            pause_fetchers(c);
        pthread_mutex_unlock(&c->lock.m);
    }
    return NULL;
}

int kc_stall_start(kc_consumer_t *c, int64_t pause_ms) {
    if (c->stall.running || pause_ms <= 0)
        return 0;
    c->stall.fd = kc_event_fd_new();
    if (c->stall.fd < 0)
        return -1;
    c->stall.pause_ms = pause_ms;
    atomic_store(&c->stall.stop, 0);
    c->stall.locking = 1;
    if (pthread_create(&c->stall.tid, NULL, stall_main, c) != 0) {
        close(c->stall.fd);
        c->stall.fd = -1;
        return -1;
    }
    c->stall.running = 1;
    return 0;
}

void kc_stall_stop(kc_consumer_t *c) {
    if (!c->stall.running)
        return;
    atomic_store(&c->stall.stop, 1);
    kc_event_fd_signal(c->stall.fd);
    pthread_join(c->stall.tid, NULL);
    c->stall.running = 0;
    close(c->stall.fd);
    c->stall.fd = -1;
}

void kc_stall_resume(kc_consumer_t *c) {
    if (!atomic_load(&c->stall.paused))
        return;
    rd_kafka_topic_partition_list_t *lst = rd_kafka_topic_partition_list_new((int)c->fb.n + 1);
    if (!lst)
        return; /* the next poll tries again */
    for (size_t i = 0; i < c->fb.n; i++) {
        kc_partition_t *p = kc_ps_at(&c->fb, i);
        if (!p->stall_paused)
            continue;
        kc_ps_set_stall_paused(p, 0);
        if (!kc_ps_paused(p)) /* the application's own pause() since wins */
            rd_kafka_topic_partition_list_add(lst, p->q.topic, p->q.partition);
    }
    if (lst->cnt)
        rd_kafka_resume_partitions(c->rk, lst);
    rd_kafka_topic_partition_list_destroy(lst);
    atomic_store(&c->stall.paused, 0);
}
