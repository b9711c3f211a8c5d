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
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
FIXTURE = REPO / "packages/core/src/server/serve.fixture.mjs"
MODEL = "py-client@1"


def daemon_config(directory: str, shm: str) -> dict:
    text = (HERE / "daemon.json").read_text().replace("$DIR", directory).replace("$SHM", shm)
    return json.loads(text)


def _start_daemon() -> "tuple[str, subprocess.Popen, str, str]":
    directory = tempfile.mkdtemp(prefix="tiersync-pytest-")
    shm = f"/dev/shm/tiersync-pytest-{os.getpid()}"
    config = Path(directory) / "daemon.json"
    config.write_text(json.dumps(daemon_config(directory, shm)))
    log = open(Path(directory) / "stderr.log", "w+")
    child = subprocess.Popen(["node", "--conditions=source", str(FIXTURE), "--config", str(config)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        log.seek(0)
        for line in log.read().splitlines():
            if "tiersync serve listening" in line:
                return f"http://127.0.0.1:{json.loads(line)['httpPort']}", child, directory, shm
        if child.poll() is not None:
            break
        time.sleep(0.1)
    child.kill()
    log.seek(0)
    raise RuntimeError(f"daemon did not start within 60 s: {log.read()[-2000:]}")


@pytest.fixture(scope="session")
def daemon_url():
    url = os.environ.get("TIERSYNC_TEST_URL")
    if url:
        yield url
        return
    url, child, directory, shm = _start_daemon()
    try:
        yield url
    finally:
        child.terminate()
        try:
            child.wait(20)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(5)
        shutil.rmtree(directory, ignore_errors=True)
        if os.path.exists(shm):
            os.unlink(shm)


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
