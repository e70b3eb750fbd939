"""The shim's modules are private: code outside dataplane/shim uses `dataplane.shim` (its
`__init__` re-exports the public surface) and never a `_bind_*` module or `_loader`. An `ast`
walk of every module, so an import hidden in a function counts too."""

from __future__ import annotations

import ast
from pathlib import Path

import dataplane.shim as shim_package

SHIM_DIR = Path(shim_package.__file__).parent
REPO = SHIM_DIR.parents[1]
CHECKED = ("gateway", "api", "dataplane", "bench", "tests")
#: Tests of the private modules themselves (they say so at the top), and this test, which
#: names them.
ALLOWED = {
    "tests/unit/test_shim_imports.py",
    "tests/unit/test_shim_layout.py",
    "tests/unit/test_shim_loader.py",
}


def _private(name: str) -> bool:
    return name.startswith(("_bind_", "_loader"))


def private_uses(path: Path) -> list[str]:
    """Each place in path that reaches into dataplane.shim's private modules."""
    found = []
    shown = path.relative_to(REPO) if REPO in path.parents else path
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        where = f"{shown}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            parts = node.module.split(".")
            if parts[:2] == ["dataplane", "shim"] and any(_private(p) for p in parts[2:]):
                found.append(f"{where}: from {node.module} import ...")
            elif node.module == "dataplane.shim":
                found += [f"{where}: {a.name}" for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[:2] == ["dataplane", "shim"] and any(_private(p) for p in parts[2:]):
                    found.append(f"{where}: import {alias.name}")
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            if isinstance(base, ast.Attribute) and base.attr == "shim":
                found.append(f"{where}: .shim.{node.attr}")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith(("dataplane.shim._bind_", "dataplane.shim._loader"))
        ):
            found.append(f"{where}: {node.value!r}")
    return found


def checked_files() -> list[Path]:
    files = []
    for top in CHECKED:
        files += sorted((REPO / top).rglob("*.py"))
    return [
        p for p in files if SHIM_DIR not in p.parents and str(p.relative_to(REPO)) not in ALLOWED
    ]


def test_no_module_outside_the_shim_imports_a_private_shim_module() -> None:
    files = checked_files()
    assert any(p.parts[-2:] == ("dataplane", "ring.py") for p in files)  # the walk found code
    uses = [use for path in files for use in private_uses(path)]
    assert not uses, "import these from dataplane.shim instead:\n" + "\n".join(uses)


def test_the_check_catches_each_form(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    forms = [
        "from dataplane.shim._bind_ring import create\n",
        "from dataplane.shim import _bind_ring as c\n",
        "import dataplane.shim._loader\n",
        "def f():\n    from dataplane.shim._loader import load\n",
        "import dataplane.shim\nx = dataplane.shim._loader\n",
    ]
    for form in forms:
        sample.write_text(form)
        assert private_uses(sample), form
    sample.write_text("from dataplane.shim import load, ring_create\n")
    assert not private_uses(sample)


def test_every_public_name_is_exported() -> None:
    assert sorted(set(shim_package.__all__)) == sorted(shim_package.__all__)
    missing = [name for name in shim_package.__all__ if not hasattr(shim_package, name)]
    assert not missing
    assert not [name for name in shim_package.__all__ if name.startswith("_")]
