"""The bwrap backend: the sandbox, its anchor process and the warm pool."""
