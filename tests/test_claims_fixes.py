"""The statements an audit found false for 0.6.2, and the card rules: each old wording put
back fails its check against the real library; the new wording passes (test_claims.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPO, copy_bundle
from runner.claims.run import FAILED, PASSED, load_checks, run_checks
from runner.load import Bundle

OVERLAP = "nemo-mbridge-perf-tp-dp-comm-overlap"


@pytest.fixture(scope="module")
def checks():
    from runner.claims.plugins import skill_roots

    return load_checks(skill_roots(REPO))


def replace(path: Path, old: str, new: str) -> None:
    text = path.read_text("utf-8")
    assert text.count(old) == 1, f"{old!r} must occur exactly once in {path}"
    path.write_text(text.replace(old, new), "utf-8")


def drop_card_entry(bundle: Path, claim_id: str) -> None:
    card = bundle / "skills" / OVERLAP / "card.yaml"
    text = card.read_text("utf-8")
    start = text.index(f"  - id: {claim_id}\n")
    card.write_text(text[:start] + text[text.index("  - id: ", start + 1) :], "utf-8")


def result_of(bundle: Path, claim_id: str):
    results = {r.claim: r for r in run_checks(Bundle(bundle), skills=[OVERLAP], pattern=claim_id)}
    return results[claim_id]


def section_text(skill_md: Path, claim_id: str) -> str:
    text = skill_md.read_text("utf-8")
    start = text.index(f"<!-- claim: {claim_id} -->\n") + len(f"<!-- claim: {claim_id} -->\n")
    return text[start : text.index("\n\n<!-- claim:", start)]


@pytest.mark.parametrize(
    "claim_id, old, new, because",
    [
        # 1. "any field you set explicitly wins": false for values set on cfg.ddp
        ("overlap-set-through-config", None, "You turn the feature on with a `CommOverlapConfig` on `cfg.comm_overlap`; Bridge fills in the rest when the config is finalised, and any field you set explicitly wins.", "no longer says"),
        ("overlap-set-through-config", "comes out `True`", "comes out `False`", "overlap_param_gather comes out True, not False"),
        # 2. "Bridge sets on both cfg.ddp and cfg.optimizer: bucket_size, overlap_grad_reduce, ..."
        ("overlap-dp-defaults", "Bridge sets on `cfg.ddp`:", "Bridge sets on both `cfg.ddp` and `cfg.optimizer`:", "no longer says"),
        ("overlap-dp-defaults", "has only `overlap_param_gather`", "has only `bucket_size`", "has ['overlap_param_gather']"),
        # 3. "upstream's unit tests need no GPU or Transformer Engine" (they fail to collect without TE)
        ("overlap-report-script", "disabled, as training there would.", "disabled, as training there would. Upstream's CPU unit tests for this logic need torch and megatron-core but no GPU or Transformer Engine.", "does not read"),
    ],
)
def test_old_wording_fails_its_check(checks, tmp_path: Path, claim_id: str, old: str | None, new: str, because: str):
    bundle = copy_bundle(tmp_path)
    skill_md = bundle / "skills" / OVERLAP / "SKILL.md"
    replace(skill_md, section_text(skill_md, claim_id) if old is None else old, new)
    result = result_of(bundle, claim_id)
    assert result.status == FAILED and because in result.message, result.message


def test_the_new_wording_passes(checks):
    from conftest import REPO

    for claim_id in ("overlap-set-through-config", "overlap-dp-defaults", "overlap-report-script"):
        assert result_of(REPO, claim_id).status == PASSED


def test_a_deleted_card_entry_fails_its_check_instead_of_skipping_it(checks, tmp_path: Path):
    bundle = copy_bundle(tmp_path)
    drop_card_entry(bundle, "overlap-pp-p2p")
    result = result_of(bundle, "overlap-pp-p2p")
    assert result.status == FAILED and "card.yaml does not list it" in result.message


def test_a_check_without_a_marker_or_card_entry_fails(checks, tmp_path: Path):
    bundle = copy_bundle(tmp_path)
    skill_md = bundle / "skills" / OVERLAP / "SKILL.md"
    replace(skill_md, "<!-- claim: overlap-bucket-size-units -->\n", "")
    drop_card_entry(bundle, "overlap-bucket-size-units")
    result = result_of(bundle, "overlap-bucket-size-units")
    assert result.status == FAILED and "a check is registered for this claim, but card.yaml does not list it" in result.message
