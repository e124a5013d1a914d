"""The forward-pass metrics of a run of steady passes, held by column (docs/architecture.md, "Speed by design").

A run of ``k`` steady passes has ``k`` :class:`~servesim.contract.ForwardPassMetrics` that
differ only in five values: the counter id, the pass duration, and the decode batch's size,
summed KV tokens and their variance; the prefill and queue fields are the run's constants.
:class:`FpmRun` keeps the constants once and the five columns as lists. It is a sequence of
``ForwardPassMetrics``: indexing or iterating builds the objects (equal to the ones a rank
builds when stepping), so every reader of ``RunEffects.forward_pass_metrics`` keeps getting
objects. A sink that declares ``encodes_fpm_runs = True`` and has ``encode_run(worker_id,
ats, run)`` (the built-in JSONL sink) formats a run's lines from the columns instead, without
the objects (:func:`servesim.sinks.jsonl_lines.fpm_run_lines`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

from servesim.contract import ForwardPassMetrics
from servesim.fast.sink_protocols import encodes_ahead
from servesim.sinks.base import declares


class FpmRun(Sequence[ForwardPassMetrics]):
    """``k`` passes' metrics: ``base`` (every field but the five below, as keyword arguments
    of ``ForwardPassMetrics``), ``counter0`` (pass ``j``'s ``counter_id`` is ``counter0 + j``)
    and, per pass, ``num_decode`` (``num_decode_requests``), ``sum_decode_kv``
    (``sum_decode_kv_tokens``), ``var_decode`` (``var_decode_kv_tokens``) and ``durations``
    (``duration_ms``). ``base`` is never changed once a run holds it: a rank hands the same
    dict to its runs while their constants hold, and the JSONL lines keep its filled
    template by identity (:func:`servesim.sinks.jsonl_lines.fpm_run_lines`)."""

    __slots__ = ("base", "counter0", "num_decode", "sum_decode_kv", "var_decode", "durations")

    def __init__(self, base: dict[str, Any], counter0: int, num_decode: list[int],
                 sum_decode_kv: list[int], var_decode: list[float], durations: list[float]) -> None:
        self.base = base
        self.counter0 = counter0
        self.num_decode = num_decode
        self.sum_decode_kv = sum_decode_kv
        self.var_decode = var_decode
        self.durations = durations

    def __len__(self) -> int:
        return len(self.durations)

    def _at(self, j: int) -> ForwardPassMetrics:
        return ForwardPassMetrics(
            **self.base, counter_id=self.counter0 + j, num_decode_requests=self.num_decode[j],
            sum_decode_kv_tokens=self.sum_decode_kv[j], var_decode_kv_tokens=self.var_decode[j],
            duration_ms=self.durations[j],
        )

    @overload
    def __getitem__(self, j: int) -> ForwardPassMetrics: ...
    @overload
    def __getitem__(self, j: slice) -> list[ForwardPassMetrics]: ...

    def __getitem__(self, j: int | slice) -> ForwardPassMetrics | list[ForwardPassMetrics]:
        if isinstance(j, slice):
            return [self._at(i) for i in range(len(self))[j]]
        n = len(self)
        if not -n <= j < n:
            raise IndexError("FpmRun index out of range")
        return self._at(j % n)

    def __iter__(self) -> Iterator[ForwardPassMetrics]:
        return (self._at(j) for j in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"FpmRun({list(self)!r})"


def encodes_fpm_runs(sinks: Sequence[Any]) -> bool:
    """Whether every one of ``sinks`` (at least one) encodes ahead and formats runs from the
    columns, declared where it makes its lines (:func:`servesim.sinks.base.declares`: a subclass
    that overrides ``publish`` or ``encode`` without declaring it again gets objects, one
    pass at a time)."""
    return bool(sinks) and all(
        encodes_ahead(sink) and declares(sink, "encodes_fpm_runs") for sink in sinks)


__all__ = ["FpmRun", "encodes_fpm_runs"]
