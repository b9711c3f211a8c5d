"""A `tiersync serve` daemon in a child process, started from the repository's TypeScript sources with node (as
packages/core/src/server/daemon-process.ts does for Node benchmarks). Used by conftest.py when no daemon URL is given
and by bench/bench_client.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[3]
FIXTURE = REPO / "packages/core/src/server/serve.fixture.mjs"


class DaemonProcess:
    def __init__(self, url: str, child: subprocess.Popen, directory: str, cleanup: Callable[[], None]):
        self.url = url
        self.child = child
        self.directory = directory
        self._cleanup = cleanup

    def stop(self, grace_s: float = 20) -> "int | None":
        """SIGTERM (graceful shutdown), SIGKILL after ``grace_s``; removes the daemon's folder."""
        self.child.terminate()
        try:
            code = self.child.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.child.kill()
            code = self.child.wait(5)
        shutil.rmtree(self.directory, ignore_errors=True)
        self._cleanup()
        return code


def _command() -> "list[str]":
    """The daemon from the TypeScript sources; with TIERSYNC_DAEMON_FROM=dist, from the compiled packages (what
    `pnpm tiersync serve` runs: build first with `npx tsc -b packages/core`)."""
    if os.environ.get("TIERSYNC_DAEMON_FROM") == "dist":
        cli = (REPO / "packages/core/dist/cli/index.js").as_uri()
        return ["node", "--input-type=module", "-e", f"const {{ serveCommand }} = await import({json.dumps(cli)}); process.exitCode = await serveCommand.run(process.argv.slice(1));", "--"]
    return ["node", "--conditions=source", str(FIXTURE)]


def start_daemon(make_config: Callable[[str], dict], cleanup: Callable[[], None] = lambda: None, deadline_s: float = 60) -> DaemonProcess:
    """Writes ``make_config(folder)`` to a fresh folder, starts the daemon on it and waits for its "listening" line."""
    directory = tempfile.mkdtemp(prefix="tiersync-py-")
    config = Path(directory) / "daemon.json"
    config.write_text(json.dumps(make_config(directory)))
    log = open(Path(directory) / "stderr.log", "w+")
    child = subprocess.Popen([*_command(), "--config", str(config)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        log.seek(0)
        for line in log.read().splitlines():
            if "tiersync serve listening" in line:
                return DaemonProcess(f"http://127.0.0.1:{json.loads(line)['httpPort']}", child, directory, cleanup)
        if child.poll() is not None:
            break
        time.sleep(0.1)
    child.kill()
    log.seek(0)
    text = log.read()[-2000:]
    shutil.rmtree(directory, ignore_errors=True)
    cleanup()
    raise RuntimeError(f"daemon did not start within {deadline_s:g} s: {text}")
