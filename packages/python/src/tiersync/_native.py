"""The daemon's CRC32C as a C library (libtiersync_crc32c.so, built beside the native addon from its crc32c.cc),
loaded with ctypes: a page is copied and checksummed in one pass over its bytes, natively, with the GIL released.

The daemon names the library's path in ``hello.crc32cLibrary`` (feature ``crc32c-library``); ``TIERSYNC_CRC32C_LIBRARY``
names another file, and ``TIERSYNC_NATIVE_CRC32C=0`` (or ``Client.connect(native_crc32c=False)``) turns it off: the
client then leaves the checksums to the daemon, as without the library.
"""

from __future__ import annotations

import ctypes
import os
from typing import Optional

from .errors import UnavailableError

#: The library ABI this module binds (``tiersync_crc32c_abi()``).
ABI = 1


class NativeCrc32c:
    """The bound functions of one loaded library."""

    def __init__(self, path: str):
        try:
            lib = ctypes.CDLL(path)
            lib.tiersync_crc32c_abi.restype = ctypes.c_uint32
            lib.tiersync_crc32c_abi.argtypes = []
            abi = lib.tiersync_crc32c_abi()
        except (OSError, AttributeError) as e:
            raise UnavailableError(f"cannot load the CRC32C library {path}: {e}") from None
        if abi != ABI:
            raise UnavailableError(f"the CRC32C library {path} has ABI {abi}; this client binds ABI {ABI}")
        self.path = path
        self._crc = lib.tiersync_crc32c
        self._crc.restype = ctypes.c_uint32
        self._crc.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint32]
        self._copy = lib.tiersync_copy_crc32c
        self._copy.restype = ctypes.c_uint32
        self._copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint32]
        self._pages = lib.tiersync_copy_crc32c_pages
        self._pages.restype = ctypes.c_size_t
        self._pages.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p]
        # One call per batch (added to ABI 1 later: an older library lacks it, and copy_pages serves instead).
        self._jobs = getattr(lib, "tiersync_copy_crc32c_jobs", None)
        if self._jobs is not None:
            self._jobs.restype = ctypes.c_size_t
            self._jobs.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint32]
        impl = lib.tiersync_crc32c_impl
        impl.restype = ctypes.c_char_p
        impl.argtypes = []
        #: The implementation the library selected on this CPU ("hw3-clmul", "hw3", "hw1", "table").
        self.impl = impl().decode()

    def crc32c(self, address: int, n: int, seed: int = 0) -> int:
        """CRC32C of ``n`` bytes at ``address``, continuing ``seed``."""
        return self._crc(address, n, seed)

    def copy_crc32c(self, dst: int, src: int, n: int, seed: int = 0) -> int:
        """Copies ``n`` bytes from ``src`` to ``dst`` and returns their CRC32C continuing ``seed``, in one pass."""
        return self._copy(dst, src, n, seed)

    def copy_pages(self, dst: int, src: int, n: int, page: int, crcs: "ctypes.Array[ctypes.c_uint32]", at: int = 0) -> None:
        """Copies ``n`` bytes in one pass and writes the CRC32C of each ``page``-byte piece to ``crcs[at:]``."""
        if n > 0:
            self._pages(dst, src, n, page, ctypes.addressof(crcs) + 4 * at)


    @property
    def batched(self) -> bool:
        """Whether the library copies a whole batch of jobs in one call (``tiersync_copy_crc32c_jobs``)."""
        return self._jobs is not None

    def copy_jobs(self, jobs: "ctypes.Array[CopyJob]", count: int, page: int, crcs: "ctypes.Array[ctypes.c_uint32]", expected: "Optional[ctypes.Array[ctypes.c_uint32]]" = None, stream: bool = False) -> int:
        """Copies ``count`` jobs in one native call (the GIL released once), each page's CRC32C written to
        ``crcs[job.at + k]``. ``stream``: non-temporal stores (a destination not read soon). With ``expected``, returns
        how many copied pages' CRC32Cs differ from it (0: all matched); else 0."""
        if count == 0:
            return 0
        bad = self._jobs(ctypes.addressof(jobs), count, page, ctypes.addressof(crcs), ctypes.addressof(expected) if expected is not None else None, COPY_STREAM if stream else 0)
        if bad == ctypes.c_size_t(-1).value:
            raise ValueError("copy_jobs: page must be > 0")
        return bad


class CopyJob(ctypes.Structure):
    """One job of ``tiersync_copy_crc32c_jobs`` (crc32c_capi.cc TiersyncCopyJob): ``n`` bytes from ``src`` to
    ``dst`` in pieces of the batch's page size, piece k's CRC32C at ``crcs[at + k]``."""

    _fields_ = [("dst", ctypes.c_uint64), ("src", ctypes.c_uint64), ("n", ctypes.c_uint64), ("at", ctypes.c_uint64)]


#: tiersync_copy_crc32c_jobs flag: non-temporal stores.
COPY_STREAM = 1


def resolve(offered: Optional[str], wanted: Optional[bool]) -> Optional[NativeCrc32c]:
    """The library to use: ``TIERSYNC_CRC32C_LIBRARY`` or the daemon's ``offered`` path, unless turned off (``wanted``
    False, or ``TIERSYNC_NATIVE_CRC32C=0``). None when unavailable, unless ``wanted`` is True (UnavailableError)."""
    if wanted is False or (wanted is None and os.environ.get("TIERSYNC_NATIVE_CRC32C", "1") in ("0", "false", "off", "no")):
        return None
    path = os.environ.get("TIERSYNC_CRC32C_LIBRARY") or offered
    if not path:
        if wanted:
            raise UnavailableError("native_crc32c=True, but the daemon offers no CRC32C library (hello.crc32cLibrary) and TIERSYNC_CRC32C_LIBRARY is not set")
        return None
    try:
        return NativeCrc32c(path)
    except UnavailableError:
        if wanted:
            raise
        return None  # a library that cannot be loaded here: the daemon checks the bytes, as without one
