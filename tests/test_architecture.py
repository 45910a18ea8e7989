"""The layers and their import rules, the declared API, and the import paths kept for old projects.

The runtime is what every generated env imports at run time: it must not pull in the
generator (copier), the developer tools, the CLI (typer) or the testing kit.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from conftest import REPO, imported_modules, imported_names

PACKAGE = REPO / "src" / "hermes_envgen"

# layer -> the hermes_envgen subpackages it must never import
FORBIDDEN = {
    "runtime": ("generate", "devtools", "cli", "testing"),
    "testing": ("generate", "devtools", "cli"),
    "generate": ("devtools", "cli", "testing", "runtime"),
    "devtools": ("cli",),
}


def _modules_of(layer: str) -> list[Path]:
    return sorted((PACKAGE / layer).rglob("*.py"))


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_each_layer_imports_only_what_lies_below_it(layer):
    banned = tuple(f"hermes_envgen.{name}" for name in FORBIDDEN[layer])
    wrong = sorted(
        f"{path.relative_to(PACKAGE)} imports {module}"
        for path in _modules_of(layer)
        for module in imported_modules(path)
        if any(module == name or module.startswith(f"{name}.") for name in banned)
    )
    assert wrong == []


def test_the_import_scan_sees_submodules_and_relative_imports(tmp_path):
    # `from package import submodule` imports the submodule; relative imports are resolved.
    folder = tmp_path / "pkg" / "sub"
    folder.mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (folder / "__init__.py").write_text("")
    (folder / "mod.py").write_text(
        "from hermes_envgen.runtime import Metric, rewards\n"
        "from hermes_envgen import testing\n"
        "from . import sibling\n"
        "from ..other import thing\n"
    )
    assert imported_modules(folder / "mod.py") == {
        "hermes_envgen.runtime",
        "hermes_envgen.runtime.rewards",
        "hermes_envgen",
        "hermes_envgen.testing",
        "pkg.sub",
        "pkg.other",
    }
    assert ("hermes_envgen.runtime", "Metric") in imported_names(folder / "mod.py")


def test_the_hooks_import_only_the_errors_and_git_of_hermes_envgen():
    allowed = {"hermes_envgen.errors", "hermes_envgen.generate.git"}
    for path in sorted((REPO / "hooks").glob("*.py")):
        ours = {m for m in imported_modules(path) if m.startswith("hermes_envgen")}
        assert ours <= allowed, f"{path.name} imports {ours - allowed}"


def test_importing_the_runtime_loads_neither_copier_nor_typer():
    code = (
        "import sys; import hermes_envgen.runtime.env.base_env; "
        "bad = [m for m in ('copier', 'typer', 'hermes_envgen.generate', 'hermes_envgen.cli',"
        " 'hermes_envgen.testing', 'hermes_envgen.devtools') if m in sys.modules]; print(bad)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "[]"


# The generator's libraries (copier, the Jinja it renders with) and the CLI's (typer): a node
# that runs an env needs none of them from us (pyproject.toml's generator extra).
GENERATOR_LIBRARIES = ("copier", "jinja2", "typer")
# The toolsets' extras (file, web, mcp): imported where a tool runs, never at module import.
TOOLSET_LIBRARIES = ("re2", "bm25s", "lxml", "mcp")


@pytest.mark.parametrize("layer", ["runtime", "testing"])
def test_the_runtime_and_the_test_kit_never_import_the_generators_libraries(layer):
    wrong = sorted(
        f"{path.relative_to(PACKAGE)} imports {module}"
        for path in _modules_of(layer)
        for module in imported_modules(path)
        if module.partition(".")[0] in GENERATOR_LIBRARIES
    )
    assert wrong == []


def test_importing_every_runtime_and_test_kit_module_loads_no_extra():
    # jinja2 is left out: transformers imports it for chat templates, whatever we do.
    code = f"""
import importlib, pkgutil, sys
import hermes_envgen.runtime, hermes_envgen.testing
for package in (hermes_envgen.runtime, hermes_envgen.testing):
    for found in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        try:
            importlib.import_module(found.name)
        except ModuleNotFoundError as exc:  # the trainers' own (torch): installed apart
            assert exc.name == "torch", exc
watched = {("copier", "typer", *TOOLSET_LIBRARIES)!r}
print(sorted(m for m in watched if m in sys.modules))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("package", ["hermes_envgen.runtime", "hermes_envgen.testing"])
def test_every_declared_name_resolves(package):
    module = importlib.import_module(package)
    assert set(module.__all__) == set(module._EXPORTS)
    missing = [name for name in module.__all__ if getattr(module, name, None) is None]
    assert missing == []


# hermes_envgen.runtime's declared API: what env authors use (the template, examples/, the
# docs pages). A name added or removed changes this list on purpose, in the same commit; a
# removed one goes into generate/migrate.py's tables, which `hermes-envgen update` applies.
RUNTIME_API = [
    "EVAL",
    "TRAIN",
    "APIServerConfig",
    "AgentResult",
    "DatasetError",
    "EnvConfigError",
    "EnvReply",
    "EnvSession",
    "EnvSessions",
    "HermesAgentBaseEnv",
    "HermesAgentEnvConfig",
    "HermesAgentLoop",
    "JudgeVerdict",
    "LoopSettings",
    "Metric",
    "ModelClient",
    "Reward",
    "RolloutState",
    "SessionThread",
    "Task",
    "ToolContext",
    "ToolErrorRecord",
    "TurnEnd",
    "TurnHooks",
    "answer_is",
    "ask_judge",
    "correctness_gated",
    "efficiency_score",
    "judge_client",
    "metric",
    "open_env",
    "openenv_app",
    "read_answer_file",
    "split_train_eval",
    "tool",
    "tool_usage_score",
    "training_order",
    "trl_dataset",
    "trl_env_reward",
    "trl_environment_factory",
    "verifiers_app",
    "verify_in_sandbox",
    "verify_with_pytest",
    "weighted_score",
]


def test_the_runtime_api_is_the_pinned_list():
    import hermes_envgen.runtime as runtime

    assert sorted(runtime.__all__) == sorted(RUNTIME_API)
    assert len(set(runtime.__all__)) == len(runtime.__all__)


def _definition(name: str) -> tuple[str, ast.AST | None, str | None]:
    """The module that defines a declared name, and its definition and docstring there.

    A constant's docstring is the string literal right after its assignment (as Sphinx reads it).
    """
    import hermes_envgen.runtime as runtime

    value = getattr(runtime, name)
    module = getattr(value, "__module__", None)
    if not (isinstance(value, type) or callable(value)) or not module:
        module = f"hermes_envgen.runtime.{runtime._EXPORTS[name]}"
    source = importlib.import_module(module).__file__
    body = ast.parse(Path(source).read_text(encoding="utf-8")).body
    for index, node in enumerate(body):
        defines = isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        overload = defines and any(
            getattr(d, "id", getattr(d, "attr", None)) == "overload" for d in node.decorator_list
        )
        if defines and node.name == name and not overload:  # the implementation, documented
            return module, node, ast.get_docstring(node)
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        if name in {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}:
            after = body[index + 1] if index + 1 < len(body) else None
            literal = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
            doc = after.value.value if literal else None
            return module, node, doc if isinstance(doc, str) else None
    return module, None, None


@pytest.mark.parametrize("name", RUNTIME_API)
def test_each_declared_runtime_name_says_what_it_is_for(name):
    module, node, doc = _definition(name)
    assert node is not None, f"{name} is not defined at the top of {module}"
    assert doc and len(doc.split()) >= 4, f"{module}.{name} has no docstring that says what for"
    if isinstance(node, ast.ClassDef):  # and so does each public method and property of it
        undocumented = [
            f"{name}.{member.name}"
            for member in node.body
            if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef))
            and not member.name.startswith("_")
            and not ast.get_docstring(member)
        ]
        assert undocumented == []


def _unannotated(function, qualname: str) -> list[str]:
    signature = inspect.signature(function)
    missing = [
        f"{qualname}({parameter})"
        for parameter in signature.parameters
        if parameter not in ("self", "cls")
        and signature.parameters[parameter].annotation is inspect.Parameter.empty
    ]
    if signature.return_annotation is inspect.Signature.empty and qualname.split(".")[-1] != (
        "__init__"
    ):
        missing.append(f"{qualname} -> ?")
    return missing


@pytest.mark.parametrize("name", RUNTIME_API)
def test_each_declared_runtime_name_is_typed(name):
    # mypy (strict over these modules, in scripts/test.sh) checks the bodies; this names what a
    # reader of the signature would miss, also for what a decorator wraps.
    import hermes_envgen.runtime as runtime

    value = getattr(runtime, name)
    if isinstance(value, type):
        methods = [
            (f"{name}.{attr}", inspect.unwrap(getattr(member, "__func__", member)))
            for attr, member in vars(value).items()
            if (not attr.startswith("_") or attr == "__init__")
            and inspect.isfunction(inspect.unwrap(getattr(member, "__func__", member)))
        ]
        properties = [
            (f"{name}.{attr}", member.fget)
            for attr, member in vars(value).items()
            if isinstance(member, property) and not attr.startswith("_")
        ]
        missing = [m for q, f in methods + properties for m in _unannotated(f, q)]
        assert missing == [], f"unannotated: {missing}"
    elif callable(value):
        assert _unannotated(value, name) == []
    else:
        _, node, _ = _definition(name)
        assert isinstance(node, ast.AnnAssign), f"{name} is a constant without a type"


def test_the_runtime_package_forwards_no_name_outside_its_api():
    # Names it exported before the API was cut to __all__ are gone from it: `hermes-envgen
    # update` rewrites a project's imports of them to their modules (generate/migrate.py).
    import hermes_envgen.runtime as runtime

    assert not hasattr(runtime, "_DEPRECATED")
    with pytest.raises(AttributeError):
        runtime.REGISTRY  # noqa: B018  # the lookup is the test
    with pytest.raises(ImportError):
        exec("from hermes_envgen.runtime import ToolError", {})
    # ToolError is the Hermes skill's name of the record, in the skill's agent_loop: kept there
    from hermes_envgen.runtime.loop.agent_loop import ToolError
    from hermes_envgen.runtime.rollout import ToolErrorRecord

    assert ToolError is ToolErrorRecord


def _strict_modules() -> set[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    (strict,) = [o for o in config["overrides"] if o.get("disallow_untyped_defs")]
    return set(strict["module"])


def test_mypy_is_strict_over_every_module_the_runtime_api_comes_from():
    import hermes_envgen.runtime as runtime

    defining = {_definition(name)[0] for name in runtime.__all__} | {"hermes_envgen.runtime"}
    defining = {module for module in defining if module.startswith("hermes_envgen")}
    # and the bases of the declared classes: their methods are the API too (ServeDelivery's)
    bases = {
        base.__module__
        for name in runtime.__all__
        if isinstance(getattr(runtime, name), type)
        for base in getattr(runtime, name).__mro__
        if base.__module__.startswith("hermes_envgen.")
    }
    assert _strict_modules() == defining | bases


# The deep import paths the v0.1.0 project's files use beside the runtime's API: still there,
# or (a module that moved into the runtime's packages) rewritten by `hermes-envgen update` to
# where the names are now, as are the names since removed (generate/migrate.py;
# tests/generate/test_release.py updates that project and runs it).
LEGACY_IMPORTS = {
    "hermes_envgen.runtime.datasets": ["split_train_eval"],
    "hermes_envgen.runtime.rewards": [
        "verify_in_sandbox",
        "ask_judge",
        "answer_matches",
        "efficiency_score",
        "tool_usage_score",
        "weighted_score",
    ],
    "hermes_envgen.testing.envs": ["build_env", "read_eval_results", "validate_groups"],
    "hermes_envgen.testing.runner": ["offline_environment", "run_env_mode", "OFFLINE_ENVIRONMENT"],
    "hermes_envgen.testing.policy": ["scripted_policy"],
    "hermes_envgen.runtime.evaluation": ["summarize", "SampleJournal", "wilson_interval"],
}


@pytest.mark.parametrize("module", sorted(LEGACY_IMPORTS))
def test_import_paths_of_earlier_projects_still_work(module):
    from hermes_envgen.generate.migrate import _new_module

    missing = []
    for name in LEGACY_IMPORTS[module]:
        where = _new_module(module, name) or module  # where `update` takes the import
        if not hasattr(importlib.import_module(where), name):
            missing.append(f"{where}.{name}")
    assert missing == []


# Exceptions that never leave the module that raises them: each is caught where it is made.
INTERNAL_EXCEPTIONS = {
    "hermes_envgen.runtime.parsers.base.UnreadableCall",  # a parser's "not a call", made a miss
    "hermes_envgen.runtime.parsers.base.NoCallMeant",  # a parser's "no call meant", made a miss
    # a hook raised: the rollout ends, recorded
    "hermes_envgen.runtime.loop.agent_loop._HookFailed",
    # a fetched body over the limit or not decodable: web_fetch makes it a tool error
    "hermes_envgen.runtime.tools.content_decoding.TooLarge",
    "hermes_envgen.runtime.tools.content_decoding.NotDecodable",
}


def test_every_exception_class_derives_from_the_error_root():
    from hermes_envgen.errors import HermesEnvgenError

    names = sorted(
        ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        for path in PACKAGE.rglob("*.py")
        if path.name != "__main__.py"
    )
    classes = {
        f"{name}.{cls.__qualname__}": cls
        for name in names
        for cls in vars(importlib.import_module(name)).values()
        if isinstance(cls, type) and issubclass(cls, BaseException) and cls.__module__ == name
    }
    assert "hermes_envgen.errors.UsageError" in classes
    outside = sorted(
        name
        for name, cls in classes.items()
        if not issubclass(cls, HermesEnvgenError) and name not in INTERNAL_EXCEPTIONS
    )
    assert outside == [], f"exceptions outside hermes_envgen.errors.HermesEnvgenError: {outside}"
    assert set(classes) >= INTERNAL_EXCEPTIONS, "an internal exception was renamed or removed"


def test_no_module_of_ours_is_in_an_import_cycle_not_even_through_lazy_or_type_only_imports():
    # A module imported inside a function still forms a cycle: the design hides it, it does
    # not remove it; nor does an import under `if TYPE_CHECKING:` (agent_loop <-> records, the
    # viewer's three modules over RolloutCard were such cycles: rollout.py and rollout_card.py
    # ended them).
    modules = {_dotted(path): path for path in sorted(PACKAGE.rglob("*.py"))}
    graph = {name: _our_imports(path, modules) - {name} for name, path in modules.items()}
    assert _cycles(graph) == []
    # chat_template <-> trajectory, once hidden by an import inside the probe, is broken: the
    # start-up check (template_check) needs the training data, the rendering does not.
    runtime = "hermes_envgen.runtime"
    assert f"{runtime}.chat.trajectory" in graph[f"{runtime}.chat.template_check"]
    assert f"{runtime}.chat.template_check" not in graph[f"{runtime}.chat.trajectory"]
    # the rollout's vocabulary lies below the loop that fills it and the files that keep it
    assert f"{runtime}.rollout" in graph[f"{runtime}.loop.agent_loop"]
    assert f"{runtime}.rollout" in graph[f"{runtime}.rollouts.evaluation.journal"]
    viewer = {f"{runtime}.rollouts.{name}" for name in ("rollout_view", "run_glance", "token_view")}
    for module in viewer:
        assert f"{runtime}.rollouts.rollout_card" in graph[module]


def test_the_cycle_check_sees_an_import_inside_a_function_and_under_type_checking(tmp_path):
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [{"a", "b", "c"}]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    package = tmp_path / "hermes_envgen"
    package.mkdir()
    (package / "one.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from hermes_envgen import two\n"
    )
    (package / "two.py").write_text("def f():\n    from . import one\n")
    modules = {f"hermes_envgen.{name}": package / f"{name}.py" for name in ("one", "two")}
    graph = {
        name: _our_imports(path, modules, root=tmp_path) - {name} for name, path in modules.items()
    }
    assert _cycles(graph) == [set(modules)]


def _dotted(path: Path, root: Path = PACKAGE.parent) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts).removesuffix(".__init__")


def _our_imports(path: Path, modules: dict[str, Path], root: Path = PACKAGE.parent) -> set[str]:
    """The modules of ours ``path`` imports anywhere: in functions, under TYPE_CHECKING."""
    name = _dotted(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for child in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(child, ast.Import):
            found.update(alias.name for alias in child.names)
        elif isinstance(child, ast.ImportFrom):
            module = child.module or ""
            if child.level:
                parts = package.split(".")[: len(package.split(".")) - child.level + 1]
                module = ".".join(filter(None, [*parts, module]))
            for alias in child.names:  # `from package import submodule` is the submodule
                deeper = f"{module}.{alias.name}"
                found.add(deeper if deeper in modules else module)
    return found & set(modules)


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph.get(node, ()):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(component)

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


# -- one place maps errors to exit codes -----------------------------------------------------

# The mapper (hermes_envgen.errors.exit_code); everything else asks it.
MAPPER = PACKAGE / "errors.py"
_EXITS = {"exit", "Exit", "SystemExit", "_exit", "fail"}  # sys.exit, typer.Exit, cli's fail...


def _error_names() -> set[str]:
    """The names a handler catches when it handles hermes-envgen's errors (or pydantic's)."""
    import hermes_envgen.errors as errors
    import hermes_envgen.runtime.errors as runtime_errors

    names = {"ValidationError", "BaseException", "Exception"}
    for module in (errors, runtime_errors):
        names |= {n for n, v in vars(module).items() if isinstance(v, type)}
    return names


def _caught(handler: ast.ExceptHandler) -> set[str]:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return {
        node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
        for node in kinds
        if node is not None
    }


def _own_code(node: ast.AST) -> bool:
    """A code written out (``2``) or read off the error (``exc.exit_code``), not asked for."""
    written = isinstance(node, ast.Constant) and type(node.value) is int  # not True/False
    return written or (isinstance(node, ast.Attribute) and node.attr == "exit_code")


def exit_code_mappers(source: str, error_names: set[str]) -> list[int]:
    """Lines where a handler of hermes-envgen's errors picks the exit code itself.

    It reads ``.exit_code`` off what it caught, or exits / returns with a code of its own,
    instead of asking :func:`hermes_envgen.errors.exit_code`.
    """
    found = []
    for handler in ast.walk(ast.parse(source)):
        if not isinstance(handler, ast.ExceptHandler):
            continue
        catches_ours = handler.type is None or bool(_caught(handler) & error_names)
        for node in (n for statement in handler.body for n in ast.walk(statement)):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "exit_code"
                and isinstance(node.value, ast.Name)
                and node.value.id == handler.name
            ):
                found.append(node.lineno)
            elif not catches_ours:
                continue
            elif isinstance(node, ast.Return) and node.value is not None and _own_code(node.value):
                found.append(node.lineno)
            elif isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name in _EXITS and any(_own_code(a) for a in node.args[-1:]):
                    found.append(node.lineno)
    return sorted(set(found))


def test_one_place_maps_errors_to_exit_codes():
    names = _error_names()
    sources = [*PACKAGE.rglob("*.py"), *(REPO / "hooks").glob("*.py")]
    second = sorted(
        f"{path.relative_to(REPO)}:{line}"
        for path in sources
        if path != MAPPER
        for line in exit_code_mappers(path.read_text(), names)
    )
    assert second == [], f"a second place maps errors to exit codes: {second}"


def test_the_mapper_scan_catches_a_second_mapper():
    names = _error_names()
    source = (
        "try:\n    run()\n"
        "except HermesEnvgenError as exc:\n    sys.exit(exc.exit_code)\n"  # 4
        "except ValidationError:\n    sys.exit(2)\n"  # 6
        "except (OSError, UsageError) as exc:\n    print(exc)\n    return 1\n"  # 9
        "except EnvConfigError as exc:\n    raise typer.Exit(code=exc.exit_code)\n"  # 11
        "except CheckError as exc:\n    fail(str(exc), exc.exit_code)\n"  # 13
        "except HermesEnvgenError as exc:\n    sys.exit(exit_code(exc))\n"  # asks: fine
        "except ValueError as exc:\n    fail(f'bad: {exc}')\n"  # not our error: fine
        "except Exception:\n    return False\n"  # a yes/no, not an exit code: fine
    )
    assert exit_code_mappers(source, names) == [4, 6, 9, 11, 13]


# -- the tests: no test module imports another -----------------------------------------------

TESTS = REPO / "tests"


def _test_modules_imported(path: Path, root: Path = TESTS) -> list[str]:
    """The test modules (``test_*.py``) that the module at ``path`` imports."""
    relative = path.relative_to(root).with_suffix("").parts
    package = list(relative[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(filter(None, [*package[: len(package) - node.level + 1], base]))
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found += [name for name in names if name.rpartition(".")[2].startswith("test_")]
    return sorted(set(found))


def test_no_test_module_imports_another_their_shared_code_lives_in_helpers():
    wrong = {
        str(path.relative_to(TESTS)): imported
        for path in sorted(TESTS.rglob("*.py"))
        if "fixtures" not in path.relative_to(TESTS).parts
        and (imported := _test_modules_imported(path))
    }
    assert wrong == {}


def test_the_test_import_scan_sees_every_form(tmp_path):
    (tmp_path / "pkg").mkdir()
    probe = tmp_path / "pkg" / "test_b.py"
    probe.write_text(
        "import test_a\nfrom test_c import X\nfrom .test_d import Y\nfrom . import test_e\n"
        "from helpers.envgen import git\n"
    )
    assert _test_modules_imported(probe, tmp_path) == [
        "pkg.test_d",
        "pkg.test_e",
        "test_a",
        "test_c",
    ]


# -- ARCHITECTURE.md's tree is the source tree -----------------------------------------------

NAME = re.compile(r"[\w.]+(?:\.py|/)")
DESCRIPTION_COLUMN = 26  # a line indented this far continues a description


def documented_tree(markdown: str) -> set[str]:
    """The folders (``a/b/``) and modules (``a/b/c.py``) ARCHITECTURE.md's tree lists under src/.

    A tree line is its names (comma-separated, ``/`` ending a folder) indented two spaces per
    level, then two spaces and a description; deeper-indented lines continue a description.
    """
    block = markdown.split("```\n", 2)[1]
    folders: dict[int, str] = {}  # level -> the folder whose entries are one level deeper
    found: set[str] = set()
    for line in block.splitlines():
        indent = len(line) - len(line.lstrip(" "))
        if not line.strip() or indent >= DESCRIPTION_COLUMN:
            continue
        names = [n.strip() for n in re.split(r" {2,}", line.strip())[0].split(",")]
        if not all(NAME.fullmatch(name) for name in names if name):
            continue
        level = indent // 2
        parent = folders.get(level - 1, "") if level else ""
        for name in filter(None, names):
            path = parent + name
            if level == 0 and path != "src/":
                continue
            if level and not parent.startswith("src/"):
                continue
            found.add(path)
            if name.endswith("/"):
                folders[level] = path
                for deeper in [key for key in folders if key > level]:
                    del folders[deeper]
    return found


def source_tree(root: Path = REPO) -> set[str]:
    """The folders and modules under src/ (``__init__.py`` aside: every folder is a package)."""
    found = {"src/"}
    for path in (root / "src").rglob("*.py"):
        relative = path.relative_to(root)
        if "__pycache__" in relative.parts:
            continue
        for depth in range(2, len(relative.parts)):
            found.add("/".join(relative.parts[:depth]) + "/")
        if path.name != "__init__.py":
            found.add(relative.as_posix())
    return found


def test_architecture_md_lists_every_folder_and_module_of_src_and_nothing_else():
    documented = documented_tree((REPO / "ARCHITECTURE.md").read_text(encoding="utf-8"))
    real = source_tree()
    assert sorted(real - documented) == [], "in src/, missing from ARCHITECTURE.md's tree"
    assert sorted(documented - real) == [], "in ARCHITECTURE.md's tree, not in src/"


def test_the_tree_reader_follows_levels_name_lists_and_descriptions():
    markdown = (
        "intro\n```\n"
        "hooks/                    not under src/\n"
        "src/\n"
        "  pkg/                    the package\n"
        "    a.py, b.py            two modules\n"
        "    sub/                  a folder; the description goes on\n"
        "                          below, with.py names/ that are prose\n"
        "      c.py\n"
        "    d.py                  back at pkg's level\n"
        "tests/                    mirrors src/\n"
        "```\n"
    )
    assert documented_tree(markdown) == {
        "src/",
        "src/pkg/",
        "src/pkg/a.py",
        "src/pkg/b.py",
        "src/pkg/sub/",
        "src/pkg/sub/c.py",
        "src/pkg/d.py",
    }


# -- the runtime's own layers (ARCHITECTURE.md's second table) --------------------------------

RUNTIME = "hermes_envgen.runtime"
BELOW_EVERYTHING = {"errors", "text", "urls", "retries"}


def runtime_layers(markdown: str) -> dict[str, set[str]]:
    """ARCHITECTURE.md's table "inside runtime": each package -> what it may import."""
    table = markdown.split("| inside `runtime` |", 1)[1].split("\n\n", 1)[0]
    layers: dict[str, set[str]] = {}
    for row in table.splitlines()[2:]:
        package, allowed = (cell.strip() for cell in row.strip("|").split("|"))
        names = set(re.findall(r"`([\w.]+)`", allowed))
        if "all it may import" in allowed:
            names |= {n for layer in names for n in layers[layer]}
        layers[package.strip("`")] = names
    return layers


def _layer_of(module: str) -> str | None:
    """``hermes_envgen.runtime.loop.agent_loop`` -> ``loop`` (None: the package itself)."""
    rest = module.removeprefix(f"{RUNTIME}.")
    return None if module == RUNTIME else rest.split(".")[0]


def test_each_package_of_the_runtime_imports_only_the_layers_below_it():
    layers = runtime_layers((REPO / "ARCHITECTURE.md").read_text(encoding="utf-8"))
    assert set(layers) | BELOW_EVERYTHING == {
        path.stem for path in (PACKAGE / "runtime").iterdir() if path.stem != "__init__"
    } - {"__pycache__"}, "a package of the runtime is missing from the table, or gone"
    wrong = []
    for layer, allowed in layers.items():
        folder = PACKAGE / "runtime" / layer
        paths = sorted(folder.rglob("*.py")) if folder.is_dir() else [folder.with_suffix(".py")]
        for path in paths:
            for module in imported_modules(path):
                if not module.startswith(f"{RUNTIME}."):
                    continue
                target = _layer_of(module)
                dotted = module.removeprefix(f"{RUNTIME}.")
                if target in {layer, *BELOW_EVERYTHING} or target in allowed or dotted in allowed:
                    continue
                wrong.append(f"{path.relative_to(PACKAGE)} imports {module}")
    assert wrong == []


def test_the_layer_table_reader_expands_all_it_may_import():
    markdown = (
        "| inside `runtime` | may import |\n|---|---|\n"
        "| `a` | nothing else |\n| `b` | `a`, `c.d` (a type) |\n"
        "| `e` | `b` and all it may import |\n"
        "\nafter\n"
    )
    assert runtime_layers(markdown) == {"a": set(), "b": {"a", "c.d"}, "e": {"b", "a", "c.d"}}
