"""Reading a trace in blocks of whole lines gives the lines and errors of reading it whole."""

from __future__ import annotations

import pytest
from servesim.errors import TraceError
from servesim.workload.mooncake import MooncakeTrace
from servesim.workload.textlines import iter_text_lines, read_text_lines

TEXT = (
    "\ufeff"  # a byte-order mark, dropped
    '{"a": 1}\r\n'
    "\n"
    "second\u2028half\n"  # a line break splitlines knows inside one \n-line
    "x\ry\n"
    "\u00e9t\u00e9 \u2603\n"
    "\x85after-nel\n"
    "last without newline"
)


@pytest.mark.parametrize("block", [1, 2, 3, 7, 64, 1 << 20])
def test_blocks_give_the_lines_of_the_whole_text(tmp_path, block):
    path = tmp_path / "t.jsonl"
    path.write_bytes(TEXT.encode("utf-8"))
    expected = TEXT.encode("utf-8").decode("utf-8-sig").splitlines()
    assert list(iter_text_lines(str(path), "trace", block)) == expected
    assert read_text_lines(str(path), "trace") == expected


@pytest.mark.parametrize("block", [1, 5, 1 << 20])
def test_a_bad_byte_in_a_later_block_names_its_line_and_column(tmp_path, block):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"one\ntwo\r\nthr\xe9e\nfour\n")
    lines = iter_text_lines(str(path), "trace", block)
    with pytest.raises(TraceError) as err:
        list(lines)
    assert str(err.value) == f"{path}:3: not UTF-8 text: byte 0xe9 at column 4"


def test_empty_and_missing_files(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    assert list(iter_text_lines(str(path), "trace")) == []
    with pytest.raises(TraceError, match="cannot read trace: No such file"):
        list(iter_text_lines(str(tmp_path / "missing.jsonl"), "trace"))


def test_a_trace_read_lazily_names_the_bad_line(tmp_path, monkeypatch):
    """The trace reader takes one line at a time; a bad field far into the file still names
    that line, and lines after it are never read."""
    import servesim.workload.textlines as textlines

    monkeypatch.setattr(textlines, "BLOCK_BYTES", 64)
    good = '{"timestamp": 0, "input_length": 8, "output_length": 2, "hash_ids": [1]}\n'
    path = tmp_path / "t.jsonl"
    path.write_text(good * 40 + '{"timestamp": 0, "output_length": 2, "hash_ids": [1, "a"]}\n'
                    + good * 20 + "\xff not even read\n", encoding="latin-1")
    with pytest.raises(TraceError) as err:
        MooncakeTrace.read(str(path), trace_block_size=4)
    assert str(err.value) == (f"{path}:41: 'hash_ids[1]' must be a non-negative integer, "
                              "got 'a'")


def test_prompt_ids_are_compact_and_hash_as_before():
    """Trace hash ids are kept in an int64 array (a tuple when one does not fit); the hashes
    depend only on the ids' low 32 bits either way, and survive forgetting the cache."""
    from array import array

    from servesim.tokens import RepeatedBlockTokens

    small = RepeatedBlockTokens([5, 3, 7], 4, 10)
    huge = RepeatedBlockTokens([(1 << 64) + 5, 3, 7], 4, 10)
    assert isinstance(small.hash_ids, array) and list(small.hash_ids) == [5, 3, 7]
    assert huge.hash_ids == ((1 << 64) + 5, 3, 7)
    first = small.block_hashes(2)
    assert first == huge.block_hashes(2) and len(first[0]) == 5
    small.forget_block_hashes()
    assert small.block_hashes(2) == first
    assert small.tokens(2, 6) == [5, 5, 3, 3]


def test_a_line_past_the_limit_is_an_error_naming_it(tmp_path, monkeypatch):
    from servesim.workload import textlines

    monkeypatch.setattr(textlines, "MAX_LINE_BYTES", 100)
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"short\n" + b"0" * 99 + b"\n" + b"0" * 150)
    with pytest.raises(TraceError, match=r"t.jsonl:3: line longer than 0 MiB \(limit MAX_LINE_BYTES\)"):
        list(iter_text_lines(str(path), "trace", 16))
    path.write_bytes(b"short\n" + b"0" * 99 + b"\n")
    assert [len(x) for x in iter_text_lines(str(path), "trace", 16)] == [5, 99]
