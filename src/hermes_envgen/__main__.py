"""``python -m hermes_envgen`` is the ``hermes-envgen`` command."""

from hermes_envgen.cli import main

main()
