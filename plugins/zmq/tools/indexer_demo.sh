#!/usr/bin/env bash
# Dynamo's standalone KV indexer subscribed to a 4-worker servesim replay (docs/wire.md).
# Run from the repository root inside a private network namespace, because the indexer's HTTP
# server binds 0.0.0.0:   unshare -n bash -c 'ip link set lo up; plugins/zmq/tools/indexer_demo.sh'
# PEER_PYTHON: the venv of ../shared/tools/setup_peer.sh (ai-dynamo 1.6.1).
# SHARED: the folder of make_trace.py's tools/ (default ../shared).
set -euo pipefail
PEER_PYTHON=${PEER_PYTHON:-$HOME/.cache/servesim-peer/bin/python}
SERVESIM=${SERVESIM:-.venv/bin/servesim}
PY=${PY:-.venv/bin/python}
OUT=${OUT:-$(mktemp -d)}
"$PEER_PYTHON" -m dynamo.indexer --block-size 16 --port 8090 \
  --workers "1=tcp://127.0.0.1:5557,2=tcp://127.0.0.1:5558,3=tcp://127.0.0.1:5559,4=tcp://127.0.0.1:5560" \
  > "$OUT/indexer.log" 2>&1 &
IDX=$!
trap 'kill $IDX 2>/dev/null; wait $IDX 2>/dev/null || true' EXIT
sleep 5  # the indexer's SUB sockets connect; nothing published before that reaches it
"$PY" "${SHARED:-../shared}/tools/make_trace.py" -n 300 --rate 20 --isl uniform:64:512 --osl uniform:8:64 \
  --block-size 16 --prefix-groups 8 --prefix-frac 0.8 --seed 3 -o "$OUT/trace.jsonl"
"$SERVESIM" run --quiet --set engine.block_size=16 --set engine.num_gpu_blocks=400 \
  --set "workload.trace.path=\"$OUT/trace.jsonl\"" --set workload.trace.trace_block_size=16 \
  --set cluster.workers=4 --set cluster.router=kv \
  --set "sinks.kv_events=[{type: zmq, wait_for_subscribers_s: 3, linger_s: 1}, {type: jsonl, path: \"$OUT/kv.jsonl\", token_ids: true}]" \
  --output "$OUT/report.json"
sleep 2  # the indexer applies what it received
"$PY" plugins/zmq/tools/indexer_check.py "$OUT/kv.jsonl"
