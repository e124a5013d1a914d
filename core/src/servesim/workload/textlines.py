"""Reading a line-oriented input file (a trace, forward-pass metrics, per-request lines) so
that every problem is one ``FILE[:LINE]: ...`` error: an unreadable path, and bytes that are
not UTF-8, named by line and column (a user's editor shows those, not a byte offset).

The file is read in blocks of whole lines (:func:`iter_text_lines`), so a reader that takes
one line at a time holds one block of the file, never all of it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from servesim.errors import TraceError, UserError

BLOCK_BYTES = 1 << 20
"""About how much of the file is decoded at once (a block ends at a line end; a longer
line is one block)."""

MAX_LINE_BYTES = 64 << 20
"""The longest line a line-oriented input may have (64 MiB: a Mooncake line naming a million
hash ids is about 8 MiB). A longer one is an error naming its line and this limit, so a file
without line ends (``/dev/zero``) cannot fill memory."""


def read_text_lines(path: str, what: str) -> list[str]:
    """The lines of ``path``; a UTF-8 byte-order mark is dropped. ``what`` names the file's
    kind in the unreadable-path message (``cannot read trace: ...``)."""
    return list(iter_text_lines(path, what))


def iter_text_lines(path: str, what: str, block_bytes: int | None = None) -> Iterator[str]:
    """:func:`read_text_lines` one line at a time: the lines ``str.splitlines`` gives for the
    whole text, in order. Blocks are cut after a ``\\n`` byte, which no other UTF-8
    character contains and after which every line break ``splitlines`` knows has ended, so
    splitting each block gives the same lines; bytes that are not UTF-8 are reported when
    their block is reached, with the line (counted in ``\\n`` bytes from the file's start)
    and column. ``block_bytes``: the block size (default :data:`BLOCK_BYTES`)."""
    size = block_bytes or BLOCK_BYTES
    try:
        fh = open(path, "rb")  # noqa: SIM115  (closed below, also when the reader stops early)
    except OSError as exc:
        raise TraceError(f"cannot read {what}: {exc.strerror or exc}", file=path) from None
    with fh:
        line = 1
        codec = "utf-8-sig"  # only the file's start may hold a byte-order mark
        rest = b""
        while True:
            try:
                block = fh.read(size)
            except OSError as exc:
                raise TraceError(f"cannot read {what}: {exc.strerror or exc}", file=path) from None
            if block:
                data = rest + block
                cut = data.rfind(b"\n") + 1
                if cut == 0:
                    if len(data) > MAX_LINE_BYTES:
                        raise TraceError(f"line longer than {MAX_LINE_BYTES >> 20} MiB "
                                         "(limit MAX_LINE_BYTES); is this a line-oriented file?",
                                         file=path, line=line)
                    rest = data
                    continue
                data, rest = data[:cut], data[cut:]
            else:
                data, rest = rest, b""
                if not data:
                    return
            yield from _decode(data, codec, path, line).splitlines()
            codec = "utf-8"
            line += data.count(b"\n")
            if not block:
                return


def json_values(lines: Iterable[str], path: str,
                error: Callable[..., UserError] = TraceError) -> Iterator[tuple[int, Any]]:
    """``(line, value)`` for every non-blank line of ``lines`` (the text lines of ``path``),
    decoded as JSON. A line that is not JSON, or nests too deeply to read, raises
    ``error(message, file=path, line=line)``."""
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise error(f"invalid JSON: {exc.msg} (column {exc.colno})", file=path,
                        line=number) from None
        except RecursionError:
            raise error("JSON nested too deeply to read", file=path, line=number) from None
        yield number, value


def _decode(data: bytes, codec: str, path: str, line: int) -> str:
    """``data`` (whole lines from line ``line`` on) as text."""
    try:
        return data.decode(codec)
    except UnicodeDecodeError as exc:
        at = line + data.count(b"\n", 0, exc.start)
        column = exc.start - data.rfind(b"\n", 0, exc.start)
        raise TraceError(
            f"not UTF-8 text: byte {data[exc.start]:#04x} at column {column}", file=path, line=at
        ) from None
