"""The console's model: a run's snapshot and what it is made of (series, typed findings,
markers, levels, units) and the words they are said in (:mod:`.format`).

The bottom layer: it imports nothing of the console above it (tests/console/test_layers.py).
"""
