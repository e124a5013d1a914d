"""Observer hooks: installed plugins watching a run (``servesim_run_started``,
``servesim_pass_completed``, ``servesim_request_finished``) and adding report keys
(``servesim_report_extra``); hookspecs.py documents each one.

:meth:`Observers.of` returns None when no plugin implements any of them, and the driver then
makes no call at all, so a run without observers costs one ``is None`` test per pass and
per request. With a pass or request observer the driver steps pass by pass (runs of passes
commit many passes in one call and log steady batches as cohorts, which would hide the very
passes and per-request times observers are promised), which gives the same report bytes.

Implementations are called one plugin at a time in the registration order of
:meth:`servesim.plugins.Plugins.ordered_impls`; an exception names the plugin and its
distribution (:class:`~servesim.errors.PluginRunError`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from servesim.errors import PluginRunError, UserError
from servesim.replay.finished import FinishedRequest

if TYPE_CHECKING:
    from servesim.contract import PassCompletionEffects
    from servesim.plugins import Plugins

RUN_HOOKS = ("servesim_pass_completed", "servesim_request_finished")
HOOKS = ("servesim_run_started", *RUN_HOOKS, "servesim_report_extra")


class _Impl:
    __slots__ = ("function", "argnames", "label", "plugin")

    def __init__(self, function: Any, argnames: tuple[str, ...], label: str, plugin: str) -> None:
        self.function = function
        self.argnames = argnames
        self.label = label
        self.plugin = plugin


class Observers:
    """The observer implementations of one plugin manager, by hook."""

    def __init__(self, impls: dict[str, list[_Impl]]) -> None:
        self._impls = impls
        self.watches_run = any(impls.get(h) for h in RUN_HOOKS)
        self.adds_report_keys = bool(impls.get("servesim_report_extra"))

    @classmethod
    def of(cls, plugins: Plugins) -> Observers | None:
        """The installed observers, or None when no plugin implements an observer hook."""
        pm = plugins.pm
        found: dict[str, list[_Impl]] = {}
        for hook in HOOKS:
            rows = []
            for impl in plugins.ordered_impls(hook):  # the facade's order
                name = impl.plugin_name
                label = f"plugin {name} from {pm.distribution_of(name)}"
                rows.append(_Impl(impl.function, tuple(impl.argnames), label, name))
            found[hook] = rows
        if not any(found.values()):
            return None
        return cls(found)

    def _call(self, hook: str, kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
        results = []
        for impl in self._impls.get(hook, ()):
            try:
                result = impl.function(*(kwargs[a] for a in impl.argnames))
            except UserError:
                raise
            except Exception as exc:
                raise PluginRunError(f"{impl.label} failed in {hook}: {type(exc).__name__}: {exc}") from exc
            results.append((impl.label, result))
        return results

    def run_started(self, config: Any) -> Observers | None:
        """Tell every observer a run starts; the observers of this run, or None when none
        is left: a plugin whose ``servesim_run_started`` returns False sits the run out
        (its other observer hooks are not called for it)."""
        out = self._call("servesim_run_started", {"config": config})
        idle = {
            impl.plugin
            for impl, (_, result) in zip(self._impls["servesim_run_started"], out, strict=True)
            if result is False
        }
        if not idle:
            return self
        kept = {hook: [i for i in impls if i.plugin not in idle] for hook, impls in self._impls.items()}
        return Observers(kept) if any(kept.values()) else None

    def pass_completed(
        self, worker_id: int, dp_rank: int, start_ms: float, end_ms: float, effects: PassCompletionEffects
    ) -> None:
        self._call(
            "servesim_pass_completed",
            {
                "worker_id": worker_id,
                "dp_rank": dp_rank,
                "start_ms": start_ms,
                "end_ms": end_ms,
                "effects": effects,
            },
        )

    def request_finished(self, request: FinishedRequest) -> None:
        self._call("servesim_request_finished", {"request": request})

    def report_extra(self, report: dict[str, Any], config: Any) -> dict[str, Any]:
        """The keys every ``servesim_report_extra`` adds; a key the report (or another
        plugin) already has, or a non-mapping result, is an error naming the plugin."""
        added: dict[str, Any] = {}
        owner: dict[str, str] = {}
        for label, result in self._call("servesim_report_extra", {"report": report, "config": config}):
            if result is None:
                continue
            if not isinstance(result, Mapping):
                raise PluginRunError(
                    f"{label}: servesim_report_extra must return a mapping or "
                    f"None, got {type(result).__name__}"
                )
            for key, value in result.items():
                if not isinstance(key, str):
                    raise PluginRunError(f"{label}: report keys must be strings, got {key!r}")
                if key in report or key in added:
                    other = owner.get(key, "the report itself")
                    raise PluginRunError(f"{label}: report key {key!r} is already set by {other}")
                added[key] = value
                owner[key] = label
        return added


__all__ = ["FinishedRequest", "Observers"]
