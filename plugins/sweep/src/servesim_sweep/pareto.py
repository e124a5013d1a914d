"""``DIR/pareto.png``: each configuration's throughput per GPU (y, higher is better) against
its SLA latency (x, lower is better), the Pareto front highlighted, the configurations that
meet every constraint circled and the constraint on x drawn. :func:`front` computes the
front apart from drawing, for tests."""

from __future__ import annotations

from collections.abc import Sequence

from servesim_sweep.results import Config
from servesim_sweep.spec import Objectives


def front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both axes (x no larger and y no
    smaller, one strictly), by ascending x."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1], i))
    out: list[int] = []
    best_y = float("-inf")
    for i in order:
        if points[i][1] > best_y:
            out.append(i)
            best_y = points[i][1]
    return out


def draw(path: str, configs: Sequence[Config], x: str, y: str, objectives: Objectives) -> bool:
    """Write the figure; False (nothing written) when no configuration has both values."""
    shown = [c for c in configs if x in c.values and y in c.values]
    if not shown:
        return False
    from matplotlib.figure import Figure

    xy = [(c.values[x], c.values[y]) for c in shown]
    on = front(xy)
    fig = Figure(figsize=(9, 6), dpi=100, layout="constrained")
    ax = fig.subplots()
    ax.scatter([p[0] for p in xy], [p[1] for p in xy], color="0.6", s=25,
               label="configurations")
    ax.plot([xy[i][0] for i in on], [xy[i][1] for i in on], "o-", color="tab:red",
            label="Pareto front")
    feasible = [i for i, c in enumerate(shown) if c.feasible]
    if feasible:
        ax.scatter([xy[i][0] for i in feasible], [xy[i][1] for i in feasible], s=90,
                   facecolors="none", edgecolors="tab:green", label="meets the constraints")
    for i in sorted(set(on) | set(feasible)):
        ax.annotate(shown[i].label, xy[i], textcoords="offset points", xytext=(6, 4), fontsize=7)
    for c in objectives.constraints:
        if c.key == x:
            ax.axvline(c.bound, color="tab:blue", linestyle="--", linewidth=1, label=str(c))
    xs = [p[0] for p in xy]
    if min(xs) > 0 and max(xs) / min(xs) > 50:
        ax.set_xscale("log")  # latencies past saturation would squeeze the front to an edge
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Sweep: Pareto front")
    from servesim.config.output_paths import replacing

    with replacing(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100, metadata={"Software": None})
    return True
