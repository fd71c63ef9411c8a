"""The GPU target on Vulkan: bandwidth, row kernels, matmul and eager dispatch.

    .venv/bin/python bench/gpu.py            # full sizes
    .venv/bin/python bench/gpu.py --small    # quick sizes

It runs on the backend `mr.gpu` chose (CUDA, Metal or Vulkan). On a real GPU it prints
(medians of several runs; device timestamps on Vulkan, synchronized wall time elsewhere):
  - elementwise `x * 2 + 1` (f32) in GB/s against the device's own buffer copy (Vulkan:
    vkCmdCopyBuffer of the same bytes) and the datasheet peak of known devices;
  - compiled softmax and layer norm (one kernel each) in ms, and their GB/s;
  - matmul in GFLOP/s (f32, square) beside numpy on the host's CPU and the datasheet
    FP32 peak of known devices;
  - eager dispatch overhead: wall time per eager op when ten are submitted together and
    when each is read back at once.
On lavapipe (the device is the CPU) the timings say nothing about a GPU: it says so and
only checks every result against numpy.
"""
from __future__ import annotations

import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _host  # noqa: E402,F401  (the peers' environment, before numpy and jax load: _host.cap_peers)

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import mirax as mr  # noqa: E402
from mirax.runtime import vulkan  # noqa: E402


# peak DRAM bandwidth (GB/s) of devices that report none, by name (vendor datasheets)
PEAK_GBS = {"H200": 4800, "H100": 3350, "A100": 2039, "L40S": 864, "L4": 300, "A10G": 600, "T4": 320,
            "RTX 4090": 1008, "RTX 3090": 936, "M1 Max": 400, "M1 Pro": 200, "M2 Max": 400, "M2 Pro": 200,
            "M3 Max": 400, "M1": 68, "M2": 100, "M3": 100}


# peak dense FP32 TFLOP/s (no tensor cores), same sources
PEAK_TFLOPS = {"H200": 67, "H100": 67, "A100": 19.5, "L40S": 91.6, "L4": 30.3, "A10G": 31.2, "T4": 8.1,
               "RTX 4090": 82.6, "RTX 3090": 35.6, "M1 Max": 10.4, "M1 Pro": 5.2, "M2 Max": 13.6,
               "M2 Pro": 6.8, "M3 Max": 14.2, "M1": 2.6, "M2": 3.6, "M3": 4.1}


def known_peak(name, table=PEAK_GBS):
    for key in sorted(table, key=len, reverse=True):
        if key in name:
            return table[key]
    return None


def median_gpu(dev, record, rounds):
    """Device time of what `record()` queues: timestamp queries on Vulkan; elsewhere the
    wall time between two synchronizations (includes the launch overhead)."""
    if hasattr(dev, "gpu_seconds"):
        return statistics.median(dev.gpu_seconds(record) for _ in range(rounds))
    ts = []
    for _ in range(rounds):
        dev.synchronize()
        t0 = time.perf_counter()
        record()
        dev.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def softmax(x):
    return mr.softmax(x, axis=-1)


def layer_norm(x):
    m = x.mean(-1, keepdims=True)
    return (x - m) * mr.rsqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-5)


def np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_layer_norm(x):
    m = x.mean(-1, keepdims=True)
    return (x - m) / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-5)


def main():
    small = "--small" in sys.argv
    sys.path.insert(0, os.path.dirname(__file__))
    from _host import describe
    print(describe())
    if not mr.is_available(mr.gpu):
        print("no GPU:", vulkan.VulkanDevice.why_unavailable(), "-", vulkan.INSTALL_HINT)
        return 1
    dev = mr.gpu.backend  # CUDA, Metal or Vulkan, as mr.gpu chose
    kind = getattr(dev, "device_type", "discrete")
    real = dev.kind in ("cuda", "metal") or kind in ("discrete", "integrated")
    print(f"device: {dev.name} ({dev.kind}, {kind}); host: {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores")
    if not real:
        print("the Vulkan device is the CPU (lavapipe): timings would not describe a GPU; checking results only")
    rng = np.random.default_rng(0)
    n_elem = (1 << 22) if (small or not real) else (1 << 26)
    rows, cols = (512, 1024) if (small or not real) else (4096, 4096)
    mm = 256 if (small or not real) else 2048
    rounds = 3 if not real else 7

    # ---- elementwise bandwidth against the device's own copy -----------------------------
    xh = rng.standard_normal(n_elem).astype(np.float32)
    x = mr.array(xh)
    f = mr.compile(lambda x: x * 2 + 1)
    with mr.stream(mr.gpu):
        y = f(x)
        np.testing.assert_allclose(np.asarray(y), xh * 2 + 1, rtol=1e-6)
        xg = y  # a device-resident input from now on
        mr.eval(xg)
        if real:
            t = median_gpu(dev, lambda: f(xg), rounds)
            gbs = 2 * xh.nbytes / t / 1e9
            line = f"elementwise x*2+1, {n_elem} f32: {gbs:8.1f} GB/s"
            if hasattr(dev, "copy"):  # the device's own buffer copy: the practical peak
                src, dst = dev.alloc(xh.nbytes), dev.alloc(xh.nbytes)
                peak = 2 * xh.nbytes / median_gpu(dev, lambda: dev.copy(src, dst), rounds) / 1e9
                line += f"   buffer copy {peak:8.1f} GB/s   ratio {gbs / peak:.2f}"
            nominal = known_peak(dev.name)
            line += f"   datasheet peak {nominal} GB/s: {gbs / nominal:.2f}" if nominal else "   (datasheet peak unknown)"
            print(line)

    # ---- softmax and layer norm: one kernel each -------------------------------------------
    ah = rng.standard_normal((rows, cols)).astype(np.float32)
    a = mr.array(ah)
    for name, fn, ref in (("softmax", softmax, np_softmax), ("layer norm", layer_norm, np_layer_norm)):
        c = mr.compile(fn)
        kernels = c.lower(a).as_text("gpu").count("gpu.launch_func")
        with mr.stream(mr.gpu):
            got = np.asarray(c(a))
            np.testing.assert_allclose(got, ref(ah), rtol=1e-4, atol=1e-5)
            if real:
                ag = mr.array(ah) + 0
                mr.eval(ag)
                t = median_gpu(dev, lambda: c(ag), rounds)
                print(f"{name} {rows}x{cols}: {t * 1e3:8.3f} ms  {2 * ah.nbytes / t / 1e9:8.1f} GB/s  "
                      f"({kernels} kernel{'s' if kernels > 1 else ''})")
        if not real:
            print(f"{name} {rows}x{cols}: matches numpy ({kernels} kernel{'s' if kernels > 1 else ''})")

    # ---- matmul ------------------------------------------------------------------------------
    ph = rng.standard_normal((mm, mm)).astype(np.float32)
    qh = rng.standard_normal((mm, mm)).astype(np.float32)
    g = mr.compile(lambda p, q: p @ q)
    with mr.stream(mr.gpu):
        got = np.asarray(g(mr.array(ph), mr.array(qh)))
        np.testing.assert_allclose(got, ph @ qh, rtol=1e-3, atol=1e-3)
        if real:
            pg, qg = mr.array(ph) + 0, mr.array(qh) + 0
            mr.eval(pg, qg)
            t = median_gpu(dev, lambda: g(pg, qg), rounds)
            t0 = time.perf_counter()
            ph @ qh
            tn = time.perf_counter() - t0
            flops = 2 * mm ** 3
            peak = known_peak(dev.name, PEAK_TFLOPS)
            print(f"matmul {mm}^3 f32: {flops / t / 1e9:8.1f} GFLOP/s   numpy on the host {flops / tn / 1e9:8.1f} "
                  f"GFLOP/s   ratio {tn / t:.1f}x" + (f"   {flops / t / 1e12 / peak:.2f} of the FP32 peak "
                                                        f"({peak} TFLOP/s)" if peak else ""))
    if not real:
        print(f"matmul {mm}^3: matches numpy")

    # ---- eager dispatch overhead ------------------------------------------------------------------
    s = mr.array(np.ones(256, np.float32))
    with mr.stream(mr.gpu):
        mr.eval(s * 1.5 - 0.25)
        batched, single = [], []
        for _ in range(rounds):
            t0 = time.perf_counter()
            z = s
            for _ in range(10):
                z = z * 1.5 - 0.25
            mr.eval(z)
            batched.append((time.perf_counter() - t0) / 20)
            t0 = time.perf_counter()
            for _ in range(10):
                mr.eval(s * 1.5)
            single.append((time.perf_counter() - t0) / 10)
    want = np.ones(256, np.float32)
    for _ in range(10):
        want = want * np.float32(1.5) - np.float32(0.25)
    np.testing.assert_allclose(np.asarray(z), want, rtol=1e-5)
    print(f"eager dispatch: {statistics.median(batched) * 1e6:8.1f} us per op in a batch of 20   "
          f"{statistics.median(single) * 1e6:8.1f} us per op submitted alone"
          + ("" if real else "   (lavapipe: CPU time)"))
    print("all results match numpy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
