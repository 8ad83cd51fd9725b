#include "stall_pause.h"

#include <poll.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <unistd.h>

#include "event_fd.h"

/* The thread looks at the poll timer every pause_ms / 4, within these bounds. */
#define KC_STALL_TICK_MIN_MS 5
#define KC_STALL_TICK_MAX_MS 100
/* Fetch responses in flight at the pause are released when they land, this long after it. */
#define KC_STALL_LATE_MS 1000

/* True while the application has not called poll() for pause_ms and is not waiting inside one. */
static int stalled(const kc_stall_pause_t *s) {
    if (atomic_load(s->src.poll_waiting))
        return 0;
    int64_t since = kc_poll_timer_since(s->src.poll_timer);
    return since >= s->pause_ms;
}

/* Gives the memory the release freed back to the system: librdkafka's allocator keeps it otherwise
 * (glibc kept 20 of 33 MiB of freed fetch responses mapped on the embedded broker). */
static void give_back(const kc_stall_pause_t *s) {
    if (s->mallctl) /* MALLCTL_ARENAS_ALL (4096): every arena */
        s->mallctl("arena.4096.purge", NULL, NULL, NULL, 0);
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}

/* Releases what the buffer holds of the partitions the thread paused. Each record the prefetch thread
 * moved in keeps its whole fetch response alive, and keeping even the next poll's share of each partition
 * kept 11 MiB of responses on Kafka (docs/consumer.md). Each partition's fetcher is sought to its first
 * buffered record (the seek bumps librdkafka's op version past anything it still holds of the partition;
 * its resume starts there), and the seek guard watches the refetch (kc_ps_refetch_from). A partition
 * librdkafka refuses the seek of keeps its records. Owner lock held. */
static void release_buffered(kc_stall_pause_t *s) {
    kc_fetch_buffer_t *fb = s->src.fb;
    for (size_t i = 0; i < fb->n; i++) {
        kc_partition_t *p = kc_ps_at(fb, i);
        if (!p->stall_paused || !p->q.len || p->fetch_stopped)
            continue;
        int64_t first = kc_ps_first_offset(p);
        size_t n = p->q.len;
        if (first < 0 || kc_filters_seek(s->src.rk, p->q.topic, p->q.partition, first) != 0)
            continue;
        kc_ps_refetch_from(fb, p, first);
        atomic_fetch_add(&s->refetched, n);
    }
}

/* Pauses the unpaused assigned partitions and releases what librdkafka queued. Owner lock held. */
static void pause_fetchers(kc_stall_pause_t *s) {
    kc_fetch_buffer_t *fb = s->src.fb;
    if (!fb->n)
        return;
    rd_kafka_topic_partition_list_t *lst = rd_kafka_topic_partition_list_new((int)fb->n);
    if (!lst)
        return;
    for (size_t i = 0; i < fb->n; i++) {
        kc_partition_t *p = kc_ps_at(fb, i);
        if (!kc_ps_paused(p) && !p->stall_paused)
            rd_kafka_topic_partition_list_add(lst, p->q.topic, p->q.partition);
    }
    if (lst->cnt && rd_kafka_pause_partitions(s->src.rk, lst) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        int any = 0;
        for (int i = 0; i < lst->cnt; i++) {
            kc_partition_t *p;
            if (lst->elems[i].err || !(p = kc_ps_find(fb, lst->elems[i].topic, lst->elems[i].partition)))
                continue;
            kc_ps_set_stall_paused(p, 1);
            any = 1;
        }
        if (any) {
            atomic_store(&s->paused, 1);
            atomic_fetch_add(&s->pauses, 1);
            atomic_fetch_add(&s->released, s->src.release_fetched(s->src.ctx));
            if (s->release_buffer)
                release_buffered(s);
            give_back(s);
        }
    }
    rd_kafka_topic_partition_list_destroy(lst);
}

/* How long into a stall the thread may take from librdkafka's queue: up to 1 s past the pause, never
 * past max.poll.interval.ms / 20 (config.py keeps pause_ms within that), nor before the pause. */
static int64_t release_grace_ms(const kc_stall_pause_t *s) {
    int64_t grace = s->pause_ms + KC_STALL_LATE_MS;
    int64_t most = s->src.poll_timer->interval_ms / 20;
    if (grace > most)
        grace = most;
    return grace > s->pause_ms ? grace : s->pause_ms;
}

/* Fetch responses in flight when the pause landed arrive outdated in librdkafka's queue after the
 * release: release them too, while within the grace (each release counts as a poll for librdkafka). */
static int late_release_due(const kc_stall_pause_t *s) {
    if (atomic_load(s->src.poll_waiting) || !rd_kafka_queue_length(s->src.fetchq))
        return 0;
    return kc_poll_timer_since(s->src.poll_timer) <= release_grace_ms(s);
}

static void release_late(kc_stall_pause_t *s) {
    size_t released = s->src.release_fetched(s->src.ctx);
    atomic_fetch_add(&s->released, released);
    if (released)
        give_back(s);
}

static void *stall_main(void *arg) {
    kc_stall_pause_t *s = arg;
    kc_owner_lock_t *lock = s->src.lock;
    int64_t tick = s->pause_ms / 4;
    if (tick < KC_STALL_TICK_MIN_MS)
        tick = KC_STALL_TICK_MIN_MS;
    if (tick > KC_STALL_TICK_MAX_MS)
        tick = KC_STALL_TICK_MAX_MS;
    while (!atomic_load(&s->stop)) {
        struct pollfd pfd = {.fd = s->fd, .events = POLLIN};
        poll(&pfd, 1, (int)tick);
        kc_event_fd_drain(s->fd);
        if (atomic_load(&s->stop))
            continue;
        if (atomic_load(&s->paused)) {
            if (!late_release_due(s) || atomic_load(&lock->wanted) || pthread_mutex_trylock(&lock->m) != 0)
                continue;
            if (atomic_load(&s->paused) && late_release_due(s))
                release_late(s);
            pthread_mutex_unlock(&lock->m);
            continue;
        }
        if (!stalled(s))
            continue;
        /* the owner goes first: it may be in another call (commit, seek, ...) */
        if (atomic_load(&lock->wanted) || pthread_mutex_trylock(&lock->m) != 0)
            continue;
        /* again under the lock: a poll() may have started meanwhile */
        if (!atomic_load(&s->paused) && stalled(s))
            pause_fetchers(s);
        pthread_mutex_unlock(&lock->m);
    }
    return NULL;
}

void kc_stall_init(kc_stall_pause_t *s) {
    s->running = 0;
    s->locking = 0;
    s->fd = -1;
    s->pause_ms = 0;
    s->mallctl = NULL;
    s->release_buffer = 0;
    s->src = (kc_stall_source_t){0};
    atomic_store(&s->stop, 0);
    atomic_store(&s->paused, 0);
    atomic_store(&s->pauses, 0);
    atomic_store(&s->released, 0);
    atomic_store(&s->refetched, 0);
}

int kc_stall_start(kc_stall_pause_t *s, const kc_stall_source_t *src, int64_t pause_ms) {
    if (s->running || pause_ms <= 0)
        return 0;
    s->src = *src;
    s->fd = kc_event_fd_new();
    if (s->fd < 0)
        return -1;
    s->pause_ms = pause_ms;
    atomic_store(&s->stop, 0);
    s->locking = 1;
    if (pthread_create(&s->tid, NULL, stall_main, s) != 0) {
        close(s->fd);
        s->fd = -1;
        return -1;
    }
    s->running = 1;
    return 0;
}

void kc_stall_stop(kc_stall_pause_t *s) {
    if (!s->running)
        return;
    atomic_store(&s->stop, 1);
    kc_event_fd_signal(s->fd);
    pthread_join(s->tid, NULL);
    s->running = 0;
    close(s->fd);
    s->fd = -1;
}

/* Wakes librdkafka's fetchers of the resumed partitions (kc_ps_wake_fetcher). Owner lock held. */
static void wake_fetchers(kc_stall_pause_t *s, const rd_kafka_topic_partition_list_t *resumed) {
    for (int i = 0; i < resumed->cnt; i++) {
        kc_partition_t *p = kc_ps_find(s->src.fb, resumed->elems[i].topic, resumed->elems[i].partition);
        if (p && !resumed->elems[i].err)
            kc_ps_wake_fetcher(s->src.rk, p);
    }
}

void kc_stall_resume(kc_stall_pause_t *s) {
    if (!atomic_load(&s->paused))
        return;
    kc_fetch_buffer_t *fb = s->src.fb;
    rd_kafka_topic_partition_list_t *lst = rd_kafka_topic_partition_list_new((int)fb->n + 1);
    if (!lst)
        return; /* the next poll tries again */
    for (size_t i = 0; i < fb->n; i++) {
        kc_partition_t *p = kc_ps_at(fb, i);
        if (!p->stall_paused)
            continue;
        kc_ps_set_stall_paused(p, 0);
        if (!kc_ps_paused(p)) /* the application's own pause() since wins */
            rd_kafka_topic_partition_list_add(lst, p->q.topic, p->q.partition);
    }
    if (lst->cnt && rd_kafka_resume_partitions(s->src.rk, lst) == RD_KAFKA_RESP_ERR_NO_ERROR)
        wake_fetchers(s, lst);
    rd_kafka_topic_partition_list_destroy(lst);
    atomic_store(&s->paused, 0);
}
