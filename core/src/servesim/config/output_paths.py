"""Whether an output path can be written, decided without creating or touching anything.

``servesim run`` creates an output's missing parent folders (as the JSONL sinks do), so a
path can be written when it is not a folder and either exists writable, or its nearest
existing ancestor is a folder this process may create entries in. ``servesim validate``
asks :func:`file_problem` / :func:`folder_problem` so that it accepts exactly what a run
can write, and creates nothing. :func:`replacing` writes a whole output file so that a failed
write keeps the previous one.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from servesim.errors import UserError


def _ancestor_problem(path: str) -> str | None:
    """Why the missing folders above ``path`` could not be created, or None."""
    parent = os.path.dirname(path) or "."
    while not os.path.exists(parent):
        up = os.path.dirname(parent) or "."
        if up == parent:  # the working folder or the root itself is gone
            return f"its folder {parent!r} does not exist"
        parent = up
    if not os.path.isdir(parent):
        return f"its folder {parent!r} is a file"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"its folder {parent!r} is not writable"
    return None


def file_problem(path: str) -> str | None:
    """Why a file could not be written at ``path`` (None when it could)."""
    if os.path.isdir(path):
        return "it is a directory"
    if os.path.exists(path):
        return None if os.access(path, os.W_OK) else "permission denied"
    return _ancestor_problem(path)


def folder_problem(path: str) -> str | None:
    """Why files could not be written into the folder ``path`` (None when they could)."""
    if os.path.isdir(path):
        return None if os.access(path, os.W_OK | os.X_OK) else "permission denied"
    if os.path.exists(path):
        return "it is a file"
    return _ancestor_problem(path)


__all__ = ["file_problem", "folder_problem"]


@contextlib.contextmanager
def replacing(path: str) -> Iterator[str]:
    """A temporary name beside ``path`` to write the whole file to, renamed to ``path`` when
    the block ends: a failed or interrupted write leaves no partial file and keeps an earlier
    one whole. A device or pipe that exists at ``path`` (``/dev/stdout``) is written as it
    is. Missing parent folders are created; a write that fails is a :class:`UserError`
    naming the file."""
    tmp = path
    try:
        if not _prepare(path):
            tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.getpid()}.tmp")
        try:
            yield tmp
            if tmp != path:
                os.replace(tmp, path)
        except BaseException:
            if tmp != path:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            raise
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None


def _prepare(path: str) -> bool:
    """Create the missing folders above ``path``; whether ``path`` is a device or pipe that
    exists (``/dev/stdout``), which is written as it is rather than under another name."""
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    return os.path.exists(path) and not os.path.isfile(path)


def write_replacing(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through :func:`replacing`."""
    with replacing(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)


class GrowingFile:
    """A file written line by line through a run (a sink's JSONL, the pass log): it is
    ``PATH.partial`` while it is written, and :meth:`close` renames it to ``PATH`` unless
    :meth:`abandon` said the run failed or was interrupted. Such a run leaves ``PATH.partial``
    (what was written, marked as partial) and any earlier ``PATH`` untouched. A device or pipe
    that exists at ``PATH`` (``/dev/stdout``) is written as it is. Raises :class:`OSError`."""

    SUFFIX = ".partial"

    def __init__(self, path: str) -> None:
        self.path = path
        self.writing = path if _prepare(path) else path + self.SUFFIX
        self.fh = open(self.writing, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self.abandoned = False

    def abandon(self) -> None:
        self.abandoned = True

    def close(self) -> None:
        """Close the file; rename it into place unless abandoned."""
        self.fh.close()
        if not self.abandoned and self.writing != self.path:
            os.replace(self.writing, self.path)
