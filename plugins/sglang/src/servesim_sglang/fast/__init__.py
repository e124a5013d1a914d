"""The sglang rank's fast paths, behind one seam (docs/architecture.md): runs of steady
decode passes (:mod:`servesim_sglang.fast.runs`, with the held queue head of
:mod:`servesim_sglang.fast.run_head`), which only ``SglangRank`` enters. There is no steady
batch: a run re-derives what stepping's decode pass (servesim_sglang.scheduler) would do."""
