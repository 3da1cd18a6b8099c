"""`steerformer analyze` (filled in by the foundation work)."""
