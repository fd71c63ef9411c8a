"""MLX's further stream constructors: `new_thread_local_stream`, `new_thread_unsafe_stream`,
`clear_streams`, `StreamContext`.

mirax runs one queue per device, so a stream names its device (and an index, for
equality and printing); any of them works with `mr.stream(...)` and `stream=`.

    s = mr.new_thread_local_stream(mr.cpu)
    with mr.stream(s):
        y = x + 1
"""
from __future__ import annotations

import itertools

from .device import Device, Stream, _as_device, stream, synchronize

_indices = itertools.count(1)  # index 0 is each device's default stream


class ThreadLocalStream(Stream):
    """A stream meant to be unique per thread (MLX's `ThreadLocalStream`)."""

    def __repr__(self):
        return f"ThreadLocalStream({self.device!r}, {self.index})"

    def __eq__(self, other):
        return isinstance(other, ThreadLocalStream) and (self.device, self.index) == (other.device, other.index)

    __hash__ = Stream.__hash__


def _device_of(device) -> Device:
    if isinstance(device, Stream):
        raise TypeError(f"expected a Device or DeviceType, got the stream {device!r}")
    return _as_device(device)


def new_thread_local_stream(device) -> ThreadLocalStream:
    """A new stream on `device` for use on any thread (each thread sees its own queue)."""
    return ThreadLocalStream(_device_of(device), next(_indices))


def new_thread_unsafe_stream(device) -> Stream:
    """A new stream on `device` that may be passed between threads."""
    return Stream(_device_of(device), next(_indices))


def clear_streams() -> None:
    """MLX destroys the streams of the calling thread; mirax's streams own no queue, so
    this only waits for the work queued on every device to finish."""
    synchronize()


# MLX's class name for the context manager `mr.stream(s)` returns
StreamContext = stream
