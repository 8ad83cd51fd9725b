/* partition_state: each assigned partition's consumer state and its only writers (Java's
 * SubscriptionState beside its FetchBuffer): the position poll() has reached, the offset last handed
 * to offset storage, pause, whether librdkafka's application position can be trusted, librdkafka's
 * fetch stop and restart, and the record filters' state (record_filters.h). The fetch buffer
 * (fetch_buffer.h) is the queue; a kc_partition_t starts with its kc_fb_part_t and the buffer
 * allocates it (kc_ps_init_buffer), so one lookup finds both.
 *
 * Every field below `q` is written by the functions of this header (and by record_filters.h's, on
 * `filters`) only: consumer_core.c and the Cython layer call them and read the fields. Not
 * thread-safe: whoever holds the consumer's owner lock calls it. No Python. */
#ifndef KC_PARTITION_STATE_H
#define KC_PARTITION_STATE_H

#include <stdint.h>
#include "rdk.h"
#include "fetch_buffer.h"
#include "record_filters.h"

typedef struct kc_partition {
    kc_fb_part_t q;                 /* first: the partition's queue in the fetch buffer (topic, partition,
                                       records; q.held is the pause) */
    int64_t position;               /* next offset poll() will return; KC_POSITION_UNKNOWN if none returned */
    int64_t stored;                 /* last position handed to offset storage */
    int app_pos_trusted;            /* librdkafka's application position of p counts only records that
                                       were buffered here or that librdkafka skipped (control records,
                                       aborted ones): set when records are buffered, cleared by a purge
                                       and by a record the seek guard drops (kc_ps_records_routed) */
    rd_kafka_queue_t *queue;        /* librdkafka partition queue (forwarded to the consumer's fetch queue) */
    int fetch_stopped;              /* librdkafka stopped fetching p: auto.offset.reset=none and no offset to
                                       start from (it reported _AUTO_OFFSET_RESET); until a seek() restarts it */
    int64_t stopped_offset;         /* the position the broker refused then (out of range), or < 0: none was
                                       committed */
    int fetch_restarted;            /* a seek() restarted p's fetcher at an offset (kc_ps_fetch_restarted) */
    int refetch_forward;            /* the fetcher was restarted: forward `queue` again until a record of p
                                       comes */
    kc_partition_filters_t filters; /* record_filters.h */
    int stall_paused;               /* librdkafka's fetcher paused by the stall thread (stall_pause.h), not
                                       by the application: resumed by the next poll() */
} kc_partition_t;

/* Sets up `fb` to hold kc_partition_t (its drains advance the positions). */
void kc_ps_init_buffer(kc_fetch_buffer_t *fb);

/* The partition, or NULL if not assigned (fb set up by kc_ps_init_buffer, as kc_ps_at's). */
static inline kc_partition_t *kc_ps_find(const kc_fetch_buffer_t *fb, const char *topic, int32_t partition) {
    return (kc_partition_t *)kc_fb_find(fb, topic, partition);
}
/* The i-th assigned partition (i < fb->n). */
static inline kc_partition_t *kc_ps_at(const kc_fetch_buffer_t *fb, size_t i) {
    return (kc_partition_t *)fb->parts[i];
}
/* Adds a partition with no position, no floor, unpaused (or returns the existing one); NULL on OOM. */
kc_partition_t *kc_ps_add(kc_fetch_buffer_t *fb, const char *topic, int32_t partition);
/* Removes a partition: its buffered records and its librdkafka queue. Returns 1 if found. */
int kc_ps_remove(kc_fetch_buffer_t *fb, const char *topic, int32_t partition);
/* Removes every partition (kc_ps_remove each); the buffer stays usable. */
void kc_ps_remove_all(kc_fetch_buffer_t *fb);

/* p's librdkafka partition queue (owned by p from now on: kc_ps_remove destroys it). */
static inline void kc_ps_set_queue(kc_partition_t *p, rd_kafka_queue_t *queue) {
    p->queue = queue;
}

static inline int kc_ps_paused(const kc_partition_t *p) {
    return p->q.held;
}
/* The application paused (1) or resumed (0) p: a drain skips a paused partition's records. The
 * application decided: a stall pause of p is forgotten (its resume leaves p alone). */
void kc_ps_set_paused(kc_partition_t *p, int paused);
/* The stall thread paused (1) librdkafka's fetcher of p, or its resume is done (0) (stall_pause.h). */
static inline void kc_ps_set_stall_paused(kc_partition_t *p, int on) {
    p->stall_paused = on;
}

/* Destroys p's buffered records (after a seek, revoke or lost assignment): librdkafka's position
 * may count records that were never returned now (p is not trusted until records are buffered). */
void kc_ps_purge(kc_fetch_buffer_t *fb, kc_partition_t *p);
void kc_ps_purge_all(kc_fetch_buffer_t *fb);

/* Offset of the oldest buffered record of p, or KC_POSITION_UNKNOWN if none. */
static inline int64_t kc_ps_first_offset(const kc_partition_t *p) {
    return kc_fb_first_offset(&p->q);
}

/* Lowest offset p takes next: past what poll() returned and past what is buffered, or
 * KC_POSITION_UNKNOWN if neither is known. librdkafka now and then restarts a partition's
 * fetcher at an older offset and fetches a range again that is still buffered here (seen
 * under chaos faults); the copies below this are dropped, so a partition's records stay
 * strictly increasing within an assignment. */
static inline int64_t kc_ps_next_offset(const kc_partition_t *p) {
    int64_t last = kc_fb_last_offset(&p->q);
    if (last == KC_POSITION_UNKNOWN)
        return p->position;
    return last + 1 > p->position ? last + 1 : p->position; /* KC_POSITION_UNKNOWN is INT64_MIN */
}

/* The stall thread sought librdkafka's fetcher of p to `offset`, its first buffered record, to release
 * them (stall_pause.h): the buffer forgets them (kc_ps_purge), the position stays, and the seek guard
 * watches the refetch as after the application's seek. */
void kc_ps_refetch_from(kc_fetch_buffer_t *fb, kc_partition_t *p, int64_t offset);

/* Seeks librdkafka's fetcher of p to where it resumes anyway, past what the buffer holds, after a
 * resume: librdkafka's resume does not wake its broker thread, which then fetches only when its idle
 * wait (up to 1 s) ends; a fetcher that starts again does wake it. Nothing if p has no position yet
 * (its start offset may still be looked up) or its fetcher stopped. A seek guard still waiting for
 * the refetch's first record watches from now. Returns 1 if sought. */
int kc_ps_wake_fetcher(rd_kafka_t *rk, kc_partition_t *p);

/* The application's seek() of p to `offset` (KC_POSITION_UNKNOWN-like negative values: BEGINNING /
 * END): the buffer is purged, the position is the offset (or unknown), the committed floor no
 * longer applies (the application chose where to read from), and the seek guard watches the next
 * records (record_filters.h). */
void kc_ps_seek(kc_fetch_buffer_t *fb, kc_partition_t *p, int64_t offset);

/* The committed offset a newly assigned p starts from (Java's starting position): records below it
 * are not taken (kc_below_floor). Only while nothing of p was returned or buffered; returns 1 if
 * set. */
int kc_ps_start_floor(kc_partition_t *p, int64_t committed);

/* librdkafka reset p by auto.offset.reset after a seek outside the log: its records continue at
 * `offset`, the position follows. */
void kc_ps_reset_after_seek(kc_partition_t *p, int64_t offset);

/* The consumer routed a run of p's fetched records: `kept` of them were buffered, `reseeked` if the
 * seek guard dropped any (librdkafka's position moved past a record until the guard's new seek
 * resets it). p's queue no longer needs forwarding (a record came). */
void kc_ps_records_routed(kc_partition_t *p, size_t kept, int reseeked);

/* The drain took records of p up to `next` (exclusive): the position moves there. */
static inline void kc_ps_drained(kc_partition_t *p, int64_t next) {
    p->position = next;
}

/* Moves p's position to `offset` if it is past it (librdkafka skipped a transaction marker or
 * aborted records after the last returned record; kc_consumer_step_over_markers decides). Returns
 * 1 if the position moved. */
int kc_ps_step_to(kc_partition_t *p, int64_t offset);

/* The position was handed to offset storage. */
static inline void kc_ps_mark_stored(kc_partition_t *p) {
    p->stored = p->position;
}

/* librdkafka reported _AUTO_OFFSET_RESET for p with `offset` (< 0: no committed offset to start
 * from; else the position the broker refused): p's fetch is stopped if the report is about p's
 * current state (no offset: not once a seek() restarted p at an offset, a report queued before
 * that is stale; refused: the current position). Returns 1 if p is marked stopped. */
int kc_ps_fetch_stop_reported(kc_partition_t *p, int64_t offset);

/* A seek() restarted librdkafka's fetcher of p (stopped or not: an EAGER reassignment restarts
 * every fetcher, `seeked` only for the one the seek was about): the queue is forwarded again until
 * a record of p comes. */
void kc_ps_fetch_restarted(kc_partition_t *p, int seeked);

#endif
