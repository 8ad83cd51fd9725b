/* record_filters: which fetched records the consumer takes into its fetch buffer, and when it hands
 * buffered records out; the state these rules keep. Java's FetchCollector beside its FetchBuffer:
 * fetch_buffer.h is the queue, this is the judgement; consumer_core.c applies it (route_run per run
 * of one partition's records, kc_consumer_poll once per poll).
 *
 * Per record, in this order:
 *   1. seek guard: after the application's seek() the records continue from the seek's offset
 *      (kc_seek_guard_check); records below it before any record at or past it are librdkafka's
 *      auto.offset.reset of an offset the log does not hold, and are taken (kc_reset_after_seek);
 *   2. refetch filter: copies of offsets already returned or buffered are dropped
 *      (kc_refetched; no state: the next offset comes from kc_ps_next_offset);
 *   3. committed floor: records below the committed offset a partition was assigned at are
 *      dropped (kc_below_floor).
 * (Per poll, the rebalance barrier holds records back while the group rebalances:
 * rebalance_barrier.h.) The filter state lives in each partition's state (partition_state.h, whose
 * setters and these functions are its only writers).
 *
 * The per-record checks are static inline (route_run's loop); only the rare cases (a jump after
 * a seek, a record below the floor) call into record_filters.c, which reaches librdkafka through
 * the replaceable hooks below (the C unit tests substitute a fake clock, seek and watermarks).
 * Not thread-safe: called by whoever holds the consumer's owner lock. No Python. */
#ifndef KC_RECORD_FILTERS_H
#define KC_RECORD_FILTERS_H

#include <stdatomic.h>
#include <stdint.h>
#include "rdk.h"

#ifndef KC_POSITION_UNKNOWN
#define KC_POSITION_UNKNOWN INT64_MIN /* no offset (the same definition as fetch_buffer.h's) */
#endif

/* Seeks re-issued for one seek() before the guard takes whatever arrives (kc_seek_guard_check),
 * and how long after the seek it watches (a pending start-offset lookup of librdkafka's lands
 * within a request's round trip; retried requests take longer) */
#define KC_SEEK_RETRIES  4
#define KC_SEEK_GUARD_MS 30000

/* A partition's filter state (kc_partition_t.filters, partition_state.h). */
typedef struct kc_partition_filters {
    int64_t floor;         /* committed offset when the partition was assigned (Java's starting
                              position): records below it are not taken (kc_below_floor);
                              KC_POSITION_UNKNOWN if none was committed or it no longer applies */
    int64_t seek_target;   /* offset of the last seek() while the seek guard watches the partition;
                              KC_POSITION_UNKNOWN otherwise */
    int64_t seek_seen;     /* offset of the last jump that made the guard seek again */
    int64_t seek_until_ms; /* the guard watches the partition until then (kc_filters_now_ms clock) */
    int seek_retries;      /* seeks re-issued since the application's seek */
    uint64_t seek_batch;   /* the consumer's batch_seq when the seek was last re-issued */
    int64_t sought;        /* offset of the last seek() while no record of the partition was taken
                              since; KC_POSITION_UNKNOWN otherwise (kc_reset_after_seek) */
} kc_partition_filters_t;

/* The clock of the seek guard's window (kc_now_ms; tests substitute a fake clock). */
extern int64_t (*kc_filters_now_ms)(void);
/* Seeks (topic, partition) to offset asynchronously: 0, or -1 if librdkafka refused
 * (rd_kafka_seek_partitions; tests substitute their own). */
extern int (*kc_filters_seek)(rd_kafka_t *rk, const char *topic, int32_t partition, int64_t offset);
/* The cached watermarks (rd_kafka_get_watermark_offsets; tests substitute their own). */
extern rd_kafka_resp_err_t (*kc_filters_watermarks)(rd_kafka_t *rk, const char *topic, int32_t partition,
                                                    int64_t *low, int64_t *high);

static inline void kc_filters_init(kc_partition_filters_t *f) {
    f->floor = KC_POSITION_UNKNOWN;
    f->seek_target = KC_POSITION_UNKNOWN;
    f->seek_seen = KC_POSITION_UNKNOWN;
    f->seek_until_ms = 0;
    f->seek_retries = 0;
    f->seek_batch = 0;
    f->sought = KC_POSITION_UNKNOWN;
}

/* ---- 1. the seek guard ---------------------------------------------------------------------- */

typedef enum {
    KC_SEEK_GUARD_DROP = 0,   /* drop the record (the rest of a batch the guard sought away from) */
    KC_SEEK_GUARD_TAKE = 1,   /* take it (as far as the seek guard is concerned) */
    KC_SEEK_GUARD_RESEEK = 2, /* drop it: the guard has just sought to the expected offset again */
} kc_seek_guard_verdict_t;

/* Starts the seek guard after the application sought the partition to `offset` (>= 0): the next
 * records taken for it must start there. */
void kc_seek_guard_start(kc_partition_filters_t *f, int64_t offset);

static inline int kc_seek_guard_active(const kc_partition_filters_t *f) {
    return f->seek_target != KC_POSITION_UNKNOWN;
}

/* A record past the expected offset while the guard is active (the rare half of
 * kc_seek_guard_check). */
kc_seek_guard_verdict_t kc_seek_guard_jump(kc_partition_filters_t *f, rd_kafka_t *rk, const char *topic,
                                           int32_t partition, int64_t offset, int64_t expect,
                                           uint64_t batch_seq);

/* The seek guard: after the application's seek to T, a partition's records must continue from T
 * without a jump. librdkafka's seek does not always win: right after assign() the partition's start
 * offset is still being resolved (committed offset, then auto.offset.reset's ListOffsets), and when
 * that lookup's answer lands after the seek, librdkafka moves the fetch position there (before the
 * first record of the seek, or after some), with no version barrier that would stop the records
 * (what that did before the guard: docs/reliability.md, appendix). For
 * KC_SEEK_GUARD_MS after the seek, a record past the next expected offset E makes the guard seek to
 * E again (asynchronously: the version barrier drops what is still queued of that fetch) and drop
 * the records of the batch it came in (they are of that fetch too). If the fetch after the re-seek
 * jumps to the same offset again, E..offset-1 is a gap in the log (compacted, a transaction marker,
 * aborted records) and the records are taken. After KC_SEEK_RETRIES re-seeks, or once the window
 * is over, records are taken as they come (and the guard stops). `expect` is E
 * (kc_ps_next_offset, as the caller advances it); `batch_seq` numbers the batch the record came
 * in. A record below E is a jump too while nothing was taken since the seek (f->sought: the
 * lookup overtook a seek back, or librdkafka reset an offset outside the log: seeking again
 * tells which); otherwise it is left to the refetch filter. Only while kc_seek_guard_active(f). */
static inline kc_seek_guard_verdict_t kc_seek_guard_check(kc_partition_filters_t *f, rd_kafka_t *rk,
                                                          const char *topic, int32_t partition,
                                                          int64_t offset, int64_t expect,
                                                          uint64_t batch_seq) {
    if (expect == KC_POSITION_UNKNOWN)
        expect = f->seek_target;
    if (f->seek_batch == batch_seq && f->seek_retries)
        return KC_SEEK_GUARD_DROP;
    if (offset == expect || (offset < expect && f->sought == KC_POSITION_UNKNOWN))
        return KC_SEEK_GUARD_TAKE;
    /* a jump forward, or back below the seek's offset before anything of it came */
    return kc_seek_guard_jump(f, rk, topic, partition, offset, expect, batch_seq);
}

/* Notes the application's seek() to `offset` (>= 0; KC_POSITION_UNKNOWN for BEGINNING/END): until
 * a record of the partition is taken, kc_reset_after_seek watches for librdkafka's reset. */
static inline void kc_seek_noted(kc_partition_filters_t *f, int64_t offset) {
    f->sought = offset;
}

/* True if `offset` is below the offset of the application's last seek() and no record of the
 * partition was taken since (the seek guard, while active, has sought there again once and the same
 * offset came back): librdkafka found the seek's offset outside the log (past its end, or below its
 * start) and reset the position by auto.offset.reset, as Java's consumer does. The record is taken
 * and the position follows the reset (a copy of a returned record cannot be below the seek's
 * offset: nothing was returned since). */
static inline int kc_reset_after_seek(const kc_partition_filters_t *f, int64_t offset) {
    return f->sought != KC_POSITION_UNKNOWN && offset < f->sought;
}

/* ---- 2. the refetch filter ------------------------------------------------------------------ */

/* True if `offset` is a copy of a record already returned or buffered: below `next`
 * (kc_ps_next_offset). librdkafka now and then restarts a partition's fetcher at an older offset
 * and fetches a range again (seen under chaos faults); a partition's records stay strictly
 * increasing within an assignment. */
static inline int kc_refetched(int64_t offset, int64_t next) {
    return next != KC_POSITION_UNKNOWN && offset < next;
}

/* ---- 3. the committed floor ----------------------------------------------------------------- */

/* The rare half of kc_below_floor: 1 if the floor still applies; 0 (and the floor is given up) if
 * the log no longer reaches it. */
int kc_floor_holds(kc_partition_filters_t *f, rd_kafka_t *rk, const char *topic, int32_t partition);

/* True if `offset`, below the partition's floor (the committed offset when it was assigned), must
 * not be taken: a fetch that started below the committed offset (seen under chaos faults: a newly
 * assigned partition's first records came from offset 0 although its committed offset was in the
 * thousands, and the fetch restarted at the committed offset later). Java starts a newly assigned
 * partition at its committed offset and discards fetched data of other positions. The floor is
 * given up if the log no longer reaches it (the high watermark is below it: the commit points past
 * a truncated or recreated log, or past its end): librdkafka then resets the position by
 * auto.offset.reset, and those records are the ones to read. */
static inline int kc_below_floor(kc_partition_filters_t *f, rd_kafka_t *rk, const char *topic,
                                 int32_t partition, int64_t offset) {
    return f->floor != KC_POSITION_UNKNOWN && offset < f->floor && kc_floor_holds(f, rk, topic, partition);
}

#endif
