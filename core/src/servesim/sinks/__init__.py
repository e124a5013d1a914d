"""Sinks: the KV-event and forward-pass-metric sink interfaces (:mod:`~servesim.sinks.base`),
the built-in JSONL and memory sinks (:mod:`~servesim.sinks.builtin`, with their line encoders
in :mod:`~servesim.sinks.jsonl_lines`), the composing sinks (:mod:`~servesim.sinks.compose`)
and building them from a config (:mod:`~servesim.sinks.build`)."""
