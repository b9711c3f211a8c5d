"""The paged-KV adapter with real torch tensors in vLLM's layout [2, num_blocks, block_size, num_kv_heads, head_size]:
restored blocks equal the saved ones bit for bit, a shared prefix is stored once, partial blocks are never saved, a
restore stops at the first page the daemon lacks and leaves the blocks after it untouched."""

import pytest
import torch

import tiersync
from tiersync.kv import PagedKVAdapter

LAYERS, BLOCKS, BLOCK, HEADS, DIM = 2, 32, 16, 2, 64
MODEL = "py-client@1"


def caches(seed: int, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, BLOCKS, BLOCK, HEADS, DIM, generator=g).to(dtype) for _ in range(LAYERS)]


def same_block(a, ab: int, b, bb: int) -> bool:
    """Bitwise equality of block ab of caches a and block bb of caches b (K and V, every layer)."""
    return all(torch.equal(x[:, ab].view(torch.int16), y[:, bb].view(torch.int16)) for x, y in zip(a, b))


def tokens(seed: int, n: int):
    return torch.randint(0, 128_000, (n,), generator=torch.Generator().manual_seed(seed))


@pytest.fixture
def adapter(client):
    return PagedKVAdapter(client, caches(1), model=MODEL)


def test_layout_matches_the_daemon_and_core(client, adapter):
    assert adapter.page_bytes == client.page_bytes == LAYERS * 2 * BLOCK * HEADS * DIM * 2
    # The daemon's shm fingerprint is "<model>/<layout fingerprint>", computed by @tiersync/core from the same layout.
    assert client.hello.shm["fingerprint"] == f"{MODEL}/{adapter.layout.fingerprint}"


def test_restored_blocks_equal_saved_blocks_bit_for_bit(client, adapter):
    seq = tokens(10, 100)  # 6 full blocks + 4 tokens: the partial block is never saved
    src_blocks = [3, 7, 1, 9, 12, 4, 20]
    r = adapter.save(src_blocks, seq)
    assert (r.pages, r.stored, r.existing) == (6, 6, 0)
    assert client.lookup(adapter.keys(seq)).prefix == 6

    other = caches(2)
    untouched = [c.clone() for c in other]
    dst_blocks = [0, 2, 4, 6, 8, 10, 14]
    target = PagedKVAdapter(client, other, model=MODEL)
    assert target.load(dst_blocks, seq) == 96
    for s, d in zip(src_blocks[:6], dst_blocks[:6]):
        assert same_block(adapter.kv_caches, s, other, d)
    # Block 14 (the partial block) and every block not named were left alone.
    for b in set(range(BLOCKS)) - set(dst_blocks[:6]):
        assert same_block(untouched, b, other, b)


def test_a_shared_prefix_is_stored_once(client, adapter):
    a = tokens(20, 128)  # 8 blocks
    b = torch.cat([a[:80], tokens(21, 48)])  # shares 5 full blocks with a
    assert adapter.save(list(range(8)), a).stored == 8
    r = adapter.save(list(range(8, 16)), b)
    assert (r.pages, r.stored, r.existing) == (8, 3, 5)
    keys_a, keys_b = adapter.keys(a), adapter.keys(b)
    assert keys_a[:5] == keys_b[:5] and not set(keys_a[5:]) & set(keys_b[5:])
    # b restores from a's copies of the shared blocks.
    other = caches(3)
    assert PagedKVAdapter(client, other, model=MODEL).load(list(range(16, 24)), b) == 128
    for i in range(5):
        assert same_block(adapter.kv_caches, i, other, 16 + i)
    for i in range(5, 8):
        assert same_block(adapter.kv_caches, 8 + i, other, 16 + i)


def test_a_restore_stops_at_the_first_missing_page(client, adapter):
    seq = tokens(30, 96)
    adapter.save(list(range(6)), seq)
    client.delete([adapter.keys(seq)[3]])
    other = caches(4)
    before = [c.clone() for c in other]
    assert PagedKVAdapter(client, other, model=MODEL).load(list(range(10, 16)), seq) == 48
    for i in range(3):
        assert same_block(adapter.kv_caches, i, other, 10 + i)
    for b in (13, 14, 15):  # pages 4 and 5 are held but follow the gap: not copied
        assert same_block(before, b, other, b)
    assert PagedKVAdapter(client, other, model=MODEL).load([0, 1], tokens(31, 32)) == 0


def test_mismatched_caches_are_refused(client):
    with pytest.raises(tiersync.TierSyncError) as e:
        PagedKVAdapter(client, [torch.zeros(2, 4, BLOCK, HEADS, DIM, dtype=torch.float32)] * LAYERS, model=MODEL)
    assert e.value.code == "ERR_CONFIG" and "kvHeads: 2" in str(e.value)
    with pytest.raises(tiersync.InvalidArgumentError, match="shape"):
        PagedKVAdapter(client, [torch.zeros(4, BLOCK, HEADS, DIM)], model=MODEL)
    adapter = PagedKVAdapter(client, caches(5), model=MODEL)
    with pytest.raises(tiersync.InvalidArgumentError, match=r"block_ids\[1\] = 99"):
        adapter.save([0, 99], tokens(40, 32))
    with pytest.raises(tiersync.InvalidArgumentError, match="distinct"):
        adapter.load([1, 1], tokens(40, 32))
    with pytest.raises(tiersync.InvalidArgumentError, match=r"block_ids\[0\] must be an int, got 0.5"):
        adapter.load([0.5, 1.7], tokens(40, 32))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here: the pinned-memory staging path is untested")
def test_cuda_caches_round_trip_through_pinned_memory(client):
    src = [c.cuda() for c in caches(6)]
    dst = [torch.zeros_like(c) for c in src]
    seq = tokens(50, 64)
    PagedKVAdapter(client, src, model=MODEL).save([0, 1, 2, 3], seq)
    assert PagedKVAdapter(client, dst, model=MODEL).load([4, 5, 6, 7], seq) == 64
    assert all(torch.equal(s[:, :4], d[:, 4:8]) for s, d in zip(src, dst))


def test_a_damaged_page_ends_the_restored_prefix_and_is_never_copied(daemon_url, client, adapter):
    from test_client import _after_write_through, _corrupt_slots, _fs_bytes_written

    seq = tokens(40, 6 * BLOCK)
    keys = adapter.keys(seq)
    written = _fs_bytes_written(daemon_url)
    assert adapter.save([1, 2, 3, 4, 5, 6], seq).stored == 6
    _after_write_through(daemon_url, written, 6 * client.page_bytes)
    _corrupt_slots(client, keys, [3])  # page 3's bytes change in /dev/shm after it was stored
    other = caches(41)
    untouched = [c.clone() for c in other]
    target = PagedKVAdapter(client, other, model=MODEL)
    assert target.load([10, 11, 12, 13, 14, 15], seq) == 3 * BLOCK
    for s, d in zip([1, 2, 3], [10, 11, 12]):
        assert same_block(adapter.kv_caches, s, other, d)
    # The pages after the damaged one were left alone; the damaged page's block too when the daemon checked it at pin
    # (without the CRC32C library: with it, the block holds the bytes read, which the engine recomputes).
    for b in (14, 15) if client.native_crc32c else (13, 14, 15):
        assert same_block(untouched, b, other, b)
    client.delete(keys)
