"""``paper``: the papers' rank-1 edit of one attention layer's output matrix, W_O' = W_O + γ u (wᵀV⁺):
``config.py`` (its options, torch-free), ``method.py`` (the plan — in memory and, for ``--lazy``,
on the checkpoint on disk —, its measurement and its words). Registered by ``method.py``."""
