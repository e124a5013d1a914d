"""One servesim replay in its own process, timed like the reference times itself.

    python benchmarks/perf_child.py OUT.json TRACE.jsonl [KEY=VALUE ...]

The ``KEY=VALUE`` items are ``servesim run --set`` overrides. With
``SERVESIM_BENCH_UNFORMATTED=1`` in the environment the built-in JSONL sinks write no text
(``perf_unformatted``), for ``bench_sinks.py``'s split of the sinks' cost. The wall time covers
:func:`servesim.replay.runner.simulate` only (reading the trace, building the cluster and
replaying it), which is what the reference's ``run_trace_replay`` call covers in
``peer_dynamo.py``; interpreter start-up and imports are left out on both sides. The report
(``vllm bench serve`` key names) and the timing go to ``OUT.json``. Peak memory is measured by
the parent from this process's rusage, so nothing here allocates beyond the run itself.
``writer_cpu_s`` is the CPU time of the sinks' writer process (``sinks.writer``), if any.
With ``SERVESIM_BENCH_NO_REPLAY=1`` it stops after loading the configuration and writes
nothing: ``perf_instructions.py`` subtracts that run's instruction count from a full one's.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        sys.stderr.write(__doc__ or "")
        return 2
    out_path, trace, *sets = argv
    import servesim
    from perf_instructions import NO_REPLAY
    from perf_unformatted import ENV, install
    from servesim.config.loader import load_config
    from servesim.errors import UserError
    from servesim.replay.runner import simulate

    if os.environ.get(ENV) == "1":
        install()
    try:
        loaded = load_config(None, [*sets, f"workload.trace.path={json.dumps(trace)}"])
        if os.environ.get(NO_REPLAY) == "1":  # the baseline of an instruction count
            return 0
        started, cpu_started = time.perf_counter(), time.process_time()
        result = simulate(loaded)
        wall_s = time.perf_counter() - started
        cpu_s = time.process_time() - cpu_started
        # A writer process of the sinks (sinks.writer), reaped by the end of the replay.
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        writer_cpu_s = children.ru_utime + children.ru_stime
    except UserError as exc:
        sys.stderr.write(f"servesim: {exc}\n")
        return 2
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump({"wall_s": wall_s, "cpu_s": cpu_s, "writer_cpu_s": writer_cpu_s,
                   "passes": result.passes, "report": result.report,
                   "source": servesim.__file__}, fh)
    return 0


if __name__ == "__main__":
    status = main(sys.argv[1:])
    from servesim.cli.main import spare_exit_collection

    spare_exit_collection()  # as the servesim console script does before it exits
    sys.exit(status)
