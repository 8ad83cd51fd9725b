/* heartbeat_monitor: observes the group heartbeats librdkafka's background threads send.
 *
 * Installed as a librdkafka interceptor (on_response_received), so it sees every
 * Heartbeat response (ConsumerGroupHeartbeat with group.protocol=consumer, KIP-848) on the
 * thread that received it, without the GIL. It only counts and timestamps; librdkafka sends
 * the heartbeats. */
#ifndef KC_HEARTBEAT_MONITOR_H
#define KC_HEARTBEAT_MONITOR_H

#include <stdint.h>
#include <stdatomic.h>
#include "rdk.h"

typedef struct kc_heartbeat_monitor {
    _Atomic int64_t last_ok_ms;  /* monotonic ms of the last successful Heartbeat response */
    _Atomic int64_t last_any_ms; /* ... of the last Heartbeat response, error or not */
    _Atomic uint64_t ok;         /* successful Heartbeat responses */
    _Atomic uint64_t errors;     /* Heartbeat responses with an error (e.g. REBALANCE_IN_PROGRESS) */
    _Atomic int32_t last_error;  /* rd_kafka_resp_err_t of the last failed Heartbeat */
    _Atomic int32_t outstanding; /* Heartbeat requests sent and not yet answered */
} kc_heartbeat_monitor_t;

/* A zeroed monitor; NULL on OOM. librdkafka's threads write to it until rd_kafka_destroy()
 * of the handle it is installed on has returned: free it (kc_hb_free) only after that. */
kc_heartbeat_monitor_t *kc_hb_new(void);
void kc_hb_free(kc_heartbeat_monitor_t *hb);
void kc_hb_init(kc_heartbeat_monitor_t *hb);
/* Registers the monitor on `conf`; call before rd_kafka_new(). 0 on success. */
int kc_hb_install(rd_kafka_conf_t *conf, kc_heartbeat_monitor_t *hb);

#endif
