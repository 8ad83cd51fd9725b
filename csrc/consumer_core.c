#include "consumer_core.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "event_fd.h"

#define KC_REFILL_CHUNK 1024

kc_consumer_t *kc_consumer_new(rd_kafka_conf_t *conf, size_t max_poll_records, kc_fairness_t fairness,
                               int64_t max_poll_interval_ms, char *errstr, size_t errlen) {
    kc_consumer_t *c = calloc(1, sizeof(*c));
    if (!c) {
        snprintf(errstr, errlen, "out of memory");
        return NULL;
    }
    c->wake_fd = kc_event_fd_new();
    if (c->wake_fd < 0) {
        snprintf(errstr, errlen, "eventfd: %s", strerror(errno));
        free(c);
        return NULL;
    }
    kc_ps_init_buffer(&c->fb);
    kc_owner_lock_init(&c->lock);
    kc_prefetch_init(&c->prefetch);
    kc_stall_init(&c->stall);
    c->max_poll_records = max_poll_records;
    c->fairness = fairness;
    c->prefetch_floor = 64;
    c->ring_max_records = 100000;
    c->ring_max_bytes = (size_t)65536 * 1024;
    kc_rebalance_barrier_init(&c->barrier);
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
    rd_kafka_queue_io_event_enable(c->cq, c->wake_fd, &kc_event_fd_one, sizeof(kc_event_fd_one));
    c->fetchq = rd_kafka_queue_new(rk);
    if (!c->fetchq)
        return -1;
    rd_kafka_queue_io_event_enable(c->fetchq, c->wake_fd, &kc_event_fd_one, sizeof(kc_event_fd_one));
    return 0;
}

void kc_consumer_free(kc_consumer_t *c) {
    if (!c)
        return;
    kc_prefetch_stop(&c->prefetch);
    kc_stall_stop(&c->stall);
    kc_ps_remove_all(&c->fb);
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
    kc_partition_t *p = kc_ps_add(&c->fb, topic, partition);
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
    kc_ps_set_queue(p, rd_kafka_queue_get_partition(c->rk, topic, partition));
    if (p->queue)
        rd_kafka_queue_forward(p->queue, c->fetchq);
    return p;
}

static void push_error(kc_consumer_t *c, rd_kafka_message_t *m) {
    if (m->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET && m->rkt) {
        kc_partition_t *p = kc_ps_find(&c->fb, rd_kafka_topic_name(m->rkt), m->partition);
        if (p)
            kc_ps_fetch_stop_reported(p, m->offset);
    }
    if (c->n_errors < KC_MAX_PENDING_ERRORS)
        c->errors[c->n_errors++] = m;
    else
        rd_kafka_message_destroy(m);
}

size_t kc_consumer_drop_offset_errors(kc_consumer_t *c, const kc_partition_t *p) {
    size_t kept = 0, dropped = 0;
    for (size_t i = 0; i < c->n_errors; i++) {
        rd_kafka_message_t *m = c->errors[i];
        if (m->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET && m->rkt && m->partition == p->q.partition &&
            strcmp(rd_kafka_topic_name(m->rkt), p->q.topic) == 0) {
            rd_kafka_message_destroy(m);
            dropped++;
        } else {
            c->errors[kept++] = m;
        }
    }
    c->n_errors = kept;
    return dropped;
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
    kc_event_fd_signal(c->wake_fd);
}

static void route_run(kc_consumer_t *c, rd_kafka_message_t **msgs, size_t n);

void kc_consumer_fetch_restarted(kc_consumer_t *c, kc_partition_t *p, int seeked) {
    kc_ps_fetch_restarted(p, seeked);
    c->refetch_forwards++;
}

/* librdkafka's fetch stop (of a restart) drops the forward of a partition's queue, and the start that
 * follows leaves a queue the application forwarded alone: forward it again (what the queue holds
 * moves along) until its first record comes. */
static void forward_restarted(kc_consumer_t *c) {
    if (!c->refetch_forwards)
        return;
    size_t pending = 0;
    for (size_t i = 0; i < c->fb.n; i++) {
        kc_partition_t *p = kc_ps_at(&c->fb, i);
        if (p->refetch_forward && p->queue) {
            rd_kafka_queue_forward(p->queue, c->fetchq);
            pending++;
        }
    }
    c->refetch_forwards = pending;
}

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

size_t kc_consumer_budget(const kc_consumer_t *c) {
    size_t unpaused = 0;
    for (size_t i = 0; i < c->fb.n; i++)
        unpaused += !c->fb.parts[i]->held;
    if (!unpaused)
        return 0;
    return unpaused * kc_fb_target(&c->fb, c->max_poll_records, c->prefetch_floor) + c->max_poll_records;
}

/* Buffers one run of messages of the same partition (in offset order), dropping those of
 * partitions no longer assigned and those the record filters (record_filters.h) turn away: the
 * seek guard's, copies of offsets already returned or buffered (kc_ps_next_offset) and records
 * below the committed offset the partition was assigned at. */
static void route_run(kc_consumer_t *c, rd_kafka_message_t **msgs, size_t n) {
    kc_partition_t *p = kc_ps_find(&c->fb, rd_kafka_topic_name(msgs[0]->rkt), msgs[0]->partition);
    if (!p) {
        for (size_t i = 0; i < n; i++)
            rd_kafka_message_destroy(msgs[i]);
        c->dropped_foreign += n;
        return;
    }
    int64_t next = kc_ps_next_offset(p);
    size_t kept = 0;
    int reseeked = 0;
    for (size_t i = 0; i < n; i++) {
        if (kc_seek_guard_active(&p->filters)) {
            kc_seek_guard_verdict_t v = kc_seek_guard_check(&p->filters, c->rk, p->q.topic, p->q.partition,
                                                            msgs[i]->offset, next, c->batch_seq);
            if (v != KC_SEEK_GUARD_TAKE) {
                rd_kafka_message_destroy(msgs[i]);
                c->dropped_before_seek++;
                if (v == KC_SEEK_GUARD_RESEEK)
                    c->seek_retries++;
                reseeked = 1;
                continue;
            }
        }
        if (kc_reset_after_seek(&p->filters, msgs[i]->offset)) {
            /* librdkafka's auto.offset.reset after a seek outside the log: read from there */
            next = msgs[i]->offset;
            kc_ps_reset_after_seek(p, next);
            c->resets_after_seek++;
        }
        if (kc_refetched(msgs[i]->offset, next)) {
            rd_kafka_message_destroy(msgs[i]);
            c->dropped_refetched++;
            continue;
        }
        if (kc_below_floor(&p->filters, c->rk, p->q.topic, p->q.partition, msgs[i]->offset)) {
            rd_kafka_message_destroy(msgs[i]);
            c->dropped_below_committed++;
            continue;
        }
        next = msgs[i]->offset + 1;
        msgs[kept++] = msgs[i];
    }
    if (kept)
        kc_fb_push(&c->fb, &p->q, msgs, kept);
    kc_ps_records_routed(p, kept, reseeked);
}

int kc_consumer_step_over_markers(kc_consumer_t *c, kc_partition_t *p) {
    if (!p->app_pos_trusted || p->q.len || p->position == KC_POSITION_UNKNOWN)
        return 0;
    rd_kafka_topic_partition_list_t *one = rd_kafka_topic_partition_list_new(1);
    if (!one)
        return 0;
    rd_kafka_topic_partition_list_add(one, p->q.topic, p->q.partition);
    int moved = 0;
    if (rd_kafka_position(c->rk, one) == RD_KAFKA_RESP_ERR_NO_ERROR && !one->elems[0].err)
        moved = kc_ps_step_to(p, one->elems[0].offset);
    rd_kafka_topic_partition_list_destroy(one);
    return moved;
}

/* True while an unpaused partition holds less than `target` records. */
static int hungry(const kc_fetch_buffer_t *fb, size_t target) {
    for (size_t i = 0; i < fb->n; i++)
        if (!fb->parts[i]->held && fb->parts[i]->len < target)
            return 1;
    return 0;
}

size_t kc_consumer_room(const kc_consumer_t *c) {
    if (c->fb.records >= c->ring_max_records || c->fb.bytes >= c->ring_max_bytes)
        return 0;
    size_t avg = c->fb.records ? c->fb.bytes / c->fb.records : 1024;
    size_t by_bytes = (c->ring_max_bytes - c->fb.bytes) / (avg ? avg : 1) + 1;
    size_t by_count = c->ring_max_records - c->fb.records;
    return by_bytes < by_count ? by_bytes : by_count;
}

/* Moves records from the shared fetch queue into the partitions' rings (see
 * kc_consumer_budget() for how far; at most `limit`; `bounded`: never past ring_max_records /
 * ring_max_bytes, the budget included). Records of a paused partition still queued there are
 * dropped by librdkafka (pause sets a version barrier; fetching resumes after what was
 * taken). Error events go to the pending list. */
/* Routes the `got` messages of c->scratch: errors to the pending list, runs of one partition to
 * route_run. */
static void route_scratch(kc_consumer_t *c, size_t got) {
    c->batch_seq++;
    size_t j = 0;
    while (j < got) {
        rd_kafka_message_t *m = c->scratch[j];
        if (m->err) {
            push_error(c, m);
            j++;
            continue;
        }
        size_t k = j + 1;
        while (k < got && !c->scratch[k]->err && c->scratch[k]->rkt == m->rkt &&
               c->scratch[k]->partition == m->partition)
            k++;
        route_run(c, c->scratch + j, k - j);
        j = k;
    }
}

size_t kc_consumer_release_fetched(kc_consumer_t *c) {
    size_t queued = rd_kafka_queue_length(c->fetchq), taken = 0;
    for (;;) {
        ssize_t got = rd_kafka_consume_batch_queue(c->fetchq, 0, c->scratch, c->scratch_cap);
        if (got <= 0)
            break;
        taken += (size_t)got;
        route_scratch(c, (size_t)got);
        if ((size_t)got < c->scratch_cap)
            break;
    }
    return queued > taken ? queued - taken : 0;
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
            size_t r = kc_consumer_room(c);
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
        route_scratch(c, (size_t)got);
        if ((size_t)got < want)
            break;
    }
    return moved;
}

/* The prefetch thread's refill (kc_prefetch_source_t.refill): one bounded chunk; news when the
 * buffer had nothing drainable and has now, or errors came. */
static size_t prefetch_refill(void *ctx, size_t limit, int *news) {
    kc_consumer_t *c = ctx;
    size_t errors = c->n_errors;
    size_t before = kc_fb_drainable(&c->fb);
    size_t moved = kc_consumer_refill(c, limit, 1);
    *news = (before == 0 && kc_fb_drainable(&c->fb) > 0) || c->n_errors != errors;
    return moved;
}

int kc_consumer_prefetch_start(kc_consumer_t *c) {
    kc_prefetch_source_t src = {
        .ctx = c,
        .refill = prefetch_refill,
        .fetchq = c->fetchq,
        .wake_fd = c->wake_fd,
        .lock = &c->lock,
        .poll_timer = &c->poll_timer,
        .poll_waiting = &c->poll_waiting,
    };
    return kc_prefetch_start(&c->prefetch, &src);
}

void kc_consumer_prefetch_stop(kc_consumer_t *c) {
    kc_prefetch_stop(&c->prefetch);
}

/* The stall thread's release (kc_stall_source_t.release_fetched). */
static size_t stall_release_fetched(void *ctx) {
    return kc_consumer_release_fetched(ctx);
}

int kc_consumer_stall_start(kc_consumer_t *c, int64_t pause_ms) {
    kc_stall_source_t src = {
        .ctx = c,
        .release_fetched = stall_release_fetched,
        .rk = c->rk,
        .fb = &c->fb,
        .fetchq = c->fetchq,
        .lock = &c->lock,
        .poll_timer = &c->poll_timer,
        .poll_waiting = &c->poll_waiting,
    };
    /* the prefetch thread keeps the buffer deep: a stall releases it too */
    c->stall.release_buffer = c->prefetch.running;
    return kc_stall_start(&c->stall, &src, pause_ms);
}

void kc_consumer_stall_stop(kc_consumer_t *c) {
    kc_stall_stop(&c->stall);
}

int kc_consumer_rebalance_pending(kc_consumer_t *c) {
    return kc_rebalance_barrier_holds(&c->barrier, c->heartbeat);
}

int kc_consumer_rejoining(kc_consumer_t *c) {
    return kc_barrier_rejoining(&c->barrier, c->heartbeat);
}

kc_poll_status_t kc_consumer_poll(kc_consumer_t *c, int timeout_ms, rd_kafka_message_t **out, size_t *n_out) {
    /* one clock read at entry and one at exit, as before: they also give the poll's duration */
    int64_t start_us = kc_now_us();
    int64_t deadline = start_us / 1000 + (timeout_ms < 0 ? 0 : timeout_ms);
    kc_poll_status_t st = KC_POLL_OK;
    *n_out = 0;
    atomic_store(&c->poll_timer.last_poll_ms, start_us / 1000);
    kc_consumer_hold(c);
    for (;;) {
        /* before records are served: the fetchers run again while poll() drains */
        kc_stall_resume(&c->stall);
        if (atomic_exchange(&c->wakeup, 0)) {
            st = KC_POLL_WAKEUP;
            break;
        }
        kc_event_fd_drain(c->wake_fd);
        serve_consumer_queue(c);
        if (c->abort_poll) {
            c->abort_poll = 0;
            st = KC_POLL_ABORT;
            break;
        }
        forward_restarted(c);
        /* with the prefetch thread, at most one poll's worth here: the thread does the rest */
        c->poll_moved += kc_consumer_refill(c, c->prefetch.running ? c->max_poll_records : SIZE_MAX, 0);
        size_t n = 0;
        if (c->hold_records)
            ;
        else if (kc_rebalance_barrier_holds(&c->barrier, c->heartbeat))
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
        int64_t wait = deadline - now; /* one slice at most: the caller passes KC_WAIT_SLICE_MS or less */
        kc_poll_timer_mark(&c->poll_timer); /* blocked inside poll() is not a stall */
        struct pollfd pfd = {.fd = c->wake_fd, .events = POLLIN};
        atomic_store(&c->poll_waiting, 1);
        int depth = kc_owner_release_all(&c->lock); /* the prefetch thread fills the buffer meanwhile */
        poll(&pfd, 1, (int)wait);
        kc_owner_reacquire(&c->lock, depth);
        atomic_store(&c->poll_waiting, 0);
    }
    kc_owner_release(&c->lock);
    int64_t end_us = kc_now_us();
    atomic_store(&c->poll_timer.last_poll_ms, end_us / 1000);
    c->poll_time_us += (uint64_t)(end_us - start_us);
    return st;
}
