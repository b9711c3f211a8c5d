"""The daemon's shared-memory host tier, mapped into this process.

The host tier of ``tiersync serve`` is a /dev/shm file: a 4 KiB header (packages/native/cpp/memory.cc, ShmHeader,
little-endian) followed by ``capacity`` bytes of page slots. The daemon hands out slot offsets (``reserve`` for new
pages, ``pin`` for resident ones) counted from the end of the header; the client copies page bytes in or out of
those slots directly, so no page byte crosses a socket.

Header layout: magic "TSARENA1" (8 bytes), u32 version (1), u32 fingerprint length, u64 capacity, u64 page size,
u64 creation time in ms, fingerprint bytes. The client checks it against what ``hello`` announced before mapping,
as the native HostArena does when it reattaches.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import struct

from .errors import GeometryMismatchError, InvalidArgumentError, TierSyncIOError

HEADER_BYTES = 4096
_MAGIC = b"TSARENA1"
_VERSION = 1
_FIXED = struct.Struct("<8sIIQQQ")


class SharedArena:
    """A read-write MAP_SHARED mapping of the daemon's host-tier file.

    ``view`` is a memoryview of the slot area (offset 0 = first byte after the header) and ``address`` its address,
    for native copies (ctypes.memmove) that run without the GIL.
    """

    def __init__(self, path: str, capacity: int, page_size: int, fingerprint: str, *, populate: bool = False):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            raise InvalidArgumentError(f"shared arena {path} does not exist (is the daemon on this host?)") from None
        except OSError as e:
            raise TierSyncIOError(f"cannot open shared arena {path}: {e.strerror}") from e
        try:
            header = os.pread(fd, _FIXED.size + 1024, 0)
            why = _check_header(header, capacity, page_size, fingerprint)
            size = os.fstat(fd).st_size
            page = mmap.PAGESIZE
            map_bytes = HEADER_BYTES + (capacity + page - 1) // page * page
            if not why and size < map_bytes:
                why = f"file is {size} bytes, shorter than its geometry"
            if why:
                raise GeometryMismatchError(f"cannot attach {path}: {why}")
            flags = mmap.MAP_SHARED
            # MAP_POPULATE builds this process's page table up front (a first touch of each 4 KiB page otherwise
            # costs a minor fault inside the first copy that reaches it).
            if populate and hasattr(mmap, "MAP_POPULATE"):
                flags |= mmap.MAP_POPULATE
            try:
                self._mm = mmap.mmap(fd, map_bytes, flags=flags, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            except OSError as e:
                raise TierSyncIOError(f"mmap of shared arena {path} failed: {e.strerror}") from e
            # Transparent huge pages where the mount allows them (/dev/shm mounted huge=advise or within_size; the
            # daemon asks the same for its own mapping): a 256 MiB copy then takes 128 TLB entries, not 65536.
            # Where the kernel refuses (huge=never, the default) nothing changes.
            if hasattr(mmap, "MADV_HUGEPAGE"):
                try:
                    self._mm.madvise(mmap.MADV_HUGEPAGE)
                except OSError:
                    pass
        finally:
            os.close(fd)  # the mapping keeps the file's pages
        self.path = path
        self.capacity = capacity
        self.page_size = page_size
        whole = memoryview(self._mm)
        self.view = whole[HEADER_BYTES : HEADER_BYTES + capacity]
        self._whole = whole
        # A ctypes object over the mapping gives its address; it is an export, so it is dropped before close().
        self._anchor = ctypes.c_char.from_buffer(self._mm)
        self.address = ctypes.addressof(self._anchor) + HEADER_BYTES

    def check(self, offset: int, length: int, what: str) -> None:
        """Refuses a slot range outside the arena (a daemon bug must not become a write past the mapping)."""
        if offset < 0 or length < 0 or offset + length > self.capacity:
            raise GeometryMismatchError(f"{what}: slot [{offset}, {offset + length}) lies outside the shared arena of {self.capacity} bytes")

    def close(self) -> None:
        if self._mm is None:
            return
        self.view.release()
        self._whole.release()
        del self._anchor
        self._mm.close()
        self._mm = None


def _check_header(h: bytes, capacity: int, page_size: int, fingerprint: str) -> str:
    if len(h) < _FIXED.size:
        return "not a tiersync arena file (short header)"
    magic, version, fp_len, cap, psize, _created = _FIXED.unpack_from(h, 0)
    if magic != _MAGIC or version != _VERSION:
        return "not a tiersync arena file (bad header)"
    if cap != capacity:
        return f"capacity is {cap} bytes, expected {capacity}"
    if psize != page_size:
        return f"page size is {psize} bytes, expected {page_size}"
    fp = h[_FIXED.size : _FIXED.size + min(fp_len, 1024)]
    want = fingerprint.encode()
    if fp != want:
        return f"layout fingerprint is {fp.decode(errors='replace')!r}, expected {fingerprint!r}"
    return ""
