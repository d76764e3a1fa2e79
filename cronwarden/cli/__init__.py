"""Every `cronwarden` command: the typer apps and their output. The modules they call know nothing
of typer or rich.

Why the commands import their domain modules inside their bodies: `cronwarden --help`, a typo's
usage error and `migrate` should answer at once, and loading Temporal's SDK, asyncpg and every
domain module up front costs about 1.3 s of a 2-core machine's time on each start (0.7 s for
`--help` as it is, 2.0 s with everything loaded). So each command loads what it runs, and
nothing else; `tests/unit/test_cli_imports.py` holds this line. Outside this package imports sit at
the top of the module.
"""
