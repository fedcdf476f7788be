"""A run as text for the command line: ``--once``/``--json`` (:mod:`.run_report`), one
metric's figures (:mod:`.series_report`), the overview of many runs (:mod:`.overview_report`)
and the checkpoint inspector's lines (:mod:`.inspect_format`).

Imports the model and the plot (tests/console/test_layers.py).
"""
