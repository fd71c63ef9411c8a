"""mirax.nn (being written)."""
