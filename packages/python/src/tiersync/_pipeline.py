"""How large stores and loads are pipelined.

The daemon's work on a request is mostly a CRC32C pass over its pages' bytes (a commit computes the checksums it
records; a verified pin checks them), on its native threads. Sent as one request per call, that pass and this
process's copy run one after the other. On a framed session (_frames.py) requests can be in flight together, so a
call is cut into chunks: the daemon checksums chunk j while this process copies chunk j+1 (a store), or checks chunk
j+1 while this process copies chunk j (a load), and the bytes the CRC32C reads were just written (or are about to be
read) by the copy, so they are still in the CPU's last-level cache. Over HTTP a call goes in max_batch_pages batches,
one request at a time.
"""

import os

#: Bytes per chunk of a pipelined store or load: a request's fixed cost (~0.1 ms over frames) stays small next to
#: its copy (~2 ms at 8 GB/s), and two chunks (the one copied, the one checksummed) fit in the 32 MiB L3 here.
PIPELINE_CHUNK_BYTES = 16 << 20

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
