"""vLLM-version behaviour settings of the ``vllm`` rank (issue 9 item 2).

Where vLLM 0.32's scheduler (checked step by step against the real one, docs/conformance.md)
differs from the reference semantics (dynamo-mocker.md §2), the difference is a named
``engine.vllm:`` key. ``profile`` picks a preset; a key set explicitly overrides the preset.
The default profile is the reference's, so results stay comparable with it until measurements
on real GPUs decide otherwise.

* ``null_block`` — vLLM keeps one of ``num_gpu_blocks`` as a placeholder null block
  (``BlockPool.__init__``): only ``num_gpu_blocks - 1`` hold KV.
* ``trailing_empty_step`` — after the step that finishes the last request, vLLM's engine core
  calls ``schedule()`` once more (``has_finished_requests()``): one empty, zero-time pass.
* ``unchunked_gate_counts_outputs`` — with chunked prefill off, vLLM compares prompt *and*
  generated tokens (minus the hit) of a waiting request with the remaining budget; the
  reference compares only the prompt remainder (§2.3), which can chunk a readmitted request.
* ``scheduler_reserve_full_isl`` — admit a waiting request only when blocks for all its known
  tokens fit (vLLM 0.32's default, and the reference's rule, §2.2); off: only the first chunk
  must fit (vLLM before 0.32).
* ``local_prefill_cadence`` — apply ``engine.prefill_schedule_interval`` on a rank of its own
  (vLLM 0.33, ``Scheduler.schedule``; 0.32 applied it only under data parallelism):
  :mod:`servesim_vllm.cadence`.
"""

from __future__ import annotations

from typing import Any

from attrs import field, frozen
from servesim.config.profiles import profile_problems, resolve_switches


@frozen(kw_only=True)
class Behaviour:
    """The resolved switches a rank consults."""

    null_block: bool
    trailing_empty_step: bool
    unchunked_gate_counts_outputs: bool
    scheduler_reserve_full_isl: bool
    local_prefill_cadence: bool = False


PROFILES: dict[str, Behaviour] = {
    "reference": Behaviour(
        null_block=False,
        trailing_empty_step=False,
        unchunked_gate_counts_outputs=False,
        scheduler_reserve_full_isl=True,
    ),
    "vllm-0.32": Behaviour(
        null_block=True,
        trailing_empty_step=True,
        unchunked_gate_counts_outputs=True,
        scheduler_reserve_full_isl=True,
    ),
    "vllm-0.33": Behaviour(
        null_block=True,
        trailing_empty_step=True,
        unchunked_gate_counts_outputs=True,
        scheduler_reserve_full_isl=True,
        local_prefill_cadence=True,
    ),
}
DEFAULT_PROFILE = "reference"
_SWITCHES = ("null_block", "trailing_empty_step", "unchunked_gate_counts_outputs",
             "scheduler_reserve_full_isl", "local_prefill_cadence")


@frozen(kw_only=True)
class BehaviourSettings:
    """The ``engine.vllm:`` keys; None means "as the profile says"."""

    profile: str = DEFAULT_PROFILE
    null_block: bool | None = field(default=None)
    trailing_empty_step: bool | None = field(default=None)
    unchunked_gate_counts_outputs: bool | None = field(default=None)
    scheduler_reserve_full_isl: bool | None = field(default=None)
    local_prefill_cadence: bool | None = field(default=None)


def resolve(settings: Any) -> Behaviour:
    """The switches for ``settings`` (a :class:`BehaviourSettings` or None: the defaults)."""
    return resolve_switches(settings, PROFILES, DEFAULT_PROFILE, _SWITCHES, Behaviour)


def validate(settings: Any) -> list[tuple[str, str]]:
    """``[(key path, message)]`` for a bad profile name (no traceback)."""
    return profile_problems(settings, PROFILES, DEFAULT_PROFILE, "engine.vllm.profile")


__all__ = ["Behaviour", "BehaviourSettings", "DEFAULT_PROFILE", "PROFILES", "resolve", "validate"]
