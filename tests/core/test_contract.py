"""Contract value types and helpers: accept-rate normalisation (aisimulate-engine.md §10),
handoff transfer timing (§8.1, §13.7), Welford/RunningMean (§4.9, §11), columnar outputs
(§4.5) and chained block hashes (dynamo-mocker.md §3.1)."""

from __future__ import annotations

import struct

import pytest
from servesim.contract import (
    HandoffId,
    HandoffTransferTiming,
    Metrics,
    Output,
    OutputBatch,
    TransferTimingMode,
    WorkerType,
    outputs_for,
    prefill_handoff_delay_ms,
)
from servesim.kv.hashing import chain_hash, local_block_hash, sequence_hashes
from servesim.mechanics.numeric import (
    RunningMean,
    Welford,
    normalize_conditional_accept_rates,
    validate_time,
)
from servesim.tokens import RepeatedBlockTokens, Tokens
from xxhash import xxh3_64_intdigest

# --------------------------------------------------------------------------- §10 accept rates


@pytest.mark.parametrize(
    ("nextn", "rates", "expected"),
    [
        (3, "1, 0.5", (1.0, 0.5, 0.0)),
        (2, "1,0.5,0.25", (1.0, 0.5)),
        (1, " 0.25 ", (0.25,)),
        (5, None, (0.85, 0.3, 0.0, 0.0, 0.0)),
        (2, "", (0.85, 0.3)),
        (2, "   ", (0.85, 0.3)),
        (7, None, (0.85, 0.3, 0.0, 0.0, 0.0, 0.0, 0.0)),
        (2, "0,1", (0.0, 1.0)),
    ],
)
def test_accept_rates_are_validated_then_padded_or_truncated(
    nextn: int, rates: str | None, expected: tuple[float, ...]
) -> None:
    assert normalize_conditional_accept_rates(nextn, rates) == expected


@pytest.mark.parametrize("bad", ["nan", "inf", "-0.1", "1.1", "not-a-rate", "-inf"])
def test_accept_rates_reject_bad_entries_naming_them(bad: str) -> None:
    with pytest.raises(ValueError, match=r"aic_nextn_accept_rates\[1\]"):
        normalize_conditional_accept_rates(3, f"0.5,{bad}")


def test_accept_rates_validate_extra_entries_before_truncating() -> None:
    with pytest.raises(ValueError, match=r"\[2\].*1.5"):
        normalize_conditional_accept_rates(1, "0.5,0.5,1.5")


@pytest.mark.parametrize("nextn", [0, -1])
def test_accept_rates_need_positive_nextn(nextn: int) -> None:
    with pytest.raises(ValueError, match="must be > 0"):
        normalize_conditional_accept_rates(nextn, "0.5")


# --------------------------------------------------------------------------- §8.1 handoff


def _timing(mode: TransferTimingMode, **kw: object) -> HandoffTransferTiming:
    args: dict[str, object] = {"kv_bytes_per_token": 1000.0, "bandwidth_gb_s": 1.0}
    args.update(kw)
    return HandoffTransferTiming(mode, 100, **args)  # type: ignore[arg-type]


def test_transfer_delay_uses_selected_prompt_footprint() -> None:
    missing = _timing(TransferTimingMode.DESTINATION_MISSING)
    full = _timing(TransferTimingMode.FULL_PROMPT)
    assert missing.delay_ms(20) == pytest.approx(0.02)
    assert full.delay_ms(20) == pytest.approx(0.1)
    assert missing.full_prompt_delay_ms() == pytest.approx(0.1)
    assert full.full_prompt_delay_ms() == pytest.approx(0.1)


def test_state_bytes_are_charged_once_in_every_timing_mode() -> None:
    missing = _timing(TransferTimingMode.DESTINATION_MISSING, state_bytes=50_000)
    full = _timing(TransferTimingMode.FULL_PROMPT, state_bytes=50_000)
    assert missing.delay_ms(0) == pytest.approx(0.05)
    assert missing.delay_ms(20) == pytest.approx(0.07)
    assert full.delay_ms(20) == pytest.approx(0.15)
    assert missing.full_prompt_delay_ms() == pytest.approx(0.15)


@pytest.mark.parametrize(
    "kw",
    [
        {"kv_bytes_per_token": None},
        {"bandwidth_gb_s": None},
        {"bandwidth_gb_s": 0.0},
        {"bandwidth_gb_s": -2.0},
    ],
)
def test_incomplete_or_non_positive_timing_model_has_no_delay(kw: dict[str, object]) -> None:
    for mode in TransferTimingMode:
        timing = _timing(mode, **kw)
        assert timing.delay_ms(20) is None
        assert timing.full_prompt_delay_ms() is None


def test_prefill_handoff_delay_requires_completed_prefill_work() -> None:
    assert prefill_handoff_delay_ms(WorkerType.PREFILL, True, 128, 1.0, 1e6) == pytest.approx(128.0)
    assert prefill_handoff_delay_ms(WorkerType.PREFILL, True, 128, 2.0, 1e6) == pytest.approx(64.0)
    assert prefill_handoff_delay_ms(WorkerType.PREFILL, False, 128, 1.0, 1e6) is None
    assert prefill_handoff_delay_ms(WorkerType.DECODE, True, 128, 1.0, 1e6) is None
    assert prefill_handoff_delay_ms(WorkerType.AGGREGATED, True, 128, 1.0, 1e6) is None
    assert prefill_handoff_delay_ms(WorkerType.PREFILL, True, 128, None, 1e6) is None
    assert prefill_handoff_delay_ms(WorkerType.PREFILL, True, 128, 1.0, None) is None
    assert prefill_handoff_delay_ms(WorkerType.PREFILL, True, 128, 0.0, 1e6) is None


def test_handoff_id_round_trips_caller_owned_value() -> None:
    hid = HandoffId(123456789)
    assert hid.value == 123456789
    assert hid == HandoffId(123456789) and hid != HandoffId(1)
    assert len({hid, HandoffId(123456789)}) == 1


# --------------------------------------------------------------------------- statistics


def test_welford_population_variance() -> None:
    w = Welford()
    for x in (2, 4, 4, 4, 5, 5, 7, 9):
        w.add(x)
    assert w.n == 8
    assert w.total == 40
    assert w.mean == pytest.approx(5.0)
    assert w.variance() == pytest.approx(4.0)


def test_welford_empty_and_single_sample_have_zero_variance() -> None:
    w = Welford()
    assert w.variance() == 0.0 and w.total == 0
    w.add(17)
    assert w.variance() == 0.0 and w.mean == 17.0


def test_running_mean() -> None:
    m = RunningMean()
    assert m.mean() == 0.0 and m.count == 0
    for x in (1.0, 2.0, 3.0, 4.0):
        m.add(x)
    assert m.count == 4
    assert m.mean() == pytest.approx(2.5)
    m.add(-10.0)
    assert m.mean() == pytest.approx(0.0)


def test_metrics_usage_fractions() -> None:
    assert Metrics(active_blocks=3, inactive_blocks=1, total_blocks=8).cache_usage == 0.375
    assert Metrics(active_blocks=3, inactive_blocks=1, total_blocks=8).physical_cache_usage == 0.5
    assert Metrics(active_blocks=3, total_blocks=0).cache_usage == 0.0
    assert Metrics(active_blocks=3, total_blocks=0).physical_cache_usage == 0.0


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, "3"])
def test_validate_time_rejects(bad: object) -> None:
    with pytest.raises(ValueError, match="t_ms must be finite and >= 0"):
        validate_time("t_ms", bad)  # type: ignore[arg-type]


def test_validate_time_accepts_zero_and_ints() -> None:
    validate_time("t", 0.0)
    validate_time("t", 5)


# --------------------------------------------------------------------------- outputs


def _batch() -> OutputBatch:
    return OutputBatch(
        token_request_ids=[1, 2, 1],
        token_ids=[10, 20, 11],
        completed=[1, 3],
        rejected=[3],
        cached_tokens={1: 4, 3: 0},
    )


def test_output_batch_yields_rich_outputs_in_order_with_terminals_last() -> None:
    assert list(_batch().outputs()) == [
        Output(1, 10, completed=False, cached_tokens=4),
        Output(2, 20),
        Output(1, 11, completed=True),
        Output(3, None, completed=True, rejected=True, cached_tokens=0),
    ]


def test_output_batch_without_token_values_reports_zero_tokens() -> None:
    batch = OutputBatch(token_request_ids=[5, 5], completed=[5])
    assert [(o.token_id, o.completed) for o in batch.outputs()] == [(0, False), (0, True)]


def test_output_batch_remove_request_drops_every_trace_of_it() -> None:
    batch = _batch()
    assert batch.remove_request(1)
    assert batch.token_request_ids == [2]
    assert batch.token_ids == [20]
    assert batch.completed == [3]
    assert batch.cached_tokens == {3: 0}
    assert not batch.remove_request(42)
    assert batch.remove_request(3)  # a terminal-only (rejected) request
    assert batch.completed == [] and batch.rejected == [] and batch.cached_tokens == {}
    assert not batch.is_empty()
    assert batch.remove_request(2)
    assert batch.is_empty()


def test_output_batch_remove_request_keeps_none_token_ids() -> None:
    batch = OutputBatch(token_request_ids=[1, 2, 1], completed=[2])
    assert batch.remove_request(1)
    assert batch.token_ids is None and batch.token_request_ids == [2]


def test_outputs_for_filters_requests() -> None:
    assert [o.request_id for o in outputs_for(_batch(), [3, 2])] == [2, 3]


# --------------------------------------------------------------------------- hashing

# Golden local (token-only) block hashes from the reference: Dynamo 1.6.1's
# ``dynamo._core.compute_block_hash_for_seq(tokens, block_size)`` run in the peer venv
# (~/.cache/servesim-peer). It returns one token-only hash per full block; the chained
# sequence hashes are not exposed by that binding (checked against the §3.1 formula below).
PEER_TOKENS = list(range(1, 41))
PEER_LOCAL = {
    4: [
        14643705804678351452, 16777012769546811212, 483935686894639516, 135165725823939817,
        1363306219480167028, 2084387875073858317, 6327381604936300363, 7888692299608420700,
        13620872079913919147, 11334768502514057929,
    ],
    16: [16863443419780771464, 2287610619914608821],
    3: [
        15024015205894559313, 14842227984648868509, 560734302779673188, 5959138341449004422,
        6517706848217547511, 2475911721952279973, 18098781918901644851, 4802805412798189691,
        11208367080685141397, 4615659148034769436, 1204385224710398948, 9686585360249091479,
        13300155168925815792,
    ],
}
PEER_REPEATED = ([7] * 32 + [9] * 32, 16, [8771127959296939342, 8771127959296939342,
                                           14400716039954729789, 14400716039954729789])
PEER_EXTREMES = ([100000, 2**31, 2**32 - 1, 0], 4, [13531125181486355447])


@pytest.mark.parametrize("block_size", sorted(PEER_LOCAL))
def test_local_hashes_equal_the_reference(block_size: int) -> None:
    _, local = Tokens(PEER_TOKENS).block_hashes(block_size)
    assert local == PEER_LOCAL[block_size]


@pytest.mark.parametrize("case", [PEER_REPEATED, PEER_EXTREMES])
def test_local_hashes_equal_the_reference_for_special_tokens(
    case: tuple[list[int], int, list[int]],
) -> None:
    tokens, block_size, expected = case
    assert Tokens(tokens).block_hashes(block_size)[1] == expected
    starts = range(0, len(tokens), block_size)
    assert [local_block_hash(tokens[i : i + block_size]) for i in starts] == expected


def test_sequence_hashes_chain_per_reference_formula() -> None:
    seq, local = Tokens(PEER_TOKENS).block_hashes(4)
    assert seq[0] == local[0]
    for i in range(1, len(seq)):
        expected = xxh3_64_intdigest(struct.pack("<QQ", seq[i - 1], local[i]), seed=1337)
        assert seq[i] == expected
    assert sequence_hashes(local) == seq
    assert chain_hash(None, local[0]) == local[0]
    assert sequence_hashes(local[3:], parent=seq[2]) == seq[3:]


def test_repeated_local_hashes_chain_differently() -> None:
    seq, local = Tokens(PEER_REPEATED[0]).block_hashes(16)
    assert local[0] == local[1]
    assert len(set(seq)) == 4  # same tokens, different positions → different identities


def test_equal_prefixes_share_hashes_until_the_first_difference() -> None:
    a = list(range(100, 132))
    b = a[:20] + [999] + a[21:]
    seq_a, _ = Tokens(a).block_hashes(8)
    seq_b, _ = Tokens(b).block_hashes(8)
    assert seq_a[:2] == seq_b[:2]  # blocks 0-1 cover tokens 0..15, equal
    assert all(x != y for x, y in zip(seq_a[2:], seq_b[2:], strict=True))  # token 20 differs


def test_only_full_blocks_are_hashed_and_results_are_cached() -> None:
    t = Tokens(list(range(10)))
    seq, local = t.block_hashes(4)
    assert len(seq) == len(local) == 2
    # Cached: the same two lists (a compiled build boxes a fresh tuple around them).
    assert all(x is y for x, y in zip(t.block_hashes(4), t.block_hashes(4), strict=True))
    assert t.block_hashes(16) == ([], [])


@pytest.mark.parametrize("block_size", [1, 2, 4, 8, 3, 5, 6, 7, 16, 24])
@pytest.mark.parametrize("length", [None, 29, 8, 0])
def test_repeated_block_tokens_fast_path_equals_explicit_tokens(
    block_size: int, length: int | None
) -> None:
    hash_ids = [5, 9, 5, 2**33 + 11]
    lazy = RepeatedBlockTokens(hash_ids, 8, length)
    explicit = Tokens(lazy.tokens())
    expected_len = 32 if length is None else length
    assert len(lazy) == len(explicit) == expected_len
    assert lazy.block_hashes(block_size) == explicit.block_hashes(block_size)


def test_repeated_block_tokens_synthesise_tokens_per_trace_block() -> None:
    lazy = RepeatedBlockTokens([3, 4], 4, 6)
    assert lazy.tokens() == [3, 3, 3, 3, 4, 4]
    assert lazy.tokens(3, 5) == [3, 4]
    assert len(RepeatedBlockTokens([3, 4], 4, 100)) == 8  # cut to what the ids cover
    with pytest.raises(ValueError):
        RepeatedBlockTokens([1], 0)
