"""The options of SGLang's priority scheduling (``engine.scheduling_policy: priority`` and
its ``engine.sglang`` keys), checked and resolved for a rank; the behaviour is in
:mod:`servesim_sglang.priority`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attrs import frozen

from servesim_sglang.behaviour import resolve

if TYPE_CHECKING:
    from servesim.config.engine import EngineConfig

SECTION = "engine.sglang"


@frozen
class PriorityParams:
    """``sign`` −1: higher values first (SGLang's default); +1: lower values first."""

    sign: int
    threshold: int
    preemption: bool


# ``sg`` is the ``engine.sglang`` section (servesim_sglang.config.SglangConfig, which imports
# this module).
def priority_params(config: EngineConfig, sg: Any) -> PriorityParams | None:
    if config.scheduling_policy.value != "priority":
        return None
    return PriorityParams(
        sign=1 if sg.schedule_low_priority_values_first else -1,
        threshold=sg.priority_scheduling_preemption_threshold,
        preemption=not sg.disable_priority_preemption,
    )


def validate_priority(config: EngineConfig, sg: Any) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for name in ("schedule_low_priority_values_first", "disable_priority_preemption"):
        if not isinstance(getattr(sg, name), bool):
            out.append((f"{SECTION}.{name}", f"must be true or false, got {getattr(sg, name)!r}"))
    t = sg.priority_scheduling_preemption_threshold
    if not isinstance(t, int) or isinstance(t, bool):
        out.append((f"{SECTION}.priority_scheduling_preemption_threshold", f"must be an integer, got {t!r}"))
    if config.scheduling_policy.value != "priority" or out:
        return out
    if not sg.disable_priority_preemption and not resolve(sg).two_phase_admission:
        out.append(("engine.scheduling_policy",
                    "priority preemption is modelled with SGLang 0.5.23's admission: set "
                    f"{SECTION}.profile: sglang-0.5.23 (or two_phase_admission: true), or "
                    f"{SECTION}.disable_priority_preemption: true"))
    return out
