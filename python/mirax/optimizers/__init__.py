"""mirax.optimizers (being written)."""
