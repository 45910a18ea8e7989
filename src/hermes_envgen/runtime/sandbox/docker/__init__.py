"""The docker backend: the container sandbox, its engine, channel and pool."""
