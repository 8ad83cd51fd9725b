/* The share consumer part of librdkafka's C API (KIP-932), declared apart from rdk.h.
 *
 * librdkafka exports these from 2.15.0 on (KC_RDK_SHARE_MIN_VERSION), later than the oldest
 * librdkafka kipconsumer runs on (KC_RDK_MIN_VERSION in rdk.h).  Only the extension
 * kipconsumer._share uses them, so only that module fails to import on an older librdkafka;
 * kipconsumer.share checks the version first and raises ShareGroupsUnsupportedError.
 * Signatures as in librdkafka's src/rdkafka.h ("Share consumer (Queues for Kafka)"). */
#ifndef KC_RDK_SHARE_H
#define KC_RDK_SHARE_H

#include "rdk.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KC_RDK_SHARE_MIN_VERSION 0x020f00ff

typedef struct rd_kafka_share_s rd_kafka_share_t;
typedef struct rd_kafka_messages_s rd_kafka_messages_t;

typedef enum rd_kafka_share_AcknowledgeType_s {
    RD_KAFKA_SHARE_ACKNOWLEDGE_TYPE_ACCEPT = 1,
    RD_KAFKA_SHARE_ACKNOWLEDGE_TYPE_RELEASE = 2,
    RD_KAFKA_SHARE_ACKNOWLEDGE_TYPE_REJECT = 3
} rd_kafka_share_AcknowledgeType_t;

size_t rd_kafka_messages_count(const rd_kafka_messages_t *messages);
rd_kafka_message_t *rd_kafka_messages_get(const rd_kafka_messages_t *messages, size_t index);
void rd_kafka_messages_destroy(rd_kafka_messages_t *messages);
int16_t rd_kafka_message_delivery_count(const rd_kafka_message_t *rkmessage);

rd_kafka_share_t *rd_kafka_share_consumer_new(rd_kafka_conf_t *conf, char *errstr, size_t errstr_size);
rd_kafka_resp_err_t rd_kafka_share_subscribe(rd_kafka_share_t *rkshare,
                                             const rd_kafka_topic_partition_list_t *topics);
rd_kafka_resp_err_t rd_kafka_share_unsubscribe(rd_kafka_share_t *rkshare);
rd_kafka_error_t *rd_kafka_share_poll(rd_kafka_share_t *rkshare, int timeout_ms,
                                      rd_kafka_messages_t **rkmessages);
rd_kafka_resp_err_t rd_kafka_share_acknowledge_type(rd_kafka_share_t *rkshare,
                                                    const rd_kafka_message_t *rkmessage,
                                                    rd_kafka_share_AcknowledgeType_t type);
rd_kafka_resp_err_t rd_kafka_share_acknowledge_offset(rd_kafka_share_t *rkshare, const char *topic,
                                                      int32_t partition, int64_t offset,
                                                      rd_kafka_share_AcknowledgeType_t type);
rd_kafka_error_t *rd_kafka_share_commit_async(rd_kafka_share_t *rkshare);
rd_kafka_error_t *rd_kafka_share_commit_sync(rd_kafka_share_t *rkshare, int timeout_ms,
                                             rd_kafka_topic_partition_list_t **partitions);
rd_kafka_error_t *rd_kafka_share_consumer_close(rd_kafka_share_t *rkshare);
rd_kafka_error_t *rd_kafka_share_destroy(rd_kafka_share_t *rkshare);
rd_kafka_error_t *rd_kafka_share_destroy_flags(rd_kafka_share_t *rkshare, int flags);

/* acknowledgement commit results (the callback runs on the thread in rd_kafka_share_poll(),
 * commit_sync() or consumer_close(); the list is librdkafka's, valid during the callback only; the
 * counts are declared int: librdkafka releases have returned int or size_t, and an int read of
 * either is right for any count below 2^31) */
typedef struct rd_kafka_share_partition_offsets_list_s rd_kafka_share_partition_offsets_list_t;
typedef struct rd_kafka_share_partition_offsets_s rd_kafka_share_partition_offsets_t;
int rd_kafka_share_partition_offsets_list_count(const rd_kafka_share_partition_offsets_list_t *list);
const rd_kafka_share_partition_offsets_t *
rd_kafka_share_partition_offsets_list_get(const rd_kafka_share_partition_offsets_list_t *list, size_t idx);
const rd_kafka_topic_partition_t *
rd_kafka_share_partition_offsets_partition(const rd_kafka_share_partition_offsets_t *entry);
const int64_t *rd_kafka_share_partition_offsets_offsets(const rd_kafka_share_partition_offsets_t *entry);
int rd_kafka_share_partition_offsets_offsets_cnt(const rd_kafka_share_partition_offsets_t *entry);
rd_kafka_error_t *rd_kafka_share_set_acknowledgement_commit_cb(
    rd_kafka_share_t *rkshare,
    void (*cb)(rd_kafka_share_t *rkshare, rd_kafka_share_partition_offsets_list_t *partitions,
               rd_kafka_resp_err_t err, void *opaque),
    void *opaque);

/* the mock cluster's share groups (rdkafka_mock.h); settings apply to every share group */
void rd_kafka_mock_sharegroup_set_session_timeout(rd_kafka_mock_cluster_t *mcluster, int session_timeout_ms);
void rd_kafka_mock_sharegroup_set_heartbeat_interval(rd_kafka_mock_cluster_t *mcluster,
                                                     int heartbeat_interval_ms);
void rd_kafka_mock_sharegroup_set_max_delivery_attempts(rd_kafka_mock_cluster_t *mcluster, int max_attempts);
void rd_kafka_mock_sharegroup_set_record_lock_duration(rd_kafka_mock_cluster_t *mcluster,
                                                       int lock_duration_ms);
void rd_kafka_mock_sharegroup_set_auto_offset_reset(rd_kafka_mock_cluster_t *mcluster, int auto_offset_reset);

#ifdef __cplusplus
}
#endif
#endif
