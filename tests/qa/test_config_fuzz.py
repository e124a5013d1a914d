"""Property: whatever YAML data a user writes, loading it either succeeds or raises one
:class:`~servesim.errors.UserError` (printed as one line, exit 2) — never another exception.

Documents are built from the real key names (so the fuzz reaches deep into every section,
backend section and plugin option class) mixed with wrong keys and values of every YAML type.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import attrs
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servesim.config.engine import EngineConfig
from servesim.config.loader import load_config
from servesim.config.sections import ClusterConfig, ReportConfig, SyntheticConfig, TraceConfig, WorkloadConfig
from servesim.errors import UserError
from servesim.plugins import Plugins
from servesim.workload.synthetic import generate

PLUGINS = Plugins()


def _keys(*classes: type) -> list[str]:
    return sorted({f.name for cl in classes for f in attrs.fields(cl)})


KEYS = _keys(EngineConfig, ClusterConfig, WorkloadConfig, TraceConfig, SyntheticConfig, ReportConfig) + [
    "vllm",
    "sglang",
    "trtllm",
    "type",
    "path",
    "overlap_score_weight",
    "prefill_ms",
    "decode_ms",
    "profile",
    "schedule_policy",
    "page_size",
    "capacity_scheduler_policy",
    "max_batch_size",
    "kv_events",
    "fpm",
    "bogus",
]
NAMES = [
    "vllm",
    "sglang",
    "trtllm",
    "kv",
    "round_robin",
    "fixed",
    "polynomial",
    "interpolated",
    "jsonl",
    "memory",
    "mooncake",
    "lru",
    "fifo",
    "lifo",
    "prefill",
    "decode",
    "aggregated",
    "burst",
    "poisson",
    "uniform:1:4",
    "fixed:2",
    "normal:3:1",
    "choice:1,2",
    "normal:nan:1",
    "lognormal:5:900",
    "uniform:1:1e30",
    "fixed:0",
    "nope",
    "",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=5),
    st.sampled_from([0, 1, 2**70, -(2**70)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(NAMES),
    st.text(max_size=4),
)


def _nested(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.sampled_from(KEYS), children, max_size=4),
    )


values = st.recursive(scalars, _nested, max_leaves=12)

SECTION_KEYS = {
    "engine": _keys(EngineConfig) + ["vllm", "sglang", "trtllm"],
    "cluster": _keys(ClusterConfig),
    "workload": _keys(WorkloadConfig),
    "workload.synthetic": _keys(SyntheticConfig),
    "workload.trace": _keys(TraceConfig),
    "report": _keys(ReportConfig),
    "sinks": ["kv_events", "fpm"],
}


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    """One to three keys anywhere, each set to any value: mostly valid documents with one or
    two odd values, which is where unchecked values slip through."""
    doc: dict[str, Any] = {}
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        section = draw(st.sampled_from(sorted(SECTION_KEYS)))
        key = draw(st.sampled_from(SECTION_KEYS[section]))
        node = doc
        for part in section.split("."):
            child = node.get(part)
            if child is None:  # absent, or a null drawn earlier: a section from here on
                child = node[part] = {}
            node = child if isinstance(child, dict) else {}  # a scalar drawn earlier stays
        node[key] = draw(values)
    if draw(st.booleans()):
        workload = doc.get("workload")
        if workload is None:
            workload = doc["workload"] = {}
        if isinstance(workload, dict):
            synthetic = workload.get("synthetic")
            workload["synthetic"] = {
                **(synthetic if isinstance(synthetic, dict) else {}),
                "num_requests": 4,
            }
    return doc


FILE = Path(tempfile.mkdtemp(prefix="servesim-fuzz-")) / "fuzz.yaml"


@settings(max_examples=200, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_loading_any_document_is_ok_or_a_user_error(doc: dict[str, Any]) -> None:
    FILE.write_text(yaml.safe_dump(doc))
    try:
        loaded = load_config(str(FILE), (), PLUGINS)
    except UserError as exc:
        assert str(exc).startswith(str(FILE))
        return
    # A valid document: building the timing model is the one step `validate` adds, and
    # generating (a few requests of) the synthetic workload is where a run starts.
    try:
        loaded.timing_model()
    except UserError:
        pass
    workload = loaded.sim.workload
    if workload.trace is None:
        synthetic = workload.synthetic or SyntheticConfig()
        small = attrs.evolve(synthetic, num_requests=min(synthetic.num_requests, 6))
        assert generate(small, workload.seed).num_requests == small.num_requests


@settings(max_examples=100, derandomize=True, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                [
                    *SECTION_KEYS,
                    "engine.vllm",
                    "engine.timing_model",
                    "cluster.router_config",
                    "sinks.kv_events.0",
                    "x.y.z",
                ]
            ),
            st.sampled_from(KEYS),
            st.sampled_from(["1", "-1", "[1", "{a: 1}", "null", "1e3", "nope", ".nan", "[]", "'x'", ""]),
        ),
        max_size=4,
    )
)
def test_any_set_items_are_ok_or_a_user_error(items: list[tuple[str, str, str]]) -> None:
    sets = [f"{prefix}.{key}={value}" for prefix, key, value in items]
    try:
        load_config(None, sets, PLUGINS)
    except UserError:
        pass


NASTY: list[Any] = [
    -1,
    0,
    1,
    2**70,
    -(2**70),
    1.5,
    float("nan"),
    float("inf"),
    float("-inf"),
    "x",
    "",
    True,
    None,
    [],
    [1],
    {},
    {"a": 1},
]


def _key_paths() -> list[tuple[str, list[str]]]:
    """``(section path, keys)`` for every config class a user can reach, plugin ones included."""
    backends = PLUGINS.backends()
    paths = [(section, keys) for section, keys in SECTION_KEYS.items() if section != "engine"]
    paths.append(("engine", _keys(EngineConfig)))
    for name in ("vllm", "sglang", "trtllm"):
        cls = backends.get(name).config_class
        if cls is not None:
            paths.append((f"engine.{name}", _keys(cls)))
    kv = PLUGINS.registry("router").get("kv").config_class
    paths.append(("cluster.router_config", _keys(kv)))
    fixed = PLUGINS.registry("timing_model").get("fixed").config_class
    paths.append(("engine.timing_model", _keys(fixed)))
    return paths


def _document(section: str, key: str, value: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"workload": {"synthetic": {"num_requests": 4}}}
    if section.startswith("engine.") and section.split(".")[1] in ("vllm", "sglang", "trtllm"):
        doc["engine"] = {"backend": section.split(".")[1]}
    if section == "cluster.router_config":
        doc["cluster"] = {"router": "kv"}
    if section == "engine.timing_model":
        doc["engine"] = {"timing_model": {"type": "fixed"}}
    if section == "workload.trace":
        doc["workload"] = {"trace": {"path": "t.jsonl"}}
    node = doc
    for part in section.split("."):
        node = node.setdefault(part, {})
    node[key] = value
    return doc


def test_every_key_with_every_odd_value() -> None:
    """Each reachable key set to each odd value, alone: a UserError, or a configuration that
    builds its timing model and generates its workload. Problems are collected, not stopped at."""
    import servesim.config.loader as loader

    # load_config builds a fresh converter (code generation per class) on every call; one
    # shared converter keeps ~1,000 loads fast and structures exactly the same way.
    ctx = loader.LoadContext(loader.make_converter(), PLUGINS, "sim.yaml", {})
    crashes = []
    cases = 0
    for section, keys in _key_paths():
        for key in keys:
            for value in NASTY:
                cases += 1
                doc = _document(section, key, value)
                try:
                    loaded = loader.build(doc, ctx)
                    loaded.timing_model()
                    workload = loaded.sim.workload
                    if workload.trace is None:
                        generate(workload.synthetic or SyntheticConfig(), workload.seed)
                except UserError:
                    pass
                except Exception as exc:  # noqa: BLE001 - collecting every crash is the point
                    crashes.append(f"{section}.{key}={value!r}: {type(exc).__name__}: {exc}")
    assert cases > 900
    assert crashes == []


def _outcome(doc: dict[str, Any], conv: Any) -> tuple[str, Any]:
    """What building ``doc`` with the converter ``conv`` gives: the error's text, or the
    structured sections and the resolved configuration."""
    import copy
    import json

    import servesim.config.loader as loader

    ctx = loader.LoadContext(conv, PLUGINS, "sim.yaml", {})
    try:
        loaded = loader.build(copy.deepcopy(doc), ctx)
    except UserError as exc:
        return "error", str(exc)
    engine = loaded.engine
    structured = (loaded.sim, engine.backend_config, engine.timing_config, loaded.router_config,
                  loaded.sink_specs)
    return "ok", (repr(structured), structured, json.dumps(loaded.resolved(), sort_keys=True))


def _same_with_and_without_cattrs(doc: dict[str, Any], shared: Any) -> None:
    from servesim.config.direct_convert import LazyConverter

    direct, via_cattrs = _outcome(doc, LazyConverter()), _outcome(doc, shared)
    assert direct == via_cattrs, doc


SHARED = None


def _shared_converter() -> Any:
    global SHARED
    if SHARED is None:
        import servesim.config.loader as loader

        SHARED = loader.make_converter()
    return SHARED


@settings(max_examples=300, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_the_direct_reading_gives_what_cattrs_gives(doc: dict[str, Any]) -> None:
    """``LazyConverter`` (structuring without cattrs where it can) and the cattrs converter
    build the same sections, plugin options and resolved configuration, or the same error."""
    _same_with_and_without_cattrs(doc, _shared_converter())


def test_the_direct_reading_gives_what_cattrs_gives_for_every_key_and_odd_value() -> None:
    shared = _shared_converter()
    valid = [{"engine": {"backend": b}} for b in ("vllm", "sglang", "trtllm")]
    valid += [{"engine": {"timing_model": {"type": "fixed", "prefill_ms": 2, "decode_ms": 1.5}}},
              {"cluster": {"workers": 2, "router": "kv", "router_config": {"overlap_score_weight": 2}}},
              {"sinks": {"kv_events": [{"type": "memory"}]}}, {}]
    for doc in valid:
        _same_with_and_without_cattrs(doc, shared)
    for section, keys in _key_paths():
        for key in keys:
            for value in NASTY:
                _same_with_and_without_cattrs(_document(section, key, value), shared)
