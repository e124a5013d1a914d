"""``vllm:lora_requests_info`` in the ``prometheus`` sink's file: present only with LoRA on,
its labels the adapters with waiting and running requests at each scrape."""

from __future__ import annotations

import json
import re
from pathlib import Path

from servesim.config.loader import load_config
from servesim.replay.runner import simulate
from servesim_prometheus.lora_info import LoraSweep

SERIES = re.compile(r'^vllm:lora_requests_info\{max_lora="(\d+)",waiting_lora_adapters="([^"]*)",'
                    r'running_lora_adapters="([^"]*)"\} (\S+) (\S+)$')


def _replay(tmp_path: Path, lora: bool, *more: str) -> str:
    trace = tmp_path / "t.jsonl"
    rows = [{"timestamp": 100 * i, "hash_ids": [50 + i], "output_length": 30,
             **({"lora": 1 + i % 3} if lora else {})} for i in range(12)]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "m.om"
    sets = ["engine.block_size=4", f"workload.trace.path={json.dumps(str(trace))}",
            "workload.trace.trace_block_size=4",
            f'sinks.fpm=[{{type: prometheus, path: "{out}", interval_s: 0.1}}]']
    if lora:
        sets += ["engine.enable_lora=true", "engine.max_loras=2", *more]
    simulate(load_config(None, sets))
    return out.read_text()


def test_the_family_lists_waiting_and_running_adapters(tmp_path: Path) -> None:
    text = _replay(tmp_path, lora=True)
    assert "# TYPE vllm:lora_requests_info gauge" in text
    samples = [SERIES.match(line) for line in text.splitlines()
               if line.startswith("vllm:lora_requests_info{")]
    assert samples and all(s is not None for s in samples)
    labels = {(s[1], s[2], s[3]) for s in samples if s is not None}
    assert {m for m, _w, _r in labels} == {"2"}
    running = {r for _m, _w, r in labels}
    assert "adapter-1" in running and "" in running  # the first request runs; the end is idle
    assert all(len(r.split(",")) <= 2 for r in running if r)  # max_loras 2 on one engine
    # each sample's value is the simulated time of the latest update of its label set
    for s in samples:
        assert s is not None and float(s[4]) <= float(s[5]) + 1e-6


def test_the_family_names_adapters_as_lora_modules_do(tmp_path: Path) -> None:
    text = _replay(tmp_path, True, "engine.lora_modules=[{id: 1, name: sql}]")
    names = {n for line in text.splitlines() if (s := SERIES.match(line)) is not None
             for labels in (s[2], s[3]) if labels for n in labels.split(",")}
    assert names == {"sql", "adapter-2", "adapter-3"}


def test_the_sweep_follows_admission_and_completion() -> None:
    class Log:
        extra = {"lora": [2, 0, 2, 7]}
        arrival = [0.0, 0.0, 5.0, 5.0]
        admitted = [1.0, 0.0, 12.0, -1.0]
        done = [10.0, 3.0, 20.0, 6.0]  # request 3 was rejected at 6 ms without admission

    sweep = LoraSweep(Log())
    assert sweep.advance(0.5) == (["adapter-2"], [])
    assert sweep.advance(5.5) == (["adapter-2", "adapter-7"], ["adapter-2"])
    assert sweep.advance(10.0) == (["adapter-2"], [])
    assert sweep.advance(15.0) == ([], ["adapter-2"])
    assert sweep.advance(25.0) == ([], [])
    # served names (engine.lora_modules' name) where the deployment gives them
    named = LoraSweep(Log(), {7: "sql"})
    assert named.advance(5.5) == (["adapter-2", "sql"], ["adapter-2"])


def test_without_lora_there_is_no_family(tmp_path: Path) -> None:
    assert "lora" not in _replay(tmp_path, lora=False)
