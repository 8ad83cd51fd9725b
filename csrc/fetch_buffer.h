/* fetch_buffer: per-partition FIFO of fetched librdkafka messages and the KIP-41 drain; a queue and
 * nothing else (Java's FetchBuffer): it holds records and hands them out, it keeps no position, no pause
 * and no filter state (partition_state.h owns those for the consumer).
 *
 * The consumer moves messages from librdkafka's fetch queue into this buffer, about
 * `target` per partition (the prefetch rule), and poll() drains up to
 * max.poll.records of them into one batch:
 *   - KC_FAIRNESS_PROPORTIONAL: max.poll.records is shared evenly over the partitions
 *     that have records buffered (and are not held back); what a partition cannot use goes
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

typedef enum { KC_FAIRNESS_PROPORTIONAL = 0, KC_FAIRNESS_GREEDY = 1 } kc_fairness_t;

#ifndef KC_POSITION_UNKNOWN
#define KC_POSITION_UNKNOWN INT64_MIN /* no offset (also defined by record_filters.h) */
#endif

/* One partition's queue. An owner that keeps more per partition (partition_state.h) makes this the
 * first member of its own struct and has the buffer allocate that (kc_fb_init_owned). */
typedef struct kc_fb_part {
    char *topic;
    int32_t partition;
    rd_kafka_message_t **ring; /* FIFO ring buffer of owned messages */
    uint32_t *ring_bytes;      /* key + value bytes of ring[i], noted when pushed: a drain takes
                                  records out without reading the (by then cold) messages (a
                                  fetched message is below receive.message.max.bytes < 2^31) */
    size_t ring_cap, head, len;
    size_t bytes; /* key + value bytes buffered */
    int held;     /* the drain skips the partition (its owner holds its records back: paused);
                     written by the owner only (kc_ps_set_paused) */
    size_t take;  /* scratch: records to take in the current drain */
} kc_fb_part_t;

typedef struct kc_fetch_buffer {
    kc_fb_part_t **parts; /* assigned partitions, in assignment order */
    size_t n, cap;
    size_t cursor;         /* rotation point of the next drain */
    size_t records, bytes; /* totals over all partitions */
    size_t part_size;      /* bytes allocated (zeroed) per partition: sizeof(kc_fb_part_t) or the owner's */
    /* Called by a drain for each partition it took records from, with the offset after the last one
     * taken (the owner advances its position), or NULL. */
    void (*on_taken)(kc_fb_part_t *p, int64_t next);
} kc_fetch_buffer_t;

/* Releases one buffered message (rd_kafka_message_destroy; tests substitute their own). */
extern void (*kc_fb_msg_destroy)(rd_kafka_message_t *m);

void kc_fb_init(kc_fetch_buffer_t *fb);
/* As kc_fb_init, for an owner whose per-partition struct (part_size bytes) starts with a
 * kc_fb_part_t; `on_taken` as in kc_fetch_buffer_t. */
void kc_fb_init_owned(kc_fetch_buffer_t *fb, size_t part_size,
                      void (*on_taken)(kc_fb_part_t *p, int64_t next));
/* Destroys every partition (and its buffered messages). */
void kc_fb_destroy(kc_fetch_buffer_t *fb);

kc_fb_part_t *kc_fb_find(const kc_fetch_buffer_t *fb, const char *topic, int32_t partition);
/* Adds a partition (or returns the existing one); NULL on out of memory. A new one's bytes past the
 * kc_fb_part_t are zero. */
kc_fb_part_t *kc_fb_add(kc_fetch_buffer_t *fb, const char *topic, int32_t partition);
/* Removes a partition, destroying its buffered messages. Returns 1 if found. */
int kc_fb_remove(kc_fetch_buffer_t *fb, const char *topic, int32_t partition);

/* Appends messages (ownership moves to the buffer). Messages must belong to `p`, in
 * offset order. Returns 0, or -1 on out of memory (the messages are then destroyed). */
int kc_fb_push(kc_fetch_buffer_t *fb, kc_fb_part_t *p, rd_kafka_message_t **msgs, size_t n);
/* Destroys every buffered message of `p`. */
void kc_fb_purge(kc_fetch_buffer_t *fb, kc_fb_part_t *p);

/* Prefetch target: records a partition should hold so the next poll can be served
 * from the buffer: twice its fair share of max.poll.records, at least `floor`. */
size_t kc_fb_target(const kc_fetch_buffer_t *fb, size_t max_poll_records, size_t floor);

/* Moves up to `max` records from partitions not held into `out` (ownership moves to the
 * caller) following `mode`, and tells fb->on_taken of each partition it took from. Returns the
 * number of records written. */
size_t kc_fb_drain(kc_fetch_buffer_t *fb, size_t max, kc_fairness_t mode, rd_kafka_message_t **out);

/* Offset of the oldest buffered record of p, or KC_POSITION_UNKNOWN if none. */
int64_t kc_fb_first_offset(const kc_fb_part_t *p);
/* Offset of the newest buffered record of p, or KC_POSITION_UNKNOWN if none. */
int64_t kc_fb_last_offset(const kc_fb_part_t *p);

/* Records buffered in partitions not held (what a drain could return now). */
size_t kc_fb_drainable(const kc_fetch_buffer_t *fb);

#endif
