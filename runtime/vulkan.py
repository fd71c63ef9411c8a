"""The Vulkan backend (PyPI `vulkan`, cffi): one instance, device and compute queue.

    dev = VulkanDevice.get()              # None when no Vulkan driver is installed
    buf = dev.upload(np.ones(4, np.float32))   # sub-allocated from a pooled block
    buf.host(np.float32, (4,))            # numpy: a view of mapped memory, or a staged copy
    k = dev.kernel(spirv, "main_kernel", nargs=2)
    dev.launch(k, grid=(4, 1, 1), block=(256, 1, 1), args=[buf, out])
    dev.synchronize()                     # submits everything recorded since the last one

Memory: blocks of 64 MiB (or one block per larger buffer), each with one VkBuffer;
arrays are aligned sub-ranges handed out by size bucket and returned to their bucket when
the array dies (no vkAllocateMemory per array). Arrays live in host-visible coherent
memory, mapped as numpy views, where the GPU reads it at full speed (integrated GPUs,
lavapipe, resizable BAR); elsewhere they are device-local and move through host-visible
staging buffers copied by the queue (`upload`, `download`).
Launches are recorded into one command buffer with a compute->compute barrier between
dispatches and submitted together at `synchronize` (mr.eval, or reading a result).
Pipelines are built once per SPIR-V module; the driver's VkPipelineCache is saved in
the kernel cache directory. `stats` counts submits and dispatches (for tests).
"""
from __future__ import annotations

import atexit
import hashlib
import math
import os
import threading
from pathlib import Path

import numpy as np

from .backend import Backend
from .kernel_cache import LRU, default_capacity

try:
    import vulkan as vk
except (ImportError, OSError):  # no PyPI `vulkan`, or no libvulkan.so.1
    vk = None

BLOCK_BYTES = 64 << 20
ALIGN = 256  # >= minStorageBufferOffsetAlignment on every device we know


class VulkanError(RuntimeError):
    """The Vulkan runtime is missing or failed; the message says what to install."""


INSTALL_HINT = ("install a Vulkan driver and loader (Debian: apt-get install mesa-vulkan-drivers libvulkan1; "
                "PyPI: pip install vulkan) — `make setup` does both")


class Stats:
    def __init__(self):
        self.submits = 0
        self.dispatches = 0
        self.pipelines = 0

    def reset(self):
        self.__init__()


stats = Stats()


class Buffer:
    """A device array's memory: a sub-range of one memory block."""

    __slots__ = ("device", "block", "offset", "nbytes", "size", "__weakref__")

    def __init__(self, device, block, offset, nbytes, size):
        # nbytes: the bucket (the range this buffer owns); size: the bytes asked for
        self.device, self.block, self.offset, self.nbytes, self.size = device, block, offset, nbytes, size

    def view(self, dtype, shape):
        """A numpy array over the mapped memory (valid while this Buffer lives); only for
        host-visible memory — `host()` works on every buffer."""
        if self.block.mapped is None:
            raise VulkanError("a device-local buffer has no host view: use Buffer.host() or Buffer.read()")
        dtype = np.dtype(dtype)
        count = math.prod(shape)
        a = np.frombuffer(self.block.mapped, dtype=dtype, count=count, offset=self.offset).reshape(shape)
        return a

    def host(self, dtype, shape):
        """The contents as numpy, once what was queued has run: a view of mapped memory,
        or a copy through a staging buffer for device-local memory. Read-only use."""
        self.device.synchronize()
        if self.block.mapped is not None:
            return self.view(dtype, shape)
        return self.device.download(self, dtype, shape)

    def read(self, dtype, shape):
        """A numpy copy of the contents (numpy never writes into device memory)."""
        return self.device.download(self, dtype, shape)

    def __del__(self):
        dev = self.device
        if dev is not None and not dev.closed:
            dev._release(self)


class _Block:
    def __init__(self, device, size, mapped):
        self.size = size
        d = device.device
        self.buffer = vk.vkCreateBuffer(d, vk.VkBufferCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, size=size,
            usage=vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
            | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT,
            sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE), None)
        req = vk.vkGetBufferMemoryRequirements(d, self.buffer)
        self.memory = vk.vkAllocateMemory(d, vk.VkMemoryAllocateInfo(
            sType=vk.VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, allocationSize=req.size,
            memoryTypeIndex=device.memory_type(req.memoryTypeBits, mapped)), None)
        vk.vkBindBufferMemory(d, self.buffer, self.memory, 0)
        self.mapped = vk.vkMapMemory(d, self.memory, 0, size, 0) if mapped else None
        self.top = 0  # bump pointer; freed ranges go to the device's buckets


class Kernel:
    """A compute pipeline for one SPIR-V entry point with `nargs` storage buffers."""

    def __init__(self, device, spirv: bytes, entry: str, nargs: int):
        d = device.device
        self.entry, self.nargs = entry, nargs
        self.module = vk.vkCreateShaderModule(d, vk.VkShaderModuleCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, codeSize=len(spirv), pCode=spirv), None)
        bindings = [vk.VkDescriptorSetLayoutBinding(
            binding=i, descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, descriptorCount=1,
            stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT) for i in range(nargs)]
        self.set_layout = vk.vkCreateDescriptorSetLayout(d, vk.VkDescriptorSetLayoutCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, bindingCount=nargs,
            pBindings=bindings), None)
        self.set_layout_ptr = vk.ffi.new("VkDescriptorSetLayout[1]", [self.set_layout])
        self.layout = vk.vkCreatePipelineLayout(d, vk.VkPipelineLayoutCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, setLayoutCount=1,
            pSetLayouts=[self.set_layout]), None)
        stage = vk.VkPipelineShaderStageCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, stage=vk.VK_SHADER_STAGE_COMPUTE_BIT,
            module=self.module, pName=entry)
        self.pipeline = vk.vkCreateComputePipelines(d, device.pipeline_cache, 1, [vk.VkComputePipelineCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO, stage=stage, layout=self.layout)], None)[0]
        stats.pipelines += 1
        device.new_pipelines += 1

    def destroy(self, d):
        vk.vkDestroyPipeline(d, self.pipeline, None)
        vk.vkDestroyPipelineLayout(d, self.layout, None)
        vk.vkDestroyDescriptorSetLayout(d, self.set_layout, None)
        vk.vkDestroyShaderModule(d, self.module, None)


class VulkanDevice(Backend):
    """The process's Vulkan device (the first discrete or integrated GPU, else the first
    device: Mesa's lavapipe runs on the CPU)."""

    def __init__(self):
        if vk is None:
            raise VulkanError("the Python package `vulkan` or libvulkan.so.1 is missing: " + INSTALL_HINT)
        self.closed = False
        app = vk.VkApplicationInfo(sType=vk.VK_STRUCTURE_TYPE_APPLICATION_INFO, pApplicationName="mirax",
                                   apiVersion=vk.VK_MAKE_VERSION(1, 1, 0))
        self.instance = vk.vkCreateInstance(vk.VkInstanceCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, pApplicationInfo=app), None)
        phys = vk.vkEnumeratePhysicalDevices(self.instance)
        if not phys:
            raise VulkanError("no Vulkan device found: " + INSTALL_HINT)
        order = {vk.VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: 0, vk.VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: 1}
        phys = sorted(phys, key=lambda p: order.get(vk.vkGetPhysicalDeviceProperties(p).deviceType, 2))
        self.physical = phys[0]
        props = vk.vkGetPhysicalDeviceProperties(self.physical)
        self.name = vk.ffi.string(props.deviceName).decode() if not isinstance(props.deviceName, str) \
            else props.deviceName
        self.device_type = {vk.VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: "discrete",
                            vk.VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: "integrated",
                            vk.VK_PHYSICAL_DEVICE_TYPE_CPU: "cpu"}.get(props.deviceType, "other")
        lim = props.limits
        self.max_threads = int(lim.maxComputeWorkGroupInvocations)
        self.max_shared = int(lim.maxComputeSharedMemorySize)
        # (all of a kernel's buffers are storage buffers of one descriptor set)
        # llvmpipe (lavapipe) stops a shader invocation's loops after 65,535 iterations in
        # all (gallivm's loop limiter): the pipeline refuses kernels that would loop more
        self.loop_limit = 65535 if "llvmpipe" in self.name.lower() else 0
        self.max_buffers = int(min(lim.maxPerStageDescriptorStorageBuffers, lim.maxDescriptorSetStorageBuffers,
                                   lim.maxPerStageResources))
        self.timestamp_period = float(lim.timestampPeriod)
        self.subgroup = self._subgroup_size()
        feats = vk.vkGetPhysicalDeviceFeatures(self.physical)
        self.features = {"float64": bool(feats.shaderFloat64), "int64": bool(feats.shaderInt64),
                         "int16": bool(feats.shaderInt16)}
        self.features.update(self._extended_features())
        families = vk.vkGetPhysicalDeviceQueueFamilyProperties(self.physical)
        self.family = next(i for i, f in enumerate(families) if f.queueFlags & vk.VK_QUEUE_COMPUTE_BIT)
        self.device = self._create_device(feats)
        self.queue = vk.vkGetDeviceQueue(self.device, self.family, 0)
        mem = vk.vkGetPhysicalDeviceMemoryProperties(self.physical)
        self._mem_types = [mem.memoryTypes[i].propertyFlags for i in range(mem.memoryTypeCount)]
        self.mapped_arrays = self._arrays_mapped(mem)
        self.pipeline_cache = self._load_pipeline_cache()
        self.new_pipelines = 0
        atexit.register(self._at_exit)
        self.pool = vk.vkCreateCommandPool(self.device, vk.VkCommandPoolCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, queueFamilyIndex=self.family,
            flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT), None)
        self.cmd = vk.vkAllocateCommandBuffers(self.device, vk.VkCommandBufferAllocateInfo(
            sType=vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, commandPool=self.pool,
            level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1))[0]
        self.fence = vk.vkCreateFence(self.device, vk.VkFenceCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_FENCE_CREATE_INFO), None)
        self.desc_pools = []
        self._new_desc_pool()
        self.blocks = []
        self.free = {}  # (mapped, bucket bytes) -> [(block, offset)]
        self.recording = False
        self.pending = []  # buffers the recorded commands use: kept alive until they ran
        self.mutex = threading.RLock()
        # pipelines, bounded: an evicted one may still be in the recorded command buffer,
        # so it is destroyed after the next submit completes
        self.kernels = LRU(default_capacity(), on_evict=self._retired_append)
        self._retired = []
        self._host_barrier = vk.ffi.new("VkMemoryBarrier*", {
            "sType": vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER,
            "srcAccessMask": vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT,
            "dstAccessMask": vk.VK_ACCESS_HOST_READ_BIT})
        self._compute_barrier = vk.ffi.new("VkMemoryBarrier*", {
            "sType": vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER,
            "srcAccessMask": vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT,
            "dstAccessMask": vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT})

    # ---- set-up ---------------------------------------------------------------------------
    def _subgroup_size(self):
        """The device's subgroup (SIMD group, warp, wave) size, core in Vulkan 1.1; None if
        unknown (target() then uses mirax-gpu-map's default)."""
        try:
            sub = vk.VkPhysicalDeviceSubgroupProperties(sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES)
            p2 = vk.VkPhysicalDeviceProperties2(sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, pNext=sub)
            vk.vkGetPhysicalDeviceProperties2(self.physical, p2)
            return int(sub.subgroupSize) or None
        except Exception:  # noqa: BLE001 - an old loader or wrapper
            return None

    def _extended_features(self):
        try:
            f8 = vk.VkPhysicalDevice8BitStorageFeatures(sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES)
            f16 = vk.VkPhysicalDevice16BitStorageFeatures(
                sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES, pNext=f8)
            fi = vk.VkPhysicalDeviceShaderFloat16Int8Features(
                sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES, pNext=f16)
            f2 = vk.VkPhysicalDeviceFeatures2(sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, pNext=fi)
            vk.vkGetPhysicalDeviceFeatures2(self.physical, f2)  # core in Vulkan 1.1
            return {"storage8": bool(f8.storageBuffer8BitAccess), "storage16": bool(f16.storageBuffer16BitAccess),
                    "int8": bool(fi.shaderInt8), "float16": bool(fi.shaderFloat16)}
        except Exception:
            return {"storage8": False, "storage16": False, "int8": False, "float16": False}

    def _create_device(self, feats):
        f = self.features
        chain = None
        if f["storage8"]:
            chain = vk.VkPhysicalDevice8BitStorageFeatures(
                sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES, storageBuffer8BitAccess=1)
        if f["storage16"]:
            chain = vk.VkPhysicalDevice16BitStorageFeatures(
                sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES, storageBuffer16BitAccess=1,
                pNext=chain)
        if f["int8"] or f["float16"]:
            chain = vk.VkPhysicalDeviceShaderFloat16Int8Features(
                sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES,
                shaderInt8=int(f["int8"]), shaderFloat16=int(f["float16"]), pNext=chain)
        enabled = vk.VkPhysicalDeviceFeatures(shaderFloat64=feats.shaderFloat64, shaderInt64=feats.shaderInt64,
                                              shaderInt16=feats.shaderInt16)
        exts = [e.extensionName for e in vk.vkEnumerateDeviceExtensionProperties(self.physical, None)]
        want = [e for e in ("VK_KHR_8bit_storage", "VK_KHR_16bit_storage", "VK_KHR_shader_float16_int8")
                if e in exts]
        qinfo = vk.VkDeviceQueueCreateInfo(sType=vk.VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                           queueFamilyIndex=self.family, queueCount=1, pQueuePriorities=[1.0])
        kw = dict(sType=vk.VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, queueCreateInfoCount=1, pQueueCreateInfos=[qinfo],
                  pEnabledFeatures=enabled, enabledExtensionCount=len(want), ppEnabledExtensionNames=want)
        if chain is not None:
            kw["pNext"] = chain
        return vk.vkCreateDevice(self.physical, vk.VkDeviceCreateInfo(**kw), None)

    def memory_type(self, bits, mapped):
        """A memory type for a block: host-visible and coherent (mapped), or device-local."""
        want = (vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT) if mapped \
            else vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
        for i, flags in enumerate(self._mem_types):
            if bits & (1 << i) and (flags & want) == want:
                return i
        raise VulkanError(f"the device has no {'host-visible coherent' if mapped else 'device-local'} memory type")

    def _arrays_mapped(self, mem):
        """Arrays live in mapped memory where the GPU reads it at full speed: integrated
        GPUs and lavapipe, or a large device-local host-visible heap (resizable BAR).
        Otherwise arrays are device-local and move through staging buffers.
        MIRAX_VULKAN_STAGING=1 forces the staging path (to test it on any device)."""
        if os.environ.get("MIRAX_VULKAN_STAGING") == "1":
            return False
        if self.device_type in ("integrated", "cpu"):
            return True
        both = vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT \
            | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
        for i in range(mem.memoryTypeCount):
            t = mem.memoryTypes[i]
            if (t.propertyFlags & both) == both and mem.memoryHeaps[t.heapIndex].size >= (2 << 30):
                return True
        return False

    def _cache_path(self):
        from . import disk_cache
        d = disk_cache.cache_dir()
        if d is None:
            return None
        safe = "".join(c if c.isalnum() else "_" for c in self.name)
        return os.path.join(d, f"vulkan-pipelines-{safe}.bin")

    def _load_pipeline_cache(self):
        """The VkPipelineCache, seeded from the saved file when there is one (a driver
        ignores data of another driver or version; unreadable data starts empty)."""
        lib, ffi = vk.lib, vk.ffi
        data = b""
        path = self._cache_path()
        if path and os.path.exists(path):
            try:
                with open(path, "rb") as fh:
                    data = fh.read()
            except OSError:
                data = b""
        for seed in ([data, b""] if data else [b""]):
            keep = ffi.from_buffer(seed) if seed else ffi.NULL
            info = ffi.new("VkPipelineCacheCreateInfo*", {
                "sType": vk.VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO,
                "initialDataSize": len(seed), "pInitialData": keep})
            out = ffi.new("VkPipelineCache*")
            if lib.vkCreatePipelineCache(self.device, info, ffi.NULL, out) == vk.VK_SUCCESS:
                return out[0]
        raise VulkanError("vkCreatePipelineCache failed")

    def save_pipeline_cache(self):
        """Write the driver's VkPipelineCache next to the kernel cache (at exit, when this
        process built pipelines): the next process creates them from it."""
        path = self._cache_path()
        if not path:
            return None
        lib, ffi = vk.lib, vk.ffi
        try:
            size = ffi.new("size_t*")
            if lib.vkGetPipelineCacheData(self.device, self.pipeline_cache, size, ffi.NULL) != vk.VK_SUCCESS:
                return None
            buf = ffi.new("char[]", size[0])
            if lib.vkGetPipelineCacheData(self.device, self.pipeline_cache, size, buf) != vk.VK_SUCCESS:
                return None
            tmp = path + f".{os.getpid()}.tmp"
            with open(tmp, "wb") as fh:
                fh.write(ffi.buffer(buf, size[0]))
            os.replace(tmp, path)
            self.new_pipelines = 0
            return path
        except OSError:
            return None  # the pipeline cache only saves time

    def _at_exit(self):
        if self.new_pipelines:
            self.save_pipeline_cache()

    def _new_desc_pool(self):
        sizes = [vk.VkDescriptorPoolSize(type=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, descriptorCount=8192)]
        self.desc_pools.append(vk.vkCreateDescriptorPool(self.device, vk.VkDescriptorPoolCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, maxSets=1024, poolSizeCount=1,
            pPoolSizes=sizes), None))
        self.desc_used = 0

    # ---- memory ---------------------------------------------------------------------------
    @staticmethod
    def _bucket(nbytes):
        n = max(int(nbytes), ALIGN)
        if n <= BLOCK_BYTES:
            return 1 << (n - 1).bit_length()  # powers of two up to a block
        return -(-n // ALIGN) * ALIGN

    def alloc(self, nbytes, mapped=None) -> Buffer:
        """A buffer of at least `nbytes` (uninitialised): an array's (`mapped_arrays` says
        where those live) or, with mapped=True, host-visible staging memory."""
        mapped = self.mapped_arrays if mapped is None else mapped
        b = self._bucket(nbytes)
        with self.mutex:
            lst = self.free.get((mapped, b))
            if lst:
                block, off = lst.pop()
                return Buffer(self, block, off, b, nbytes)
            if b > BLOCK_BYTES:
                block = _Block(self, b, mapped)
                self.blocks.append(block)
                return Buffer(self, block, 0, b, nbytes)
            for block in self.blocks:
                if block.size == BLOCK_BYTES and (block.mapped is not None) == mapped and block.top + b <= block.size:
                    off = block.top
                    block.top += b
                    return Buffer(self, block, off, b, nbytes)
            block = _Block(self, BLOCK_BYTES, mapped)
            self.blocks.append(block)
            block.top = b
            return Buffer(self, block, 0, b, nbytes)

    def _release(self, buf):
        # called from Buffer.__del__: a buffer still used by recorded commands is held in
        # `pending`, so it cannot get here before they ran
        try:
            self.free.setdefault((buf.block.mapped is not None, buf.nbytes), []).append((buf.block, buf.offset))
        except Exception:
            pass

    def upload(self, a: np.ndarray) -> Buffer:
        """A new array buffer holding `a`: written in place when mapped, else copied from a
        staging buffer by the queue (before anything recorded after it)."""
        a = np.ascontiguousarray(a)
        if self.mapped_arrays or not a.nbytes:
            buf = self.alloc(a.nbytes)
            if a.nbytes:
                buf.view(np.uint8, (a.nbytes,))[:] = a.reshape(-1).view(np.uint8)
            return buf
        stage = self.alloc(a.nbytes, mapped=True)
        stage.view(np.uint8, (a.nbytes,))[:] = a.reshape(-1).view(np.uint8)
        buf = self.alloc(a.nbytes)
        self.copy(stage, buf, a.nbytes)
        return buf

    # ---- the backend interface (runtime/backend.py) ------------------------------------------
    kind = "vulkan"

    def empty(self, shape, dtype):
        return self.alloc(max(math.prod(shape), 1) * np.dtype(dtype).itemsize)

    def program(self, text, name="kernel", key=None, prepare=None):
        """A GpuProgram: SPIR-V kernels and their launch plan (cached in memory and on disk)."""
        return compile_program(text, name, prepare)

    def dispatch(self, k, grid, block, args):
        self.launch(self.kernel(k.spirv, k.name, k.nargs), grid, block, args)

    def download(self, buf: Buffer, dtype, shape) -> np.ndarray:
        """A numpy copy of a buffer's contents (through a staging buffer when the buffer
        is device-local), once what was queued on it has run."""
        if buf.block.mapped is not None:
            self.synchronize()
            return buf.view(dtype, shape).copy()
        n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if not n:
            return np.empty(shape, dtype)
        stage = self.alloc(n, mapped=True)
        self.copy(buf, stage, n)
        self.synchronize()
        return stage.view(dtype, shape).copy()

    # ---- kernels and launches -------------------------------------------------------------
    def _retired_append(self, kernel):
        self._retired.append(kernel)

    def kernel(self, spirv: bytes, entry: str, nargs: int) -> Kernel:
        key = (spirv, entry, nargs)
        k = self.kernels.get(key)
        if k is None:
            with self.mutex:
                k = self.kernels.put(key, Kernel(self, spirv, entry, nargs))
        return k

    def _begin(self):
        if not self.recording:
            vk.vkBeginCommandBuffer(self.cmd, vk.VkCommandBufferBeginInfo(
                sType=vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                flags=vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT))
            self.recording = True
            self.n_recorded = 0

    def launch(self, kernel: Kernel, grid, block, args):
        """Record one dispatch; it runs at the next `synchronize`.

        The commands go through cffi directly (`vk.lib`): the wrapper's per-call struct
        conversion cost ~150 µs of the ~250 µs an eager op took."""
        lib, ffi = vk.lib, vk.ffi
        with self.mutex:
            if self.recording and self.n_recorded >= 512:
                self.synchronize()  # bound the descriptors one submit holds
            self._begin()
            if self.desc_used + 1 > 1024 or (self.desc_used + 1) * max(kernel.nargs, 1) > 8192:
                self.synchronize()
                self._begin()
            alloc = ffi.new("VkDescriptorSetAllocateInfo*", {
                "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, "descriptorPool": self.desc_pools[-1],
                "descriptorSetCount": 1, "pSetLayouts": kernel.set_layout_ptr})
            dset = ffi.new("VkDescriptorSet*")
            if lib.vkAllocateDescriptorSets(self.device, alloc, dset) != vk.VK_SUCCESS:
                raise VulkanError("vkAllocateDescriptorSets failed")
            self.desc_used += 1
            n = len(args)
            if n:
                infos = ffi.new("VkDescriptorBufferInfo[]", n)
                writes = ffi.new("VkWriteDescriptorSet[]", n)
                for i, b in enumerate(args):
                    infos[i].buffer = b.block.buffer
                    infos[i].offset = b.offset
                    infos[i].range = max(b.nbytes, 4)
                    w = writes[i]
                    w.sType = vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET
                    w.dstSet = dset[0]
                    w.dstBinding = i
                    w.descriptorCount = 1
                    w.descriptorType = vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
                    w.pBufferInfo = infos + i
                lib.vkUpdateDescriptorSets(self.device, n, writes, 0, ffi.NULL)
            if self.n_recorded:
                # the previous dispatch's (or copy's) writes are visible to this one
                lib.vkCmdPipelineBarrier(self.cmd, vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
                                         | vk.VK_PIPELINE_STAGE_TRANSFER_BIT, vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                                         0, 1, self._compute_barrier, 0, ffi.NULL, 0, ffi.NULL)
            lib.vkCmdBindPipeline(self.cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, kernel.pipeline)
            lib.vkCmdBindDescriptorSets(self.cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, kernel.layout, 0, 1, dset,
                                        0, ffi.NULL)
            lib.vkCmdDispatch(self.cmd, int(grid[0]), int(grid[1]), int(grid[2]))
            self.pending.extend(args)
            self.n_recorded += 1
            stats.dispatches += 1

    def copy(self, src: Buffer, dst: Buffer, nbytes=None):
        """Record a device-side copy (vkCmdCopyBuffer); it runs at the next `synchronize`."""
        n = min(src.nbytes, dst.nbytes) if nbytes is None else nbytes
        with self.mutex:
            self._begin()
            if self.n_recorded:
                barrier = vk.VkMemoryBarrier(sType=vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                                             srcAccessMask=vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT,
                                             dstAccessMask=vk.VK_ACCESS_TRANSFER_READ_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT)
                vk.vkCmdPipelineBarrier(self.cmd, vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
                                        | vk.VK_PIPELINE_STAGE_TRANSFER_BIT, vk.VK_PIPELINE_STAGE_TRANSFER_BIT,
                                        0, 1, [barrier], 0, None, 0, None)
            vk.vkCmdCopyBuffer(self.cmd, src.block.buffer, dst.block.buffer, 1, [vk.VkBufferCopy(
                srcOffset=src.offset, dstOffset=dst.offset, size=n)])
            self.pending.extend([src, dst])
            self.n_recorded += 1

    def synchronize(self):
        """Submit what was recorded and wait for it."""
        with self.mutex:
            if not self.recording:
                return
            # the host reads what the queue wrote (mapped arrays, staging buffers)
            vk.lib.vkCmdPipelineBarrier(self.cmd, vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
                                        | vk.VK_PIPELINE_STAGE_TRANSFER_BIT, vk.VK_PIPELINE_STAGE_HOST_BIT,
                                        0, 1, self._host_barrier, 0, vk.ffi.NULL, 0, vk.ffi.NULL)
            vk.vkEndCommandBuffer(self.cmd)
            self.recording = False
            vk.vkQueueSubmit(self.queue, 1, [vk.VkSubmitInfo(sType=vk.VK_STRUCTURE_TYPE_SUBMIT_INFO,
                                                             commandBufferCount=1, pCommandBuffers=[self.cmd])],
                             self.fence)
            vk.vkWaitForFences(self.device, 1, [self.fence], vk.VK_TRUE, 0xFFFFFFFFFFFFFFFF)
            vk.vkResetFences(self.device, 1, [self.fence])
            vk.vkResetCommandBuffer(self.cmd, 0)
            for p in self.desc_pools:
                vk.vkResetDescriptorPool(self.device, p, 0)
            self.desc_used = 0
            self.pending = []
            stats.submits += 1
            for k in self._retired:  # no command buffer refers to them any more
                k.destroy(self.device)
            self._retired = []

    def gpu_seconds(self, record) -> float:
        """Device time of the dispatches `record()` records, from timestamp queries (for
        benchmarks: what the GPU spent, without Python's submit and wait)."""
        with self.mutex:
            self.synchronize()
            if getattr(self, "_queries", None) is None:
                self._queries = vk.vkCreateQueryPool(self.device, vk.VkQueryPoolCreateInfo(
                    sType=vk.VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO, queryType=vk.VK_QUERY_TYPE_TIMESTAMP,
                    queryCount=2), None)
            self._begin()
            vk.vkCmdResetQueryPool(self.cmd, self._queries, 0, 2)
            vk.vkCmdWriteTimestamp(self.cmd, vk.VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, self._queries, 0)
            record()
            self._begin()
            vk.vkCmdWriteTimestamp(self.cmd, vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, self._queries, 1)
            self.synchronize()
            data = vk.ffi.new("uint64_t[2]")
            vk.vkGetQueryPoolResults(self.device, self._queries, 0, 2, vk.ffi.sizeof(data), data, 8,
                                     vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT)
            return (int(data[1]) - int(data[0])) * self.timestamp_period * 1e-9

    @property
    def pending_dispatches(self):
        return self.n_recorded if self.recording else 0


def is_available() -> bool:
    return VulkanDevice.get() is not None


# ---- programs: lowered modules, cached in memory and on disk -----------------------------------

_programs = LRU(default_capacity())


def target():
    """The SPIR-V target of this process's device (capabilities it reports)."""
    from ..lowering.gpu_map import SUBGROUP, THREADS
    from ..lowering.gpu_pipeline import Target
    dev = VulkanDevice.get()
    if dev is None:
        return Target()
    f = dev.features
    threads = min(THREADS, dev.max_threads)  # (mirax-gpu-map's workgroups are at most THREADS)
    # buffers per kernel: the device's limit (NVIDIA and AMD report ~10^6: kernels as large
    # as fusion makes them; the cap keeps the cache key stable across such devices)
    return Target(float64=f["float64"], int64=f["int64"], int16=f["int16"], int8=f["int8"],
                  float16=f["float16"], storage8=f["storage8"], storage16=f["storage16"],
                  max_threads=threads, subgroup=min(dev.subgroup or SUBGROUP, threads),
                  max_buffers=min(dev.max_buffers, 1024), max_loop_iterations=dev.loop_limit, exact_floats=True)


def compile_program(text: str, name: str = "main", prepare=None, stages=None):
    """The GpuProgram of a module of mirax ops (text), from memory, disk or the pipeline."""
    from ..lowering import gpu_pipeline
    from . import disk_cache
    from .context import context
    from mlir import ir
    tgt = target()
    key = disk_cache.cache_key(text + (f"\n// prepared by {prepare[0]}" if prepare else ""),
                               name, 0, ["vulkan", tgt.key()])
    p = _programs.get(key)
    if p is not None and stages is None:
        return p
    d = disk_cache.cache_dir()
    path = os.path.join(d, "gpu-" + key[:40] + ".json") if d is not None else None
    if stages is None and path and os.path.exists(path):
        try:
            with open(path) as fh:
                digest, _, body = fh.read().partition("\n")
            if digest != hashlib.sha256(body.encode()).hexdigest():
                raise ValueError("checksum")
            p = gpu_pipeline.GpuProgram.from_json(body)
            os.utime(path)  # recently used: eviction goes by mtime
            return _programs.put(key, p)
        except Exception:  # noqa: BLE001 - a truncated or corrupt entry is rebuilt
            from .cpu import stats
            stats.disk_corrupt += 1
    with context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        if prepare:
            prepare[1](module)
        try:
            p = gpu_pipeline.lower_to_spirv(module, name, tgt, stages)
        except (ir.MLIRError, ValueError) as err:  # an upstream pass or transform failed
            from ..dialect.core import MiraxError
            lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
            why = next((ln for ln in lines if "error:" in ln or "Diagnostic" in ln), lines[0] if lines else "")
            raise MiraxError(f"the GPU pipeline failed on @{name}: {why}" + (
                "\n  " + "\n  ".join(lines[1:6]) if len(lines) > 1 else "")) from None
    _programs.put(key, p)
    if path:
        # first line: the sha256 of the rest, so a truncated or altered entry is rebuilt;
        # written whole under a temporary name (dot-prefixed: eviction skips it) and renamed
        tmp = os.path.join(d, f".gpu-{key[:16]}.{os.getpid()}.{threading.get_ident()}.tmp")
        body = p.to_json()
        try:
            with open(tmp, "w") as fh:
                fh.write(hashlib.sha256(body.encode()).hexdigest() + "\n" + body)
            os.replace(tmp, path)
            disk_cache._after_store(Path(d), os.path.getsize(path))
        except OSError:
            pass
    return p


