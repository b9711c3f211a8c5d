"""redis-py (Debian's python3-redis) against the tiersync RESP door, used the way LMCache's Redis connector uses Redis.

LMCache's RedisConnector (lmcache/v1/storage_backend/connector/redis_connector.py) stores each KV chunk as two
keys, `<key>kv_bytes` (the raw KV bytes: 80 MiB for one 256-token chunk of a 70B model) and `<key>metadata` (a
small header), through a redis.asyncio ConnectionPool of up to 150 connections:
  put:      SET <key>kv_bytes <bytes>, then SET <key>metadata <header>   (kv bytes first, "to avoid race condition")
  exists:   EXISTS <key>metadata
  contains: EXISTS <key>metadata per key, in order, until the first miss (batched_async_contains)
  get:      GET <key>metadata, then GET <key>kv_bytes; kv_bytes missing -> DEL <key>metadata, miss
  batched:  asyncio.gather of puts / gets
Its sentinel connector does the same with the synchronous client. LMCache's docs list and clear keys with
KEYS / `redis-cli --scan --pattern` (SCAN MATCH COUNT) and DEL. No MULTI/EXEC and no pipelines are used.

Run by test/resp-lmcache.test.ts against a `tiersync serve` daemon with the door on TIERSYNC_RESP_PORT.
"""

import asyncio
import inspect
import os
import random
import socket
import struct
import threading
import time

import pytest
import redis
import redis.asyncio as aredis

PORT = int(os.environ.get("TIERSYNC_RESP_PORT", "0"))
URL = f"redis://127.0.0.1:{PORT}"
MiB = 1 << 20
MODEL = "vllm@meta-llama/Llama-3.1-70B-Instruct@1@0@"

pytestmark = pytest.mark.skipif(PORT == 0, reason="run by test/resp-lmcache.test.ts, which starts the daemon")


def chunk_bytes(n: int, seed: int) -> bytes:
    """Deterministic incompressible bytes (random.randbytes is C-backed; it takes at most 256 MiB at once)."""
    rng = random.Random(seed)
    piece = 64 * MiB
    return b"".join(rng.randbytes(min(piece, n - at)) for at in range(0, n, piece))


def chunk_key(i: int) -> str:
    return MODEL + f"{i:064x}"


def metadata_for(kv: bytes) -> bytes:
    # The shape of LMCache's RemoteMetadata: length, a 4-d shape, dtype and format codes.
    return struct.pack("<q4iii", len(kv), 80, 2, 256, 1024, 3, 1)


class LMCacheLikeConnector:
    """The Redis calls of LMCache's RedisConnector, one for one, on redis.asyncio."""

    def __init__(self, url: str):
        self.pool = aredis.ConnectionPool.from_url(url, max_connections=150)
        self.connection = aredis.Redis(connection_pool=self.pool)
        self.sem = asyncio.Semaphore(150)

    async def exists(self, key: str) -> bool:
        async with self.sem:
            return bool(await self.connection.exists(key + "metadata"))

    async def put(self, key: str, kv: bytes) -> None:
        async with self.sem:
            await self.connection.set(key + "kv_bytes", kv)
            await self.connection.set(key + "metadata", metadata_for(kv))

    async def get(self, key: str):
        async with self.sem:
            meta = await self.connection.get(key + "metadata")
            if meta is None:
                return None
            length = struct.unpack_from("<q", meta)[0]
            kv = await self.connection.get(key + "kv_bytes")
        if kv is None:
            async with self.sem:
                await self.connection.delete(key + "metadata")
            return None
        assert len(kv) == length
        return kv

    async def batched_put(self, keys, kvs) -> None:
        await asyncio.gather(*(self.put(k, v) for k, v in zip(keys, kvs)))

    async def batched_get(self, keys):
        return await asyncio.gather(*(self.get(k) for k in keys))

    async def batched_contains(self, keys) -> int:
        hits = 0
        for k in keys:
            async with self.sem:
                if not await self.connection.exists(k + "metadata"):
                    return hits
            hits += 1
        return hits

    async def close(self) -> None:
        await self.connection.close()
        await self.pool.disconnect()


def run(coro):
    return asyncio.run(coro)


def test_put_get_exists_chunks_of_every_size_concurrently():
    """batched_put / batched_get of 256 KiB .. 80 MiB chunks through 150-connection pools, byte-exact."""
    sizes = [256 * 1024, 1 * MiB, 16 * MiB, 80 * MiB, 80 * MiB + 12345]
    keys = [chunk_key(100 + i) for i in range(len(sizes))]
    kvs = [chunk_bytes(n, 100 + i) for i, n in enumerate(sizes)]

    async def scenario():
        c = LMCacheLikeConnector(URL)
        try:
            assert await c.batched_contains(keys) == 0
            await c.batched_put(keys, kvs)
            for k in keys:
                assert await c.exists(k)
            assert await c.batched_contains(keys + [chunk_key(999)]) == len(keys)
            got = await c.batched_get(keys)
            for want, have in zip(kvs, got):
                assert have is not None and len(have) == len(want)
                assert have == want
        finally:
            await c.close()

    run(scenario())


def test_missing_kv_bytes_is_a_miss_and_metadata_is_dropped():
    key = chunk_key(200)
    kv = chunk_bytes(3 * MiB, 200)

    async def scenario():
        c = LMCacheLikeConnector(URL)
        try:
            await c.put(key, kv)
            assert await c.get(key) == kv
            # The KV bytes vanish (evicted, deleted elsewhere): the connector reports a miss and cleans up.
            assert await c.connection.delete(key + "kv_bytes") == 1
            assert await c.get(key) is None
            assert not await c.exists(key)
            assert await c.get(key) is None
        finally:
            await c.close()

    run(scenario())


def test_sync_client_80_mib_and_overwrite():
    """The sentinel connector's synchronous calls; an overwrite replaces the whole value."""
    r = redis.Redis(host="127.0.0.1", port=PORT)
    key = chunk_key(300)
    a = chunk_bytes(80 * MiB, 300)
    b = chunk_bytes(80 * MiB - 1, 301)
    assert r.set(key + "kv_bytes", a) is True
    assert r.set(key + "metadata", metadata_for(a)) is True
    assert r.get(key + "kv_bytes") == a
    assert r.strlen(key + "kv_bytes") == len(a)
    assert r.set(key + "kv_bytes", b) is True
    assert r.get(key + "kv_bytes") == b
    assert r.exists(key + "metadata", key + "kv_bytes") == 2
    assert r.delete(key + "metadata", key + "kv_bytes") == 2
    assert r.get(key + "kv_bytes") is None
    r.close()


def test_pipeline_without_transaction():
    """redis-py pipelines (transaction=False) send commands back to back; replies come back in order."""
    r = redis.Redis(host="127.0.0.1", port=PORT)
    kv = chunk_bytes(20 * MiB, 400)
    p = r.pipeline(transaction=False)
    for i in range(4):
        p.set(chunk_key(400 + i) + "kv_bytes", kv[i:])
        p.set(chunk_key(400 + i) + "metadata", metadata_for(kv[i:]))
    for i in range(4):
        p.get(chunk_key(400 + i) + "kv_bytes")
        p.exists(chunk_key(400 + i) + "metadata")
    out = p.execute()
    assert out[:8] == [True] * 8
    for i in range(4):
        assert out[8 + 2 * i] == kv[i:]
        assert out[9 + 2 * i] == 1
    r.close()


def test_scan_match_count_keys_and_del():
    """Listing and clearing LMCache's keys as its docs do: SCAN MATCH COUNT (redis-cli --scan --pattern), KEYS, DEL."""
    r = redis.Redis(host="127.0.0.1", port=PORT)
    prefix = "vllm@scan-model@1@0@"
    names = [f"{prefix}{i:064x}" for i in range(60)]
    for n in names:
        r.set(n + "kv_bytes", b"x" * 100)
        r.set(n + "metadata", b"m")
    found = sorted(k.decode() for k in r.scan_iter(match=prefix + "*metadata", count=7))
    assert found == sorted(n + "metadata" for n in names)
    assert len(r.keys(prefix + "*kv_bytes")) == 60
    cursor, first = r.scan(0, match=prefix + "*", count=10)
    assert isinstance(cursor, int) and len(first) <= 20
    assert r.delete(*[n + s for n in names for s in ("kv_bytes", "metadata")]) == 120
    assert list(r.scan_iter(match=prefix + "*", count=100)) == []
    r.close()


def test_value_of_512_mib_through_bounded_staging():
    """Redis's own bulk limit: a 512 MiB value round-trips byte-exact while the door's staging holds <= 2 windows.

    A second connection samples INFO memory (tiersync_staging_used_bytes) while the value moves.
    """
    r = redis.Redis(host="127.0.0.1", port=PORT)
    limits = r.config_get("proto-max-bulk-len")
    assert int(limits["proto-max-bulk-len"]) == 512 * MiB
    window = int(os.environ.get("TIERSYNC_RESP_WINDOW", str(16 * MiB)))
    value = chunk_bytes(512 * MiB, 500)
    peak = [0]
    stop = threading.Event()

    def sample():
        s = redis.Redis(host="127.0.0.1", port=PORT)
        while not stop.is_set():
            used = int(s.info("memory")["tiersync_staging_used_bytes"])
            peak[0] = max(peak[0], used)
            time.sleep(0.002)
        s.close()

    t = threading.Thread(target=sample)
    t.start()
    try:
        assert r.set("big512", value) is True
        got = r.get("big512")
    finally:
        stop.set()
        t.join()
    assert got is not None and len(got) == len(value)
    assert got == value
    del got
    # 0 when the first tier is a host tier (values go straight into its slots); at most two windows otherwise.
    assert 0 <= peak[0] <= 2 * window, f"staging peak {peak[0]} bytes"
    assert r.delete("big512") == 1
    r.close()


def test_over_the_bulk_limit_is_refused_and_closes_the_connection():
    s = socket.create_connection(("127.0.0.1", PORT))
    s.sendall(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n" % (512 * MiB + 1))
    f = s.makefile("rb")
    line = f.readline()
    assert line.startswith(b"-ERR Protocol error: bulk length 536870913 over the limit of 536870912")
    assert f.read() == b""  # closed
    s.close()


# --- RESP3 -------------------------------------------------------------------------------------------------------


class Resp3:
    """A minimal RESP3 client over a raw socket: redis-py 4.3.4 has no protocol=3 (added in redis-py 5)."""

    def __init__(self):
        self.sock = socket.create_connection(("127.0.0.1", PORT))
        self.f = self.sock.makefile("rb", buffering=1 << 20)

    def send(self, *args):
        parts = [b"*%d\r\n" % len(args)]
        for a in args:
            b = a if isinstance(a, (bytes, bytearray, memoryview)) else str(a).encode()
            parts += [b"$%d\r\n" % len(b), b, b"\r\n"]
        for p in parts:
            self.sock.sendall(p)

    def read(self):
        line = self.f.readline()
        t, rest = line[:1], line[1:-2]
        if t == b"+":
            return ("simple", rest.decode())
        if t == b"-":
            return ("error", rest.decode())
        if t == b":":
            return ("integer", int(rest))
        if t == b"_":
            return ("null", None)
        if t == b"#":
            return ("boolean", rest == b"t")
        if t == b",":
            return ("double", float(rest))
        if t in (b"$", b"=", b"!"):
            n = int(rest)
            if n < 0:
                return ("resp2-null", None)
            data = self.f.read(n)
            assert self.f.read(2) == b"\r\n"
            kind = {b"$": "bulk", b"=": "verbatim", b"!": "blob-error"}[t]
            return (kind, data)
        if t in (b"*", b"~", b">"):
            n = int(rest)
            kind = {b"*": "array", b"~": "set", b">": "push"}[t]
            return (kind, None if n < 0 else [self.read() for _ in range(n)])
        if t == b"%":
            n = int(rest)
            return ("map", [(self.read(), self.read()) for _ in range(n)])
        raise AssertionError(f"unexpected reply line {line!r}")

    def call(self, *args):
        self.send(*args)
        return self.read()

    def close(self):
        self.f.close()
        self.sock.close()


def test_redis_py_version_and_resp3():
    """redis-py >= 5 speaks RESP3 itself (protocol=3); Debian's 4.3.4 does not, so RESP3 is driven raw below."""
    has_protocol = "protocol" in inspect.signature(redis.Redis.__init__).parameters
    if has_protocol:
        r = redis.Redis(host="127.0.0.1", port=PORT, protocol=3)
        v = chunk_bytes(80 * MiB, 600)
        assert r.set("r3py", v) is True
        assert r.get("r3py") == v
        assert r.get("r3py-none") is None
        r.close()
    else:
        assert redis.__version__.startswith("4.")


def test_hello_3_and_resp3_replies_with_80_mib_values():
    c = Resp3()
    kind, hello = c.call("HELLO", "3", "SETNAME", "lmcache-engine")
    assert kind == "map"
    fields = {k[1].decode(): v for k, v in hello}
    assert list(fields) == ["server", "version", "proto", "id", "mode", "role", "modules"]
    assert fields["proto"] == ("integer", 3)
    assert fields["server"] == ("bulk", b"redis")
    assert fields["modules"] == ("array", [])
    key = chunk_key(700)
    kv = chunk_bytes(80 * MiB, 700)
    assert c.call("SET", key + "kv_bytes", kv) == ("simple", "OK")
    assert c.call("SET", key + "metadata", metadata_for(kv)) == ("simple", "OK")
    assert c.call("EXISTS", key + "metadata") == ("integer", 1)
    kind, got = c.call("GET", key + "kv_bytes")
    assert kind == "bulk" and got == kv
    assert c.call("GET", key + "nothing") == ("null", None)
    assert c.call("SET", key + "metadata", b"x", "NX") == ("null", None)
    kind, items = c.call("MGET", key + "metadata", key + "nothing")
    assert kind == "array" and items[1] == ("null", None)
    kind, cfg = c.call("CONFIG", "GET", "proto-max-bulk-len")
    assert kind == "map" and cfg == [(("bulk", b"proto-max-bulk-len"), ("bulk", str(512 * MiB).encode()))]
    kind, info = c.call("INFO", "server")
    assert kind == "verbatim" and info.startswith(b"txt:") and b"redis_version:" in info
    kind, scan = c.call("SCAN", "0", "MATCH", key + "*", "COUNT", "100")
    assert kind == "array" and scan[0][0] == "bulk"
    assert c.call("DEL", key + "kv_bytes", key + "metadata") == ("integer", 2)
    # Back to RESP2 on the same connection: a flat array of 14, and $-1 for a missing value.
    kind, hello2 = c.call("HELLO", "2")
    assert kind == "array" and len(hello2) == 14
    assert c.call("GET", key + "nothing") == ("resp2-null", None)
    c.close()


def test_hello_errors_as_redis_7():
    c = Resp3()
    assert c.call("HELLO", "4") == ("error", "NOPROTO unsupported protocol version")
    assert c.call("HELLO", "three") == ("error", "ERR Protocol version is not an integer or out of range")
    assert c.call("HELLO", "3", "AUTH", "default") == ("error", "ERR Syntax error in HELLO option 'AUTH'")
    # No AUTH configured: the default user takes any password, as Redis's nopass default user.
    kind, _ = c.call("HELLO", "3", "AUTH", "default", "any-password")
    assert kind == "map"
    c.close()
