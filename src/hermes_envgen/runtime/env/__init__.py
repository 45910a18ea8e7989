"""The environment: the base env over atroposlib's BaseEnv, its settings, tasks and command line."""
