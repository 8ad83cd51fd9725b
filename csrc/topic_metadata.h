/* topic_metadata: one topic's partition ids from a metadata request, for any client handle (the
 * producer's partitions_for() and send() to an unknown partition, the consumer's partitions_for()).
 *
 * Contract: one rd_kafka_metadata() call for the topic, bounded by timeout_ms (at least 1 ms); no
 * retry (callers wait in slices, checking signals and close() in between). Never takes the GIL. */
#ifndef KC_TOPIC_METADATA_H
#define KC_TOPIC_METADATA_H

#include <stdint.h>

#include "rdk.h"

/* Returns the request's or the topic's error; a topic without partitions is LEADER_NOT_AVAILABLE
 * (being created). On success *cntp is the partition count and *idsp (malloc'd, free() it) the
 * partition ids; on error *cntp is 0 and *idsp NULL. */
rd_kafka_resp_err_t kc_topic_partition_ids(rd_kafka_t *rk, rd_kafka_topic_t *rkt, int timeout_ms, int *cntp,
                                           int32_t **idsp);

#endif
