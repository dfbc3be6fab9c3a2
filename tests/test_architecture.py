"""The package's shape: parts import only the parts below them (and the kinds of data only the
kinds below them), no circles (a package's ``__init__`` included), no private names across
parts, no file name in two folders (docs/architecture.md)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "attnkit"
BASE = {"tokens", "errors", "checks", "folders", "_version"}  # shared by every part
ALLOWED = {  # part -> the parts it may import (besides itself and BASE)
    "ops": set(),
    "attention": {"ops"},
    "data": set(),
    "decoding": set(),
    "train": set(),
    "diagnose": {"attention"},
    "models": {"attention", "ops"},
    "tasks": {"data", "models", "decoding", "train", "diagnose"},
    "export": {"attention", "models", "decoding", "ops"},
    "serve": {"tasks", "decoding", "export"},
    "cli": {
        "attention",
        "data",
        "models",
        "decoding",
        "train",
        "diagnose",
        "tasks",
        "export",
        "serve",
        "ops",
        "__init__",
    },
    "__init__": {"attention", "diagnose"},
    "__main__": {"cli"},  # python -m attnkit: the command line, above everything
}
DATA_BASE = {"paths"}  # data/paths.py: the files data is read from, shared by every kind
DATA_ALLOWED = {  # kind of data (data/KIND/) -> the kinds it may import (besides DATA_BASE)
    "audio": set(),
    "vocab": set(),
    "augment": {"audio"},
    "corpora": {"audio"},  # the readers and what they fill
    "worlds": {"audio", "corpora"},  # the built-in worlds are kept as the corpora are
}
# A file name that stands in several folders for one thing: a task's module (tasks/), its
# command (cli/) and, for VQA, its model (models/).
SAME_THING = {"asr.py", "caption.py", "explore.py", "lm.py", "ocr.py", "translate.py", "vqa.py"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _type_checking_only(tree: ast.Module) -> set[ast.AST]:
    """The import statements under ``if TYPE_CHECKING:``: read by type checkers, never run."""
    return {
        stmt
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
        for block in node.body
        for stmt in ast.walk(block)
    }


def _imports(path: Path, package: str = "", *, runtime: bool = False):
    """(imported module, imported names) of every import statement, lazy ones included (with
    ``runtime``, not those only type checkers read); ``package``: the package that relative
    imports start from."""
    tree = ast.parse(path.read_text())
    skipped = _type_checking_only(tree) if runtime else set()
    for node in ast.walk(tree):
        if node in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([module] if module else []))
            yield module, [a.name for a in node.names]


def _graph(*, runtime: bool = False):
    graph = {}
    for path in PACKAGE.rglob("*.py"):
        name = _module_name(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = [
            (m, names)
            for m, names in _imports(path, package, runtime=runtime)
            if m == "attnkit" or m.startswith("attnkit.")
        ]
    return graph


def test_every_part_imports_only_the_parts_below_it():
    wrong, graph = [], _graph()
    for module, imports in graph.items():
        part = _part(module)
        for target, names in imports:
            # `from attnkit import X`: a part when X is one, else the package's re-exports
            targets = (
                {_part(target)}
                if target != "attnkit"
                else {
                    _part(f"attnkit.{n}") if f"attnkit.{n}" in graph else "__init__" for n in names
                }
            )
            for t in targets - {part} - BASE:
                if part in BASE or t not in ALLOWED.get(part, set()):
                    wrong.append(f"{module} -> {target}")
    assert wrong == []


def _data_kind(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "data" else None


def test_every_kind_of_data_imports_only_the_kinds_below_it():
    wrong, graph = [], _graph()
    assert set(DATA_ALLOWED) | DATA_BASE == {
        _data_kind(m) for m in graph if _data_kind(m)
    }  # every kind has its arrows
    for module, imports in graph.items():
        kind = _data_kind(module)
        if kind is None:
            continue
        for target, _ in imports:
            to = _data_kind(target) if target != "attnkit.data" else "__init__"
            if to is None or to == kind or to in DATA_BASE:
                continue
            if kind in DATA_BASE or to not in DATA_ALLOWED.get(kind, set()):
                wrong.append(f"{module} -> {target}")
    assert wrong == []


def test_no_import_circles():
    """None, also through a package's ``__init__``: a module that imports its own package (``from
    attnkit.tasks import metrics``) runs the ``__init__`` that imports it, a circle. Imports
    under ``if TYPE_CHECKING:`` never run, so they close no circle (the layering arrows still
    count them)."""
    graph = _graph(runtime=True)
    edges = {
        m: {t if t in graph else t.rpartition(".")[0] for t, names in imports}
        | {f"{t}.{n}" for t, names in imports for n in names if f"{t}.{n}" in graph}
        for m, imports in graph.items()
    }
    assert len(graph) > 40 and sum(map(len, edges.values())) > 80  # the walk sees the package
    state, cycles = {}, []

    def visit(node, stack):
        state[node] = "open"
        for nxt in edges.get(node, ()):
            if nxt == node or nxt not in graph:
                continue
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for m in graph:
        if m not in state:
            visit(m, [m])
    assert cycles == []


@pytest.mark.parametrize("folder", ["src/attnkit", "benchmarks"])
def test_no_private_name_is_imported_across_parts(folder):
    wrong = []
    for path in (ROOT / folder).rglob("*.py"):
        module = _module_name(path) if folder == "src/attnkit" else f"benchmarks.{path.stem}"
        for target, names in _imports(path):
            if not target.startswith("attnkit"):
                continue
            same_part = folder == "src/attnkit" and _part(target) == _part(module)
            private = [n for n in names if n.startswith("_") and n != "__version__"]
            private_module = any(p.startswith("_") and p != "_version" for p in target.split("."))
            if not same_part and (private or private_module):
                wrong.append(f"{module}: from {target} import {', '.join(names)}")
    assert wrong == []


def test_a_long_module_says_why_it_is_one_file():
    """A module over 750 lines states at its top (in its docstring) why it is not split (600
    lines before ruff format, whose layout takes about a fifth more lines for the same code)."""
    unexplained = []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        if text.count("\n") > 750 and "Why one file:" not in (
            ast.get_docstring(ast.parse(text)) or ""
        ):
            unexplained.append(str(path.relative_to(ROOT)))
    assert unexplained == []


def test_no_module_is_named_like_a_function_or_class_it_defines():
    """``from package import name`` gives one thing: a module ``x.py`` defines no ``x``
    (``cli/main.py``'s ``main`` is the console script's entry point, the one exception)."""
    clashes = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "__init__.py" or path.relative_to(PACKAGE).as_posix() == "cli/main.py":
            continue
        defined = {
            n.name
            for n in ast.parse(path.read_text()).body
            if isinstance(n, (ast.FunctionDef, ast.ClassDef))
        }
        if path.stem in defined:
            clashes.append(str(path.relative_to(ROOT)))
    assert clashes == []


def test_no_file_name_is_used_in_two_folders():
    """``lines.py`` names one thing: a module's file name stands in one folder only (``__init__.py``
    and :data:`SAME_THING` apart)."""
    folders = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name != "__init__.py" and path.name not in SAME_THING:
            folders.setdefault(path.name, []).append(str(path.parent.relative_to(PACKAGE)))
    assert {name: where for name, where in folders.items() if len(where) > 1} == {}
