/* record_filters: see record_filters.h. */
#include "record_filters.h"

#include "poll_timer.h"

static int64_t now_ms(void) {
    return kc_now_ms();
}

static int seek_rdk(rd_kafka_t *rk, const char *topic, int32_t partition, int64_t offset) {
    rd_kafka_topic_partition_list_t *one = rd_kafka_topic_partition_list_new(1);
    if (!one)
        return -1;
    rd_kafka_topic_partition_list_add(one, topic, partition)->offset = offset;
    rd_kafka_error_t *err = rd_kafka_seek_partitions(rk, one, 0);
    rd_kafka_topic_partition_list_destroy(one);
    if (err) {
        rd_kafka_error_destroy(err);
        return -1;
    }
    return 0;
}

int64_t (*kc_filters_now_ms)(void) = now_ms;
int (*kc_filters_seek)(rd_kafka_t *rk, const char *topic, int32_t partition, int64_t offset) = seek_rdk;
rd_kafka_resp_err_t (*kc_filters_watermarks)(rd_kafka_t *rk, const char *topic, int32_t partition,
                                             int64_t *low, int64_t *high) = rd_kafka_get_watermark_offsets;

void kc_seek_guard_start(kc_partition_filters_t *f, int64_t offset) {
    f->seek_target = offset;
    f->seek_seen = KC_POSITION_UNKNOWN;
    f->seek_retries = 0;
    f->seek_batch = 0;
    f->seek_until_ms = kc_filters_now_ms() + KC_SEEK_GUARD_MS;
}

static void seek_guard_done(kc_partition_filters_t *f) {
    f->seek_target = KC_POSITION_UNKNOWN;
    f->seek_seen = KC_POSITION_UNKNOWN;
    f->seek_retries = 0;
}

kc_seek_guard_verdict_t kc_seek_guard_jump(kc_partition_filters_t *f, rd_kafka_t *rk, const char *topic,
                                           int32_t partition, int64_t offset, int64_t expect,
                                           uint64_t batch_seq) {
    int64_t lo = -1, hi = -1;
    /* back below the seek's offset, which the log does not hold: librdkafka's auto.offset.reset
     * (kc_reset_after_seek), no need to seek there again */
    int outside = offset < expect && kc_filters_watermarks(rk, topic, partition, &lo, &hi) == 0 && hi >= 0 &&
                  (f->sought > hi || f->sought < lo);
    if (outside || f->seek_seen == offset || f->seek_retries >= KC_SEEK_RETRIES ||
        kc_filters_now_ms() > f->seek_until_ms) {
        seek_guard_done(f);
        return KC_SEEK_GUARD_TAKE;
    }
    if (kc_filters_seek(rk, topic, partition, expect) != 0) {
        seek_guard_done(f);
        return KC_SEEK_GUARD_TAKE;
    }
    f->seek_seen = offset;
    f->seek_retries++;
    f->seek_batch = batch_seq;
    return KC_SEEK_GUARD_RESEEK;
}

int kc_floor_holds(kc_partition_filters_t *f, rd_kafka_t *rk, const char *topic, int32_t partition) {
    int64_t lo = -1, hi = -1;
    if (kc_filters_watermarks(rk, topic, partition, &lo, &hi) == RD_KAFKA_RESP_ERR_NO_ERROR && hi >= 0 &&
        hi < f->floor) {
        f->floor = KC_POSITION_UNKNOWN;
        return 0;
    }
    return 1;
}
