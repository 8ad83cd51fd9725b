/* Native core of kipconsumer's KafkaProducer (KIP-19 timeouts on librdkafka).
 *
 * Per-record path, all in C:
 *   - kc_producer_produce(): links the record into a registry of pending records, counts it as
 *     in flight and enqueues it with rd_kafka_producev(RD_KAFKA_MSG_F_COPY);
 *   - kc_producer_produce_wait(): the same, but on RD_KAFKA_RESP_ERR__QUEUE_FULL waits (call it
 *     without the GIL) on a condition that the delivery thread signals whenever it frees buffer
 *     space, retrying until an absolute deadline: the max.block.ms bound librdkafka lacks;
 *   - a dedicated pthread serves librdkafka's main queue (RD_KAFKA_EVENT_DR events), gathers every
 *     delivery report that is ready into one batch and hands it to a callback (which takes the GIL
 *     once per batch to complete the futures), then frees the events, lowers the in-flight count
 *     and signals waiters.
 * Every record handed to librdkafka gets exactly one delivery report; records still registered
 * when the producer is torn down are returned by kc_producer_take_all() so that the caller can
 * fail them.  No Python here: the record's objects are opaque pointers owned by the caller.
 * All symbols are prefixed kc_producer_ (every C file of csrc is linked into every extension). */
#ifndef KC_PRODUCER_CORE_H
#define KC_PRODUCER_CORE_H

#include <pthread.h>
#include <stdint.h>
#include <stddef.h>

#include "rdk.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The caller owns the node's memory; kipconsumer embeds it in the future object, which the registry
 * keeps alive (->future holds a reference) until the record's delivery report completes it. */
typedef struct kc_producer_rec_s {
    struct kc_producer_rec_s *prev, *next; /* registry of pending records */
    void *future;                          /* owned PyObject* (managed by the caller) */
    void *callback;                        /* owned PyObject* or NULL */
    int32_t key_size;                      /* -1: null */
    int32_t value_size;                    /* -1: null */
} kc_producer_rec_t;

/* One delivery report; pointers are valid only during the batch callback. */
typedef struct {
    kc_producer_rec_t *rec;
    int err; /* rd_kafka_resp_err_t */
    const char *topic;
    const char *errstr;
    int32_t partition;
    int64_t offset;
    int64_t timestamp;
    int64_t latency_us; /* since the record was enqueued; -1 if unknown */
} kc_producer_dr_t;

typedef void(kc_producer_batch_cb_t)(void *ctx, kc_producer_dr_t *items, size_t n);

typedef struct {
    int64_t in_flight;       /* enqueued records whose future is not completed yet */
    int64_t sent;            /* records accepted by librdkafka */
    int64_t delivered;       /* acknowledged */
    int64_t failed;          /* failed (any error, timeouts included) */
    int64_t timed_out;       /* failed with a timeout */
    int64_t buffer_waits;    /* send() calls that had to wait for buffer space */
    int64_t buffer_timeouts; /* ... and gave up after max.block.ms */
    int64_t dr_batches;      /* batches handed to the completion callback */
    int64_t errors;          /* client-level error events */
    int fatal;               /* a fatal error was raised (idempotence) */
    int outq_len;            /* rd_kafka_outq_len() */
} kc_producer_stats_t;

typedef struct kc_producer_s {
    rd_kafka_t *rk;
    rd_kafka_queue_t *mainq;
    pthread_t thread;
    int thread_started;
    pthread_mutex_t lock;
    pthread_cond_t cond;    /* space freed, in-flight count lowered, closing */
    kc_producer_rec_t head; /* sentinel of the registry */
    kc_producer_stats_t st;
    uint64_t space_seq; /* bumped whenever buffer space is freed */
    volatile int stop;
    int closing;
    int producing; /* kc_producer_produce() calls between registration and enqueue */
    kc_producer_batch_cb_t *on_batch;
    void *ctx;
    kc_producer_dr_t *items;
    size_t items_cap;
    char last_error[512];
    int auth_err;             /* the latest authentication / TLS failure librdkafka reported (0: none) */
    char auth_error[512];     /* its text */
    char fatal_error[512];    /* the text of librdkafka's fatal error (delivery thread only) */
    int64_t auth_at_us;       /* when (kc_now_us(), clock.h) */
    char *stats_json;         /* latest statistics JSON (statistics.interval.ms), not yet taken */
    volatile int stats_ready; /* stats_json is set: a cheap check before kc_producer_take_stats() */
} kc_producer_t;

/* Monotonic clock, microseconds. */

/* Creates the producer handle from conf (consumed on success, left to the caller on failure).
 * Enables RD_KAFKA_EVENT_DR | RD_KAFKA_EVENT_ERROR | RD_KAFKA_EVENT_STATS on conf. Returns NULL with errstr
 * filled. */
kc_producer_t *kc_producer_new(rd_kafka_conf_t *conf, char *errstr, size_t errstr_size);

/* Starts the delivery thread; returns 0 or an errno value. */
int kc_producer_start(kc_producer_t *p, kc_producer_batch_cb_t *cb, void *ctx);

/* Enqueues once. On error the record is not registered (the caller still owns it and hdrs). */
rd_kafka_resp_err_t kc_producer_produce(kc_producer_t *p, rd_kafka_topic_t *rkt, int32_t partition,
                                        const void *value, size_t value_len, const void *key, size_t key_len,
                                        int64_t timestamp, rd_kafka_headers_t *hdrs, kc_producer_rec_t *rec);

/* Like kc_producer_produce(), but waits for buffer space until deadline_us (kc_now_us(), clock.h
 * clock). Returns RD_KAFKA_RESP_ERR__QUEUE_FULL if the deadline passed and
 * RD_KAFKA_RESP_ERR__DESTROY if the producer started closing. Call without the GIL. The caller
 * waits in slices (deadline_us = end of one slice): *counted (0 on the first slice) makes one
 * send() count as one buffer wait; kc_producer_note_buffer_timeout() counts the final give-up. */
rd_kafka_resp_err_t kc_producer_produce_wait(kc_producer_t *p, rd_kafka_topic_t *rkt, int32_t partition,
                                             const void *value, size_t value_len, const void *key,
                                             size_t key_len, int64_t timestamp, rd_kafka_headers_t *hdrs,
                                             kc_producer_rec_t *rec, int64_t deadline_us, int *counted);

void kc_producer_note_buffer_timeout(kc_producer_t *p);

/* Waits until no record is in flight or deadline_us passes (KC_NO_DEADLINE, clock.h: none). Returns the
 * number still in flight. Call without the GIL. */
int64_t kc_producer_wait_idle(kc_producer_t *p, int64_t deadline_us);

/* One slice of a flush: rd_kafka_flush() (unless closing) and kc_producer_wait_idle(), both
 * bounded by until_us. Returns the number still in flight. Call without the GIL. */
int64_t kc_producer_flush_until(kc_producer_t *p, int64_t until_us);

/* Marks the producer closing and wakes every waiter; returns once no kc_producer_produce() is
 * between registering a record and handing it to librdkafka (so a purge sees every record). */
void kc_producer_set_closing(kc_producer_t *p);

/* rd_kafka_purge(QUEUE | INFLIGHT). */
rd_kafka_resp_err_t kc_producer_purge(kc_producer_t *p);

/* Stops and joins the delivery thread (after it has served every ready event). No GIL. */
void kc_producer_stop_thread(kc_producer_t *p);

/* Unregisters every record still pending and returns them as a NULL-terminated list linked by
 * ->next (the caller fails and frees them). Only after kc_producer_stop_thread(). */
kc_producer_rec_t *kc_producer_take_all(kc_producer_t *p);

/* Destroys the handle and frees p. No GIL (rd_kafka_destroy() may block). */
void kc_producer_destroy(kc_producer_t *p);

/* The latest statistics JSON the delivery thread received (malloc'd; the caller frees it), or NULL
 * if none arrived since the last call. Older documents not taken are replaced, never queued. */
char *kc_producer_take_stats(kc_producer_t *p);

void kc_producer_get_stats(kc_producer_t *p, kc_producer_stats_t *out, char *last_error,
                           size_t last_error_size);

/* 1 if librdkafka's error event (err, reason) is an authentication or TLS handshake failure: SASL or
 * SSL errors, or the connection closed inside the TLS / SASL handshake. kipconsumer/_security_errors.py
 * classifies the same way (it makes the typed error); this copy lets the delivery thread act at once. */
int kc_producer_is_auth_failure(int err, const char *reason);

/* How long an authentication failure holds: librdkafka retries a refused connection at least every
 * reconnect.backoff.max.ms (10 s by default) and reports each refusal, which renews the hold. */
#define KC_PRODUCER_AUTH_HOLD_US 10000000

/* The authentication failure that holds (0: none). On each one librdkafka reports, the delivery thread
 * latches it and purges librdkafka's queue (those records fail with it, not with _PURGE_QUEUE); while
 * it holds (KC_PRODUCER_AUTH_HOLD_US since the latest, until a record is delivered) kc_producer_produce()
 * refuses records with it, where librdkafka would retry the connection for ever while the records wait
 * for delivery.timeout.ms. Copies its text. */
int kc_producer_auth_error(kc_producer_t *p, char *buf, size_t size);

/* 1 if called on the delivery thread (completion callbacks run there). */
int kc_producer_on_dr_thread(kc_producer_t *p);

#ifdef __cplusplus
}
#endif
#endif
