"""``ablation``: directional ablation of the residual-stream writers, W' = (I − s UUᵀ) W:
``config.py`` (its options, torch-free), ``method.py`` (the plan and its words). Registered by
``method.py``."""
