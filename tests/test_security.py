"""A `.comm` program can't run code: no eval, exec, pickle or dynamic import of user text in the package."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "commdsl"
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__"}
FORBIDDEN_MODULES = {"pickle", "cPickle", "marshal", "shelve", "dill", "cloudpickle"}


def _violations(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
            yield f"{path.name}:{node.lineno} calls {node.func.id}()"
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            )
            for name in names:
                if name.split(".")[0] in FORBIDDEN_MODULES:
                    yield f"{path.name}:{node.lineno} imports {name}"
        if (
            isinstance(node, ast.Attribute)
            and node.attr in ("loads", "load")
            and isinstance(node.value, ast.Name)
            and node.value.id in FORBIDDEN_MODULES
        ):
            yield f"{path.name}:{node.lineno} uses {node.value.id}.{node.attr}"


def test_package_never_evaluates_or_unpickles():
    found = [v for path in sorted(PACKAGE.rglob("*.py")) for v in _violations(path)]
    assert found == []


def _fixed(v: ast.expr) -> bool:
    """A part of an imported module's name that no input reaches: a literal, the CLI's verb `name` (from its
    fixed table), the importing package's `__name__`, or `m.name` of `pkgutil.iter_modules(__path__)` (the
    package's own files: collectives/)."""
    if isinstance(v, ast.Constant):
        return True
    if not isinstance(v, ast.FormattedValue):
        return False
    e = v.value
    return (isinstance(e, ast.Name) and e.id in ("name", "__name__")) or (
        isinstance(e, ast.Attribute) and e.attr == "name" and isinstance(e.value, ast.Name) and e.value.id == "m"
    )


def test_dynamic_imports_take_only_fixed_names():
    """importlib.import_module is used for the CLI's verb modules and the collective kinds' modules: the names
    are literals or the package's own module names, never input."""
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "import_module"
            ):
                arg = node.args[0]
                assert isinstance(arg, ast.JoinedStr) and all(map(_fixed, arg.values)), f"{path.name}:{node.lineno}"


def test_every_test_the_security_and_reliability_docs_name_exists():
    """docs/security.md promises nothing without a test: each `tests/test_x.py::name` (and `::name` after it,
    meaning the same file) it and docs/reliability.md name must be a test function of that file."""
    import re

    root = PACKAGE.parent
    missing = []
    for doc in ("docs/security.md", "docs/reliability.md"):
        current = None
        for m in re.finditer(r"(?:tests/)?(test_\w+\.py)|::(\w+)", (root / doc).read_text()):
            if m.group(1):
                current = m.group(1)
                if not (root / "tests" / current).exists():
                    missing.append(f"{doc}: {current}")
            elif current is None or not re.search(
                rf"^def {m.group(2)}\(", (root / "tests" / current).read_text(), re.M
            ):
                missing.append(f"{doc}: {current}::{m.group(2)}")
    assert missing == []
