/* fetch_buffer: per-partition FIFO of fetched librdkafka messages and the KIP-41 drain.
 *
 * The consumer moves messages from librdkafka's fetch queue into this buffer, about
 * `target` per partition (the prefetch rule), and poll() drains up to
 * max.poll.records of them into one batch:
 *   - KC_FAIRNESS_PROPORTIONAL: max.poll.records is shared evenly over the partitions
 *     that have records buffered (and are not paused); what a partition cannot use goes
 *     to the others; the remainder rotates between polls.
 *   - KC_FAIRNESS_GREEDY (KIP-41's round robin): drain one partition as far as the cap
 *     allows, then the next; the next poll starts after the last partition served.
 * Records of one partition leave in offset order and contiguously in the batch.
 * Not thread-safe: the consumer calls it from the polling thread only. No Python. */
#ifndef KC_FETCH_BUFFER_H
#define KC_FETCH_BUFFER_H

#include <stddef.h>
#include <stdint.h>
#include "rdk.h"
#include "record_filters.h"

typedef enum { KC_FAIRNESS_PROPORTIONAL = 0, KC_FAIRNESS_GREEDY = 1 } kc_fairness_t;

#ifndef KC_POSITION_UNKNOWN
#define KC_POSITION_UNKNOWN INT64_MIN /* no offset (also defined by record_filters.h) */
#endif

typedef struct kc_partition {
    char *topic;
    int32_t partition;
    rd_kafka_message_t **ring; /* FIFO ring buffer of owned messages */
    uint32_t *ring_bytes;      /* key + value bytes of ring[i], noted when pushed: a drain takes
                                  records out without reading the (by then cold) messages (a
                                  fetched message is below receive.message.max.bytes < 2^31) */
    size_t ring_cap, head, len;
    size_t bytes; /* key + value bytes buffered */
    int paused;
    int64_t position;        /* next offset poll() will return; KC_POSITION_UNKNOWN if none returned */
    int64_t stored;          /* last position handed to offset storage */
    int app_pos_trusted;     /* librdkafka's application position of p counts only records that
                                were buffered here or that librdkafka skipped (control records,
                                aborted ones): set when records are buffered, cleared by a purge
                                and by a record the seek guard drops (kc_consumer_step_over_markers) */
    rd_kafka_queue_t *queue; /* librdkafka partition queue (forwarded to the consumer's fetch queue) */
    int fetch_stopped;       /* librdkafka stopped fetching p: auto.offset.reset=none and no offset to
                                start from (it reported _AUTO_OFFSET_RESET); until a seek() restarts it */
    int64_t stopped_offset;  /* the position the broker refused then (out of range), or < 0: none was
                                committed */
    int fetch_restarted;     /* a seek() restarted p's fetcher at an offset (kc_consumer_fetch_restarted) */
    int refetch_forward;     /* the fetcher was restarted (kc_consumer_fetch_restarted): forward
                                `queue` again until a record of p comes */
    size_t take;             /* scratch: records to take in the current drain */
    /* Not the queue's: the state of the record filters (record_filters.h) that decide what is
     * pushed here; the buffer only initialises it. */
    kc_partition_filters_t filters;
} kc_partition_t;

typedef struct kc_fetch_buffer {
    kc_partition_t **parts; /* assigned partitions, in assignment order */
    size_t n, cap;
    size_t cursor;         /* rotation point of the next drain */
    size_t records, bytes; /* totals over all partitions */
} kc_fetch_buffer_t;

/* Releases one buffered message (rd_kafka_message_destroy; tests substitute their own). */
extern void (*kc_fb_msg_destroy)(rd_kafka_message_t *m);

void kc_fb_init(kc_fetch_buffer_t *fb);
/* Destroys every partition (and its buffered messages and queue). */
void kc_fb_destroy(kc_fetch_buffer_t *fb);

kc_partition_t *kc_fb_find(const kc_fetch_buffer_t *fb, const char *topic, int32_t partition);
/* Adds a partition (or returns the existing one); NULL on out of memory. */
kc_partition_t *kc_fb_add(kc_fetch_buffer_t *fb, const char *topic, int32_t partition);
/* Removes a partition, destroying its buffered messages and its queue. Returns 1 if found. */
int kc_fb_remove(kc_fetch_buffer_t *fb, const char *topic, int32_t partition);

/* Appends messages (ownership moves to the buffer). Messages must belong to `p`, in
 * offset order. Returns 0, or -1 on out of memory (the messages are then destroyed). */
int kc_fb_push(kc_fetch_buffer_t *fb, kc_partition_t *p, rd_kafka_message_t **msgs, size_t n);
/* Destroys every buffered message of `p` (after a seek, revoke or lost assignment). */
void kc_fb_purge(kc_fetch_buffer_t *fb, kc_partition_t *p);
void kc_fb_purge_all(kc_fetch_buffer_t *fb);

/* Prefetch target: records a partition should hold so the next poll can be served
 * from the buffer: twice its fair share of max.poll.records, at least `floor`. */
size_t kc_fb_target(const kc_fetch_buffer_t *fb, size_t max_poll_records, size_t floor);

/* Moves up to `max` records from unpaused partitions into `out` (ownership moves to the
 * caller) following `mode`, and advances each drained partition's position past the
 * last record taken. Returns the number of records written. */
size_t kc_fb_drain(kc_fetch_buffer_t *fb, size_t max, kc_fairness_t mode, rd_kafka_message_t **out);

/* Offset of the oldest buffered record of p, or KC_POSITION_UNKNOWN if none. */
int64_t kc_fb_first_offset(const kc_partition_t *p);
/* Lowest offset p takes next: past what poll() returned and past what is buffered, or
 * KC_POSITION_UNKNOWN if neither is known. librdkafka now and then restarts a partition's
 * fetcher at an older offset and fetches a range again that is still buffered here (seen
 * under chaos faults); the copies below this are dropped, so a partition's records stay
 * strictly increasing within an assignment. */
int64_t kc_fb_next_offset(const kc_partition_t *p);

/* Records buffered in unpaused partitions (what a drain could return now). */
size_t kc_fb_drainable(const kc_fetch_buffer_t *fb);

#endif
