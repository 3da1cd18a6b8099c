"""``addition``: activation addition written as weights, its gain the largest within a KL budget:
``config.py`` (its options, torch-free), ``method.py`` (the plan, the layer choice, its words),
``calibrate.py`` (the probe, the concept's direction per layer, the gain search within the budget),
``weights.py`` (the addition written as weights: ``addition_edits``, ``addition_as_weights``).
Registered by ``method.py``."""
