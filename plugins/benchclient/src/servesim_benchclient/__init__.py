"""servesim-benchclient: the load a serving benchmark client sends, by the client's names.

``workload.trace: {format: bench_client, path: client.yaml}`` reads a small YAML file of the
client's options (``random_input_len``, ``random_range_ratio``, ``num_prompts``,
``request_rate``, ``burstiness``, ``seed`` ...) or its ``command:`` line and draws the same
lengths and send times the client draws (:mod:`servesim_benchclient.draws`).
"""
