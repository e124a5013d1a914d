"""SGLang's ``--scheduler-recv-interval``: new requests are read only every few iterations.

SGLang's scheduler reads new requests from the tokenizer at the top of each event-loop
iteration; with ``scheduler_recv_interval > 1`` a ``SchedulerRecvSkipper``
(``sglang/srt/managers/scheduler_recv_skipper.py``) lets it read only when a counter, grown
by the previous batch's weight, reaches the interval (then the counter restarts at 0):

* a decode batch (and a speculative verify batch) weighs 1;
* any other batch (a prefill/extend batch) weighs 1000, so the iteration after a prefill
  always reads;
* no batch weighs 1: an idle loop spins and reads within microseconds.

So a request that arrives while the engine only decodes waits up to ``interval`` decode
steps (on average about half of them) before the scheduler sees it. InferenceMAX's SGLang
launch scripts set it (InferenceX ``benchmarks/single_node/qwen3.5_fp8_b200.sh``: 10, and 30
from concurrency 16). The default, 1, reads every iteration (no skipper). The skipper does
not run with attention DP in the SGLang versions the rows use (it asserts so), and servesim
does not model it there.

servesim keeps the requests the scheduler has not read in an inbox: ``submit`` puts a
request there while the rank has work, and each pass first advances the counter by the
previous pass's weight and, when it reads, moves the inbox into the waiting queue. A run of
steady decode passes (servesim_sglang.fast.runs) is declined while the inbox holds requests,
and advances the counter by its passes.
"""

from __future__ import annotations

from typing import Any

DECODE_WEIGHT = 1
OTHER_WEIGHT = 1000
IDLE_WEIGHT = 1


class RecvSkipper:
    """One rank's skipper counter and the requests it has not read yet."""

    def __init__(self, interval: int) -> None:
        self.interval = interval
        self.counter = 0
        self.inbox: list[Any] = []

    @classmethod
    def build(cls, interval: int, dp_size: int) -> RecvSkipper | None:
        """The skipper, or None where SGLang reads every iteration."""
        if interval <= 1 or dp_size > 1:
            return None
        return cls(interval)

    def reads(self, last_pass: str | None) -> bool:
        """One loop iteration after a pass of kind ``last_pass`` (``"decode"``,
        ``"prefill"`` or None for no batch): whether the scheduler reads new requests now."""
        if last_pass == "decode":
            self.counter += DECODE_WEIGHT
        elif last_pass is None:
            self.counter += IDLE_WEIGHT
        else:
            self.counter += OTHER_WEIGHT
        if self.counter >= self.interval:
            self.counter = 0
            return True
        return False

    def decode_passes(self, n: int) -> None:
        """``n`` decode passes ran as one run (nothing was waiting to be read)."""
        self.counter = (self.counter + n) % self.interval

    def take(self) -> list[Any]:
        out, self.inbox = self.inbox, []
        return out
