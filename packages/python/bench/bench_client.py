"""Python client benchmark: a store and a load of 256 MiB between a numpy array and the daemon's shared-memory host
tier, each against ``numpy.copyto`` of the same bytes between two numpy arrays, measured in the same run, alternating
(store, copyto, load, copyto), medians.

    /usr/bin/python3 packages/python/bench/bench_client.py [--json] [--mib 256] [--reps 5] [--threads N] [--url URL [--token T]]

Without --url it starts a daemon from the repository's sources (the config of `tiersync bench client`: 256 KiB pages
of 64 tokens x 8 KV heads x 128 dims x K,V x bf16, a host tier with room for every page). With --json the last line is
``{"python": {"storeRatio", "loadRatio", ...}}``; ratio = path median / copyto median (1 = as fast as copyto).
The client copies on 2 threads by default on a host with 2 cores or more, where numpy.copyto uses one: a client with
one copy thread then runs the same store and load in the same run (alternating with the default one), reported as
``singleThread: {storeRatio, loadRatio, storeMs, loadMs}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE.parent / "tests"))

import tiersync  # noqa: E402

TOKENS_PER_PAGE = 64
PAGE_BYTES = TOKENS_PER_PAGE * 8 * 128 * 2 * 2


def daemon_config(directory: str, shm: str, pages: int) -> dict:
    return {
        "model": "bench-python@1",
        "layout": {"tokensPerPage": TOKENS_PER_PAGE, "dtype": "bf16", "groups": [{"name": "full", "layers": 1, "attention": {"type": "mha", "kvHeads": 8, "headDim": 128}}]},
        "tiers": [{"url": f"host://?capacity={(pages + 4) * PAGE_BYTES}&shm={shm}", "name": "host", "highWatermark": 1}],
        "index": {"path": f"{directory}/index.sqlite"},
        "http": {"port": 0},
        # No peer port: a peer server reserves part of the host tier for its slot pool, and the bench needs every slot.
        "peer": {"enabled": False},
        "client": {"maxBatchPages": max(4096, pages)},
        "log": {"level": "info"},
    }


def run(url: str, mib: int, reps: int, threads, log, token=None, pipeline=None) -> dict:
    client = tiersync.Client.connect(url, token=token, threads=threads, pipeline=pipeline)
    # numpy.copyto runs on one thread: with more copy threads the same path runs on one thread too, in the same run,
    # and is reported beside it (singleThread).
    single = tiersync.Client.connect(url, token=token, threads=1, pipeline=pipeline) if client._copier.threads > 1 else None
    try:
        pb = client.page_bytes
        pages = max(1, (mib << 20) // pb)
        nbytes = pages * pb
        src = np.random.default_rng(1).integers(0, 256, size=nbytes, dtype=np.uint8)
        dst = np.ones(nbytes, np.uint8)  # touched: no first-touch faults inside a timed copy
        keys = lambda tag: [f"{tag:08x}{i:08x}" for i in range(pages)]  # noqa: E731

        def timed(fn) -> float:
            t = time.perf_counter()
            fn()
            return time.perf_counter() - t

        # Warm-up: this process's page tables over the shared slots, the connection, the copy threads.
        for c in (client, single) if single is not None else (client,):
            c.store(keys(0), src)
            c.load(keys(0), dst)
            c.delete(keys(0))
        np.copyto(dst, src)
        t = {"store": [], "load": [], "copyto": [], "store1": [], "load1": []}
        requests = {}
        # Where each timed call's time went: control requests (daemon work included) and page copies.
        spent = {"storeControl": [], "storeCopy": [], "loadControl": [], "loadCopy": []}

        def split_of(op: str, before: dict) -> None:
            now = client.timings
            spent[f"{op}Control"].append(now["control_s"] - before["control_s"])
            spent[f"{op}Copy"].append(now["copy_s"] - before["copy_s"])

        def one_round(c, tag: str, k) -> None:
            """store, copyto, load (checked), copyto, delete; ``tag`` "" is the default client (its split is kept)."""
            before, parts = c.control_requests, c.timings
            t["store" + tag].append(timed(lambda: c.store(k, src)))
            if not tag:
                requests["store"] = c.control_requests - before
                split_of("store", parts)
            t["copyto"].append(timed(lambda: np.copyto(dst, src)))
            dst.fill(0)
            before, parts = c.control_requests, c.timings
            t["load" + tag].append(timed(lambda: c.load(k, dst)))
            if not tag:
                requests["load"] = c.control_requests - before
                split_of("load", parts)
            if not np.array_equal(src, dst):
                raise tiersync.ChecksumError(f"bytes loaded differ from bytes stored{' (one copy thread)' if tag else ''}")
            t["copyto"].append(timed(lambda: np.copyto(dst, src)))
            c.delete(k)

        for r in range(1, reps + 1):
            log(f"repetition {r}/{reps}")
            rounds = [(client, "", keys(r))] + ([(single, "1", keys(reps + r))] if single is not None else [])
            # The two clients take turns going first: the daemon's index work after one round's delete lands on
            # each of them alike.
            for c, tag, k in rounds if r % 2 else rounds[::-1]:
                one_round(c, tag, k)
        med = {name: statistics.median(xs) for name, xs in t.items() if xs}
        gib = nbytes / 2**30
        return {
            "bytes": nbytes,
            "pageBytes": pb,
            "pages": pages,
            "repetitions": reps,
            "threads": client._copier.threads,
            "pipeline": {None: "auto", True: "on", False: "off"}[pipeline],
            "loadAverage": [round(x, 2) for x in os.getloadavg()],
            "storeMs": round(med["store"] * 1e3, 2),
            "loadMs": round(med["load"] * 1e3, 2),
            "copytoMs": round(med["copyto"] * 1e3, 2),
            "storeGiBps": round(gib / med["store"], 2),
            "loadGiBps": round(gib / med["load"], 2),
            "copytoGiBps": round(gib / med["copyto"], 2),
            "storeRatio": round(med["store"] / med["copyto"], 2),
            "loadRatio": round(med["load"] / med["copyto"], 2),
            **{f"{name}Ms": round(statistics.median(xs) * 1e3, 2) for name, xs in spent.items()},
            "requestsPerStore": requests["store"],
            "requestsPerLoad": requests["load"],
            **(
                {
                    "singleThread": {
                        "storeMs": round(med["store1"] * 1e3, 2),
                        "loadMs": round(med["load1"] * 1e3, 2),
                        "storeRatio": round(med["store1"] / med["copyto"], 2),
                        "loadRatio": round(med["load1"] / med["copyto"], 2),
                    }
                }
                if single is not None
                else {}
            ),
        }
    finally:
        client.close()
        if single is not None:
            single.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON line {python: {...}} last")
    ap.add_argument("--mib", type=int, default=256, help="bytes per path, MiB (default 256)")
    ap.add_argument("--reps", type=int, default=5, help="repetitions (default 5)")
    ap.add_argument("--threads", type=int, default=None, help="client copy threads (default: the client's default, 2 on a host with 2 cores or more)")
    ap.add_argument("--url", help="a running daemon (default: start one from the sources)")
    ap.add_argument("--token", help="the tenant's bearer token for --url")
    ap.add_argument("--pipeline", choices=["auto", "on", "off"], default="auto", help="chunked requests overlapping the copies (default auto: with a core to spare)")
    args = ap.parse_args()
    log = (lambda s: print(s, file=sys.stderr)) if args.json else print
    daemon = None
    if args.url:
        url = args.url
    else:
        from daemon_process import start_daemon

        shm = f"/dev/shm/tiersync-bench-python-{os.getpid()}"
        pages = max(1, (args.mib << 20) // PAGE_BYTES)
        daemon = start_daemon(lambda d: daemon_config(d, shm, pages), cleanup=lambda: os.path.exists(shm) and os.unlink(shm))
        url = daemon.url
    try:
        report = run(url, args.mib, args.reps, args.threads, log, args.token, {"auto": None, "on": True, "off": False}[args.pipeline])
    finally:
        if daemon is not None:
            daemon.stop()
    if args.json:
        print(json.dumps({"python": report}))
    else:
        for k, v in report.items():
            print(f"{k:>18}: {v}")


if __name__ == "__main__":
    main()
