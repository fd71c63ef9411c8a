/* The walks of mirax's Python passes, in C: the ops under a root whose names a pass
 * wants, found through MLIR's C API instead of one Python callback per op (~0.75 us an
 * op in the bindings; a transformer step's passes visited 460,000 ops).
 *
 * Built and loaded by lowering/native_walk.py; every function takes and returns raw
 * MLIR C API pointers (MlirOperation.ptr, MlirIdentifier.ptr: names are uniqued in their
 * context, so equal names have equal pointers). Results are malloc'd: mirax_free them.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mlir-c/IR.h"

/* An open-addressing set of pointers (names), grown at half full. */
typedef struct {
  const void **slots;
  size_t mask, count;
} PtrSet;

static size_t slot_of(const void *p, size_t mask) {
  uintptr_t h = (uintptr_t)p;
  h ^= h >> 17;
  h *= 0x9E3779B97F4A7C15ull;
  return (size_t)(h >> 20) & mask;
}

static int set_init(PtrSet *s, size_t capacity) {
  size_t n = 64;
  while (n < 2 * capacity) n *= 2;
  s->slots = calloc(n, sizeof *s->slots);
  s->mask = n - 1;
  s->count = 0;
  return s->slots != NULL;
}

static int set_has(const PtrSet *s, const void *p) {
  for (size_t i = slot_of(p, s->mask);; i = (i + 1) & s->mask) {
    if (s->slots[i] == p) return 1;
    if (s->slots[i] == NULL) return 0;
  }
}

/* Adds `p`; returns 1 if it was new, 0 if present, -1 when out of memory. */
static int set_add(PtrSet *s, const void *p) {
  if (2 * (s->count + 1) > s->mask + 1) {
    PtrSet bigger;
    if (!set_init(&bigger, 2 * (s->count + 1))) return -1;
    for (size_t i = 0; i <= s->mask; i++)
      if (s->slots[i]) set_add(&bigger, s->slots[i]); /* (room for all: no growth here) */
    free(s->slots);
    *s = bigger;
  }
  size_t i = slot_of(p, s->mask);
  for (; s->slots[i] != NULL; i = (i + 1) & s->mask)
    if (s->slots[i] == p) return 0;
  s->slots[i] = p;
  s->count++;
  return 1;
}

/* A growing array of pointers (the result). */
typedef struct {
  const void **items;
  size_t len, cap;
  int failed;
} PtrList;

static void push(PtrList *l, const void *p) {
  if (l->len == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 256;
    const void **items = realloc(l->items, cap * sizeof *items);
    if (!items) {
      l->failed = 1;
      return;
    }
    l->items = items;
    l->cap = cap;
  }
  l->items[l->len++] = p;
}

typedef struct {
  const void *root;
  PtrSet names; /* distinct_names: those seen; matching_ops: those wanted */
  PtrList out;
} Walk;

static MlirWalkResult visit_names(MlirOperation op, void *data) {
  Walk *w = data;
  if (op.ptr == w->root) return MlirWalkResultAdvance;
  const void *name = mlirOperationGetName(op).ptr;
  int added = set_add(&w->names, name);
  if (added > 0) push(&w->out, name);
  return added < 0 || w->out.failed ? MlirWalkResultInterrupt : MlirWalkResultAdvance;
}

static MlirWalkResult visit_ops(MlirOperation op, void *data) {
  Walk *w = data;
  if (op.ptr != w->root && set_has(&w->names, mlirOperationGetName(op).ptr)) push(&w->out, op.ptr);
  return w->out.failed ? MlirWalkResultInterrupt : MlirWalkResultAdvance;
}

/* The distinct names of the ops nested in `root`, in first-seen order: their identifiers
 * in *ids and their characters in *chars, each followed by a 0 byte, *size bytes in all
 * (mirax_free both); their count returned, -1 when out of memory. */
long mirax_distinct_names(void *root, const void ***ids, char **chars, long *size) {
  Walk w = {root, {0}, {0}};
  if (!set_init(&w.names, 64)) return -1;
  mlirOperationWalk((MlirOperation){root}, visit_names, &w, MlirWalkPreOrder);
  free(w.names.slots);
  size_t total = 0;
  for (size_t i = 0; i < w.out.len; i++) total += mlirIdentifierStr((MlirIdentifier){w.out.items[i]}).length + 1;
  char *text = w.out.failed || w.names.count != w.out.len ? NULL : malloc(total + 1);
  if (!text) {
    free(w.out.items);
    return -1;
  }
  char *at = text;
  for (size_t i = 0; i < w.out.len; i++) {
    MlirStringRef s = mlirIdentifierStr((MlirIdentifier){w.out.items[i]});
    memcpy(at, s.data, s.length);
    at += s.length;
    *at++ = 0;
  }
  *ids = w.out.items;
  *chars = text;
  *size = (long)total;
  return (long)w.out.len;
}

/* The ops nested in `root` (pre-order: program order) whose name is one of the `n`
 * identifiers `names`: *out (mirax_free it), their count returned; -1 when out of memory. */
long mirax_matching_ops(void *root, const void **names, long n, const void ***out) {
  Walk w = {root, {0}, {0}};
  if (!set_init(&w.names, (size_t)n)) return -1;
  for (long i = 0; i < n; i++)
    if (set_add(&w.names, names[i]) < 0) {
      free(w.names.slots);
      return -1;
    }
  mlirOperationWalk((MlirOperation){root}, visit_ops, &w, MlirWalkPreOrder);
  free(w.names.slots);
  if (w.out.failed) {
    free(w.out.items);
    return -1;
  }
  *out = w.out.items;
  return (long)w.out.len;
}

void mirax_free(void *p) { free(p); }
