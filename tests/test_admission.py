"""Admission by fresh evidence: a grader (pattern check, field or execute) decides only after `mbskills
calibrate --admit ROUND` measured it on a held-out round and its kind met the bar on pass
and on fail; a round is measured once; a grader edited afterwards is a new grader."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from runner.grade.grading import _cases_and_checks
from runner.load import ADMIT_MIN_DECIDED, load_admissions, resolve_bundle

REPO = Path(__file__).resolve().parents[1]
SETS = "Sets cfg.widget.enabled = True."

CHECKS = f"""\
demo-1:
  - behaviour: "{SETS}"
    field: checkpoint.ckpt_format
    equals: fsdp_dtensor
demo-2:
  - behaviour: "{SETS}"
    execute:
      scenario: {{set: {{ddp.use_megatron_fsdp: true, checkpoint.save: /ckpt}}}}
      expect: {{passes: true, fields: {{checkpoint.ckpt_format: fsdp_dtensor}}}}
"""


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runner.cli", *args], capture_output=True, text=True, cwd=REPO)


def answer(folder: Path, name: str, body: str, fails: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    front = yaml.safe_dump({"fails": fails, "correct": not fails, "style": "test"})
    (folder / name).write_text(f"---\n{front}---\n{body}\n")


def make_round(bundle: Path, name: str, *, mislabel: bool = False, each: int = ADMIT_MIN_DECIDED) -> Path:
    """`each` right and `each` wrong answers per case (the bar asks for ADMIT_MIN_DECIDED
    decided verdicts each way)."""
    folder = bundle / "evals" / "rounds" / name / "demo-skill"
    for case in ("demo-1", "demo-2"):
        for n in range(each):
            answer(folder, f"{case}.held-{2 * n + 1}.md", f'Answer {n}: use `cfg.checkpoint.ckpt_format = "fsdp_dtensor"`.', [SETS] if mislabel else [])
            answer(folder, f"{case}.held-{2 * n + 2}.md", f"Answer {n}:\n```yaml\ncheckpoint:\n  ckpt_format: torch_dist\n```", [SETS])
    return folder


def deciding(bundle: Path) -> dict:
    _, checks = _cases_and_checks(resolve_bundle(bundle))
    return {key: [c.grader for c in found] for key, found in checks.items() if found}


def test_graders_decide_only_once_a_round_admits_them(good_bundle):
    (good_bundle / "skills" / "demo-skill" / "evals" / "checks.yaml").write_text(CHECKS)
    round_dir = make_round(good_bundle, "fresh-1")
    assert deciding(good_bundle) == {}  # written, not admitted: they decide nothing

    measured = cli("calibrate", "--bundle", str(good_bundle), "--answers", str(round_dir.parent))
    assert measured.returncode == 0, measured.stderr
    assert "grader field      40 items,   40 decided: precision on pass 100.0% of 20, on fail 100.0% of 20 (meets the bar: 98% each way over 20+ verdicts)" in measured.stdout
    assert "grader execute    40 items,   40 decided: precision on pass 100.0% of 20, on fail 100.0% of 20 (meets the bar: 98% each way over 20+ verdicts)" in measured.stdout
    assert not (good_bundle / "evals" / "admissions.yaml").exists()  # measuring admits nothing

    admitted = cli("calibrate", "--bundle", str(good_bundle), "--admit", "fresh-1")
    assert admitted.returncode == 0, admitted.stderr
    assert "round fresh-1: field admitted, execute admitted; 2 graders admitted, 0 not" in admitted.stderr
    assert {key.rsplit("demo-", 1)[-1]: graders for key, graders in deciding(good_bundle).items()} == {"1": ["field"], "2": ["execute"]}

    again = cli("calibrate", "--bundle", str(good_bundle), "--admit", "fresh-1")
    assert again.returncode == 2
    assert "round 'fresh-1' was measured on" in again.stderr and "a round is measured once" in again.stderr
    assert "Traceback" not in again.stderr

    # an edited grader is a new one: it decides nothing until a fresh round admits it
    checks = good_bundle / "skills" / "demo-skill" / "evals" / "checks.yaml"
    checks.write_text(CHECKS.replace("equals: fsdp_dtensor", "one_of: [fsdp_dtensor]"))
    assert sorted(g for v in deciding(good_bundle).values() for g in v) == ["execute"]


def test_a_pattern_check_decides_only_once_a_round_admits_it_too(good_bundle):
    # issue 25: "a grader (check, field assertion or scenario) decides only after it has been measured"
    pattern = f"""\
demo-1:
  - behaviour: "{SETS}"
    must: ['ckpt_format\\W+fsdp_dtensor']
    must_not: ['torch_dist']
"""
    (good_bundle / "skills" / "demo-skill" / "evals" / "checks.yaml").write_text(pattern)
    make_round(good_bundle, "fresh-1")
    assert deciding(good_bundle) == {}
    admitted = cli("calibrate", "--bundle", str(good_bundle), "--admit", "fresh-1")
    assert admitted.returncode == 0, admitted.stderr
    assert "round fresh-1: check admitted; 1 graders admitted, 0 not" in admitted.stderr
    assert "grader check      40 items,   40 decided: precision on pass 100.0% of 20, on fail 100.0% of 20 (meets the bar" in admitted.stdout
    assert {key.rsplit("demo-", 1)[-1]: graders for key, graders in deciding(good_bundle).items()} == {"1": ["check"]}
    assert load_admissions(good_bundle / "evals").rounds["fresh-1"]["figures"]["check"]["admissible"] is True


def test_calibrate_says_when_no_grader_decides(good_bundle):
    (good_bundle / "skills" / "demo-skill" / "evals" / "checks.yaml").write_text(CHECKS)
    make_round(good_bundle, "fresh-1")
    plain = cli("calibrate", "--bundle", str(good_bundle))
    assert plain.returncode == 0, plain.stderr
    assert "no grader decides: none is admitted" in plain.stderr and "grader field" not in plain.stdout
    every = cli("calibrate", "--bundle", str(good_bundle), "--all-graders")
    assert every.returncode == 0 and "no grader decides" not in every.stderr and "grader field      40 items" in every.stdout


def test_a_kind_under_the_bar_is_not_admitted(good_bundle):
    (good_bundle / "skills" / "demo-skill" / "evals" / "checks.yaml").write_text(CHECKS.split("demo-2:")[0])
    make_round(good_bundle, "fresh-1", mislabel=True)  # the good answers labelled failing
    result = cli("calibrate", "--bundle", str(good_bundle), "--admit", "fresh-1")
    assert result.returncode == 0, result.stderr
    assert "precision on pass   0.0% of 20, on fail 100.0% of 20 (under the bar" in result.stdout
    admissions = load_admissions(good_bundle / "evals")
    entry = admissions.rounds["fresh-1"]
    assert entry["admitted"] == [] and len(entry["not_admitted"]) == 1
    assert entry["figures"]["field"]["admissible"] is False
    assert deciding(good_bundle) == {}


def test_too_few_verdicts_admit_nothing_however_right(good_bundle):
    (good_bundle / "skills" / "demo-skill" / "evals" / "checks.yaml").write_text(CHECKS.split("demo-2:")[0])
    make_round(good_bundle, "small", each=ADMIT_MIN_DECIDED - 1)
    result = cli("calibrate", "--bundle", str(good_bundle), "--admit", "small")
    assert result.returncode == 0, result.stderr
    assert f"precision on pass 100.0% of {ADMIT_MIN_DECIDED - 1}, on fail 100.0% of {ADMIT_MIN_DECIDED - 1} (under the bar" in result.stdout
    assert deciding(good_bundle) == {}


def test_a_stricter_bar_withdraws_a_recorded_admission(good_bundle):
    (good_bundle / "skills" / "demo-skill" / "evals" / "checks.yaml").write_text(CHECKS.split("demo-2:")[0])
    _, checks = _cases_and_checks(resolve_bundle(good_bundle), all_graders=True)
    fingerprint = next(c.fingerprint(k) for k, found in checks.items() for c in found)
    figures = {"items": 2, "decided": 2, "passes": 1, "pass_precision": 1.0, "fails": 1, "fail_precision": 1.0, "admissible": True}
    (good_bundle / "evals" / "admissions.yaml").write_text(yaml.safe_dump({"rounds": {"old": {"figures": {"field": figures}, "admitted": [fingerprint]}}}))
    assert deciding(good_bundle) == {}  # recorded as admitted on 2 verdicts: today's bar withdraws it


def test_a_missing_round_and_a_bad_admissions_file_are_one_line_errors(good_bundle):
    missing = cli("calibrate", "--bundle", str(good_bundle), "--admit", "nope")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr and "nope" in missing.stderr
    (good_bundle / "evals" / "admissions.yaml").write_text("rounds: [1, 2]\n")
    (good_bundle / "skills" / "demo-skill" / "evals" / "checks.yaml").write_text(CHECKS)
    bad = cli("calibrate", "--bundle", str(good_bundle))
    assert bad.returncode == 2 and "admissions.yaml:1" in bad.stderr and "Traceback" not in bad.stderr
