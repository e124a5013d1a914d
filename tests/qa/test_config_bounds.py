"""A config is bounded once its YAML aliases are expanded: an alias bomb, a recursive alias
or absurd nesting is one line naming the limit (exit 2), decided in time linear in the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from servesim.cli.main import main


def _bomb(levels: int) -> str:
    lines = ["a0: &a0 {type: memory}"]
    lines += [f"a{i}: &a{i} {{type: tee, sinks: [{', '.join([f'*a{i - 1}'] * 10)}]}}"
              for i in range(1, levels + 1)]
    return "x-anchors:\n" + "".join(f"  {line}\n" for line in lines) + f"sinks:\n  kv_events: [*a{levels}]\n"


@pytest.mark.parametrize(("text", "message"), [
    (_bomb(8), "the config holds more than 100,000 values once its YAML aliases are expanded "
               "(limit MAX_VALUES)"),
    ("engine: &e {x: [*e]}\n", "a YAML alias refers to a value that contains it"),
    ("engine: " + "[" * 100 + "]" * 100 + "\n", "the config nests deeper than 64 levels (limit MAX_DEPTH)"),
], ids=["alias-bomb", "recursive-alias", "deep"])
def test_an_unbounded_config_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                         message: str) -> None:
    path = tmp_path / "sim.yaml"
    path.write_text(text)
    assert main(["validate", str(path)]) == 2
    assert capsys.readouterr().err == f"servesim: error: {path}: {message}\n"


def test_shared_values_within_the_bounds_are_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "sim.yaml"
    path.write_text(_bomb(3).replace("x-anchors", "x-ok"))  # 1,000 memory sinks: fine
    assert main(["validate", str(path)]) == 2  # but x-ok is no section: the usual key error
    assert "x-ok: unknown key" in capsys.readouterr().err


DIGITS = "9" * 5000


def test_an_integer_longer_than_python_reads_is_one_line(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "sim.yaml"
    path.write_text(f"engine:\n  max_num_seqs: {DIGITS}\n")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"servesim: error: {path}: invalid YAML: Exceeds the limit (4300 digits)")
    assert err.count("\n") == 1
    assert main(["validate", "--set", f"engine.max_num_seqs={DIGITS}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"servesim: error: --set engine.max_num_seqs={DIGITS}: invalid YAML: Exceeds")
    assert err.count("\n") == 1


def test_an_endless_config_file_is_refused_at_its_limit(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "/dev/zero"]) == 2
    assert capsys.readouterr().err == (
        "servesim: error: /dev/zero: config file is larger than 16 MiB (limit MAX_CONFIG_BYTES)\n")


def test_an_endless_trace_is_refused_at_the_line_limit(capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from servesim.workload import textlines

    monkeypatch.setattr(textlines, "MAX_LINE_BYTES", 4 << 20)  # the limit is 64 MiB
    assert main(["run", "--trace", "/dev/zero"]) == 2
    assert capsys.readouterr().err == ("servesim: error: /dev/zero:1: line longer than 4 MiB "
                                       "(limit MAX_LINE_BYTES); is this a line-oriented file?\n")


@pytest.mark.parametrize(("line", "message"), [
    ('{"timestamp": 1' + "0" * 400 + ', "input_length": 10, "output_length": 5, "hash_ids": [1]}',
     "a number out of range: int too large to convert to float"),
    ('{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1], "x": '
     + "[" * 5000 + "]" * 5000 + "}", "JSON nested too deeply to read"),
], ids=["400-digit-timestamp", "deep-json"])
def test_a_trace_line_out_of_range_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               line: str, message: str) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(line + "\n")
    assert main(["run", "--quiet", "--trace", str(trace)]) == 2
    assert capsys.readouterr().err == f"servesim: error: {trace}:1: {message}\n"
