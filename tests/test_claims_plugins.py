"""Skills carry their own claim checks (skills/<skill>/checks/, runner/claims/plugins.py):
the engine names no skill, finds the checks by convention, and a new skill with checks needs
no change under runner/."""

from __future__ import annotations

import ast
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, copy_bundle
from runner.cli import main

RUNNER = REPO / "runner"
SKILLS = sorted(p.name for p in (REPO / "skills").iterdir() if (p / "SKILL.md").is_file())
NEW = "my-own-skill"

NEW_SKILL_MD = """---
name: my-own-skill
description: Sets the data-parallel bucket size in Megatron-Bridge. Use when a user asks about bucket_size.
---

# My own skill

<!-- claim: mine-bucket-field -->
The DDP config's bucket size lives in `cfg.ddp.bucket_size` and defaults to `None`.
"""

NEW_CARD = """name: my-own-skill
claims:
  - id: mine-bucket-field
    statement: cfg.ddp.bucket_size defaults to None.
"""

NEW_CHECKS = """from runner.claims.kit import claim, get_field, literal, tiny_config


@claim("mine-bucket-field")
def bucket_field(ctx):
    r = ctx.read("The DDP config's bucket size lives in `{field:code}` and defaults to `{default:code}`.")
    found = get_field(tiny_config(), r.field)
    ctx.expect(found == literal(r.default), f"{r.field} defaults to {found!r}, not {r.default}")
"""


@pytest.fixture(autouse=True)
def _forget_new_skill():
    """A test's own skill leaves the registry with it, so other tests see the bundle's alone."""
    yield
    from runner.claims.registry import forget_skill

    forget_skill(NEW)


def _tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def test_the_engine_names_no_skill():
    offenders = []
    for path in sorted(p for p in RUNNER.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        text = path.read_text("utf-8", errors="replace")
        offenders += [f"{path.relative_to(REPO)} names {skill}" for skill in SKILLS if skill in text]
    assert offenders == []


def test_no_check_is_registered_under_runner():
    """No module of the engine registers a claim or GPU check: those are the skills' own."""
    offenders = []
    for path in sorted(RUNNER.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in ("claim", "gpu_check"):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offenders == []


def test_a_skills_checks_reach_the_engine_through_the_kit_only():
    offenders = []
    for path in sorted((REPO / "skills").glob("*/checks/*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            offenders += [f"{path.relative_to(REPO)}:{node.lineno} imports {n}" for n in names if n.split(".")[0] == "runner" and n != "runner.claims.kit" and n != "runner.claims"]
    assert offenders == []


def test_every_skill_carries_checks_and_the_gpu_checks_load_with_the_standard_library_alone():
    assert all(list((REPO / "skills" / s / "checks").glob("*.py")) for s in SKILLS)
    probe = f"import sys, json; sys.path.insert(0, {str(REPO)!r}); from pathlib import Path; from runner.claims.gpu import discover; print(json.dumps(sorted((c.skill, n) for n, c in discover(Path({str(REPO)!r})).items())))"
    done = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True, timeout=60)  # -S: no site-packages, as on a bare GPU machine
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert {skill for skill, _ in found} <= set(SKILLS) and len(found) >= 3


def _add_skill(bundle: Path, checks: str = NEW_CHECKS) -> Path:
    skill = bundle / "skills" / NEW
    (skill / "checks").mkdir(parents=True)
    (skill / "SKILL.md").write_text(NEW_SKILL_MD, "utf-8")
    (skill / "card.yaml").write_text(NEW_CARD, "utf-8")
    (skill / "checks" / "mine.py").write_text(checks, "utf-8")
    return skill


def test_adding_a_skill_with_checks_touches_nothing_under_runner(tmp_path, capsys):
    before = _tree_digest(RUNNER)
    bundle = copy_bundle(tmp_path)
    skill = _add_skill(bundle)
    code = main(["check", "--bundle", str(bundle), "--skill", NEW, "--out", str(tmp_path / "claims")])
    out = capsys.readouterr().out
    assert code == 0 and "mine-bucket-field" in out and out.rstrip().endswith("1 passed, 0 failed"), out
    # the check compares: a wrong default in the skill fails it
    (skill / "SKILL.md").write_text(NEW_SKILL_MD.replace("`None`", "`0`"), "utf-8")
    code = main(["check", "--bundle", str(bundle), "--skill", NEW, "--out", str(tmp_path / "claims")])
    out = capsys.readouterr().out
    assert code == 1 and "cfg.ddp.bucket_size defaults to None, not 0" in out, out
    assert _tree_digest(RUNNER) == before


def test_a_changed_checks_folder_is_loaded_again(tmp_path, capsys):
    bundle = copy_bundle(tmp_path)
    skill = _add_skill(bundle)
    assert main(["check", "--bundle", str(bundle), "--skill", NEW, "--out", str(tmp_path / "a")]) == 0
    (skill / "checks" / "mine.py").write_text(NEW_CHECKS.replace("found == literal(r.default)", "found != literal(r.default)"), "utf-8")
    assert main(["check", "--bundle", str(bundle), "--skill", NEW, "--out", str(tmp_path / "b")]) == 1
    capsys.readouterr()


@pytest.mark.parametrize(
    ("checks", "expect"),
    [
        ("def broken(:\n", "SyntaxError"),
        ("import no_such_module_here\n", "ModuleNotFoundError: No module named 'no_such_module_here'"),
    ],
    ids=["syntax", "import"],
)
def test_a_broken_plug_in_is_one_line_naming_its_file(tmp_path, capsys, checks, expect):
    bundle = copy_bundle(tmp_path)
    _add_skill(bundle, checks)
    code = main(["check", "--bundle", str(bundle), "--skill", NEW, "--out", str(tmp_path / "claims")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and f"skills/{NEW}/checks/mine.py: cannot import this skill's checks" in err and expect in err, err
    assert "Traceback" not in err


def test_a_check_outside_a_checks_folder_is_refused():
    from runner.claims.kit import claim

    with pytest.raises(RuntimeError, match="checks register from a skill's checks/ folder"):
        claim("loose-claim")(lambda ctx: None)


def test_a_card_entry_without_its_plug_in_is_missing_not_passed(tmp_path, capsys):
    bundle = copy_bundle(tmp_path)
    skill = _add_skill(bundle)
    shutil.rmtree(skill / "checks")
    code = main(["check", "--bundle", str(bundle), "--skill", NEW, "--out", str(tmp_path / "claims")])
    out = capsys.readouterr().out
    assert code == 1 and "no check is registered for this claim" in out, out
