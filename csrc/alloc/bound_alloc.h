/*
 * The allocator functions a bound librdkafka imports instead of libc's: scripts/native_bundle.py
 * renames its imports of malloc/calloc/posix_memalign/aligned_alloc/memalign to jemalloc's
 * prefixed functions (kcje_*) and those below to these.  Built into libkipconsumer-jemalloc.so.2
 * with jemalloc's objects, never into an extension module.
 *
 * Contract:
 *  - memory they return comes from the bundled jemalloc;
 *  - kc_alloc_free() and kc_alloc_realloc() also take memory from the process's own allocator:
 *    a C API such as librdkafka's takes ownership of buffers its caller allocated (a topic
 *    partition's metadata strdup()ed by an application, as confluent-kafka does), so a pointer
 *    jemalloc does not know goes to the process's free()/realloc();
 *    With KIPCONSUMER_ALLOC_STRICT=1 in the environment (read once, at load) such a pointer aborts
 *    the process instead, naming the function: tests use it to prove kipconsumer itself hands
 *    librdkafka only memory from rd_kafka_mem_malloc();
 *  - strdup/strndup/realpath(path, NULL) return jemalloc memory: librdkafka frees what they return
 *    with its (bound) free.
 */
#ifndef KC_BOUND_ALLOC_H
#define KC_BOUND_ALLOC_H

#include <stdbool.h>
#include <stddef.h>

#define KC_ALLOC_STRICT_ENV "KIPCONSUMER_ALLOC_STRICT"
#define KC_ALLOC_EXPORT     __attribute__((visibility("default")))

bool kc_alloc_owned(const void *ptr);

KC_ALLOC_EXPORT void kc_alloc_free(void *ptr);
KC_ALLOC_EXPORT void *kc_alloc_realloc(void *ptr, size_t size);
KC_ALLOC_EXPORT char *kc_alloc_strdup(const char *s);
KC_ALLOC_EXPORT char *kc_alloc_strndup(const char *s, size_t max);
KC_ALLOC_EXPORT char *kc_alloc_realpath(const char *path, char *resolved);

#endif
