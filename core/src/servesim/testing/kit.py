"""What every check kit of :mod:`servesim.testing` shares: named checks run one by one, an
exception escaping a check counted as that check's failure, and one report.

A check is ``check(subject) -> list[str]`` (the problems found, empty when it passes); the
subject is whatever the kit tests (a model factory, a sink factory, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from servesim.testing.conformance import ConformanceReport

Check = Callable[[Any], list[str]]


def run_checks(
    what: str,
    checks: Mapping[str, Check],
    subject: Any,
    *,
    skip: Iterable[str] = (),
    raise_on_failure: bool = True,
) -> ConformanceReport:
    """Run ``checks`` (minus ``skip``) on ``subject``; raise ``AssertionError`` listing every
    failure, headed ``{what} conformance failed``, unless ``raise_on_failure=False``."""
    skipped = set(skip)
    unknown = skipped - set(checks)
    if unknown:
        raise ValueError(f"unknown checks {sorted(unknown)}; known: {', '.join(checks)}")
    report = ConformanceReport(subject=what)
    for name, check in checks.items():
        if name in skipped:
            continue
        report.checks.append(name)
        try:
            problems = check(subject)
        except Exception as exc:  # a crashing plugin is a failure of that check, not a kit bug
            problems = [f"raised {type(exc).__name__}: {exc}"]
        report.failures.extend(f"{name}: {p}" for p in problems)
    if raise_on_failure:
        report.raise_if_failed()
    return report


__all__ = ["Check", "run_checks"]
