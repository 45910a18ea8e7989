"""``python -m hermes_envgen_verifiers [URL] [vf-eval's options]``: verifiers' own evaluation
entry point (``vf-eval hermes-envgen-verifiers``) on the env served at ``URL`` (the taskset's
``url``; by default http://127.0.0.1:8765), its harness (verifiers' chat loop: the env's tools
over MCP, nothing run on this host) in a subprocess runtime, which reaches the door on
127.0.0.1. Without verifiers: one line naming what to install, exit 2."""

from __future__ import annotations

import sys

from hermes_envgen_verifiers._require import require_verifiers


def main() -> None:
    require_verifiers()
    from verifiers.v1.cli.eval.main import main as vf_eval

    options = sys.argv[1:]
    url = []
    if options and options[0].startswith(("http://", "https://")):
        url = ["--env.taskset.url", options.pop(0)]
    sys.argv = [
        "vf-eval",
        "hermes-envgen-verifiers",
        *url,
        "--env.agent.runtime.type",
        "subprocess",
        *options,
    ]
    vf_eval()


if __name__ == "__main__":
    main()
