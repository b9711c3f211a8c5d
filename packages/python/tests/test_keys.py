"""Page keys, namespaces and layout fingerprints: the same values as @tiersync/core.

The pinned vectors are those of packages/core/src/keys/page-keys.test.ts; test/python-client.test.ts also compares
Python's keys with Node's computed in the same run over many layouts, salts and chains.
"""

import numpy as np
import pytest
import torch

import tiersync
from tiersync import InvalidArgumentError, create_namespace, kv_layout, page_keys
from tiersync.keys import ANCHOR_SPAN

LLAMA3_8B = kv_layout(16, "bf16", [{"name": "full", "layers": 32, "attention": {"type": "mha", "kvHeads": 8, "headDim": 128}}])
NS = create_namespace("meta-llama/Meta-Llama-3-8B@main", LLAMA3_8B)


def test_namespace_is_the_pinned_value_of_core():
    assert NS.id == "35ae7e67bbb2bad3f1b71f95eb103366907d185045591ca41920f9391a3a16df"
    assert LLAMA3_8B.bytes_per_token == 128 * 1024
    ids = {
        NS.id,
        create_namespace("meta-llama/Meta-Llama-3-8B@other", LLAMA3_8B).id,
        create_namespace("meta-llama/Meta-Llama-3-8B@main", kv_layout(32, "bf16", [{"layers": 32, "attention": {"type": "mha", "kvHeads": 8, "headDim": 128}}])).id,
        create_namespace("meta-llama/Meta-Llama-3-8B@main", LLAMA3_8B, tenant_salt="tenant-a").id,
        create_namespace("meta-llama/Meta-Llama-3-8B@main", LLAMA3_8B, tenant_salt=b"tenant-b").id,
    }
    assert len(ids) == 5
    # The label alone does not separate tenants; group names are labels, not layout.
    assert create_namespace("meta-llama/Meta-Llama-3-8B@main", LLAMA3_8B, tenant="x").id == NS.id
    renamed = kv_layout(16, "bf16", [{"name": "other", "layers": 32, "attention": {"type": "mha", "kvHeads": 8, "headDim": 128}}])
    assert renamed.fingerprint == LLAMA3_8B.fingerprint
    # A fingerprint alone builds the same namespace.
    assert create_namespace("meta-llama/Meta-Llama-3-8B@main", LLAMA3_8B.fingerprint, tokens_per_page=16).id == NS.id


def test_page_keys_match_core_vectors_for_every_token_container():
    want = [
        "90061cfd8a9e390f2ab910d3bcc43fea7b1b7f6f8622f332ee130d845718c4b5",
        "90061cfd8a9e390fc68c5f71ce8683c7f30e50b3c8d1d4807c46fc3b94264535",
        "90061cfd8a9e390fc7853fb87aeb91beff26afbc5139bb781fbad8e610035232",
        "90061cfd8a9e390f2638171a769f0e7b41b2d23f4ced39eb2548e30222ac7f08",
    ]
    assert page_keys(NS, list(range(64))) == want
    assert page_keys(NS, np.arange(64, dtype=np.int64)) == want
    assert page_keys(NS, np.arange(64, dtype=np.uint32)) == want
    assert page_keys(NS, torch.arange(64, dtype=torch.int32)) == want
    # A partial last page has no key; fewer tokens than a page give none.
    assert page_keys(NS, list(range(64 + 7))) == want
    assert page_keys(NS, list(range(15))) == []


def test_chain_continues_from_a_parent_as_if_hashed_in_one_go():
    tokens = np.random.default_rng(1).integers(0, 2**32, size=16 * 200, dtype=np.uint64).astype(np.uint32)
    everything = page_keys(NS, tokens)
    assert len(everything) == 200
    for split in (1, 63, 64, 65, 130):
        tail = page_keys(NS, tokens[split * 16 :], parent=everything[split - 1], position=split)
        assert everything[:split] + tail == everything
    # Runs of ANCHOR_SPAN pages share their first 8 bytes.
    assert len({k[:16] for k in everything[:ANCHOR_SPAN]}) == 1
    assert everything[ANCHOR_SPAN][:16] != everything[0][:16]


def test_bad_inputs_are_refused_by_name():
    with pytest.raises(InvalidArgumentError, match="tokens must not be empty"):
        page_keys(NS, [])
    with pytest.raises(InvalidArgumentError, match=r"token ids in \[0, 2\^32\)"):
        page_keys(NS, [-1] * 16)
    # Bytes are not token ids (array.array would read them as raw 32-bit words), nor are bools.
    with pytest.raises(InvalidArgumentError, match="tokens must be token ids .*got bytes"):
        page_keys(NS, bytes(64))
    with pytest.raises(InvalidArgumentError, match="a bool among them"):
        page_keys(NS, [True] + [1] * 15)
    with pytest.raises(InvalidArgumentError, match="position must be given"):
        page_keys(NS, list(range(16)), parent="ab" * 32)
    with pytest.raises(InvalidArgumentError, match="parent must be given"):
        page_keys(NS, list(range(16)), position=3)
    with pytest.raises(InvalidArgumentError, match="model must be a string"):
        create_namespace("", LLAMA3_8B)
    with pytest.raises(InvalidArgumentError) as e:
        kv_layout(16, "bf16", [{"layers": 2, "attention": {"type": "mha", "kvHeads": 0, "headDim": 64}}])
    assert e.value.code == "ERR_INVALID_ARGUMENT" and e.value.field == "groups.0.attention.kvHeads"
    with pytest.raises(InvalidArgumentError, match="layer 1 belongs to no group"):
        kv_layout(16, "bf16", [{"layers": [0, 2], "attention": {"type": "mla", "latentDim": 512}}])
    assert isinstance(tiersync.TierSyncError("x"), Exception)
