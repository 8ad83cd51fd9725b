/* Native core of kipconsumer's KafkaProducer: see producer_core.h. */
#include "producer_core.h"
#include "clock.h"
#include "security_markers.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KC_PRODUCER_MAX_EVENTS 64
#define KC_PRODUCER_MAX_BATCH  20000

static void kc_producer_abstime(int64_t deadline_us, struct timespec *ts) {
    ts->tv_sec = (time_t)(deadline_us / 1000000);
    ts->tv_nsec = (long)(deadline_us % 1000000) * 1000;
}

kc_producer_t *kc_producer_new(rd_kafka_conf_t *conf, char *errstr, size_t errstr_size) {
    kc_producer_t *p = calloc(1, sizeof(*p));
    pthread_condattr_t ca;
    if (!p) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    rd_kafka_conf_set_events(conf, RD_KAFKA_EVENT_DR | RD_KAFKA_EVENT_ERROR | RD_KAFKA_EVENT_STATS);
    p->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, errstr_size);
    if (!p->rk) {
        free(p);
        return NULL;
    }
    p->mainq = rd_kafka_queue_get_main(p->rk);
    pthread_mutex_init(&p->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->cond, &ca);
    pthread_condattr_destroy(&ca);
    p->head.next = p->head.prev = &p->head;
    return p;
}

int kc_producer_is_auth_failure(int err, const char *reason) {
    if (err == RD_KAFKA_RESP_ERR__AUTHENTICATION || err == RD_KAFKA_RESP_ERR__SSL)
        return 1;
    return err == RD_KAFKA_RESP_ERR__TRANSPORT && kc_is_handshake_failure_text(reason);
}

/* Call with p->lock held. */
static int kc_producer_auth_holds(kc_producer_t *p) {
    return p->auth_err && kc_now_us() - p->auth_at_us < KC_PRODUCER_AUTH_HOLD_US;
}

int kc_producer_auth_error(kc_producer_t *p, char *buf, size_t size) {
    int err;
    pthread_mutex_lock(&p->lock);
    err = kc_producer_auth_holds(p) ? p->auth_err : 0;
    if (buf && size)
        snprintf(buf, size, "%s", p->auth_error);
    pthread_mutex_unlock(&p->lock);
    return err;
}

/* Latches an authentication failure (the latest wins) and purges librdkafka's queue once no
 * kc_producer_produce() is between registering and enqueueing (as kc_producer_set_closing()). */
static void kc_producer_latch_auth_failure(kc_producer_t *p, int err, const char *reason) {
    struct timespec pause = {0, 100000};
    pthread_mutex_lock(&p->lock);
    p->auth_err = err;
    p->auth_at_us = kc_now_us();
    snprintf(p->auth_error, sizeof(p->auth_error), "%s", reason ? reason : "");
    pthread_mutex_unlock(&p->lock);
    while (__atomic_load_n(&p->producing, __ATOMIC_ACQUIRE) > 0)
        nanosleep(&pause, NULL);
    rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE);
}

static int kc_producer_is_timeout(int err) {
    return err == RD_KAFKA_RESP_ERR__MSG_TIMED_OUT || err == RD_KAFKA_RESP_ERR__TIMED_OUT ||
           err == RD_KAFKA_RESP_ERR__TIMED_OUT_QUEUE || err == RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT;
}

/* Appends the delivery reports of one event to p->items; returns how many. */
static size_t kc_producer_collect(kc_producer_t *p, rd_kafka_event_t *ev, size_t n) {
    const rd_kafka_message_t *m;
    size_t need = n + rd_kafka_event_message_count(ev);
    if (need > p->items_cap) {
        size_t cap = p->items_cap ? p->items_cap : 1024;
        kc_producer_dr_t *items;
        while (cap < need)
            cap *= 2;
        items = realloc(p->items, cap * sizeof(*items));
        if (!items)
            abort(); /* cannot lose delivery reports */
        p->items = items;
        p->items_cap = cap;
    }
    while ((m = rd_kafka_event_message_next(ev))) {
        kc_producer_dr_t *it = &p->items[n++];
        it->rec = (kc_producer_rec_t *)m->_private;
        it->err = m->err;
        it->topic = rd_kafka_topic_name(m->rkt);
        /* not rd_kafka_message_errstr(): for a produced message it returns the payload */
        it->errstr = m->err ? rd_kafka_err2str(m->err) : NULL;
        if (m->err == RD_KAFKA_RESP_ERR__PURGE_QUEUE && p->auth_err &&
            !__atomic_load_n(&p->closing, __ATOMIC_ACQUIRE)) {
            /* purged by kc_producer_latch_auth_failure(): auth_err is only written on this thread */
            it->err = p->auth_err;
            it->errstr = p->auth_error;
        } else if (m->err == RD_KAFKA_RESP_ERR__PURGE_QUEUE &&
                   !__atomic_load_n(&p->closing, __ATOMIC_ACQUIRE)) {
            /* purged by librdkafka's fatal error: an authorization refusal (an idempotent producer
             * without WRITE on any topic nor IDEMPOTENT_WRITE: CLUSTER_AUTHORIZATION_FAILED) is the
             * record's error. The fatal error never changes once set: rewriting its text is benign */
            rd_kafka_resp_err_t fe = rd_kafka_fatal_error(p->rk, p->fatal_error, sizeof(p->fatal_error));
            if (fe == RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED ||
                fe == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED ||
                fe == RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED) {
                it->err = fe;
                it->errstr = p->fatal_error;
            }
        }
        it->partition = m->partition;
        it->offset = m->offset;
        it->timestamp = rd_kafka_message_timestamp(m, NULL);
        it->latency_us = rd_kafka_message_latency(m);
    }
    return n;
}

static void *kc_producer_thread_main(void *arg) {
    kc_producer_t *p = arg;
    rd_kafka_event_t *evs[KC_PRODUCER_MAX_EVENTS];
    for (;;) {
        int stopping = __atomic_load_n(&p->stop, __ATOMIC_ACQUIRE);
        int nev = 0, i;
        size_t n = 0, j, delivered = 0, failed = 0, timed_out = 0;
        rd_kafka_event_t *ev = rd_kafka_queue_poll(p->mainq, stopping ? 0 : 100);
        if (!ev) {
            if (stopping)
                break;
            continue;
        }
        /* Gather every event that is ready so that one GIL acquisition serves them all. */
        while (ev) {
            int type = rd_kafka_event_type(ev);
            if (type == RD_KAFKA_EVENT_DR) {
                n = kc_producer_collect(p, ev, n);
                evs[nev++] = ev;
            } else {
                if (type == RD_KAFKA_EVENT_STATS) {
                    char *doc = strdup(rd_kafka_event_stats(ev));
                    pthread_mutex_lock(&p->lock);
                    free(p->stats_json);
                    p->stats_json = doc;
                    __atomic_store_n(&p->stats_ready, doc != NULL, __ATOMIC_RELEASE);
                    pthread_mutex_unlock(&p->lock);
                } else if (type == RD_KAFKA_EVENT_ERROR) {
                    if (kc_producer_is_auth_failure(rd_kafka_event_error(ev),
                                                    rd_kafka_event_error_string(ev)))
                        kc_producer_latch_auth_failure(p, rd_kafka_event_error(ev),
                                                       rd_kafka_event_error_string(ev));
                    pthread_mutex_lock(&p->lock);
                    p->st.errors++;
                    if (rd_kafka_event_error_is_fatal(ev))
                        p->st.fatal = 1;
                    snprintf(p->last_error, sizeof(p->last_error), "%s: %s",
                             rd_kafka_err2name(rd_kafka_event_error(ev)), rd_kafka_event_error_string(ev));
                    pthread_mutex_unlock(&p->lock);
                }
                rd_kafka_event_destroy(ev);
            }
            if (nev == KC_PRODUCER_MAX_EVENTS || n >= KC_PRODUCER_MAX_BATCH)
                break;
            ev = rd_kafka_queue_poll(p->mainq, 0);
        }
        if (nev == 0)
            continue;
        /* Unregister first: from here on only this batch owns these records. */
        pthread_mutex_lock(&p->lock);
        for (j = 0; j < n; j++) {
            kc_producer_rec_t *r = p->items[j].rec;
            if (!r)
                continue;
            r->prev->next = r->next;
            r->next->prev = r->prev;
            r->next = r->prev = NULL;
            if (p->items[j].err == 0)
                delivered++;
            else {
                failed++;
                if (kc_producer_is_timeout(p->items[j].err))
                    timed_out++;
            }
        }
        if (delivered)
            p->auth_err = 0; /* a broker accepted records: no authentication failure holds */
        /* counted before the futures complete, so metrics() agree with a done future */
        p->st.delivered += (int64_t)delivered;
        p->st.failed += (int64_t)failed;
        p->st.timed_out += (int64_t)timed_out;
        pthread_mutex_unlock(&p->lock);
        if (n)
            p->on_batch(p->ctx, p->items, n);
        for (i = 0; i < nev; i++)
            rd_kafka_event_destroy(evs[i]); /* frees the buffer space */
        pthread_mutex_lock(&p->lock);
        p->st.in_flight -= (int64_t)n;
        p->st.dr_batches++;
        p->space_seq++;
        pthread_cond_broadcast(&p->cond);
        pthread_mutex_unlock(&p->lock);
    }
    return NULL;
}

int kc_producer_start(kc_producer_t *p, kc_producer_batch_cb_t *cb, void *ctx) {
    int r;
    p->on_batch = cb;
    p->ctx = ctx;
    r = pthread_create(&p->thread, NULL, kc_producer_thread_main, p);
    if (r == 0)
        p->thread_started = 1;
    return r;
}

int kc_producer_on_dr_thread(kc_producer_t *p) {
    return p->thread_started && pthread_equal(pthread_self(), p->thread);
}

rd_kafka_resp_err_t kc_producer_produce(kc_producer_t *p, rd_kafka_topic_t *rkt, int32_t partition,
                                        const void *value, size_t value_len, const void *key, size_t key_len,
                                        int64_t timestamp, rd_kafka_headers_t *hdrs, kc_producer_rec_t *rec) {
    rd_kafka_resp_err_t err;
    pthread_mutex_lock(&p->lock);
    if (p->closing) {
        pthread_mutex_unlock(&p->lock);
        return RD_KAFKA_RESP_ERR__DESTROY;
    }
    if (kc_producer_auth_holds(p)) {
        err = (rd_kafka_resp_err_t)p->auth_err;
        pthread_mutex_unlock(&p->lock);
        return err;
    }
    /* Registered before the enqueue: the report may arrive before producev() returns. */
    rec->prev = p->head.prev;
    rec->next = &p->head;
    p->head.prev->next = rec;
    p->head.prev = rec;
    p->st.in_flight++;
    p->st.sent++;   /* taken back below if librdkafka refuses the record */
    p->producing++; /* kc_producer_set_closing() waits for this enqueue */
    pthread_mutex_unlock(&p->lock);

    if (hdrs)
        err = rd_kafka_producev(p->rk, RD_KAFKA_V_RKT(rkt), RD_KAFKA_V_PARTITION(partition),
                                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                RD_KAFKA_V_VALUE((void *)value, value_len), RD_KAFKA_V_KEY(key, key_len),
                                RD_KAFKA_V_TIMESTAMP(timestamp), RD_KAFKA_V_HEADERS(hdrs),
                                RD_KAFKA_V_OPAQUE(rec), RD_KAFKA_V_END);
    else
        err = rd_kafka_producev(p->rk, RD_KAFKA_V_RKT(rkt), RD_KAFKA_V_PARTITION(partition),
                                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                RD_KAFKA_V_VALUE((void *)value, value_len), RD_KAFKA_V_KEY(key, key_len),
                                RD_KAFKA_V_TIMESTAMP(timestamp), RD_KAFKA_V_OPAQUE(rec), RD_KAFKA_V_END);

    if (err) {
        pthread_mutex_lock(&p->lock);
        rec->prev->next = rec->next;
        rec->next->prev = rec->prev;
        rec->next = rec->prev = NULL;
        p->st.in_flight--;
        p->st.sent--;
        pthread_mutex_unlock(&p->lock);
    }
    __atomic_sub_fetch(&p->producing, 1, __ATOMIC_RELEASE);
    return err;
}

rd_kafka_resp_err_t kc_producer_produce_wait(kc_producer_t *p, rd_kafka_topic_t *rkt, int32_t partition,
                                             const void *value, size_t value_len, const void *key,
                                             size_t key_len, int64_t timestamp, rd_kafka_headers_t *hdrs,
                                             kc_producer_rec_t *rec, int64_t deadline_us, int *counted) {
    rd_kafka_resp_err_t err;
    for (;;) {
        uint64_t seq;
        pthread_mutex_lock(&p->lock);
        seq = p->space_seq;
        pthread_mutex_unlock(&p->lock);
        err = kc_producer_produce(p, rkt, partition, value, value_len, key, key_len, timestamp, hdrs, rec);
        if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL)
            return err;
        pthread_mutex_lock(&p->lock);
        if (!*counted) {
            p->st.buffer_waits++;
            *counted = 1;
        }
        /* Wait until a delivery batch frees space (re-check every slice) or the deadline. */
        while (!p->closing && p->space_seq == seq) {
            int64_t now = kc_now_us(), until;
            struct timespec ts;
            if (now >= deadline_us)
                break;
            until = kc_slice_end_us(deadline_us);
            kc_producer_abstime(until, &ts);
            pthread_cond_timedwait(&p->cond, &p->lock, &ts);
        }
        if (p->closing) {
            pthread_mutex_unlock(&p->lock);
            return RD_KAFKA_RESP_ERR__DESTROY;
        }
        if (p->space_seq == seq && kc_now_us() >= deadline_us) {
            pthread_mutex_unlock(&p->lock);
            return RD_KAFKA_RESP_ERR__QUEUE_FULL;
        }
        pthread_mutex_unlock(&p->lock);
    }
}

void kc_producer_note_buffer_timeout(kc_producer_t *p) {
    pthread_mutex_lock(&p->lock);
    p->st.buffer_timeouts++;
    pthread_mutex_unlock(&p->lock);
}

int64_t kc_producer_wait_idle(kc_producer_t *p, int64_t deadline_us) {
    int64_t left;
    pthread_mutex_lock(&p->lock);
    while (p->st.in_flight > 0) {
        int64_t now = kc_now_us(), until;
        struct timespec ts;
        if (now >= deadline_us)
            break;
        until = kc_slice_end_us(deadline_us);
        kc_producer_abstime(until, &ts);
        pthread_cond_timedwait(&p->cond, &p->lock, &ts);
    }
    left = p->st.in_flight;
    pthread_mutex_unlock(&p->lock);
    return left;
}

int64_t kc_producer_flush_until(kc_producer_t *p, int64_t until_us) {
    int closing;
    pthread_mutex_lock(&p->lock);
    closing = p->closing;
    pthread_mutex_unlock(&p->lock);
    if (!closing) {
        /* rd_kafka_flush() makes librdkafka send without waiting for linger.ms (only while
         * it runs); with DR events enabled it only waits for the messages to be released
         * by our delivery thread. */
        rd_kafka_flush(p->rk, kc_ms_until_us(until_us));
    }
    return kc_producer_wait_idle(p, until_us);
}

void kc_producer_set_closing(kc_producer_t *p) {
    struct timespec pause = {0, 100000};
    pthread_mutex_lock(&p->lock);
    p->closing = 1;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    /* A record registered before closing was set may not be in librdkafka's queue yet; a
     * purge now would miss it. rd_kafka_producev() does not block: this wait is short. */
    while (__atomic_load_n(&p->producing, __ATOMIC_ACQUIRE) > 0)
        nanosleep(&pause, NULL);
}

rd_kafka_resp_err_t kc_producer_purge(kc_producer_t *p) {
    return rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
}

void kc_producer_stop_thread(kc_producer_t *p) {
    if (!p->thread_started)
        return;
    __atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
    pthread_join(p->thread, NULL);
    p->thread_started = 0;
}

kc_producer_rec_t *kc_producer_take_all(kc_producer_t *p) {
    kc_producer_rec_t *first = NULL, *last = NULL, *r;
    pthread_mutex_lock(&p->lock);
    while ((r = p->head.next) != &p->head) {
        r->prev->next = r->next;
        r->next->prev = r->prev;
        r->prev = NULL;
        r->next = NULL;
        if (last)
            last->next = r;
        else
            first = r;
        last = r;
        p->st.in_flight--;
        p->st.failed++;
    }
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    return first;
}

void kc_producer_destroy(kc_producer_t *p) {
    if (!p)
        return;
    kc_producer_stop_thread(p);
    if (p->mainq)
        rd_kafka_queue_destroy(p->mainq);
    if (p->rk)
        rd_kafka_destroy(p->rk);
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->lock);
    free(p->items);
    free(p->stats_json);
    free(p);
}

char *kc_producer_take_stats(kc_producer_t *p) {
    char *doc;
    if (!__atomic_load_n(&p->stats_ready, __ATOMIC_ACQUIRE))
        return NULL;
    pthread_mutex_lock(&p->lock);
    doc = p->stats_json;
    p->stats_json = NULL;
    __atomic_store_n(&p->stats_ready, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&p->lock);
    return doc;
}

void kc_producer_get_stats(kc_producer_t *p, kc_producer_stats_t *out, char *last_error,
                           size_t last_error_size) {
    pthread_mutex_lock(&p->lock);
    *out = p->st;
    if (last_error && last_error_size)
        snprintf(last_error, last_error_size, "%s", p->last_error);
    pthread_mutex_unlock(&p->lock);
    out->outq_len = rd_kafka_outq_len(p->rk);
}
