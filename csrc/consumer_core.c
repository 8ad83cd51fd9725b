#include "consumer_core.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* Longest single wait inside poll(): librdkafka must see the application poll well
 * within max.poll.interval.ms, and wakeups through the fd are immediate anyway. */
#define KC_MAX_WAIT_MS  200
#define KC_REFILL_CHUNK 1024
/* Seeks re-issued for one seek() before the guard takes whatever arrives (seek_guard), and how
 * long after the seek it watches (a pending start-offset lookup of librdkafka's lands within a
 * request's round trip; retried requests take longer) */
#define KC_SEEK_RETRIES  4
#define KC_SEEK_GUARD_MS 30000

static const uint64_t kc_one = 1;

kc_consumer_t *kc_consumer_new(rd_kafka_conf_t *conf, size_t max_poll_records, kc_fairness_t fairness,
                               int64_t max_poll_interval_ms, char *errstr, size_t errlen) {
    kc_consumer_t *c = calloc(1, sizeof(*c));
    if (!c) {
        snprintf(errstr, errlen, "out of memory");
        return NULL;
    }
    c->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->wake_fd < 0) {
        snprintf(errstr, errlen, "eventfd: %s", strerror(errno));
        free(c);
        return NULL;
    }
    kc_fb_init(&c->fb);
    kc_owner_lock_init(&c->lock);
    c->prefetch.fd = -1;
    c->max_poll_records = max_poll_records;
    c->fairness = fairness;
    c->prefetch_floor = 64;
    c->ring_max_records = 100000;
    c->ring_max_bytes = (size_t)65536 * 1024;
    c->rebalance_barrier = 1;
    c->scratch_cap = max_poll_records > KC_REFILL_CHUNK ? max_poll_records : KC_REFILL_CHUNK;
    c->scratch = malloc(c->scratch_cap * sizeof(*c->scratch));
    if (!c->scratch) {
        close(c->wake_fd);
        free(c);
        snprintf(errstr, errlen, "out of memory");
        return NULL;
    }
    kc_poll_timer_init(&c->poll_timer, max_poll_interval_ms);
    c->heartbeat = kc_hb_new();
    if (!c->heartbeat || kc_hb_install(conf, c->heartbeat) != 0) {
        /* nothing was installed on a handle: the monitor can go now */
        snprintf(errstr, errlen, "cannot install the heartbeat interceptor");
        kc_hb_free(c->heartbeat);
        kc_consumer_free(c);
        return NULL;
    }
    return c;
}

int kc_consumer_attach(kc_consumer_t *c, rd_kafka_t *rk) {
    c->rk = rk;
    if (rd_kafka_poll_set_consumer(rk) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return -1;
    c->cq = rd_kafka_queue_get_consumer(rk);
    if (!c->cq)
        return -1;
    rd_kafka_queue_io_event_enable(c->cq, c->wake_fd, &kc_one, sizeof(kc_one));
    c->fetchq = rd_kafka_queue_new(rk);
    if (!c->fetchq)
        return -1;
    rd_kafka_queue_io_event_enable(c->fetchq, c->wake_fd, &kc_one, sizeof(kc_one));
    return 0;
}

void kc_consumer_free(kc_consumer_t *c) {
    if (!c)
        return;
    kc_prefetch_stop(c);
    kc_fb_destroy(&c->fb);
    if (c->fetchq) {
        rd_kafka_queue_io_event_enable(c->fetchq, -1, NULL, 0);
        rd_kafka_queue_destroy(c->fetchq);
    }
    if (c->cq) {
        rd_kafka_queue_io_event_enable(c->cq, -1, NULL, 0);
        rd_kafka_queue_destroy(c->cq);
    }
    while (c->n_errors)
        rd_kafka_message_destroy(kc_consumer_take_error(c));
    if (c->wake_fd >= 0)
        close(c->wake_fd);
    free(c->scratch);
    kc_owner_lock_destroy(&c->lock);
    free(c);
}

kc_partition_t *kc_consumer_add_partition(kc_consumer_t *c, const char *topic, int32_t partition) {
    kc_partition_t *p = kc_fb_add(&c->fb, topic, partition);
    if (!p || p->queue)
        return p;
    /* A newly assigned partition starts unpaused (as in Java). librdkafka keeps the
     * application's pause flag on its partition object across unassign/assign, so a
     * partition paused before a revoke would never be fetched again once reassigned
     * while kipconsumer reports it unpaused: clear the flag. */
    rd_kafka_topic_partition_list_t *one = rd_kafka_topic_partition_list_new(1);
    if (one) {
        rd_kafka_topic_partition_list_add(one, topic, partition);
        rd_kafka_resume_partitions(c->rk, one);
        rd_kafka_topic_partition_list_destroy(one);
    }
    /* Forwarded by the application, the queue stays forwarded when librdkafka (re)starts
     * the partition's fetcher; messages fetched before that point are routed from the
     * consumer queue instead (serve_consumer_queue). */
    p->queue = rd_kafka_queue_get_partition(c->rk, topic, partition);
    if (p->queue)
        rd_kafka_queue_forward(p->queue, c->fetchq);
    return p;
}

static void push_error(kc_consumer_t *c, rd_kafka_message_t *m) {
    if (c->n_errors < KC_MAX_PENDING_ERRORS)
        c->errors[c->n_errors++] = m;
    else
        rd_kafka_message_destroy(m);
}

rd_kafka_message_t *kc_consumer_take_error(kc_consumer_t *c) {
    if (!c->n_errors)
        return NULL;
    rd_kafka_message_t *m = c->errors[0];
    memmove(&c->errors[0], &c->errors[1], (c->n_errors - 1) * sizeof(c->errors[0]));
    c->n_errors--;
    return m;
}

void kc_consumer_wakeup(kc_consumer_t *c) {
    atomic_store(&c->wakeup, 1);
    ssize_t r = write(c->wake_fd, &kc_one, sizeof(kc_one));
    (void)r;
}

static void route_run(kc_consumer_t *c, rd_kafka_message_t **msgs, size_t n);

/* Serves the consumer queue: rebalance and error callbacks run here. */
static void serve_consumer_queue(kc_consumer_t *c) {
    rd_kafka_message_t *m;
    while (!c->abort_poll && (m = rd_kafka_consumer_poll(c->rk, 0)) != NULL) {
        c->batch_seq++;
        if (m->err)
            push_error(c, m);
        else
            route_run(c, &m, 1);
    }
}

void kc_consumer_serve(kc_consumer_t *c) {
    kc_consumer_hold(c);
    serve_consumer_queue(c);
    kc_consumer_release(c);
}

void kc_consumer_seek_guard(kc_partition_t *p, int64_t offset) {
    p->seek_target = offset;
    p->seek_seen = KC_POSITION_UNKNOWN;
    p->seek_retries = 0;
    p->seek_batch = 0;
    p->seek_until_ms = kc_now_ms() + KC_SEEK_GUARD_MS;
}

static void seek_guard_done(kc_partition_t *p) {
    p->seek_target = KC_POSITION_UNKNOWN;
    p->seek_seen = KC_POSITION_UNKNOWN;
    p->seek_retries = 0;
}

/* The seek guard: after the application's seek to T, p's records must continue from T without
 * a jump. librdkafka's seek does not always win: right after assign() the partition's start
 * offset is still being resolved (committed offset, then auto.offset.reset's ListOffsets), and
 * when that lookup's answer lands after the seek, librdkafka moves the fetch position there
 * (before the first record of the seek, or after some), with no version barrier that would stop
 * the records (seen against Tansu: assign() + seek_to_beginning() returned only the last batch of
 * a partition; on the embedded broker with a live producer, a partition jumped from the middle to
 * its end). For KC_SEEK_GUARD_MS after the seek, a record past the next expected offset E makes
 * the guard seek to E again (asynchronously: the version barrier drops what is still queued of
 * that fetch) and drop the records of the batch it came in (they are of that fetch too). If the
 * fetch after the re-seek jumps to the same offset again, E..offset-1 is a gap in the log
 * (compacted, a transaction marker, aborted records) and the records are taken. After
 * KC_SEEK_RETRIES re-seeks, or once the window is over, records are taken as they come.
 * `expect` is E (kc_fb_next_offset, as route_run advances it). Returns 1 if m is to be taken;
 * records below E are left to the refetch filter. */
static int seek_guard(kc_consumer_t *c, kc_partition_t *p, const rd_kafka_message_t *m, int64_t expect) {
    if (expect == KC_POSITION_UNKNOWN)
        expect = p->seek_target;
    if (p->seek_batch == c->batch_seq && p->seek_retries)
        return 0; /* the rest of the batch that made the guard seek again */
    if (m->offset <= expect)
        return 1;
    if (p->seek_seen == m->offset || p->seek_retries >= KC_SEEK_RETRIES || kc_now_ms() > p->seek_until_ms) {
        seek_guard_done(p);
        return 1;
    }
    rd_kafka_topic_partition_list_t *one = rd_kafka_topic_partition_list_new(1);
    if (!one) {
        seek_guard_done(p);
        return 1;
    }
    rd_kafka_topic_partition_list_add(one, p->topic, p->partition)->offset = expect;
    rd_kafka_error_t *err = rd_kafka_seek_partitions(c->rk, one, 0);
    rd_kafka_topic_partition_list_destroy(one);
    if (err) {
        rd_kafka_error_destroy(err);
        seek_guard_done(p);
        return 1;
    }
    p->seek_seen = m->offset;
    p->seek_retries++;
    p->seek_batch = c->batch_seq;
    c->seek_retries++;
    return 0;
}

size_t kc_consumer_budget(const kc_consumer_t *c) {
    size_t unpaused = 0;
    for (size_t i = 0; i < c->fb.n; i++)
        unpaused += !c->fb.parts[i]->paused;
    if (!unpaused)
        return 0;
    return unpaused * kc_fb_target(&c->fb, c->max_poll_records, c->prefetch_floor) + c->max_poll_records;
}

/* True if m, below p's floor (the committed offset when p was assigned), must not be taken:
 * a fetch that started below the committed offset (seen under chaos faults: a newly assigned
 * partition's first records came from offset 0 although its committed offset was in the
 * thousands, and the fetch restarted at the committed offset later). Java starts a newly
 * assigned partition at its committed offset and discards fetched data of other positions.
 * The floor is given up if the log no longer reaches it (the high watermark is below it:
 * the commit points past a truncated or recreated log, or past its end): librdkafka then
 * resets the position by auto.offset.reset, and those records are the ones to read. */
static int below_committed(kc_consumer_t *c, kc_partition_t *p) {
    int64_t lo = -1, hi = -1;
    if (rd_kafka_get_watermark_offsets(c->rk, p->topic, p->partition, &lo, &hi) ==
            RD_KAFKA_RESP_ERR_NO_ERROR &&
        hi >= 0 && hi < p->floor) {
        p->floor = KC_POSITION_UNKNOWN;
        return 0;
    }
    return 1;
}

/* Buffers one run of messages of the same partition (in offset order), dropping those of
 * partitions no longer assigned, copies of offsets already returned or buffered
 * (kc_fb_next_offset) and records below the committed offset the partition was assigned
 * at (below_committed). */
static void route_run(kc_consumer_t *c, rd_kafka_message_t **msgs, size_t n) {
    kc_partition_t *p = kc_fb_find(&c->fb, rd_kafka_topic_name(msgs[0]->rkt), msgs[0]->partition);
    if (!p) {
        for (size_t i = 0; i < n; i++)
            rd_kafka_message_destroy(msgs[i]);
        c->dropped_foreign += n;
        return;
    }
    int64_t next = kc_fb_next_offset(p);
    size_t kept = 0;
    int reseeked = 0;
    for (size_t i = 0; i < n; i++) {
        if (p->seek_target != KC_POSITION_UNKNOWN && !seek_guard(c, p, msgs[i], next)) {
            rd_kafka_message_destroy(msgs[i]);
            c->dropped_before_seek++;
            reseeked = 1;
            continue;
        }
        if (next != KC_POSITION_UNKNOWN && msgs[i]->offset < next) {
            rd_kafka_message_destroy(msgs[i]);
            c->dropped_refetched++;
            continue;
        }
        if (p->floor != KC_POSITION_UNKNOWN && msgs[i]->offset < p->floor && below_committed(c, p)) {
            rd_kafka_message_destroy(msgs[i]);
            c->dropped_below_committed++;
            continue;
        }
        next = msgs[i]->offset + 1;
        msgs[kept++] = msgs[i];
    }
    if (kept)
        kc_fb_push(&c->fb, p, msgs, kept);
    /* A record the seek guard dropped moved librdkafka's position past it until the guard's new
     * seek resets it; records taken after a purge or seek come after librdkafka's own reset (the
     * seek's version barrier drops the older ones). */
    if (reseeked)
        p->app_pos_trusted = 0;
    else if (kept)
        p->app_pos_trusted = 1;
}

int kc_consumer_step_over_markers(kc_consumer_t *c, kc_partition_t *p) {
    if (!p->app_pos_trusted || p->len || p->position == KC_POSITION_UNKNOWN)
        return 0;
    rd_kafka_topic_partition_list_t *one = rd_kafka_topic_partition_list_new(1);
    if (!one)
        return 0;
    rd_kafka_topic_partition_list_add(one, p->topic, p->partition);
    int moved = 0;
    if (rd_kafka_position(c->rk, one) == RD_KAFKA_RESP_ERR_NO_ERROR && !one->elems[0].err &&
        one->elems[0].offset > p->position) {
        p->position = one->elems[0].offset;
        moved = 1;
    }
    rd_kafka_topic_partition_list_destroy(one);
    return moved;
}

/* True while an unpaused partition holds less than `target` records. */
static int hungry(const kc_fetch_buffer_t *fb, size_t target) {
    for (size_t i = 0; i < fb->n; i++)
        if (!fb->parts[i]->paused && fb->parts[i]->len < target)
            return 1;
    return 0;
}

/* Moves records from the shared fetch queue into the partitions' rings (see
 * kc_consumer_budget() for how far; at most `limit`; `bounded`: never past ring_max_records /
 * ring_max_bytes, the budget included). Records of a paused partition still queued there are
 * dropped by librdkafka (pause sets a version barrier; fetching resumes after what was
 * taken). Error events go to the pending list. */
/* Records that still fit below the buffer's hard bounds, estimated from the average size of
 * what is buffered (1 KiB if nothing is); at least 1 while below both. */
static size_t room(const kc_consumer_t *c) {
    if (c->fb.records >= c->ring_max_records || c->fb.bytes >= c->ring_max_bytes)
        return 0;
    size_t avg = c->fb.records ? c->fb.bytes / c->fb.records : 1024;
    size_t by_bytes = (c->ring_max_bytes - c->fb.bytes) / (avg ? avg : 1) + 1;
    size_t by_count = c->ring_max_records - c->fb.records;
    return by_bytes < by_count ? by_bytes : by_count;
}

size_t kc_consumer_refill(kc_consumer_t *c, size_t limit, int bounded) {
    size_t budget = kc_consumer_budget(c);
    size_t target = kc_fb_target(&c->fb, c->max_poll_records, c->prefetch_floor);
    size_t moved = 0;
    while (moved < limit) {
        size_t have = kc_fb_drainable(&c->fb);
        size_t want = c->scratch_cap;
        if (limit - moved < want)
            want = limit - moved;
        if (bounded) {
            size_t r = room(c);
            if (!r)
                break;
            if (r < want)
                want = r;
        }
        if (have < budget) {
            if (budget - have < want)
                want = budget - have;
        } else if (!hungry(&c->fb, target) || c->fb.records >= c->ring_max_records ||
                   c->fb.bytes >= c->ring_max_bytes) {
            break;
        } else if (target < want) {
            want = target; /* small steps past the budget: the hard bound overshoots little */
        }
        ssize_t got = rd_kafka_consume_batch_queue(c->fetchq, 0, c->scratch, want);
        if (got <= 0)
            break;
        moved += (size_t)got;
        c->batch_seq++;
        size_t j = 0;
        while (j < (size_t)got) {
            rd_kafka_message_t *m = c->scratch[j];
            if (m->err) {
                push_error(c, m);
                j++;
                continue;
            }
            size_t k = j + 1;
            while (k < (size_t)got && !c->scratch[k]->err && c->scratch[k]->rkt == m->rkt &&
                   c->scratch[k]->partition == m->partition)
                k++;
            route_run(c, c->scratch + j, k - j);
            j = k;
        }
        if ((size_t)got < want)
            break;
    }
    return moved;
}

int kc_consumer_rebalance_pending(kc_consumer_t *c) {
    if (!c->rebalance_barrier)
        return 0;
    int64_t last_any = atomic_load(&c->heartbeat->last_any_ms);
    int64_t last_ok = atomic_load(&c->heartbeat->last_ok_ms);
    int64_t since = last_ok > c->last_rebalance_ms ? last_ok : c->last_rebalance_ms;
    /* a heartbeat learned that the group is joining */
    if (last_any > since && atomic_load(&c->heartbeat->last_error) == RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS)
        return 1;
    /* a commit learned it first (heartbeats are seconds apart; commits often are not) */
    return c->commit_refused_ms > since;
}

kc_poll_status_t kc_consumer_poll(kc_consumer_t *c, int timeout_ms, rd_kafka_message_t **out, size_t *n_out) {
    int64_t deadline = kc_now_ms() + (timeout_ms < 0 ? 0 : timeout_ms);
    kc_poll_status_t st = KC_POLL_OK;
    *n_out = 0;
    kc_poll_timer_mark(&c->poll_timer);
    kc_consumer_hold(c);
    c->polls++;
    for (;;) {
        if (atomic_exchange(&c->wakeup, 0)) {
            st = KC_POLL_WAKEUP;
            break;
        }
        kc_drain_eventfd(c->wake_fd);
        serve_consumer_queue(c);
        if (c->abort_poll) {
            c->abort_poll = 0;
            st = KC_POLL_ABORT;
            break;
        }
        /* with the prefetch thread, at most one poll's worth here: the thread does the rest */
        c->poll_moved += kc_consumer_refill(c, c->prefetch.running ? c->max_poll_records : SIZE_MAX, 0);
        size_t n = 0;
        if (c->hold_records)
            ;
        else if (kc_consumer_rebalance_pending(c))
            c->barrier_polls++;
        else
            n = kc_fb_drain(&c->fb, c->max_poll_records, c->fairness, out);
        if (n) {
            *n_out = n;
            c->records_returned += n;
            break;
        }
        if (c->n_errors) {
            st = KC_POLL_EVENT;
            break;
        }
        int64_t now = kc_now_ms();
        if (now >= deadline)
            break;
        int64_t wait = deadline - now;
        if (wait > KC_MAX_WAIT_MS)
            wait = KC_MAX_WAIT_MS;
        kc_poll_timer_mark(&c->poll_timer); /* blocked inside poll() is not a stall */
        struct pollfd pfd = {.fd = c->wake_fd, .events = POLLIN};
        atomic_store(&c->poll_waiting, 1);
        int depth = kc_owner_release_all(&c->lock); /* the prefetch thread fills the buffer meanwhile */
        poll(&pfd, 1, (int)wait);
        kc_owner_reacquire(&c->lock, depth);
        atomic_store(&c->poll_waiting, 0);
    }
    kc_owner_release(&c->lock);
    kc_poll_timer_mark(&c->poll_timer);
    return st;
}
