"""Copies between caller memory and shared-memory slots: one memmove per contiguous run, on native threads.

``ctypes.memmove`` is a C function called through ctypes, which releases the GIL for the call, so the copies of one
batch can run in parallel on a small thread pool (``threads`` > 1) and Python code elsewhere keeps running. Runs that are adjacent on both
sides (consecutive slots from consecutive bytes of one array) are merged first, so a 256 MiB store from one array into
consecutive slots is a few large memmoves, not one call per page.
"""

from __future__ import annotations

import ctypes
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import List, Optional, Tuple

from . import _native

#: A copy of ``n`` bytes from address ``src`` to address ``dst``.
Job = Tuple[int, int, int]

#: Copies out of shared memory are cut into pieces of this size. Measured here (AMD EPYC, glibc 2.36, /dev/shm in
#: 4 KiB pages): reading 256 MiB from the arena took 6x numpy.copyto in 256 KiB memmoves (glibc's `rep movsb` range),
#: 3.4x in one 256 MiB memmove, 1.8x in 4 MiB pieces. Copies into the arena are fastest as whole runs (1.0x).
LOAD_PIECE_BYTES = 4 << 20

#: Below this many bytes a batch is copied on the calling thread (handing work to a pool costs ~10 us).
PARALLEL_MIN_BYTES = 4 << 20

#: Copy+CRC32C batches this large are written with non-temporal stores: they exceed what the caches keep anyway
#: (32 MiB of L3 here), and streamed stores skip reading each destination line before writing it.
STREAM_MIN_BYTES = 8 << 20
_memmove = ctypes.memmove


def coalesce(jobs: List[Job]) -> List[Job]:
    """Merges consecutive jobs that continue each other on both sides."""
    out: List[Job] = []
    for dst, src, n in jobs:
        if out:
            d, s, m = out[-1]
            if d + m == dst and s + m == src:
                out[-1] = (d, s, m + n)
                continue
        out.append((dst, src, n))
    return out


def split(jobs: List[Job], parts: int) -> List[List[Job]]:
    """Cuts jobs into ``parts`` lists of about equal bytes (large runs are cut at 64 KiB-aligned points)."""
    total = sum(n for _, _, n in jobs)
    share = -(-total // parts)
    share = (share + 0xFFFF) & ~0xFFFF
    out: List[List[Job]] = [[]]
    room = share
    for dst, src, n in jobs:
        while n > 0:
            if room == 0:
                out.append([])
                room = share
            take = min(n, room)
            out[-1].append((dst, src, take))
            dst, src, n, room = dst + take, src + take, n - take, room - take
    return out


def _run(jobs: List[Job]) -> None:
    for dst, src, n in jobs:
        _memmove(dst, src, n)


#: A copy with CRC32Cs: ``n`` bytes from ``src`` to ``dst`` in pieces of ``page`` bytes (the last may be shorter), the
#: CRC32C of piece k written to ``crcs[at + k]``.
CrcJob = Tuple[int, int, int, int, int]


def split_pages(jobs: List[CrcJob], parts: int) -> List[List[CrcJob]]:
    """Cuts copy-with-CRC jobs into ``parts`` lists of about equal bytes, at page boundaries (a CRC covers a page)."""
    total = sum(n for _, _, n, _, _ in jobs)
    share = -(-total // parts)
    out: List[List[CrcJob]] = [[]]
    room = share
    for dst, src, n, page, at in jobs:
        while n > 0:
            if room <= 0:
                out.append([])
                room = share
            take = min(n, max(page, room // page * page))
            out[-1].append((dst, src, take, page, at))
            dst, src, n, at, room = dst + take, src + take, n - take, at + take // page, room - take
    return out


def auto_threads() -> int:
    """Copy threads for ``Client.connect(threads=None)``: 2 where this process may run on 2 cores or more, else 1.

    One core copies (and checksums) at ~10 GB/s here, half of what the memory system moves: measured in one process
    (256 MiB, numpy array <-> 4 KiB-paged /dev/shm, AMD EPYC, 2 vCPUs, minimum of 7 at load average 4), numpy.copyto
    23.4 ms; copy+CRC32C into the arena 31.8 ms on one thread, 22.8 ms on two; out of it 33.6 / 22.1 ms. On busy
    cores the second thread costs about nothing (medians at that load: 36.6 / 32.0 ms in, 38.6 / 40.4 ms out)."""
    try:
        return 2 if len(os.sched_getaffinity(0)) >= 2 else 1
    except (OSError, AttributeError):
        return 1


class Copier:
    """Runs batches of copies on ``threads`` native threads (1: on the caller's thread)."""

    def __init__(self, threads: int):
        self.threads = threads
        #: Seconds spent copying so far.
        self.seconds = 0.0
        self._pool: Optional[ThreadPoolExecutor] = ThreadPoolExecutor(threads - 1, thread_name_prefix="tiersync-copy") if threads > 1 else None

    def _parallel(self, total: int) -> bool:
        return self._pool is not None and total >= PARALLEL_MIN_BYTES

    def run(self, jobs: List[Job], piece: Optional[int] = None) -> None:
        """Copies ``jobs`` (merged where they continue each other). ``piece`` cuts runs into copies of at most that
        many bytes: reads from shared memory are faster in pieces of a few MiB here (see LOAD_PIECE_BYTES)."""
        start = time.perf_counter()
        try:
            self._run(coalesce(jobs), piece)
        finally:
            self.seconds += time.perf_counter() - start

    def _run(self, jobs: List[Job], piece: Optional[int]) -> None:
        if piece is not None:
            jobs = [(d + o, s + o, min(piece, n - o)) for d, s, n in jobs for o in range(0, n, piece)]
        total = sum(n for _, _, n in jobs)
        if not self._parallel(total):
            _run(jobs)
            return
        parts = split(jobs, self.threads)
        # The caller's thread takes the first share itself; the others go to the pool. Memory copies cannot block,
        # so waiting for them needs no deadline beyond the copies' own length.
        futures = [self._pool.submit(_run, p) for p in parts[1:]]
        _run(parts[0])
        for f in futures:
            f.result()

    def run_crc(self, lib, jobs: List[CrcJob], crcs, expected=None, stream: Optional[bool] = None) -> int:
        """Copies ``jobs`` with ``lib`` (_native.NativeCrc32c), each page's CRC32C computed in the same pass into
        ``crcs`` (a ctypes uint32 array); on ``threads`` native threads when the batch is large enough. With
        ``expected`` (a ctypes uint32 array indexed like ``crcs``) returns how many copied pages differ from it.

        A batch goes to the library in one call per thread (``copy_jobs``). ``stream``: non-temporal stores; None
        (default) streams batches of STREAM_MIN_BYTES or more, which leave the caches anyway. Measured here (256 MiB,
        4 KiB-paged /dev/shm, AMD EPYC): the folding copy+CRC32C took 1.2x memcpy into the arena and 1.1-1.3x out of
        it with streamed stores, 1.5x with cached ones; the crc32 loop before it took 1.7x."""
        start = time.perf_counter()
        try:
            total = sum(n for _, _, n, _, _ in jobs)
            if stream is None:
                stream = total >= STREAM_MIN_BYTES
            parts = split_pages(jobs, self.threads) if self._parallel(total) else [jobs]
            if not getattr(lib, "batched", False):
                def run(part: List[CrcJob]) -> int:
                    for dst, src, n, page, at in part:
                        lib.copy_pages(dst, src, n, page, crcs, at)
                    return 0
            else:
                def run(part: List[CrcJob]) -> int:
                    by_page: dict = {}
                    for job in part:
                        by_page.setdefault(job[3], []).append(job)
                    bad = 0
                    for page, group in by_page.items():
                        arr = (_native.CopyJob * len(group))(*[(d, a, n, at) for d, a, n, _, at in group])
                        bad += lib.copy_jobs(arr, len(group), page, crcs, expected, stream)
                    return bad
            futures = [self._pool.submit(run, p) for p in parts[1:]] if self._pool is not None else []
            bad = run(parts[0])
            for f in futures:
                bad += f.result()
            if expected is not None and not getattr(lib, "batched", False):
                bad = sum(1 for _, _, n, page, at in jobs for i in range(at, at + -(-n // page)) if crcs[i] != expected[i])
            return bad
        finally:
            self.seconds += time.perf_counter() - start

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
