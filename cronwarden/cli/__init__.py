"""Every `cronwarden` command: the typer apps and their output. The modules they call know nothing
of typer or rich."""
