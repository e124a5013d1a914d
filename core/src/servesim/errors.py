"""servesim's exception hierarchy. The CLI prints :class:`UserError` subclasses as one line
and exits with their ``exit_code``; anything else is a bug and keeps its traceback."""

from __future__ import annotations


class SimError(Exception):
    """Base of every servesim exception."""


class UserError(SimError):
    """An error the user can fix (bad config, bad trace, unknown plugin): no traceback."""

    exit_code = 2


class ConfigError(UserError):
    """A configuration problem, naming the key path, the bad value and what was expected."""

    def __init__(self, message: str, *, path: str | None = None, source: str | None = None):
        self.path = path
        self.source = source
        prefix = f"{source}: " if source else ""
        where = f"{path}: " if path else ""
        super().__init__(f"{prefix}{where}{message}")


class TraceError(UserError):
    """A malformed workload file, naming the file and line number."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None):
        self.file = file
        self.line = line
        loc = file or "<trace>"
        if line is not None:
            loc = f"{loc}:{line}"
        super().__init__(f"{loc}: {message}")


class PluginError(UserError):
    """Plugin discovery or registration failed (duplicate or unknown names, bad hooks)."""


class PluginRunError(UserError):
    """An installed plugin raised during a run; the message names the plugin and its
    distribution, and ``__cause__`` keeps the original exception."""


class EngineError(SimError):
    """Misuse of the engine contract (bad time, wrong pass id, pass already in flight)."""


class EnginePoisoned(EngineError):
    """A grouped operation failed after some ranks may have committed."""


class CommandRejected(EngineError):
    """A rank refused a command; recoverable, the rank and engine are unchanged."""


class ReplayError(SimError):
    """The simulation cannot make progress (a stalled or livelocked engine)."""

