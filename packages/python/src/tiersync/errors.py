"""The errors of the tiersync client: one base class carrying the daemon's error code.

The daemon answers every refused request with ``{"error": {"code", "message", "field"?}}`` (packages/core/src/
protocol/errors.ts). The client raises that refusal as the subclass of :class:`TierSyncError` named after its code,
so callers can catch ``TierFullError`` or test ``e.code == "ERR_TIER_FULL"``, whichever reads better. Failures found
on the client side (a bad argument, a deadline passed, the daemon unreachable) use the same classes and codes.

A missing page is a normal answer (``load`` returns the missing keys), never an error.
"""

from __future__ import annotations

import builtins
from typing import Optional

__all__ = [
    "ERROR_CODES",
    "TierSyncError",
    "InvalidArgumentError",
    "OutOfRangeError",
    "ClosedError",
    "TierSyncTimeoutError",
    "TierSyncIOError",
    "UnavailableError",
    "GeometryMismatchError",
    "ChecksumError",
    "TierFullError",
    "NotFoundError",
    "ProtocolError",
    "AuthError",
    "error_for",
]

#: Every code the daemon may answer with (the ErrorCode union of @tiersync/native).
ERROR_CODES = (
    "ERR_INVALID_ARGUMENT",
    "ERR_OUT_OF_RANGE",
    "ERR_OVERLAP",
    "ERR_CLOSED",
    "ERR_READ_ONLY",
    "ERR_MISALIGNED",
    "ERR_ABORTED",
    "ERR_TIMEOUT",
    "ERR_IO",
    "ERR_UNAVAILABLE",
    "ERR_UNSUPPORTED",
    "ERR_GEOMETRY_MISMATCH",
    "ERR_NO_MEMORY",
    "ERR_CHECKSUM",
    "ERR_TIER_FULL",
    "ERR_NOT_FOUND",
    "ERR_CONFIG",
    "ERR_PROTOCOL",
    "ERR_AUTH",
)


class TierSyncError(Exception):
    """A tiersync failure.

    Attributes:
        code: one of :data:`ERROR_CODES`.
        status: the HTTP status the daemon answered with, or None when the client found the problem itself.
        field: the request field at fault (``keys[3]``), when the daemon named one.
    """

    code: str = "ERR_IO"

    def __init__(self, message: str, code: Optional[str] = None, *, status: Optional[int] = None, field: Optional[str] = None):
        super().__init__(message)
        if code is not None:
            self.code = code
        self.status = status
        self.field = field

    def __str__(self) -> str:
        return f"{self.code}: {self.args[0] if self.args else ''}"


class InvalidArgumentError(TierSyncError, ValueError):
    """A malformed argument or request (``field`` names it when the daemon refused it)."""

    code = "ERR_INVALID_ARGUMENT"


class OutOfRangeError(TierSyncError, ValueError):
    """A size or count beyond a limit (a page larger than the daemon's page size, too many keys in one request)."""

    code = "ERR_OUT_OF_RANGE"


class ClosedError(TierSyncError):
    """The client, or the daemon's host tier, is closed."""

    code = "ERR_CLOSED"


class TierSyncTimeoutError(TierSyncError, builtins.TimeoutError):
    """A deadline passed (a control request, or a lease the daemon undid)."""

    code = "ERR_TIMEOUT"


class TierSyncIOError(TierSyncError, OSError):
    """The daemon could not be reached, or a file could not be opened or mapped."""

    code = "ERR_IO"


class UnavailableError(TierSyncError):
    """Something is not offered here (no shared-memory tier for this tenant) or a lease limit is reached (retry later)."""

    code = "ERR_UNAVAILABLE"


class GeometryMismatchError(TierSyncError):
    """The daemon's shared-memory file does not have the geometry the daemon announced (it was replaced)."""

    code = "ERR_GEOMETRY_MISMATCH"


class ChecksumError(TierSyncError):
    """Page bytes did not match their CRC32C.

    Attributes:
        keys: the pages refused (a ``load`` names them; none of their bytes were handed to the caller).
    """

    code = "ERR_CHECKSUM"

    def __init__(self, message: str, code: Optional[str] = None, *, status: Optional[int] = None, field: Optional[str] = None, keys: Optional[list] = None):
        super().__init__(message, code, status=status, field=field)
        self.keys = list(keys or [])


class TierFullError(TierSyncError):
    """The host tier has no room now (pinned pages and open client leases hold its slots)."""

    code = "ERR_TIER_FULL"


class NotFoundError(TierSyncError):
    """A lease that is closed or expired, or an unknown route."""

    code = "ERR_NOT_FOUND"


class ProtocolError(TierSyncError):
    """The daemon answered something this client does not understand."""

    code = "ERR_PROTOCOL"


class AuthError(TierSyncError, PermissionError):
    """Missing or wrong bearer token (the token names the tenant)."""

    code = "ERR_AUTH"


_BY_CODE = {
    cls.code: cls
    for cls in (
        InvalidArgumentError,
        OutOfRangeError,
        ClosedError,
        TierSyncTimeoutError,
        TierSyncIOError,
        UnavailableError,
        GeometryMismatchError,
        ChecksumError,
        TierFullError,
        NotFoundError,
        ProtocolError,
        AuthError,
    )
}


def error_for(code: str, message: str, *, status: Optional[int] = None, field: Optional[str] = None) -> TierSyncError:
    """The error of ``code``: its own subclass when it has one, else a :class:`TierSyncError` carrying the code."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return TierSyncError(message, code if code in ERROR_CODES else "ERR_PROTOCOL", status=status, field=field)
    return cls(message, status=status, field=field)
