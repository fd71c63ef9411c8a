// RUN: %mirax-opt %s -split-input-file --mirax-static-partition | FileCheck %s

// A statically scheduled OpenMP loop: each thread computes its block of the
// iterations from its thread number (n / p each, one more for the first n % p); the
// runtime's declarations are added once to the module.
// CHECK-LABEL: module
// CHECK:         func.func private @omp_get_thread_num() -> i32
// CHECK:         func.func private @omp_get_num_threads() -> i32
// CHECK-LABEL: func.func @static
// CHECK-SAME:    (%[[OUT:.+]]: memref<64xf32>, %[[LB:.+]]: index, %[[UB:.+]]: index, %[[STEP:.+]]: index)
// CHECK:         omp.parallel {
// CHECK-NOT:       omp.wsloop
// CHECK:           %[[T32:.+]] = func.call @omp_get_thread_num() : () -> i32
// CHECK:           %[[T:.+]] = arith.index_cast %[[T32]] : i32 to index
// CHECK:           %[[P32:.+]] = func.call @omp_get_num_threads() : () -> i32
// CHECK:           %[[P:.+]] = arith.index_cast %[[P32]] : i32 to index
// CHECK:           %[[SPAN:.+]] = arith.subi %[[UB]], %[[LB]] : index
// CHECK:           %[[TRIPS:.+]] = arith.ceildivsi %[[SPAN]], %[[STEP]] : index
// CHECK:           %[[N:.+]] = arith.maxsi %[[TRIPS]], %{{.+}} : index
// CHECK:           %[[SMALL:.+]] = arith.divui %[[N]], %[[P]] : index
// CHECK:           %[[EXTRAS:.+]] = arith.remui %[[N]], %[[P]] : index
// CHECK:           %[[FULL:.+]] = arith.muli %[[T]], %[[SMALL]] : index
// CHECK:           %[[SHIFT:.+]] = arith.minui %[[T]], %[[EXTRAS]] : index
// CHECK:           %[[BEGIN:.+]] = arith.addi %[[FULL]], %[[SHIFT]] : index
// CHECK:           %[[FIRST:.+]] = arith.cmpi ult, %[[T]], %[[EXTRAS]] : index
// CHECK:           %[[MORE:.+]] = arith.select %[[FIRST]], %{{.+}}, %{{.+}} : index
// CHECK:           %[[E0:.+]] = arith.addi %[[BEGIN]], %[[SMALL]] : index
// CHECK:           %[[END:.+]] = arith.addi %[[E0]], %[[MORE]] : index
// CHECK:           scf.for %[[K:.+]] = %[[BEGIN]] to %[[END]] step %{{.+}} {
// CHECK:             %[[OFF:.+]] = arith.muli %[[K]], %[[STEP]] : index
// CHECK:             %[[I:.+]] = arith.addi %[[LB]], %[[OFF]] : index
// CHECK:             scf.execute_region {
// CHECK:               memref.store %{{.+}}, %[[OUT]][%[[I]]] : memref<64xf32>
// CHECK:               scf.yield
// CHECK:             }
// CHECK:           }
// CHECK:           omp.terminator
// CHECK-LABEL: func.func @explicit_static
// CHECK-NOT:     omp.wsloop
// CHECK:         func.call @omp_get_thread_num()
// CHECK-NOT:     omp.wsloop
// CHECK:         return
func.func @static(%out: memref<64xf32>, %lb: index, %ub: index, %step: index) {
  %one = arith.constant 1.0 : f32
  omp.parallel {
    omp.wsloop {
      omp.loop_nest (%i) : index = (%lb) to (%ub) step (%step) {
        memref.store %one, %out[%i] : memref<64xf32>
        omp.yield
      }
    }
    omp.terminator
  }
  return
}
func.func @explicit_static(%out: memref<64xf32>, %n: index) {
  %one = arith.constant 1.0 : f32
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  omp.parallel {
    omp.wsloop schedule(static) {
      omp.loop_nest (%i) : index = (%c0) to (%n) step (%c1) {
        memref.store %one, %out[%i] : memref<64xf32>
        omp.yield
      }
    }
    omp.terminator
  }
  return
}

// -----

// Left to the runtime: a dynamic schedule (mirax-task-counter's), a static one with a
// chunk size, a loop sharing its region with another op, a loop with `nowait`. Nothing
// is declared when no loop qualifies.
// CHECK-LABEL: module
// CHECK-NOT:     omp_get_thread_num
// CHECK-LABEL: func.func @kept
// CHECK:         omp.wsloop schedule(dynamic) {
// CHECK:         omp.wsloop schedule(static = %{{.+}} : i64) {
// CHECK:         omp.parallel {
// CHECK-NEXT:      memref.store
// CHECK-NEXT:      omp.wsloop {
// CHECK:         omp.wsloop nowait {
// CHECK-NOT:     omp_get_thread_num
func.func @kept(%out: memref<64xf32>, %n: index) {
  %one = arith.constant 1.0 : f32
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %chunk = arith.constant 4 : i64
  omp.parallel {
    omp.wsloop schedule(dynamic) {
      omp.loop_nest (%i) : index = (%c0) to (%n) step (%c1) {
        memref.store %one, %out[%i] : memref<64xf32>
        omp.yield
      }
    }
    omp.terminator
  }
  omp.parallel {
    omp.wsloop schedule(static = %chunk : i64) {
      omp.loop_nest (%i) : index = (%c0) to (%n) step (%c1) {
        memref.store %one, %out[%i] : memref<64xf32>
        omp.yield
      }
    }
    omp.terminator
  }
  omp.parallel {
    memref.store %one, %out[%c0] : memref<64xf32>
    omp.wsloop {
      omp.loop_nest (%i) : index = (%c0) to (%n) step (%c1) {
        memref.store %one, %out[%i] : memref<64xf32>
        omp.yield
      }
    }
    omp.terminator
  }
  omp.parallel {
    omp.wsloop nowait {
      omp.loop_nest (%i) : index = (%c0) to (%n) step (%c1) {
        memref.store %one, %out[%i] : memref<64xf32>
        omp.yield
      }
    }
    omp.terminator
  }
  return
}
