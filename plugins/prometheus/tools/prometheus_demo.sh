#!/usr/bin/env bash
# A replay's OpenMetrics file loaded into a real Prometheus, and a live EngineMetrics registry
# scraped by it (docs/wire.md). Needs promtool and prometheus (Debian package prometheus).
# Run from the repository root:   unshare -n bash -c 'ip link set lo up; plugins/prometheus/tools/prometheus_demo.sh'
# SHARED: the folder of make_trace.py's tools/ (default ../shared).
set -euo pipefail
SERVESIM=${SERVESIM:-.venv/bin/servesim}
PY=${PY:-.venv/bin/python}
OUT=${OUT:-$(mktemp -d)}
EPOCH=1767225600
"$PY" "${SHARED:-../shared}/tools/make_trace.py" -n 2000 --rate 16 --isl uniform:256:2048 --osl uniform:32:256 \
  --block-size 64 --prefix-groups 16 --prefix-frac 0.6 --seed 7 -o "$OUT/trace.jsonl"
"$SERVESIM" run --quiet --set engine.block_size=16 --set cluster.workers=2 --set cluster.router=kv \
  --set "workload.trace.path=\"$OUT/trace.jsonl\"" --set workload.trace.trace_block_size=64 \
  --set "sinks.fpm=[{type: prometheus, path: \"$OUT/m.om\", model_name: sim, epoch_s: $EPOCH}]" \
  --output "$OUT/report.json"
promtool tsdb create-blocks-from openmetrics "$OUT/m.om" "$OUT/data" | tail -2
cat > "$OUT/prom.yml" <<YML
global: {scrape_interval: 1s}
scrape_configs:
  - job_name: servesim-live
    static_configs: [{targets: ["127.0.0.1:19091"]}]
YML
prometheus --config.file="$OUT/prom.yml" --storage.tsdb.path="$OUT/data" \
  --storage.tsdb.retention.time=100y --web.listen-address=127.0.0.1:19090 > "$OUT/prom.log" 2>&1 &
PROM=$!
trap 'kill $PROM 2>/dev/null; wait $PROM 2>/dev/null || true' EXIT
"$PY" - <<'PYLIVE' &
import time
from prometheus_client import start_http_server
from servesim.contract import ForwardPassMetrics
from servesim_prometheus.metrics import EngineMetrics
m = EngineMetrics("vllm", model_name="live", engines=["0"], kv_capacity_tokens=1000)
server, _thread = start_http_server(19091, addr="127.0.0.1", registry=m.registry)
for i in range(25):  # one pass a second, four decodes each
    m.record_pass("0", ForwardPassMetrics(num_decode_requests=4, sum_decode_kv_tokens=40 * i))
    m.record_tokens("0", [0.02] * 4)
    time.sleep(1)
server.shutdown()
PYLIVE
LIVE=$!
sleep 15
Q() { curl -s "http://127.0.0.1:19090/api/v1/query" --data-urlencode "query=$1" ${2:+--data-urlencode "time=$2"}; echo; }
END=$("$PY" -c "import json; print($EPOCH + int(json.load(open('$OUT/report.json'))['duration']) + 2)")
Q 'sum(vllm:request_success_total{model_name="sim"})' "$END"
Q 'sum(vllm:generation_tokens_total{model_name="sim"})' "$END"
Q 'sum(rate(vllm:generation_tokens_total{model_name="sim"}[30s]))' $((EPOCH + 100))
Q 'histogram_quantile(0.9, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{model_name="sim"}[60s])))' $((EPOCH + 100))
Q 'vllm_generation_tokens_total{model_name="live"}'
wait $LIVE
