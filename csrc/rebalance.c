/* rebalance: see rebalance.h. */
#include "rebalance.h"

rd_kafka_error_t *kc_answer_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                                      const rd_kafka_topic_partition_list_t *parts, int cooperative) {
    if (cooperative) {
        if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS)
            return rd_kafka_incremental_assign(rk, parts);
        return rd_kafka_incremental_unassign(rk, parts);
    }
    rd_kafka_assign(rk, err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS ? parts : NULL);
    return NULL;
}
