"""Many rollouts: their records on disk, evaluation, progress and the viewer."""
