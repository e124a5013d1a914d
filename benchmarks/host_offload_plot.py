"""The picture in docs/speculative-and-host-offload.md: TTFT with and without the host tier.

    python benchmarks/host_offload_plot.py [--out docs/host-offload-ttft.png]

Replays a 2,000-request prefix-heavy trace (make_trace.py seed 11, as in
benchmarks/host_offload_fidelity.py: 4,000 G1 blocks, 20,000 host blocks, 16 GB/s) through
servesim and the reference with the host tier off and on, and draws each run's TTFT
distribution, so the agreement and the gain show at once. Needs matplotlib and the reference.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from host_offload_fidelity import BASE, HOST, make_trace, ours, reference  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path("docs/host-offload-ttft.png"))
    a = ap.parse_args()
    fig, ax = plt.subplots(figsize=(7, 4))
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        trace = tmp / "trace.jsonl"
        make_trace(trace, 11)
        for host, label, color in ((False, "G1 only", "tab:red"),
                                   (True, "G1 + host tier", "tab:blue")):
            engine = {**BASE, **({"native_host_offload": HOST} if host else {})}
            sim = np.sort([r["ttft_ms"] for r in ours(trace, engine, tmp)])
            ref = np.sort([r["ttft_ms"] for r in reference(trace, engine, tmp)])
            frac = np.arange(1, len(sim) + 1) / len(sim)
            ax.step(sim, frac, where="post", color=color, lw=2, label=f"{label}, servesim")
            ax.plot(ref[::20], frac[::20], "o", ms=4, mfc="none", color="black" if host else "grey",
                    label=f"{label}, reference (every 20th request)")
    ax.set_xscale("log")
    ax.set_xlabel("time to first token (ms, log scale)")
    ax.set_ylabel("fraction of requests")
    ax.set_title("2,000 prefix-heavy requests whose prefixes do not fit G1")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(a.out)


if __name__ == "__main__":
    main()
