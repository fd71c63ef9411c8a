"""SPIR-V → Metal Shading Language, with SPIRV-Cross's C API (Debian
`libspirv-cross-c-shared0`, through ctypes: no PyPI binding exists; the `spirv-cross` CLI
is not used).

    k = to_msl(spirv_bytes, "main_kernel", block=(256, 1, 1))
    k.source        # MSL 2.3 (64-bit integers need 2.3)
    k.entry         # the kernel's name in the MSL (SPIRV-Cross renames `main` and keywords)
    k.buffers       # k.buffers[j] = i: kernel argument j (descriptor binding j) is [[buffer(i)]]
    k.threadgroup   # (x, y, z): MSL has no LocalSize; the launch must pass it

`msl_program(module)` lowers a module of mirax ops for a Metal target (no float64: MSL
has no double; the op and dtype are named) and translates each kernel, keeping the
launch plan: what runtime/metal.py runs.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

from ..dialect.core import MiraxError

_MSL_BACKEND = 3  # SPVC_BACKEND_MSL
_TAKE_OWNERSHIP = 1  # SPVC_CAPTURE_MODE_TAKE_OWNERSHIP
_STORAGE_BUFFER = 2  # SPVC_RESOURCE_TYPE_STORAGE_BUFFER
_OPTION_MSL_VERSION = 17 | 0x8000000
_OPTION_MSL_PLATFORM = 31 | 0x8000000
_PLATFORM_MACOS = 1
_DECORATION_BINDING = 33  # SpvDecorationBinding
_GLCOMPUTE = 5  # SpvExecutionModelGLCompute
MSL_VERSION = (2, 3, 0)

INSTALL_HINT = "apt-get install libspirv-cross-c-shared0 (Debian's SPIRV-Cross C library); `make setup` does it"


class _Resource(ctypes.Structure):  # spvc_reflected_resource
    _fields_ = [("id", ctypes.c_uint32), ("base_type_id", ctypes.c_uint32), ("type_id", ctypes.c_uint32),
                ("name", ctypes.c_char_p)]


_lib = None


def _spvc():
    global _lib
    if _lib is None:
        try:
            lib = ctypes.CDLL("libspirv-cross-c-shared.so.0")
        except OSError:
            try:
                lib = ctypes.CDLL("libspirv-cross-c-shared.dylib")
            except OSError:
                raise MiraxError("SPIRV-Cross is missing: " + INSTALL_HINT) from None
        vp, u32, i = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int
        sigs = {
            "spvc_context_create": ([ctypes.POINTER(vp)], i),
            "spvc_context_destroy": ([vp], None),
            "spvc_context_get_last_error_string": ([vp], ctypes.c_char_p),
            "spvc_context_parse_spirv": ([vp, ctypes.POINTER(u32), ctypes.c_size_t, ctypes.POINTER(vp)], i),
            "spvc_context_create_compiler": ([vp, i, vp, i, ctypes.POINTER(vp)], i),
            "spvc_compiler_create_compiler_options": ([vp, ctypes.POINTER(vp)], i),
            "spvc_compiler_options_set_uint": ([vp, i, ctypes.c_uint], i),
            "spvc_compiler_install_compiler_options": ([vp, vp], i),
            "spvc_compiler_compile": ([vp, ctypes.POINTER(ctypes.c_char_p)], i),
            "spvc_compiler_create_shader_resources": ([vp, ctypes.POINTER(vp)], i),
            "spvc_resources_get_resource_list_for_type": (
                [vp, i, ctypes.POINTER(ctypes.POINTER(_Resource)), ctypes.POINTER(ctypes.c_size_t)], i),
            "spvc_compiler_get_decoration": ([vp, u32, i], ctypes.c_uint),
            "spvc_compiler_msl_get_automatic_resource_binding": ([vp, u32], ctypes.c_uint),
            "spvc_compiler_get_cleansed_entry_point_name": ([vp, ctypes.c_char_p, i], ctypes.c_char_p),
        }
        for name, (args, res) in sigs.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, res
        _lib = lib
    return _lib


@dataclass
class MslKernel:
    source: str
    entry: str
    buffers: list  # argument j -> [[buffer(buffers[j])]]
    threadgroup: tuple

    def text(self, mod):
        return f"// kernel {mod}: entry {self.entry}, threadgroup {self.threadgroup}, buffers {self.buffers}\n" \
            + self.source


def to_msl(spirv: bytes, entry: str, block=(1, 1, 1)) -> MslKernel:
    """One SPIR-V compute module as MSL, with its binding map and threadgroup size."""
    lib = _spvc()
    ctx = ctypes.c_void_p()
    if lib.spvc_context_create(ctypes.byref(ctx)) != 0:
        raise MiraxError("SPIRV-Cross: could not create a context")

    def check(rc, what):
        if rc != 0:
            why = lib.spvc_context_get_last_error_string(ctx)
            raise MiraxError(f"SPIRV-Cross cannot translate kernel {entry} to MSL ({what}): "
                             f"{why.decode() if why else rc}")
    try:
        words = (ctypes.c_uint32 * (len(spirv) // 4)).from_buffer_copy(spirv)
        ir = ctypes.c_void_p()
        check(lib.spvc_context_parse_spirv(ctx, words, len(words), ctypes.byref(ir)), "parse")
        comp = ctypes.c_void_p()
        check(lib.spvc_context_create_compiler(ctx, _MSL_BACKEND, ir, _TAKE_OWNERSHIP, ctypes.byref(comp)),
              "compiler")
        opts = ctypes.c_void_p()
        check(lib.spvc_compiler_create_compiler_options(comp, ctypes.byref(opts)), "options")
        major, minor, patch = MSL_VERSION
        check(lib.spvc_compiler_options_set_uint(opts, _OPTION_MSL_VERSION, major * 10000 + minor * 100 + patch),
              "MSL version")
        check(lib.spvc_compiler_options_set_uint(opts, _OPTION_MSL_PLATFORM, _PLATFORM_MACOS), "platform")
        check(lib.spvc_compiler_install_compiler_options(comp, opts), "options")
        src = ctypes.c_char_p()
        check(lib.spvc_compiler_compile(comp, ctypes.byref(src)), "compile")
        res = ctypes.c_void_p()
        check(lib.spvc_compiler_create_shader_resources(comp, ctypes.byref(res)), "reflection")
        lst, n = ctypes.POINTER(_Resource)(), ctypes.c_size_t()
        check(lib.spvc_resources_get_resource_list_for_type(res, _STORAGE_BUFFER, ctypes.byref(lst),
                                                            ctypes.byref(n)), "reflection")
        by_binding = {}
        for k in range(n.value):
            r = lst[k]
            by_binding[lib.spvc_compiler_get_decoration(comp, r.id, _DECORATION_BINDING)] = \
                lib.spvc_compiler_msl_get_automatic_resource_binding(comp, r.id)
        name = lib.spvc_compiler_get_cleansed_entry_point_name(comp, entry.encode(), _GLCOMPUTE)
        nargs = max(by_binding) + 1 if by_binding else 0
        return MslKernel(src.value.decode(), name.decode() if name else entry,
                         [by_binding.get(j) for j in range(nargs)], tuple(block))
    finally:
        lib.spvc_context_destroy(ctx)


def metal_target():
    """What Metal runs: MSL 2.3 has 8/16/64-bit integers and half, no double."""
    from .gpu_pipeline import Target
    return Target(float64=False, int64=True, int16=True, int8=True, float16=True, storage8=True, storage16=True)


def msl_program(module, name="main", stages=None):
    """Lower a module of mirax ops (in place) for Metal: its GpuProgram, each kernel as an
    MslKernel (the launch plan unchanged)."""
    from .gpu_pipeline import lower_to_spirv
    prog = lower_to_spirv(module, name, metal_target(), stages)
    prog.kernels = {mod: to_msl(k.spirv, k.name, k.block) for mod, k in prog.kernels.items()}
    if stages is not None:
        stages["msl"] = prog.text()
    return prog
