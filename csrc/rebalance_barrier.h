/* rebalance_barrier: the consumer's rule that no records are handed out while the group rebalances
 * (Java's: a member that learned of a rebalance rejoins before it processes more), its state and the
 * setters that are the state's only writers (consumer_core.c's poll reads the rule; the Cython layer
 * notes rebalance callbacks and refused commits through the setters and asks the rule through
 * kc_consumer_rebalance_pending / kc_consumer_rejoining). Header only: static inline, no Python,
 * not thread-safe (the owner of the consumer calls it). */
#ifndef KC_REBALANCE_BARRIER_H
#define KC_REBALANCE_BARRIER_H

#include <stdatomic.h>
#include <stdint.h>
#include "rdk.h"
#include "heartbeat_monitor.h"

/* The consumer's rebalance barrier (kc_consumer_t.barrier). */
typedef struct kc_rebalance_barrier {
    int enabled;               /* hold records back while the group rebalances (Java's rule) */
    int64_t last_rebalance_ms; /* monotonic ms of the last assign/revoke callback */
    int64_t commit_refused_ms; /* monotonic ms a commit was last refused because the group is
                                  rebalancing or moved on */
} kc_rebalance_barrier_t;

static inline void kc_rebalance_barrier_init(kc_rebalance_barrier_t *b) {
    b->enabled = 1;
    b->last_rebalance_ms = 0;
    b->commit_refused_ms = 0;
}

/* A rebalance callback (assign or revoke) ran at `now_ms`. */
static inline void kc_barrier_rebalanced(kc_rebalance_barrier_t *b, int64_t now_ms) {
    b->last_rebalance_ms = now_ms;
}

/* A commit was refused at `now_ms` because the group is rebalancing or has moved on. */
static inline void kc_barrier_commit_refused(kc_rebalance_barrier_t *b, int64_t now_ms) {
    b->commit_refused_ms = now_ms;
}

/* The newer of the last successful Heartbeat and the last rebalance callback: what the rule counts
 * from. */
static inline int64_t kc_barrier_since(const kc_rebalance_barrier_t *b, kc_heartbeat_monitor_t *hb) {
    int64_t last_ok = atomic_load(&hb->last_ok_ms);
    return last_ok > b->last_rebalance_ms ? last_ok : b->last_rebalance_ms;
}

/* True if a Heartbeat was answered REBALANCE_IN_PROGRESS after the last rebalance callback and no
 * successful Heartbeat followed: librdkafka is rejoining the group (by itself, without the
 * application). Whether or not the barrier is enabled. */
static inline int kc_barrier_rejoining(const kc_rebalance_barrier_t *b, kc_heartbeat_monitor_t *hb) {
    return atomic_load(&hb->last_any_ms) > kc_barrier_since(b, hb) &&
           atomic_load(&hb->last_error) == RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS;
}

/* The rule. True while the member is rejoining (kc_barrier_rejoining), or a commit was refused
 * because the group is rebalancing or has moved on (commit_refused_ms), after the last rebalance
 * callback and no successful Heartbeat followed: the member must rejoin before it processes more, as
 * the Java consumer does, so records of partitions about to move are not handed out. */
static inline int kc_rebalance_barrier_holds(const kc_rebalance_barrier_t *b, kc_heartbeat_monitor_t *hb) {
    if (!b->enabled)
        return 0;
    /* a heartbeat learned that the group is joining */
    if (kc_barrier_rejoining(b, hb))
        return 1;
    /* a commit learned it first (heartbeats are seconds apart; commits often are not) */
    return b->commit_refused_ms > kc_barrier_since(b, hb);
}

#endif
