"""Tools for env developers, run from the CLI: ``check``, ``demo`` and ``view``."""
