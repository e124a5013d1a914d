"""servesim-agentic: agentic trace formats (``agentic_mooncake``, ``weka``,
``dynamo_request_trace``, ``dynamo_agent_trace``, ``applied_compute_agentic``) whose requests
wait for other requests (servesim.replay.release, servesim.replay.edge_release)."""
