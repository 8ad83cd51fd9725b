/* owner_gate: where a close() of another thread waits for a consumer call to end (the thread contract,
 * kipconsumer/_owned.pyx).
 *
 * A generation counter under a mutex and a condition (CLOCK_MONOTONIC, the kc_now_us() clock). The
 * owner's thread opens the gate (the generation moves on) when it lets go; a waiter reads the
 * generation while it still sees an owner, then waits without the GIL until the generation moves or
 * its slice ends. The mutex is held only inside these functions, never across a wait's return, so
 * nothing a signal interrupts can leave it held. No Python. */
#ifndef KC_OWNER_GATE_H
#define KC_OWNER_GATE_H

#include <pthread.h>
#include <stdint.h>

typedef struct kc_owner_gate {
    pthread_mutex_t m;
    pthread_cond_t c;
    uint64_t generation;
} kc_owner_gate_t;

/* Initialises the gate; also in a child made by fork() (where a thread of the parent may have held
 * the mutex), over the inherited one without destroying it. */
void kc_owner_gate_init(kc_owner_gate_t *g);
void kc_owner_gate_destroy(kc_owner_gate_t *g);
/* The current generation. */
uint64_t kc_owner_gate_generation(kc_owner_gate_t *g);
/* Moves the generation on and wakes every waiter. */
void kc_owner_gate_open(kc_owner_gate_t *g);
/* Waits until the generation is no longer `seen` or kc_now_us() reaches `until_us`. */
void kc_owner_gate_wait(kc_owner_gate_t *g, uint64_t seen, int64_t until_us);

#endif
