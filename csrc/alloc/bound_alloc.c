/* See bound_alloc.h for the contract.  No jemalloc internals here: free()/realloc() below are the
 * process's own. */
#define _GNU_SOURCE
#include "bound_alloc.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* jemalloc's public functions, renamed by its configure's --with-jemalloc-prefix=kcje_. */
void *kcje_malloc(size_t size);
void kcje_free(void *ptr);
void *kcje_realloc(void *ptr, size_t size);

/* jemalloc's options for the bound librdkafka, through jemalloc's documented malloc_conf global
 * ($KCJE_MALLOC_CONF still overrides each).
 * - oversize_threshold:0 keeps allocations above 8 MiB in the ordinary arenas: above it jemalloc gives
 *   them an arena of its own whose freed pages go back to the system at once, and librdkafka's buffer
 *   for a fetch response of more than 8 partitions x max.partition.fetch.bytes (1 MiB) is that large,
 *   so every response faulted fresh pages in.
 * - background_thread:true, max_background_threads:1: one jemalloc thread returns freed pages to the
 *   system (its decay, dirty_decay_ms). Without it whichever thread frees or allocates when a decay
 *   step is due does the purging, and after an idle second that was the application's poll(),
 *   freeing the previous batch's messages: 0.5-2.5 ms of madvise() in a poll that otherwise takes
 *   0.15 ms (docs/benchmarks.md, "Poll latency"). A forked child runs without the
 *   thread (jemalloc's fork handlers stop it there) and purges inline again. */
KC_ALLOC_EXPORT const char *kcje_malloc_conf =
    "oversize_threshold:0,background_thread:true,max_background_threads:1";

static int kc_alloc_strict;

__attribute__((constructor)) static void kc_alloc_read_env(void) {
    const char *v = getenv(KC_ALLOC_STRICT_ENV);
    kc_alloc_strict = v != NULL && v[0] == '1';
}

/* A foreign pointer reached librdkafka's free/realloc: tolerated, unless the strict mode (tests)
 * asks for a loud stop. */
static void kc_alloc_foreign(const void *ptr, const char *fn) {
    if (kc_alloc_strict) {
        fprintf(stderr,
                "kipconsumer: librdkafka's %s() got %p, which its bundled jemalloc did not allocate\n", fn,
                ptr);
        abort();
    }
}

void kc_alloc_free(void *ptr) {
    if (ptr == NULL) {
        return;
    }
    if (kc_alloc_owned(ptr)) {
        kcje_free(ptr);
    } else {
        kc_alloc_foreign(ptr, "free");
        free(ptr);
    }
}

void *kc_alloc_realloc(void *ptr, size_t size) {
    if (ptr == NULL || kc_alloc_owned(ptr)) {
        return kcje_realloc(ptr, size);
    }
    kc_alloc_foreign(ptr, "realloc");
    return realloc(ptr, size);
}

char *kc_alloc_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = kcje_malloc(n);
    if (d != NULL) {
        memcpy(d, s, n);
    }
    return d;
}

char *kc_alloc_strndup(const char *s, size_t max) {
    size_t n = strnlen(s, max);
    char *d = kcje_malloc(n + 1);
    if (d != NULL) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

char *kc_alloc_realpath(const char *path, char *resolved) {
    char buf[PATH_MAX];
    if (resolved != NULL) {
        return realpath(path, resolved);
    }
    if (realpath(path, buf) == NULL) {
        return NULL;
    }
    return kc_alloc_strdup(buf);
}
