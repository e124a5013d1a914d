"""The Replayer: a discrete-event driver that owns simulated time.

It follows the canonical loop of aisimulate-engine.md §12 across N workers: a heap keyed by
``(time, sequence)`` holds arrivals, turn releases, pass ends and internal-work deadlines. At
each distinct time the driver (1) completes the passes that end then, in worker order, (2)
runs due internal work on idle engines, (3) delivers arrivals and releases, routing each
request to a worker, and (4) starts a pass on every idle ready engine. Outputs are consumed in
their columnar form (:class:`servesim.contract.OutputBatch`); per-request times go to a
:class:`servesim.report.stats.RequestLog`.

Arrivals follow the reference's workload driver (dynamo-mocker.md §9.2; Dynamo's
``loadgen/driver.rs``): in timestamp mode a session's first turn arrives at its timestamp
rebased to the earliest session; in concurrency mode (``concurrency=N``) timestamps are ignored
and at most N *sessions* are active — a session holds its slot across all its turns and
think times, and the next session (in file order) starts when one ends. Either way a later
turn is released only after the previous turn of its session finishes (or is rejected), plus
its delay. ``arrival_speedup_ratio`` divides first-turn timestamps and inter-turn delays.
With ``max_concurrency=N`` timestamp mode keeps at most N sessions active, as a benchmark
client's semaphore does (``vllm/benchmarks/serve.py``: each request is created at its send
time and waits for ``asyncio.Semaphore(max_concurrency)``, FIFO): a session due while N are
active waits, in the order it was due, and starts when one ends; its arrival is then its
dispatch (the client starts its TTFT clock once it holds the semaphore).

Warmup barrier (``warmup_hold = W``, set from ``workload.warmup`` with ``wait``): the first W
sessions in dispatch order (timestamp mode: by time, then session order; concurrency mode: file
order) run first, and no other session starts until every one of them has ended, as AIPerf and
``vllm bench serve`` wait for their warm-up responses before the measured run. In timestamp
mode the trace's clock stops at the last warmup session's timestamp and resumes when the
warmup ends (later first turns are due that much later); in concurrency mode the slots freed
meanwhile start sessions then.

Requests due at the same time are dispatched in session order, after the passes ending then
have completed. A request's arrival (its TTFT origin) is the time it was due, which in
concurrency mode is its dispatch.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from servesim._compiled import mypyc_attr
from servesim.contract import (
    Admission,
    ForwardPassMetrics,
    KvEvent,
    PassCompletionEffects,
    PassStartEffects,
    Request,
    Submit,
)
from servesim.engine import Engine, EnginePassStarted
from servesim.errors import CommandRejected, ReplayError, TraceError
from servesim.kv.adapter_hashes import prompt_hashes
from servesim.rank import NO_RETRY_HINT, InternalWork, SameTimestampRetry
from servesim.replay.cluster import ClusterState
from servesim.replay.first_turns import FirstTurns
from servesim.replay.observers import FinishedRequest, Observers
from servesim.replay.routers import RoundRobinRouter, Router
from servesim.replay.speed import FLUSH_AT, RunDriverView, SinkMergeView, SpeedOverlay
from servesim.report.stats import RequestLog
from servesim.sinks.base import FpmSink, KvEventSink
from servesim.sinks.publish import encode_runs, publish, write_encoded
from servesim.workload.model import TurnList, TurnSource, Workload

if TYPE_CHECKING:
    from servesim.contract import Metrics
    from servesim.replay.passlog import PassLogWriter
    from servesim.replay.timeline import PassTimeline

# Final: the compiled build inlines them (a module global is a dict lookup per use there).
PASS_END: Final = 0
ARRIVAL: Final = 1
DEADLINE: Final = 2
EXTERNAL: Final = 3
# A session's first turn in timestamp mode: an arrival fed to the heap one at a time.
FIRST_TURN: Final = 4
MAX_SAME_TIME_RETRIES = 64

ProgressFn = Callable[[int, int, float], None]


@mypyc_attr(allow_interpreted_subclasses=True)
class Replayer:
    """Replays ``workload`` through ``engines`` behind ``router``; :meth:`run` returns the log."""

    def merges_sinks(self) -> bool:
        """Several workers' sink output goes through the speed overlay's merge buffer
        (servesim.replay.speed.SinkMergeView), so runs of passes stay on; a subclass that
        publishes on its own paths returns False.
        A method, not a class attribute: in the compiled build an interpreted subclass's
        class attribute would not override the compiled class's."""
        return True

    def __init__(
        self,
        engines: Sequence[Engine],
        workload: Workload,
        *,
        router: Router | None = None,
        block_size: int = 16,
        concurrency: int | None = None,
        arrival_speedup_ratio: float = 1.0,
        kv_sinks: Sequence[KvEventSink] = (),
        fpm_sinks: Sequence[FpmSink] = (),
        record_token_times: bool = False,
        progress: ProgressFn | None = None,
        speed: SpeedOverlay | None = None,
        max_concurrency: int | None = None,
        pass_log: PassLogWriter | None = None,
        timeline: PassTimeline | None = None,
        observers: Observers | None = None,
    ) -> None:
        """``speed``: the speed overlay (servesim.replay.speed); without it every pass steps
        and every batch goes to the sinks as it happens, with the same results."""
        if not engines:
            raise ValueError("a replay needs at least one engine")
        if concurrency is not None and concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if max_concurrency is not None and (max_concurrency < 1 or concurrency is not None):
            raise ValueError(f"max_concurrency must be >= 1 and without concurrency, got {max_concurrency}")
        if not arrival_speedup_ratio > 0:
            raise ValueError(f"arrival_speedup_ratio must be > 0, got {arrival_speedup_ratio}")
        self.engines = list(engines)
        self.workload = workload
        dp = self.engines[0].dp_size
        self.router = router or RoundRobinRouter(len(self.engines), dp, block_size)
        self.block_size = block_size
        self.state = ClusterState(len(self.engines), dp)
        self.concurrency = concurrency
        # Timestamp mode's cap on active sessions, the sessions active, and the first turns due
        # while the cap was reached, in the order they were due (the module docstring).
        self.max_concurrency = max_concurrency
        self._active = 0
        self._gated: deque[int] = deque()
        # Warmup barrier (the module docstring): W while closed, then None; the warmup
        # sessions started (by index), how many of them have not ended, sessions waiting to
        # start in concurrency mode, and the delay added to later first turns in timestamp mode.
        self.warmup_hold: int | None = None
        self.warm_sessions: set[int] = set()
        self._warm_left = 0
        self._held = 0
        self._first_shift = 0.0
        self.speedup = arrival_speedup_ratio
        self.kv_sinks = list(kv_sinks)
        self.fpm_sinks = list(fpm_sinks)
        self.progress = progress
        self.pass_log = pass_log
        # Per-worker pass metrics and preemptions for figures (servesim.replay.timeline). Kept
        # per worker, so unlike a sink it needs no cross-worker order and runs stay on.
        self.timeline = timeline
        # servesim.replay.observers: None unless a plugin watches the run (then no runs of passes).
        self.observers = observers if observers is not None and observers.watches_run else None
        self._pass_start = [0.0] * len(self.engines)
        # The requests by id, read as the replay reaches them (a streamed trace's are dropped
        # once they finish: servesim.workload.streamed); the rest comes from per-request columns.
        self.turns: TurnSource = workload.turn_source()
        input_length, self.output_length, lora = workload.request_columns()
        self.log = RequestLog(input_length, record_token_times=record_token_times)
        if any(lora):  # LoRA adapters: per-request records name them
            self.log.extra = {"lora": list(lora)}
        self.session_of, self.session_index, self.next_turn = workload.session_columns()
        self._heap: list[tuple[float, int, int, int, int]] = []
        self._seq = 0
        self.first_turns: FirstTurns = FirstTurns()
        self.first_next = 0
        self._next_session = 0
        self._first_rid: Sequence[int] | None = None  # concurrency mode: each session's first turn
        self._in_flight = 0
        self._finished = 0
        self._deadline_at: list[float | None] = [None] * len(self.engines)
        self.zero_streak = [0] * len(self.engines)
        self.countdown = [None] * len(self.engines)  # type: list[int | None]
        self.start_busy = [False] * len(self.engines)
        self.last_zero = [False] * len(self.engines)
        self._last_retry = [NO_RETRY_HINT] * len(self.engines)
        self.passes = 0
        # A report scope's stop (servesim.replay.scope): no event after ``stop_at`` (ms) is
        # handled; the last of ``stop_after`` completions sets it to its own time (the rest of
        # that time is still handled). ``admission`` turns requests away before routing
        # (servesim.replay.admission). ``stopped``: the replay ended with events left.
        self.stop_at = math.inf
        self.stop_after = 0
        self.admission: Any = None
        self.stopped = False
        # Releases turns that wait for requests of other sessions (servesim.replay.release).
        self.release: Any = None
        # True while the main loop completes a pass end with nothing else due at its time
        # (a run may then carry on through it: DisaggReplayer._complete).
        self._lone_end = False
        # Per worker, the modelled time its passes took (pool utilisation, servesim.replay.pools).
        self.pass_busy_ms = [0.0] * len(self.engines)
        # Per worker, a factor on its passes' modelled times (None: off; servesim.replay.elastic).
        self.pass_scale: list[float] | None = None
        self.now = 0.0
        # Engines whose state changed at the current time: only they can become ready.
        self.dirty: set[int] = set()
        self.has_deadlines = any(
            isinstance(r, InternalWork) and r.internal_deadlines
            for e in self.engines
            for r in e.ranks
        )
        self._init_speed(speed, record_token_times)

    def _init_speed(self, speed: SpeedOverlay | None, record_token_times: bool) -> None:
        """What the speed overlay adds (servesim.replay.speed): the merge buffer for several
        workers' sinks, runs of passes (None when stepping is forced or unsafe) and the
        cohort log. Without the overlay, none of them."""
        # Whether runs' forward-pass metrics go to the sinks by column (servesim.fast.fpm_runs).
        self.fpm_by_run = False
        self.sink_merge: SinkMergeView | None = None
        self.run_driver: RunDriverView | None = None
        # With runs, a worker's steady batch is logged as one cohort (servesim.fast.cohorts)
        # keyed by the worker; only dp_size-1 engines run runs, so only they get a key.
        self.log_key: list[int | None] = [None] * len(self.engines)
        if speed is None:
            return
        self.fpm_by_run = speed.fpm_by_run(self.fpm_sinks)
        runs = self.observers is None  # an observer plugin sees every pass
        if len(self.engines) > 1 and (self.kv_sinks or self.fpm_sinks):
            if self.merges_sinks():
                self.sink_merge = speed.sink_merge(self.kv_sinks, self.fpm_sinks)
            else:
                runs = False
        if runs:
            cross = (self.concurrency is not None or self.max_concurrency is not None
                     or any(t >= 0 for t in self.next_turn))
            self.run_driver = speed.run_driver(self, len(self.engines), cross)
        if self.run_driver is not None and not record_token_times and type(self) is Replayer:
            self.log = speed.cohort_log(self.log)
            self.log_key = [w if e.dp_size == 1 else None for w, e in enumerate(self.engines)]

    # -- event queue --------------------------------------------------------------------

    def push_event(self, at: float, kind: int, a: int, b: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at, self._seq, kind, a, b))
        if kind != PASS_END and self.run_driver is not None:
            heapq.heappush(self.run_driver.ext, (at, self._seq))

    def _schedule_first_turns(self) -> None:
        """Timestamp mode: every session's first turn, rebased and sped up.

        The turns get their heap sequence numbers now, in session order, but wait in sorted
        columns (:class:`FirstTurns`): the heap holds only the earliest of them
        (:meth:`_feed_first_turn`), which keeps it a few entries deep instead of one per
        session, with the same order."""
        if self.release is None:
            starts, first = self.workload.first_turn_columns()
        else:
            starts = [math.nan if s.start_ms is None else s.start_ms for s in self.release.roots]
            first = [s.turns[0].request_id for s in self.release.roots]
        missing = next((i for i, start in enumerate(starts) if start != start), None)  # nan
        if missing is not None:
            raise TraceError(
                "timestamp mode needs a 'timestamp' on every session's first turn "
                "(or set workload.concurrency)",
                file=self.workload.source, line=self.workload.line_of(first[missing]),
            )
        self.first_turns = FirstTurns.of(starts, first, self._seq, self.speedup)
        self._seq += len(starts)
        self.first_next = 0
        self._feed_first_turn()

    def _feed_first_turn(self) -> None:
        """Move the next waiting first turn into the heap (called as the previous one leaves
        it, so the heap's minimum is always the earliest pending event)."""
        i = self.first_next
        if i < len(self.first_turns):
            at, seq, rid = self.first_turns[i]
            if self.warmup_hold is not None:
                if i >= self.warmup_hold:
                    return  # the barrier is closed: fed again when it opens
                self._start_warm(self.session_index[rid])
            at += self._first_shift
            self.first_next = i + 1
            heapq.heappush(self._heap, (at, seq, FIRST_TURN, rid, 0))
            if self.run_driver is not None:
                heapq.heappush(self.run_driver.ext, (at, seq))

    def _take_slot(self, rid: int) -> bool:
        """``max_concurrency``: whether first turn ``rid``, due now, may start; if not, it
        waits for a session to end."""
        if self._active < self.max_concurrency:  # type: ignore[operator]
            self._active += 1
            return True
        self._gated.append(rid)
        return False

    def _end_session(self, now: float) -> None:
        """``max_concurrency``: a session ended; the first turn that waited longest starts."""
        if self._gated:
            self.push_event(now, ARRIVAL, self._gated.popleft())
        else:
            self._active -= 1

    def _activate_session(self, now: float) -> None:
        """Concurrency mode: start the next session in file order."""
        if self._first_rid is None:
            self._first_rid = self.workload.first_turn_columns()[1]
        if self._next_session < len(self._first_rid):
            if self.warmup_hold is not None:
                if self._next_session >= self.warmup_hold:
                    self._held += 1  # started when the barrier opens
                    return
                self._start_warm(self._next_session)
            rid = self._first_rid[self._next_session]
            self._next_session += 1
            self.push_event(now, ARRIVAL, rid)

    def _start_warm(self, session: int) -> None:
        """Warmup barrier: warmup session ``session`` starts."""
        self.warm_sessions.add(session)
        self._warm_left += 1

    def _warm_session_ended(self, rid: int, now: float) -> None:
        """Warmup barrier: the session of ``rid`` (its last turn) ended; the last warmup
        session to end, once all W started, opens the barrier."""
        if self.session_index[rid] not in self.warm_sessions:
            return
        self._warm_left -= 1
        if self._warm_left or len(self.warm_sessions) < self.warmup_hold:  # type: ignore[operator]
            return
        if self.concurrency is None:
            # the clock resumes from the last warmup session's timestamp
            self._first_shift = now - self.first_turns[self.first_next - 1][0]
            self.warmup_hold = None
            self._feed_first_turn()
            return
        self.warmup_hold = None
        held, self._held = self._held, 0
        for _ in range(held):
            self._activate_session(now)

    # -- main loop ----------------------------------------------------------------------

    def run(self) -> RequestLog:
        if self.concurrency is None:
            self._schedule_first_turns()
        else:
            for _ in range(self.concurrency):
                self._activate_session(0.0)
        has_deadlines = self.has_deadlines
        heap = self._heap
        total = len(self.turns)
        reported = -1
        steps = 0
        pop = heapq.heappop
        complete = self._complete
        merge = self.sink_merge
        while heap and heap[0][0] <= self.stop_at:
            ev = pop(heap)
            now = ev[0]
            if merge is not None and now != self.now and len(merge.buf) >= FLUSH_AT:
                merge.release(self._sink_watermark(now))
            self.now = now
            if ev[2] == FIRST_TURN:
                self._feed_first_turn()
            if ev[2] == PASS_END and (not heap or heap[0][0] != now):
                # The common step: one pass ends and nothing else is due at this time.
                self._lone_end = True
                complete(ev[3], ev[4], now)
                self._lone_end = False
                if heap and heap[0][0] == now:
                    # The pass released a session's next turn with no delay: deliver it first.
                    self._step(None, now, has_deadlines)
                else:
                    if has_deadlines:
                        self._internal_work(now)
                    self._start_passes(now)
            else:
                self._step(ev, now, has_deadlines)
            steps += 1
            if self.progress is not None and steps & 63 == 0 and self._finished != reported:
                reported = self._finished
                self.progress(self._finished, total, now)
        self.stopped = bool(heap)
        if not self.stopped:
            self._check_drained()
        if merge is not None:
            merge.release_all()
            merge.finish()
        self.log.settle()
        if self.progress is not None:
            self.progress(self._finished, total, self.now)
        return self.log

    def forget_workload(self) -> None:
        """After :meth:`run`: drop the trace's requests and the arrival bookkeeping, which the
        report does not read (it reads the log and ``session_of``), so its arrays can take
        their memory. The replayer cannot run again."""
        self.workload = Workload((), self.workload.source)
        self.turns = TurnList()
        self.output_length = []
        self.first_turns = FirstTurns()
        self._first_rid = None
        self.session_index = []
        self.next_turn = []

    def _step(self, ev: tuple[float, int, int, int, int] | None, now: float, has_deadlines: bool) -> None:
        """Every event at ``now``: pass ends first, then internal work, then the requests due
        (including zero-delay turns those passes released) in session order, then new passes."""
        heap = self._heap
        pop = heapq.heappop
        batch = [] if ev is None else [ev]
        while heap and heap[0][0] == now:
            item = pop(heap)
            if item[2] == FIRST_TURN:
                self._feed_first_turn()
            batch.append(item)
        due = []
        external: list[tuple[float, int, int, int, int]] = []
        gated = self.max_concurrency is not None
        for item in batch:
            if item[2] == PASS_END:
                self._complete(item[3], item[4], now)
            elif item[2] == DEADLINE:
                self.dirty.add(item[3])
            elif item[2] == EXTERNAL:
                external.append(item)
            elif not gated or item[2] != FIRST_TURN or self._take_slot(item[3]):
                due.append(item[3])
        # Completions only add arrivals (and, in disaggregated replay, handoff events, which
        # may add more) at ``now``; passes start below.
        while True:
            while heap and heap[0][0] == now:
                item = pop(heap)
                if item[2] == FIRST_TURN:
                    self._feed_first_turn()
                if item[2] == EXTERNAL:
                    external.append(item)
                elif not gated or item[2] != FIRST_TURN or self._take_slot(item[3]):
                    due.append(item[3])
            if not external:
                break
            for item in external:
                self._external(item[3], item[4], now)
            external = []
        if has_deadlines:
            self._internal_work(now)
        if len(due) > 1:
            index = self.session_index
            due.sort(key=lambda rid: (index[rid], rid))
        for rid in due:
            if self.admission is not None and not self.admission.admit(rid, now):
                self.refuse(rid, now)
                continue
            self._submit(rid, now)
        self._start_passes(now)

    def _sink_watermark(self, now: float) -> float:
        """Sink output before this time is complete: an in-flight run hands its passes'
        output over only when it completes."""
        wm = now
        if self.run_driver is not None and self.run_driver.count:
            for run in self.run_driver.in_flight:
                if run is not None and run.pass_ends[0] < wm:
                    wm = run.pass_ends[0]
        return wm

    def _check_drained(self) -> None:
        stuck = [e.worker_id for e in self.engines if not e.is_drained()]
        if stuck or self._finished != len(self.turns):
            raise ReplayError(
                f"simulation stalled at {self.now} ms: {len(self.turns) - self._finished} "
                f"requests unfinished, workers not drained: {stuck}"
            )

    # -- arrivals -----------------------------------------------------------------------

    def _submit(self, rid: int, now: float) -> None:
        turn = self.turns[rid]
        req = Request(rid, turn.prompt, turn.output_length, None, turn.priority, turn.lora)
        router = self.router
        if self.run_driver is not None and self.run_driver.count:
            if self.run_driver.with_done:
                self.run_driver.release_done(now)
            if self.run_driver.flush:
                self.run_driver.release_kv(now)
        # Elided: a block only this request can hold is in no worker's cache before it is
        # routed, so its placeholder scores exactly as its hash would (workload/model.py).
        hashes = ((prompt_hashes(turn.prompt, self.block_size, turn.lora) if turn.lora
                   else turn.prompt.block_hashes_elided(self.block_size)[0])
                  if router.wants_block_hashes else ())
        worker, dp = router.select(req, hashes, self.state)
        if self.run_driver is not None and self.run_driver.count:
            self.run_driver.check_routed(worker, now)
        router.routed(req, worker, dp, self.state)
        log = self.log
        log.arrival[rid] = now
        log.worker[rid] = worker
        log.dp_rank[rid] = dp
        self._in_flight += 1
        if self._in_flight > log.max_in_flight:
            log.max_in_flight = self._in_flight
        engine = self.engines[worker]
        self.dirty.add(worker)
        if self.has_deadlines and not engine.pass_in_flight:
            d = engine.next_internal_deadline_ms()
            if d is not None and d <= now:
                self._run_internal(worker, now)
        try:
            effects = engine.apply(dp, Submit(req), now)
        except CommandRejected:
            log.rejected[rid] = True
            self.finish_request(rid, now)
            return
        if effects.kv_events:
            self.publish_kv(worker, now, effects.kv_events)

    # -- passes -------------------------------------------------------------------------

    def _start_passes(self, now: float) -> None:
        if not self.dirty:
            return
        dirty = sorted(self.dirty) if len(self.dirty) > 1 else list(self.dirty)
        self.dirty.clear()
        for w in dirty:
            engine = self.engines[w]
            if engine.pass_in_flight:
                continue
            if self.has_deadlines:
                d = engine.next_internal_deadline_ms()
                if d is not None:
                    if d <= now:
                        self._run_internal(w, now)
                    elif self._deadline_at[w] != d:
                        self._deadline_at[w] = d
                        self.push_event(d, DEADLINE, w)
            if not engine.is_ready():
                continue
            if self.run_driver is not None and self.run_driver.try_run(w, engine, now):
                continue
            started = engine.execute_pass(now)
            if started is None:
                continue
            end = started.end_ms
            if self.pass_scale is not None:  # servesim.replay.elastic: warm-up, slow workers
                end = now + (end - now) * self.pass_scale[w]
            self.passes += 1
            self.pass_busy_ms[w] += end - now
            self._pass_start[w] = now
            self.start_busy[w] = self._start_effects(w, started, now)
            self.last_zero[w] = started.end_ms == now
            self._last_retry[w] = started.retry
            self._seq += 1  # _push of a pass end, inlined (once per pass)
            heapq.heappush(self._heap, (end, self._seq, PASS_END, w, started.pass_id))

    def _start_effects(self, w: int, started: EnginePassStarted, now: float) -> bool:
        busy = False
        for rs in started.by_rank:
            eff = rs.effects
            if eff.admissions:
                self.note_admissions(w, eff.admissions, now)
            if eff.pressure_events:
                self._preempted(w, rs.dp_rank, now, len(eff.pressure_events))
            if eff.kv_events:
                self.publish_kv(w, now, eff.kv_events)
            busy = busy or bool(eff.admissions or eff.pressure_events or eff.kv_events)
        return busy

    def note_admissions(self, w: int, admissions: Sequence[Admission], now: float) -> None:
        """Requests a pass of worker ``w`` starting at ``now`` admitted (a stepped pass's
        ``PassStartEffects.admissions``, or a run's first pass's,
        servesim.fast.runs.RankRun.admissions)."""
        log = self.log
        for adm in admissions:
            log.admission(adm.request_id, adm.reused_input_tokens, now)
            if adm.cache_tier_attribution is not None:
                log.tier_attribution(adm.request_id, adm.cache_tier_attribution)

    def _complete(self, w: int, pass_id: int, now: float) -> None:
        if self.run_driver is not None and self.run_driver.in_flight[w] is not None:
            self.run_driver.complete(w, now)
            return
        done = self.engines[w].complete_pass(pass_id, now)
        self.dirty.add(w)
        log, state = self.log, self.state
        key = self.log_key[w]
        busy = self.start_busy[w]
        for rc in done.by_rank:
            eff = rc.effects
            if self.pass_log is not None and eff.schedule is not None:
                self.pass_log.write(w, rc.dp_rank, pass_id, self._pass_start[w], now, eff.schedule)
            out = eff.outputs
            if out.token_request_ids:
                busy = True
                for rid in log.tokens(out.token_request_ids, now, key):
                    state.prefill_done(rid)
            if out.cached_tokens:
                log.cached_at_first_token(out.cached_tokens)
            for rid in out.rejected:
                log.rejected[rid] = True
            if out.completed:
                busy = True
                if key is not None:
                    log.leave(key, out.completed)
                for rid in out.completed:
                    self.finish_request(rid, now)
            if self._publish_pass(w, rc.dp_rank, eff, now):
                busy = True
        self._end_pass(w, busy, now)

    def _publish_pass(self, w: int, dp_rank: int, eff: PassCompletionEffects, now: float) -> bool:
        """A completed pass's KV events, FPM and lifecycle events, which every kind of worker
        publishes alike; True when any of them counts as progress (the livelock guard)."""
        busy = False
        start = self._pass_start[w]
        if self.observers is not None:
            self.observers.pass_completed(w, dp_rank, start, now, eff)
        if eff.kv_events:
            busy = True
            self.publish_kv(w, now, eff.kv_events, start)
        if eff.decode_acceptance.nextn:
            self.log.acceptance(eff.decode_acceptance)
        if eff.forward_pass_metrics is not None:
            self.publish_fpm(w, now, start, eff.forward_pass_metrics, eff.metrics)
        if eff.lifecycle_events:
            busy = True
            self.apply_lifecycle(w, dp_rank, eff.lifecycle_events, now)
        return busy

    def _preempted(self, w: int, dp_rank: int, now: float, count: int) -> None:
        self.log.num_preemptions += count
        if self.timeline is not None:
            self.timeline.preempted(w, dp_rank, now, count)

    def _end_pass(self, w: int, busy: bool, now: float) -> None:
        """After a completed pass: reset the zero-duration streak, or check for a livelock."""
        if busy or not self.last_zero[w]:
            if self.zero_streak[w]:
                self.zero_streak[w] = 0
                self.countdown[w] = None
            return
        self._livelock_guard(w, now)

    def apply_lifecycle(self, w: int, dp_rank: int, events: Sequence[object], now: float) -> None:
        """Handoff lifecycle events (disaggregated replay overrides this)."""
        raise ReplayError(
            f"worker {w} emitted handoff lifecycle events; disaggregated replay is not "
            "supported by the aggregated driver"
        )

    def _external(self, a: int, b: int, now: float) -> None:
        """An ``EXTERNAL`` heap event (disaggregated replay's handoff transfers)."""
        raise ReplayError(f"unexpected external event ({a}, {b}) at {now} ms")

    def _livelock_guard(self, w: int, now: float) -> None:
        """aisimulate-engine.md §12 step 6: an effect-free zero-duration pass must be explained."""
        engine = self.engines[w]
        self.zero_streak[w] += 1
        hint = self._last_retry[w]
        if hint.kind is SameTimestampRetry.RETRY and self.zero_streak[w] <= MAX_SAME_TIME_RETRIES:
            return
        if hint.kind is SameTimestampRetry.COUNTDOWN:
            prev = self.countdown[w]
            if prev is None or hint.remaining < prev:
                self.countdown[w] = hint.remaining
                return
        if engine.waiting_for_external_command() or not engine.is_ready():
            return
        raise ReplayError(
            f"worker {w}: effect-free zero-duration pass at {now} ms with "
            f"{self._in_flight} in-flight requests remaining"
        )

    def refuse(self, rid: int, now: float) -> None:
        """Request ``rid``, due at ``now``, turned away by the admission policy: it arrives
        and fails then, unrouted, and its session goes on as after any rejection."""
        self.log.arrival[rid] = now
        self.log.rejected[rid] = True
        self._in_flight += 1
        self.finish_request(rid, now)

    def finish_request(self, rid: int, now: float) -> None:
        turns = self.turns
        turns[rid].prompt.forget_block_hashes()  # memory: a finished prompt's hashes
        self.log.done[rid] = now
        if self.admission is not None:
            self.admission.finished(rid)
        if self.stop_after and not self.log.rejected[rid]:
            self.stop_after -= 1
            if not self.stop_after:
                self.stop_at = now
        if self.observers is not None:
            self.observers.request_finished(self._finished_record(rid, now))
        self.state.finish(rid)
        self._in_flight -= 1
        self._finished += 1
        if self.release is not None:
            self.release.finished(rid, now)
        nxt = self.next_turn[rid]
        if nxt >= 0:
            self.push_event(now + turns[nxt].delay_ms / self.speedup, ARRIVAL, nxt)
        turns.release(rid)
        if nxt < 0:
            if self.concurrency is not None:
                self._activate_session(now)
            elif self.max_concurrency is not None:
                self._end_session(now)
            if self.warmup_hold is not None:
                self._warm_session_ended(rid, now)

    def _finished_record(self, rid: int, now: float) -> FinishedRequest:
        log = self.log
        return FinishedRequest(
            request_id=rid, session_id=self.session_of[rid], worker_id=log.worker[rid],
            dp_rank=log.dp_rank[rid], arrival_ms=log.arrival[rid], first_token_ms=log.first[rid],
            finished_ms=now, input_tokens=log.input_length[rid], output_tokens=log.ntok[rid],
            cached_tokens=log.cached[rid], rejected=log.rejected[rid],
        )

    # -- internal work and events ---------------------------------------------------------

    def _internal_work(self, now: float) -> None:
        for w, engine in enumerate(self.engines):
            if engine.pass_in_flight:
                continue
            d = engine.next_internal_deadline_ms()
            if d is not None and d <= now:
                self._run_internal(w, now)

    def _run_internal(self, w: int, now: float) -> None:
        self._deadline_at[w] = None
        self.dirty.add(w)
        for rank, eff in self.engines[w].process_internal_work(now):
            self._absorb(w, rank, eff, now)

    def _absorb(self, w: int, dp_rank: int, eff: PassStartEffects, now: float) -> None:
        for adm in eff.admissions:
            self.log.admission(adm.request_id, adm.reused_input_tokens, now)
            if adm.cache_tier_attribution is not None:
                self.log.tier_attribution(adm.request_id, adm.cache_tier_attribution)
        if eff.pressure_events:
            self._preempted(w, dp_rank, now, len(eff.pressure_events))
        if eff.kv_events:
            self.publish_kv(w, now, eff.kv_events)

    def publish_kv(self, w: int, now: float, events: Sequence[KvEvent], start: float | None = None) -> None:
        """KV events visible at ``now``, from a pass that started at ``start`` (None: produced
        at ``now`` itself, by a pass start, a submission or internal work)."""
        if self.router.wants_kv_events:
            self.router.on_kv_events(w, events)
        if self.sink_merge is not None:
            if self.kv_sinks:
                self.sink_merge.kv(w, now, now if start is None else start, events)
            return
        for sink in self.kv_sinks:
            publish(sink, w, now, events)

    def publish_fpm(
        self, w: int, now: float, start: float, fpm: ForwardPassMetrics, occupancy: Metrics | None = None
    ) -> None:
        """A pass's forward-pass metrics, to the sinks (through the merge buffer when several
        workers share them) and with its occupancy snapshot (KV blocks in use, when the rank
        reports it) to the timeline."""
        if self.timeline is not None:
            self.timeline.pass_metrics(w, now, fpm, occupancy)
        if self.sink_merge is not None:
            self.sink_merge.fpm(w, now, start, fpm)
            return
        for sink in self.fpm_sinks:
            publish(sink, w, now, fpm)

    def publish_fpm_run(self, w: int, ends: list[float], start: float, run: Any) -> None:
        """A run's forward-pass metrics (passes ending at ``ends``), encoded by column by every
        sink (``_fpm_runs``; no timeline), in the order and with the bytes of :meth:`_fpm`."""
        if self.sink_merge is not None:
            self.sink_merge.fpm_run_of(w, ends, start, run)
            return
        encs = encode_runs(self.fpm_sinks, w, ends, run)
        for sink, lines in zip(self.fpm_sinks, encs, strict=True):
            for at, line in zip(ends, lines, strict=True):
                write_encoded(sink, at, line)


