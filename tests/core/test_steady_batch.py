"""servesim.fast.steady: the lazy steady batch and its run walk, on a toy request type."""

from __future__ import annotations

from typing import Any

from servesim.fast.steady import SteadyBatch, edge_first_step, edge_step_after, replay_steps


class Req:
    def __init__(self, rid: int, length: int, left: int) -> None:
        self.rid, self.length, self.left_ = rid, length, left
        self.sb = self.se = self.sn = 0


class Toy(SteadyBatch):
    """A block step whenever the pre-pass length is a multiple of ``bs``."""

    __slots__ = ()

    def length(self, r: Req) -> int:
        return r.length

    def left(self, r: Req) -> int:
        return r.left_

    def first_step(self, r: Req, length: int) -> int:
        return -length % self.bs

    def next_step(self, r: Req, P: int) -> int:
        return P + self.bs

    def write(self, r: Req, length: int, left: int) -> None:
        r.length, r.left_ = length, left


class Pool:
    events_enabled = False
    num_active = num_inactive = 0


class Run:
    def __init__(self) -> None:
        self.occupancy: list[Any] = []


def _batch() -> tuple[Toy, list[Req]]:
    reqs = [Req(0, 10, 5), Req(1, 7, 2), Req(2, 12, 9)]
    batch = Toy(4)
    batch.add(reqs)
    return batch, reqs


def test_sums_and_completions_follow_the_pass_counter() -> None:
    batch, _ = _batch()
    assert batch.sums(0) == (29, 100 + 49 + 144)
    assert batch.sums(3) == (38, 13 * 13 + 10 * 10 + 15 * 15)
    assert batch.first_done() == 2 and batch.rids == [0, 1, 2]
    segs = list(batch.segments(*batch.sums(0)))
    # Request 1 leaves after pass 1, request 0 after pass 4; request 2 runs to the end.
    assert segs == [((2, 22, 244, 2), 5), ((5, 12, 144, 1), 9)]


def test_a_run_walks_block_steps_then_completions_in_batch_order() -> None:
    batch, reqs = _batch()
    seen: list[tuple[str, int, list[int]]] = []
    k, finished = replay_steps(
        batch, Run(), Pool(), 6,
        blocked=lambda due, p: False,
        step=lambda due, p: seen.append(("step", p, [r.rid for r in due])),
        leave=lambda done, p: seen.append(("leave", p, [r.rid for r in done])),
    )
    # Block steps where the pre-pass length is a multiple of 4: request 2 at passes 0 and 4
    # (12, 16), request 1 at pass 1 (8, its last pass), request 0 at pass 2 (12). A pass's
    # completions come after its block steps.
    assert seen == [("step", 0, [2]), ("step", 1, [1]), ("leave", 1, [1]), ("step", 2, [0]),
                    ("step", 4, [2]), ("leave", 4, [0])]
    assert k == 6 and [(j, [r.rid for r in d]) for j, d in finished] == [(1, [1]), (4, [0])]
    assert batch.m == 1 and batch.rids == [2]
    batch.P += k
    batch.write_back([reqs[2]])
    assert (reqs[2].length, reqs[2].left_) == (18, 3)


def test_a_blocked_pass_ends_the_run_before_it_and_keeps_its_steps() -> None:
    batch, _ = _batch()
    k, finished = replay_steps(batch, Run(), Pool(), 6, blocked=lambda due, p: p == 2,
                               step=lambda due, p: None, leave=lambda done, p: None)
    assert k == 2 and [j for j, _ in finished] == [1]
    assert batch.pop_steps(2)[0].rid == 0  # restored for stepping to decide


def test_block_steps_come_out_in_batch_order_and_finished_members_are_forgotten() -> None:
    # Five members whose block steps fall in passes 2, 0, 2, 0, 2 (lengths 6, 8, 10, 4, 2 with
    # blocks of 4), added in two groups: each pass's members come out in batch order.
    reqs = [Req(i, length, 9) for i, length in enumerate((6, 8, 10, 4, 2))]
    batch = Toy(4)
    batch.add(reqs[:3])
    batch.add(reqs[3:])
    assert [r.sn for r in reqs] == [0, 1, 2, 3, 4]
    assert batch.steps == {0: [1, 3], 2: [0, 2, 4]} and sorted(batch.step_passes) == [0, 2]
    assert [r.rid for r in batch.pop_steps(0)] == [1, 3]
    assert batch.pop_steps(1) == [] and batch.steps == {2: [0, 2, 4]}
    # A blocked pass puts its members back under the same pass; stepping it files the next.
    assert not batch.step_pass(2, blocked=lambda due, p: True, step=lambda due, p: None)
    assert batch.steps == {2: [0, 2, 4]} and batch.step_passes == [2]
    assert batch.step_pass(2, blocked=lambda due, p: False, step=lambda due, p: None)
    assert batch.steps == {6: [0, 2, 4]} and batch.step_passes == [6]
    # Every member's last pass is 8: all finish, and the batch keeps no serials.
    assert batch.first_done() == 9 and len(batch.members) == 5
    assert [r.rid for r in batch.finish(9)] == [0, 1, 2, 3, 4]
    assert batch.members == {} and batch.m == 0


class Planned(Toy):
    """Block steps at the passes a member lists in ``plan``."""

    __slots__ = ()

    def first_step(self, r: Req, length: int) -> int:
        return r.plan[0] - self.P

    def next_step(self, r: Req, P: int) -> int:
        return r.plan[r.plan.index(P) + 1]


def test_steps_filed_out_of_batch_order_come_out_in_it() -> None:
    # Member 1 steps at pass 0 and files its next step, pass 5, before member 0 (stepping
    # at 3) does: pass 5's members still come out in batch order.
    reqs = [Req(0, 8, 20), Req(1, 9, 20)]
    reqs[0].plan, reqs[1].plan = [3, 5, 30], [0, 5, 30]  # type: ignore[attr-defined]
    batch = Planned(4)
    batch.add(reqs)
    order: list[tuple[int, list[int]]] = []
    for P in range(5):
        batch.step_pass(P, blocked=lambda due, p: False,
                        step=lambda due, p: order.append((p, [r.rid for r in due])))
    assert batch.steps == {5: [1, 0]}  # filed by pass 0 (member 1), then pass 3 (member 0)
    batch.step_pass(5, blocked=lambda due, p: False,
                    step=lambda due, p: order.append((p, [r.rid for r in due])))
    assert order == [(0, [1]), (3, [0]), (5, [0, 1])]


class Edges(Toy):
    """Block steps at block edges through the hooks, as a backend would write them."""

    __slots__ = ()

    def first_step(self, r: Req, length: int) -> int:
        rem = length % self.bs
        return 0 if rem <= 1 else self.bs - rem

    def next_step(self, r: Req, P: int) -> int:
        return P + 1 if self.bs == 1 or (r.sb + P) % self.bs == 0 else P + self.bs - 1


class NoHooks(Toy):
    """``edge_steps``: the batch's own cadence; the hooks must not be called."""

    __slots__ = ()

    def first_step(self, r: Req, length: int) -> int:
        raise AssertionError("first_step called with edge_steps")

    def next_step(self, r: Req, P: int) -> int:
        raise AssertionError("next_step called with edge_steps")


def _edge_walk(batch: SteadyBatch, reqs: list[Req], passes: int) -> list[tuple[int, list[int]]]:
    batch.add(reqs[:3])
    seen: list[tuple[int, list[int]]] = []
    for P in range(passes):
        if P == 2:
            batch.add(reqs[3:])  # members joining mid-way, at pass 2
        batch.step_pass(P, blocked=lambda due, p: False,
                        step=lambda due, p: seen.append((p, [r.rid for r in due])))
        batch.P = P + 1
        if batch.P in batch.ends:
            batch.finish(batch.P)
    return seen


def test_edge_steps_fall_where_a_block_fills_and_where_the_next_is_needed() -> None:
    # A member of length L steps in the pass where L % 4 is 0 (its block fills) and the one
    # after it (L % 4 == 1, the next block is needed), then again four tokens on.
    assert [edge_first_step(n, 4) for n in (8, 9, 10, 11, 12)] == [0, 0, 2, 1, 0]
    # After the step at L 8 (filled) comes L 9 (the next block); after L 5, L 8.
    assert edge_step_after(8, 0, 4) == 1 and edge_step_after(5, 0, 4) == 3
    assert [edge_step_after(b, 0, 1) for b in (3, 4)] == [1, 1]  # one-token blocks: every pass

    def reqs() -> list[Req]:
        return [Req(i, n, left) for i, (n, left) in
                enumerate(((8, 9), (10, 6), (13, 12), (6, 7), (9, 5)))]
    by_hooks = _edge_walk(Edges(4), reqs(), 12)
    assert _edge_walk(NoHooks(4, edge_steps=True), reqs(), 12) == by_hooks
    # Lengths before pass P are L + P for the first three, L + P - 2 for the two joining at
    # 2; each steps where that is 0 or 1 modulo 4, while it still emits (passes join ..
    # join + left - 1): request 0 at 0, 1, 4, 5, 8; 1 at 2, 3; 2 at 0, 3, 4, 7, 8, 11;
    # 3 at 4, 5, 8; 4 at 2, 5, 6.
    assert by_hooks == [(0, [0, 2]), (1, [0]), (2, [1, 4]), (3, [1, 2]), (4, [0, 2, 3]),
                        (5, [0, 3, 4]), (6, [4]), (7, [2]), (8, [0, 2, 3]), (11, [2])]
