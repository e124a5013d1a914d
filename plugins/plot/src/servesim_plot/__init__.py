"""Figures of a replay (``servesim run --plot DIR``, ``servesim plot``): latency CDFs, per-worker
timelines, the TTFT breakdown of a prefill/decode split and the router's balance.

:mod:`servesim_plot.series` computes the arrays, :mod:`servesim_plot.draw` draws them;
matplotlib is imported only by the latter, when a figure is drawn.
"""
