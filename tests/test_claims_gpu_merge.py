"""`mbskills check --gpu-results`: what gpu/validate.sh measured merged into the cards, bad
results files refused whole, without torch or megatron.

Nothing here needs a GPU; what only a GPU can show is gpu/validate.sh's job."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, copy_bundle
from runner.cli import main
from runner.validate import validate_path

from gpu_common import FSDP, GPU_CLAIMS, OVERLAP, snapshot_cards


# --- merging the results into the cards ---------------------------------------------------


def results_payload(**overrides) -> dict:
    payload = {
        "format": "mbskills-gpu-results/1",
        "date": "2026-12-01",
        "host": {"gpu_model": "NVIDIA H200", "gpu_count": 1, "driver": "570.124.06", "cuda": "13.0"},
        "versions": {"python": "3.12.3", "torch": "2.11.0+cu130", "megatron-core": "0.19.2", "megatron-bridge": "0.6.2", "transformers": "5.12.1", "transformer-engine": None},
        "nproc": 1,
        "seconds": 150.0,
        "checks": [
            {"skill": FSDP, "claim": "fsdp-gpu-train-save-resume", "check": "fsdp", "status": "passed", "reason": "", "losses": [6.93, 5.1, 3.2, 2.01], "seconds": 71.5},
            {"skill": OVERLAP, "claim": "overlap-gpu-dp-overlap-trains", "check": "overlap-dp", "status": "passed", "reason": "", "losses": [6.9, 4.2], "seconds": 40.2},
            {"skill": OVERLAP, "claim": "overlap-gpu-tp-overlap", "check": "overlap-tp", "status": "skipped", "reason": "needs at least 2 GPUs (this run has 1) and Transformer Engine (not installed here)", "losses": [], "seconds": 0.0},
        ],
    }
    payload.update(overrides)
    return payload


def claims_of(bundle: Path, skill: str) -> dict[str, dict]:
    return {c["id"]: c for c in yaml.safe_load((bundle / "skills" / skill / "card.yaml").read_text())["claims"]}


def test_merge_moves_exactly_the_passed_claims_to_verified_gpu(tmp_path, capsys):
    bundle = copy_bundle(tmp_path)
    before = {skill: claims_of(bundle, skill) for skill in (FSDP, OVERLAP)}
    raw_before = snapshot_cards(bundle)
    results = tmp_path / "gpu-results.json"
    results.write_text(json.dumps(results_payload(), indent=2))

    assert main(["check", "--bundle", str(bundle), "--gpu-results", str(results)]) == 0
    table = capsys.readouterr().out
    assert re.search(r"fsdp-gpu-train-save-resume\s+nemo-mbridge-perf-megatron-fsdp\s+passed\s+verified-gpu", table)
    assert "overlap-gpu-tp-overlap: skipped: needs at least 2 GPUs" in table and table.rstrip().endswith("2 passed, 0 failed, 1 skipped")
    assert snapshot_cards(bundle) == raw_before  # no --write-cards: nothing written

    assert main(["check", "--bundle", str(bundle), "--gpu-results", str(results), "--write-cards"]) == 0
    after = {skill: claims_of(bundle, skill) for skill in (FSDP, OVERLAP)}
    changed = {(skill, c) for skill in after for c in after[skill] if after[skill][c] != before[skill][c]}
    assert changed == {k for k in GPU_CLAIMS if k[0] in (FSDP, OVERLAP)}  # the results file names these skills' checks only
    fsdp = after[FSDP]["fsdp-gpu-train-save-resume"]
    assert fsdp["status"] == "verified-gpu"
    assert {k: fsdp["checked"][k] for k in ("tier", "gpu", "gpu-count", "date", "megatron-bridge", "torch", "transformer-engine", "final-loss")} == {
        "tier": "gpu", "gpu": "NVIDIA H200", "gpu-count": 1, "date": "2026-12-01", "megatron-bridge": "0.6.2", "torch": "2.11.0+cu130", "transformer-engine": "absent", "final-loss": 2.01}
    assert after[OVERLAP]["overlap-gpu-dp-overlap-trains"]["status"] == "verified-gpu"
    tp = after[OVERLAP]["overlap-gpu-tp-overlap"]
    assert tp["status"] == "unchecked" and "checked" not in tp  # a skip keeps the status
    assert tp["gpu_skip"] == {"date": "2026-12-01", "gpu": "NVIDIA H200", "gpu-count": 1, "reason": "needs at least 2 GPUs (this run has 1) and Transformer Engine (not installed here)"}
    text = (bundle / "skills" / FSDP / "card.yaml").read_text()
    assert text.startswith("# Skill card.")  # comments survive
    assert validate_path(bundle) == []

    # A later run that passes the skipped claim clears the skip; a failure is failed-gpu.
    later = results_payload(date="2026-12-02", checks=[
        {"skill": OVERLAP, "claim": "overlap-gpu-tp-overlap", "status": "passed", "reason": "", "losses": [5.0], "seconds": 30.0},
        {"skill": FSDP, "claim": "fsdp-gpu-train-save-resume", "status": "failed", "reason": "the resumed run started at iteration 0, not 4", "losses": [6.9, None], "seconds": 60.0},
    ], host={"gpu_model": "NVIDIA H200", "gpu_count": 8, "driver": "570.124.06"}, nproc=2)
    results.write_text(json.dumps(later))
    assert main(["check", "--bundle", str(bundle), "--gpu-results", str(results), "--write-cards"]) == 1
    tp = claims_of(bundle, OVERLAP)["overlap-gpu-tp-overlap"]
    assert tp["status"] == "verified-gpu" and "gpu_skip" not in tp and tp["checked"]["gpu-count"] == 2
    fsdp = claims_of(bundle, FSDP)["fsdp-gpu-train-save-resume"]
    assert fsdp["status"] == "failed-gpu" and fsdp["checked"]["message"] == "failed: the resumed run started at iteration 0, not 4"
    assert validate_path(bundle) == []


BAD_RESULTS = [
    ("not-json", b'{"format": "mbskills-gpu-results/1",\n  "date": ', "json/syntax", ":2:"),
    ("empty", b"", "json/syntax", ":1:"),
    ("wrong-format", json.dumps(results_payload(format="other/1"), indent=1).encode(), '$.format: must be "mbskills-gpu-results/1"', ":2:"),
    ("bad-status", json.dumps(results_payload(checks=[dict(results_payload()["checks"][0], status="ok")]), indent=1).encode(), "$.checks[0].status: must be one of passed, failed, skipped, error", None),
    ("no-gpu-count", json.dumps(results_payload(host={"gpu_model": "H200", "driver": "1"}), indent=1).encode(), "$.host: 'gpu_count' is a required property", None),
    ("loss-not-a-number", json.dumps(results_payload(checks=[dict(results_payload()["checks"][0], losses=["low"])]), indent=1).encode(), "$.checks[0].losses[0]", None),
    ("unknown-skill", json.dumps(results_payload(checks=[dict(results_payload()["checks"][0], skill="no-such-skill")]), indent=1).encode(), "$.checks[0].skill: no skill 'no-such-skill'", None),
    ("unknown-claim", json.dumps(results_payload(checks=[dict(results_payload()["checks"][0], claim="fsdp-made-up")]), indent=1).encode(), "has no claim 'fsdp-made-up'", None),
    ("cpu-claim", json.dumps(results_payload(checks=[dict(results_payload()["checks"][0], claim="fsdp-ckpt-format")]), indent=1).encode(), "is a cpu-tier claim", None),
    ("twice", json.dumps(results_payload(checks=[results_payload()["checks"][0]] * 2), indent=1).encode(), "appears twice (first at checks[0])", None),
    ("passed-without-finite-loss", json.dumps(results_payload(checks=[dict(results_payload()["checks"][0], losses=[6.9, None])]), indent=1).encode(), "must end with a finite loss", None),
]


@pytest.mark.parametrize(("name", "content", "expect", "line"), BAD_RESULTS, ids=[b[0] for b in BAD_RESULTS])
def test_bad_results_are_one_line_exit_2_and_cards_unchanged(tmp_path, capsys, name, content, expect, line):
    bundle = copy_bundle(tmp_path)
    before = snapshot_cards(bundle)
    results = tmp_path / "gpu-results.json"
    results.write_bytes(content)
    code = main(["check", "--bundle", str(bundle), "--gpu-results", str(results), "--write-cards"])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("mbskills: error:") and "Traceback" not in err, err
    assert "gpu-results.json" in err and expect in err, err
    if line:
        assert line in err, err
    assert snapshot_cards(bundle) == before


def test_missing_results_file_is_exit_2(tmp_path, capsys):
    assert main(["check", "--bundle", str(copy_bundle(tmp_path)), "--gpu-results", str(tmp_path / "absent.json")]) == 2
    assert "no such results file" in capsys.readouterr().err


def test_the_merge_imports_neither_torch_nor_megatron(tmp_path):
    bundle = copy_bundle(tmp_path)
    results = tmp_path / "gpu-results.json"
    results.write_text(json.dumps(results_payload()))
    probe = ("import sys\nfrom runner.cli import main\n"
             f"code = main(['check', '--bundle', {str(bundle)!r}, '--gpu-results', {str(results)!r}, '--write-cards'])\n"
             "print(code, 'torch' in sys.modules, any(m.startswith('megatron') for m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "0 False False", done.stdout + done.stderr


def test_card_schema_keeps_tiers_and_statuses_apart(tmp_path):
    bundle = copy_bundle(tmp_path)
    card = bundle / "skills" / FSDP / "card.yaml"
    text = card.read_text()
    card.write_text(text.replace("    tier: gpu\n    statement: >-\n      On GPUs, pretrain()", "    tier: gpu\n    status: verified-cpu\n    checked: {tier: cpu}\n    statement: >-\n      On GPUs, pretrain()", 1).replace("it stopped.\n    status: unchecked\n", "it stopped.\n", 1))
    findings = validate_path(bundle)
    assert [(f.rule, "must be one of unchecked, verified-gpu, failed-gpu, skipped" in f.message) for f in findings] == [("card/schema", True)]


def test_absent_package_placeholder_covers_only_absent_names():
    done = subprocess.run([sys.executable, "-c", (
        "import importlib\nfrom runner.claims.environment import install_absent_placeholders\n"
        "print(install_absent_placeholders(('json', 'mbskills_no_such_pkg')))\n"
        "import mbskills_no_such_pkg as p\n"
        "try:\n    p.LpProblem('x')\nexcept ImportError as e:\n    print('RAISES', e)\n"
        "try:\n    importlib.import_module('mbskills_other_missing')\nexcept ModuleNotFoundError:\n    print('OTHERS SURFACE')\n")],
        capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.stdout.splitlines() == ["['mbskills_no_such_pkg']", "RAISES mbskills_no_such_pkg.LpProblem: mbskills_no_such_pkg is not installed (placeholder)", "OTHERS SURFACE"], done.stderr
