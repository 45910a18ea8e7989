"""The agent loop: turns of one rollout, its hooks, and the tools' view of it."""
