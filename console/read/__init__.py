"""Reading a run directory into model objects: the watcher, the reader and its history part,
the history mirror and its prefetch, the trainer log's tail, the trainer probe, the history
detectors (spikes, resume checks) and the notices of what changed.

Imports the model only (tests/console/test_layers.py).
"""
