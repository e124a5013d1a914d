"""servesim-vllm: the `vllm` scheduler backend for servesim.

The plugin module (``servesim_vllm.plugin``) registers :class:`~servesim_vllm.rank.VllmRank`
as backend ``vllm``; import the rank from ``servesim_vllm.rank``.
"""
