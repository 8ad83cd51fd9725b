# librdkafka's share consumer API (KIP-932), declared through csrc/rdk_share.h (which checks the loaded
# librdkafka has it); cimported by _share.pyx.
from libc.stdint cimport int16_t, int32_t, int64_t

from kipconsumer._rdk cimport *


cdef extern from "rdk_share.h" nogil:
    int KC_RDK_SHARE_MIN_VERSION
    ctypedef struct rd_kafka_share_t:
        pass
    ctypedef struct rd_kafka_messages_t:
        pass
    ctypedef enum rd_kafka_share_AcknowledgeType_t:
        RD_KAFKA_SHARE_ACKNOWLEDGE_TYPE_ACCEPT
        RD_KAFKA_SHARE_ACKNOWLEDGE_TYPE_RELEASE
        RD_KAFKA_SHARE_ACKNOWLEDGE_TYPE_REJECT
    size_t rd_kafka_messages_count(const rd_kafka_messages_t *messages)
    rd_kafka_message_t *rd_kafka_messages_get(const rd_kafka_messages_t *messages, size_t index)
    void rd_kafka_messages_destroy(rd_kafka_messages_t *messages)
    int16_t rd_kafka_message_delivery_count(const rd_kafka_message_t *rkmessage)
    rd_kafka_share_t *rd_kafka_share_consumer_new(rd_kafka_conf_t *conf, char *errstr, size_t errstr_size)
    rd_kafka_resp_err_t rd_kafka_share_subscribe(rd_kafka_share_t *rkshare,
                                                 const rd_kafka_topic_partition_list_t *topics)
    rd_kafka_resp_err_t rd_kafka_share_unsubscribe(rd_kafka_share_t *rkshare)
    rd_kafka_error_t *rd_kafka_share_poll(rd_kafka_share_t *rkshare, int timeout_ms,
                                          rd_kafka_messages_t **rkmessages)
    rd_kafka_resp_err_t rd_kafka_share_acknowledge_type(rd_kafka_share_t *rkshare,
                                                        const rd_kafka_message_t *rkmessage,
                                                        rd_kafka_share_AcknowledgeType_t type)
    rd_kafka_resp_err_t rd_kafka_share_acknowledge_offset(rd_kafka_share_t *rkshare, const char *topic,
                                                          int32_t partition, int64_t offset,
                                                          rd_kafka_share_AcknowledgeType_t type)
    rd_kafka_error_t *rd_kafka_share_commit_async(rd_kafka_share_t *rkshare)
    rd_kafka_error_t *rd_kafka_share_commit_sync(rd_kafka_share_t *rkshare, int timeout_ms,
                                                 rd_kafka_topic_partition_list_t **partitions)
    rd_kafka_error_t *rd_kafka_share_consumer_close(rd_kafka_share_t *rkshare)
    rd_kafka_error_t *rd_kafka_share_destroy(rd_kafka_share_t *rkshare)
    ctypedef struct rd_kafka_share_partition_offsets_list_t:
        pass
    ctypedef struct rd_kafka_share_partition_offsets_t:
        pass
    int rd_kafka_share_partition_offsets_list_count(const rd_kafka_share_partition_offsets_list_t *lst)
    const rd_kafka_share_partition_offsets_t *rd_kafka_share_partition_offsets_list_get(
        const rd_kafka_share_partition_offsets_list_t *lst, size_t idx)
    const rd_kafka_topic_partition_t *rd_kafka_share_partition_offsets_partition(
        const rd_kafka_share_partition_offsets_t *entry)
    const int64_t *rd_kafka_share_partition_offsets_offsets(const rd_kafka_share_partition_offsets_t *entry)
    int rd_kafka_share_partition_offsets_offsets_cnt(const rd_kafka_share_partition_offsets_t *entry)
    ctypedef void (*kc_share_ack_cb)(rd_kafka_share_t *rkshare, rd_kafka_share_partition_offsets_list_t *parts,
                                     rd_kafka_resp_err_t err, void *opaque)
    rd_kafka_error_t *rd_kafka_share_set_acknowledgement_commit_cb(rd_kafka_share_t *rkshare,
                                                                   kc_share_ack_cb cb, void *opaque)
    void rd_kafka_mock_sharegroup_set_session_timeout(rd_kafka_mock_cluster_t *mcluster, int ms)
    void rd_kafka_mock_sharegroup_set_heartbeat_interval(rd_kafka_mock_cluster_t *mcluster, int ms)
    void rd_kafka_mock_sharegroup_set_max_delivery_attempts(rd_kafka_mock_cluster_t *mcluster, int n)
    void rd_kafka_mock_sharegroup_set_record_lock_duration(rd_kafka_mock_cluster_t *mcluster, int ms)
    void rd_kafka_mock_sharegroup_set_auto_offset_reset(rd_kafka_mock_cluster_t *mcluster, int earliest)
