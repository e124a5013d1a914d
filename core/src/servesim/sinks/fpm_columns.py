"""What a sink's column writer reads of a run's forward-pass metrics.

A sink that declares ``encodes_fpm_runs = True`` is handed a run of ``k`` passes' metrics held
by column (the speed overlay's ``servesim.fast.fpm_runs.FpmRun``) and formats its lines from
the columns (:func:`servesim.sinks.jsonl_lines.fpm_run_lines`). :class:`FpmColumns` names the
members it reads, so the sinks need no import of the overlay (the object is also a sequence
of :class:`~servesim.contract.ForwardPassMetrics`, one a pass).
"""

from __future__ import annotations

from typing import Any, Protocol


class FpmColumns(Protocol):
    """``k`` passes' metrics: ``base`` (every field but the five below, as keyword arguments
    of ``ForwardPassMetrics``; never changed once a run holds it), ``counter0`` (pass ``j``'s
    ``counter_id`` is ``counter0 + j``) and, per pass, ``num_decode``
    (``num_decode_requests``), ``sum_decode_kv`` (``sum_decode_kv_tokens``), ``var_decode``
    (``var_decode_kv_tokens``) and ``durations`` (``duration_ms``)."""

    base: dict[str, Any]
    counter0: int
    num_decode: list[int]
    sum_decode_kv: list[int]
    var_decode: list[float]
    durations: list[float]


__all__ = ["FpmColumns"]
