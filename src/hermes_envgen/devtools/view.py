"""``hermes-envgen view``: rollouts as one self-contained HTML page.

The renderer lives in ``hermes_envgen.runtime.rollout_view``, because ``process`` writes the
same page beside its groups and the runtime imports nothing from devtools.
"""

from __future__ import annotations

from hermes_envgen.runtime.rollout_view import (
    RolloutCard,
    load_rollouts,
    render_html,
    write_view,
)

__all__ = ["RolloutCard", "load_rollouts", "render_html", "write_view"]
