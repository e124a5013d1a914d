"""The ``engine.vllm:`` section: options of the vLLM backend beyond the shared engine keys."""

from __future__ import annotations

from attrs import frozen

from servesim_vllm.behaviour import BehaviourSettings


@frozen(kw_only=True)
class VllmConfig(BehaviourSettings):
    """Backend-specific switches for the ``vllm`` rank.

    Empty for now: every behaviour the reference describes is driven by the shared
    ``engine:`` keys (dynamo-mocker.md §1.1). A later issue adds vLLM-0.32 behaviour
    switches here; unknown keys are rejected by the config loader.
    """


__all__ = ["VllmConfig"]
