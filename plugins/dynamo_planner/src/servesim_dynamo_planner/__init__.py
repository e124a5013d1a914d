"""servesim-dynamo-planner: NVIDIA Dynamo's planner in the loop of an elastic replay."""

from servesim_dynamo_planner.convert import FpmBuffer, TickPayload, fpm_record
from servesim_dynamo_planner.planner import DynamoPlanner, DynamoPlannerConfig
from servesim_dynamo_planner.recorded import RecordedAdapter

__all__ = ["DynamoPlanner", "DynamoPlannerConfig", "FpmBuffer", "RecordedAdapter",
           "TickPayload", "fpm_record"]
