"""FpmRun: a run's forward-pass metrics by column. It reads as the objects stepping builds, the
JSONL sink's lines from the columns equal its line of each object, and only sinks that declare
``encodes_fpm_runs`` on the class that makes their lines are handed runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from servesim.contract import ForwardPassMetrics
from servesim.fast.fpm_runs import FpmRun, encodes_fpm_runs
from servesim.fast.sink_merge import SinkMerge
from servesim.sinks.base import SinkError
from servesim.sinks.builtin import JsonlFpmSink, JsonlSinkConfig, MemoryFpmSink
from servesim.sinks.jsonl_lines import fpm_line, fpm_run_lines

count = st.integers(0, 10**9)
value = st.floats(0, 1e12)


@st.composite
def runs(draw: st.DrawFn) -> tuple[FpmRun, list[float]]:
    k = draw(st.integers(1, 6))
    base = dict(worker_id=draw(st.integers(0, 9)), dp_rank=draw(st.integers(0, 8)),
                num_prefill_requests=draw(count), sum_prefill_tokens=draw(count),
                var_prefill_length=draw(value), sum_prefill_kv_tokens=draw(count),
                num_queued_prefill=draw(count), sum_queued_prefill_tokens=draw(count),
                var_queued_prefill_length=draw(value), num_queued_decode=draw(count),
                sum_queued_decode_kv_tokens=draw(count), var_queued_decode_kv_tokens=draw(value))
    ints = [draw(st.lists(count, min_size=k, max_size=k)) for _ in range(2)]
    floats = [draw(st.lists(value, min_size=k, max_size=k)) for _ in range(2)]
    ats = draw(st.lists(st.one_of(value, st.integers(0, 10**9)), min_size=k, max_size=k))
    return FpmRun(base, draw(count), ints[0], ints[1], floats[0], floats[1]), ats


def _base(**over: object) -> dict[str, object]:
    """Every field but the five per-pass columns, zero unless given."""
    base: dict[str, object] = dict(
        worker_id=0, dp_rank=0, num_prefill_requests=0, sum_prefill_tokens=0,
        var_prefill_length=0.0, sum_prefill_kv_tokens=0, num_queued_prefill=0,
        sum_queued_prefill_tokens=0, var_queued_prefill_length=0.0, num_queued_decode=0,
        sum_queued_decode_kv_tokens=0, var_queued_decode_kv_tokens=0.0)
    base.update(over)
    return base


def _objects(run: FpmRun) -> list[ForwardPassMetrics]:
    return [ForwardPassMetrics(**run.base, counter_id=run.counter0 + j,
                               num_decode_requests=run.num_decode[j],
                               sum_decode_kv_tokens=run.sum_decode_kv[j],
                               var_decode_kv_tokens=run.var_decode[j], duration_ms=run.durations[j])
            for j in range(len(run))]


@given(w=st.integers(0, 1000), r=runs())
def test_run_lines_are_the_lines_of_its_objects(w: int, r: tuple[FpmRun, list[float]]) -> None:
    run, ats = r
    objs = _objects(run)
    assert list(run) == objs and run == objs and len(run) == len(objs)
    assert run[-1] == objs[-1] and run[1:] == objs[1:]
    assert fpm_run_lines(w, ats, run) == [fpm_line(w, at, m) for at, m in zip(ats, objs, strict=True)]


def test_non_finite_values_are_refused_as_for_one_line() -> None:
    base = _base()
    inf, nan = float("inf"), float("nan")
    for durations, variances, ats in (([1.0, inf], [0.0, 0.0], [1.0, 2.0]),
                                      ([1.0, 2.0], [nan, 0.0], [1.0, 2.0]),
                                      ([1.0, 2.0], [0.0, 0.0], [1.0, inf])):
        with pytest.raises(ValueError, match="not JSON compliant"):
            fpm_run_lines(0, ats, FpmRun(base, 0, [1, 1], [2, 3], variances, durations))
    with pytest.raises(ValueError, match="not JSON compliant"):
        fpm_run_lines(0, [1.0], FpmRun(_base(var_prefill_length=float("inf")), 0, [1], [2], [0.0], [1.0]))
    with pytest.raises(IndexError):
        FpmRun(base, 0, [1], [2], [0.0], [1.0])[1]


class _OwnLines(JsonlFpmSink):
    def encode(self, worker_id: int, at_ms: float, metrics: ForwardPassMetrics) -> str:
        return "x\n"


class _Vouched(_OwnLines):
    encodes_fpm_runs = True


def test_only_sinks_that_declare_it_where_they_make_lines_get_runs(tmp_path: Path) -> None:
    cfg = JsonlSinkConfig(path=str(tmp_path / "f.jsonl"))
    plain = JsonlFpmSink(cfg, validating=True)  # opens nothing
    assert encodes_fpm_runs([plain])
    assert not encodes_fpm_runs([])
    assert not encodes_fpm_runs([plain, MemoryFpmSink()])  # objects for the memory sink
    assert not encodes_fpm_runs([_OwnLines(cfg, validating=True)])  # encode, not declared again
    assert encodes_fpm_runs([_Vouched(cfg, validating=True)])
    inst = JsonlFpmSink(cfg, validating=True)
    inst.encodes_fpm_runs = True  # type: ignore[misc]  # an instance's say-so is not enough
    assert not encodes_fpm_runs([inst])


def test_merge_buffers_a_run_as_one_entry_a_pass(tmp_path: Path) -> None:
    """A run's lines through the merge buffer: the file of passes fed one at a time."""
    base = _base(worker_id=1)
    run = FpmRun(base, 5, [2, 2, 1], [10, 12, 7], [1.0, 1.0, 0.0], [3.0, 3.0, 2.5])
    ends = [13.0, 16.0, 18.5]
    paths = []
    for by_run in (False, True):
        path = tmp_path / f"fpm-{by_run}.jsonl"
        sink = JsonlFpmSink(JsonlSinkConfig(path=str(path)))
        m = SinkMerge([], [sink])
        m.fpm(0, 14.0, 10.0, ForwardPassMetrics(counter_id=99))  # another worker, in between
        if by_run:
            m.fpm_run(1, ends, 10.0, 0, [sink.encode_run(1, ends, run)])
        else:
            for j, fpm in enumerate(run):
                m.fpm(1, ends[j], ends[j - 1] if j else 10.0, fpm)
        m.release_all()
        sink.close()
        paths.append(path.read_text())
    assert paths[0] == paths[1]
    assert [line.split('"counter_id": ')[1].split(",")[0] for line in paths[1].splitlines()] == \
        ["5", "99", "6", "7"]


def test_a_run_encoding_failure_is_a_sink_error(tmp_path: Path) -> None:
    sink = JsonlFpmSink(JsonlSinkConfig(path=str(tmp_path / "f.jsonl")))
    base = _base()
    bad = FpmRun(base, 0, [1], [2], [0.0], [float("nan")])
    with pytest.raises(SinkError, match="cannot write"):
        sink.encode_run(0, [1.0], bad)
    sink.close()


def test_a_run_failure_names_the_failing_pass_as_stepping_would(tmp_path: Path) -> None:
    from servesim.sinks.publish import encode, encode_run

    sink = JsonlFpmSink(JsonlSinkConfig(path=str(tmp_path / "f.jsonl")))
    run = FpmRun(_base(), 0, [1, 1], [2, 3], [0.0, float("nan")], [1.0, 2.0])
    with pytest.raises(SinkError) as by_run:
        encode_run(sink, 0, [4.0, 6.0], run)
    with pytest.raises(SinkError) as by_pass:
        encode(sink, 0, 6.0, run[1])
    assert str(by_run.value) == str(by_pass.value)
    assert "failed at 6.0 ms" in str(by_run.value)
    sink.close()


def test_run_templates_kept_by_constants_tell_signed_zeros_and_ints_apart() -> None:
    """The filled templates are reused by the run's constants: equal-comparing constants
    that json writes differently (``-0.0`` and ``0.0``) must not share one."""
    for over in ({}, {"var_prefill_length": -0.0}, {"var_queued_prefill_length": -0.0}, {},
                 {"var_queued_decode_kv_tokens": -0.0}, {"num_queued_decode": 3}, {}):
        run = FpmRun(_base(**over), 5, [1, 2], [3, 4], [0.5, -0.0], [1.25, 2.0])
        ats = [1.0, 2]
        assert fpm_run_lines(7, ats, run) == [fpm_line(7, at, m) for at, m in zip(ats, _objects(run), strict=True)]
