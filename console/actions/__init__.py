"""What the console does to a run: start and supervise the trainer, signal it and wait
(checkpoint, stop), relaunch it, the guided pivot and rollback, the alerts' checks.

Used by the terminal interface and the command line; imports the model and the reader,
never a view (tests/console/test_layers.py).
"""
