"""The pass-log format of issue 9 item 1: key order, id mapping, determinism, validation."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from servesim.contract import ScheduleRecord
from servesim.errors import TraceError
from servesim.replay.passlog import FIELDS, PassLogWriter, dumps, make_line, parse_line, read_pass_log


def _record() -> ScheduleRecord:
    # Batch order deliberately not sorted: running 12 first, then the newly admitted 3.
    return ScheduleRecord(
        scheduled={12: 1, 3: 240},
        new_hits={3: 64},
        resumed=[],
        preempted=[5],
        finished=[12],
        running=1,
        waiting=2,
        free_blocks=17,
    )


def test_line_has_issue_keys_in_fixed_order_and_batch_order() -> None:
    buf = io.StringIO()
    w = PassLogWriter(buf)
    w.write(0, 1, 7, 10.0, 12.5, _record())
    text = buf.getvalue()
    assert text == (
        '{"worker":0,"dp_rank":1,"pass":7,"start_ms":10.0,"end_ms":12.5,'
        '"scheduled":{"12":1,"3":240},"new_hits":{"3":64},"resumed":{},"preempted":["5"],'
        '"finished":["12"],"running":1,"waiting":2,"free_blocks":17}\n'
    )
    assert list(json.loads(text)) == list(FIELDS)
    assert list(json.loads(text)["scheduled"]) == ["12", "3"]
    assert w.lines_written == 1


def test_id_mapping_by_dict_and_by_function() -> None:
    rec = _record()
    by_dict = make_line(0, 0, 0, 0.0, 1.0, rec, {12: "a", 3: "b", 5: "c"})
    assert by_dict.scheduled == {"a": 1, "b": 240}
    assert by_dict.preempted == ["c"] and by_dict.finished == ["a"] and by_dict.new_hits == {"b": 64}
    by_fn = make_line(0, 0, 0, 0.0, 1.0, rec, lambda rid: f"r{rid - 1}")
    assert by_fn.scheduled == {"r11": 1, "r2": 240}


def test_writer_round_trips_through_reader(tmp_path: Path) -> None:
    path = tmp_path / "passes.jsonl"
    with PassLogWriter(path) as w:
        first = w.write(2, 0, 0, 0.0, 3.25, _record())
        second = w.write(2, 0, 1, 3.25, 4.0, ScheduleRecord(scheduled={3: 1}, running=1))
    back = read_pass_log(path)
    assert back == [first, second]
    assert back[1].pass_index == 1 and back[1].start_ms == 3.25 and back[1].scheduled == {"3": 1}


def test_same_input_gives_same_bytes(tmp_path: Path) -> None:
    outs = []
    for k in range(2):
        p = tmp_path / f"{k}.jsonl"
        with PassLogWriter(p) as w:
            for i in range(3):
                w.write(0, 0, i, i * 1.1, i * 1.1 + 0.7, _record())
        outs.append(p.read_bytes())
    assert outs[0] == outs[1]
    assert outs[0].count(b"\n") == 3


def test_non_finite_time_is_refused() -> None:
    w = PassLogWriter(io.StringIO())
    with pytest.raises(ValueError, match="non-finite"):
        w.write(0, 0, 0, 0.0, float("inf"), _record())
    assert w.lines_written == 0


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("waiting"), "missing key"),
        (lambda d: d.update(extra=1), "unknown key"),
        (lambda d: d.update(running=-1), "'running' must be a non-negative int"),
        (lambda d: d.update(scheduled={"1": "x"}), "'scheduled'\\['1'\\] must be an int"),
        (lambda d: d.update(preempted="5"), "'preempted' must be a list"),
        (lambda d: d.update(resumed=["5"]), "'resumed' must be an object"),
        (lambda d: d.update(end_ms=-1.0), "'end_ms' is before 'start_ms'"),
    ],
)
def test_reader_names_file_and_line(tmp_path: Path, mutate, message: str) -> None:
    good = make_line(0, 0, 0, 0.0, 1.0, _record()).to_json()
    bad = dict(good)
    mutate(bad)
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps(good) + "\n\n" + json.dumps(bad) + "\n")
    with pytest.raises(TraceError, match=message) as err:
        read_pass_log(path)
    assert f"{path}:3:" in str(err.value)


def test_reader_reports_invalid_json(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text("{not json\n")
    with pytest.raises(TraceError, match=":1: invalid JSON"):
        read_pass_log(path)
    path.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(TraceError, match=":1: JSON nested too deeply to read"):
        read_pass_log(path)


def test_readmissions_move_from_new_hits_to_resumed_with_their_hit() -> None:
    rec = ScheduleRecord(scheduled={4: 1, 8: 25, 9: 145}, new_hits={8: 224, 9: 64}, resumed=[8, 6])
    line = make_line(0, 0, 0, 0.0, 1.0, rec)
    assert line.new_hits == {"9": 64}
    # 6 was reported resumed without a hit: the log says null rather than inventing 0.
    assert line.resumed == {"8": 224, "6": None}
    assert '"resumed":{"8":224,"6":null}' in dumps(line)
    assert parse_line(json.loads(dumps(line))) == line


def test_parse_line_accepts_dumps_output() -> None:
    line = make_line(4, 2, 9, 1.5, 2.5, _record())
    assert parse_line(json.loads(dumps(line))) == line
