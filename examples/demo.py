"""A short tour of mirax: lazy arrays, kernels through MLIR, tracing, and the same function on the CPU and the GPU."""
import time

import numpy as np

import mirax as mr

x = mr.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
w = mr.arange(3, dtype=mr.float32)
print("x =", x)
print("x @ w =", x @ w)
print("softmax(x) =", mr.softmax(x, axis=-1))
print("mean, var =", x.mean().item(), x.var().item())
print("gelu(x) =", x * (1 + mr.erf(x / np.sqrt(2))) / 2)
print("x[:, ::2] =", x[:, ::2])


def layer(x, w):
    return mr.tanh(x @ w + 1.0).sum(axis=-1)


print("\nThe traced function, as mirax IR:")
print(mr.trace(layer, x, mr.ones((3, 4))))

print("\nd/dx sum(x^3) =", mr.grad(lambda x: (x ** 3).sum())(w))
print("per-row gradients (vmap of grad):", mr.vmap(mr.grad(lambda r: mr.sin(r).sum()))(x))

gelu = mr.compile(lambda x: x * (1 + mr.erf(x / np.sqrt(2))) / 2)
big = mr.random.uniform(shape=(64, 1024, 256))
print("compiled gelu matches eager:", np.allclose(np.asarray(gelu(big)), np.asarray(big * (1 + mr.erf(big / np.sqrt(2))) / 2),
                                                  atol=1e-6))
optimized = gelu.lower(mr.ones((4,))).as_text("optimized")
print(f"the fused kernel: {optimized.count('linalg.generic')} linalg.generic for the 6 mirax ops:")
print("\n".join(line for line in optimized.splitlines() if "linalg.generic" in line))

t0 = time.perf_counter()
y = mr.exp(mr.ones((4,)))
mr.eval(y)
t1 = time.perf_counter()
for _ in range(1000):
    mr.eval(mr.exp(mr.ones((4,))))
t2 = time.perf_counter()
print(f"first exp (JIT compile): {1e3 * (t1 - t0):.1f} ms; cached op: {1e6 * (t2 - t1) / 1000:.1f} us per op pair")

# The same function on the CPU and on the GPU (Vulkan; Mesa's lavapipe where there is no GPU)
print("\nOne function on both devices:")
layer_c = mr.compile(lambda x, w: mr.softmax(mr.tanh(x @ w), axis=-1))
xs = mr.random.normal((4, 64), key=mr.random.key(1))
ws = mr.random.normal((64, 8), key=mr.random.key(2))
on_cpu = layer_c(xs, ws)
print("  cpu:", np.round(np.asarray(on_cpu)[0, :4], 5))
if mr.is_available(mr.gpu):
    from mirax.runtime.vulkan import VulkanDevice
    with mr.stream(mr.gpu):
        on_gpu = layer_c(xs, ws)
    print(f"  gpu: {np.round(np.asarray(on_gpu)[0, :4], 5)}  ({VulkanDevice.get().name})")
    print("  same within 1e-5:", np.allclose(np.asarray(on_cpu), np.asarray(on_gpu), atol=1e-5))
    print("  its kernels:", layer_c.lower(xs, ws).as_text("gpu").count("gpu.launch_func"), "gpu.launch_func")
else:
    from mirax.runtime.vulkan import VulkanDevice, INSTALL_HINT
    print("  gpu: not available here:", VulkanDevice.why_unavailable(), "-", INSTALL_HINT)
