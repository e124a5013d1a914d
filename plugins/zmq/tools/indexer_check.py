#!/usr/bin/env python3
"""Compares a KV indexer's overlap scores with the cache state a servesim replay reports.

    python plugins/zmq/tools/indexer_check.py KV_EVENTS.jsonl [--url http://127.0.0.1:8090]
                                              [--worker-ids 1,2,...] [--model default]

``KV_EVENTS.jsonl`` is the replay's ``jsonl`` KV-event sink with ``token_ids: true``, written
beside a ``zmq`` sink that the indexer (``python -m dynamo.indexer``) subscribed to. From the
file it rebuilds which blocks each (worker, dp rank) holds at the end (stored minus removed),
then asks the indexer's ``POST /query`` for the tokens of every distinct stored prefix and
checks that each worker's score is its number of leading resident blocks times the block size.
``--worker-ids`` maps servesim worker w to the indexer's id (default w + 1). Prints one line:
queries, agreeing answers, and the first disagreement if any. Exit 1 on a disagreement.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request


def resident(path: str) -> tuple[dict[tuple[int, int], set[int]], list[tuple[list[int], list[int]]], int]:
    """Blocks held at the end per (worker, dp rank); (hashes, tokens) of every root-stored
    chain (extended by its children); the block size."""
    held: dict[tuple[int, int], set[int]] = {}
    chains: dict[int, tuple[list[int], list[int]]] = {}  # last hash -> full chain from the root
    block = 0
    for line in open(path, encoding="utf-8"):
        e = json.loads(line)
        key = (e["worker"], e["dp_rank"])
        if e["type"] == "BlockStored":
            hashes, tokens = e["block_hashes"], e["token_ids"]
            block = len(tokens) // len(hashes)
            held.setdefault(key, set()).update(hashes)
            parent = e["parent_block_hash"]
            base = ([], []) if parent is None else chains.get(parent)
            if base is not None:
                chains[hashes[-1]] = (base[0] + hashes, base[1] + tokens)
        elif e["type"] == "BlockRemoved":
            held.setdefault(key, set()).difference_update(e["block_hashes"])
        else:
            held[key] = set()
    unique = {tuple(h): (h, t) for h, t in chains.values()}
    return held, list(unique.values()), block


def query(url: str, model: str, tokens: list[int]) -> dict:
    body = json.dumps({"token_ids": tokens, "model_name": model}).encode()
    req = urllib.request.Request(f"{url}/query", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("events")
    ap.add_argument("--url", default="http://127.0.0.1:8090")
    ap.add_argument("--worker-ids", default=None)
    ap.add_argument("--model", default="default")
    args = ap.parse_args()
    held, chains, block = resident(args.events)
    ids = [int(x) for x in args.worker_ids.split(",")] if args.worker_ids else None
    agree = 0
    for hashes, tokens in chains:
        got = query(args.url, args.model, tokens)["scores"]
        for (w, r), blocks in sorted(held.items()):
            n = 0
            while n < len(hashes) and hashes[n] in blocks:
                n += 1
            wid = str(ids[w] if ids else w + 1)
            score = got.get(wid, {}).get(str(r), 0)
            if score != n * block:
                print(f"{len(chains)} prefixes: worker {w} rank {r} holds {n} leading blocks of "
                      f"{len(hashes)}, the indexer scores {score} tokens")
                return 1
            agree += 1
    print(f"{len(chains)} prefixes x {len(held)} ranks: all {agree} indexer scores equal "
          f"servesim's resident blocks x block size {block}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
