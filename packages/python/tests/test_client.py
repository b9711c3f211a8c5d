"""tiersync.Client against a real daemon: bytes exact through shared memory, numpy / torch / bytes-like arrays in
place, batching, lookups, missing keys, pins with TTL, tenants, typed errors and deadlines."""

import os
import socket
import threading
import time

import numpy as np
import pytest
import torch

import tiersync
from tiersync import (
    AuthError,
    ChecksumError,
    ClosedError,
    InvalidArgumentError,
    NotFoundError,
    OutOfRangeError,
    TierSyncError,
    TierSyncIOError,
    TierSyncTimeoutError,
    UnavailableError,
)

PAGE = 16384


def random_bytes(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=n, dtype=np.uint8)


def test_hello_maps_shared_memory_and_moves_control_to_the_unix_socket(client):
    h = client.hello
    assert (h.tenant, h.model, h.page_bytes, h.tokens_per_page, h.max_batch_pages) == ("alice", "py-client@1", PAGE, 16, 64)
    assert h.shm["path"].startswith("/dev/shm/")
    assert "commit-crc-optional" in h.features
    assert client.endpoint.startswith("unix:")


def test_one_array_of_pages_round_trips_through_shared_memory_with_two_requests_each_way(client, fresh_keys):
    keys = fresh_keys(10)
    src = random_bytes(10 * PAGE - 100, 1)  # the last page is short
    before = client.control_requests
    r = client.store(keys, src)
    assert (r.stored, r.existing, r.bad_checksum) == (10, 0, [])
    # reserve + commit: the bytes went through shared memory, not a socket.
    assert client.control_requests - before == 2
    look = client.lookup(keys)
    assert look.prefix == 10 and all(look.present)
    assert set(look.tiers) == {"host"}
    assert look.lengths == [PAGE] * 9 + [PAGE - 100]
    dst = np.zeros_like(src)
    before = client.control_requests
    assert client.load(keys, dst) == []
    assert client.control_requests - before == 2  # pin + release
    assert np.array_equal(src, dst)
    # Stored again: the daemon already holds every page, nothing is copied.
    assert client.store(keys, src).existing == 10


def test_numpy_torch_and_bytes_like_arrays_are_read_and_written_in_place(client, fresh_keys):
    keys = fresh_keys(5)
    f32 = np.random.default_rng(2).standard_normal(PAGE // 4).astype(np.float32)
    bf16 = torch.randn(8, 2, 64).to(torch.bfloat16)  # 2 KiB: pages may be shorter than the page size
    blob = bytes(random_bytes(1000, 3))
    ba = bytearray(random_bytes(PAGE, 4))
    arr = array_of_ints = __import__("array").array("I", range(PAGE // 4))
    sources = [f32, bf16, blob, ba, arr]
    assert client.store(keys, sources).stored == 5
    outs = [np.empty_like(f32), torch.zeros_like(bf16), bytearray(1000), np.zeros(PAGE, np.uint8), memoryview(bytearray(PAGE))]
    assert client.load(keys, outs) == []
    assert np.array_equal(outs[0], f32)
    assert torch.equal(outs[1].view(torch.int16), bf16.view(torch.int16))
    assert bytes(outs[2]) == blob
    assert bytes(outs[3]) == bytes(ba)
    assert bytes(outs[4]) == array_of_ints.tobytes()


def test_calls_larger_than_max_batch_pages_are_split(client, fresh_keys):
    keys = fresh_keys(150)  # the daemon takes at most 64 keys per request
    src = random_bytes(150 * PAGE, 5)
    before = client.control_requests
    assert client.store(keys, src).stored == 150
    assert client.control_requests - before == 6  # 3 x (reserve + commit)
    dst = np.zeros_like(src)
    assert client.load(keys, dst) == []
    assert np.array_equal(src, dst)
    assert client.lookup(keys).prefix == 150
    assert client.delete(keys).deleted == 150


@pytest.mark.parametrize("pipeline", [True, False])
def test_large_calls_go_in_chunks_over_the_framed_session_pipelined_or_not(daemon_url, fresh_keys, pipeline):
    with tiersync.Client.connect(daemon_url, token="token-alice", pipeline=pipeline) as c:
        assert c._control.pipelined  # a framed session on the daemon's Unix socket
        keys = fresh_keys(200)  # 4 requests of at most 64 keys each way
        src = random_bytes(200 * PAGE - 3, 14)
        before = c.control_requests
        assert c.store(keys, src).stored == 200
        assert c.control_requests - before == 8
        dst = np.zeros_like(src)
        before = c.control_requests
        assert c.load(keys, dst) == [] and np.array_equal(src, dst)
        assert c.control_requests - before == 8
        # Every pin was released before load returned: the pages can all be deleted at once.
        assert c.delete(keys).deleted == 200


def test_lookup_prefix_and_load_missing_keys(client, fresh_keys):
    keys = fresh_keys(6)
    src = random_bytes(6 * PAGE, 6)
    client.store(keys[:2] + keys[3:], [src[i * PAGE : (i + 1) * PAGE] for i in (0, 1, 3, 4, 5)])
    look = client.lookup(keys)
    assert look.prefix == 2
    assert look.present == [True, True, False, True, True, True]
    assert look.tiers[2] is None and look.lengths[2] == 0
    dst = np.full(6 * PAGE, 7, np.uint8)
    assert client.load(keys, dst) == [keys[2]]
    # The missing page's destination is left as it was; every other page arrived.
    assert (dst[2 * PAGE : 3 * PAGE] == 7).all()
    for i in (0, 1, 3, 4, 5):
        assert np.array_equal(dst[i * PAGE : (i + 1) * PAGE], src[i * PAGE : (i + 1) * PAGE])


def test_a_destination_too_small_is_refused_before_anything_is_copied(client, fresh_keys):
    keys = fresh_keys(2)
    client.store(keys, random_bytes(2 * PAGE, 7))
    small = [np.zeros(PAGE, np.uint8), np.zeros(PAGE - 1, np.uint8)]
    with pytest.raises(OutOfRangeError) as e:
        client.load(keys, small)
    assert e.value.field == "out_arrays[1]"
    assert not small[0].any()
    # The pin was released: the pages can be deleted.
    assert client.delete(keys).deleted == 2


def test_pin_holds_pages_for_its_ttl_and_views_them_without_a_copy(client, fresh_keys):
    keys = fresh_keys(3)
    src = random_bytes(3 * PAGE, 8)
    client.store(keys, src)
    with client.pin(keys + fresh_keys(1), ttl=10) as pin:
        assert pin.missing == [pin.keys[3]]
        v = pin.view(1)
        assert v.readonly and v.nbytes == PAGE
        assert np.array_equal(np.frombuffer(v, np.uint8), src[PAGE : 2 * PAGE])
        # Held: a delete keeps them.
        assert client.delete(keys).pinned == 3
    with pytest.raises(ValueError):
        v[0]  # the view is released with the pin
        with pytest.raises(OutOfRangeError, match=r"page index must be an int in \[0, 4\), got 4"):
            pin.view(4)
    # A short TTL: the daemon lets go by itself (its lease sweep runs every 750 ms here).
    short = client.pin(keys, ttl=0.2)
    time.sleep(1.5)
    with pytest.raises(TierSyncTimeoutError, match=r"passed its deadline \(0.2 s after it was made\)"):
        short.view(0)
    r = client.delete(keys)
    assert (r.deleted, r.pinned) == (3, 0)
    with pytest.raises(OutOfRangeError):
        client.pin(keys, ttl=7200)
    with pytest.raises(InvalidArgumentError, match="ttl must be > 0 seconds, got True"):
        client.pin(keys, ttl=True)


def test_tenants_do_not_see_each_other(daemon_url, client, fresh_keys):
    keys = fresh_keys(2)
    client.store(keys, random_bytes(2 * PAGE, 9))
    with tiersync.Client.connect(daemon_url, token="token-bob") as bob:
        assert bob.lookup(keys).present == [False, False]
        assert bob.load(keys, np.zeros(2 * PAGE, np.uint8)) == keys


def test_typed_errors_carry_the_daemon_code(daemon_url, client, fresh_keys):
    with pytest.raises(AuthError) as e:
        tiersync.Client.connect(daemon_url, token="wrong")
    assert e.value.code == "ERR_AUTH" and e.value.status == 401
    with pytest.raises(UnavailableError, match="no shared-memory host tier"):
        tiersync.Client.connect(daemon_url, token="token-remote")
    # A refusal by the daemon: its code, status and field come through.
    with pytest.raises(NotFoundError) as e:
        client._control.call("commit", {"lease": 987654321})
    assert (e.value.code, e.value.status, e.value.field) == ("ERR_NOT_FOUND", 404, "lease")
    with pytest.raises(InvalidArgumentError) as e:
        client._control.call("lookup", {"keys": ["XYZ"]})
    assert e.value.field == "keys[0]" and e.value.status == 400
    # Checked here before any request.
    # A key holding a comma is not two keys.
    with pytest.raises(InvalidArgumentError, match=r"keys\[0\] must be 16..128 lower-case hex"):
        client.lookup(["0123456789abcdef,0123456789abcdee"])
    with pytest.raises(InvalidArgumentError, match="appears twice"):
        client.lookup(["ab" * 8, "ab" * 8])
    with pytest.raises(InvalidArgumentError, match="keys must be a non-empty list"):
        client.store("abababababababab", b"x")
    with pytest.raises(OutOfRangeError, match="a page is 1..16384 bytes"):
        client.store(fresh_keys(1), [np.zeros(PAGE + 1, np.uint8)])
    with pytest.raises(InvalidArgumentError, match="C-contiguous"):
        client.store(fresh_keys(1), [np.zeros((64, 64), np.uint8)[:, ::2]])
    with pytest.raises(InvalidArgumentError, match="read-only"):
        client.load(fresh_keys(1), [b"immutable"])
    assert all(isinstance(x, TierSyncError) for x in (AuthError("a"), NotFoundError("b")))


def test_memory_whose_bytes_are_not_its_values_is_refused_before_anything_is_copied(client, fresh_keys):
    keys = fresh_keys(1)
    objects = np.array([object(), "a"], dtype=object)
    with pytest.raises(InvalidArgumentError, match="holds Python objects") as e:
        client.store(keys, [objects])
    assert e.value.field == "arrays[0]"
    assert client.store(keys, [np.full(8, 0x41, np.uint8)]).stored == 1
    # A load into an object array would write raw bytes over its pointers.
    with pytest.raises(InvalidArgumentError, match="holds Python objects"):
        client.load(keys, [np.empty(1, dtype=object)])
    with pytest.raises(InvalidArgumentError, match=r"lazy conjugate view; \.resolve_conj\(\)"):
        client.store(fresh_keys(1), [torch.tensor([1 + 2j, 3 + 4j]).conj()])
    with pytest.raises(InvalidArgumentError, match=r"lazy negative view; \.resolve_neg\(\)"):
        client.store(fresh_keys(1), [torch.tensor([1.0, 2.0])._neg_view()])
    with pytest.raises(InvalidArgumentError, match="sparse_coo"):
        client.store(fresh_keys(1), [torch.eye(4).to_sparse()])
    # Resolved, the same values round-trip.
    key = fresh_keys(1)
    z = torch.tensor([1 + 2j, 3 + 4j]).conj().resolve_conj()
    assert client.store(key, [z]).stored == 1
    out = torch.zeros_like(z)
    assert client.load(key, [out]) == [] and torch.equal(out, torch.tensor([1 - 2j, 3 - 4j]))


def test_every_wait_has_a_deadline():
    # A server that accepts and never answers: connect gives up at its deadline.
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    held = []
    t = threading.Thread(target=lambda: held.append(srv.accept()), daemon=True)
    t.start()
    start = time.monotonic()
    with pytest.raises(TierSyncTimeoutError) as e:
        tiersync.Client.connect(f"http://127.0.0.1:{srv.getsockname()[1]}", timeout=0.5)
    assert time.monotonic() - start < 3
    assert isinstance(e.value, TimeoutError) and e.value.code == "ERR_TIMEOUT"
    srv.close()
    # Nobody listening: an I/O error naming the daemon's address.
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    free = port.getsockname()[1]
    port.close()
    with pytest.raises(TierSyncIOError, match=f"127.0.0.1:{free}"):
        tiersync.Client.connect(f"http://127.0.0.1:{free}", timeout=2)


def test_a_kept_alive_connection_the_daemon_closed_is_reopened(daemon_url, fresh_keys):
    with tiersync.Client.connect(daemon_url, token="token-alice", use_socket=False) as c:
        assert c.endpoint.startswith("http://")
        c.lookup(fresh_keys(1))
        c._control._conn.sock.shutdown(socket.SHUT_RDWR)  # as if the server had timed the idle connection out
        assert c.lookup(fresh_keys(1)).prefix == 0


def test_a_client_whose_daemon_died_raises_typed_errors_naming_the_way_back(fresh_keys):
    from conftest import daemon_config
    from daemon_process import start_daemon

    shm = f"/dev/shm/tiersync-pytest-died-{os.getpid()}"
    daemon = start_daemon(lambda d: daemon_config(d, shm), cleanup=lambda: os.path.exists(shm) and os.unlink(shm))
    try:
        c = tiersync.Client.connect(daemon.url, token="token-alice")
        assert c.endpoint.startswith("unix:")
        c.lookup(fresh_keys(1))
        daemon.child.kill()
        daemon.child.wait(10)
        # The first call finds the session closed, the next ones cannot open another: each a TierSyncIOError.
        for _ in range(3):
            with pytest.raises(TierSyncIOError) as e:
                c.load(fresh_keys(1), [bytearray(PAGE)])
        assert "connect a new Client" in str(e.value)
        c.close()
    finally:
        daemon.stop()


def test_a_daemon_that_stops_answering_times_out_each_call_named_for_what_waited(fresh_keys):
    import signal

    from conftest import daemon_config
    from daemon_process import start_daemon

    shm = f"/dev/shm/tiersync-pytest-stopped-{os.getpid()}"
    daemon = start_daemon(lambda d: daemon_config(d, shm), cleanup=lambda: os.path.exists(shm) and os.unlink(shm))
    try:
        c = tiersync.Client.connect(daemon.url, token="token-alice", timeout=1)
        daemon.child.send_signal(signal.SIGSTOP)
        try:
            with pytest.raises(TierSyncTimeoutError, match="lookup passed its 1 s deadline"):
                c.lookup(fresh_keys(1))
            # The session that timed out is reopened for the next call, which times out too, saying so.
            with pytest.raises(TierSyncTimeoutError, match=r"did not answer within 1 s \(reopening the session"):
                c.lookup(fresh_keys(1))
        finally:
            daemon.child.send_signal(signal.SIGCONT)
        c.close()
    finally:
        daemon.stop()


def test_a_closed_client_refuses_calls(daemon_url, fresh_keys):
    c = tiersync.Client.connect(daemon_url, token="token-alice", threads=1)
    c.close()
    c.close()
    with pytest.raises(ClosedError):
        c.lookup(fresh_keys(1))


def test_client_side_crc32c_agrees_with_the_daemon_and_verify_catches_a_corrupted_slot(daemon_url, fresh_keys):
    # As against a daemon without 'commit-crc-optional' and 'pin-verify', and without the CRC32C library: the client
    # sends CRC32C from crcmod's C extension (the daemon records them) and checks every page it copies out with it.
    with tiersync.Client.connect(daemon_url, token="token-alice", verify=True, native_crc32c=False) as c:
        c._daemon_crc = False
        c._pin_verify = False
        keys = fresh_keys(3)
        src = random_bytes(3 * PAGE - 5, 11)
        r = c.store(keys, src)
        assert (r.stored, r.bad_checksum) == (3, [])
        dst = np.zeros_like(src)
        assert c.load(keys, dst) == [] and np.array_equal(src, dst)
        # One flipped bit in a slot: the verifying load refuses that page with a typed error and copies the others.
        with c.pin(keys[1:2]) as pin:
            c._shm.view[pin.offsets[0] + 100] ^= 1
        out = np.zeros_like(src)
        with pytest.raises(ChecksumError) as e:
            c.load(keys, out)
        assert e.value.keys == [keys[1]] and e.value.code == "ERR_CHECKSUM"
        assert not out[PAGE : 2 * PAGE].any()
        assert np.array_equal(out[:PAGE], src[:PAGE]) and np.array_equal(out[2 * PAGE :], src[2 * PAGE :])
        c.delete(keys)


def _fs_bytes_written(daemon_url):
    import json
    import urllib.request

    req = urllib.request.Request(f"{daemon_url}/v1/stats", headers={"authorization": "Bearer token-alice"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return next(t["bytesWritten"] for t in json.load(r)["tiers"] if t["name"] == "fs")


def _after_write_through(daemon_url, before, nbytes):
    """This daemon copies new pages down to its fs tier in the background, reading (and checking) the host copy: a
    damage made before that read is found by it first (the page is dropped, and a load reports it missing). Waits
    until the copies are written, so the damage below is found by the load."""
    deadline = time.monotonic() + 10
    while _fs_bytes_written(daemon_url) < before + nbytes and time.monotonic() < deadline:
        time.sleep(0.05)


def _corrupt_slots(client, keys, at):
    """Flips one bit of each page ``at`` in the daemon's /dev/shm file, behind its back (another mapping of the file,
    as any same-host process could), after the page was committed."""
    import mmap
    import os

    with client.pin(keys) as pin:  # where the slots are; the pin's own check passes (nothing changed yet)
        assert pin.damaged == []
        offsets = [pin.offsets[i] for i in at]
    fd = os.open(client.hello.shm["path"], os.O_RDWR)
    try:
        with mmap.mmap(fd, 0) as m:
            for o in offsets:
                m[4096 + o + 777] ^= 0x10
    finally:
        os.close(fd)


@pytest.mark.parametrize("pages", [3, 300])  # one request, and pipelined chunks (64 keys per request here)
def test_the_default_load_refuses_a_slot_changed_behind_the_daemons_back(daemon_url, fresh_keys, pages):
    # No verify=, no crcmod. With the CRC32C library (the default when the daemon offers it) this process checks each
    # page in the same pass as its copy; without it (TIERSYNC_NATIVE_CRC32C=0) the daemon checks every page natively
    # at pin ('pin-verify') before any byte is copied.
    with tiersync.Client.connect(daemon_url, token="token-alice", pipeline=pages > 64) as c:
        assert "pin-verify" in c.hello.features and not c._check_copy
        native = c.native_crc32c is not None
        c._crc32c = None  # this process computes no checksum on the default path
        keys = fresh_keys(pages)
        src = random_bytes(pages * PAGE, 12)
        written = _fs_bytes_written(daemon_url)
        assert c.store(keys, src).stored == pages
        _after_write_through(daemon_url, written, pages * PAGE)
        bad = [1, pages - 1]
        _corrupt_slots(c, keys, bad)
        out = np.full(pages * PAGE, 7, np.uint8)
        with pytest.raises(ChecksumError) as e:
            c.load(keys, out)
        assert e.value.code == "ERR_CHECKSUM" and sorted(e.value.keys) == [keys[i] for i in bad]
        for i in range(pages):
            part = out[i * PAGE : (i + 1) * PAGE]
            if i in bad:
                if not native:
                    assert (part == 7).all()  # not one byte of a damaged page reached the caller
                # With the library the damaged page's destination holds what was read (unspecified): not delivered.
            else:
                assert np.array_equal(part, src[i * PAGE : (i + 1) * PAGE])
        # The daemon dropped the damaged host-tier copies: a second load brings intact copies up from the fs tier
        # this daemon writes through to (when the write-through ran before the damage), or reports them missing.
        out2 = np.zeros_like(out)
        missing = c.load(keys, out2)
        assert set(missing) <= {keys[i] for i in bad}
        for i in range(pages):
            if keys[i] not in missing:
                assert np.array_equal(out2[i * PAGE : (i + 1) * PAGE], src[i * PAGE : (i + 1) * PAGE])
        c.delete(keys)


def test_a_pin_refuses_views_of_a_damaged_page(daemon_url, fresh_keys):
    with tiersync.Client.connect(daemon_url, token="token-alice") as c:
        keys = fresh_keys(2)
        written = _fs_bytes_written(daemon_url)
        c.store(keys, random_bytes(2 * PAGE, 13))
        _after_write_through(daemon_url, written, 2 * PAGE)
        _corrupt_slots(c, keys, [0])
        with c.pin(keys) as pin:
            assert pin.damaged == [keys[0]] and pin.missing == []
            with pytest.raises(ChecksumError):
                pin.view(0)
            assert pin.view(1).nbytes == PAGE
        c.delete(keys)
