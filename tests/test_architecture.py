"""The packages' imports point one way along the data flow:

    planning_gym <- pretrain <- engine <- posttrain <- analysis <- reproduce

Why: each stage must be usable and testable without the ones after it (the gym runs without
torch, an evaluation without the trainers, a measurement without the reproduction driver), and a
backwards import is how cycles start (`analysis` once imported the reproduction modules, which
imported `analysis`).  Imports are read with `ast`, not executed, so the test is fast, sees imports
inside functions too, and cannot be fooled by import order.  `benchmarks/` and `tests/` may import
anything.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ORDER = ("planning_gym", "pretrain", "engine", "posttrain", "analysis", "reproduce")
# temporary aliases of moved modules (kept for a process started before the move); delete the
# entry together with the file
ALIASES: set[str] = set()          # files exempt from the rule (none)


def imported_packages(path: Path) -> set[tuple[str, int]]:
    """(top-level package, line) of every absolute import in ``path``, at any depth of the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {(alias.name.split(".")[0], node.lineno) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add((node.module.split(".")[0], node.lineno))
    return found


def backward_imports(package: str) -> list[str]:
    """``file:line imports later`` for each import of a package later in ORDER than ``package``."""
    rank = ORDER.index(package)
    return [f"{path.relative_to(ROOT)}:{line} imports {top}"
            for path in sorted((ROOT / package).rglob("*.py"))
            if str(path.relative_to(ROOT)) not in ALIASES
            for top, line in sorted(imported_packages(path))
            if top in ORDER and ORDER.index(top) > rank]


def test_every_package_exists():
    assert all((ROOT / p / "__init__.py").is_file() for p in ORDER)


def test_analysis_never_imports_reproduce():
    offenders = [b for b in backward_imports("analysis") if b.endswith("imports reproduce")]
    assert not offenders, "analysis/ only measures; the reproduction driver lives in reproduce/: " + \
        "; ".join(offenders)


@pytest.mark.parametrize("package", ORDER[:-1])
def test_no_package_imports_a_later_stage(package):
    offenders = backward_imports(package)
    assert not offenders, f"{package} must not import a later stage of {' <- '.join(ORDER)}: " + \
        "; ".join(offenders)


def test_the_checker_sees_imports_inside_functions(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import os\n\ndef g():\n    from reproduce.store import Store\n    from . import sibling\n")
    assert imported_packages(f) == {("os", 1), ("reproduce", 4)}
