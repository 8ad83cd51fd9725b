# cython: language_level=3
"""Cython declarations of the librdkafka C API used by kipconsumer (see csrc/rdk.h)."""

from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t


cdef extern from "rdk.h" nogil:
    ctypedef struct rd_kafka_t:
        pass
    ctypedef struct rd_kafka_conf_t:
        pass
    ctypedef struct rd_kafka_topic_t:
        pass
    ctypedef struct rd_kafka_queue_t:
        pass
    ctypedef struct rd_kafka_event_t:
        pass
    ctypedef struct rd_kafka_headers_t:
        pass
    ctypedef struct rd_kafka_mock_cluster_t:
        pass
    ctypedef struct rd_kafka_error_t:
        pass
    ctypedef struct rd_kafka_consumer_group_metadata_t:
        pass

    ctypedef enum rd_kafka_type_t:
        RD_KAFKA_PRODUCER
        RD_KAFKA_CONSUMER

    ctypedef enum rd_kafka_conf_res_t:
        RD_KAFKA_CONF_UNKNOWN
        RD_KAFKA_CONF_INVALID
        RD_KAFKA_CONF_OK

    ctypedef enum rd_kafka_resp_err_t:
        RD_KAFKA_RESP_ERR_NO_ERROR
        RD_KAFKA_RESP_ERR__PARTITION_EOF
        RD_KAFKA_RESP_ERR__TIMED_OUT
        RD_KAFKA_RESP_ERR__MSG_TIMED_OUT
        RD_KAFKA_RESP_ERR__QUEUE_FULL
        RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS
        RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS
        RD_KAFKA_RESP_ERR__MAX_POLL_EXCEEDED
        RD_KAFKA_RESP_ERR__NO_OFFSET
        RD_KAFKA_RESP_ERR__STATE
        RD_KAFKA_RESP_ERR__OUTDATED
        RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION
        RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC
        RD_KAFKA_RESP_ERR__FATAL
        RD_KAFKA_RESP_ERR__DESTROY
        RD_KAFKA_RESP_ERR__ASSIGNMENT_LOST
        RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET
        RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE
        RD_KAFKA_RESP_ERR__TRANSPORT
        RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN
        RD_KAFKA_RESP_ERR__INVALID_ARG
        RD_KAFKA_RESP_ERR__PURGE_QUEUE
        RD_KAFKA_RESP_ERR__PURGE_INFLIGHT
        RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID
        RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION
        RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS
        RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT
        RD_KAFKA_RESP_ERR_NOT_COORDINATOR
        RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE
        RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS
        RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART
        RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE
        RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION
        RD_KAFKA_RESP_ERR_FENCED_INSTANCE_ID

    ctypedef enum rd_kafka_timestamp_type_t:
        RD_KAFKA_TIMESTAMP_NOT_AVAILABLE
        RD_KAFKA_TIMESTAMP_CREATE_TIME
        RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME

    ctypedef struct rd_kafka_message_t:
        rd_kafka_resp_err_t err
        rd_kafka_topic_t *rkt
        int32_t partition
        void *payload
        size_t len
        void *key
        size_t key_len
        int64_t offset
        void *_private

    ctypedef struct rd_kafka_topic_partition_t:
        char *topic
        int32_t partition
        int64_t offset
        void *metadata
        size_t metadata_size
        void *opaque
        rd_kafka_resp_err_t err
        void *_private

    ctypedef struct rd_kafka_topic_partition_list_t:
        int cnt
        int size
        rd_kafka_topic_partition_t *elems

    enum:
        RD_KAFKA_PARTITION_UA
        RD_KAFKA_OFFSET_BEGINNING
        RD_KAFKA_OFFSET_END
        RD_KAFKA_OFFSET_STORED
        RD_KAFKA_OFFSET_INVALID
        RD_KAFKA_MSG_F_COPY
        RD_KAFKA_MSG_F_FREE
        RD_KAFKA_MSG_F_BLOCK
        RD_KAFKA_PURGE_F_QUEUE
        RD_KAFKA_PURGE_F_INFLIGHT
        RD_KAFKA_PURGE_F_NON_BLOCKING
        RD_KAFKA_EVENT_NONE
        RD_KAFKA_EVENT_DR
        RD_KAFKA_EVENT_FETCH
        RD_KAFKA_EVENT_LOG
        RD_KAFKA_EVENT_ERROR
        RD_KAFKA_EVENT_REBALANCE
        RD_KAFKA_EVENT_OFFSET_COMMIT
        RD_KAFKA_EVENT_STATS

    # --- version, errors -------------------------------------------------------
    int rd_kafka_version()
    const char *rd_kafka_version_str()
    const char *rd_kafka_err2str(rd_kafka_resp_err_t err)
    const char *rd_kafka_err2name(rd_kafka_resp_err_t err)
    rd_kafka_resp_err_t rd_kafka_last_error()
    rd_kafka_resp_err_t rd_kafka_fatal_error(rd_kafka_t *rk, char *errstr, size_t errstr_size)

    # --- configuration ---------------------------------------------------------
    rd_kafka_conf_t *rd_kafka_conf_new()
    void rd_kafka_conf_destroy(rd_kafka_conf_t *conf)
    rd_kafka_conf_t *rd_kafka_conf_dup(const rd_kafka_conf_t *conf)
    rd_kafka_conf_res_t rd_kafka_conf_set(rd_kafka_conf_t *conf, const char *name,
                                          const char *value, char *errstr, size_t errstr_size)
    rd_kafka_conf_res_t rd_kafka_conf_get(const rd_kafka_conf_t *conf, const char *name,
                                          char *dest, size_t *dest_size)
    const char **rd_kafka_conf_dump(rd_kafka_conf_t *conf, size_t *cntp)
    void rd_kafka_conf_dump_free(const char **arr, size_t cnt)
    void rd_kafka_conf_set_events(rd_kafka_conf_t *conf, int events)
    void rd_kafka_conf_set_opaque(rd_kafka_conf_t *conf, void *opaque)
    void rd_kafka_conf_set_rebalance_cb(
        rd_kafka_conf_t *conf,
        void (*rebalance_cb)(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                             rd_kafka_topic_partition_list_t *partitions, void *opaque))
    void rd_kafka_conf_set_offset_commit_cb(
        rd_kafka_conf_t *conf,
        void (*offset_commit_cb)(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                                 rd_kafka_topic_partition_list_t *offsets, void *opaque))
    void rd_kafka_conf_set_error_cb(
        rd_kafka_conf_t *conf,
        void (*error_cb)(rd_kafka_t *rk, int err, const char *reason, void *opaque))
    void rd_kafka_conf_set_oauthbearer_token_refresh_cb(
        rd_kafka_conf_t *conf,
        void (*cb)(rd_kafka_t *rk, const char *oauthbearer_config, void *opaque))
    void rd_kafka_conf_enable_sasl_queue(rd_kafka_conf_t *conf, int enable)
    rd_kafka_error_t *rd_kafka_sasl_background_callbacks_enable(rd_kafka_t *rk)
    rd_kafka_resp_err_t rd_kafka_oauthbearer_set_token(
        rd_kafka_t *rk, const char *token_value, int64_t md_lifetime_ms, const char *md_principal_name,
        const char **extensions, size_t extension_size, char *errstr, size_t errstr_size)
    rd_kafka_resp_err_t rd_kafka_oauthbearer_set_token_failure(rd_kafka_t *rk, const char *errstr)
    void rd_kafka_conf_set_stats_cb(
        rd_kafka_conf_t *conf,
        int (*stats_cb)(rd_kafka_t *rk, char *json, size_t json_len, void *opaque))
    void rd_kafka_conf_set_log_cb(
        rd_kafka_conf_t *conf,
        void (*log_cb)(const rd_kafka_t *rk, int level, const char *fac, const char *buf))
    void rd_kafka_conf_set_dr_msg_cb(
        rd_kafka_conf_t *conf,
        void (*dr_msg_cb)(rd_kafka_t *rk, const rd_kafka_message_t *rkmessage, void *opaque))
    void rd_kafka_conf_set_background_event_cb(
        rd_kafka_conf_t *conf,
        void (*event_cb)(rd_kafka_t *rk, rd_kafka_event_t *rkev, void *opaque))
    void *rd_kafka_opaque(const rd_kafka_t *rk)

    # --- handles ---------------------------------------------------------------
    rd_kafka_t *rd_kafka_new(rd_kafka_type_t type, rd_kafka_conf_t *conf,
                             char *errstr, size_t errstr_size)
    void rd_kafka_destroy(rd_kafka_t *rk)
    const char *rd_kafka_name(const rd_kafka_t *rk)
    char *rd_kafka_memberid(const rd_kafka_t *rk)
    void rd_kafka_mem_free(rd_kafka_t *rk, void *ptr)
    void *rd_kafka_mem_malloc(rd_kafka_t *rk, size_t size)
    int rd_kafka_poll(rd_kafka_t *rk, int timeout_ms)
    rd_kafka_resp_err_t rd_kafka_poll_set_consumer(rd_kafka_t *rk)
    int rd_kafka_outq_len(rd_kafka_t *rk)
    rd_kafka_resp_err_t rd_kafka_flush(rd_kafka_t *rk, int timeout_ms)
    rd_kafka_resp_err_t rd_kafka_purge(rd_kafka_t *rk, int purge_flags)

    # --- topics / partitions ---------------------------------------------------
    rd_kafka_topic_t *rd_kafka_topic_new(rd_kafka_t *rk, const char *topic, void *conf)
    void rd_kafka_topic_destroy(rd_kafka_topic_t *rkt)
    const char *rd_kafka_topic_name(const rd_kafka_topic_t *rkt)
    rd_kafka_topic_partition_list_t *rd_kafka_topic_partition_list_new(int size)
    void rd_kafka_topic_partition_list_destroy(rd_kafka_topic_partition_list_t *rkparlist)
    rd_kafka_topic_partition_t *rd_kafka_topic_partition_list_add(
        rd_kafka_topic_partition_list_t *rktparlist, const char *topic, int32_t partition)
    rd_kafka_topic_partition_list_t *rd_kafka_topic_partition_list_copy(
        const rd_kafka_topic_partition_list_t *src)
    rd_kafka_topic_partition_t *rd_kafka_topic_partition_list_find(
        const rd_kafka_topic_partition_list_t *rktparlist, const char *topic, int32_t partition)

    # --- messages --------------------------------------------------------------
    void rd_kafka_message_destroy(rd_kafka_message_t *rkmessage)
    int64_t rd_kafka_message_timestamp(const rd_kafka_message_t *rkmessage,
                                       rd_kafka_timestamp_type_t *tstype)
    rd_kafka_resp_err_t rd_kafka_message_headers(const rd_kafka_message_t *rkmessage,
                                                 rd_kafka_headers_t **hdrsp)
    size_t rd_kafka_header_cnt(const rd_kafka_headers_t *hdrs)
    rd_kafka_resp_err_t rd_kafka_header_get_all(const rd_kafka_headers_t *hdrs, size_t idx,
                                                const char **namep, const void **valuep,
                                                size_t *sizep)
    rd_kafka_headers_t *rd_kafka_headers_new(size_t initial_count)
    void rd_kafka_headers_destroy(rd_kafka_headers_t *hdrs)
    rd_kafka_resp_err_t rd_kafka_header_add(rd_kafka_headers_t *hdrs, const char *name,
                                            ssize_t name_size, const void *value,
                                            ssize_t value_size)
    const char *rd_kafka_message_errstr(const rd_kafka_message_t *rkmessage)

    # --- consumer --------------------------------------------------------------
    rd_kafka_resp_err_t rd_kafka_subscribe(rd_kafka_t *rk,
                                           const rd_kafka_topic_partition_list_t *topics)
    rd_kafka_resp_err_t rd_kafka_unsubscribe(rd_kafka_t *rk)
    rd_kafka_resp_err_t rd_kafka_subscription(rd_kafka_t *rk,
                                              rd_kafka_topic_partition_list_t **topics)
    rd_kafka_message_t *rd_kafka_consumer_poll(rd_kafka_t *rk, int timeout_ms)
    rd_kafka_resp_err_t rd_kafka_consumer_close(rd_kafka_t *rk)
    # the asynchronous close: close() and the consumer's reaper (csrc/consumer_close.h)
    rd_kafka_error_t *rd_kafka_consumer_close_queue(rd_kafka_t *rk, rd_kafka_queue_t *rkqu)
    int rd_kafka_consumer_closed(rd_kafka_t *rk)
    rd_kafka_resp_err_t rd_kafka_assign(rd_kafka_t *rk,
                                        const rd_kafka_topic_partition_list_t *partitions)
    rd_kafka_error_t *rd_kafka_incremental_assign(
        rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *partitions)
    rd_kafka_error_t *rd_kafka_incremental_unassign(
        rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *partitions)
    const char *rd_kafka_rebalance_protocol(rd_kafka_t *rk)
    rd_kafka_resp_err_t rd_kafka_assignment(rd_kafka_t *rk,
                                            rd_kafka_topic_partition_list_t **partitions)
    int rd_kafka_assignment_lost(rd_kafka_t *rk)
    rd_kafka_resp_err_t rd_kafka_commit(rd_kafka_t *rk,
                                        const rd_kafka_topic_partition_list_t *offsets, int async)
    rd_kafka_resp_err_t rd_kafka_commit_queue(
        rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *offsets, rd_kafka_queue_t *rkqu,
        void (*cb)(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                   rd_kafka_topic_partition_list_t *offsets, void *commit_opaque),
        void *commit_opaque)
    rd_kafka_resp_err_t rd_kafka_committed(rd_kafka_t *rk,
                                           rd_kafka_topic_partition_list_t *partitions,
                                           int timeout_ms)
    rd_kafka_resp_err_t rd_kafka_position(rd_kafka_t *rk,
                                          rd_kafka_topic_partition_list_t *partitions)
    rd_kafka_resp_err_t rd_kafka_offsets_store(rd_kafka_t *rk,
                                               rd_kafka_topic_partition_list_t *offsets)
    rd_kafka_resp_err_t rd_kafka_pause_partitions(rd_kafka_t *rk,
                                                  rd_kafka_topic_partition_list_t *partitions)
    rd_kafka_resp_err_t rd_kafka_resume_partitions(rd_kafka_t *rk,
                                                   rd_kafka_topic_partition_list_t *partitions)
    rd_kafka_error_t *rd_kafka_seek_partitions(rd_kafka_t *rk,
                                               rd_kafka_topic_partition_list_t *partitions,
                                               int timeout_ms)
    rd_kafka_resp_err_t rd_kafka_query_watermark_offsets(rd_kafka_t *rk, const char *topic,
                                                         int32_t partition, int64_t *low,
                                                         int64_t *high, int timeout_ms)
    rd_kafka_resp_err_t rd_kafka_get_watermark_offsets(rd_kafka_t *rk, const char *topic,
                                                       int32_t partition, int64_t *low,
                                                       int64_t *high)
    rd_kafka_resp_err_t rd_kafka_offsets_for_times(rd_kafka_t *rk,
                                                   rd_kafka_topic_partition_list_t *offsets,
                                                   int timeout_ms)

    # --- errors objects --------------------------------------------------------
    rd_kafka_resp_err_t rd_kafka_error_code(const rd_kafka_error_t *error)
    const char *rd_kafka_error_string(const rd_kafka_error_t *error)
    void rd_kafka_error_destroy(rd_kafka_error_t *error)

    # --- queues ----------------------------------------------------------------
    rd_kafka_queue_t *rd_kafka_queue_new(rd_kafka_t *rk)
    void rd_kafka_queue_destroy(rd_kafka_queue_t *rkqu)
    rd_kafka_queue_t *rd_kafka_queue_get_main(rd_kafka_t *rk)
    rd_kafka_queue_t *rd_kafka_queue_get_consumer(rd_kafka_t *rk)
    rd_kafka_queue_t *rd_kafka_queue_get_partition(rd_kafka_t *rk, const char *topic,
                                                   int32_t partition)
    rd_kafka_queue_t *rd_kafka_queue_get_background(rd_kafka_t *rk)
    void rd_kafka_queue_forward(rd_kafka_queue_t *src, rd_kafka_queue_t *dst)
    size_t rd_kafka_queue_length(rd_kafka_queue_t *rkqu)
    void rd_kafka_queue_io_event_enable(rd_kafka_queue_t *rkqu, int fd, const void *payload,
                                        size_t size)
    void rd_kafka_queue_yield(rd_kafka_queue_t *rkqu)
    ssize_t rd_kafka_consume_batch_queue(rd_kafka_queue_t *rkqu, int timeout_ms,
                                         rd_kafka_message_t **rkmessages, size_t rkmessages_size)
    rd_kafka_event_t *rd_kafka_queue_poll(rd_kafka_queue_t *rkqu, int timeout_ms)

    # --- events ----------------------------------------------------------------
    int rd_kafka_event_type(const rd_kafka_event_t *rkev)
    void rd_kafka_event_destroy(rd_kafka_event_t *rkev)
    rd_kafka_resp_err_t rd_kafka_event_error(rd_kafka_event_t *rkev)
    const char *rd_kafka_event_error_string(rd_kafka_event_t *rkev)
    int rd_kafka_event_error_is_fatal(rd_kafka_event_t *rkev)
    void *rd_kafka_event_opaque(rd_kafka_event_t *rkev)
    rd_kafka_topic_partition_list_t *rd_kafka_event_topic_partition_list(rd_kafka_event_t *rkev)
    const rd_kafka_message_t *rd_kafka_event_message_next(rd_kafka_event_t *rkev)
    size_t rd_kafka_event_message_count(rd_kafka_event_t *rkev)

    # --- producer --------------------------------------------------------------
    int rd_kafka_produce(rd_kafka_topic_t *rkt, int32_t partition, int msgflags, void *payload,
                         size_t len, const void *key, size_t keylen, void *msg_opaque)

    # --- interceptors ----------------------------------------------------------
    ctypedef rd_kafka_resp_err_t (*rd_kafka_interceptor_f_on_new_t)(
        rd_kafka_t *rk, const rd_kafka_conf_t *conf, void *ic_opaque, char *errstr,
        size_t errstr_size)
    rd_kafka_resp_err_t rd_kafka_conf_interceptor_add_on_new(
        rd_kafka_conf_t *conf, const char *ic_name, rd_kafka_interceptor_f_on_new_t on_new,
        void *ic_opaque)

    # --- mock cluster ----------------------------------------------------------
    rd_kafka_mock_cluster_t *rd_kafka_mock_cluster_new(rd_kafka_t *rk, int broker_cnt)
    void rd_kafka_mock_cluster_destroy(rd_kafka_mock_cluster_t *mcluster)
    rd_kafka_t *rd_kafka_mock_cluster_handle(const rd_kafka_mock_cluster_t *mcluster)
    const char *rd_kafka_mock_cluster_bootstraps(const rd_kafka_mock_cluster_t *mcluster)
    void rd_kafka_mock_clear_request_errors(rd_kafka_mock_cluster_t *mcluster, int16_t ApiKey)
    void rd_kafka_mock_push_request_errors_array(rd_kafka_mock_cluster_t *mcluster,
                                                 int16_t ApiKey, size_t cnt,
                                                 const rd_kafka_resp_err_t *errors)
    rd_kafka_resp_err_t rd_kafka_mock_broker_push_request_error_rtts(
        rd_kafka_mock_cluster_t *mcluster, int32_t broker_id, int16_t ApiKey, size_t cnt, ...)
    void rd_kafka_mock_topic_set_error(rd_kafka_mock_cluster_t *mcluster, const char *topic,
                                       rd_kafka_resp_err_t err)
    rd_kafka_resp_err_t rd_kafka_mock_topic_create(rd_kafka_mock_cluster_t *mcluster,
                                                   const char *topic, int partition_cnt,
                                                   int replication_factor)
    rd_kafka_resp_err_t rd_kafka_mock_partition_set_leader(rd_kafka_mock_cluster_t *mcluster,
                                                           const char *topic, int32_t partition,
                                                           int32_t broker_id)
    rd_kafka_resp_err_t rd_kafka_mock_partition_set_follower(rd_kafka_mock_cluster_t *mcluster,
                                                             const char *topic,
                                                             int32_t partition,
                                                             int32_t broker_id)
    rd_kafka_resp_err_t rd_kafka_mock_broker_set_down(rd_kafka_mock_cluster_t *mcluster,
                                                      int32_t broker_id)
    rd_kafka_resp_err_t rd_kafka_mock_broker_set_up(rd_kafka_mock_cluster_t *mcluster,
                                                    int32_t broker_id)
    rd_kafka_resp_err_t rd_kafka_mock_broker_set_rtt(rd_kafka_mock_cluster_t *mcluster,
                                                     int32_t broker_id, int rtt_ms)
    rd_kafka_resp_err_t rd_kafka_mock_coordinator_set(rd_kafka_mock_cluster_t *mcluster,
                                                      const char *key_type, const char *key,
                                                      int32_t broker_id)
    void rd_kafka_mock_group_initial_rebalance_delay_ms(rd_kafka_mock_cluster_t *mcluster,
                                                        int32_t delay_ms)

    # --- error table (used by kipconsumer._mock) -------------------------------
    struct rd_kafka_err_desc:
        rd_kafka_resp_err_t code
        const char *name
        const char *desc
    void rd_kafka_get_err_descs(const rd_kafka_err_desc **errdescs, size_t *cntp)

    # --- admin: committed offsets of a group, asynchronously (KafkaConsumer.committed) ---------
    ctypedef struct rd_kafka_AdminOptions_t:
        pass
    ctypedef struct rd_kafka_ListConsumerGroupOffsets_t:
        pass
    ctypedef struct rd_kafka_group_result_t:
        pass
    ctypedef rd_kafka_event_t rd_kafka_ListConsumerGroupOffsets_result_t
    ctypedef enum rd_kafka_admin_op_t:
        RD_KAFKA_ADMIN_OP_ANY
        RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPOFFSETS
    rd_kafka_AdminOptions_t *rd_kafka_AdminOptions_new(rd_kafka_t *rk, rd_kafka_admin_op_t for_api)
    void rd_kafka_AdminOptions_destroy(rd_kafka_AdminOptions_t *options)
    rd_kafka_resp_err_t rd_kafka_AdminOptions_set_request_timeout(rd_kafka_AdminOptions_t *options,
                                                                  int timeout_ms, char *errstr,
                                                                  size_t errstr_size)
    rd_kafka_error_t *rd_kafka_AdminOptions_set_require_stable_offsets(rd_kafka_AdminOptions_t *options,
                                                                       int true_or_false)
    ctypedef enum rd_kafka_IsolationLevel_t:
        RD_KAFKA_ISOLATION_LEVEL_READ_UNCOMMITTED
        RD_KAFKA_ISOLATION_LEVEL_READ_COMMITTED
    int64_t RD_KAFKA_OFFSET_SPEC_LATEST
    rd_kafka_error_t *rd_kafka_AdminOptions_set_isolation_level(rd_kafka_AdminOptions_t *options,
                                                                rd_kafka_IsolationLevel_t value)
    rd_kafka_ListConsumerGroupOffsets_t *rd_kafka_ListConsumerGroupOffsets_new(
        const char *group_id, const rd_kafka_topic_partition_list_t *partitions)
    void rd_kafka_ListConsumerGroupOffsets_destroy(
        rd_kafka_ListConsumerGroupOffsets_t *list_grpoffsets)
    void rd_kafka_ListConsumerGroupOffsets(rd_kafka_t *rk,
                                           rd_kafka_ListConsumerGroupOffsets_t **list_grpoffsets,
                                           size_t list_grpoffsets_cnt,
                                           const rd_kafka_AdminOptions_t *options,
                                           rd_kafka_queue_t *rkqu)
    const rd_kafka_ListConsumerGroupOffsets_result_t *rd_kafka_event_ListConsumerGroupOffsets_result(
        rd_kafka_event_t *rkev)
    const rd_kafka_group_result_t **rd_kafka_ListConsumerGroupOffsets_result_groups(
        const rd_kafka_ListConsumerGroupOffsets_result_t *result, size_t *cntp)
    const rd_kafka_error_t *rd_kafka_group_result_error(const rd_kafka_group_result_t *groupres)
    const rd_kafka_topic_partition_list_t *rd_kafka_group_result_partitions(
        const rd_kafka_group_result_t *groupres)

    # --- admin: offsets by timestamp (KafkaConsumer.offsets_for_times), asynchronously -------
    ctypedef struct rd_kafka_ListOffsetsResultInfo_t:
        pass
    ctypedef rd_kafka_event_t rd_kafka_ListOffsets_result_t
    void rd_kafka_ListOffsets(rd_kafka_t *rk, rd_kafka_topic_partition_list_t *topic_partitions,
                              const rd_kafka_AdminOptions_t *options, rd_kafka_queue_t *rkqu)
    const rd_kafka_ListOffsets_result_t *rd_kafka_event_ListOffsets_result(rd_kafka_event_t *rkev)
    const rd_kafka_ListOffsetsResultInfo_t **rd_kafka_ListOffsets_result_infos(
        const rd_kafka_ListOffsets_result_t *result, size_t *cntp)
    const rd_kafka_topic_partition_t *rd_kafka_ListOffsetsResultInfo_topic_partition(
        const rd_kafka_ListOffsetsResultInfo_t *result_info)
    int64_t rd_kafka_ListOffsetsResultInfo_timestamp(const rd_kafka_ListOffsetsResultInfo_t *result_info)

    # --- transactions (KIP-98, KIP-447) -------------------------------------------------------
    rd_kafka_error_t *rd_kafka_init_transactions(rd_kafka_t *rk, int timeout_ms)
    rd_kafka_error_t *rd_kafka_begin_transaction(rd_kafka_t *rk)
    rd_kafka_error_t *rd_kafka_send_offsets_to_transaction(
        rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *offsets,
        const rd_kafka_consumer_group_metadata_t *cgmetadata, int timeout_ms)
    rd_kafka_error_t *rd_kafka_commit_transaction(rd_kafka_t *rk, int timeout_ms)
    rd_kafka_error_t *rd_kafka_abort_transaction(rd_kafka_t *rk, int timeout_ms)
    int rd_kafka_error_is_fatal(const rd_kafka_error_t *error)
    int32_t rd_kafka_controllerid(rd_kafka_t *rk, int timeout_ms)
    int rd_kafka_brokers_add(rd_kafka_t *rk, const char *brokerlist)
    int rd_kafka_error_is_retriable(const rd_kafka_error_t *error)
    int rd_kafka_error_txn_requires_abort(const rd_kafka_error_t *error)
    const char *rd_kafka_error_name(const rd_kafka_error_t *error)
    rd_kafka_consumer_group_metadata_t *rd_kafka_consumer_group_metadata(rd_kafka_t *rk)
    void rd_kafka_consumer_group_metadata_destroy(rd_kafka_consumer_group_metadata_t *cgmd)
    rd_kafka_error_t *rd_kafka_consumer_group_metadata_write(
        const rd_kafka_consumer_group_metadata_t *cgmd, void **bufferp, size_t *sizep)
    rd_kafka_error_t *rd_kafka_consumer_group_metadata_read(
        rd_kafka_consumer_group_metadata_t **cgmdp, const void *buffer, size_t size)
