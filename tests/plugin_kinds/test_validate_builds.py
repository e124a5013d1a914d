"""``servesim validate`` builds every configured plugin, and a plugin failing during a run is
named with its distribution."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_plugins import VERSION, fail, install
from servesim.cli.main import main
from servesim.plugins import servesim_version

CORE = f"servesim {servesim_version()}"
PLUGIN = f"(plugin broken from broken-dist {VERSION})"

SOURCE = """
from servesim import hookimpl
from servesim.replay.routers import RoundRobinRouter
from servesim.sinks.base import KvEventSink
from servesim.timing.base import TimingModel
from servesim.timing.builtin import PolynomialTiming
from servesim_vllm.rank import VllmRank


class RaisingSink(KvEventSink):
    def __init__(self):
        raise ValueError("no endpoint configured")

    def publish(self, worker_id, at_ms, events):
        pass


class FlakySink(KvEventSink):
    def publish(self, worker_id, at_ms, events):
        raise RuntimeError("connection reset")


class AbstractTiming(TimingModel):
    pass


class ExplodingTiming(PolynomialTiming):
    def predict_decode_ms(self, *args):
        raise ZeroDivisionError("bad coefficient")


class FragileRank(VllmRank):
    # builds only on a pool of at most 100 blocks

    def __init__(self, identity, config, backend_config, services):
        if config.num_gpu_blocks > 100:
            raise MemoryError(f"{config.num_gpu_blocks} blocks do not fit")
        super().__init__(identity, config, backend_config, services)


class PickyRouter(RoundRobinRouter):
    def __init__(self, *args):
        super().__init__(*args)
        raise KeyError("zone")


@hookimpl
def servesim_register_kv_event_sinks(registry):
    registry.add("raising", RaisingSink)
    registry.add("flaky", FlakySink)


@hookimpl
def servesim_register_timing_models(registry):
    registry.add("abstract", AbstractTiming)
    registry.add("exploding", ExplodingTiming)


@hookimpl
def servesim_register_routers(registry):
    registry.add("picky", PickyRouter)


@hookimpl
def servesim_register_backends(registry):
    registry.add("fragile", FragileRank)
"""


@pytest.fixture
def broken(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, "broken", SOURCE, dist="broken-dist")


def _config(tmp_path: Path, body: str) -> str:
    path = tmp_path / "c.yaml"
    path.write_text("workload:\n  synthetic: {num_requests: 5}\n" + body)
    return str(path)


def test_validate_constructs_sinks_nested_ones_too(
    broken: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _config(
        tmp_path, "sinks:\n  kv_events:\n    - {type: tee, sinks: [{type: memory}, {type: raising}]}\n"
    )
    assert fail(["validate", cfg], capsys) == (
        f"{cfg}: sinks.kv_events[0].sinks[1]: kv event sink 'raising' failed to start: "
        f"ValueError: no endpoint configured {PLUGIN}"
    )


@pytest.mark.parametrize(("body", "path"), [
    ("engine:\n  timing_model: {type: abstract}\n", "engine.timing_model"),
    ("cluster:\n  pools: [{name: a}, {name: b, engine: {timing_model: {type: abstract}}}]\n",
     "cluster.pools[1].engine.timing_model"),
])
def test_validate_constructs_the_timing_model(
    broken: None, tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, path: str
) -> None:
    cfg = _config(tmp_path, body)
    line = fail(["validate", cfg], capsys)
    assert line.startswith(
        f"{cfg}: {path}: timing model 'abstract' rejected its options: "
        "Can't instantiate abstract class AbstractTiming"
    )
    assert line.endswith(PLUGIN)


def test_validate_constructs_the_router(
    broken: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _config(tmp_path, "cluster: {workers: 2, router: picky}\n")
    assert fail(["validate", cfg], capsys) == (
        f"{cfg}: cluster.router: router 'picky' failed to start: KeyError: 'zone' {PLUGIN}"
    )


@pytest.mark.parametrize(("body", "path"), [
    ("engine: {backend: fragile, num_gpu_blocks: 500}\n", "engine.backend"),
    ("engine: {backend: fragile, num_gpu_blocks: 50}\n"
     "cluster: {prefill_workers: 1, decode_workers: 1, decode_engine: {num_gpu_blocks: 400}}\n",
     "cluster.decode_engine.backend"),
    ("engine: {backend: fragile, num_gpu_blocks: 50}\n"
     "cluster: {pools: [{name: a}, {name: b, engine: {num_gpu_blocks: 300}}]}\n",
     "cluster.pools[1].engine.backend"),
])
def test_run_names_a_backend_that_fails_to_build_as_validate_does(
    broken: None, tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, path: str
) -> None:
    cfg = _config(tmp_path, body)
    blocks = body.rsplit("num_gpu_blocks: ", 1)[1].split("}", 1)[0]
    worker = "0" if path == "engine.backend" else "1"  # decode workers and pool b follow worker 0
    expected = (f"{cfg}: {path}: backend 'fragile' failed to start: EngineError: building rank 0 "
                f"of worker {{}}: {blocks} blocks do not fit {PLUGIN}")
    assert fail(["validate", cfg], capsys) == expected.format(0)
    assert fail(["run", cfg], capsys) == expected.format(worker)


def test_validate_constructs_each_roles_backend(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _config(tmp_path, "cluster:\n  prefill_workers: 1\n  decode_workers: 1\n")
    assert main(["validate", cfg]) == 0
    assert capsys.readouterr().out.startswith(f"OK: {cfg}: backend vllm")


def test_validate_creates_no_sink_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out" / "kv.jsonl"
    cfg = _config(tmp_path, f"sinks:\n  fpm:\n    - {{type: tee, sinks: [{{type: jsonl, path: {out}}}]}}\n")
    assert main(["validate", cfg]) == 0
    assert not out.exists() and not out.parent.exists()
    capsys.readouterr()
    cfg = _config(tmp_path, f"sinks:\n  fpm:\n    - {{type: jsonl, path: {tmp_path}}}\n")
    assert fail(["validate", cfg], capsys) == (
        f"{cfg}: sinks.fpm[0]: jsonl fpm sink {str(tmp_path)!r}: cannot open: it is a directory "
        f"(plugin servesim.builtins.sinks from {CORE})"
    )


def test_a_plugin_failing_during_a_run_is_named(
    broken: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _config(tmp_path, "sinks:\n  kv_events: [{type: flaky}]\n")
    assert main(["validate", cfg]) == 0
    capsys.readouterr()
    line = fail(["run", cfg], capsys)
    assert line.startswith(
        f"plugin broken from broken-dist {VERSION} failed during the run: RuntimeError: "
        "connection reset (sink FlakySink failed at "
    )
    assert line.endswith(" ms: connection reset)")
    cfg = _config(tmp_path, "engine:\n  timing_model: {type: exploding}\n")
    assert fail(["run", cfg], capsys) == (
        f"plugin broken from broken-dist {VERSION} failed during the run: ZeroDivisionError: bad coefficient "
        "(engine 0 is now poisoned: execute_run on rank 0 failed: bad coefficient)"
    )


def test_a_core_bug_is_not_blamed_on_a_plugin(monkeypatch: pytest.MonkeyPatch, broken: None) -> None:
    import servesim.replay.runner as runner
    from servesim.config.loader import load_config

    def boom(*_a: object, **_k: object) -> None:
        raise RuntimeError("core bug")

    monkeypatch.setattr(runner, "build_report", boom)
    with pytest.raises(RuntimeError, match="core bug"):
        runner.simulate(load_config(None, ["workload.synthetic.num_requests=3"]))


def test_a_pools_timing_error_names_the_pools_key_and_the_plugin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = tmp_path / "missing.json"
    cfg = _config(tmp_path, "cluster:\n  pools:\n    - {name: a}\n    - name: b\n      engine:\n"
                  f"        timing_model: {{type: interpolated, profile: {profile}}}\n")
    assert fail(["validate", cfg], capsys) == (
        f"{cfg}: cluster.pools[1].engine.timing_model.profile: timing profile {str(profile)!r}: "
        f"file not found (plugin servesim.builtins.timing from {CORE})"
    )
