/* owner_lock: the lock that guards a consumer's fetch buffer, pending errors and seek guard once a
 * second thread (the prefetch thread, prefetch_thread.h) shares them with the application's thread.
 *
 * A mutex that one thread may hold several levels deep and release completely while it waits.
 * The application's thread holds it for the whole of each consumer call (KafkaConsumer's thread
 * contract takes it when a call starts and releases it when the outermost call returns; calls made
 * from callbacks on that thread nest), and kc_consumer_poll() releases it only while it waits
 * (kc_owner_release_all / kc_owner_reacquire). Another thread only tries the mutex (`m`) and steps
 * back while `wanted` says the owner waits for it. No Python; knows nothing of the consumer. */
#ifndef KC_OWNER_LOCK_H
#define KC_OWNER_LOCK_H

#include <pthread.h>
#include <stdatomic.h>

typedef struct kc_owner_lock {
    pthread_mutex_t m;
    _Atomic unsigned long owner; /* pthread_self() of the holder, 0 if none */
    int depth;                   /* levels held by the owner (touched by the holder only) */
    _Atomic int wanted;          /* threads waiting in kc_owner_hold(): the prefetch thread yields */
} kc_owner_lock_t;

void kc_owner_lock_init(kc_owner_lock_t *l);
void kc_owner_lock_destroy(kc_owner_lock_t *l);
/* Takes one level (waits for another holder). */
void kc_owner_hold(kc_owner_lock_t *l);
/* Releases one level; the lock is free when the last level is released. */
void kc_owner_release(kc_owner_lock_t *l);
/* 1 if the calling thread holds the lock. */
int kc_owner_held(kc_owner_lock_t *l);
/* Releases every level the calling thread holds and returns how many (0: it held none). */
int kc_owner_release_all(kc_owner_lock_t *l);
/* Takes the lock again `depth` levels deep (after kc_owner_release_all; nothing if 0). */
void kc_owner_reacquire(kc_owner_lock_t *l, int depth);

#endif
