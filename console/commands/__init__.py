"""The command line's modes, one module each; ``console.cli`` picks one.

- :mod:`.parser`         every flag, and which go together (refused in one line before any mode runs)
- :mod:`.common`         exit statuses, the one way a mode fails, asking, progress lines
- :mod:`.dashboard_cli`  the dashboard (``--start`` launches the trainer first)
- :mod:`.report_cli`     ``--once``, ``--json``, ``--csv``, ``--check``
- :mod:`.signal_cli`     ``--checkpoint``, ``--stop``
- :mod:`.guided_cli`     ``--pivot``, ``--pivot-rollback``, ``--rollback``
- :mod:`.inspect_cli`    ``--inspect [--against]``
- :mod:`.stacks_cli`     ``--stacks``
- :mod:`.serve_cli`      ``--serve``
- :mod:`.overview_cli`   a directory of runs: the overview, its ``--once``/``--json``/``--check``
"""
