"""tiersync.Client: store, look up and load KV pages through the local ``tiersync serve`` daemon.

Control goes over the daemon's HTTP client API (packages/core/src/protocol/client.ts: hello, reserve, commit, abort,
lookup, pin, release, delete), on one kept-alive connection, or its Unix socket when ``hello`` offers one. Page
bytes go through the daemon's shared-memory host tier, mapped into this process:

- store = ``reserve`` (the daemon answers a slot offset per new page, -1 for pages it already holds), one copy from
  the caller's array into each slot (native, no temporary), ``commit``;
- load = ``pin`` (the daemon makes the pages resident in the host tier and holds them), one copy out of each slot
  into the caller's array, ``release``.

Control moves to a framed session on the daemon's Unix socket when it offers one (_frames.py). There, a store or load
larger than a chunk (_pipeline.LOAD_CHUNK_BYTES / STORE_CHUNK_BYTES) is pipelined: the next chunks' requests are in flight while
this thread copies, so the daemon's CRC32C pass over one chunk overlaps the copy of another instead of following it.

No page byte crosses a socket. Pages the daemon must bring up from its lower tiers, or pull from another host through
the cluster registry, arrive in the host tier during ``pin``: a Python process reaches every tier and every host
through its local daemon.

Checksums, always native: with the daemon's CRC32C library (hello ``crc32cLibrary``, _native.py) this process copies
and checksums each page in one pass: a store commits the CRC32Cs it computed (recorded without a second read by a
``checked-on-serve`` daemon), a load compares each page's copy with the pin's CRC32C (no ``pin-verify`` pass). Without
the library the daemon computes and checks them: at commit (the CRC32C it records) and at every pin (no page is copied
out unless its slot matched); a daemon that still requires the client's CRC32C at commit, or lacks ``pin-verify``,
leaves them to crcmod's C extension (Debian's python3-crcmod), never pure Python.
"""

from __future__ import annotations

import ctypes
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from ._buffers import Region, region_of, release_all
from ._control import ControlChannel
from ._copy import LOAD_PIECE_BYTES, Copier, CrcJob, Job, auto_threads
from . import _native, _pipeline
from ._shm import SharedArena
from .errors import (
    ChecksumError,
    ClosedError,
    InvalidArgumentError,
    OutOfRangeError,
    ProtocolError,
    TierSyncError,
    TierSyncTimeoutError,
    UnavailableError,
)

__all__ = ["Client", "Hello", "StoreResult", "LookupResult", "DeleteResult", "Pin"]

_KEY = re.compile(r"[0-9a-f]{16,128}")
_KEYS = re.compile(r"[0-9a-f]{16,128}(?:,[0-9a-f]{16,128})*")
#: Client protocol revisions this client speaks (protocol/client.ts CLIENT_PROTOCOL_VERSION).
PROTOCOL_VERSIONS = (1,)
#: Longest pin a daemon with the 'pin-ttl' feature accepts (protocol/client.ts MAX_PIN_TTL_MS).
MAX_PIN_TTL_S = 3600.0


@dataclass(frozen=True)
class Hello:
    """What the daemon offers this tenant (``GET /v1/client/hello``)."""

    protocol: int
    node: str
    tenant: str
    model: str
    #: The daemon's page size: a page is 1..page_bytes bytes.
    page_bytes: int
    tokens_per_page: int
    #: Most keys one request may name (the client splits larger calls).
    max_batch_pages: int
    #: A reservation or pin not closed within this many ms is undone by the daemon.
    lease_ms: int
    shm: Optional[dict]
    socket: Optional[str]
    peer: Optional[str]
    #: Optional protocol capabilities the daemon announces (e.g. ``commit-crc-optional``, ``pin-ttl``).
    features: tuple
    #: Path of the daemon's CRC32C C library on this host (feature ``crc32c-library``), None when not offered.
    crc32c_library: Optional[str] = None

    @staticmethod
    def parse(d: dict) -> "Hello":
        try:
            return Hello(
                protocol=int(d["protocol"]),
                node=str(d["node"]),
                tenant=str(d["tenant"]),
                model=str(d["model"]),
                page_bytes=int(d["pageBytes"]),
                tokens_per_page=int(d["tokensPerPage"]),
                max_batch_pages=int(d["maxBatchPages"]),
                lease_ms=int(d["leaseMs"]),
                shm=d.get("shm"),
                socket=d.get("socket"),
                peer=d.get("peer"),
                features=tuple(d.get("features") or ()),
                crc32c_library=str(d["crc32cLibrary"]) if d.get("crc32cLibrary") else None,
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ProtocolError(f"daemon answered hello without {e}") from None


@dataclass(frozen=True)
class StoreResult:
    """A store's answer."""

    #: Pages the daemon recorded.
    stored: int
    #: Pages the daemon already held (nothing was copied for them: a shared prefix is stored once).
    existing: int
    #: Indices of pages refused because their slot did not hold the bytes declared.
    bad_checksum: List[int]


@dataclass(frozen=True)
class LookupResult:
    """Which keys the daemon holds (on any of its tiers)."""

    #: How many keys, from the first, are all present: the reusable prefix.
    prefix: int
    present: List[bool]
    #: The tier holding each present page (its fastest copy), None when absent.
    tiers: List[Optional[str]]
    #: Stored length of each present page, 0 when absent.
    lengths: List[int]
    #: The daemon's estimate of loading the present pages, ms.
    estimated_load_ms: float


@dataclass(frozen=True)
class DeleteResult:
    deleted: int
    #: Pages kept because a lease or pin holds them.
    pinned: int
    missing: int


class Pin:
    """Pages held resident in the daemon's host tier until :meth:`unpin` (or the lease's deadline).

    ``view(i)`` is a read-only memoryview of page i's slot in shared memory: zero copies, valid until unpin (the views
    are released then; an array still built over one must not be read after unpin, the slot may hold another page).
    Use as a context manager to unpin on exit.
    """

    def __init__(self, client: "Client", keys: List[str], leases: List[int], offsets: List[int], lengths: List[int], crcs: List[int], deadline: float, damaged: Optional[List[str]] = None, held_s: float = 0.0):
        self._client = client
        #: How long the daemon holds the pages (the pin's ttl, else the daemon's lease), seconds.
        self.held_s = held_s
        self.keys = keys
        #: Keys whose bytes failed the daemon's CRC32C check at pin (dropped by the daemon; not viewable).
        self.damaged: List[str] = list(damaged or [])
        self._leases = leases
        self.offsets = offsets
        self.lengths = lengths
        self.crcs = crcs
        #: time.monotonic() after which the daemon may have undone the pin.
        self.deadline = deadline
        self._views: List[memoryview] = []
        self.closed = False

    @property
    def missing(self) -> List[str]:
        """Keys found on no tier (and no host in the cluster)."""
        bad = set(self.damaged)
        return [k for k, o in zip(self.keys, self.offsets) if o < 0 and k not in bad]

    def view(self, i: int) -> memoryview:
        """Page ``i``'s bytes in the shared arena, read-only, without a copy. Raises NotFound-like errors when absent."""
        if self.closed:
            raise ClosedError("this pin is released")
        if time.monotonic() > self.deadline:
            raise TierSyncTimeoutError(f"this pin passed its deadline ({self.held_s:g} s after it was made)")
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(self.keys):
            raise OutOfRangeError(f"page index must be an int in [0, {len(self.keys)}), got {i!r}", field="i")
        o, n = self.offsets[i], self.lengths[i]
        if self.keys[i] in self.damaged:
            raise ChecksumError(f"page {i} ({self.keys[i]}) failed its CRC32C check at pin; the daemon dropped it", keys=[self.keys[i]])
        if o < 0:
            raise InvalidArgumentError(f"page {i} ({self.keys[i]}) is not held by the daemon", field=f"keys[{i}]")
        v = self._client._shm_or_closed().view[o : o + n].toreadonly()
        self._views.append(v)
        return v

    def unpin(self) -> int:
        """Releases the pages (idempotent). Returns how many pages the daemon released."""
        if self.closed:
            return 0
        self.closed = True
        for v in self._views:
            try:
                v.release()
            except BufferError:
                pass  # the caller still holds an array over it: its bytes may be reused once the pin is gone
        self._views.clear()
        return self._client._release(self._leases)

    def __enter__(self) -> "Pin":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.unpin()


class Client:
    """A connection to the local tiersync daemon. Thread-safe: calls are serialized on one control connection."""

    def __init__(self, hello: Hello, control: ControlChannel, shm: SharedArena, copier: Copier, verify: bool, pipeline: Optional[bool] = None, native: Optional[_native.NativeCrc32c] = None):
        self.hello = hello
        self._control = control
        self._shm: Optional[SharedArena] = shm
        self._copier = copier
        self._verify = verify
        self._lock = threading.RLock()
        self._crc: Optional[Callable[[Any], int]] = None
        # The daemon computes each page's CRC32C itself when the client sends none (announced in hello).
        self._daemon_crc = "commit-crc-optional" in hello.features
        self._pin_ttl = "pin-ttl" in hello.features
        # The daemon checks pinned pages for us ('pin-verify'); a daemon without it leaves the check to this
        # process, done with crcmod's C extension (slow, but no page is copied unchecked).
        self._pin_verify = "pin-verify" in hello.features
        self._check_copy = verify or not self._pin_verify
        self._release_damaged = "release-damaged" in hello.features
        self._pipeline = pipeline
        # The daemon's CRC32C as a C library (_native.py): each page is copied and checksummed in one pass here. A
        # store then commits its CRC32Cs (recorded without a second read where the daemon checks on serve, or when it
        # wants them from the client anyway), and a load checks its own copy-out against the pin's CRC32Cs instead of
        # asking the daemon for a check pass ('pin-verify') before it.
        self._native = native
        self._store_crc = native is not None and ("checked-on-serve" in hello.features or not self._daemon_crc)

    @classmethod
    def connect(
        cls,
        url: str = "http://127.0.0.1:7071",
        *,
        token: Optional[str] = None,
        timeout: float = 30.0,
        threads: Optional[int] = None,
        use_socket: bool = True,
        populate: bool = False,
        verify: bool = False,
        pipeline: Optional[bool] = None,
        native_crc32c: Optional[bool] = None,
    ) -> "Client":
        """Asks the daemon what it offers and maps its shared-memory host tier.

        Args:
            url: the daemon's HTTP control plane.
            token: the tenant's bearer token (or the daemon's http.token when it has no tenants).
            timeout: deadline of each control request, seconds.
            threads: native copy threads (the copies release the GIL; a batch of 4 MiB or more is split between
                them, the calling thread taking one share). None (default): 2 where this process may use 2 cores or
                more (one core copies at about half the memory system's speed: _copy.auto_threads), else 1.
            use_socket: move control requests to the daemon's Unix socket when hello offers one.
            populate: map the arena with MAP_POPULATE (page tables built up front instead of on first touch).
            verify: also check each loaded page's CRC32C in this process before copying it (crcmod's C extension,
                ~0.35 GB/s here; a debugging aid). Not needed for integrity: every load is checked by the daemon,
                natively, while it holds the pages pinned (feature ``pin-verify``; against an older daemon this client
                checks with crcmod whatever ``verify`` says). See the README's "Integrity" for what is guaranteed.
            pipeline: cut large stores and loads into chunks whose requests overlap the copies (needs the daemon's
                framed Unix-socket session). None (default): loads always; stores when the host has a core to spare
                at call time (1-minute load average below the cores). True / False: always / never.
            native_crc32c: copy and CRC32C each page in one pass with the daemon's CRC32C library (hello's
                ``crc32cLibrary``, or ``TIERSYNC_CRC32C_LIBRARY``): stores commit their CRC32Cs, loads check their own
                copies. None (default): when the library loads, unless ``TIERSYNC_NATIVE_CRC32C=0``; False: never (the
                daemon checksums and checks, as against a daemon without the library); True: required
                (UnavailableError without it).

        Raises:
            AuthError (wrong token), TierSyncIOError / TierSyncTimeoutError (daemon unreachable), UnavailableError
            (no shared-memory tier offered to this tenant, e.g. a daemon on another host), GeometryMismatchError.
        """
        if threads is not None and (not isinstance(threads, int) or threads < 1 or threads > 64):
            raise InvalidArgumentError(f"threads must be an integer in [1, 64], got {threads!r}", field="threads")
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise InvalidArgumentError(f"timeout must be > 0 seconds, got {timeout!r}", field="timeout")
        control = ControlChannel(url, token, float(timeout))
        try:
            hello = Hello.parse(control.call("hello"))
            if hello.protocol not in PROTOCOL_VERSIONS:
                raise ProtocolError(f"daemon speaks client protocol {hello.protocol}; this client speaks {PROTOCOL_VERSIONS}")
            if not hello.shm:
                raise UnavailableError(
                    f"daemon {hello.node} offers no shared-memory host tier to tenant {hello.tenant} (host tier without shm=,"
                    " or tenant without sharedMemory); the Python client runs on the daemon's host"
                )
            s = hello.shm
            shm = SharedArena(str(s["path"]), int(s["capacity"]), int(s["pageSize"]), str(s["fingerprint"]), populate=populate)
            if use_socket and hello.socket:
                control.use_socket(hello.socket)
            native = _native.resolve(hello.crc32c_library, native_crc32c)
        except BaseException:
            control.close()
            raise
        copier = Copier(auto_threads() if threads is None else threads)
        return cls(hello, control, shm, copier, verify, pipeline, native)

    # -- properties -------------------------------------------------------------------------------------------------

    @property
    def page_bytes(self) -> int:
        return self.hello.page_bytes

    @property
    def tokens_per_page(self) -> int:
        return self.hello.tokens_per_page

    @property
    def control_requests(self) -> int:
        """Control requests sent so far (each one round trip), pipelined ones included."""
        return self._control.requests

    @property
    def timings(self) -> dict:
        """Seconds spent so far waiting on control requests (``control_s``, the daemon's work included; a pipelined
        request counts only while this process waited for it, not while it ran behind a copy) and in page copies
        (``copy_s``): where a store's or load's time goes."""
        return {"control_s": self._control.seconds, "copy_s": self._copier.seconds}

    @property
    def native_crc32c(self) -> Optional[str]:
        """The CRC32C library this client copies and checksums with (``"PATH (impl)"``), or None: the daemon
        checksums stored pages and checks loaded ones itself."""
        return f"{self._native.path} ({self._native.impl})" if self._native is not None else None

    @property
    def endpoint(self) -> str:
        """Where control requests go: ``unix:PATH`` or ``http://host:port``."""
        return self._control.endpoint

    # -- operations -------------------------------------------------------------------------------------------------

    def store(self, keys: Sequence[str], arrays: Any) -> StoreResult:
        """Stores page ``i`` under ``keys[i]``.

        ``arrays`` is either a sequence with one array per key (numpy arrays, torch tensors or bytes-like objects,
        1..page_bytes bytes each), or one array whose bytes are the pages back to back (``page_bytes`` each, the last
        may be shorter). Bytes are copied once, from the array straight into the daemon's shared memory.

        Raises InvalidArgumentError, TierFullError (no room in the host tier), UnavailableError (a lease limit).
        """
        keys = self._keys(keys)
        with self._lock:
            pages, regions = self._pages(keys, arrays, write=False)
            try:
                return self._store_pages(keys, pages)
            finally:
                release_all(regions)

    def _store_pages(self, keys: List[str], pages: List["_Page"]) -> StoreResult:
        """Stores pages given as segments of caller memory: one reserve + commit on this thread when they fit one
        chunk, else pipelined chunk by chunk (the daemon checksums one chunk while this thread copies the next)."""
        with self._lock:
            shm = self._shm_or_closed()
            # A store's chunks pay only with a core to spare (their copies compete with the daemon's checksums).
            # With the CRC32Cs computed here the daemon has no pass to overlap: one request per batch.
            spans = self._spans(len(keys), _pipeline.STORE_CHUNK_BYTES, lambda: not self._store_crc and _pipeline.core_to_spare())
            if len(spans) == 1:
                answers = [(0, self._store_batch(shm, keys, pages))]
            else:
                answers = self._store_pipelined(shm, keys, pages, spans)
        stored = existing = 0
        bad: List[int] = []
        for lo, r in answers:
            stored += int(r["stored"])
            existing += int(r["existing"])
            bad.extend(lo + int(i) for i in r["badChecksum"])
        return StoreResult(stored, existing, bad)

    def _store_batch(self, shm: SharedArena, keys: List[str], pages: List["_Page"]) -> dict:
        r = self._control.call("reserve", {"keys": keys, "lengths": [p.length for p in pages]})
        try:
            body = self._fill(shm, keys, pages, r)
        except BaseException:
            self._abort(r)  # the slots go back to the daemon now rather than at the lease's deadline
            raise
        return self._control.call("commit", body)

    def _store_pipelined(self, shm: SharedArena, keys: List[str], pages: List["_Page"], spans: List["tuple[int, int]"]) -> List["tuple[int, dict]"]:
        """Keeps up to PIPELINE_DEPTH reservations ahead, copies each chunk, sends its commit and goes on to the next
        chunk while the daemon checksums it; returns each chunk's first index and commit answer."""
        control = self._control
        reserves: Dict[int, Tuple[Any, ...]] = {}
        commits: List["tuple[int, Tuple[Any, ...]]"] = []

        def reserve(j: int) -> None:
            lo, hi = spans[j]
            reserves[j] = control.send("reserve", {"keys": keys[lo:hi], "lengths": [p.length for p in pages[lo:hi]]})

        try:
            for j in range(min(_pipeline.PIPELINE_DEPTH, len(spans))):
                reserve(j)
            for j, (lo, hi) in enumerate(spans):
                if j + _pipeline.PIPELINE_DEPTH < len(spans):
                    reserve(j + _pipeline.PIPELINE_DEPTH)
                r = control.wait(reserves.pop(j))
                try:
                    body = self._fill(shm, keys[lo:hi], pages[lo:hi], r)
                except BaseException:
                    self._abort(r)
                    raise
                commits.append((lo, control.send("commit", body)))
            return [(lo, control.wait(h)) for lo, h in commits]
        except BaseException:
            # Reservations made and never filled go back now; commits already sent finish (their pages are stored).
            for h in reserves.values():
                try:
                    self._abort(control.wait(h))
                except Exception:
                    pass  # that reservation failed: nothing to give back
            for _, h in commits:
                try:
                    control.wait(h)
                except Exception:
                    pass  # the error being raised says what went wrong first
            raise

    def _fill(self, shm: SharedArena, keys: List[str], pages: List["_Page"], r: dict) -> dict:
        """Copies pages into the slots a reservation gave them; returns the commit's body."""
        offsets = _ints(r, "offsets", len(keys), "reserve")
        if self._store_crc:
            return {"lease": r["lease"], "crcs": self._fill_crc(shm, keys, pages, offsets)}
        jobs: List[Job] = []
        for i, o in enumerate(offsets):
            if o < 0:
                continue  # the daemon holds this page already: nothing to copy
            p = pages[i]
            shm.check(o, p.length, f"reserve of {keys[i]}")
            slot = shm.address + o
            for address, n in p.segments:
                jobs.append((slot, address, n))
                slot += n
        self._copier.run(jobs)
        body: dict = {"lease": r["lease"]}
        if not self._daemon_crc:
            crc = self._crc32c()
            body["crcs"] = [crc(shm.view[o : o + p.length]) if o >= 0 else 0 for o, p in zip(offsets, pages)]
        return body

    def _fill_crc(self, shm: SharedArena, keys: List[str], pages: List["_Page"], offsets: List[int]) -> List[int]:
        """Copies pages into their slots with the CRC32C library, each page's CRC32C computed in the same pass; one
        native call per run of whole pages that are adjacent both in caller memory and in the arena. Returns the
        commit's ``crcs`` (0 for pages not copied)."""
        native = self._native
        assert native is not None
        pb = self.hello.page_bytes
        crcs = (ctypes.c_uint32 * len(keys))()
        jobs: List[CrcJob] = []
        capacity, base = shm.capacity, shm.address
        for i, o in enumerate(offsets):
            if o < 0:
                continue  # the daemon holds this page already: nothing to copy
            p = pages[i]
            if o + p.length > capacity:
                shm.check(o, p.length, f"reserve of {keys[i]}")  # raises
            slot = base + o
            if len(p.segments) > 1:
                crc = 0
                for address, n in p.segments:
                    crc = native.copy_crc32c(slot, address, n, crc)
                    slot += n
                crcs[i] = crc
                continue
            # The CRC32C is of the source bytes copied (a page changed in the caller's array meanwhile is refused
            # when served: its slot does not match).
            _add_crc_job(jobs, slot, p.segments[0][0], p.length, pb, i)
        # Streamed stores: the daemon does not read the slots back (it records these CRC32Cs), so they need not
        # pass through this core's caches.
        self._copier.run_crc(native, jobs, crcs, stream=True)
        return list(crcs)  # 0 where nothing was copied

    def _abort(self, reserved: dict) -> None:
        try:
            self._control.call("abort", {"lease": reserved["lease"]})
        except TierSyncError:
            pass  # expired or closed: the daemon freed the slots already

    def lookup(self, keys: Sequence[str]) -> LookupResult:
        """Which of ``keys`` the daemon holds, on which tier, and the present prefix's length."""
        keys = self._keys(keys)
        present: List[bool] = []
        tiers: List[Optional[str]] = []
        lengths: List[int] = []
        estimate = 0.0
        with self._lock:
            self._shm_or_closed()
            for lo in range(0, len(keys), self.hello.max_batch_pages):
                part = keys[lo : lo + self.hello.max_batch_pages]
                r = self._control.call("lookup", {"keys": part})
                present += [bool(x) for x in _list(r, "present", len(part), "lookup")]
                tiers += list(_list(r, "tiers", len(part), "lookup"))
                lengths += _ints(r, "lengths", len(part), "lookup")
                estimate += float(r.get("estimatedLoadMs", 0))
        prefix = next((i for i, p in enumerate(present) if not p), len(present))
        return LookupResult(prefix, present, tiers, lengths, estimate)

    def load(self, keys: Sequence[str], out_arrays: Any) -> List[str]:
        """Loads page ``i`` into ``out_arrays[i]`` (or into one array at ``i * page_bytes``, as ``store`` takes them).

        Every page delivered matched its CRC32C: checked by this process in the same pass as its copy (the CRC32C
        library), or by the daemon while it held the page pinned (without it): see the README's "Integrity". Each
        destination must have room for the stored page (OutOfRangeError otherwise, raised before any page of its
        chunk is copied). Returns the keys found nowhere (recompute those).

        Raises ChecksumError (``e.keys``) when pages failed their check, after delivering the others: a failed
        page's destination holds the bytes read with the library, and is untouched without it. The daemon drops
        the damaged copies, so a second load reads another tier's copy or reports them missing.
        """
        keys = self._keys(keys)
        with self._lock:
            pages, regions = self._pages(keys, out_arrays, write=True)
            try:
                try:
                    missing = self._load_pages(keys, pages)
                except ChecksumError:
                    # The pages that passed were copied: they reach staged (CUDA) destinations too.
                    for r in regions:
                        if r.finish is not None:
                            r.finish()
                    raise
                for r in regions:
                    if r.finish is not None:
                        r.finish()
            finally:
                release_all(regions)
        return [keys[i] for i in missing]

    def _load_pages(self, keys: List[str], pages: List["_Page"], exact: bool = False, prefix_only: bool = False) -> List[int]:
        """Loads pages into segments of caller memory; returns the indices not delivered. Raises ChecksumError naming
        the pages that failed their check (after delivering the others).

        ``exact``: a page whose stored length is not the destination's length counts as missing (not copied).
        ``prefix_only``: nothing after the first page not delivered is copied (an engine can use only a prefix, and
        its blocks after the prefix must stay as they were); those pages are listed as not delivered.
        """
        with self._lock:
            shm = self._shm_or_closed()
            # Without the CRC32C library a load's chunks pay even on busy cores (each copy reads what the daemon's
            # check just brought into cache); with it the daemon does no check pass to overlap: one pin per batch.
            spans = self._spans(len(keys), _pipeline.LOAD_CHUNK_BYTES, lambda: self._native is None)
            if len(spans) == 1:
                pin = self._control.call("pin", self._pin_body(keys, self._native is None))
                refused: List[int] = []
                try:
                    missing, damaged, refused = self._drain(shm, keys, pages, pin, exact, prefix_only)
                finally:
                    try:
                        self._control.call("release", self._release_body(pin, refused))
                    except TierSyncError:
                        pass  # the daemon undoes the pin at its deadline
            else:
                missing, damaged = self._load_pipelined(shm, keys, pages, spans, exact, prefix_only)
        if damaged:
            raise ChecksumError(
                f"{len(damaged)} page(s) failed their CRC32C check and were not copied ({', '.join(keys[i] for i in damaged[:4])}"
                f"{', ...' if len(damaged) > 4 else ''}); the daemon dropped its damaged copies",
                keys=[keys[i] for i in damaged],
            )
        return missing

    def _load_pipelined(self, shm: SharedArena, keys: List[str], pages: List["_Page"], spans: List["tuple[int, int]"], exact: bool, prefix_only: bool) -> "tuple[List[int], List[int]]":
        """Keeps up to PIPELINE_DEPTH pins ahead (the daemon checks each while this process copies the one before),
        copies each chunk, releases it without waiting. Returns (not delivered, damaged)."""
        control = self._control
        pins: Dict[int, Tuple[Any, ...]] = {}
        releases: List[Tuple[Any, ...]] = []
        missing: List[int] = []
        damaged: List[int] = []
        stopped = False

        def pin(j: int) -> None:
            lo, hi = spans[j]
            pins[j] = control.send("pin", self._pin_body(keys[lo:hi], self._native is None))

        try:
            for j in range(min(_pipeline.PIPELINE_DEPTH, len(spans))):
                pin(j)
            for j, (lo, hi) in enumerate(spans):
                if stopped:
                    missing.extend(range(lo, hi))
                    continue
                if j + _pipeline.PIPELINE_DEPTH < len(spans):
                    pin(j + _pipeline.PIPELINE_DEPTH)
                r = control.wait(pins.pop(j))
                refused: List[int] = []
                try:
                    m, d, refused = self._drain(shm, keys[lo:hi], pages[lo:hi], r, exact, prefix_only)
                finally:
                    releases.append(control.send("release", self._release_body(r, refused)))
                missing += [lo + i for i in m]
                damaged += [lo + i for i in d]
                stopped = prefix_only and bool(m or d)
        finally:
            # Pins taken ahead and never copied (an error, or a prefix that ended) are let go too.
            for h in pins.values():
                try:
                    releases.append(control.send("release", {"lease": control.wait(h)["lease"]}))
                except Exception:
                    pass  # that pin failed: nothing to let go
            # Waited for: once load returns, its pages are unpinned (a delete right after removes them).
            for h in releases:
                try:
                    control.wait(h)
                except TierSyncError:
                    pass  # the daemon undoes the pin at its deadline
        return missing, damaged

    def _drain(self, shm: SharedArena, keys: List[str], pages: List["_Page"], pin: dict, exact: bool, stop: bool) -> "tuple[List[int], List[int], List[int]]":
        """Copies a pin's pages into caller memory. Returns (indices not delivered, indices damaged, the damaged ones
        this process found itself: named in ``release`` so the daemon checks and drops them)."""
        offsets = _ints(pin, "offsets", len(keys), "pin")
        lengths = _ints(pin, "lengths", len(keys), "pin")
        crcs = _ints(pin, "crcs", len(keys), "pin")
        refused = set(_ints(pin, "damaged", None, "pin")) if "damaged" in pin else set()
        if self._native is not None:
            return self._drain_crc(shm, keys, pages, offsets, lengths, crcs, refused, exact, stop)
        missing: List[int] = []
        damaged: List[int] = []
        found_here: List[int] = []
        jobs: List[Job] = []
        for i in _deliverable(shm, keys, pages, offsets, lengths, refused, exact, stop, missing, damaged):
            o, n, p = offsets[i], lengths[i], pages[i]
            if self._check_copy and self._crc32c()(shm.view[o : o + n]) != crcs[i]:
                damaged.append(i)
                found_here.append(i)
                continue
            slot = shm.address + o
            left = n
            for address, room in p.segments:
                take = min(room, left)
                jobs.append((address, slot, take))
                slot, left = slot + take, left - take
                if left == 0:
                    break
        self._copier.run(jobs, piece=LOAD_PIECE_BYTES)
        return missing, damaged, found_here

    def _drain_crc(self, shm: SharedArena, keys: List[str], pages: List["_Page"], offsets: List[int], lengths: List[int], crcs: List[int], refused: set, exact: bool, stop: bool) -> "tuple[List[int], List[int], List[int]]":
        """_drain with the CRC32C library: each page is copied and checksummed in one pass (the bytes checked are the
        bytes copied) and compared with the CRC32C recorded for it. A page that fails is not delivered (raised as
        ChecksumError by the caller); its destination holds whatever was read. ``stop``: pages are copied one at a
        time, in order, and nothing after the first page not delivered is copied."""
        native = self._native
        assert native is not None
        pb = self.hello.page_bytes
        missing: List[int] = []
        damaged: List[int] = []
        # First every check that needs no copy, so that an OutOfRangeError leaves the destinations untouched.
        plan = list(_deliverable(shm, keys, pages, offsets, lengths, refused, exact, stop, missing, damaged))
        found_here: List[int] = []
        got = (ctypes.c_uint32 * len(keys))()
        jobs: List[CrcJob] = []
        start = time.perf_counter()
        for k, i in enumerate(plan):
            n, p = lengths[i], pages[i]
            slot = shm.address + offsets[i]
            if stop or len(p.segments) > 1:
                crc, left = 0, n
                for address, room in p.segments:
                    take = min(room, left)
                    crc = native.copy_crc32c(address, slot, take, crc)
                    slot, left = slot + take, left - take
                    if left == 0:
                        break
                if crc != crcs[i]:
                    damaged.append(i)
                    found_here.append(i)
                    if stop:
                        missing.extend(plan[k + 1 :])  # a prefix ends here: the pages after it stay as they were
                        break
                continue
            _add_crc_job(jobs, p.segments[0][0], slot, n, pb, i)
        self._copier.seconds += time.perf_counter() - start
        expected = (ctypes.c_uint32 * len(keys))(*crcs)
        # The library compares each page's CRC32C as it copies; the pages are named only when one differed.
        if self._copier.run_crc(native, jobs, got, expected):
            for _, _, m, _, at in jobs:
                for i in range(at, at + -(-m // pb)):
                    if got[i] != crcs[i]:
                        damaged.append(i)
                        found_here.append(i)
        return sorted(missing), sorted(damaged), sorted(found_here)

    def _pin_body(self, keys: List[str], verify: bool = True) -> dict:
        # The daemon checks each page's CRC32C natively before answering ('pin-verify') unless this process checks
        # its own copies with the CRC32C library (verify False: loads with the library).
        return {"keys": keys, "verify": True} if verify and self._pin_verify else {"keys": keys}

    def _release_body(self, pin: dict, damaged: List[int]) -> dict:
        body: dict = {"lease": pin["lease"]}
        if damaged and self._release_damaged:
            body["damaged"] = damaged
        return body

    def pin(self, keys: Sequence[str], ttl: Optional[float] = None) -> Pin:
        """Makes the pages resident in the host tier and holds them (lower tiers and other hosts are read into it).

        ``ttl`` (seconds): how long the daemon holds them if :meth:`unpin` never comes; default the daemon's lease
        (``hello.lease_ms``), at most an hour (at most the lease on a daemon without the ``pin-ttl`` feature). Read them without a copy with :meth:`Pin.view`.
        """
        keys = self._keys(keys)
        lease_s = self.hello.lease_ms / 1000
        if ttl is not None and (isinstance(ttl, bool) or not (isinstance(ttl, (int, float)) and 0 < ttl)):
            raise InvalidArgumentError(f"ttl must be > 0 seconds, got {ttl!r}", field="ttl")
        # A daemon with 'pin-ttl' takes the pin's own deadline (up to an hour); an older one holds it for its lease.
        top = MAX_PIN_TTL_S if self._pin_ttl else lease_s
        if ttl is not None and ttl > top:
            raise OutOfRangeError(f"ttl {ttl:g} s is longer than {top:g} s ({'the protocol limit' if self._pin_ttl else 'the daemon lease, client.leaseMs'})", field="ttl")
        leases: List[int] = []
        offsets: List[int] = []
        lengths: List[int] = []
        crcs: List[int] = []
        damaged: List[int] = []
        with self._lock:
            self._shm_or_closed()
            start = time.monotonic()
            try:
                for lo in range(0, len(keys), self.hello.max_batch_pages):
                    part = keys[lo : lo + self.hello.max_batch_pages]
                    body = self._pin_body(part)
                    if ttl is not None and self._pin_ttl:
                        body["ttlMs"] = max(1, int(ttl * 1000))
                    r = self._control.call("pin", body)
                    leases.append(int(r["lease"]))
                    offsets += _ints(r, "offsets", len(part), "pin")
                    lengths += _ints(r, "lengths", len(part), "pin")
                    crcs += _ints(r, "crcs", len(part), "pin")
                    damaged += [lo + int(i) for i in (_ints(r, "damaged", None, "pin") if "damaged" in r else [])]
            except BaseException:
                self._release(leases)
                raise
        shm = self._shm_or_closed()
        for k, o, n in zip(keys, offsets, lengths):
            if o >= 0:
                shm.check(o, n, f"pin of {k}")
        held = ttl if ttl is not None else lease_s
        return Pin(self, keys, leases, offsets, lengths, crcs, start + held, [keys[i] for i in damaged], held)

    def unpin(self, pin: Pin) -> int:
        """Releases a :class:`Pin` (same as ``pin.unpin()``)."""
        if not isinstance(pin, Pin) or pin._client is not self:
            raise InvalidArgumentError("pin must be a Pin returned by this client's pin()", field="pin")
        return pin.unpin()

    def _release(self, leases: List[int]) -> int:
        released = 0
        with self._lock:
            for lease in leases:
                try:
                    released += int(self._control.call("release", {"lease": lease})["released"])
                except TierSyncError:
                    pass  # expired or closed already: the daemon undid it
        return released

    def delete(self, keys: Sequence[str]) -> DeleteResult:
        """Removes pages from every tier of the daemon (pinned ones stay)."""
        keys = self._keys(keys)
        d = p = m = 0
        with self._lock:
            self._shm_or_closed()
            for lo in range(0, len(keys), self.hello.max_batch_pages):
                r = self._control.call("delete", {"keys": keys[lo : lo + self.hello.max_batch_pages]})
                d, p, m = d + int(r["deleted"]), p + int(r["pinned"]), m + int(r["missing"])
        return DeleteResult(d, p, m)

    def close(self) -> None:
        """Unmaps the shared arena, stops the copy threads and closes the control connection (idempotent)."""
        with self._lock:
            if self._shm is None:
                return
            shm, self._shm = self._shm, None
            self._copier.close()
            try:
                shm.close()
            except BufferError as e:
                raise InvalidArgumentError(f"close(): views from Pin.view() are still open; unpin first ({e})") from None
            finally:
                self._control.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- helpers ----------------------------------------------------------------------------------------------------

    def _spans(self, n: int, chunk_bytes: int, auto: Callable[[], bool]) -> List["tuple[int, int]"]:
        """``[lo, hi)`` of each request's pages: chunks of about ``chunk_bytes`` when requests are pipelined
        (a framed session, and ``pipeline``, or ``auto()`` when it is None), else batches of max_batch_pages; never
        more than max_batch_pages keys."""
        per = self.hello.max_batch_pages
        wanted = self._pipeline if self._pipeline is not None else auto()
        if wanted and self._control.pipelined:
            per = max(1, min(per, chunk_bytes // self.hello.page_bytes))
        return [(lo, min(lo + per, n)) for lo in range(0, n, per)]

    def _shm_or_closed(self) -> SharedArena:
        if self._shm is None:
            raise ClosedError("client is closed")
        return self._shm

    def _keys(self, keys: Sequence[str]) -> List[str]:
        if isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence) or len(keys) == 0:
            raise InvalidArgumentError("keys must be a non-empty list of hex page keys", field="keys")
        out = list(keys)
        # One regex pass over all keys and one set: the common case of a valid batch costs no Python loop per key.
        joined = ",".join(out) if all(type(k) is str for k in out) else None
        # The comma count: a key that itself holds a comma would otherwise pass as two.
        if joined is not None and joined.count(",") == len(out) - 1 and _KEYS.fullmatch(joined) and len(set(out)) == len(out):
            return out
        seen = set()
        for i, k in enumerate(out):
            if not isinstance(k, str) or not _KEY.fullmatch(k):
                raise InvalidArgumentError(f"keys[{i}] must be 16..128 lower-case hex characters, got {k!r}", field=f"keys[{i}]")
            if k in seen:
                raise InvalidArgumentError(f"keys[{i}] {k} appears twice", field=f"keys[{i}]")
            seen.add(k)
        return out

    def _pages(self, keys: List[str], arrays: Any, *, write: bool) -> "tuple[List[_Page], List[Region]]":
        """Page i's bytes: its own array (a list), or a page_bytes-sized part of one array."""
        name = "out_arrays" if write else "arrays"
        pb = self.hello.page_bytes
        n = len(keys)
        if isinstance(arrays, (list, tuple)):
            if len(arrays) != n:
                raise InvalidArgumentError(f"{name} must have {n} entries (one per key), got {len(arrays)}", field=name)
            regions: List[Region] = []
            try:
                for i, a in enumerate(arrays):
                    r = region_of(a, f"{name}[{i}]", write=write)
                    regions.append(r)
                    if not write and not 1 <= r.nbytes <= pb:
                        raise OutOfRangeError(f"{name}[{i}] holds {r.nbytes} bytes; a page is 1..{pb} bytes (the daemon's page size)", field=f"{name}[{i}]")
            except BaseException:
                release_all(regions)
                raise
            return [_Page(f"{name}[{i}]", [(r.address, min(r.nbytes, pb))]) for i, r in enumerate(regions)], regions
        r = region_of(arrays, name, write=write)
        lo_bytes = (n - 1) * pb + 1
        if write and r.nbytes < lo_bytes or not write and not lo_bytes <= r.nbytes <= n * pb:
            r.release()
            raise OutOfRangeError(f"{name} holds {r.nbytes} bytes; {n} page(s) of {pb} bytes back to back need {lo_bytes}..{n * pb}", field=name)
        pages = [_Page(_PageName(name, i), [(r.address + i * pb, pb)], pb) for i in range(n)]
        last = r.nbytes - (n - 1) * pb
        pages[-1] = _Page(_PageName(name, n - 1), [(r.address + (n - 1) * pb, last)], last)
        return pages, [r]

    def _crc32c(self) -> Callable[[Any], int]:
        """CRC32C from crcmod's C extension; refuses crcmod's pure-Python fallback."""
        if self._crc is None:
            try:
                import crcmod._crcfunext  # noqa: F401  (the C extension: without it crcmod is pure Python)
                import crcmod.predefined
            except ImportError as e:
                raise UnavailableError(
                    "this daemon wants each page's CRC32C from the client (client protocol 1), and crcmod's C extension"
                    f" is missing ({e}); install Debian's python3-crcmod, or run a daemon that computes it itself"
                ) from None
            self._crc = crcmod.predefined.mkPredefinedCrcFun("crc-32c")
        return self._crc


class _Page:
    """One page's bytes in caller memory: segments ``(address, nbytes)`` that, back to back, are the page."""

    __slots__ = ("_what", "segments", "length")

    def __init__(self, what: "str | Callable[[], str]", segments: List["tuple[int, int]"], length: Optional[int] = None):
        # A callable names the page only when an error needs it (a store of 1024 pages formats no names).
        self._what = what
        self.segments = segments
        #: Bytes to store (a store) or room available (a load).
        self.length = sum(n for _, n in segments) if length is None else length

    @property
    def what(self) -> str:
        return self._what if isinstance(self._what, str) else self._what()


class _PageName:
    """``"<array> page <i>"``, formatted only when asked for."""

    __slots__ = ("name", "index")

    def __init__(self, name: str, index: int):
        self.name, self.index = name, index

    def __call__(self) -> str:
        return f"{self.name} page {self.index}"


def _add_crc_job(jobs: List[CrcJob], dst: int, src: int, n: int, pb: int, i: int) -> None:
    """Adds the copy of page ``i`` (``n`` bytes, src to dst) to ``jobs``: one native call per run of whole pages that
    are adjacent in both memories and in page index (the previous job grows when page ``i`` continues it)."""
    if jobs:
        d, a, m, _, at = jobs[-1]
        if m % pb == 0 and at + m // pb == i and d + m == dst and a + m == src:
            jobs[-1] = (d, a, m + n, pb, at)
            return
    jobs.append((dst, src, n, pb, i))


def _deliverable(shm: SharedArena, keys: List[str], pages: List[_Page], offsets: List[int], lengths: List[int], refused: set, exact: bool, stop: bool, missing: List[int], damaged: List[int]) -> Iterator[int]:
    """The pages of a pin that may be copied out, in order; the others go to ``missing`` (not found, wrong length, or
    after the end of a prefix) or ``damaged`` (the daemon's own check failed: a verified pin answered no slot).
    Lazy: pages the caller adds to ``missing``/``damaged`` while iterating end a ``stop`` (prefix) load too.

    :raises OutOfRangeError: a page is longer than the caller's memory for it
    """
    for i, o in enumerate(offsets):
        n, p = lengths[i], pages[i]
        if stop and (missing or damaged):
            missing.append(i)
            continue
        if i in refused:
            damaged.append(i)
            continue
        if o < 0 or (exact and n != p.length):
            missing.append(i)
            continue
        if o + n > shm.capacity or n < 0:
            shm.check(o, n, f"pin of {keys[i]}")  # raises
        if n > p.length:
            raise OutOfRangeError(f"{p.what} holds {p.length} bytes, page {keys[i]} has {n}", field=p.what)
        yield i


def _list(r: dict, name: str, n: Optional[int], op: str) -> list:
    v = r.get(name)
    if not isinstance(v, list) or (n is not None and len(v) != n):
        raise ProtocolError(f"daemon answered {op} with {name} of {len(v) if isinstance(v, list) else type(v).__name__} entries, expected {n}")
    return v


def _ints(r: dict, name: str, n: Optional[int], op: str) -> List[int]:
    v = _list(r, name, n, op)
    if not all(isinstance(x, int) for x in v):
        raise ProtocolError(f"daemon answered {op} with a non-integer in {name}")
    return v

