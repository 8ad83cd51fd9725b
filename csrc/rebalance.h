/* rebalance: the *assign() call that answers a rebalance event, for every path that serves one:
 * poll()'s rebalance callback (_consumer_membership.pxi), close() (_consumer_close.pxi) and the
 * reaper (consumer_close.c). No Python; no state. */
#ifndef KC_REBALANCE_H
#define KC_REBALANCE_H

#include "rdk.h"

/* The *assign() call that answers a rebalance event `err` (ASSIGN_PARTITIONS or
 * REVOKE_PARTITIONS) naming `parts`, for the group's protocol: incremental (un)assign when
 * `cooperative`, else assign(parts) or assign(NULL). Returns librdkafka's error object of an
 * incremental call (the caller destroys or reports it), else NULL. Once the group handle is
 * terminating, librdkafka treats any such call as a full unassign, whatever it names. */
rd_kafka_error_t *kc_answer_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                                      const rd_kafka_topic_partition_list_t *parts, int cooperative);

#endif
