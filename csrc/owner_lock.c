/* owner_lock: see owner_lock.h. */
#include "owner_lock.h"

void kc_owner_lock_init(kc_owner_lock_t *l) {
    pthread_mutex_init(&l->m, NULL);
    atomic_store(&l->owner, 0);
    l->depth = 0;
    atomic_store(&l->wanted, 0);
}

void kc_owner_lock_destroy(kc_owner_lock_t *l) {
    pthread_mutex_destroy(&l->m);
}

int kc_owner_held(kc_owner_lock_t *l) {
    return atomic_load(&l->owner) == (unsigned long)pthread_self();
}

void kc_owner_hold(kc_owner_lock_t *l) {
    if (kc_owner_held(l)) {
        l->depth++;
        return;
    }
    atomic_fetch_add(&l->wanted, 1);
    pthread_mutex_lock(&l->m);
    atomic_fetch_sub(&l->wanted, 1);
    atomic_store(&l->owner, (unsigned long)pthread_self());
    l->depth = 1;
}

void kc_owner_release(kc_owner_lock_t *l) {
    if (!kc_owner_held(l))
        return;
    if (--l->depth > 0)
        return;
    atomic_store(&l->owner, 0);
    pthread_mutex_unlock(&l->m);
}

int kc_owner_release_all(kc_owner_lock_t *l) {
    if (!kc_owner_held(l))
        return 0;
    int depth = l->depth;
    l->depth = 0;
    atomic_store(&l->owner, 0);
    pthread_mutex_unlock(&l->m);
    return depth;
}

void kc_owner_reacquire(kc_owner_lock_t *l, int depth) {
    if (depth <= 0)
        return;
    kc_owner_hold(l);
    l->depth = depth;
}
