"""Claim checks against the real, pinned Megatron-Bridge (CPU): all pass, mutations fail.

These tests import megatron once per session (about 20 s on a 2-core machine).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from conftest import REPO, copy_bundle
from runner.claims.run import ERROR, FAILED, NEEDS_GPU, PASSED, load_checks, run_checks, write_cards, write_reports
from runner.load import Bundle
from runner.validate import validate_path

FSDP = "nemo-mbridge-perf-megatron-fsdp"
OVERLAP = "nemo-mbridge-perf-tp-dp-comm-overlap"


@pytest.fixture(scope="module")
def checks():
    from runner.claims.plugins import skill_roots

    return load_checks(skill_roots(REPO))


def failing(results) -> set[str]:
    """Claims that did not hold: a GPU-tier claim holds on CPU by reporting needs-gpu."""
    return {r.claim for r in results if not (r.status == PASSED or (r.status == NEEDS_GPU and r.tier == "gpu"))}


def test_every_claim_of_the_repository_passes(checks):
    results = run_checks(Bundle(REPO))
    assert failing(results) == set(), [(r.claim, r.message) for r in results if r.status != PASSED]
    per_skill = {skill: sum(r.skill == skill for r in results) for skill in (FSDP, OVERLAP, "nemo-mbridge-perf-moe-ep-comm-overlap")}
    assert all(count >= 8 for count in per_skill.values()), per_skill


def test_every_registered_check_has_a_card_claim(checks):
    skills = [p.name for p in sorted((REPO / "skills").iterdir()) if (p / "card.yaml").is_file()]
    claimed = set()
    for skill in skills:
        card = yaml.safe_load((REPO / "skills" / skill / "card.yaml").read_text())
        claimed |= {(skill, c["id"]) for c in card["claims"]}
    assert {key for key in checks if key[0] in skills} == claimed


def mutate(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} must occur exactly once in {path}"
    path.write_text(text.replace(old, new))


@pytest.mark.parametrize(
    ("skill", "old", "new", "claim"),
    [
        # a reference script that stops reporting one pitfall
        (FSDP, 'if _get(cfg, "dist.use_tp_pp_dp_mapping"):', 'if False:', "fsdp-preflight-script"),
        # the enablement block's checkpoint format: the executed snippet now fails validation,
        # and the GPU run, which saves and resumes with that block, would too
        (FSDP, 'cfg.checkpoint.ckpt_format = "fsdp_dtensor"\n```', 'cfg.checkpoint.ckpt_format = "torch_dist"\n```', {"fsdp-enable-override", "fsdp-gpu-train-save-resume"}),
        # a pitfall's quoted error message
        (FSDP, "`AssertionError: use_tp_pp_dp_mapping is not supported with Megatron FSDP`", "`AssertionError: use_tp_pp_dp_mapping is deprecated`", "fsdp-tp-pp-dp-mapping"),
        # the stated DP bucket size
        (OVERLAP, "`bucket_size = 134217728` (", "`bucket_size = 67108864` (", "overlap-dp-defaults"),
        # the override block's VPP: PP overlap no longer derived, and the report's command
        # no longer shows that block's layout
        (OVERLAP, "cfg.model.virtual_pipeline_model_parallel_size = 2\n", "cfg.model.virtual_pipeline_model_parallel_size = None\n", {"overlap-enable-override", "overlap-report-script"}),
        # the precision snippet that skips resolving the preset name: AttributeError on a recipe config
        (OVERLAP, "cfg.mixed_precision = get_mixed_precision_config(cfg.mixed_precision)  # name -> MixedPrecisionConfig\n", "", "overlap-precision-knobs"),
        # a code anchor that does not exist
        (OVERLAP, "`megatron.bridge.training.comm_overlap.HAVE_TE`", "`megatron.bridge.training.comm_overlap.HAVE_TRANSFORMER_ENGINE`", "overlap-code-anchors"),
    ],
)
def test_breaking_one_fact_fails_exactly_its_check(checks, tmp_path: Path, skill, old, new, claim):
    bundle = copy_bundle(tmp_path)
    target = bundle / "skills" / skill / ("scripts/fsdp_preflight.py" if claim == "fsdp-preflight-script" else "SKILL.md")
    mutate(target, old, new)
    results = run_checks(Bundle(bundle), skills=[skill])
    expected = claim if isinstance(claim, set) else {claim}
    assert failing(results) == expected, [(r.claim, r.message) for r in results if r.status != PASSED]


def test_missing_check_and_missing_marker_fail(checks, tmp_path: Path):
    bundle = copy_bundle(tmp_path)
    card = bundle / "skills" / FSDP / "card.yaml"
    card.write_text(card.read_text() + "  - id: fsdp-made-up\n    statement: A claim nobody checks.\n    status: unchecked\n")
    skill_md = bundle / "skills" / FSDP / "SKILL.md"
    skill_md.write_text(skill_md.read_text().replace("<!-- claim: fsdp-weight-hash-check -->\n", ""))
    results = {r.claim: r for r in run_checks(Bundle(bundle), skills=[FSDP], pattern="fsdp-[mw]*")}
    assert results["fsdp-made-up"].status == "no-check"
    assert (results["fsdp-weight-hash-check"].status, results["fsdp-weight-hash-check"].message) == ("failed", "SKILL.md has no marker for this claim")


def test_reports_and_cards(checks, tmp_path: Path):
    bundle = copy_bundle(tmp_path)
    card_path = bundle / "skills" / OVERLAP / "card.yaml"
    before = {c["id"]: c for c in yaml.safe_load(card_path.read_text())["claims"]}
    results = run_checks(Bundle(bundle), skills=[OVERLAP], pattern="overlap-pp-p2p")
    assert [r.claim for r in results] == ["overlap-pp-p2p"]
    json_path, junit_path = write_reports(results, tmp_path / "out", {"megatron-bridge": "0.6.2"}, 1.5)
    payload = json.loads(json_path.read_text())
    assert payload["schema"] == "mbskills-claims/1" and payload["results"][0]["status"] == "passed"
    suite = ET.parse(junit_path).getroot()
    assert suite.get("tests") == "1" and suite.get("failures") == "0"
    import datetime as dt

    written = write_cards(Bundle(bundle), results, {"megatron-bridge": "0.6.2", "megatron-core": "0.19.2", "torch": "2.14.1"}, today=dt.date(2026, 11, 30))
    assert written == [card_path]
    text = card_path.read_text()
    assert text.startswith("# Skill card.")  # comments survive the rewrite
    claims = {c["id"]: c for c in yaml.safe_load(text)["claims"]}
    assert claims["overlap-pp-p2p"]["status"] == "verified-cpu"
    assert claims["overlap-pp-p2p"]["checked"] == {"tier": "cpu", "date": "2026-11-30", "megatron-bridge": "0.6.2", "megatron-core": "0.19.2", "torch": "2.14.1"}
    assert claims["overlap-tp-gates"] == before["overlap-tp-gates"]  # claims not run are left alone
    assert validate_path(bundle) == []


def test_failed_claim_is_recorded_as_failed(checks, tmp_path: Path):
    bundle = copy_bundle(tmp_path)
    mutate(bundle / "skills" / OVERLAP / "SKILL.md", "`bucket_size = 134217728` (", "`bucket_size = 1` (")
    results = run_checks(Bundle(bundle), skills=[OVERLAP], pattern="overlap-dp-defaults")
    write_cards(Bundle(bundle), results, {"megatron-bridge": "0.6.2"})
    claim = {c["id"]: c for c in yaml.safe_load((bundle / "skills" / OVERLAP / "card.yaml").read_text())["claims"]}["overlap-dp-defaults"]
    assert claim["status"] == "failed" and "is not 1" in claim["checked"]["message"]


def test_cli_check_exit_codes_and_outputs(tmp_path: Path):
    out = tmp_path / "claims"
    result = subprocess.run([sys.executable, "-m", "runner.cli", "check", "--skill", FSDP, "--claim", "fsdp-ckpt-*", "--out", str(out)], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert re.search(r"fsdp-ckpt-format\s+nemo-mbridge-perf-megatron-fsdp\s+passed", result.stdout)
    assert result.stdout.rstrip().endswith("1 passed, 0 failed")
    assert (out / "claims.json").is_file() and (out / "junit.xml").is_file()
    bad = subprocess.run([sys.executable, "-m", "runner.cli", "check", "--skill", "no-such-skill"], capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 2 and "no such skill" in bad.stderr


def test_every_check_fails_when_its_statement_is_removed(checks, tmp_path: Path):
    # Blank each claim's section (the marker stays): its own check must fail, so no check
    # passes without reading what the skill says. A GPU-tier claim must fail too, not
    # report needs-gpu: the GPU run it stands for is built from that section.
    from runner.claims.sections import read_sections

    survivors = []
    for skill in (FSDP, OVERLAP):
        for claim_id, section in read_sections(REPO / "skills" / skill / "SKILL.md").items():
            bundle = copy_bundle(tmp_path / claim_id)
            skill_md = bundle / "skills" / skill / "SKILL.md"
            lines = skill_md.read_text().split("\n")
            body = range(section.line, section.line + len(section.lines))
            skill_md.write_text("\n".join("" if i in body else line for i, line in enumerate(lines)))
            result = {r.claim: r for r in run_checks(Bundle(bundle), skills=[skill], pattern=claim_id)}[claim_id]
            if result.status not in (FAILED, ERROR):
                survivors.append(claim_id)
    assert survivors == []
