"""Mooncake JSONL parsing (every error names file:line) and synthetic workloads."""

from __future__ import annotations

import json

import pytest
from servesim.config.sections import SyntheticConfig
from servesim.errors import ConfigError, TraceError
from servesim.workload.mooncake import MooncakeTrace
from servesim.workload.synthetic import generate, parse_length_spec


def parse(*lines: str, tbs: int = 4):
    return MooncakeTrace.parse_lines(list(lines), "t.jsonl", tbs)


def j(**kw) -> str:
    return json.dumps(kw)


def test_fields_aliases_and_clamping(tmp_path):
    path = tmp_path / "trace.jsonl"
    path.write_text(
        "\n".join([
            j(timestamp=10, input_length=5, output_length=3, hash_ids=[7, 8]),
            "",
            j(created_time=4, input_tokens=100, output_tokens=2, hash_ids=[7]),
            j(timestamp=20, output_length=1, hash_ids=[1, 2, 3]),
        ]) + "\n"
    )
    wl = MooncakeTrace.read(str(path), trace_block_size=4)
    turns = wl.turns()
    assert [t.input_length for t in turns] == [5, 4, 12]  # 100 clamps to 1 block of 4
    assert [t.output_length for t in turns] == [3, 2, 1]
    assert [t.line for t in turns] == [1, 3, 4]
    assert turns[0].prompt.tokens() == [7, 7, 7, 7, 8]
    # sessions and request ids keep file order; timestamps stay raw (rebased at replay)
    assert [s.turns[0].request_id for s in wl.sessions] == [0, 1, 2]
    assert [s.session_id for s in wl.sessions] == ["request_1", "request_3", "request_4"]
    assert [s.start_ms for s in wl.sessions] == [10.0, 4.0, 20.0]


def test_sessions_and_delays():
    wl = parse(
        j(timestamp=0, output_length=1, hash_ids=[1], session_id="a"),
        j(timestamp=5, output_length=1, hash_ids=[2], session_id=7),
        j(output_length=1, hash_ids=[1, 2], session_id="a", delay=3.5),
        j(timestamp=40, output_length=1, hash_ids=[2, 3], session_id=7),
        j(output_length=1, hash_ids=[1, 2, 3], session_id="a", delay_ms=2),
        j(output_length=1, hash_ids=[2, 3, 4], session_id=7),
    )
    a, b = wl.sessions
    assert [t.delay_ms for t in a.turns] == [0.0, 3.5, 2.0]
    assert b.session_id == "7" and [t.delay_ms for t in b.turns] == [0.0, 35.0, 0.0]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "invalid JSON"),
        ("[1, 2]", "expected a JSON object"),
        (j(timestamp=0, output_length=1), "missing required field 'hash_ids'"),
        (j(timestamp=0, hash_ids=[1]), "missing required field 'output_length'"),
        (j(timestamp=0, output_length=-1, hash_ids=[1]), "'output_length' must be a non-negative"),
        (j(timestamp=0, output_length=1.5, hash_ids=[1]), "'output_length' must be a non-negative"),
        (j(timestamp=0, output_length=1, input_length=-3, hash_ids=[1]), "'input_length' must be"),
        (j(timestamp=0, output_length=1, hash_ids="abc"), "'hash_ids' must be a list"),
        (j(timestamp=0, output_length=1, hash_ids=[1, -2]), "'hash_ids[1]' must be"),
        (j(timestamp=0, output_length=1, hash_ids=[1, True]), "'hash_ids[1]' must be"),
        (j(timestamp=0, output_length=1, hash_ids=[]), "'hash_ids' must not be empty"),
        (j(timestamp=0, output_length=1, input_length=0, hash_ids=[1]), "must be positive"),
        (j(timestamp="soon", output_length=1, hash_ids=[1]), "'timestamp' must be a finite"),
        (j(timestamp=0, output_length=1, hash_ids=[1], delay=5), "not allowed on a session's first"),
        (j(timestamp=0, output_length=1, output_tokens=1, hash_ids=[1]), "both 'output_length'"),
        (j(timestamp=0, output_length=1, hash_ids=[1], session_id=[1]), "'session_id' must be"),
        (j(timestamp=0, output_length=1, hash_ids=[1], priority=1.5), "'priority' must be an int"),
        (j(timestamp=0, output_length=1, hash_ids=[1], priority=True), "'priority' must be an int"),
        (j(timestamp=0, output_length=1, hash_ids=[1], lora=0), "'lora' must be an adapter id"),
        (j(timestamp=0, output_length=1, hash_ids=[1], lora=""), "'lora' must be an adapter id"),
        (j(timestamp=0, output_length=1, hash_ids=[1], lora=[2]), "'lora' must be an adapter id"),
    ],
)
def test_malformed_line_names_file_and_line(line, message):
    good = j(timestamp=0, output_length=1, hash_ids=[1])
    with pytest.raises(TraceError) as info:
        parse(good, "", line)
    assert info.value.file == "t.jsonl" and info.value.line == 3
    assert str(info.value).startswith("t.jsonl:3: ")
    assert message in str(info.value)


def test_priority_and_lora_fields():
    """``priority`` defaults to 0; ``lora`` keeps integer ids and gives each new name the id
    one past every id seen so far; absent or null is the base model (0)."""
    lines = [
        j(timestamp=0, output_length=1, hash_ids=[1], priority=-2, lora="a"),
        j(timestamp=1, output_length=1, hash_ids=[1], lora=3),
        j(timestamp=2, output_length=1, hash_ids=[1], lora="b"),
        j(timestamp=3, output_length=1, hash_ids=[1], lora="a", priority=7),
        j(timestamp=4, output_length=1, hash_ids=[1], lora=None),
        j(timestamp=5, input_length=4, output_length=1, hash_ids=[1]),
    ]
    workload = parse(*lines)
    turns = workload.turns()
    assert [(t.priority, t.lora) for t in turns] == [(-2, 1), (0, 3), (0, 4), (7, 1), (0, 0), (0, 0)]
    # names (not ids) and the requests that gave them, for servesim.replay.adapter_names
    assert workload.lora_names == {"a": [0, 3], "b": [2]}


@pytest.mark.parametrize(
    ("second", "message"),
    [
        (j(output_length=1, hash_ids=[1], session_id="s", delay=-1), "'delay' must be >= 0"),
        (j(output_length=1, hash_ids=[1], session_id="s", delay=1, delay_ms=1), "both 'delay'"),
        (j(timestamp=5, output_length=1, hash_ids=[1], session_id="s"), "before the previous"),
        ('{"output_length": 1, "hash_ids": [1], "session_id": "s", "delay": NaN}', "finite"),
    ],
)
def test_bad_later_turns(second, message):
    first = j(timestamp=10, output_length=1, hash_ids=[1], session_id="s")
    with pytest.raises(TraceError, match=message) as info:
        parse(first, second)
    assert info.value.line == 2


def test_first_turn_may_omit_timestamp_and_carry_zero_delay():
    wl = parse(j(output_length=1, hash_ids=[1], session_id="s", delay=0),
               j(output_length=1, hash_ids=[1, 2], session_id="s", delay=4))
    assert wl.sessions[0].start_ms is None
    assert [t.delay_ms for t in wl.sessions[0].turns] == [0.0, 4.0]
    with pytest.raises(TraceError, match="previous turn of the session has none") as info:
        parse(j(output_length=1, hash_ids=[1], session_id="s"),
              j(timestamp=9, output_length=1, hash_ids=[1], session_id="s"))
    assert info.value.line == 2


def test_unreadable_file(tmp_path):
    with pytest.raises(TraceError, match="cannot read trace") as info:
        MooncakeTrace.read(str(tmp_path / "missing.jsonl"), trace_block_size=4)
    assert info.value.file.endswith("missing.jsonl")


def test_length_specs_are_seeded_and_bounded():
    import numpy as np

    rng = np.random.default_rng(1)
    assert parse_length_spec("fixed:7")(rng) == 7
    u = parse_length_spec("uniform:3:5")
    assert {u(rng) for _ in range(200)} == {3, 4, 5}
    n = parse_length_spec("normal:100:1000:10:20")
    assert all(10 <= n(rng) <= 20 for _ in range(100))
    ln = parse_length_spec("lognormal:50:0")
    assert ln(rng) == 50
    c = parse_length_spec("choice:1,9")
    assert {c(rng) for _ in range(100)} == {1, 9}
    for bad in ("fixed:-1", "uniform:5:3", "gamma:1:2", "uniform:a:b", "choice:1.5", "fixed"):
        with pytest.raises(ConfigError, match="bad length spec") as info:
            parse_length_spec(bad, "workload.synthetic.input_length")
        assert info.value.path == "workload.synthetic.input_length"


def test_synthetic_constant_rate_shared_prefixes_and_sessions():
    cfg = SyntheticConfig(num_requests=7, input_length="fixed:130", output_length="fixed:5",
                          arrival="constant", rate=10.0, prefix_groups=2, prefix_ratio=0.5,
                          turns_per_session=2, inter_turn_delay_ms=3.0, block_size=64)
    wl = generate(cfg, seed=3)
    assert wl.num_requests == 7 and len(wl.sessions) == 4
    assert [s.start_ms for s in wl.sessions] == [0.0, 100.0, 200.0, 300.0]
    assert [len(s.turns) for s in wl.sessions] == [2, 2, 2, 1]
    s0, s1, s2 = (s.turns[0].prompt for s in wl.sessions[:3])
    # half of 130 tokens = 1 whole shared block of 64 per group (sessions 0 and 2 share group 0)
    assert s0.hash_ids[0] == s2.hash_ids[0] != s1.hash_ids[0]
    assert s0.hash_ids[1:] != s2.hash_ids[1:]
    t1 = wl.sessions[0].turns[1]
    assert t1.delay_ms == 3.0 and len(t1.prompt) == 3 * 64 + 130
    assert t1.prompt.hash_ids[:3] == s0.hash_ids


def test_synthetic_is_deterministic_per_seed():
    cfg = SyntheticConfig(num_requests=50)

    def shape(seed):
        wl = generate(cfg, seed)
        return [(s.start_ms, [(len(t.prompt), t.output_length) for t in s.turns]) for s in wl.sessions]

    assert shape(1) == shape(1)
    assert shape(1) != shape(2)
    starts = [s.start_ms for s in generate(cfg, 1).sessions]
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert all(g >= 0 for g in gaps) and 150 < sum(gaps) / len(gaps) < 400  # Poisson at 4 req/s


def test_synthetic_rejects_bad_values():
    with pytest.raises(ConfigError) as info:
        generate(SyntheticConfig(arrival="gamma"))
    assert info.value.path == "workload.synthetic.arrival"
    with pytest.raises(ConfigError) as info:
        generate(SyntheticConfig(prefix_ratio=1.5))
    assert info.value.path == "workload.synthetic.prefix_ratio"


@pytest.mark.parametrize("text", [
    '{"a": 1}', '{"a": 1}\n', '{"a": 1}\r\n', ' {"a": 1}', '\t[1, 2]\n', '{"a": 1} x',
    '{"a": 1}{"b": 2}', '{"a": 1}\u00a0', '\ufeff{"a": 1}', '{"a":', '{"a": 1,}', "{'a': 1}",
    '{"a": NaN, "b": -Infinity}', '1e400', '"s"', '{"x": [1, {"y": "\\u00e9"}]}', '{"a": 1}  \n',
])
def test_lines_decode_exactly_as_json_loads(text):
    """The trace reader's line decoder (the C scanner straight away) gives json.loads's value,
    or its exception with the same message."""
    from servesim.workload.mooncake import _loads

    def outcome(decode):
        try:
            return "value", repr(decode(text))
        except ValueError as exc:
            return type(exc).__name__, str(exc)

    assert outcome(_loads) == outcome(json.loads)
