"""tiersync for Python: the local tiersync daemon's KV page store, reached from CPython.

    import tiersync
    client = tiersync.Client.connect("http://127.0.0.1:7071")
    client.store(keys, arrays)          # numpy arrays / torch tensors, copied once into the daemon's shared memory
    client.lookup(keys).prefix          # how many leading pages the daemon holds (any tier)
    missing = client.load(keys, out)    # copied once out of shared memory into your arrays

Page keys for token sequences are the same as @tiersync/core's (``tiersync.page_keys``), and
``tiersync.kv.PagedKVAdapter`` saves and restores vLLM-layout paged KV caches.
"""

from .client import Client, DeleteResult, Hello, LookupResult, Pin, StoreResult
from .errors import (
    AuthError,
    ChecksumError,
    ClosedError,
    GeometryMismatchError,
    InvalidArgumentError,
    NotFoundError,
    OutOfRangeError,
    ProtocolError,
    TierFullError,
    TierSyncError,
    TierSyncIOError,
    TierSyncTimeoutError,
    UnavailableError,
)
from .keys import KvLayout, Namespace, create_namespace, full_pages, kv_layout, page_keys

__version__ = "0.1.0"

__all__ = [
    "Client",
    "Hello",
    "StoreResult",
    "LookupResult",
    "DeleteResult",
    "Pin",
    "KvLayout",
    "Namespace",
    "kv_layout",
    "create_namespace",
    "page_keys",
    "full_pages",
    "TierSyncError",
    "AuthError",
    "ChecksumError",
    "ClosedError",
    "GeometryMismatchError",
    "InvalidArgumentError",
    "NotFoundError",
    "OutOfRangeError",
    "ProtocolError",
    "TierFullError",
    "TierSyncIOError",
    "TierSyncTimeoutError",
    "UnavailableError",
]
