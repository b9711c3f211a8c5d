"""The daemon's CRC32C library (libtiersync_crc32c.so) as the Python client uses it: RFC 3720's check values, the
daemon's own CRC32Cs, one-pass stores and loads that leave the checksums to this process, and the same calls with the
library turned off."""

import ctypes
import os

import numpy as np
import pytest

import tiersync
from tiersync import ChecksumError, UnavailableError
from tiersync._native import NativeCrc32c

from test_client import PAGE  # the test daemon's page size

# RFC 3720 (iSCSI), appendix B.4: CRC32C test vectors.
RFC3720 = [
    (bytes(32), 0x8A9136AA),
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
    (
        bytes.fromhex("01c00000000000000000000000000000" "14000000000004000000001400000018" "28000000000000000200000000000000"),
        0xD9963A56,
    ),
    (b"123456789", 0xE3069283),
]


def library(daemon_url) -> NativeCrc32c:
    with tiersync.Client.connect(daemon_url, token="token-alice", native_crc32c=False) as c:
        if "crc32c-library" not in c.hello.features:
            pytest.skip("this daemon offers no CRC32C library (libtiersync_crc32c.so not built)")
        return NativeCrc32c(c.hello.crc32c_library)


def address(b) -> int:
    return np.frombuffer(b, np.uint8).ctypes.data


@pytest.mark.parametrize("data,expected", RFC3720)
def test_the_library_computes_rfc3720s_check_values(daemon_url, data, expected):
    lib = library(daemon_url)
    buf = bytearray(data)
    assert lib.crc32c(address(buf), len(buf)) == expected
    out = bytearray(len(buf))
    assert lib.copy_crc32c(address(out), address(buf), len(buf)) == expected and out == buf
    # Continued over two parts: the same CRC32C.
    h = len(buf) // 2
    assert lib.crc32c(address(buf) + h, len(buf) - h, lib.crc32c(address(buf), h)) == expected


def test_copy_pages_writes_each_pages_crc32c_in_one_pass(daemon_url):
    lib = library(daemon_url)
    src = np.random.default_rng(3).integers(0, 256, 3 * 4096 + 100, np.uint8)
    dst = np.zeros_like(src)
    crcs = (ctypes.c_uint32 * 5)()
    lib.copy_pages(dst.ctypes.data, src.ctypes.data, src.nbytes, 4096, crcs, 1)
    assert np.array_equal(src, dst)
    assert list(crcs) == [0] + [lib.crc32c(src.ctypes.data + o, min(4096, src.nbytes - o)) for o in range(0, src.nbytes, 4096)]


@pytest.mark.parametrize("stream", [False, True])
def test_a_batch_of_copy_jobs_copies_checksums_and_counts_pages_that_differ(daemon_url, stream):
    from tiersync._native import CopyJob

    lib = library(daemon_url)
    if not lib.batched:
        pytest.skip("this library has no tiersync_copy_crc32c_jobs")
    rng = np.random.default_rng(11)
    page = 64 << 10
    src = rng.integers(0, 256, 7 * page + 4096, np.uint8)
    dst = np.zeros(src.nbytes + 64, np.uint8)
    # Jobs at odd offsets on both sides (heads and tails around the 128-byte folding steps), one of them short.
    spans = [(0, 3 * page, 0), (3 * page, 2 * page + 777, 3), (5 * page + 777, 2 * page + 4096 - 777, 6)]
    jobs = (CopyJob * 3)(*[(dst.ctypes.data + 3 + o, src.ctypes.data + o, n, at) for o, n, at in spans])
    want = [lib.crc32c(src.ctypes.data + o + k, min(page, n - k)) for o, n, _ in spans for k in range(0, n, page)]
    crcs = (ctypes.c_uint32 * len(want))()
    expected = (ctypes.c_uint32 * len(want))(*want)
    assert lib.copy_jobs(jobs, 3, page, crcs, expected, stream) == 0
    assert list(crcs) == want
    assert np.array_equal(dst[3 : 3 + src.nbytes], src) and not dst[:3].any() and not dst[3 + src.nbytes :].any()
    # A page whose bytes differ from what its CRC32C says is counted (a load refuses it).
    src[4 * page + 100] ^= 1
    assert lib.copy_jobs(jobs, 3, page, crcs, expected, stream) == 1
    assert [i for i in range(len(want)) if crcs[i] != want[i]] == [4]


def test_the_library_agrees_with_the_daemons_crc32c_and_a_store_commits_the_same_crcs(daemon_url, fresh_keys):
    src = np.random.default_rng(5).integers(0, 256, 5 * PAGE - 9, np.uint8)
    with tiersync.Client.connect(daemon_url, token="token-alice", native_crc32c=False) as off, tiersync.Client.connect(daemon_url, token="token-alice", native_crc32c=True) as on:
        assert off.native_crc32c is None and on.native_crc32c is not None
        a, b = fresh_keys(5), fresh_keys(5)
        assert off.store(a, src).stored == 5  # the daemon (Node's addon) computes these CRC32Cs at commit
        assert on.store(b, src).stored == 5  # this process computes them in its copy and commits them
        with off.pin(a) as pa, off.pin(b) as pb:
            assert pa.crcs == pb.crcs
            lib = NativeCrc32c(on.hello.crc32c_library)
            assert pa.crcs == [lib.crc32c(src.ctypes.data + o, min(PAGE, src.nbytes - o)) for o in range(0, src.nbytes, PAGE)]
        # Each client loads what the other stored, bit for bit.
        for c, keys in ((on, a), (off, b)):
            out = np.zeros_like(src)
            assert c.load(keys, out) == [] and np.array_equal(out, src)
        off.delete(a + b)


@pytest.mark.parametrize("pages,threads", [(3, None), (300, 1), (300, 2)])
def test_a_load_with_the_library_checks_its_own_copy_and_refuses_a_corrupted_slot(daemon_url, fresh_keys, pages, threads):
    from test_client import _after_write_through, _corrupt_slots, _fs_bytes_written

    # 300 pages of 16 KiB: one batch over 4 MiB, split between the copy threads when there are 2 (pages 0 and 150
    # fall in different halves).
    with tiersync.Client.connect(daemon_url, token="token-alice", native_crc32c=True, pipeline=pages > 64, threads=threads) as c:
        assert "verify" not in c._pin_body(["00" * 8], c._native is None)  # no check pass asked of the daemon
        keys = fresh_keys(pages)
        src = np.random.default_rng(7).integers(0, 256, pages * PAGE, np.uint8)
        written = _fs_bytes_written(daemon_url)
        assert c.store(keys, src).stored == pages
        _after_write_through(daemon_url, written, pages * PAGE)
        bad = [0, pages // 2]
        _corrupt_slots(c, keys, bad)
        out = np.zeros_like(src)
        with pytest.raises(ChecksumError) as e:
            c.load(keys, out)
        assert sorted(e.value.keys) == sorted(keys[i] for i in bad)
        for i in range(pages):
            if i not in bad:
                assert np.array_equal(out[i * PAGE : (i + 1) * PAGE], src[i * PAGE : (i + 1) * PAGE])
        # Named in release ('release-damaged'): the daemon checked and dropped those host-tier copies, so a second
        # load reads intact copies from the fs tier, or reports the pages missing.
        out2 = np.zeros_like(src)
        missing = c.load(keys, out2)
        assert set(missing) <= {keys[i] for i in bad}
        for i in range(pages):
            if keys[i] not in missing:
                assert np.array_equal(out2[i * PAGE : (i + 1) * PAGE], src[i * PAGE : (i + 1) * PAGE])
        c.delete(keys)


def test_the_library_can_be_turned_off_or_required(daemon_url, monkeypatch):
    monkeypatch.setenv("TIERSYNC_NATIVE_CRC32C", "0")
    with tiersync.Client.connect(daemon_url, token="token-alice") as c:
        assert c.native_crc32c is None and c._pin_body(["00" * 8], c._native is None).get("verify") is True
    monkeypatch.delenv("TIERSYNC_NATIVE_CRC32C")
    monkeypatch.setenv("TIERSYNC_CRC32C_LIBRARY", "/nonexistent/libtiersync_crc32c.so")
    with tiersync.Client.connect(daemon_url, token="token-alice") as c:
        assert c.native_crc32c is None  # a library that does not load: the daemon checks, as without one
    with pytest.raises(UnavailableError):
        tiersync.Client.connect(daemon_url, token="token-alice", native_crc32c=True)
