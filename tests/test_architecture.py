"""The layout's rules, read from the code's own imports: one package per stage, no cycles
between stages, nothing imports the CLI, a stage reaches another only through its public
face (`runner/<stage>/__init__.py`), every face declares `__all__`, every exception the
package defines derives from one base, and only the claim checks and the execute worker import torch or megatron."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from conftest import REPO

PACKAGE = REPO / "runner"
STAGES = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
HEAVY = ("torch", "megatron", "transformer_engine")


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = modules()


def imports_of(name: str, path: Path) -> list[tuple[str, int]]:
    """Absolute names of every import in the module, top-level or inside a function.
    `from X import y` counts as importing X (a name its face exports, or a module of it),
    except `from runner import y`, which imports the stage y."""
    is_package = path.name == "__init__.py"
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                out.append((f"{target}.{alias.name}" if target == "runner" else target, node.lineno))
    return out


def stage_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "runner" and len(parts) > 1 else None


GRAPH = {name: imports_of(name, path) for name, path in MODULES.items()}


def test_every_stage_is_a_package_with_a_public_face():
    expected = {"core", "load", "validate", "providers", "run", "grade", "report", "claims", "execute", "install", "agents", "stats"}
    assert set(STAGES) == expected
    flat = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert flat == ["__init__.py", "cli.py"], "modules outside any stage package"
    for stage in STAGES:
        face = importlib.import_module(f"runner.{stage}")
        names = getattr(face, "__all__", None)
        assert names, f"runner/{stage}/__init__.py declares no __all__"
        missing = [n for n in names if not hasattr(face, n)]
        assert not missing, f"runner.{stage}.__all__ names what it lacks: {missing}"


def test_nothing_imports_the_cli():
    offenders = [f"{m}:{line}" for m, found in GRAPH.items() for target, line in found if target == "runner.cli" and m != "runner.cli"]
    assert offenders == []


def test_stages_reach_each_other_only_through_public_faces():
    offenders = []
    for module, found in GRAPH.items():
        own = stage_of(module)
        for target, line in found:
            other = stage_of(target)
            if other is None or other == own:
                continue
            if target != f"runner.{other}":
                offenders.append(f"{MODULES[module].relative_to(REPO)}:{line} imports {target}")
    assert offenders == []


def test_no_cycle_between_stages():
    edges: dict[str, set[str]] = {stage: set() for stage in STAGES}
    for module, found in GRAPH.items():
        own = stage_of(module)
        for target, _ in found:
            other = stage_of(target)
            if own in edges and other in edges and other != own:
                edges[own].add(other)
    order, state = [], {}

    def visit(stage: str, path: tuple[str, ...]) -> None:
        if state.get(stage) == "done":
            return
        assert state.get(stage) != "open", "stage cycle: " + " -> ".join(path + (stage,))
        state[stage] = "open"
        for other in sorted(edges[stage]):
            visit(other, path + (stage,))
        state[stage] = "done"
        order.append(stage)

    for stage in STAGES:
        visit(stage, ())
    # core is the floor: it depends on no other stage
    assert edges["core"] == set()


def test_the_checker_finds_a_violation(tmp_path):
    # The rules above must be able to fail: a deep import and a CLI import are both seen.
    fake = PACKAGE / "grade" / "records.py"
    found = imports_of("runner.grade.records", fake)
    assert ("runner.load", found[[t for t, _ in found].index("runner.load")][1]) in found
    probe = tmp_path / "probe.py"
    probe.write_text("from ..load.skills import Skill\nfrom .. import cli\n")
    assert [t for t, _ in imports_of("runner.grade.probe", probe)] == ["runner.load.skills", "runner.cli"]


def test_only_the_claim_checks_and_the_execute_worker_import_torch_or_megatron():
    offenders = [
        f"{MODULES[m].relative_to(REPO)}:{line} imports {t}"
        for m, found in GRAPH.items()
        for t, line in found
        if t.split(".")[0] in HEAVY and stage_of(m) != "claims" and m != "runner.execute.worker"
    ]
    assert offenders == []


def _exception_classes() -> dict[str, tuple[Path, int, list[str]]]:
    classes = {}
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                classes[node.name] = (path, node.lineno, [ast.unparse(b).split(".")[-1] for b in node.bases])
    return classes


def test_every_exception_derives_from_the_one_base():
    classes = _exception_classes()
    builtin = {name for name in dir(__builtins__ if isinstance(__builtins__, dict) else __builtins__) if name.endswith(("Error", "Exception"))}

    def is_exception(name: str, seen: tuple = ()) -> bool:
        if name in builtin or name in ("Exception", "BaseException"):
            return True
        return name in classes and name not in seen and any(is_exception(b, seen + (name,)) for b in classes[name][2])

    def reaches_base(name: str) -> bool:
        return name == "MbskillsError" or (name in classes and any(reaches_base(b) for b in classes[name][2]))

    offenders = [f"{path.relative_to(REPO)}:{line} {name}" for name, (path, line, bases) in classes.items() if is_exception(name) and name != "MbskillsError" and not reaches_base(name)]
    assert offenders == []
    assert len([n for n in classes if is_exception(n)]) >= 9  # UsageError, LoadError, HarnessError, ProviderError, ...


@pytest.mark.parametrize("name", ["UsageError", "LoadError", "ProviderError", "JudgeError", "ToolFailure", "ClaimFailed", "CheckFailed", "NeedsTransformerEngine"])
def test_named_errors_share_the_base(name):
    from runner.core import MbskillsError

    where = {"UsageError": "runner.core", "LoadError": "runner.core", "ProviderError": "runner.providers", "JudgeError": "runner.grade", "ToolFailure": "runner.run.skill_tools", "ClaimFailed": "runner.claims.registry", "CheckFailed": "runner.claims.gpu", "NeedsTransformerEngine": "runner.claims.environment"}
    assert issubclass(getattr(importlib.import_module(where[name]), name), MbskillsError)
