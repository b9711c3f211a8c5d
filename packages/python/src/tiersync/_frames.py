"""A framed client session on the daemon's Unix socket (packages/core/src/protocol/frames.ts): the same ops and
bodies as the HTTP API, each a 32-bit little-endian length and that many bytes of JSON, without HTTP's request line,
headers and parser on each round trip.

The session opens with the bytes ``TSF1`` and a first frame ``{"token": ...}``, which the daemon answers as ``hello``
(id 0). Each request ``{"id", "op", "body"}`` is answered by ``{"id", "status", "body"}``, in whatever order the
daemon finishes them, so requests can be pipelined: :meth:`FramedSession.send` writes one and returns at once,
:meth:`FramedSession.wait` reads answers (keeping those for other ids) until the one asked for arrives. No thread:
answers are read by whoever waits. Not thread-safe (the Client serializes its calls).
"""

from __future__ import annotations

import json
import socket
import struct
import time
from typing import Any, Dict, Optional, Tuple

from .errors import ProtocolError, TierSyncError, TierSyncIOError, TierSyncTimeoutError

MAGIC = b"TSF1"
_LEN = struct.Struct("<I")
#: Largest answer frame accepted (bounds this process's memory, as the HTTP channel's reply limit does).
MAX_FRAME_BYTES = 64 << 20


class FramedSession:
    """One framed session; ``hello`` is the daemon's answer to the opening frame."""

    def __init__(self, path: str, token: Optional[str], timeout_s: float, refusal):
        self.path = path
        self.timeout_s = timeout_s
        self._refusal = refusal
        self._buf = bytearray()
        self._answers: Dict[int, Tuple[int, Any]] = {}
        #: Requests sent and not yet waited for: id -> (op, deadline).
        self._pending: Dict[int, Tuple[str, float]] = {}
        self._next = 1
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout_s)
        try:
            s.connect(path)
            s.sendall(MAGIC + _frame({"token": token} if token else {}))
        except (socket.timeout, TimeoutError) as e:
            s.close()
            raise TierSyncTimeoutError(f"opening a session on unix:{path} passed its {timeout_s:g} s deadline") from e
        except OSError as e:
            s.close()
            # The socket's name is the daemon's own: one that stopped or restarted is not found again here.
            raise TierSyncIOError(f"cannot reach the daemon at unix:{path}: {e} (after a daemon restart, connect a new Client)") from e
        except BaseException:
            s.close()
            raise
        self._sock: Optional[socket.socket] = s
        self._pending[0] = ("hello", time.monotonic() + timeout_s)
        try:
            self.hello = self.wait(0)
        except BaseException:
            self.close()
            raise

    def send(self, op: str, body: Optional[dict] = None) -> int:
        """Writes one request; returns its id (for :meth:`wait`)."""
        sock = self._open()
        rid = self._next
        self._next += 1
        msg: dict = {"id": rid, "op": op}
        if body is not None:
            msg["body"] = body
        try:
            sock.settimeout(self.timeout_s)
            sock.sendall(_frame(msg))
        except (socket.timeout, TimeoutError) as e:
            self._broken(f"writing {op} passed its {self.timeout_s:g} s deadline")
            raise TierSyncTimeoutError(f"{op} passed its {self.timeout_s:g} s deadline") from e
        except OSError as e:
            self._broken(str(e))
            raise TierSyncIOError(f"cannot reach the daemon at unix:{self.path}: {e}") from e
        self._pending[rid] = (op, time.monotonic() + self.timeout_s)
        return rid

    def wait(self, rid: int) -> dict:
        """The answer to request ``rid``, or the daemon's typed error; reads (and keeps) other answers meanwhile."""
        op, deadline = self._pending.pop(rid, ("?", time.monotonic() + self.timeout_s))
        while rid not in self._answers:
            self._read(op, deadline)
        status, body = self._answers.pop(rid)
        path = f"/v1/client/{op}"
        if status >= 400:
            raise self._refusal(body, status, path)
        if not isinstance(body, dict):
            raise ProtocolError(f"daemon answered {path} with {type(body).__name__}, expected an object")
        return body

    def _read(self, op: str, deadline: float) -> None:
        sock = self._open()
        while True:
            if len(self._buf) >= 4:
                n = _LEN.unpack_from(self._buf, 0)[0]
                if n > MAX_FRAME_BYTES:
                    self._broken("oversized frame")
                    raise ProtocolError(f"daemon sent a frame of {n} bytes, over {MAX_FRAME_BYTES}")
                if len(self._buf) >= 4 + n:
                    raw = bytes(self._buf[4 : 4 + n])
                    del self._buf[: 4 + n]
                    try:
                        msg = json.loads(raw)
                        rid, status, body = int(msg["id"]), int(msg["status"]), msg["body"]
                    except (ValueError, KeyError, TypeError):
                        self._broken("malformed frame")
                        raise ProtocolError("daemon sent a frame that is not a { id, status, body } answer") from None
                    self._answers[rid] = (status, body)
                    return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._broken(f"{op} passed its deadline")
                raise TierSyncTimeoutError(f"/v1/client/{op} passed its {self.timeout_s:g} s deadline")
            try:
                sock.settimeout(remaining)
                chunk = sock.recv(1 << 16)
            except (socket.timeout, TimeoutError) as e:
                self._broken(f"{op} passed its deadline")
                raise TierSyncTimeoutError(f"/v1/client/{op} passed its {self.timeout_s:g} s deadline") from e
            except OSError as e:
                self._broken(str(e))
                raise TierSyncIOError(f"cannot reach the daemon at unix:{self.path}: {e}") from e
            if not chunk:
                self._broken("closed by the daemon")
                raise TierSyncIOError(f"the daemon closed its session at unix:{self.path} (answer to {op} lost)")
            self._buf += chunk

    def _open(self) -> socket.socket:
        if self._sock is None:
            raise TierSyncIOError(f"the session at unix:{self.path} is closed")
        return self._sock

    def _broken(self, why: str) -> None:
        # Answers in flight are lost with the connection: the session cannot be trusted past an error on it.
        self.close()

    @property
    def usable(self) -> bool:
        return self._sock is not None

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None
        self._pending.clear()
        self._answers.clear()
        self._buf.clear()


def _frame(value: Any) -> bytes:
    data = json.dumps(value, separators=(",", ":")).encode()
    return _LEN.pack(len(data)) + data


__all__ = ["FramedSession", "MAGIC", "MAX_FRAME_BYTES", "TierSyncError"]
