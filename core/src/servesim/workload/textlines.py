"""Reading a line-oriented input file (a trace, forward-pass metrics, per-request lines) so
that every problem is one ``FILE[:LINE]: ...`` error: an unreadable path, and bytes that are
not UTF-8, named by line and column (a user's editor shows those, not a byte offset)."""

from __future__ import annotations

from servesim.errors import TraceError


def read_text_lines(path: str, what: str) -> list[str]:
    """The lines of ``path``; a UTF-8 byte-order mark is dropped. ``what`` names the file's
    kind in the unreadable-path message (``cannot read trace: ...``)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise TraceError(f"cannot read {what}: {exc.strerror or exc}", file=path) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - data.rfind(b"\n", 0, exc.start)
        raise TraceError(
            f"not UTF-8 text: byte {data[exc.start]:#04x} at column {column}", file=path, line=line
        ) from None
    return text.splitlines()
