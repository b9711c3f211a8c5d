"""Fixtures of the Python client tests: a real `tiersync serve` daemon.

The daemon is configured by daemon.json beside this file ($DIR and $SHM filled in): one page is one 16-token block of
2 layers x 2 KV heads x 64 dims in bf16 (16 KiB), tenants alice, bob and remote (no shared memory), leases of 3 s,
at most 64 keys per request (so larger calls exercise the client's batching).

Under `pnpm test`, test/python-client.test.ts starts the daemon (test/daemon-helpers.ts startDaemon) and passes its
URL in TIERSYNC_TEST_URL. Run alone (`/usr/bin/python3 -m pytest packages/python/tests`), this file starts one itself
from the TypeScript sources with node.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from daemon_process import start_daemon

HERE = Path(__file__).resolve().parent


def daemon_config(directory: str, shm: str) -> dict:
    text = (HERE / "daemon.json").read_text().replace("$DIR", directory).replace("$SHM", shm)
    return json.loads(text)


@pytest.fixture(scope="session")
def daemon_url():
    url = os.environ.get("TIERSYNC_TEST_URL")
    if url:
        yield url
        return
    shm = f"/dev/shm/tiersync-pytest-{os.getpid()}"
    daemon = start_daemon(lambda d: daemon_config(d, shm), cleanup=lambda: os.path.exists(shm) and os.unlink(shm))
    try:
        yield daemon.url
    finally:
        daemon.stop()


@pytest.fixture
def client(daemon_url):
    import tiersync

    c = tiersync.Client.connect(daemon_url, token="token-alice")
    yield c
    c.close()


_tag = [int(time.time() * 1000) & 0xFFFFFF]


@pytest.fixture
def fresh_keys():
    """Distinct page keys for each test (so tests never see each other's pages on the shared daemon)."""

    def make(n: int) -> "list[str]":
        _tag[0] += 1
        return [f"{_tag[0]:08x}{os.getpid() & 0xFFFF:04x}{i:08x}" for i in range(n)]

    return make
