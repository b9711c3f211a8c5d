"""A KV event subscriber written as a router would write one against vLLM's kv_events stream, with Debian's
python3-zmq and python3-msgpack only (no tiersync code). It keeps a view {medium: set(block hash)}.

    /usr/bin/python3 kv-subscriber.fixture.py PUB_ENDPOINT REPLAY_ENDPOINT STATE_FILE

It starts from STATE_FILE when it exists ({"last": seq, "view": ...}, as a subscriber that left saved it) and replays
from last + 1, or else from a snapshot (the replay request for sequence -1). Then it follows the live stream; a gap
in the sequence numbers (seq > last + 1) is filled by a replay request, as vLLM's
examples/online_serving/kv_events_subscriber.py does. Commands on stdin, one per line:

    sync N   follow until batch N is applied; print {"last": ..., "view": {medium: [hash as 16 hex digits]}}
    save     write STATE_FILE
    quit     exit
"""
import json
import os
import sys

import msgpack
import zmq

pub_endpoint, replay_endpoint, state_file = sys.argv[1:4]
ctx = zmq.Context()
sub = ctx.socket(zmq.SUB)
sub.setsockopt(zmq.SUBSCRIBE, b"")
sub.connect(pub_endpoint)
replay = ctx.socket(zmq.DEALER)
replay.connect(replay_endpoint)

last = -1
view = {}
stats = {"live": 0, "replayed": 0, "snapshots": 0, "gaps": 0}


def apply(payload):
    ts, events = msgpack.unpackb(payload, raw=False)[:2]
    assert isinstance(ts, float), ts
    snapshot = False
    for ev in events:
        tag = ev[0]
        if tag == "BlockStored":
            hashes, parent, token_ids, block_size, lora_id, medium = ev[1:7]
            assert isinstance(block_size, int) and lora_id is None and isinstance(token_ids, list)
            assert parent is None or isinstance(parent, int)
            view.setdefault(medium, set()).update(hashes)
        elif tag == "BlockRemoved":
            hashes, medium = ev[1], ev[2]
            view.setdefault(medium, set()).difference_update(hashes)
        elif tag == "AllBlocksCleared":
            view.clear()
            snapshot = True
        else:
            raise ValueError("unknown event %r" % (tag,))
    return snapshot


def request(start):
    """Replay from `start` (-1: a snapshot); applies what is newer than `last`."""
    global last
    replay.send_multipart([b"", start.to_bytes(8, "big", signed=True)])
    while True:
        if not replay.poll(10000):
            raise TimeoutError("no replay answer")
        _, seq_bytes, payload = replay.recv_multipart()
        seq = int.from_bytes(seq_bytes, "big", signed=True)
        if seq == -1 and not payload:
            return
        if seq > last:
            if apply(payload):
                stats["snapshots"] += 1
            stats["replayed"] += 1
            last = seq


def receive(timeout_ms):
    global last
    if not sub.poll(timeout_ms):
        return False
    _, seq_bytes, payload = sub.recv_multipart()
    seq = int.from_bytes(seq_bytes, "big")
    if seq <= last:
        return True
    if seq > last + 1:
        stats["gaps"] += 1
        request(last + 1)
        if seq <= last:
            return True
    apply(payload)
    stats["live"] += 1
    last = seq
    return True


if os.path.exists(state_file):
    with open(state_file) as f:
        saved = json.load(f)
    last = saved["last"]
    view = {m: set(int(h, 16) for h in hs) for m, hs in saved["view"].items()}
    request(last + 1)
else:
    request(-1)

for line in sys.stdin:
    cmd = line.split()
    if not cmd:
        continue
    if cmd[0] == "sync":
        target = int(cmd[1])
        while last < target:
            # Nothing live for a while (messages sent before the subscription reached the publisher, or a restart):
            # ask for what is missing.
            if not receive(300) and last < target:
                request(last + 1)
        # Drain what is already here, so the view is the one at the newest sequence received.
        while receive(0):
            pass
        out = {m: sorted("%016x" % h for h in hs) for m, hs in view.items() if hs}
        print(json.dumps({"last": last, "view": out, "stats": stats}), flush=True)
    elif cmd[0] == "save":
        with open(state_file, "w") as f:
            json.dump({"last": last, "view": {m: ["%016x" % h for h in hs] for m, hs in view.items()}}, f)
        print(json.dumps({"saved": last}), flush=True)
    elif cmd[0] == "quit":
        break
sub.close(0)
replay.close(0)
ctx.term()
