/* topic_metadata: see topic_metadata.h. */
#include "topic_metadata.h"

#include <stdlib.h>

rd_kafka_resp_err_t kc_topic_partition_ids(rd_kafka_t *rk, rd_kafka_topic_t *rkt, int timeout_ms, int *cntp,
                                           int32_t **idsp) {
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t err;
    *cntp = 0;
    *idsp = NULL;
    if (timeout_ms < 1)
        timeout_ms = 1;
    err = rd_kafka_metadata(rk, 0, rkt, &md, timeout_ms);
    if (err)
        return err;
    if (md->topic_cnt < 1) {
        rd_kafka_metadata_destroy(md);
        return RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
    }
    err = md->topics[0].err;
    if (!err && md->topics[0].partition_cnt < 1)
        err = RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE;
    if (!err) {
        int cnt = md->topics[0].partition_cnt;
        int32_t *ids = malloc(sizeof(*ids) * (size_t)cnt);
        if (!ids) {
            rd_kafka_metadata_destroy(md);
            return RD_KAFKA_RESP_ERR__FAIL;
        }
        for (int i = 0; i < cnt; i++)
            ids[i] = md->topics[0].partitions[i].id;
        *cntp = cnt;
        *idsp = ids;
    }
    rd_kafka_metadata_destroy(md);
    return err;
}
