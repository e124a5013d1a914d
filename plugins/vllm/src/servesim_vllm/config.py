"""The ``engine.vllm:`` section: options of the vLLM backend beyond the shared engine keys."""

from __future__ import annotations

from typing import ClassVar

from attrs import field, frozen, validators

from servesim_vllm.behaviour import BehaviourSettings


@frozen(kw_only=True)
class VllmConfig(BehaviourSettings):
    """Backend-specific switches for the ``vllm`` rank.

    Every behaviour the reference describes is driven by the shared ``engine:`` keys
    (dynamo-mocker.md §1.1); the keys here are vLLM-version behaviour switches
    (servesim_vllm.behaviour) and ``async_scheduling`` (servesim_vllm.async_scheduling: vLLM's
    engine-core loop reads new requests one pass late). Unknown keys are rejected by the
    config loader.
    """

    #: Options the report's config echo leaves out at their defaults (added after reports were
    #: first written; servesim.config.loader.echo_section).
    report_omits_defaults: ClassVar[frozenset[str]] = frozenset({"async_scheduling"})

    async_scheduling: bool = field(default=False, validator=validators.instance_of(bool))


__all__ = ["VllmConfig"]
