"""The chat template's side of training data: rendering, the start-up check, trajectories in chat
mode and token mode."""
