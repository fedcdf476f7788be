"""The command line's modes other than the dashboard: ``--inspect`` (:mod:`.inspect_cli`) and
the overview of many runs (:mod:`.overview_cli`). ``console.cli`` parses the flags and picks one.
"""
