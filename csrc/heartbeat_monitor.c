#include "heartbeat_monitor.h"
#include "poll_timer.h"

#include <stdlib.h>
#include <string.h>

#define KC_APIKEY_HEARTBEAT 12
/* KIP-848 (group.protocol=consumer): the member's heartbeat is ConsumerGroupHeartbeat */
#define KC_APIKEY_CONSUMER_GROUP_HEARTBEAT 68

static int is_heartbeat(int16_t api_key) {
    return api_key == KC_APIKEY_HEARTBEAT || api_key == KC_APIKEY_CONSUMER_GROUP_HEARTBEAT;
}

kc_heartbeat_monitor_t *kc_hb_new(void) {
    kc_heartbeat_monitor_t *hb = malloc(sizeof(*hb));
    if (hb)
        kc_hb_init(hb);
    return hb;
}

void kc_hb_free(kc_heartbeat_monitor_t *hb) {
    free(hb);
}

void kc_hb_init(kc_heartbeat_monitor_t *hb) {
    atomic_store(&hb->last_ok_ms, 0);
    atomic_store(&hb->last_any_ms, 0);
    atomic_store(&hb->ok, 0);
    atomic_store(&hb->errors, 0);
    atomic_store(&hb->last_error, 0);
    atomic_store(&hb->outstanding, 0);
}

static rd_kafka_resp_err_t on_request_sent(rd_kafka_t *rk, int sockfd, const char *brokername,
                                           int32_t brokerid, int16_t ApiKey, int16_t ApiVersion,
                                           int32_t CorrId, size_t size, void *ic_opaque) {
    (void)rk;
    (void)sockfd;
    (void)brokername;
    (void)brokerid;
    (void)ApiVersion;
    (void)CorrId;
    (void)size;
    if (is_heartbeat(ApiKey))
        atomic_fetch_add(&((kc_heartbeat_monitor_t *)ic_opaque)->outstanding, 1);
    return RD_KAFKA_RESP_ERR_NO_ERROR;
}

static rd_kafka_resp_err_t on_response_received(rd_kafka_t *rk, int sockfd, const char *brokername,
                                                int32_t brokerid, int16_t ApiKey, int16_t ApiVersion,
                                                int32_t CorrId, size_t size, int64_t rtt,
                                                rd_kafka_resp_err_t err, void *ic_opaque) {
    (void)rk;
    (void)sockfd;
    (void)brokername;
    (void)brokerid;
    (void)ApiVersion;
    (void)CorrId;
    (void)size;
    (void)rtt;
    if (!is_heartbeat(ApiKey))
        return RD_KAFKA_RESP_ERR_NO_ERROR;
    kc_heartbeat_monitor_t *hb = ic_opaque;
    /* librdkafka 2.16 invokes this hook twice per response (identical arguments,
     * CorrId 0): count a response only against a request still outstanding. */
    int32_t n = atomic_load(&hb->outstanding);
    do {
        if (n <= 0)
            return RD_KAFKA_RESP_ERR_NO_ERROR;
    } while (!atomic_compare_exchange_weak(&hb->outstanding, &n, n - 1));
    int64_t now = kc_now_ms();
    atomic_store(&hb->last_any_ms, now);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        atomic_store(&hb->last_ok_ms, now);
        atomic_fetch_add(&hb->ok, 1);
    } else {
        atomic_fetch_add(&hb->errors, 1);
        atomic_store(&hb->last_error, (int32_t)err);
    }
    return RD_KAFKA_RESP_ERR_NO_ERROR;
}

static rd_kafka_resp_err_t on_new(rd_kafka_t *rk, const rd_kafka_conf_t *conf, void *ic_opaque, char *errstr,
                                  size_t errstr_size) {
    (void)conf;
    (void)errstr;
    (void)errstr_size;
    rd_kafka_resp_err_t err =
        rd_kafka_interceptor_add_on_request_sent(rk, "kipconsumer.heartbeat", on_request_sent, ic_opaque);
    if (err)
        return err;
    return rd_kafka_interceptor_add_on_response_received(rk, "kipconsumer.heartbeat", on_response_received,
                                                         ic_opaque);
}

int kc_hb_install(rd_kafka_conf_t *conf, kc_heartbeat_monitor_t *hb) {
    return rd_kafka_conf_interceptor_add_on_new(conf, "kipconsumer.heartbeat", on_new, hb) ==
                   RD_KAFKA_RESP_ERR_NO_ERROR
               ? 0
               : -1;
}
