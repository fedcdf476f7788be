"""The terminal interface (Textual): the dashboard and overview apps, their keys and
messages, screens and widgets. The top of the console's layers, with the browser's
(:mod:`console.web`) and the command line (tests/console/test_layers.py).
"""
