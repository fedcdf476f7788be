"""Drawing series as text: the min/max envelope per pixel column (:mod:`.envelope`), the
smoothed line (:mod:`.ema`), the braille canvas and its axes (:mod:`.canvas`), zoom, pan and
cursor (:mod:`.view`) and several runs overlaid (:mod:`.overlay`).

Imports the model only (tests/console/test_layers.py).
"""
