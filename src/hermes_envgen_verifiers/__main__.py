"""``python -m hermes_envgen_verifiers [vf-eval's options]``: verifiers' own evaluation entry
point (``vf-eval``) on this taskset, with verifiers' chat harness; without verifiers, one line
naming what to install (exit 2)."""

from __future__ import annotations

import sys

from hermes_envgen_verifiers._require import require_verifiers


def main() -> None:
    require_verifiers()
    from verifiers.v1.cli.eval.main import main as vf_eval

    sys.argv = [
        "vf-eval",
        "hermes-envgen-verifiers",
        "--env.agent.harness.id",
        "null",
        "--env.agent.runtime.type",
        "subprocess",
        *sys.argv[1:],
    ]
    vf_eval()


if __name__ == "__main__":
    main()
