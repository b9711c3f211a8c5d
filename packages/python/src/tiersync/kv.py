"""A paged-KV adapter: saves and restores blocks of an engine's paged KV cache through the tiersync daemon.

The cache is vLLM's paged layout: one tensor per layer, ``[2, num_blocks, block_size, num_kv_heads, head_size]``
(K at index 0, V at index 1). One block of ``block_size`` tokens is one tiersync page, keyed by the chained page key
of the tokens it holds (tiersync.keys, identical to @tiersync/core), so a shared prefix has the same keys in every
sequence and every process, and is stored once: the daemon answers "already held" for those pages and nothing is
copied.

A page's bytes are the block's K and V of every layer, layer by layer: ``[layers][K, V][block_size][heads][head_size]``.
CPU caches are copied straight between their blocks and the daemon's shared-memory slots (2 x layers native memmoves
per page, no staging). CUDA caches are gathered on the device, staged through pinned host memory and scattered back
after a load; that path follows torch's documented API but is not tested here (no GPU on the build machine).

These are the operations of an engine's KV connector (vLLM's save/load hooks, SGLang's HiCache storage backend);
packages/python/README.md shows how one would register the adapter with them. No engine is tested here.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence

from .client import Client, _Page
from .errors import ChecksumError, InvalidArgumentError, TierSyncError
from .keys import KvLayout, Namespace, create_namespace, kv_layout, page_keys

__all__ = ["PagedKVAdapter", "SaveResult", "TORCH_DTYPES"]

#: torch dtype name -> tiersync layout dtype.
TORCH_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "int8": "int8", "float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2"}


@dataclass(frozen=True)
class SaveResult:
    #: Full blocks offered (a partial last block is never saved).
    pages: int
    #: Pages copied into the daemon.
    stored: int
    #: Pages the daemon already held (a shared prefix): not copied again.
    existing: int


class PagedKVAdapter:
    """Saves and loads blocks of per-layer paged KV caches (``[2, num_blocks, block_size, num_kv_heads, head_size]``).

    Args:
        client: a connected :class:`tiersync.Client`; its daemon's page size must be one block of all layers.
        kv_caches: one tensor per layer, same shape, dtype and device.
        namespace: the key namespace; default ``create_namespace(model, PagedKVAdapter.layout_of(kv_caches))``.
        model: the model fingerprint (name plus revision) when ``namespace`` is not given.
    """

    def __init__(self, client: Client, kv_caches: Sequence[Any], namespace: Optional[Namespace] = None, *, model: Optional[str] = None):
        torch = sys.modules.get("torch")
        if torch is None:
            raise InvalidArgumentError("PagedKVAdapter works on torch tensors; import torch first", field="kv_caches")
        if not isinstance(kv_caches, (list, tuple)) or not kv_caches:
            raise InvalidArgumentError("kv_caches must be a non-empty list of per-layer tensors", field="kv_caches")
        first = kv_caches[0]
        for i, c in enumerate(kv_caches):
            if not isinstance(c, torch.Tensor) or c.dim() != 5 or c.shape[0] != 2:
                raise InvalidArgumentError(f"kv_caches[{i}] must be a tensor of shape [2, num_blocks, block_size, num_kv_heads, head_size]", field=f"kv_caches[{i}]")
            if c.shape != first.shape or c.dtype != first.dtype or c.device != first.device:
                raise InvalidArgumentError(f"kv_caches[{i}] differs from kv_caches[0] in shape, dtype or device", field=f"kv_caches[{i}]")
            if not c.is_contiguous():
                raise InvalidArgumentError(f"kv_caches[{i}] must be contiguous", field=f"kv_caches[{i}]")
        self._torch = torch
        self.client = client
        self.kv_caches = list(kv_caches)
        _, self.num_blocks, self.block_size, self.num_kv_heads, self.head_size = (int(x) for x in first.shape)
        self.layers = len(kv_caches)
        self.block_bytes = self.block_size * self.num_kv_heads * self.head_size * first.element_size()
        self.page_bytes = self.layers * 2 * self.block_bytes
        self.layout = self.layout_of(kv_caches)
        if namespace is None:
            if model is None:
                raise InvalidArgumentError("give namespace, or model (its fingerprint) to build one", field="model")
            namespace = create_namespace(model, self.layout)
        if namespace.tokens_per_page != self.block_size:
            raise InvalidArgumentError(f"namespace has {namespace.tokens_per_page} tokens per page, the cache's blocks hold {self.block_size}", field="namespace")
        if client.page_bytes != self.page_bytes:
            raise TierSyncError(
                f"the daemon's page is {client.page_bytes} bytes, one block of {self.layers} layers is {self.page_bytes}: serve the layout"
                f" {{tokensPerPage: {self.block_size}, dtype: '{self.layout.dtype}', groups: [{{layers: {self.layers}, attention: {{type: 'mha',"
                f" kvHeads: {self.num_kv_heads}, headDim: {self.head_size}}}}}]}}",
                "ERR_CONFIG",
            )
        self.namespace = namespace
        self.on_cpu = first.device.type == "cpu"

    @staticmethod
    def layout_of(kv_caches: Sequence[Any]) -> KvLayout:
        """The tiersync KV layout of per-layer caches ``[2, num_blocks, block_size, num_kv_heads, head_size]``."""
        c = kv_caches[0]
        name = str(c.dtype).replace("torch.", "")
        if name not in TORCH_DTYPES:
            raise InvalidArgumentError(f"kv cache dtype {c.dtype} has no tiersync layout dtype (known: {', '.join(TORCH_DTYPES)})", field="kv_caches")
        return kv_layout(int(c.shape[2]), TORCH_DTYPES[name], layers=len(kv_caches), kv_heads=int(c.shape[3]), head_dim=int(c.shape[4]))

    def keys(self, token_ids: Any) -> List[str]:
        """Page keys of the full blocks of ``token_ids``."""
        return page_keys(self.namespace, token_ids)

    def _blocks(self, block_ids: Any, n: int, distinct: bool) -> List[int]:
        raw = (block_ids.tolist() if hasattr(block_ids, "tolist") else list(block_ids))[:n]
        for i, b in enumerate(raw):
            if isinstance(b, bool) or not isinstance(b, int):
                raise InvalidArgumentError(f"block_ids[{i}] must be an int, got {b!r}", field=f"block_ids[{i}]")
        ids = [int(b) for b in raw]
        for i, b in enumerate(ids):
            if not 0 <= b < self.num_blocks:
                raise InvalidArgumentError(f"block_ids[{i}] = {b} is outside [0, {self.num_blocks})", field=f"block_ids[{i}]")
        if distinct and len(set(ids)) != len(ids):
            raise InvalidArgumentError("block_ids must be distinct for a load", field="block_ids")
        return ids

    def _segments(self, block: int) -> List["tuple[int, int]"]:
        """The page of ``block``: its K and V in each layer, in page order."""
        bb = self.block_bytes
        out = []
        for c in self.kv_caches:
            base = c.data_ptr()
            out.append((base + block * bb, bb))
            out.append((base + (self.num_blocks + block) * bb, bb))
        return out

    def save(self, block_ids: Sequence[int], token_ids: Any) -> SaveResult:
        """Saves the full blocks of a sequence: block ``block_ids[p]`` holds tokens ``[p*B, (p+1)*B)`` of ``token_ids``.

        Pages the daemon already holds (the prefix shared with a sequence saved before) are not copied.
        """
        keys = self.keys(token_ids)
        ids = self._blocks(block_ids, len(keys), distinct=False)
        keys = keys[: len(ids)]
        if not keys:
            return SaveResult(0, 0, 0)
        if self.on_cpu:
            r = self.client._store_pages(keys, [_Page(f"block {b}", self._segments(b)) for b in ids])
        else:
            r = self.client.store(keys, self._gather(ids))
        return SaveResult(len(keys), r.stored, r.existing)

    def load(self, block_ids: Sequence[int], token_ids: Any) -> int:
        """Restores the longest saved prefix of ``token_ids`` into blocks ``block_ids`` (page p into ``block_ids[p]``).

        Returns the number of tokens restored (a multiple of the block size): the engine computes the rest. Blocks after
        the first page the daemon does not hold are left as they were. A page that fails the daemon's CRC32C check
        ends the prefix like a missing one: it is not copied (the daemon dropped and reported it), and the engine
        recomputes from there.
        """
        keys = self.keys(token_ids)
        ids = self._blocks(block_ids, len(keys), distinct=True)
        keys = keys[: len(ids)]
        if not keys:
            return 0
        if self.on_cpu:
            try:
                missing = self.client._load_pages(keys, [_Page(f"block {b}", self._segments(b)) for b in ids], exact=True, prefix_only=True)
            except ChecksumError as e:
                # Nothing after the first page not delivered was copied (prefix_only): the prefix ends at the damage.
                bad = set(e.keys)
                return next(i for i, k in enumerate(keys) if k in bad) * self.block_size
            return (missing[0] if missing else len(keys)) * self.block_size
        return self._load_device(ids, keys)

    # -- CUDA caches: gathered on the device, staged through pinned memory (untested here: no GPU) -----------------

    def _gather(self, ids: List[int]) -> Any:
        torch = self._torch
        idx = torch.tensor(ids, device=self.kv_caches[0].device)
        # [L, 2, n, B, H, D] -> [n, L, 2, B, H, D]: page-major, the page layout above.
        return torch.stack([c.index_select(1, idx) for c in self.kv_caches]).permute(2, 0, 1, 3, 4, 5).contiguous()

    def _load_device(self, ids: List[int], keys: List[str]) -> int:
        torch = self._torch
        first = self.kv_caches[0]
        buf = torch.empty((len(ids), self.layers, 2, self.block_size, self.num_kv_heads, self.head_size), dtype=first.dtype, device=first.device)
        missing = set(self.client.load(keys, buf))
        prefix = next((i for i, k in enumerate(keys) if k in missing), len(keys))
        if prefix:
            idx = torch.tensor(ids[:prefix], device=first.device)
            for layer, c in enumerate(self.kv_caches):
                c.index_copy_(1, idx, buf[:prefix, layer].transpose(0, 1))
        return prefix * self.block_size
