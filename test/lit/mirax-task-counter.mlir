// RUN: mirax-opt %s -split-input-file --mirax-task-counter | FileCheck %s

// A dynamically scheduled OpenMP loop: each thread takes the next iteration from a
// counter on the function's stack, zeroed before the region; the loop and its
// barrier go (the region's end joins the threads).
// CHECK-LABEL: func.func @dynamic
// CHECK-SAME:    (%[[OUT:.+]]: memref<64xf32>, %[[LB:.+]]: index, %[[UB:.+]]: index, %[[STEP:.+]]: index)
// CHECK:         %[[N:.+]] = memref.alloca() : memref<i64>
// CHECK:         %[[Z:.+]] = arith.constant 0 : i64
// CHECK:         memref.store %[[Z]], %[[N]][] : memref<i64>
// CHECK-NEXT:    omp.parallel {
// CHECK-NOT:       omp.wsloop
// CHECK:           scf.while : () -> index {
// CHECK:             %[[ONE:.+]] = arith.constant 1 : i64
// CHECK:             %[[K:.+]] = memref.atomic_rmw addi %[[ONE]], %[[N]][] : (i64, memref<i64>) -> i64
// CHECK:             %[[KI:.+]] = arith.index_cast %[[K]] : i64 to index
// CHECK:             %[[OFF:.+]] = arith.muli %[[KI]], %[[STEP]] : index
// CHECK:             %[[I:.+]] = arith.addi %[[LB]], %[[OFF]] : index
// CHECK:             %[[MORE:.+]] = arith.cmpi slt, %[[I]], %[[UB]] : index
// CHECK:             scf.condition(%[[MORE]]) %[[I]] : index
// CHECK:           } do {
// CHECK:           ^bb0(%[[IV:.+]]: index):
// CHECK:             scf.execute_region {
// CHECK:               memref.store %{{.+}}, %[[OUT]][%[[IV]]] : memref<64xf32>
// CHECK:               scf.yield
// CHECK:             }
// CHECK:             scf.yield
// CHECK:           }
// CHECK:           omp.terminator
func.func @dynamic(%out: memref<64xf32>, %lb: index, %ub: index, %step: index) {
  %one = arith.constant 1.0 : f32
  omp.parallel {
    omp.wsloop schedule(dynamic) {
      omp.loop_nest (%i) : index = (%lb) to (%ub) step (%step) {
        memref.store %one, %out[%i] : memref<64xf32>
        omp.yield
      }
    }
    omp.terminator
  }
  return
}

// -----

// A statically scheduled loop and a dynamic one with a chunk size keep the runtime's
// schedule.
// CHECK-LABEL: func.func @kept
// CHECK-NOT:     atomic_rmw
// CHECK:         omp.wsloop {
// CHECK:         omp.wsloop schedule(dynamic = %{{.+}} : i64) {
// CHECK-NOT:     atomic_rmw
func.func @kept(%out: memref<64xf32>, %n: index) {
  %one = arith.constant 1.0 : f32
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %chunk = arith.constant 4 : i64
  omp.parallel {
    omp.wsloop {
      omp.loop_nest (%i) : index = (%c0) to (%n) step (%c1) {
        memref.store %one, %out[%i] : memref<64xf32>
        omp.yield
      }
    }
    omp.terminator
  }
  omp.parallel {
    omp.wsloop schedule(dynamic = %chunk : i64) {
      omp.loop_nest (%i) : index = (%c0) to (%n) step (%c1) {
        memref.store %one, %out[%i] : memref<64xf32>
        omp.yield
      }
    }
    omp.terminator
  }
  return
}
