"""One vocabulary of claim statuses: the CPU tier, the GPU tier and the cards use the words
runner/claims/status.py defines, and the schemas accept exactly those."""

from __future__ import annotations

from runner.claims import status
from runner.core import schema


def test_gpu_results_schema_accepts_exactly_the_gpu_results():
    entry = schema("gpu-results")["properties"]["checks"]["items"]["properties"]["status"]
    assert tuple(entry["enum"]) == status.GPU_RESULTS


def test_card_schema_accepts_exactly_the_card_statuses_per_tier():
    branch = schema("skill-card")["properties"]["claims"]["items"]["allOf"][0]
    assert tuple(branch["then"]["properties"]["status"]["enum"]) == status.GPU_CARD_STATUSES
    assert tuple(branch["else"]["properties"]["status"]["enum"]) == status.CPU_CARD_STATUSES


def test_results_map_to_card_statuses():
    assert {r: status.cpu_card_status(r) for r in (status.PASSED, status.FAILED, status.ERROR)} == {"passed": "verified-cpu", "failed": "failed", "error": "failed"}
    assert {r: status.gpu_card_status(r) for r in status.GPU_RESULTS} == {"passed": "verified-gpu", "failed": "failed-gpu", "skipped": None, "error": "failed-gpu"}
    assert set(status.OK_RESULTS) < set(status.CPU_RESULTS)


def test_both_tiers_use_the_one_vocabulary():
    from runner.claims import gpu, gpu_results, run

    for module in (run, gpu_results, gpu):
        assert module.PASSED is status.PASSED and module.FAILED is status.FAILED
