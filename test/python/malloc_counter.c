/* Counts the bytes malloc'd and not yet freed, and their peak (resettable), for the
   whole process: built as an LD_PRELOAD library (glibc) by test_checkpoint_memory.py and
   bench/checkpoint_memory.py, read through ctypes.CDLL(None). */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stddef.h>
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);
extern void __libc_free(void *);
static long long cur, peak;
static void *add(void *p) {
    if (p) {
        long long c = __atomic_add_fetch(&cur, (long long)malloc_usable_size(p), __ATOMIC_RELAXED);
        long long pk = __atomic_load_n(&peak, __ATOMIC_RELAXED);
        while (c > pk && !__atomic_compare_exchange_n(&peak, &pk, c, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
    }
    return p;
}
static void sub(void *p) { if (p) __atomic_sub_fetch(&cur, (long long)malloc_usable_size(p), __ATOMIC_RELAXED); }
void *malloc(size_t n) { return add(__libc_malloc(n)); }
void *calloc(size_t a, size_t b) { return add(__libc_calloc(a, b)); }
void free(void *p) { sub(p); __libc_free(p); }
void *realloc(void *p, size_t n) {
    sub(p);
    void *q = __libc_realloc(p, n);
    add(q ? q : (n ? p : NULL));  /* failed: p is still there */
    return q;
}
void *reallocarray(void *p, size_t a, size_t b) {
    size_t n;
    if (__builtin_mul_overflow(a, b, &n)) { errno = ENOMEM; return NULL; }
    return realloc(p, n);
}
void *memalign(size_t a, size_t n) { return add(__libc_memalign(a, n)); }
void *aligned_alloc(size_t a, size_t n) { return add(__libc_memalign(a, n)); }
void *valloc(size_t n) { return add(__libc_valloc(n)); }
void *pvalloc(size_t n) { return add(__libc_pvalloc(n)); }
int posix_memalign(void **r, size_t a, size_t n) {
    void *p = __libc_memalign(a, n);
    if (!p) return ENOMEM;
    *r = add(p);
    return 0;
}
long long mirax_malloc_current(void) { return __atomic_load_n(&cur, __ATOMIC_RELAXED); }
long long mirax_malloc_peak(void) { return __atomic_load_n(&peak, __ATOMIC_RELAXED); }
void mirax_malloc_reset_peak(void) { __atomic_store_n(&peak, __atomic_load_n(&cur, __ATOMIC_RELAXED), __ATOMIC_RELAXED); }
