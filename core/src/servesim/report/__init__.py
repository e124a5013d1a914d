"""The serving report: per-request latency records (:mod:`~servesim.report.stats`), their
summary with ``vllm bench serve``'s key names (:mod:`~servesim.report.summary`,
:mod:`~servesim.report.keys`) and the exact percentile and sum helpers it uses."""
