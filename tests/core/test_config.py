"""Config loading: defaults, plugin-owned sections, --set, engine factories, resolved(),
and one ConfigError naming source, key path, value and expectation for every bad input."""

from __future__ import annotations

import json
import textwrap
import types
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml
from servesim import ConfigError, Engine, LruEviction, Request, Tokens, hookimpl
from servesim.config.loader import default_config, load_config, merge_engine
from servesim.config.yaml_io import parse_set
from servesim.plugins import Plugins, make_plugin_manager
from servesim.testing.driver import drive
from servesim.timing import FixedTiming, PolynomialTiming

TOY = """
engine:
  backend: toy
  toy: {max_running: 2}
  timing_model: {type: toy_constant, pass_ms: 2.5}
"""


@pytest.fixture(scope="module")
def plugins() -> Plugins:
    return Plugins()


def write(tmp_path: Path, text: str, name: str = "sim.yaml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def load_error(tmp_path: Path, plugins: Plugins, text: str | None, sets: list[str] = ()) -> ConfigError:  # type: ignore[assignment]
    path = write(tmp_path, text) if text is not None else None
    with pytest.raises(ConfigError) as exc:
        load_config(path, list(sets), plugins)
    return exc.value


def test_defaults(plugins: Plugins) -> None:
    cfg = default_config(plugins)
    vllm = plugins.backends().get("vllm")
    assert cfg.rank_class is vllm
    assert cfg.sim.engine.backend == "vllm"
    assert cfg.sim.engine.block_size == vllm.default_block_size  # resolved, never None
    assert (cfg.sim.engine.num_gpu_blocks, cfg.sim.engine.max_num_seqs) == (16384, 256)
    assert isinstance(cfg.timing_model(), PolynomialTiming)
    assert cfg.timing_model() is cfg.timing_model()
    assert isinstance(cfg.eviction_factory(), LruEviction)
    assert (cfg.sim.cluster.workers, cfg.sim.cluster.router) == (1, "round_robin")


def test_toy_backend_selected_from_yaml_and_driven(tmp_path: Path, plugins: Plugins) -> None:
    """The toy plugin, found through its entry point, runs behind the Engine contract."""
    cfg = load_config(write(tmp_path, TOY), [], plugins)
    from servesim_toy import ConstantTiming, ToyConfig, ToyRank

    assert cfg.rank_class is ToyRank and cfg.backend_config == ToyConfig(max_running=2)
    assert isinstance(cfg.timing_model(), ConstantTiming) and cfg.timing_model().pass_ms == 2.5
    assert cfg.sim.engine.block_size == 16
    engine = cfg.engine_factory().build(worker_id=3)
    assert isinstance(engine, Engine) and engine.worker_id == 3
    result = drive(
        engine,
        [
            (0.0, Request(1, Tokens([1, 2, 3]), 3)),
            (0.0, Request(2, Tokens([4]), 1)),
            (0.0, Request(3, Tokens([5, 6]), 2)),
        ],
    )
    # max_running 2: r3 waits one pass; every pass lasts 2.5 ms.
    times = {rid: t.token_times for rid, t in result.requests.items()}
    assert times == {1: [2.5, 5.0, 7.5], 2: [2.5], 3: [5.0, 7.5]}
    assert [t.completed_ms for t in result.requests.values()] == [7.5, 2.5, 7.5]


def test_set_overrides_reach_the_engine(tmp_path: Path, plugins: Plugins) -> None:
    cfg = load_config(write(tmp_path, TOY), ["engine.speedup_ratio=2", "engine.toy.max_running=3"], plugins)
    assert cfg.sim.engine.speedup_ratio == 2.0 and cfg.backend_config.max_running == 3
    result = drive(cfg.engine_factory().build(0), [(0.0, Request(1, Tokens([1]), 2))])
    assert result.requests[1].token_times == [1.25, 2.5]


def test_set_values_are_yaml_scalars_and_later_wins(plugins: Plugins) -> None:
    assert parse_set("engine.max_num_seqs=null") == (["engine", "max_num_seqs"], None)
    assert parse_set("a.b=") == (["a", "b"], None)
    assert parse_set("a.b=fifo") == (["a", "b"], "fifo")
    assert parse_set(" a.b = 1.5") == (["a", "b"], 1.5)
    cfg = load_config(
        None,
        [
            "engine.max_num_seqs=4",
            "engine.max_num_seqs=null",
            "engine.enable_prefix_caching=false",
            "engine.preemption_mode=fifo",
            "workload.trace.path=t.jsonl",
            "workload.trace.trace_block_size=64",
        ],
        plugins,
    )
    e = cfg.sim.engine
    assert (e.max_num_seqs, e.enable_prefix_caching, e.preemption_mode.value) == (None, False, "fifo")
    assert (cfg.sim.workload.trace.path, cfg.sim.workload.trace.trace_block_size) == ("t.jsonl", 64)


def test_set_indexes_existing_lists(tmp_path: Path, plugins: Plugins) -> None:
    path = write(tmp_path, "sinks: {kv_events: [{type: memory}, {type: jsonl, path: a.jsonl}]}\n")
    cfg = load_config(path, ["sinks.kv_events.1.path=b.jsonl"], plugins)
    assert cfg.sim.sinks.kv_events[1] == {"type": "jsonl", "path": "b.jsonl"}
    with pytest.raises(ConfigError) as exc:
        load_config(path, ["sinks.kv_events.2.path=c.jsonl"], plugins)
    assert str(exc.value) == (
        "--set sinks.kv_events.2.path=c.jsonl: sinks.kv_events: cannot set sinks.kv_events.2.path: "
        "sinks.kv_events is a list of 2; use an index below 2 or set the whole list"
    )
    with pytest.raises(ConfigError) as exc:
        load_config(path, ["sinks.kv_events.0.type=kafka"], plugins)
    assert str(exc.value).startswith(
        "--set sinks.kv_events.0.type=kafka: sinks.kv_events[0].type: unknown kv_event_sink 'kafka'"
    )


def test_set_overrides_yaml(tmp_path: Path, plugins: Plugins) -> None:
    path = write(tmp_path, "engine: {num_gpu_blocks: 100, dp_size: 2}\n")
    cfg = load_config(path, ["engine.num_gpu_blocks=7"], plugins)
    assert (cfg.sim.engine.num_gpu_blocks, cfg.sim.engine.dp_size) == (7, 2)


def test_engine_factory_overrides(tmp_path: Path, plugins: Plugins) -> None:
    cfg = load_config(write(tmp_path, TOY), [], plugins)
    base = cfg.engine_factory()
    same = cfg.engine_factory({"max_num_seqs": 8, "toy": {"max_running": 1}}, emit_kv_events=True)
    assert (same.config.max_num_seqs, same.backend_config.max_running) == (8, 1)
    assert same.services.emit_kv_events and not base.services.emit_kv_events
    assert same.services.timing is base.services.timing  # one timing instance (aisimulate §6.5)
    other = cfg.engine_factory({"timing_model": {"type": "fixed", "prefill_ms": 3.0}})
    assert isinstance(other.services.timing, FixedTiming) and other.services.timing.cfg.prefill_ms == 3.0
    with pytest.raises(ConfigError) as exc:
        cfg.engine_factory({"max_num_seqs": 0}, path="cluster.prefill_engine")
    assert exc.value.path == "cluster.prefill_engine.max_num_seqs"
    assert "expected an integer >= 1 or null, got 0" in str(exc.value)


def test_merge_engine_switching_timing_type_drops_old_options() -> None:
    base = {"timing_model": {"type": "fixed", "prefill_ms": 5.0}, "toy": {"max_running": 2}}
    assert merge_engine(base, {"timing_model": {"decode_ms": 1.0}, "toy": {}}) == {
        "timing_model": {"type": "fixed", "prefill_ms": 5.0, "decode_ms": 1.0},
        "toy": {"max_running": 2},
    }
    assert merge_engine(base, {"timing_model": {"type": "polynomial"}})["timing_model"] == {
        "type": "polynomial"
    }


def test_resolved_is_json_and_round_trips(tmp_path: Path, plugins: Plugins) -> None:
    cfg = load_config(write(tmp_path, TOY), ["report.sla_ttft_ms=500"], plugins)
    resolved = cfg.resolved()
    assert json.loads(json.dumps(resolved)) == resolved
    assert resolved["engine"]["block_size"] == 16
    assert resolved["engine"]["toy"] == {"max_running": 2}
    assert resolved["engine"]["timing_model"] == {"type": "toy_constant", "pass_ms": 2.5}
    assert resolved["engine"]["preemption_mode"] == "lifo"
    assert resolved["report"]["sla_ttft_ms"] == 500.0
    again = load_config(write(tmp_path, yaml.safe_dump(resolved), "resolved.yaml"), [], plugins)
    assert again.resolved() == resolved


def test_prefill_engine_overrides_validated_at_load(tmp_path: Path, plugins: Plugins) -> None:
    text = TOY + "cluster: {prefill_workers: 1, decode_workers: 1, prefill_engine: {toy: {max_running: 0}}}\n"
    err = load_error(tmp_path, plugins, text)
    # the toy backend cannot hand prefills off either: both problems, in that order
    lines = str(err).splitlines()
    assert lines[1:] == [
        "  cluster.prefill_engine.toy.max_running: expected an int >= 1, got 0",
        "  cluster.prefill_workers: a prefill/decode split (prefill workers hand prefills to decode "
        "workers) needs the backend capability Handoff (servesim.rank.Handoff); backend 'toy' "
        "(plugin toy from servesim-toy 0.1.0, class ToyRank) does not declare it",
    ]


# ------------------------------------------------------------------ one error per bad input

ERRORS = [
    # (yaml, --set, key path, message)
    (
        "engine: {max_num_seq: 4}",
        [],
        "engine.max_num_seq",
        "unknown key (did you mean 'max_num_seqs'?); expected one of: aic_mtp_seed,",
    ),
    ("engine: {max_num_seqs: many}", [], "engine.max_num_seqs", "expected an integer, got 'many'"),
    ("engine: {max_num_seqs: 2.5}", [], "engine.max_num_seqs", "expected an integer, got 2.5"),
    (
        "engine: {enable_prefix_caching: 'no'}",
        [],
        "engine.enable_prefix_caching",
        "expected true or false, got 'no'",
    ),
    (
        "engine: {preemption_mode: newest}",
        [],
        "engine.preemption_mode",
        "expected one of 'lifo', 'fifo', got 'newest'",
    ),
    (
        "engine: {worker_type: both}",
        [],
        "engine.worker_type",
        "expected one of 'aggregated', 'prefill', 'decode', got 'both'",
    ),
    ("engine: {num_gpu_blocks: 0}", [], "engine.num_gpu_blocks", "expected an integer in [1, 16777216], got 0"),
    (
        "engine: {block_size: -16}",
        [],
        "engine.block_size",
        "expected an integer >= 1, or null for the backend's default, got -16",
    ),
    ("engine: {max_num_seqs: 0}", [], "engine.max_num_seqs", "expected an integer >= 1 or null, got 0"),
    ("engine: {dp_size: 0}", [], "engine.dp_size", "expected an integer >= 1, got 0"),
    ("engine: {speedup_ratio: .nan}", [], "engine.speedup_ratio", "expected a finite number >= 0, got nan"),
    (
        "engine: {decode_speedup_ratio: -1}",
        [],
        "engine.decode_speedup_ratio",
        "expected a finite number >= 0, got -1.0",
    ),
    (
        "engine: {aic_nextn: 2, aic_nextn_accept_rates: '0.5,x'}",
        [],
        "engine.aic_nextn_accept_rates",
        "aic_nextn_accept_rates[1]: 'x' is not a number",
    ),
    ("engine: {backend: vlm}", [], "engine.backend", "unknown backend 'vlm'; installed: "),
    (
        "engine: {timing_model: {type: polynomal}}",
        [],
        "engine.timing_model.type",
        "unknown timing_model 'polynomal'; installed: ",
    ),
    (
        "engine: {timing_model: {type: polynomial, a: 1}}",
        [],
        "engine.timing_model.a",
        "unknown key; expected one of: decode, prefill",
    ),
    (
        "engine: {timing_model: {type: fixed, prefill_ms: fast}}",
        [],
        "engine.timing_model.prefill_ms",
        "expected a number, got 'fast'",
    ),
    (
        "engine: {timing_model: {type: fixed, prefill_ms: -1}}",
        [],
        "engine.timing_model.prefill_ms",
        "prefill_ms must be finite and >= 0, got -1.0",
    ),
    ("engine: {timing_model: fixed}", [], "engine.timing_model", "expected a mapping, got 'fixed'"),
    (
        "engine: {eviction_policy: mru}",
        [],
        "engine.eviction_policy",
        "unknown eviction_policy 'mru'; installed: lfu, lineage, lru, multi_lru",
    ),
    (
        "engine: {vlm: {x: 1}}",
        [],
        "engine.vlm",
        "unknown key: neither an engine argument nor the section of an installed backend "
        "(installed backends: ",
    ),
    (
        "engine: {backend: vllm, toy: {max_running: lots}}",
        [],
        "engine.toy.max_running",
        "expected an integer, got 'lots'",
    ),
    (
        "engine: {backend: toy, toy: {max_running: 0}}",
        [],
        "engine.toy.max_running",
        "expected an int >= 1, got 0",
    ),
    ("engine: [1, 2]", [], "engine", "expected a mapping, got [1, 2]"),
    ("engnie: {}", [], "engnie", "unknown key (did you mean 'engine'?); expected one of: cluster, engine,"),
    ("cluster: {router: rr}", [], "cluster.router", "unknown router 'rr'; installed: "),
    ("cluster: {workers: 0}", [], "cluster.workers", "expected at least one worker in the cluster, got 0"),
    (
        "cluster: {prefill_workers: 2}",
        [],
        "cluster.decode_workers",
        "a prefill/decode split needs both prefill_workers and decode_workers >= 1",
    ),
    (
        "workload: {trace: {path: t.jsonl, format: csv}}",
        [],
        "workload.trace.format",
        "unknown trace_format 'csv'; installed: ",
    ),
    ("workload: {trace: {format: mooncake}}", [], "workload.trace.path", "required key missing"),
    (
        "workload: {trace: {path: t, trace_block_size: 0}}",
        [],
        "workload.trace.trace_block_size",
        "expected an integer >= 1, got 0",
    ),
    (
        "workload: {synthetic: {prefix_ratio: 1.5}}",
        [],
        "workload.synthetic.prefix_ratio",
        "expected a number in [0, 1], got 1.5",
    ),
    (
        "workload: {synthetic: {arrival: bursty}}",
        [],
        "workload.synthetic.arrival",
        "expected one of poisson, constant, burst, got 'bursty'",
    ),
    (
        "workload: {synthetic: {output_length: 'uniform:9'}}",
        [],
        "workload.synthetic.output_length",
        "bad length spec 'uniform:9': expected fixed:N, uniform:LO:HI",
    ),
    ("report: {sla_ttft_ms: 0}", [], "report.sla_ttft_ms", "expected a finite number > 0 or null, got 0.0"),
    (
        "report: {percentiles: [50, 101]}",
        [],
        "report.percentiles[1]",
        "expected a number in [0, 100], got 101.0",
    ),
    ("sinks: {kv_events: [{type: kafka}]}", [], "sinks.kv_events[0].type", "unknown kv_event_sink 'kafka'"),
    ("sinks: {fpm: [{path: x}]}", [], "sinks.fpm[0].type", "required key missing"),
]


@pytest.mark.parametrize(("text", "sets", "path", "message"), ERRORS, ids=[e[2] for e in ERRORS])
def test_each_bad_input_is_one_error_with_key_path(
    tmp_path: Path, plugins: Plugins, text: str, sets: list[str], path: str, message: str
) -> None:
    err = load_error(tmp_path, plugins, text, sets)
    assert err.path == path
    assert err.source == str(tmp_path / "sim.yaml")
    assert str(err).startswith(f"{err.source}: {path}: {message}")
    assert "\n" not in str(err)


def test_set_errors_name_the_flag(plugins: Plugins) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(None, ["engine.max_num_seqz=8"], plugins)
    assert str(exc.value).startswith("--set engine.max_num_seqz=8: engine.max_num_seqz: unknown key")
    with pytest.raises(ConfigError, match=r"^--set: expected KEY=VALUE .*got 'engine'$"):
        load_config(None, ["engine"], plugins)
    with pytest.raises(ConfigError, match=r"^--set engine.backend.x=1: engine.backend: expected a string"):
        load_config(None, ["engine.backend.x=1"], plugins)
    with pytest.raises(
        ConfigError,
        match=r"^--set engine.dp_size.x=1: engine.dp_size: cannot set "
        r"engine.dp_size.x: engine.dp_size is 2, not a mapping$",
    ):
        load_config(None, ["engine.dp_size=2", "engine.dp_size.x=1"], plugins)
    with pytest.raises(ConfigError, match=r"^--set a.b=\[: invalid YAML"):
        load_config(None, ["a.b=["], plugins)


def test_yaml_syntax_error_names_file_and_line(tmp_path: Path, plugins: Plugins) -> None:
    err = load_error(tmp_path, plugins, "engine:\n  backend: vllm\n   dp_size: 2\n")
    assert err.source == f"{tmp_path / 'sim.yaml'}:3"
    assert str(err).startswith(
        f"{tmp_path / 'sim.yaml'}:3: invalid YAML: mapping values are not allowed here"
    )


def test_duplicate_yaml_key_is_an_error(tmp_path: Path, plugins: Plugins) -> None:
    err = load_error(tmp_path, plugins, "engine:\n  dp_size: 2\n  dp_size: 4\n")
    assert str(err).startswith(
        f"{tmp_path / 'sim.yaml'}:3: invalid YAML: while constructing a mapping found duplicate key 'dp_size'"
    )


def test_yaml_merge_keys_may_override(tmp_path: Path, plugins: Plugins) -> None:
    """``<<: *anchor`` merges are not duplicates; explicit keys win over merged ones."""
    text = "engine: &e {dp_size: 2, num_gpu_blocks: 9}\ncluster:\n  prefill_engine: {<<: *e, dp_size: 1}\n"
    cfg = load_config(
        write(tmp_path, text), ["cluster.prefill_workers=1", "cluster.decode_workers=1"], plugins
    )
    assert cfg.sim.cluster.prefill_engine == {"dp_size": 1, "num_gpu_blocks": 9}
    assert cfg.engine_factory(cfg.sim.cluster.prefill_engine).config.dp_size == 1


def test_missing_file_and_non_mapping_top_level(tmp_path: Path, plugins: Plugins) -> None:
    with pytest.raises(ConfigError, match=r"nope.yaml: cannot read config file: No such file or directory"):
        load_config(str(tmp_path / "nope.yaml"), [], plugins)
    err = load_error(tmp_path, plugins, "- engine\n")
    assert (
        str(err) == f"{tmp_path / 'sim.yaml'}: expected a mapping of sections (engine, cluster, workload, "
        "report, sinks), got ['engine']"
    )


def test_empty_file_is_the_default(tmp_path: Path, plugins: Plugins) -> None:
    cfg = load_config(write(tmp_path, ""), [], plugins)
    assert cfg.resolved() == default_config(plugins).resolved()


def test_several_problems_are_one_error(tmp_path: Path, plugins: Plugins) -> None:
    err = load_error(tmp_path, plugins, "engine: {dp_size: 0, num_gpu_blocks: 0}\nreport: {sla_e2e_ms: -1}\n")
    assert str(err) == (
        f"{tmp_path / 'sim.yaml'}: 3 problems:\n"
        "  engine.num_gpu_blocks: expected an integer in [1, 16777216], got 0\n"
        "  engine.dp_size: expected an integer >= 1, got 0\n"
        "  report.sla_e2e_ms: expected a finite number > 0 or null, got -1.0"
    )
    assert err.path == "engine.num_gpu_blocks"


def test_timing_model_rejecting_options_is_a_config_error(tmp_path: Path, plugins: Plugins) -> None:
    cfg = load_config(write(tmp_path, TOY), ["engine.timing_model.pass_ms=0"], plugins)
    with pytest.raises(ConfigError) as exc:
        cfg.timing_model()
    assert str(exc.value) == (
        f"{tmp_path / 'sim.yaml'}: engine.timing_model: timing model 'toy_constant' rejected its "
        "options: pass_ms must be > 0, got 0.0"
    )


def test_attrs_validator_errors_name_the_field(tmp_path: Path) -> None:
    """A plugin's config class may use attrs validators; their errors get the field's path."""

    @attrs.frozen
    class PickyConfig:
        mode: str = attrs.field(default="a", validator=attrs.validators.in_(("a", "b")))

    class PickyTiming(FixedTiming):
        config_class = PickyConfig  # type: ignore[assignment]

    def servesim_register_timing_models(registry: Any) -> None:
        registry.add("picky", PickyTiming)

    pm = make_plugin_manager()
    pm.register(
        types.SimpleNamespace(servesim_register_timing_models=hookimpl(servesim_register_timing_models)),
        "picky",
    )
    plugins = Plugins(pm)
    assert (
        load_config(None, ["engine.timing_model={type: picky, mode: b}"], plugins).engine.timing_config.mode
        == "b"
    )
    with pytest.raises(ConfigError) as exc:
        load_config(None, ["engine.timing_model.type=picky", "engine.timing_model.mode=c"], plugins)
    assert str(exc.value) == (
        "--set engine.timing_model.mode=c: engine.timing_model.mode: 'mode' must be in ('a', 'b') (got 'c')"
    )


def test_several_files_merge_in_order_later_keys_winning(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text("engine:\n  max_num_seqs: 64\n  block_size: 16\n"
                    "  timing_model: {type: fixed, prefill_ms: 5.0}\ncluster: {workers: 3}\n")
    fitted = tmp_path / "fitted.yaml"
    fitted.write_text("engine:\n  block_size: 32\n  timing_model: {type: polynomial}\n")
    loaded = load_config([str(base), str(fitted)])
    assert (loaded.sim.engine.max_num_seqs, loaded.sim.engine.block_size) == (64, 32)
    assert loaded.sim.cluster.workers == 3
    # A different model type replaces the earlier model's options instead of mixing them.
    assert loaded.resolved()["engine"]["timing_model"] == {"type": "polynomial"}
    assert loaded.source == f"{base} + {fitted}"


def test_an_error_from_a_later_file_names_that_file(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text("engine: {max_num_seqs: 64}\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("engine: {max_num_seqs: -3}\n")
    with pytest.raises(ConfigError) as info:
        load_config([str(base), str(bad)])
    assert info.value.path == "engine.max_num_seqs" and info.value.source == str(bad)
def test_a_command_owns_an_extra_section(tmp_path: Path, plugins: Plugins) -> None:
    """load_config(extra_sections=...): one more top-level section, structured by the same
    converter, errors naming its key path, reported in resolved(); others still reject it."""

    @attrs.frozen
    class ExtraConfig:
        port: int = 1
        name: str = "x"

    path = tmp_path / "c.yaml"
    path.write_text("extra:\n  port: 5\n")
    loaded = load_config(str(path), ["extra.name=y"], plugins, extra_sections={"extra": ExtraConfig})
    assert loaded.extra == {"extra": ExtraConfig(port=5, name="y")}
    assert loaded.resolved()["extra"] == {"port": 5, "name": "y"}
    default = load_config(None, [], plugins, extra_sections={"extra": ExtraConfig})
    assert default.extra["extra"] == ExtraConfig()
    with pytest.raises(ConfigError) as exc:
        load_config(str(path), ["extra.bogus=1"], plugins, extra_sections={"extra": ExtraConfig})
    assert exc.value.path == "extra.bogus"
    with pytest.raises(ConfigError) as exc:
        load_config(str(path), ["extra.port=abc"], plugins, extra_sections={"extra": ExtraConfig})
    assert exc.value.path == "extra.port"
    with pytest.raises(ConfigError) as exc:
        load_config(str(path), [], plugins)
    assert exc.value.path == "extra"


def test_the_report_echo_leaves_out_later_backend_options_at_their_defaults() -> None:
    """Options a backend added after reports were first written are echoed only when set
    (``report_omits_defaults``, servesim.config.loader.echo_section): a configuration that
    does not set them reports as before."""
    from servesim.config.loader import load_config

    sglang = load_config(None, ["engine.backend=sglang"]).resolved()["engine"]["sglang"]
    assert "scheduler_recv_interval" not in sglang and "disable_priority_preemption" not in sglang
    assert sglang["schedule_policy"] == "fcfs"  # an option from the start is always echoed
    sglang = load_config(None, ["engine.backend=sglang", "engine.sglang.scheduler_recv_interval=3"]
                         ).resolved()["engine"]["sglang"]
    assert sglang["scheduler_recv_interval"] == 3
    trtllm = load_config(None, ["engine.backend=trtllm"]).resolved()["engine"]["trtllm"]
    assert sorted(trtllm) == ["capacity_scheduler_policy", "context_chunking_policy",
                              "first_token_decode_call", "max_batch_size", "max_num_tokens"]
    trtllm = load_config(None, ["engine.backend=trtllm", "engine.trtllm.batch_wait_timeout_iters=20"]
                         ).resolved()["engine"]["trtllm"]
    assert trtllm["batch_wait_timeout_iters"] == 20 and "batch_wait_max_tokens_ratio" not in trtllm
