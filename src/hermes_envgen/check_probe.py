"""Import an env and describe it as JSON: run by ``hermes-envgen check`` in a subprocess.

Importing the env in its own process keeps a broken env (or one that exits) from taking the
CLI down with it, and keeps atroposlib out of the CLI's own process.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import sys
import traceback
from pathlib import Path


def load_module(target: str):
    """The env's module, from a ``.py`` path or a dotted module name."""
    if target.endswith(".py"):
        path = Path(target).resolve()
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
        return module
    return importlib.import_module(target)


def describe(target: str) -> dict:
    """What ``check`` needs to know of the env: its class, config and built-in tasks."""
    from atroposlib.envs.base import BaseEnv
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig

    module = load_module(target)
    classes = [
        obj
        for obj in vars(module).values()
        if inspect.isclass(obj)
        and issubclass(obj, BaseEnv)
        and obj.__module__ == module.__name__
        and not inspect.isabstract(obj)
    ]
    if len(classes) != 1:
        names = ", ".join(c.__name__ for c in classes) or "none"
        return {"error": f"expected one env class (a BaseEnv subclass) in {target}, found {names}"}
    env_cls = classes[0]

    # config_init with every *_API_KEY unset: a key that is still there was written in the code.
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.endswith("_API_KEY")}
    try:
        config, servers = env_cls.config_init()
    finally:
        os.environ.update(saved)
    server_list = servers if isinstance(servers, list) else [servers]
    samples = getattr(sys.modules.get(env_cls.__module__), "SAMPLES", None)
    if samples is None:
        package = env_cls.__module__.rpartition(".")[0]
        try:
            samples = importlib.import_module(f"{package}.samples").SAMPLES if package else None
        except (ImportError, AttributeError):
            samples = None
    return {
        "class": env_cls.__name__,
        "name": env_cls.name,
        "servers_is_list": isinstance(servers, list),
        "servers_are_api_configs": all(isinstance(s, APIServerConfig) for s in server_list),
        "literal_api_key": any(
            getattr(s, "api_key", "") not in ("", None, "EMPTY") for s in server_list
        ),
        "group_size": config.group_size,
        "tokenizer_name": config.tokenizer_name,
        "samples": samples if isinstance(samples, list) else None,
    }


def main() -> None:
    target = sys.argv[1]
    try:
        result = describe(target)
    except BaseException as exc:  # report every failure, SystemExit included, as data
        frames = traceback.extract_tb(exc.__traceback__)
        where = f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""
        result = {"error": f"{type(exc).__name__}: {exc}{where}".splitlines()[0]}
    print("\n" + json.dumps(result, default=str))


if __name__ == "__main__":
    main()
