"""Caller memory as byte regions: numpy arrays, torch tensors and buffer-protocol objects, read and written in place.

A region is the caller's bytes seen flat (C order) at their address, so the copy into or out of a shared-memory slot
is one native ``memmove`` that runs without the GIL and makes no temporary copy. Buffer-protocol objects (bytes,
bytearray, memoryview, array.array, mmap) are held through CPython's own buffer protocol while the copy runs. numpy and
torch are optional: they are looked up in ``sys.modules`` only, never imported here.

CUDA tensors are staged through pinned host memory (torch.cuda): stores copy device -> pinned before the slot copy,
loads copy pinned -> device after it. That path is written to torch's documented API but is not tested here (the
build machine has no GPU).
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any, Callable, List, Optional

from .errors import InvalidArgumentError


class Region:
    """``nbytes`` bytes of caller memory at ``address``, kept alive (and exported, for buffer objects) by ``keep``
    until :meth:`release`. ``finish`` runs after a load's copies (device tensors: pinned -> device)."""

    __slots__ = ("address", "nbytes", "writable", "keep", "finish", "_buffer")

    def __init__(self, address: int, nbytes: int, writable: bool, keep: Any, finish: Optional[Callable[[], None]] = None, buffer: Optional["_PyBuffer"] = None):
        self.address = address
        self.nbytes = nbytes
        self.writable = writable
        self.keep = keep
        self.finish = finish
        self._buffer = buffer

    def release(self) -> None:
        if self._buffer is not None:
            _release_buffer(ctypes.byref(self._buffer))
            self._buffer = None
        self.keep = None


class _PyBuffer(ctypes.Structure):
    """CPython's Py_buffer (Include/pybuffer.h, stable since 3.3): the buffer protocol's view of an object's memory."""

    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    ]


# pythonapi calls hold the GIL and raise the Python error the call set (a BufferError for a read-only or
# non-contiguous buffer), so asking CPython for the buffer is as safe as memoryview(obj).
_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_get_buffer.restype = ctypes.c_int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_release_buffer.restype = None
_PyBUF_SIMPLE = 0  # contiguous bytes, read-only allowed
_PyBUF_WRITABLE = 1


def region_of(obj: Any, what: str, *, write: bool) -> Region:
    """The bytes of ``obj`` as a Region. ``write``: the caller wants bytes written into it (a load).

    Raises InvalidArgumentError naming ``what`` for objects that are not contiguous, read-only for a load, or of a
    type this client cannot read in place.
    """
    np = sys.modules.get("numpy")
    if np is not None and isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            # Its bytes are pointers to Python objects: storing them saves addresses, loading writes them (a crash).
            raise InvalidArgumentError(f"{what} holds Python objects (dtype {obj.dtype}); only arrays of plain values can be stored or loaded", field=what)
        if not obj.flags.c_contiguous:
            raise InvalidArgumentError(f"{what} must be C-contiguous (numpy.ascontiguousarray makes one, with a copy)", field=what)
        if write and not obj.flags.writeable:
            raise InvalidArgumentError(f"{what} is read-only; a load needs a writable array", field=what)
        return Region(obj.__array_interface__["data"][0], obj.nbytes, obj.flags.writeable, obj)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return _tensor_region(torch, obj, what, write)
    buf = _PyBuffer()
    try:
        _get_buffer(obj, ctypes.byref(buf), _PyBUF_WRITABLE if write else _PyBUF_SIMPLE)
    except TypeError:
        raise InvalidArgumentError(f"{what} must be a numpy array, a torch tensor or a bytes-like object, got {type(obj).__name__}", field=what) from None
    except BufferError as e:
        why = "read-only; a load needs writable memory (bytearray, numpy array)" if write else f"not readable in place ({e})"
        raise InvalidArgumentError(f"{what} ({type(obj).__name__}) is {why}", field=what) from None
    return Region(buf.buf or 0, buf.len, not buf.readonly, obj, buffer=buf)


def _tensor_region(torch: Any, t: Any, what: str, write: bool) -> Region:
    if t.layout != torch.strided:
        raise InvalidArgumentError(f"{what} is a {t.layout} tensor; only dense (strided) tensors can be stored or loaded (.to_dense() makes one)", field=what)
    # A conjugate or negative view's memory holds the values before the lazy conj() / neg(): read as bytes, it would
    # store (or a load would fill) the wrong values.
    if t.is_conj() or t.is_neg():
        fix = ".resolve_conj()" if t.is_conj() else ".resolve_neg()"
        raise InvalidArgumentError(f"{what} is a lazy {'conjugate' if t.is_conj() else 'negative'} view; {fix} makes a tensor of its values, with a copy", field=what)
    if not t.is_contiguous():
        raise InvalidArgumentError(f"{what} must be a contiguous tensor (.contiguous() makes one, with a copy)", field=what)
    nbytes = t.numel() * t.element_size()
    if t.device.type == "cpu":
        return Region(t.data_ptr(), nbytes, True, t)
    if t.device.type != "cuda":
        raise InvalidArgumentError(f"{what} is on device {t.device}; only CPU and CUDA tensors are supported", field=what)
    # One pinned buffer per tensor: torch's caching host allocator hands the same blocks back call after call.
    pinned = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    flat = t.view(-1).view(torch.uint8)
    if not write:
        # Device -> pinned host memory, synchronous: the slot copy reads the staged bytes right after.
        pinned[:nbytes].copy_(flat)
        return Region(pinned.data_ptr(), nbytes, False, (pinned, t))

    def finish() -> None:
        flat.copy_(pinned[:nbytes], non_blocking=True)
        torch.cuda.current_stream(t.device).synchronize()

    return Region(pinned.data_ptr(), nbytes, True, (pinned, t), finish)


def release_all(regions: List[Region]) -> None:
    for r in regions:
        r.release()
