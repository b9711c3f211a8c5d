"""How large stores and loads are pipelined.

The daemon's work on a request is mostly a CRC32C pass over its pages' bytes (a commit computes the checksums it
records; a verified pin checks them), on its native threads. Sent as one request per call, that pass and this
process's copy run one after the other. On a framed session (_frames.py) requests can be in flight together, so a
call is cut into chunks: the daemon checksums chunk j while this process copies chunk j+1 (a store), or checks chunk
j+1 while this process copies chunk j (a load), and the bytes the CRC32C reads were just written (or are about to be
read) by the copy, so they are still in the CPU's last-level cache. Over HTTP a call goes in max_batch_pages batches,
one request at a time. Loads are pipelined by default; stores only with a core to spare (core_to_spare). With the
daemon's CRC32C library (_native.py) this process checksums in its own copy and the daemon has no pass to overlap:
neither is pipelined by default then.
"""

import os

#: Bytes per chunk of a pipelined load: the daemon's check reads a chunk into the last-level cache (32 MiB of L3
#: here) just before this process copies it out, so the copy reads cache, not DRAM. Measured here (2 cores, load
#: average 10-13, minimum of 8): 256 MiB loaded in 86 ms in 8 MiB chunks, 99 ms in 16 MiB, 195 ms in one request.
LOAD_CHUNK_BYTES = 8 << 20

#: Bytes per chunk of a pipelined store: glibc's memmove writes copies above ~24 MiB here (3/4 of the L3) with
#: non-temporal stores, which write a 4 KiB-paged /dev/shm mapping much faster (measured: 256 MiB in 4 MiB memmoves
#: took 2.4x numpy.copyto, in one memmove 1.4x); smaller chunks made each copy slower than the overlap gained.
STORE_CHUNK_BYTES = 64 << 20

#: Reservations or pins in flight ahead of the chunk being copied (more would check chunks long before they are
#: copied, after they left the cache, and hold more slots than the copy needs).
PIPELINE_DEPTH = 2


def core_to_spare() -> bool:
    """Whether this host has a core to spare for the daemon's CRC32C pass beside this process's copy: overlapping them
    only pays when both run at once. On a host whose cores are all busy (1-minute load average at or above the cores
    this process may run on) the chunks' extra requests and wake-ups cost more than the overlap gains (measured on a
    2-core host at load 7-11: one request per batch was faster), so the call goes in whole batches."""
    try:
        return os.getloadavg()[0] < len(os.sched_getaffinity(0))
    except (OSError, AttributeError):
        return True
