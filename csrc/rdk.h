/* The librdkafka C API that kipconsumer uses, declared here: the single include point.
 *
 * kipconsumer does not compile against librdkafka's headers.  The extension modules that
 * call it are linked against the librdkafka the package carries (kipconsumer/_native_libs/,
 * SONAME librdkafka-kipc.so.1, grafted from confluent-kafka's wheel by the build); at import,
 * kipconsumer._loader loads that library locally after checking rd_kafka_version() >=
 * KC_RDK_MIN_VERSION, and the modules' dependency resolves to it.  The build needs only a C
 * compiler.
 *
 * Only what kipconsumer calls is declared, with the signatures and numeric values of
 * librdkafka's public, stable ABI (enum values and struct layouts are part of that ABI;
 * librdkafka appends to them and never reorders).  Add a declaration here before using a
 * new function, and raise KC_RDK_MIN_VERSION if it is newer than that version. */
#ifndef KC_RDK_H
#define KC_RDK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 2.6.0: the oldest librdkafka exporting every function below (checked against the
 * librdkafka of each confluent-kafka wheel; older ones lack
 * rd_kafka_mock_group_initial_rebalance_delay_ms).  Keep in sync with
 * kipconsumer/_loader.py and pyproject's confluent-kafka range. */
#define KC_RDK_MIN_VERSION 0x020600ff

/* ---- opaque handles ------------------------------------------------------------- */
typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_conf_s rd_kafka_conf_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;
typedef struct rd_kafka_topic_conf_s rd_kafka_topic_conf_t;
typedef struct rd_kafka_queue_s rd_kafka_queue_t;
typedef struct rd_kafka_op_s rd_kafka_event_t;
typedef struct rd_kafka_headers_s rd_kafka_headers_t;
typedef struct rd_kafka_error_s rd_kafka_error_t;
typedef struct rd_kafka_consumer_group_metadata_s rd_kafka_consumer_group_metadata_t;
typedef struct rd_kafka_mock_cluster_s rd_kafka_mock_cluster_t;

/* ---- enums ---------------------------------------------------------------------- */
typedef enum { RD_KAFKA_PRODUCER = 0, RD_KAFKA_CONSUMER = 1 } rd_kafka_type_t;

typedef enum {
    RD_KAFKA_CONF_UNKNOWN = -2,
    RD_KAFKA_CONF_INVALID = -1,
    RD_KAFKA_CONF_OK = 0
} rd_kafka_conf_res_t;

typedef enum {
    RD_KAFKA_TIMESTAMP_NOT_AVAILABLE = 0,
    RD_KAFKA_TIMESTAMP_CREATE_TIME = 1,
    RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME = 2
} rd_kafka_timestamp_type_t;

/* Error codes: negative ones are librdkafka's own, positive ones Kafka's protocol codes.
 * Only the codes kipconsumer names are listed; any other value may arrive and is handled
 * through rd_kafka_err2name()/rd_kafka_err2str(). */
typedef enum {
    RD_KAFKA_RESP_ERR__FAIL = -196,
    RD_KAFKA_RESP_ERR__DESTROY = -197,
    RD_KAFKA_RESP_ERR__TRANSPORT = -195,
    RD_KAFKA_RESP_ERR__MSG_TIMED_OUT = -192,
    RD_KAFKA_RESP_ERR__PARTITION_EOF = -191,
    RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION = -190,
    RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC = -188,
    RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN = -187,
    RD_KAFKA_RESP_ERR__INVALID_ARG = -186,
    RD_KAFKA_RESP_ERR__TIMED_OUT = -185,
    RD_KAFKA_RESP_ERR__QUEUE_FULL = -184,
    RD_KAFKA_RESP_ERR__SSL = -181,
    RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS = -175,
    RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS = -174,
    RD_KAFKA_RESP_ERR__STATE = -172,
    RD_KAFKA_RESP_ERR__AUTHENTICATION = -169,
    RD_KAFKA_RESP_ERR__NO_OFFSET = -168,
    RD_KAFKA_RESP_ERR__OUTDATED = -167,
    RD_KAFKA_RESP_ERR__TIMED_OUT_QUEUE = -166,
    RD_KAFKA_RESP_ERR__PURGE_QUEUE = -152,
    RD_KAFKA_RESP_ERR__PURGE_INFLIGHT = -151,
    RD_KAFKA_RESP_ERR__FATAL = -150,
    RD_KAFKA_RESP_ERR__MAX_POLL_EXCEEDED = -147,
    RD_KAFKA_RESP_ERR__FENCED = -144,
    RD_KAFKA_RESP_ERR__ASSIGNMENT_LOST = -142,
    RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET = -140,
    RD_KAFKA_RESP_ERR_NO_ERROR = 0,
    RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE = 1,
    RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART = 3,
    RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE = 5,
    RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION = 6,
    RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT = 7,
    RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS = 14,
    RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE = 15,
    RD_KAFKA_RESP_ERR_NOT_COORDINATOR = 16,
    RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION = 22,
    RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID = 25,
    RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS = 27,
    RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED = 29,
    RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED = 31,
    RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH = 47,
    RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53,
    RD_KAFKA_RESP_ERR_FENCED_INSTANCE_ID = 82,
    RD_KAFKA_RESP_ERR_PRODUCER_FENCED = 90
} rd_kafka_resp_err_t;

/* ---- constants ------------------------------------------------------------------ */
#define RD_KAFKA_PARTITION_UA     ((int32_t)-1)
#define RD_KAFKA_OFFSET_BEGINNING -2
#define RD_KAFKA_OFFSET_END       -1
#define RD_KAFKA_OFFSET_STORED    -1000
#define RD_KAFKA_OFFSET_INVALID   -1001

#define RD_KAFKA_MSG_F_FREE  0x1
#define RD_KAFKA_MSG_F_COPY  0x2
#define RD_KAFKA_MSG_F_BLOCK 0x4

#define RD_KAFKA_PURGE_F_QUEUE        0x1
#define RD_KAFKA_PURGE_F_INFLIGHT     0x2
#define RD_KAFKA_PURGE_F_NON_BLOCKING 0x4

#define RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE 0x8

#define RD_KAFKA_EVENT_NONE          0x0
#define RD_KAFKA_EVENT_DR            0x1
#define RD_KAFKA_EVENT_FETCH         0x2
#define RD_KAFKA_EVENT_LOG           0x4
#define RD_KAFKA_EVENT_ERROR         0x8
#define RD_KAFKA_EVENT_REBALANCE     0x10
#define RD_KAFKA_EVENT_OFFSET_COMMIT 0x20
#define RD_KAFKA_EVENT_STATS         0x40

/* ---- public structs (layouts are ABI) ------------------------------------------ */
typedef struct rd_kafka_message_s {
    rd_kafka_resp_err_t err;
    rd_kafka_topic_t *rkt;
    int32_t partition;
    void *payload;
    size_t len;
    void *key;
    size_t key_len;
    int64_t offset;
    void *_private; /* producer: the per-message opaque; consumer: librdkafka's own */
} rd_kafka_message_t;

typedef struct rd_kafka_topic_partition_s {
    char *topic;
    int32_t partition;
    int64_t offset;
    void *metadata;
    size_t metadata_size;
    void *opaque;
    rd_kafka_resp_err_t err;
    void *_private;
} rd_kafka_topic_partition_t;

typedef struct rd_kafka_topic_partition_list_s {
    int cnt;
    int size;
    rd_kafka_topic_partition_t *elems;
} rd_kafka_topic_partition_list_t;

struct rd_kafka_metadata_broker {
    int32_t id;
    char *host;
    int port;
};

struct rd_kafka_metadata_partition {
    int32_t id;
    rd_kafka_resp_err_t err;
    int32_t leader;
    int replica_cnt;
    int32_t *replicas;
    int isr_cnt;
    int32_t *isrs;
};

struct rd_kafka_metadata_topic {
    char *topic;
    int partition_cnt;
    struct rd_kafka_metadata_partition *partitions;
    rd_kafka_resp_err_t err;
};

struct rd_kafka_metadata {
    int broker_cnt;
    struct rd_kafka_metadata_broker *brokers;
    int topic_cnt;
    struct rd_kafka_metadata_topic *topics;
    int32_t orig_broker_id;
    char *orig_broker_name;
};

struct rd_kafka_err_desc {
    rd_kafka_resp_err_t code;
    const char *name;
    const char *desc;
};

/* ---- version, errors ------------------------------------------------------------ */
int rd_kafka_version(void);
const char *rd_kafka_version_str(void);
const char *rd_kafka_err2str(rd_kafka_resp_err_t err);
const char *rd_kafka_err2name(rd_kafka_resp_err_t err);
rd_kafka_resp_err_t rd_kafka_last_error(void);
rd_kafka_resp_err_t rd_kafka_fatal_error(rd_kafka_t *rk, char *errstr, size_t errstr_size);
void rd_kafka_get_err_descs(const struct rd_kafka_err_desc **errdescs, size_t *cntp);
rd_kafka_resp_err_t rd_kafka_error_code(const rd_kafka_error_t *error);
const char *rd_kafka_error_string(const rd_kafka_error_t *error);
void rd_kafka_error_destroy(rd_kafka_error_t *error);

/* ---- configuration -------------------------------------------------------------- */
rd_kafka_conf_t *rd_kafka_conf_new(void);
void rd_kafka_conf_destroy(rd_kafka_conf_t *conf);
rd_kafka_conf_t *rd_kafka_conf_dup(const rd_kafka_conf_t *conf);
rd_kafka_conf_res_t rd_kafka_conf_set(rd_kafka_conf_t *conf, const char *name, const char *value,
                                      char *errstr, size_t errstr_size);
rd_kafka_conf_res_t rd_kafka_conf_get(const rd_kafka_conf_t *conf, const char *name, char *dest,
                                      size_t *dest_size);
const char **rd_kafka_conf_dump(rd_kafka_conf_t *conf, size_t *cntp);
void rd_kafka_conf_dump_free(const char **arr, size_t cnt);
void rd_kafka_conf_set_events(rd_kafka_conf_t *conf, int events);
void rd_kafka_conf_set_opaque(rd_kafka_conf_t *conf, void *opaque);
void rd_kafka_conf_set_rebalance_cb(rd_kafka_conf_t *conf,
                                    void (*rebalance_cb)(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                                                         rd_kafka_topic_partition_list_t *partitions,
                                                         void *opaque));
void rd_kafka_conf_set_offset_commit_cb(rd_kafka_conf_t *conf,
                                        void (*offset_commit_cb)(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                                                                 rd_kafka_topic_partition_list_t *offsets,
                                                                 void *opaque));
void rd_kafka_conf_set_error_cb(rd_kafka_conf_t *conf,
                                void (*error_cb)(rd_kafka_t *rk, int err, const char *reason, void *opaque));
void rd_kafka_conf_set_oauthbearer_token_refresh_cb(rd_kafka_conf_t *conf,
                                                    void (*cb)(rd_kafka_t *rk, const char *oauthbearer_config,
                                                               void *opaque));
void rd_kafka_conf_enable_sasl_queue(rd_kafka_conf_t *conf, int enable);
rd_kafka_error_t *rd_kafka_sasl_background_callbacks_enable(rd_kafka_t *rk);
rd_kafka_resp_err_t rd_kafka_oauthbearer_set_token(rd_kafka_t *rk, const char *token_value,
                                                   int64_t md_lifetime_ms, const char *md_principal_name,
                                                   const char **extensions, size_t extension_size,
                                                   char *errstr, size_t errstr_size);
rd_kafka_resp_err_t rd_kafka_oauthbearer_set_token_failure(rd_kafka_t *rk, const char *errstr);
void rd_kafka_conf_set_stats_cb(rd_kafka_conf_t *conf,
                                int (*stats_cb)(rd_kafka_t *rk, char *json, size_t json_len, void *opaque));
void rd_kafka_conf_set_log_cb(rd_kafka_conf_t *conf, void (*log_cb)(const rd_kafka_t *rk, int level,
                                                                    const char *fac, const char *buf));
void rd_kafka_conf_set_dr_msg_cb(rd_kafka_conf_t *conf,
                                 void (*dr_msg_cb)(rd_kafka_t *rk, const rd_kafka_message_t *rkmessage,
                                                   void *opaque));
void rd_kafka_conf_set_background_event_cb(rd_kafka_conf_t *conf,
                                           void (*event_cb)(rd_kafka_t *rk, rd_kafka_event_t *rkev,
                                                            void *opaque));
void *rd_kafka_opaque(const rd_kafka_t *rk);

/* ---- handles -------------------------------------------------------------------- */
rd_kafka_t *rd_kafka_new(rd_kafka_type_t type, rd_kafka_conf_t *conf, char *errstr, size_t errstr_size);
void rd_kafka_destroy(rd_kafka_t *rk);
void rd_kafka_destroy_flags(rd_kafka_t *rk, int flags);
const char *rd_kafka_name(const rd_kafka_t *rk);
char *rd_kafka_memberid(const rd_kafka_t *rk);
void rd_kafka_mem_free(rd_kafka_t *rk, void *ptr);
/* Memory librdkafka will free (e.g. a topic partition's metadata) must come from here: a bound
 * librdkafka allocates with the bundled jemalloc, not libc (scripts/native_bundle.py). */
void *rd_kafka_mem_malloc(rd_kafka_t *rk, size_t size);
int rd_kafka_poll(rd_kafka_t *rk, int timeout_ms);
rd_kafka_resp_err_t rd_kafka_poll_set_consumer(rd_kafka_t *rk);
int rd_kafka_outq_len(rd_kafka_t *rk);
rd_kafka_resp_err_t rd_kafka_flush(rd_kafka_t *rk, int timeout_ms);
rd_kafka_resp_err_t rd_kafka_purge(rd_kafka_t *rk, int purge_flags);
rd_kafka_resp_err_t rd_kafka_metadata(rd_kafka_t *rk, int all_topics, rd_kafka_topic_t *only_rkt,
                                      const struct rd_kafka_metadata **metadatap, int timeout_ms);
void rd_kafka_metadata_destroy(const struct rd_kafka_metadata *metadata);

/* ---- topics, partition lists ---------------------------------------------------- */
rd_kafka_topic_t *rd_kafka_topic_new(rd_kafka_t *rk, const char *topic, rd_kafka_topic_conf_t *conf);
void rd_kafka_topic_destroy(rd_kafka_topic_t *rkt);
const char *rd_kafka_topic_name(const rd_kafka_topic_t *rkt);
rd_kafka_topic_partition_list_t *rd_kafka_topic_partition_list_new(int size);
void rd_kafka_topic_partition_list_destroy(rd_kafka_topic_partition_list_t *rkparlist);
rd_kafka_topic_partition_t *rd_kafka_topic_partition_list_add(rd_kafka_topic_partition_list_t *rktparlist,
                                                              const char *topic, int32_t partition);
rd_kafka_topic_partition_list_t *
rd_kafka_topic_partition_list_copy(const rd_kafka_topic_partition_list_t *src);
rd_kafka_topic_partition_t *
rd_kafka_topic_partition_list_find(const rd_kafka_topic_partition_list_t *rktparlist, const char *topic,
                                   int32_t partition);

/* ---- messages, headers ---------------------------------------------------------- */
void rd_kafka_message_destroy(rd_kafka_message_t *rkmessage);
const char *rd_kafka_message_errstr(const rd_kafka_message_t *rkmessage);
int64_t rd_kafka_message_timestamp(const rd_kafka_message_t *rkmessage, rd_kafka_timestamp_type_t *tstype);
int64_t rd_kafka_message_latency(const rd_kafka_message_t *rkmessage);
rd_kafka_resp_err_t rd_kafka_message_headers(const rd_kafka_message_t *rkmessage, rd_kafka_headers_t **hdrsp);
rd_kafka_headers_t *rd_kafka_headers_new(size_t initial_count);
void rd_kafka_headers_destroy(rd_kafka_headers_t *hdrs);
rd_kafka_resp_err_t rd_kafka_header_add(rd_kafka_headers_t *hdrs, const char *name, ssize_t name_size,
                                        const void *value, ssize_t value_size);
size_t rd_kafka_header_cnt(const rd_kafka_headers_t *hdrs);
rd_kafka_resp_err_t rd_kafka_header_get_all(const rd_kafka_headers_t *hdrs, size_t idx, const char **namep,
                                            const void **valuep, size_t *sizep);

/* ---- consumer ------------------------------------------------------------------- */
rd_kafka_resp_err_t rd_kafka_subscribe(rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *topics);
rd_kafka_resp_err_t rd_kafka_unsubscribe(rd_kafka_t *rk);
rd_kafka_resp_err_t rd_kafka_subscription(rd_kafka_t *rk, rd_kafka_topic_partition_list_t **topics);
rd_kafka_message_t *rd_kafka_consumer_poll(rd_kafka_t *rk, int timeout_ms);
rd_kafka_resp_err_t rd_kafka_consumer_close(rd_kafka_t *rk);
rd_kafka_error_t *rd_kafka_consumer_close_queue(rd_kafka_t *rk, rd_kafka_queue_t *rkqu);
int rd_kafka_consumer_closed(rd_kafka_t *rk);
rd_kafka_resp_err_t rd_kafka_assign(rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *partitions);
rd_kafka_error_t *rd_kafka_incremental_assign(rd_kafka_t *rk,
                                              const rd_kafka_topic_partition_list_t *partitions);
rd_kafka_error_t *rd_kafka_incremental_unassign(rd_kafka_t *rk,
                                                const rd_kafka_topic_partition_list_t *partitions);
const char *rd_kafka_rebalance_protocol(rd_kafka_t *rk);
rd_kafka_resp_err_t rd_kafka_assignment(rd_kafka_t *rk, rd_kafka_topic_partition_list_t **partitions);
int rd_kafka_assignment_lost(rd_kafka_t *rk);
rd_kafka_resp_err_t rd_kafka_commit(rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *offsets,
                                    int async);
rd_kafka_resp_err_t
rd_kafka_commit_queue(rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *offsets, rd_kafka_queue_t *rkqu,
                      void (*cb)(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                                 rd_kafka_topic_partition_list_t *offsets, void *commit_opaque),
                      void *commit_opaque);
rd_kafka_resp_err_t rd_kafka_committed(rd_kafka_t *rk, rd_kafka_topic_partition_list_t *partitions,
                                       int timeout_ms);
rd_kafka_resp_err_t rd_kafka_position(rd_kafka_t *rk, rd_kafka_topic_partition_list_t *partitions);
rd_kafka_resp_err_t rd_kafka_offsets_store(rd_kafka_t *rk, rd_kafka_topic_partition_list_t *offsets);
rd_kafka_resp_err_t rd_kafka_pause_partitions(rd_kafka_t *rk, rd_kafka_topic_partition_list_t *partitions);
rd_kafka_resp_err_t rd_kafka_resume_partitions(rd_kafka_t *rk, rd_kafka_topic_partition_list_t *partitions);
rd_kafka_error_t *rd_kafka_seek_partitions(rd_kafka_t *rk, rd_kafka_topic_partition_list_t *partitions,
                                           int timeout_ms);
rd_kafka_resp_err_t rd_kafka_query_watermark_offsets(rd_kafka_t *rk, const char *topic, int32_t partition,
                                                     int64_t *low, int64_t *high, int timeout_ms);
rd_kafka_resp_err_t rd_kafka_get_watermark_offsets(rd_kafka_t *rk, const char *topic, int32_t partition,
                                                   int64_t *low, int64_t *high);
rd_kafka_resp_err_t rd_kafka_offsets_for_times(rd_kafka_t *rk, rd_kafka_topic_partition_list_t *offsets,
                                               int timeout_ms);

/* ---- queues, events ------------------------------------------------------------- */
rd_kafka_queue_t *rd_kafka_queue_new(rd_kafka_t *rk);
void rd_kafka_queue_destroy(rd_kafka_queue_t *rkqu);
rd_kafka_queue_t *rd_kafka_queue_get_main(rd_kafka_t *rk);
rd_kafka_queue_t *rd_kafka_queue_get_consumer(rd_kafka_t *rk);
rd_kafka_queue_t *rd_kafka_queue_get_partition(rd_kafka_t *rk, const char *topic, int32_t partition);
rd_kafka_queue_t *rd_kafka_queue_get_background(rd_kafka_t *rk);
void rd_kafka_queue_forward(rd_kafka_queue_t *src, rd_kafka_queue_t *dst);
size_t rd_kafka_queue_length(rd_kafka_queue_t *rkqu);
void rd_kafka_queue_io_event_enable(rd_kafka_queue_t *rkqu, int fd, const void *payload, size_t size);
void rd_kafka_queue_yield(rd_kafka_queue_t *rkqu);
ssize_t rd_kafka_consume_batch_queue(rd_kafka_queue_t *rkqu, int timeout_ms, rd_kafka_message_t **rkmessages,
                                     size_t rkmessages_size);
rd_kafka_event_t *rd_kafka_queue_poll(rd_kafka_queue_t *rkqu, int timeout_ms);
int rd_kafka_event_type(const rd_kafka_event_t *rkev);
void rd_kafka_event_destroy(rd_kafka_event_t *rkev);
rd_kafka_resp_err_t rd_kafka_event_error(rd_kafka_event_t *rkev);
const char *rd_kafka_event_error_string(rd_kafka_event_t *rkev);
int rd_kafka_event_error_is_fatal(rd_kafka_event_t *rkev);
void *rd_kafka_event_opaque(rd_kafka_event_t *rkev);
rd_kafka_topic_partition_list_t *rd_kafka_event_topic_partition_list(rd_kafka_event_t *rkev);
const rd_kafka_message_t *rd_kafka_event_message_next(rd_kafka_event_t *rkev);
size_t rd_kafka_event_message_count(rd_kafka_event_t *rkev);
const char *rd_kafka_event_stats(rd_kafka_event_t *rkev);

/* ---- producer ------------------------------------------------------------------- */
int rd_kafka_produce(rd_kafka_topic_t *rkt, int32_t partition, int msgflags, void *payload, size_t len,
                     const void *key, size_t keylen, void *msg_opaque);

/* rd_kafka_producev() takes (tag, value...) pairs ended by RD_KAFKA_V_END. */
typedef enum {
    RD_KAFKA_VTYPE_END = 0,
    RD_KAFKA_VTYPE_TOPIC = 1,     /* const char * */
    RD_KAFKA_VTYPE_RKT = 2,       /* rd_kafka_topic_t * */
    RD_KAFKA_VTYPE_PARTITION = 3, /* int32_t */
    RD_KAFKA_VTYPE_VALUE = 4,     /* void *, size_t */
    RD_KAFKA_VTYPE_KEY = 5,       /* const void *, size_t */
    RD_KAFKA_VTYPE_OPAQUE = 6,    /* void * */
    RD_KAFKA_VTYPE_MSGFLAGS = 7,  /* int */
    RD_KAFKA_VTYPE_TIMESTAMP = 8, /* int64_t */
    RD_KAFKA_VTYPE_HEADER = 9,    /* const char *, const void *, ssize_t */
    RD_KAFKA_VTYPE_HEADERS = 10   /* rd_kafka_headers_t * */
} rd_kafka_vtype_t;
rd_kafka_resp_err_t rd_kafka_producev(rd_kafka_t *rk, ...);

/* Each argument is converted to the type librdkafka reads with va_arg. */
#define RD_KAFKA_V_END           RD_KAFKA_VTYPE_END
#define RD_KAFKA_V_TOPIC(topic)  RD_KAFKA_VTYPE_TOPIC, (const char *)(topic)
#define RD_KAFKA_V_RKT(rkt)      RD_KAFKA_VTYPE_RKT, (rd_kafka_topic_t *)(rkt)
#define RD_KAFKA_V_PARTITION(p)  RD_KAFKA_VTYPE_PARTITION, (int32_t)(p)
#define RD_KAFKA_V_VALUE(v, len) RD_KAFKA_VTYPE_VALUE, (void *)(v), (size_t)(len)
#define RD_KAFKA_V_KEY(k, len)   RD_KAFKA_VTYPE_KEY, (const void *)(k), (size_t)(len)
#define RD_KAFKA_V_OPAQUE(o)     RD_KAFKA_VTYPE_OPAQUE, (void *)(o)
#define RD_KAFKA_V_MSGFLAGS(f)   RD_KAFKA_VTYPE_MSGFLAGS, (int)(f)
#define RD_KAFKA_V_TIMESTAMP(ts) RD_KAFKA_VTYPE_TIMESTAMP, (int64_t)(ts)
#define RD_KAFKA_V_HEADERS(h)    RD_KAFKA_VTYPE_HEADERS, (rd_kafka_headers_t *)(h)

/* ---- transactions (KIP-98, KIP-447) -------------------------------------------- */
rd_kafka_error_t *rd_kafka_init_transactions(rd_kafka_t *rk, int timeout_ms);
rd_kafka_error_t *rd_kafka_begin_transaction(rd_kafka_t *rk);
rd_kafka_error_t *rd_kafka_send_offsets_to_transaction(rd_kafka_t *rk,
                                                       const rd_kafka_topic_partition_list_t *offsets,
                                                       const rd_kafka_consumer_group_metadata_t *cgmetadata,
                                                       int timeout_ms);
rd_kafka_error_t *rd_kafka_commit_transaction(rd_kafka_t *rk, int timeout_ms);
rd_kafka_error_t *rd_kafka_abort_transaction(rd_kafka_t *rk, int timeout_ms);
int rd_kafka_error_is_fatal(const rd_kafka_error_t *error);
int32_t rd_kafka_controllerid(rd_kafka_t *rk, int timeout_ms);
int rd_kafka_brokers_add(rd_kafka_t *rk, const char *brokerlist);
int rd_kafka_error_is_retriable(const rd_kafka_error_t *error);
int rd_kafka_error_txn_requires_abort(const rd_kafka_error_t *error);
const char *rd_kafka_error_name(const rd_kafka_error_t *error);
rd_kafka_consumer_group_metadata_t *rd_kafka_consumer_group_metadata(rd_kafka_t *rk);
void rd_kafka_consumer_group_metadata_destroy(rd_kafka_consumer_group_metadata_t *cgmd);
rd_kafka_error_t *rd_kafka_consumer_group_metadata_write(const rd_kafka_consumer_group_metadata_t *cgmd,
                                                         void **bufferp, size_t *sizep);
rd_kafka_error_t *rd_kafka_consumer_group_metadata_read(rd_kafka_consumer_group_metadata_t **cgmdp,
                                                        const void *buffer, size_t size);

/* ---- interceptors --------------------------------------------------------------- */
typedef rd_kafka_resp_err_t(rd_kafka_interceptor_f_on_new_t)(rd_kafka_t *rk, const rd_kafka_conf_t *conf,
                                                             void *ic_opaque, char *errstr,
                                                             size_t errstr_size);
typedef rd_kafka_resp_err_t(rd_kafka_interceptor_f_on_request_sent_t)(rd_kafka_t *rk, int sockfd,
                                                                      const char *brokername,
                                                                      int32_t brokerid, int16_t ApiKey,
                                                                      int16_t ApiVersion, int32_t CorrId,
                                                                      size_t size, void *ic_opaque);
typedef rd_kafka_resp_err_t(rd_kafka_interceptor_f_on_response_received_t)(
    rd_kafka_t *rk, int sockfd, const char *brokername, int32_t brokerid, int16_t ApiKey, int16_t ApiVersion,
    int32_t CorrId, size_t size, int64_t rtt, rd_kafka_resp_err_t err, void *ic_opaque);
rd_kafka_resp_err_t rd_kafka_conf_interceptor_add_on_new(rd_kafka_conf_t *conf, const char *ic_name,
                                                         rd_kafka_interceptor_f_on_new_t *on_new,
                                                         void *ic_opaque);
rd_kafka_resp_err_t
rd_kafka_interceptor_add_on_request_sent(rd_kafka_t *rk, const char *ic_name,
                                         rd_kafka_interceptor_f_on_request_sent_t *on_request_sent,
                                         void *ic_opaque);
rd_kafka_resp_err_t rd_kafka_interceptor_add_on_response_received(
    rd_kafka_t *rk, const char *ic_name, rd_kafka_interceptor_f_on_response_received_t *on_response_received,
    void *ic_opaque);

/* ---- admin: a group's committed offsets, answered on a queue ------------------- */
typedef struct rd_kafka_AdminOptions_s rd_kafka_AdminOptions_t;
typedef struct rd_kafka_ListConsumerGroupOffsets_s rd_kafka_ListConsumerGroupOffsets_t;
typedef struct rd_kafka_group_result_s rd_kafka_group_result_t;
typedef rd_kafka_event_t rd_kafka_ListConsumerGroupOffsets_result_t;
typedef enum {
    RD_KAFKA_ADMIN_OP_ANY = 0,
    RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPOFFSETS = 14
} rd_kafka_admin_op_t;
rd_kafka_AdminOptions_t *rd_kafka_AdminOptions_new(rd_kafka_t *rk, rd_kafka_admin_op_t for_api);
void rd_kafka_AdminOptions_destroy(rd_kafka_AdminOptions_t *options);
rd_kafka_resp_err_t rd_kafka_AdminOptions_set_request_timeout(rd_kafka_AdminOptions_t *options,
                                                              int timeout_ms, char *errstr,
                                                              size_t errstr_size);
rd_kafka_error_t *rd_kafka_AdminOptions_set_require_stable_offsets(rd_kafka_AdminOptions_t *options,
                                                                   int true_or_false);
rd_kafka_ListConsumerGroupOffsets_t *
rd_kafka_ListConsumerGroupOffsets_new(const char *group_id,
                                      const rd_kafka_topic_partition_list_t *partitions);
void rd_kafka_ListConsumerGroupOffsets_destroy(rd_kafka_ListConsumerGroupOffsets_t *list_grpoffsets);
void rd_kafka_ListConsumerGroupOffsets(rd_kafka_t *rk, rd_kafka_ListConsumerGroupOffsets_t **list_grpoffsets,
                                       size_t list_grpoffsets_cnt, const rd_kafka_AdminOptions_t *options,
                                       rd_kafka_queue_t *rkqu);
const rd_kafka_ListConsumerGroupOffsets_result_t *
rd_kafka_event_ListConsumerGroupOffsets_result(rd_kafka_event_t *rkev);
const rd_kafka_group_result_t **
rd_kafka_ListConsumerGroupOffsets_result_groups(const rd_kafka_ListConsumerGroupOffsets_result_t *result,
                                                size_t *cntp);
const rd_kafka_error_t *rd_kafka_group_result_error(const rd_kafka_group_result_t *groupres);
const rd_kafka_topic_partition_list_t *
rd_kafka_group_result_partitions(const rd_kafka_group_result_t *groupres);

/* ---- admin: offsets by timestamp (ListOffsets, librdkafka >= 2.3), answered on a queue ---- */
typedef enum rd_kafka_IsolationLevel_t {
    RD_KAFKA_ISOLATION_LEVEL_READ_UNCOMMITTED = 0,
    RD_KAFKA_ISOLATION_LEVEL_READ_COMMITTED = 1
} rd_kafka_IsolationLevel_t;
#define RD_KAFKA_OFFSET_SPEC_LATEST ((int64_t)-1)
rd_kafka_error_t *rd_kafka_AdminOptions_set_isolation_level(rd_kafka_AdminOptions_t *options,
                                                            rd_kafka_IsolationLevel_t value);
typedef struct rd_kafka_ListOffsetsResultInfo_s rd_kafka_ListOffsetsResultInfo_t;
typedef rd_kafka_event_t rd_kafka_ListOffsets_result_t;
void rd_kafka_ListOffsets(rd_kafka_t *rk, rd_kafka_topic_partition_list_t *topic_partitions,
                          const rd_kafka_AdminOptions_t *options, rd_kafka_queue_t *rkqu);
const rd_kafka_ListOffsets_result_t *rd_kafka_event_ListOffsets_result(rd_kafka_event_t *rkev);
const rd_kafka_ListOffsetsResultInfo_t **
rd_kafka_ListOffsets_result_infos(const rd_kafka_ListOffsets_result_t *result, size_t *cntp);
const rd_kafka_topic_partition_t *
rd_kafka_ListOffsetsResultInfo_topic_partition(const rd_kafka_ListOffsetsResultInfo_t *result_info);
int64_t rd_kafka_ListOffsetsResultInfo_timestamp(const rd_kafka_ListOffsetsResultInfo_t *result_info);

/* ---- mock cluster (the embedded broker) ----------------------------------------- */
rd_kafka_mock_cluster_t *rd_kafka_mock_cluster_new(rd_kafka_t *rk, int broker_cnt);
void rd_kafka_mock_cluster_destroy(rd_kafka_mock_cluster_t *mcluster);
rd_kafka_t *rd_kafka_mock_cluster_handle(const rd_kafka_mock_cluster_t *mcluster);
rd_kafka_mock_cluster_t *rd_kafka_handle_mock_cluster(const rd_kafka_t *rk);
const char *rd_kafka_mock_cluster_bootstraps(const rd_kafka_mock_cluster_t *mcluster);
void rd_kafka_mock_clear_request_errors(rd_kafka_mock_cluster_t *mcluster, int16_t ApiKey);
void rd_kafka_mock_push_request_errors_array(rd_kafka_mock_cluster_t *mcluster, int16_t ApiKey, size_t cnt,
                                             const rd_kafka_resp_err_t *errors);
rd_kafka_resp_err_t rd_kafka_mock_broker_push_request_error_rtts(rd_kafka_mock_cluster_t *mcluster,
                                                                 int32_t broker_id, int16_t ApiKey,
                                                                 size_t cnt, ...);
void rd_kafka_mock_topic_set_error(rd_kafka_mock_cluster_t *mcluster, const char *topic,
                                   rd_kafka_resp_err_t err);
rd_kafka_resp_err_t rd_kafka_mock_topic_create(rd_kafka_mock_cluster_t *mcluster, const char *topic,
                                               int partition_cnt, int replication_factor);
rd_kafka_resp_err_t rd_kafka_mock_partition_set_leader(rd_kafka_mock_cluster_t *mcluster, const char *topic,
                                                       int32_t partition, int32_t broker_id);
rd_kafka_resp_err_t rd_kafka_mock_partition_set_follower(rd_kafka_mock_cluster_t *mcluster, const char *topic,
                                                         int32_t partition, int32_t broker_id);
rd_kafka_resp_err_t rd_kafka_mock_broker_set_down(rd_kafka_mock_cluster_t *mcluster, int32_t broker_id);
rd_kafka_resp_err_t rd_kafka_mock_broker_set_up(rd_kafka_mock_cluster_t *mcluster, int32_t broker_id);
rd_kafka_resp_err_t rd_kafka_mock_broker_set_rtt(rd_kafka_mock_cluster_t *mcluster, int32_t broker_id,
                                                 int rtt_ms);
rd_kafka_resp_err_t rd_kafka_mock_coordinator_set(rd_kafka_mock_cluster_t *mcluster, const char *key_type,
                                                  const char *key, int32_t broker_id);
void rd_kafka_mock_group_initial_rebalance_delay_ms(rd_kafka_mock_cluster_t *mcluster, int32_t delay_ms);

#ifdef __cplusplus
}
#endif
#endif
