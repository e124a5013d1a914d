"""The FPM run lines' shortcuts write what one line a pass writes: a ``base`` shared by runs
(its template looked up by identity), one variance formatted once for all passes, and the
one-pass path."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from servesim.contract import ForwardPassMetrics
from servesim.fast.fpm_runs import FpmRun
from servesim.sinks.jsonl_lines import fpm_line, fpm_run_lines

from tests.core.test_fpm_runs import _base


def _lines(w: int, ats: list[float], run: FpmRun) -> list[str]:
    return [fpm_line(w, at, m) for at, m in zip(ats, list(run), strict=True)]


variance = st.sampled_from([0.0, -0.0, 0.25, 1e-300, 123456.78901234567, 3.0])


@given(vs=st.lists(variance, min_size=1, max_size=6), same=st.booleans(),
       ats=st.lists(st.one_of(st.floats(0, 1e9), st.integers(0, 10**6)), min_size=6, max_size=6))
def test_shared_and_mixed_variances(vs: list[float], same: bool, ats: list[float]) -> None:
    n = len(vs)
    variances = [vs[0]] * n if same else vs
    run = FpmRun(_base(), 4, [2] * n, list(range(10, 10 + 2 * n, 2)), variances,
                 [1.5 * (j + 1) for j in range(n)])
    assert fpm_run_lines(1, ats[:n], run) == _lines(1, ats[:n], run)


def test_a_base_shared_by_runs_and_workers_and_alternating_bases() -> None:
    shared = _base(num_queued_prefill=2, var_queued_prefill_length=4.5)
    other = _base(var_queued_decode_kv_tokens=-0.0)
    for w, base in ((0, shared), (0, shared), (1, shared), (0, other), (0, shared), (1, other),
                    (1, shared), (2, _base()), (0, shared)):
        for k in (1, 3):
            run = FpmRun(base, 9, [1] * k, [5] * k, [0.5] * k, [2.0] * k)
            ats = [float(j) for j in range(k)]
            assert fpm_run_lines(w, ats, run) == _lines(w, ats, run)


def test_one_pass_runs_refuse_what_one_line_refuses() -> None:
    for durations, variances, ats in (([float("inf")], [0.0], [1.0]), ([1.0], [float("nan")], [1.0]),
                                      ([1.0], [0.0], [float("-inf")])):
        run = FpmRun(_base(), 0, [1], [2], variances, durations)
        with pytest.raises(ValueError, match="not JSON compliant") as by_run:
            fpm_run_lines(0, ats, run)
        with pytest.raises(ValueError, match="not JSON compliant") as by_line:
            fpm_line(0, ats[0], run[0])
        assert str(by_run.value) == str(by_line.value)
    # Ends of other types become floats (a bool among them), as one line writes them.
    run = FpmRun(_base(), 0, [1], [2], [0], [3])
    assert fpm_run_lines(0, [True], run) == [fpm_line(0, True, run[0])]
    assert isinstance(run[0], ForwardPassMetrics)
