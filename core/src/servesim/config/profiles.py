"""Named presets of a backend's behaviour switches (``engine.<backend>.profile``).

A backend whose behaviour differs between engine versions names each difference as a boolean
switch and groups them in presets: ``profile`` picks one, and a switch set explicitly (not
None) overrides it. The ``vllm`` and ``sglang`` backends resolve their settings with these two
functions (docs/conformance.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def resolve_switches(
    settings: Any, profiles: Mapping[str, T], default: str, switches: Sequence[str], cls: type[T]
) -> T:
    """``cls`` with each switch from ``settings`` when set, else from its profile's preset."""
    if settings is None:
        return profiles[default]
    base = profiles.get(getattr(settings, "profile", default), profiles[default])
    chosen = {}
    for name in switches:
        v = getattr(settings, name, None)
        chosen[name] = getattr(base, name) if v is None else bool(v)
    return cls(**chosen)


def profile_problems(
    settings: Any, profiles: Mapping[str, Any], default: str, path: str
) -> list[tuple[str, str]]:
    """``[(key path, message)]`` for a profile name that is not one of ``profiles``."""
    profile = getattr(settings, "profile", default)
    if profile not in profiles:
        names = ", ".join(sorted(profiles))
        return [(path, f"unknown profile {profile!r}; expected one of {names}")]
    return []
