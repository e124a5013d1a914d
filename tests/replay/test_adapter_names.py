"""A trace's adapter names resolve to ``engine.lora_modules`` (servesim.replay.adapter_names):
the module served under the name, as ``serve`` resolves a request's ``model``; a name no module
has is a trace error naming file, line and field; without modules the reader's numbering stays."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import servesim.cli.main as cli
from servesim.config.engine import EngineConfig
from servesim.config.loader import load_config
from servesim.errors import TraceError
from servesim.mechanics.lora import LoraModule
from servesim.replay.adapter_names import resolve_adapter_names
from servesim.replay.runner import simulate
from servesim.workload.mooncake import MooncakeTrace

MODULES = (LoraModule(id=7, name="sql"), LoraModule(id=3), LoraModule(id=9, name="chat"))


def _trace(*loras: object) -> list[str]:
    return [json.dumps({"timestamp": i, "input_length": 4, "output_length": 1, "hash_ids": [i],
                        **({"lora": lora} if lora is not None else {})}) for i, lora in enumerate(loras)]


def _loras(lines: list[str], engine: EngineConfig) -> list[int]:
    workload = MooncakeTrace.parse_lines(lines, "t.jsonl", 4)
    resolve_adapter_names(workload, engine)
    return [t.lora for t in workload.turns()]


def test_names_resolve_to_the_modules_served_under_them() -> None:
    # "sql" is numbered 1 while reading, as the id the trace's fifth line gives: resolving by
    # name keeps the two apart.
    lines = _trace("sql", 3, "adapter-3", "chat", 1, None, "sql")
    engine = EngineConfig(enable_lora=True, lora_modules=MODULES)
    assert _loras(lines, engine) == [7, 3, 3, 9, 1, 0, 7]


def test_without_modules_or_lora_the_numbering_stays() -> None:
    lines = _trace("sql", 3, "chat", "sql")
    assert _loras(lines, EngineConfig(enable_lora=True)) == [1, 3, 4, 1]
    assert _loras(lines, EngineConfig(lora_modules=MODULES)) == [1, 3, 4, 1]


def test_a_name_no_module_has_names_file_line_and_field() -> None:
    lines = _trace(3, "sql", "nope", "nope")
    with pytest.raises(TraceError) as info:
        _loras(lines, EngineConfig(enable_lora=True, lora_modules=MODULES))
    assert (info.value.file, info.value.line) == ("t.jsonl", 3)
    assert str(info.value) == ("t.jsonl:3: 'lora': adapter 'nope' is not one of "
                               "engine.lora_modules (sql, adapter-3, chat)")


def _config(tmp_path: Path, loras: list[object], modules: list[dict]) -> str:
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(
        json.dumps({"timestamp": 10 * i, "input_length": 32, "output_length": 2,
                    "hash_ids": [1, 2], "lora": lora}) for i, lora in enumerate(loras)) + "\n")
    cfg = {
        "engine": {"backend": "vllm", "block_size": 16, "num_gpu_blocks": 64, "enable_lora": True,
                   "max_loras": 2, "lora_modules": modules,
                   "timing_model": {"type": "fixed", "prefill_ms": 10.0, "decode_ms": 2.0}},
        "workload": {"trace": {"path": str(trace), "trace_block_size": 16}},
        "sinks": {"kv_events": [{"type": "jsonl", "path": str(tmp_path / "kv.jsonl")}]},
    }
    path = tmp_path / "sim.yaml"
    path.write_text(json.dumps(cfg))
    return str(path)


def test_a_replay_serves_the_named_modules_and_its_events_carry_their_names(tmp_path: Path) -> None:
    path = _config(tmp_path, ["sql", "chat", "sql"], [{"id": 5, "name": "sql"}, {"id": 2, "name": "chat"}])
    res = simulate(load_config(path, []))
    assert res.report["lora"]["requests"] == {"2": 1, "5": 2}
    lines = [json.loads(s) for s in (tmp_path / "kv.jsonl").read_text().splitlines()]
    stored = [(e["lora_id"], e["lora_name"], e["block_hashes"]) for e in lines if e["type"] == "BlockStored"]
    # one Stored event per adapter (the third request reuses sql's cached blocks)
    assert [(i, n) for i, n, _ in stored] == [(5, "sql"), (2, "chat")]
    assert stored[0][2] != stored[1][2]  # equal tokens, distinct adapters: distinct hashes


@pytest.mark.parametrize("command", ["validate", "run"])
def test_validate_and_run_refuse_an_unknown_name(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 command: str) -> None:
    path = _config(tmp_path, ["sql", "sequel"], [{"id": 5, "name": "sql"}])
    assert cli.main([command, path]) == 2
    out, err = capsys.readouterr()
    assert err == (f"servesim: error: {tmp_path / 't.jsonl'}:2: 'lora': adapter 'sequel' is not "
                   "one of engine.lora_modules (sql)\n")
    assert "Traceback" not in err
