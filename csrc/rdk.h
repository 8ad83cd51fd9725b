/* Single include point for librdkafka.
 *
 * We compile against Debian's librdkafka-dev headers (2.0.2) and link against the
 * librdkafka 2.16 shared library shipped in the confluent-kafka wheel.  The few
 * symbols that are newer than the headers are declared here by their public,
 * documented signatures; librdkafka_version() reports what is actually loaded. */
#ifndef KC_RDK_H
#define KC_RDK_H

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#ifdef __cplusplus
extern "C" {
#endif

/* librdkafka >= 2.x (mock cluster): delay of the first JoinGroup of a new group. */
void rd_kafka_mock_group_initial_rebalance_delay_ms(rd_kafka_mock_cluster_t *mcluster,
                                                    int32_t delay_ms);

#ifdef __cplusplus
}
#endif
#endif
