"""The training step (``prepare``) and loop (``run``)."""
