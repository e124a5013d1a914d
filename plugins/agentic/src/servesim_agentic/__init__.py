"""servesim-agentic: agentic trace formats (``agentic_mooncake``, ``dynamo_agent_trace``)
whose requests wait for other requests (servesim.replay.release)."""
