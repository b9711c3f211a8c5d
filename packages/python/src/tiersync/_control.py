"""The control channel to a daemon: the client protocol's ops (packages/core/src/protocol/client.ts), one small JSON
request each, over a kept-alive HTTP/1.1 connection (http.client), each with a deadline. Page bytes never travel here.

Same host: after ``hello`` the channel moves to the daemon's Unix socket when the daemon offers one: a framed session
there (_frames.py: same ops and bodies, no HTTP parsing, requests pipelined), or HTTP on that socket when the
daemon does not speak frames. Refusals come back as the daemon's typed error.

``send``/``wait`` pipeline requests on a framed session (the daemon works on several while this process copies);
over HTTP, ``send`` runs the request at once and ``wait`` hands back its answer.

Not thread-safe: one request at a time per channel (the Client serializes its calls with a lock).
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from typing import Any, Optional, Tuple
from urllib.parse import urlsplit

from ._frames import FramedSession
from .errors import ProtocolError, TierSyncError, TierSyncIOError, TierSyncTimeoutError, InvalidArgumentError, error_for

#: Method of every op of the client API (GET for hello, POST for the rest).
OPS = {
    "hello": "GET",
    "reserve": "POST",
    "commit": "POST",
    "abort": "POST",
    "release": "POST",
    "lookup": "POST",
    "pin": "POST",
    "resolve": "POST",
    "delete": "POST",
}

#: Largest reply accepted (bounds the client's memory, as the Node client does).
MAX_REPLY_BYTES = 64 << 20


class _UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a Unix socket (the daemon serves the same routes there)."""

    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self._unix_path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self._unix_path)
        except BaseException:
            s.close()
            raise
        self.sock = s


class ControlChannel:
    """One kept-alive connection to the daemon's HTTP control plane."""

    def __init__(self, url: str, token: Optional[str], timeout_s: float):
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise InvalidArgumentError(f"url must be an http:// URL of a tiersync daemon, got {url!r}", field="url")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.timeout_s = timeout_s
        self._token = token
        self._headers = {"authorization": f"Bearer {token}"} if token else {}
        self._framed: Optional[FramedSession] = None
        self._conn: http.client.HTTPConnection = http.client.HTTPConnection(self.host, self.port, timeout=timeout_s)
        self._endpoint = f"http://{self.host}:{self.port}"
        #: Requests sent so far (each one round trip).
        self.requests = 0
        #: Seconds spent in requests so far (waiting on the daemon included).
        self.seconds = 0.0

    @property
    def endpoint(self) -> str:
        """Where requests go now: ``unix:PATH`` or the URL's origin."""
        return self._endpoint

    @property
    def pipelined(self) -> bool:
        """Whether ``send`` returns before the answer (a framed session), so several requests can be in flight."""
        return self._framed is not None

    def use_socket(self, path: str) -> bool:
        """Sends later requests over the daemon's Unix socket, once one round trip over it succeeds: as frames, or as
        HTTP when the daemon does not open a framed session. Returns whether it moved."""
        try:
            self._framed = FramedSession(path, self._token, self.timeout_s, _refusal)
            self.requests += 1
            self._conn.close()
            self._endpoint = f"unix:{path}"
            return True
        except (TierSyncError, OSError):
            self._framed = None
        before, before_endpoint = self._conn, self._endpoint
        self._conn, self._endpoint = _UnixHTTPConnection(path, self.timeout_s), f"unix:{path}"
        try:
            self.call("hello")
        except TierSyncError:
            self._conn.close()
            self._conn, self._endpoint = before, before_endpoint
            return False
        before.close()
        return True

    def send(self, op: str, body: Optional[dict] = None) -> "Tuple[Any, ...]":
        """Starts one op; :meth:`wait` gives its answer. On a framed session the request is only written; over HTTP it
        runs to completion here (its answer or error is kept for ``wait``)."""
        if self._framed is not None:
            session = self._session()
            self.requests += 1
            return ("frame", session, session.send(op, body))
        try:
            return ("done", self.call(op, body))
        except TierSyncError as e:
            return ("failed", e)

    def wait(self, handle: "Tuple[Any, ...]") -> Any:
        """The answer of a request started with :meth:`send` (the daemon's typed error when it refused it)."""
        if handle[0] == "done":
            return handle[1]
        if handle[0] == "failed":
            raise handle[1]
        start = time.monotonic()
        try:
            return handle[1].wait(handle[2])
        finally:
            self.seconds += time.monotonic() - start

    def _session(self) -> FramedSession:
        """The framed session; reopened once when a former error closed it (answers it held are lost with it)."""
        assert self._framed is not None
        if not self._framed.usable:
            path = self._framed.path
            try:
                self._framed = FramedSession(path, self._token, self.timeout_s, _refusal)
            except TierSyncTimeoutError as e:
                # Named for what the caller was doing, not for the session's opening frame.
                raise TierSyncTimeoutError(f"the daemon at unix:{path} did not answer within {self.timeout_s:g} s (reopening the session after an earlier failure)") from e
            self.requests += 1
        return self._framed

    def call(self, op: str, body: Optional[dict] = None) -> Any:
        """Sends one op and returns the daemon's JSON answer.

        Raises the daemon's error (AuthError, InvalidArgumentError naming the field, TierFullError...), or
        TierSyncTimeoutError when the deadline passes, TierSyncIOError when the daemon cannot be reached,
        ProtocolError when the answer is not the protocol's.
        """
        if self._framed is not None:
            # Timed as a whole: encoding and writing a request of 1024 keys is part of what the call costs.
            start = time.monotonic()
            handle = self.send(op, body)
            sent = time.monotonic()
            try:
                return self.wait(handle)
            finally:
                self.seconds += sent - start
        method = OPS[op]
        path = f"/v1/client/{op}"
        payload = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = dict(self._headers)
        if payload is not None:
            headers["content-type"] = "application/json"
        start = time.monotonic()
        deadline = start + self.timeout_s
        self.requests += 1
        try:
            return self._call(op, method, path, payload, headers, deadline)
        finally:
            self.seconds += time.monotonic() - start

    def _call(self, op: str, method: str, path: str, payload: Optional[bytes], headers: dict, deadline: float) -> Any:
        # A kept-alive connection the daemon closed while idle fails on first use: the request never reached the
        # daemon, so it is sent once more on a fresh connection. Any other failure is the caller's to handle.
        for attempt in (0, 1):
            reused = self._conn.sock is not None
            try:
                status, data = self._exchange(method, path, payload, headers, deadline)
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                self._conn.close()
                if attempt == 0 and reused:
                    continue
                raise TierSyncIOError(f"cannot reach the daemon at {self._endpoint}: {e}") from e
            except (socket.timeout, TimeoutError) as e:
                self._conn.close()
                raise TierSyncTimeoutError(f"{path} passed its {self.timeout_s:g} s deadline") from e
            except OSError as e:
                self._conn.close()
                raise TierSyncIOError(f"cannot reach the daemon at {self._endpoint}: {e}") from e
            except http.client.HTTPException as e:
                self._conn.close()
                raise ProtocolError(f"daemon answered {path} with a malformed HTTP reply: {e!r}") from e
        try:
            answer = json.loads(data)
        except ValueError:
            raise ProtocolError(f"daemon answered {path} with status {status} and no JSON") from None
        if status >= 400:
            raise _refusal(answer, status, path)
        if not isinstance(answer, dict):
            raise ProtocolError(f"daemon answered {path} with {type(answer).__name__}, expected an object")
        return answer

    def _exchange(self, method: str, path: str, payload: Optional[bytes], headers: dict, deadline: float) -> "tuple[int, bytes]":
        conn = self._conn
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout()
        # Every blocking socket step gets what is left of the request's deadline, not a fresh timeout each.
        conn.timeout = remaining
        if conn.sock is not None:
            conn.sock.settimeout(remaining)
        conn.request(method, path, body=payload, headers=headers)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout()
        conn.sock.settimeout(remaining)
        res = conn.getresponse()
        length = res.getheader("content-length")
        if length is not None and int(length) > MAX_REPLY_BYTES:
            res.close()
            conn.close()
            raise ProtocolError(f"reply to {path} of {length} bytes, over {MAX_REPLY_BYTES}")
        data = res.read(MAX_REPLY_BYTES + 1)
        if len(data) > MAX_REPLY_BYTES:
            conn.close()
            raise ProtocolError(f"reply to {path} over {MAX_REPLY_BYTES} bytes")
        if res.will_close:
            conn.close()
        return res.status, data

    def close(self) -> None:
        if self._framed is not None:
            self._framed.close()
        self._conn.close()


def _refusal(answer: Any, status: int, path: str) -> TierSyncError:
    err = answer.get("error") if isinstance(answer, dict) else None
    if isinstance(err, dict) and isinstance(err.get("code"), str) and isinstance(err.get("message"), str):
        field = err.get("field") if isinstance(err.get("field"), str) else None
        return error_for(err["code"], f"daemon refused {path}: {err['message']}", status=status, field=field)
    code = "ERR_AUTH" if status == 401 else "ERR_PROTOCOL"
    return error_for(code, f"daemon refused {path} with status {status} and no error body", status=status)
