/*
 * kc_alloc_owned(): whether the bundled jemalloc allocated a pointer (csrc/alloc/bound_alloc.c
 * explains why a bound librdkafka needs to know).  Compiled against jemalloc's build tree: it is
 * the one file that uses jemalloc's internal headers, so their renaming macros (malloc -> je_...)
 * stay out of bound_alloc.c, which calls the process's own free()/realloc().
 */
#include "jemalloc/internal/jemalloc_preamble.h"
#include "jemalloc/internal/jemalloc_internal_includes.h"
#include "jemalloc/internal/emap.h"

#include "bound_alloc.h"

/* A lock-free page-map lookup that, unlike free()'s own, tolerates addresses jemalloc never mapped
 * (before jemalloc's first allocation the map is empty and every pointer is foreign). */
bool kc_alloc_owned(const void *ptr) {
    emap_full_alloc_ctx_t ctx;
    if (emap_full_alloc_ctx_try_lookup(tsdn_fetch(), &arena_emap_global, ptr, &ctx)) {
        return false;
    }
    return ctx.edata != NULL;
}
