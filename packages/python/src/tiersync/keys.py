"""Page keys for token sequences, computed exactly as @tiersync/core computes them (packages/core/src/keys/), so a
Node agent server and a Python engine name the same prefix with the same keys.

Three pieces, each the same hash over the same bytes as the TypeScript source:

- layout fingerprint (layout.ts): SHA-256 of the canonical JSON of the layout (fixed field order, defaults
  explicit, group names left out), first 32 hex characters;
- namespace id (namespace.ts): SHA-256 of ``len|"tiersync.namespace.1" len|model len|layout fingerprint len|salt``,
  each part prefixed by its byte length as u32 LE;
- page key (page-keys.ts, "TSK1"): for the page at position p,
  ``d = SHA-256("TSK1" || namespace id (32 B) || parent key (32 B, zeros for p = 0) || u32le(tokensPerPage) ||
  tokens as u32le)``; the key is ``hex(d)`` when ``p % 64 == 0``, else the parent's first 8 bytes followed by
  ``d[8:32]`` (runs of 64 pages share a prefix so the daemon's index stays local).

A partial last page gets no key: it is never cached.
"""

from __future__ import annotations

import array
import hashlib
import json
import re
import struct
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Union

from .errors import InvalidArgumentError

__all__ = ["DTYPE_BYTES", "ANCHOR_SPAN", "KvLayout", "Namespace", "kv_layout", "create_namespace", "page_keys", "full_pages"]

#: Element types of KV caches and their size in bytes (layout.ts DTYPE_BYTES).
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1, "int8": 1}
#: Consecutive pages of one chain that share a key prefix.
ANCHOR_SPAN = 64
_TAG = b"TSK1"
_NS_TAG = "tiersync.namespace.1"
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX32 = re.compile(r"[0-9a-f]{32}")
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclass(frozen=True)
class KvLayout:
    """A validated, normalized KV layout: what :func:`kv_layout` returns (layout.ts KvLayout)."""

    tokens_per_page: int
    dtype: str
    layers: int
    #: Normalized groups: ``{name, layers: [..], attention: {..}, dtype, slidingWindow}``.
    groups: tuple
    bytes_per_token: int
    bytes_per_page: int
    #: 32 lower-case hex characters, identical to @tiersync/core's ``layout.fingerprint``.
    fingerprint: str


def _positive(v: Any, field: str, top: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1 or v > top:
        raise InvalidArgumentError(f"layout: {field} must be an integer in [1, {top}], got {v!r}", field=field)
    return v


def kv_layout(
    tokens_per_page: int,
    dtype: str,
    groups: Optional[Sequence[Dict[str, Any]]] = None,
    *,
    layers: Optional[int] = None,
    kv_heads: Optional[int] = None,
    head_dim: Optional[int] = None,
    sliding_window: Optional[int] = None,
) -> KvLayout:
    """A KV layout, as @tiersync/core's ``kvLayout`` builds it.

    Either the one-group shorthand (``layers``, ``kv_heads``, ``head_dim``: MHA/GQA layers) or ``groups`` in the
    TypeScript form: ``[{"name"?, "layers": int | [indices], "attention": {"type": "mha", "kvHeads", "headDim",
    "valueHeadDim"?} | {"type": "mla", "latentDim", "ropeDim"?}, "dtype"?, "slidingWindow"?}]``.
    """
    _positive(tokens_per_page, "tokensPerPage", 1 << 20)
    if dtype not in DTYPE_BYTES:
        raise InvalidArgumentError(f"layout: dtype must be one of {', '.join(DTYPE_BYTES)}, got {dtype!r}", field="dtype")
    if groups is None:
        if layers is None or kv_heads is None or head_dim is None:
            raise InvalidArgumentError("layout: give groups, or layers, kv_heads and head_dim", field="groups")
        g: Dict[str, Any] = {"name": "all", "layers": layers, "attention": {"type": "mha", "kvHeads": kv_heads, "headDim": head_dim}}
        if sliding_window is not None:
            g["slidingWindow"] = sliding_window
        groups = [g]
    if not isinstance(groups, (list, tuple)) or not 1 <= len(groups) <= 64:
        raise InvalidArgumentError("layout: groups must list 1..64 layer groups", field="groups")
    nxt = 0
    names = set()
    owner: Dict[int, str] = {}
    out = []
    for i, g in enumerate(groups):
        name = g.get("name", f"group{i}")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise InvalidArgumentError(f"layout: groups.{i}.name must be 1..64 characters of A-Z a-z 0-9 _ . -", field=f"groups.{i}.name")
        if name in names:
            raise InvalidArgumentError(f"layout: groups.{i}.name '{name}' is used twice", field=f"groups.{i}.name")
        names.add(name)
        ls = g.get("layers")
        if isinstance(ls, int) and not isinstance(ls, bool):
            _positive(ls, f"groups.{i}.layers", 100_000)
            idx = list(range(nxt, nxt + ls))
            nxt += ls
        elif isinstance(ls, (list, tuple)) and ls and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in ls):
            idx = sorted(ls)
        else:
            raise InvalidArgumentError(f"layout: groups.{i}.layers must be a count or a non-empty list of layer indices", field=f"groups.{i}.layers")
        for layer in idx:
            if layer in owner:
                raise InvalidArgumentError(f"layout: groups.{i}.layers: layer {layer} is already in group '{owner[layer]}'", field=f"groups.{i}.layers")
            owner[layer] = name
        dt = g.get("dtype", dtype)
        if dt not in DTYPE_BYTES:
            raise InvalidArgumentError(f"layout: groups.{i}.dtype must be one of {', '.join(DTYPE_BYTES)}", field=f"groups.{i}.dtype")
        a = g.get("attention") or {}
        if a.get("type") == "mha":
            kvh = _positive(a.get("kvHeads"), f"groups.{i}.attention.kvHeads", 4096)
            hd = _positive(a.get("headDim"), f"groups.{i}.attention.headDim", 65536)
            vhd = _positive(a.get("valueHeadDim", hd), f"groups.{i}.attention.valueHeadDim", 65536)
            attention = {"type": "mha", "kvHeads": kvh, "headDim": hd, "valueHeadDim": vhd}
            elements = kvh * (hd + vhd)
        elif a.get("type") == "mla":
            lat = _positive(a.get("latentDim"), f"groups.{i}.attention.latentDim", 65536)
            rope = a.get("ropeDim", 0)
            if isinstance(rope, bool) or not isinstance(rope, int) or not 0 <= rope <= 65536:
                raise InvalidArgumentError(f"layout: groups.{i}.attention.ropeDim must be an integer in [0, 65536]", field=f"groups.{i}.attention.ropeDim")
            attention = {"type": "mla", "latentDim": lat, "ropeDim": rope}
            elements = lat + rope
        else:
            raise InvalidArgumentError(f"layout: groups.{i}.attention.type must be 'mha' or 'mla'", field=f"groups.{i}.attention.type")
        sw = g.get("slidingWindow")
        if sw is not None:
            _positive(sw, f"groups.{i}.slidingWindow", 1 << 30)
        per_layer = elements * DTYPE_BYTES[dt]
        out.append({"name": name, "layers": idx, "attention": attention, "dtype": dt, "slidingWindow": sw, "bytesPerToken": per_layer * len(idx)})
    total = len(owner)
    for layer in range(total):
        if layer not in owner:
            raise InvalidArgumentError(f"layout: groups: layer {layer} belongs to no group (layers must be 0..{total - 1} without gaps)", field="groups")
    canonical = {
        "v": "tiersync.kv-layout.1",
        "tokensPerPage": tokens_per_page,
        "groups": [{"layers": g["layers"], "dtype": g["dtype"], "attention": g["attention"], "slidingWindow": g["slidingWindow"]} for g in out],
    }
    # JSON.stringify's form: no spaces, keys in insertion order (the TypeScript side builds the same order).
    text = json.dumps(canonical, separators=(",", ":"), ensure_ascii=False)
    fingerprint = hashlib.sha256(text.encode()).hexdigest()[:32]
    bpt = sum(g["bytesPerToken"] for g in out)
    return KvLayout(tokens_per_page, dtype, total, tuple(out), bpt, bpt * tokens_per_page, fingerprint)


@dataclass(frozen=True)
class Namespace:
    """The model, KV layout and tenant salt every page key is bound to (namespace.ts Namespace)."""

    #: 64 lower-case hex characters, identical to @tiersync/core's ``namespace.id``.
    id: str
    model: str
    layout_fingerprint: str
    tokens_per_page: int
    tenant: str = ""


def create_namespace(model: str, layout: Union[KvLayout, str], *, tokens_per_page: Optional[int] = None, tenant: str = "", tenant_salt: Union[str, bytes, None] = None) -> Namespace:
    """A namespace, as @tiersync/core's ``createNamespace`` builds it.

    ``layout`` is a :class:`KvLayout` or its 32-hex-character fingerprint (then give ``tokens_per_page``).
    ``tenant_salt`` keeps a tenant's keys apart from everyone else's; ``tenant`` is a label only.
    """
    if not isinstance(model, str) or not 1 <= len(model) <= 512:
        raise InvalidArgumentError(f"model must be a string of 1..512 characters, got {model!r}", field="model")
    if not isinstance(tenant, str) or len(tenant) > 128:
        raise InvalidArgumentError("tenant must be a string of 0..128 characters", field="tenant")
    if isinstance(layout, KvLayout):
        fp, tpp = layout.fingerprint, layout.tokens_per_page
    elif isinstance(layout, str) and _HEX32.fullmatch(layout):
        if tokens_per_page is None:
            raise InvalidArgumentError("tokens_per_page must be given with a layout fingerprint", field="tokens_per_page")
        fp, tpp = layout, _positive(tokens_per_page, "tokensPerPage", 1 << 20)
    else:
        raise InvalidArgumentError(f"layout must be a KvLayout or a 32-hex-character layout fingerprint, got {layout!r}", field="layout")
    if tenant_salt is None:
        salt = b""
    elif isinstance(tenant_salt, str):
        salt = tenant_salt.encode()
    elif isinstance(tenant_salt, (bytes, bytearray, memoryview)):
        salt = bytes(tenant_salt)
    else:
        raise InvalidArgumentError(f"tenant_salt must be a str or bytes, got {type(tenant_salt).__name__}", field="tenant_salt")
    h = hashlib.sha256()
    for part in (_NS_TAG.encode(), model.encode(), fp.encode(), salt):
        h.update(struct.pack("<I", len(part)))
        h.update(part)
    return Namespace(h.hexdigest(), model, fp, tpp, tenant)


def _token_bytes(tokens: Any) -> memoryview:
    """Token ids as u32 little-endian bytes (no per-token Python work for numpy arrays and torch tensors)."""
    np = sys.modules.get("numpy")
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(tokens, torch.Tensor):
        tokens = tokens.detach().cpu().numpy()
    if np is not None and isinstance(tokens, np.ndarray):
        if tokens.ndim != 1 or tokens.dtype.kind not in "iu":
            raise InvalidArgumentError(f"tokens must be a 1-D integer array, got {tokens.ndim}-D {tokens.dtype}", field="tokens")
        if tokens.size and (int(tokens.min()) < 0 or int(tokens.max()) > 0xFFFFFFFF):
            raise InvalidArgumentError("tokens must be token ids in [0, 2^32)", field="tokens")
        return memoryview(np.ascontiguousarray(tokens, dtype="<u4")).cast("B")
    if isinstance(tokens, (str, bytes, bytearray, memoryview)):
        # array.array would read bytes as raw machine words, not as token ids.
        raise InvalidArgumentError(f"tokens must be token ids (a list of ints or an integer array), got {type(tokens).__name__}", field="tokens")
    if isinstance(tokens, (list, tuple)) and bool in set(map(type, tokens)):
        raise InvalidArgumentError("tokens must be token ids, got a bool among them", field="tokens")
    try:
        arr = array.array("I", tokens)
    except (OverflowError, TypeError) as e:
        raise InvalidArgumentError(f"tokens must be integer token ids in [0, 2^32): {e}", field="tokens") from None
    if arr.itemsize != 4:  # pragma: no cover (every Linux ABI has a 4-byte unsigned int)
        arr = array.array("L", tokens)
    if sys.byteorder != "little":  # pragma: no cover
        arr.byteswap()
    return memoryview(arr).cast("B")


def page_keys(ns: Namespace, tokens: Any, *, parent: Optional[str] = None, position: Optional[int] = None) -> List[str]:
    """Keys of the full pages of ``tokens`` in namespace ``ns`` (page-keys.ts ``pageKeys``).

    ``tokens``: a list of ints, array.array, numpy integer array or torch integer tensor. ``parent`` and
    ``position`` continue a chain: the key of the page just before ``tokens`` and the 0-based page position of the
    first page of ``tokens``.
    """
    if not isinstance(ns, Namespace):
        raise InvalidArgumentError(f"ns must be a Namespace from create_namespace(), got {type(ns).__name__}", field="ns")
    data = _token_bytes(tokens)
    if data.nbytes == 0:
        raise InvalidArgumentError("tokens must not be empty", field="tokens")
    if parent is not None and (not isinstance(parent, str) or not _HEX64.fullmatch(parent)):
        raise InvalidArgumentError(f"parent must be a 64-character page key, got {parent!r}", field="parent")
    if position is not None and (isinstance(position, bool) or not isinstance(position, int) or position < 0):
        raise InvalidArgumentError(f"position must be an integer >= 0, got {position!r}", field="position")
    if parent is not None and (position is None or position < 1):
        raise InvalidArgumentError("position must be given (>= 1) with parent: the page position of the first page of tokens", field="position")
    if parent is None and position not in (None, 0):
        raise InvalidArgumentError("parent must be given when position is not 0", field="parent")
    t = ns.tokens_per_page
    page = 4 * t
    pages = data.nbytes // page
    head = _TAG + bytes.fromhex(ns.id)
    tpp = struct.pack("<I", t)
    prev = bytes.fromhex(parent) if parent is not None else bytes(32)
    anchor = parent[:16] if parent is not None else ""
    pos = position or 0
    keys: List[str] = []
    for p in range(pages):
        h = hashlib.sha256(head)
        h.update(prev)
        h.update(tpp)
        h.update(data[p * page : (p + 1) * page])
        hx = h.hexdigest()
        if pos % ANCHOR_SPAN == 0:
            anchor = hx[:16]
            key = hx
        else:
            key = anchor + hx[16:]
        keys.append(key)
        prev = bytes.fromhex(key)
        pos += 1
    return keys


def full_pages(ns: Namespace, token_count: int) -> int:
    """Number of full (cacheable) pages in ``token_count`` tokens."""
    return token_count // ns.tokens_per_page
