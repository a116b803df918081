"""The command-line programs: ``seneca`` (``main``), ``mdp`` and ``ods``.

They are the application layer: they may use every package, and nothing imports them.
``_run`` is what the three share (errors become exit status 2).
"""

__all__: list[str] = []
