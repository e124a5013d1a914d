"""The backend contract's capabilities (servesim.rank, servesim.fast.rank_runs): declared in a
rank's bases, asked for only when declared, checked by ``servesim validate``, never probed."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import servesim.cli.main as cli
from servesim.contract import CommandEffects, CommandResult, PassCompletionEffects, PassStartEffects
from servesim.fast.engine_runs import RunEngine
from servesim.fast.event_readers import FitsReaders
from servesim.fast.rank_runs import RunsOfPasses
from servesim.rank import (
    Capability,
    GroupPassHooks,
    Handoff,
    HostOffload,
    InternalWork,
    LoraAdapters,
    Rank,
    RankIdentity,
    RankPass,
    SpeculativeDecoding,
)

from tests.core.test_cli import TOY, assert_user_error, write

SRC = Path(__file__).resolve().parents[2] / "core" / "src" / "servesim"


class Plain(Rank[None, None]):
    """Only the five methods: one zero-duration pass per submitted request."""

    def __init__(self) -> None:
        super().__init__(RankIdentity(0, 0, 1), None, None, None)  # type: ignore[arg-type]
        self.jobs = 0

    def apply(self, command: Any, ctx: Any, pending: None) -> CommandEffects:
        self.jobs += 1
        return CommandEffects(CommandResult.submitted(0))

    def is_ready(self) -> bool:
        return self.jobs > 0

    def is_drained(self) -> bool:
        return self.jobs == 0

    def execute_pass(self, now_ms: float) -> RankPass[None]:
        self.jobs -= 1
        return RankPass(now_ms + 1.0, PassStartEffects(), None)

    def complete_pass(self, pending: None, end_ms: float) -> PassCompletionEffects:
        return PassCompletionEffects()


def test_every_capability_lists_its_members() -> None:
    members = {cap.__qualname__: cap.members() for cap in Capability.__subclasses__()}
    assert members == {
        "GroupPassHooks": {"prepare_group_pass", "prefill_in_pass", "model_work_in_pass",
                           "finish_group_pass", "complete_idle_group_pass",
                           "idle_forward_pass_metrics"},
        "InternalWork": {"internal_deadlines", "next_internal_deadline_ms", "process_internal_work"},
        "Handoff": {"reserve_destination_first", "waiting_for_external_command"},
        "HostOffload": {"host_tier"},
        "SpeculativeDecoding": set(),
        "WarmCache": {"preload_cache"},
        "LoraAdapters": {"lora_cache"},
        "RunsOfPasses": {"runs_through_completions", "execute_run", "complete_run",
                         "take_run_kv_events", "extend_run"},
        FitsReaders.__qualname__: {"fit_readers"},
    }


@pytest.mark.parametrize(("member", "capability"), [
    ("prepare_group_pass", "GroupPassHooks"),
    ("next_internal_deadline_ms", "InternalWork"),
    ("waiting_for_external_command", "Handoff"),
    ("host_tier", "HostOffload"),
    ("lora_cache", "LoraAdapters"),
    ("execute_run", "RunsOfPasses"),
    ("preload_cache", "WarmCache"),
])
def test_a_member_without_its_capability_is_refused_when_the_class_is_defined(
    member: str, capability: str
) -> None:
    with pytest.raises(TypeError, match=(
            f"^Undeclared defines {member} of the capability servesim\\.[a-z_.]+\\.{capability} "
            f"without declaring it: add {capability} to the class's bases$")):
        type("Undeclared", (Plain,), {member: lambda self: None})
    declared = next(c for c in Capability.__subclasses__() if c.__qualname__ == capability)
    abstract = {"execute_run", "complete_run", "take_run_kv_events", "next_internal_deadline_ms",
                "process_internal_work", "host_tier", "lora_cache"}
    cls = type("Declared", (Plain, declared), dict.fromkeys(declared.members() & abstract, None))
    assert issubclass(cls, declared)


def test_the_engine_asks_a_rank_only_for_what_it_declares() -> None:
    calls: list[str] = []

    class Hooked(Plain, GroupPassHooks, Handoff):
        def prepare_group_pass(self, wave_step: int, dp_size: int) -> None:
            calls.append(f"prepare {wave_step}")

        def waiting_for_external_command(self) -> bool:
            calls.append("waiting")
            return False

    for rank_class, expected in ((Plain, []), (Hooked, ["waiting", "waiting", "prepare 0"])):
        calls.clear()
        engine = RunEngine(0, [rank_class()])  # an Engine that also asks for runs
        engine.apply(0, object(), 0.0)  # type: ignore[arg-type]
        assert engine.is_ready()
        started = engine.execute_pass(0.0)
        assert started is not None and started.end_ms == 1.0
        engine.complete_pass(started.pass_id, 1.0)
        # a rank without RunsOfPasses is never asked for a run
        engine.apply(0, object(), 1.0)  # type: ignore[arg-type]
        assert engine.execute_run(1.0, 5.0) is None
        assert engine.next_internal_deadline_ms() is None
        assert calls == expected


def test_the_built_in_backends_declare_what_they_support() -> None:
    from servesim_sglang.rank import SglangRank
    from servesim_trtllm.rank import TrtllmRank
    from servesim_vllm.rank import VllmRank

    def declared(cls: type) -> set[str]:
        return {c.__qualname__ for c in Capability.__subclasses__() if issubclass(cls, c)}

    every = {"GroupPassHooks", "Handoff", "SpeculativeDecoding", "RunsOfPasses", "WarmCache"}
    assert declared(VllmRank) == every | {"InternalWork", "HostOffload", "LoraAdapters",
                                          "FitsReaders"}
    assert declared(SglangRank) == every and SglangRank.reserve_destination_first
    assert declared(TrtllmRank) == every | {"FitsReaders"}
    assert not TrtllmRank.reserve_destination_first
    assert issubclass(VllmRank, RunsOfPasses) and VllmRank.runs_through_completions


@pytest.mark.parametrize(("item", "message"), [
    ("engine.aic_nextn=2",
     "engine.aic_nextn: aic_nextn needs the backend capability SpeculativeDecoding "
     "(servesim.rank.SpeculativeDecoding); backend 'toy' (plugin toy from servesim-toy 0.1.0, "
     "class ToyRank) does not declare it"),
    ("engine.native_host_offload={num_host_blocks: 8}",
     "engine.native_host_offload: native_host_offload needs the backend capability HostOffload "
     "(servesim.rank.HostOffload); backend 'toy' (plugin toy from servesim-toy 0.1.0, class "
     "ToyRank) does not declare it"),
    ("engine.enable_lora=true",
     "engine.enable_lora: enable_lora needs the backend capability LoraAdapters "
     "(servesim.rank.LoraAdapters); backend 'toy' (plugin toy from servesim-toy 0.1.0, class "
     "ToyRank) does not declare it"),
    ("cluster.pools=[{name: a}, {name: b, engine: {aic_nextn: 1}}]",
     "cluster.pools[1].engine.aic_nextn: aic_nextn needs the backend capability "
     "SpeculativeDecoding"),
    ("workload.warm_cache={path: kv.jsonl}",
     "workload.warm_cache: a warm start (a KV cache filled from a captured KV-event stream) needs "
     "the backend capability WarmCache (servesim.rank.WarmCache); backend 'toy' (plugin toy from "
     "servesim-toy 0.1.0, class ToyRank) does not declare it"),
])
def test_validate_and_run_refuse_a_key_whose_capability_the_backend_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], item: str, message: str
) -> None:
    path = write(tmp_path, TOY)
    for command in ("validate", "run"):
        assert_user_error(capsys, cli.main([command, path, "--set", item]), f"--set {item}: {message}")


def _capability_members() -> set[str]:
    return set().union(*(cap.members() for cap in Capability.__subclasses__()))


def test_core_probes_no_capability_with_getattr() -> None:
    """What a rank can do is declared (docs/writing-a-plugin.md, "Backend"): no getattr or
    hasattr anywhere in core names a capability's member."""
    members = _capability_members() | {"supports_handoff"}
    found = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
                    and isinstance(node.args[1], ast.Constant) and node.args[1].value in members):
                found.append(f"{path.relative_to(SRC)}:{node.lineno} {node.args[1].value}")
    assert found == []


def test_spec_decoding_and_host_offload_are_markers_the_loader_reads() -> None:
    assert SpeculativeDecoding.members() == frozenset()
    assert HostOffload.members() == {"host_tier"}
    assert LoraAdapters.members() == {"lora_cache"}
    assert InternalWork.members() >= {"internal_deadlines"}


@pytest.mark.parametrize(("backend", "rank_class"), [("sglang", "SglangRank"), ("trtllm", "TrtllmRank")])
def test_lora_on_a_backend_that_does_not_model_it_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], backend: str, rank_class: str
) -> None:
    """docs/lora.md: only the vllm rank declares LoraAdapters; sglang and trtllm would serve
    every adapter's requests as the base model's."""
    path = write(tmp_path, f"engine:\n  backend: {backend}\n  enable_lora: true\n")
    err = assert_user_error(capsys, cli.main(["validate", path]), f"{path}: engine.enable_lora: "
                            "enable_lora needs the backend capability LoraAdapters "
                            "(servesim.rank.LoraAdapters)")
    assert f"class {rank_class}) does not declare it" in err
