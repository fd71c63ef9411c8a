"""The host a benchmark ran on and the code generator's choices there, for its header.

    from _host import describe; print(describe())

host: LLVM's CPU name and the OS's model, vector ISA, cores, caches
(mirax.lowering.host_cpu); tuning: the matmul and row-reduction tiles and the threads
threshold in force (mirax.lowering.tuning), each marked measured (by `python -m
mirax.tune`) or derived (from the host's features).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))


def choices() -> str:
    from mirax.lowering import tuning
    t, m = tuning.table(), tuning.measured()
    mm = t["matmul"][("linalg.matmul", "f32")]
    tuned = m.get("matmul", {})
    lines = [f"matmul (derived): {mm['mr']}x{mm['nr']} register tile, kc {mm['kc']}, nc {mm['nc']}"]
    for cls, e in sorted(tuned.items()):
        lines.append(f"matmul {cls} (measured, {e.get('shape', '')}): {e['mr']}x{e['nr']}, kc {e['kc']}, nc {e['nc']}")
    rows = m.get("row_fusion", {})
    ps = ", ".join(f"{k} columns: {v['partial_sums']}" for k, v in sorted(rows.items()))
    lines.append(f"row reductions: partial sums {t['row_fusion']['partial_sums']} (derived)"
                 + (f"; measured {ps}" if ps else ""))
    par = "measured" if m.get("parallel") else "derived"
    lines.append(f"threads {tuning.threads()} from {t['elementwise']['parallel_min_elements']} elements ({par})")
    return "\n".join("  " + x for x in lines)


def describe() -> str:
    from mirax.lowering import host_cpu
    return f"host: {host_cpu.host().describe()}\ntuning:\n{choices()}"
