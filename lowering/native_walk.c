/* The walks of mirax's Python passes, in C: the ops under a root whose names a pass
 * wants, found through MLIR's C API instead of one Python callback per op (~0.75 us an
 * op in the bindings; a transformer step's passes visited 460,000 ops); and two walks
 * over operands, of the ops a pass moves or clones: the values they read from outside,
 * and their operands re-pointed at other values.
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
  long count;   /* distinct_names: the ops seen */
} Walk;

static MlirWalkResult visit_names(MlirOperation op, void *data) {
  Walk *w = data;
  if (op.ptr == w->root) return MlirWalkResultAdvance;
  const void *name = mlirOperationGetName(op).ptr;
  w->count++;
  int added = set_add(&w->names, name);
  if (added > 0) push(&w->out, name);
  if (added < 0) w->out.failed = 1;
  return w->out.failed ? MlirWalkResultInterrupt : MlirWalkResultAdvance;
}

static MlirWalkResult visit_ops(MlirOperation op, void *data) {
  Walk *w = data;
  if (op.ptr != w->root && set_has(&w->names, mlirOperationGetName(op).ptr)) push(&w->out, op.ptr);
  return w->out.failed ? MlirWalkResultInterrupt : MlirWalkResultAdvance;
}

/* The distinct names of the ops nested in `root`, in first-seen order: their identifiers
 * in *ids and their characters in *chars, each followed by a 0 byte, *size bytes in all
 * (mirax_free both), and in *ops how many ops are nested in `root`; the names' count
 * returned, -1 when out of memory. */
long mirax_distinct_names(void *root, const void ***ids, char **chars, long *size, long *ops) {
  Walk w = {root, {0}, {0}, 0};
  if (!set_init(&w.names, 64)) return -1;
  mlirOperationWalk((MlirOperation){root}, visit_names, &w, MlirWalkPreOrder);
  free(w.names.slots);
  size_t total = 0;
  for (size_t i = 0; i < w.out.len; i++) total += mlirIdentifierStr((MlirIdentifier){w.out.items[i]}).length + 1;
  char *text = w.out.failed ? NULL : malloc(total + 1);
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
  *ops = w.count;
  return (long)w.out.len;
}

/* The ops nested in `root` (pre-order: program order) whose name is one of the `n`
 * identifiers `names`: *out (mirax_free it), their count returned; -1 when out of memory. */
long mirax_matching_ops(void *root, const void **names, long n, const void ***out) {
  Walk w = {root, {0}, {0}, 0};
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

/* ---- operands ---------------------------------------------------------------------- */

typedef struct {
  PtrSet roots;   /* the ops whose subtrees are "inside" */
  PtrSet seen;    /* values already listed */
  PtrList out;
  int failed;
} Outside;

/* Whether `op` is one of the roots or nested in one. */
static int inside(const Outside *o, MlirOperation op) {
  for (; !mlirOperationIsNull(op); op = mlirOperationGetParentOperation(op))
    if (set_has(&o->roots, op.ptr)) return 1;
  return 0;
}

static void note_operands(Outside *o, MlirOperation op) {
  intptr_t n = mlirOperationGetNumOperands(op);
  for (intptr_t i = 0; i < n; i++) {
    MlirValue v = mlirOperationGetOperand(op, i);
    if (set_has(&o->seen, v.ptr)) continue;
    MlirOperation owner = mlirValueIsABlockArgument(v) ? mlirBlockGetParentOperation(mlirBlockArgumentGetOwner(v))
                                                       : mlirOpResultGetOwner(v);
    if (inside(o, owner)) continue;
    if (set_add(&o->seen, v.ptr) < 0) {
      o->failed = 1;
      return;
    }
    push(&o->out, v.ptr);
  }
}

static MlirWalkResult visit_operands(MlirOperation op, void *data) {
  Outside *o = data;
  note_operands(o, op);
  return o->failed || o->out.failed ? MlirWalkResultInterrupt : MlirWalkResultAdvance;
}

/* The values the `n` ops `roots` and the ops nested in them read that none of them
 * defines (results of ops outside, block arguments of blocks outside), in first-use order
 * (program order, an op's operands before its regions'): *out (mirax_free it), their count
 * returned; -1 when out of memory. */
long mirax_outside_values(void **roots, long n, const void ***out) {
  Outside o = {{0}, {0}, {0}, 0};
  if (!set_init(&o.roots, (size_t)n) || !set_init(&o.seen, 64)) {
    free(o.roots.slots);
    return -1;
  }
  for (long i = 0; i < n && !o.failed; i++)
    if (set_add(&o.roots, roots[i]) < 0) o.failed = 1;
  for (long i = 0; i < n && !o.failed && !o.out.failed; i++)
    mlirOperationWalk((MlirOperation){roots[i]}, visit_operands, &o, MlirWalkPreOrder);
  free(o.roots.slots);
  free(o.seen.slots);
  if (o.failed || o.out.failed) {
    free(o.out.items);
    return -1;
  }
  *out = o.out.items;
  return (long)o.out.len;
}

typedef struct {
  PtrSet from;          /* the values to replace */
  const void **olds, **news;
  long n;
} Remap;

static MlirWalkResult visit_remap(MlirOperation op, void *data) {
  Remap *r = data;
  intptr_t n = mlirOperationGetNumOperands(op);
  for (intptr_t i = 0; i < n; i++) {
    MlirValue v = mlirOperationGetOperand(op, i);
    if (!set_has(&r->from, v.ptr)) continue;
    for (long k = 0; k < r->n; k++)
      if (r->olds[k] == v.ptr) {
        mlirOperationSetOperand(op, i, (MlirValue){r->news[k]});
        break;
      }
  }
  return MlirWalkResultAdvance;
}

/* Point every operand of `root` and of the ops nested in it that is olds[k] at news[k]
 * (0 <= k < n); returns 0, or -1 when out of memory (nothing changed then). */
long mirax_remap_operands(void *root, const void **olds, const void **news, long n) {
  Remap r = {{0}, olds, news, n};
  if (!set_init(&r.from, (size_t)n)) return -1;
  for (long k = 0; k < n; k++)
    if (set_add(&r.from, olds[k]) < 0) {
      free(r.from.slots);
      return -1;
    }
  mlirOperationWalk((MlirOperation){root}, visit_remap, &r, MlirWalkPreOrder);
  free(r.from.slots);
  return 0;
}

void mirax_free(void *p) { free(p); }
