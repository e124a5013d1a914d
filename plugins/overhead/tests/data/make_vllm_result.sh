#!/bin/sh
# Regenerates vllm032_rate8_conc2.json (not run by the tests): vLLM 0.32's own benchmark
# client, `vllm bench serve --save-result --save-detailed`, at a finite request rate under a
# concurrency limit, against `servesim serve` on this machine.
#
#   TOK: a tokenizer folder the client can load offline (any; the lengths are token counts)
#   VLLM_PY: a Python with vLLM 0.32 installed (the CPU build is enough)
set -e
PORT=${PORT:-8123}
servesim serve --port "$PORT" --set engine.timing_model='{type: fixed, prefill_ms: 40.0, decode_ms: 10.0}' &
SERVER=$!
trap 'kill $SERVER' EXIT
sleep 5
"$VLLM_PY" - --backend openai --base-url "http://127.0.0.1:$PORT" --model servesim --tokenizer "$TOK" \
  --dataset-name random --random-input-len 128 --random-output-len 16 --num-prompts 24 \
  --request-rate 8 --max-concurrency 2 --ignore-eos --seed 5 \
  --save-result --save-detailed --result-dir . --result-filename vllm032_rate8_conc2.json <<'PY'
import argparse
import sys

from vllm.benchmarks import serve

parser = argparse.ArgumentParser()
serve.add_cli_args(parser)
serve.main(parser.parse_args(sys.argv[1:]))
PY
