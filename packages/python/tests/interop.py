"""The Python side of test/python-client.test.ts (Node and Python in one run). Reads one JSON request on stdin,
writes one JSON answer on stdout:

    interop.py keys                 [{model, layout, salt?, tokens, parent?, position?}] -> [{ns, fingerprint, keys}]
    interop.py store URL TOKEN      {model, layout, sequences: [[token, ...]], seed} -> {keys: [[...]], sha256: [[...]]}
    interop.py load URL TOKEN       {keys: [...]} -> {missing: [...], sha256: [...]}

``layout`` is in @tiersync/core's form ({tokensPerPage, dtype, groups}). Stored pages are full pages of seeded random
bytes; ``sha256`` lists each page's digest so the other side can check the bytes it loads.
"""

import hashlib
import json
import sys

import numpy as np

import tiersync


def namespace(case: dict) -> tiersync.Namespace:
    lay = case["layout"]
    layout = tiersync.kv_layout(lay["tokensPerPage"], lay["dtype"], lay["groups"])
    return tiersync.create_namespace(case["model"], layout, tenant_salt=case.get("salt"))


def keys(cases: list) -> list:
    out = []
    for c in cases:
        ns = namespace(c)
        k = tiersync.page_keys(ns, c["tokens"], parent=c.get("parent"), position=c.get("position"))
        out.append({"ns": ns.id, "fingerprint": ns.layout_fingerprint, "keys": k})
    return out


def store(url: str, token: str, req: dict) -> dict:
    ns = namespace(req)
    rng = np.random.default_rng(req["seed"])
    with tiersync.Client.connect(url, token=token) as client:
        all_keys, digests = [], []
        for seq in req["sequences"]:
            k = tiersync.page_keys(ns, seq)
            pages = rng.integers(0, 256, size=len(k) * client.page_bytes, dtype=np.uint8)
            r = client.store(k, pages)
            if r.bad_checksum:
                raise SystemExit(f"pages refused: {r.bad_checksum}")
            all_keys.append(k)
            pb = client.page_bytes
            digests.append([hashlib.sha256(pages[i * pb : (i + 1) * pb]).hexdigest() for i in range(len(k))])
    return {"keys": all_keys, "sha256": digests}


def load(url: str, token: str, req: dict) -> dict:
    with tiersync.Client.connect(url, token=token) as client:
        pb = client.page_bytes
        out = np.zeros(len(req["keys"]) * pb, np.uint8)
        missing = client.load(req["keys"], out)
    return {"missing": missing, "sha256": [hashlib.sha256(out[i * pb : (i + 1) * pb]).hexdigest() for i in range(len(req["keys"]))]}


def main() -> None:
    req = json.load(sys.stdin)
    cmd = sys.argv[1]
    if cmd == "keys":
        answer = keys(req)
    elif cmd == "store":
        answer = store(sys.argv[2], sys.argv[3], req)
    elif cmd == "load":
        answer = load(sys.argv[2], sys.argv[3], req)
    else:
        raise SystemExit(f"unknown command {cmd!r}")
    json.dump(answer, sys.stdout)


if __name__ == "__main__":
    main()
