"""Built-in replay plugins: the ``mooncake`` trace format, the ``round_robin`` and ``kv``
routers (dynamo-mocker.md §9.1-§9.2), the ``always``, ``queue_shed`` and ``token_bucket``
admission policies (servesim.replay.admission) and the ``static`` and ``schedule`` planners
(servesim.replay.planning)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim._markers import hookimpl

if TYPE_CHECKING:
    from servesim.registry import Registry


@hookimpl
def servesim_register_trace_formats(registry: Registry) -> None:
    from servesim.workload.mooncake import MooncakeTrace

    registry.add("mooncake", MooncakeTrace)


@hookimpl
def servesim_register_routers(registry: Registry) -> None:
    from servesim.replay.routers import KvRouter, RoundRobinRouter

    registry.add("round_robin", RoundRobinRouter)
    registry.add("kv", KvRouter)


@hookimpl
def servesim_register_admission_policies(registry: Registry) -> None:
    from servesim.replay.admission import AlwaysAdmit, QueueShed, TokenBucket

    registry.add("always", AlwaysAdmit)
    registry.add("queue_shed", QueueShed)
    registry.add("token_bucket", TokenBucket)


@hookimpl
def servesim_register_planners(registry: Registry) -> None:
    from servesim.replay.planning import SchedulePlanner, StaticPlanner

    registry.add("static", StaticPlanner)
    registry.add("schedule", SchedulePlanner)
