"""The execute grader against the real, pinned Megatron-Bridge: an answer's config applied to
a scenario and resolved by Bridge's own runtime_config_update(), with what was observed as
the evidence; refused, unparsable and empty answers stay ungraded; model text is never run;
a worker that hangs or dies costs a request, not the run."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap

import pytest

from runner.execute import ExecutePool
from runner.grade.executed import EXEC_FAIL, EXEC_PASS, EXEC_UNGRADED, run_execute
from runner.grade.extract import extract
from runner.load import Scenario

FSDP_SAVE = Scenario(set=(("ddp.use_megatron_fsdp", True), ("checkpoint.save", "/ckpt")), passes=True, fields=(("checkpoint.ckpt_format", "fsdp_dtensor"), ("optimizer.use_distributed_optimizer", True)))


@pytest.fixture(scope="module")
def pool():
    with ExecutePool() as opened:
        yield opened


def grade(pool: ExecutePool, scenario: Scenario, answer: str) -> tuple[str, str]:
    async def observe(request: dict) -> dict:
        return await asyncio.to_thread(pool.observe, request)

    return asyncio.run(run_execute(scenario, extract(answer), observe))


def test_a_known_good_answer_passes_with_the_resolved_fields_as_evidence(pool):
    kind, why = grade(pool, FSDP_SAVE, 'Keep FSDP and switch the format:\n\n```python\ncfg.checkpoint.ckpt_format = "fsdp_dtensor"\n```\n')
    assert kind == EXEC_PASS
    # Bridge's validation turned the distributed optimizer on by itself: observed, not assumed
    assert why == "resolved: checkpoint.ckpt_format = 'fsdp_dtensor', optimizer.use_distributed_optimizer = True"


def test_torch_dist_with_a_save_path_fails_with_bridges_assertion_as_evidence(pool):
    kind, why = grade(pool, FSDP_SAVE, "```yaml\ncheckpoint:\n  ckpt_format: torch_dist\n  save: /ckpt\n```\n")
    assert kind == EXEC_FAIL
    assert why == "raised AssertionError: Megatron-FSDP requires the fsdp_dtensor checkpointing format!"


def test_the_same_config_as_hydra_overrides_and_a_table_passes_the_same_way(pool):
    hydra = grade(pool, FSDP_SAVE, "`python pretrain.py checkpoint.ckpt_format=fsdp_dtensor`")
    table = grade(pool, FSDP_SAVE, "| field | value |\n|---|---|\n| `checkpoint.ckpt_format` | `fsdp_dtensor` |\n")
    assert hydra[0] == table[0] == EXEC_PASS


def test_a_constructor_is_applied_and_an_unknown_keyword_is_the_answers_failure(pool):
    scenario = Scenario(tp=2, sp=True, passes=True, fields=(("comm_overlap.tp_comm_overlap", False),))
    ok = grade(pool, scenario, "```python\nfrom megatron.bridge.training.comm_overlap import CommOverlapConfig\ncfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=False)\n```\n")
    assert ok[0] == EXEC_PASS
    wrong = grade(pool, scenario, "```python\ncfg.comm_overlap = CommOverlapConfig(tp_overlap=False)\n```\n")
    assert wrong[0] == EXEC_FAIL and "TypeError" in wrong[1] and "tp_overlap" in wrong[1]


@pytest.mark.parametrize(
    "code, line",
    [
        ('import os\nos.system("touch {marker}")', 6),
        ('with open("{marker}", "w") as handle:\n    handle.write("x")', 5),
        ('import subprocess\nsubprocess.run(["touch", "{marker}"])', 5),
    ],
)
def test_an_answer_that_reaches_the_system_is_refused_and_nothing_happens(pool, tmp_path, code, line):
    marker = tmp_path / "side-effect"
    answer = "Do this:\n\n```python\ncfg.checkpoint.ckpt_format = 'fsdp_dtensor'\n" + code.format(marker=marker) + "\n```\n"
    kind, why = grade(pool, FSDP_SAVE, answer)
    assert kind == EXEC_UNGRADED
    assert why.startswith(f"line {line}: refused:")
    assert not marker.exists()


def test_a_syntax_error_is_ungraded_with_its_line(pool):
    kind, why = grade(pool, FSDP_SAVE, "Fix:\n```python\ncfg.checkpoint.ckpt_format = 'fsdp_dtensor'\ncfg.checkpoint.save = (\n```\n")
    assert kind == EXEC_UNGRADED and why.startswith("line 4: syntax:")


@pytest.mark.parametrize(
    "answer, why",
    [
        ("Switch to the DTensor checkpoint format.", "the answer proposes no config to execute"),
        ("```python\ncfg.checkpoint.ckpt_format = chosen_format\n```", "line 2: checkpoint.ckpt_format is set to an expression that is not data"),
        ("```python\ncfg.model.params_dtype = os.path\n```", "line 2: refused: os.path: a name outside torch and megatron"),
    ],
)
def test_nothing_fair_to_run_is_ungraded(pool, answer, why):
    kind, said = grade(pool, FSDP_SAVE, answer)
    assert (kind, said) == (EXEC_UNGRADED, why)


def test_a_scenario_that_passes_without_the_answer_decides_nothing(pool):
    # torch_dist is accepted without Megatron FSDP: the expectation holds before any answer
    lenient = Scenario(set=(("checkpoint.save", "/ckpt"),), passes=True)
    kind, why = grade(pool, lenient, "`cfg.checkpoint.ckpt_format = 'torch_dist'`")
    assert kind == EXEC_UNGRADED and "without the answer" in why


def test_an_expected_exception_and_a_warning(pool):
    raises = Scenario(set=(("ddp.use_megatron_fsdp", True),), raises=r"fsdp_dtensor checkpointing format")
    assert grade(pool, raises, "`checkpoint.save = '/ckpt'`")[0] == EXEC_PASS
    assert grade(pool, raises, "`checkpoint.save = '/ckpt'` and `checkpoint.ckpt_format = 'fsdp_dtensor'`")[0] == EXEC_FAIL


def _stand_in(tmp_path, body: str) -> list[str]:
    script = tmp_path / "stand_in.py"
    script.write_text(textwrap.dedent(body))
    return [sys.executable, str(script)]


def test_a_worker_that_hangs_costs_its_request_and_is_replaced(tmp_path):
    command = _stand_in(tmp_path, """
        import json, sys, time
        print(json.dumps({"ready": True, "import_s": 0}), flush=True)
        for line in sys.stdin:
            if json.loads(line).get("hang"):
                time.sleep(60)
            print(json.dumps({"raised": None, "fields": {}, "warnings": []}), flush=True)
    """)
    with ExecutePool(timeout_s=1.0, command=command) as stand_in:
        assert "error" in stand_in.observe({"hang": True})
        assert stand_in.observe({"hang": False}) == {"raised": None, "fields": {}, "warnings": []}
        assert stand_in.started == 2  # the hung worker was killed and a fresh one started


def test_a_worker_that_dies_or_never_starts_gives_an_error_not_a_verdict(tmp_path):
    dies = _stand_in(tmp_path, """
        import json, sys
        print(json.dumps({"ready": True, "import_s": 0}), flush=True)
        sys.stdin.readline()
        sys.exit(3)
    """)
    with ExecutePool(timeout_s=5.0, command=dies) as pool:
        assert pool.observe({"x": 1}) == {"error": "the worker exited (code 3)"}
    never = _stand_in(tmp_path, "import json; print(json.dumps({'error': 'cannot import Megatron-Bridge: boom'}), flush=True)\n")
    with ExecutePool(command=never) as pool:
        assert pool.observe({"x": 1}) == {"error": "cannot import Megatron-Bridge: boom"}


def test_identical_requests_run_once(pool):
    request = {"scenario": FSDP_SAVE.request(), "assignments": [], "fields": []}
    first = pool.observe(request)
    assert pool.observe(json.loads(json.dumps(request))) is first
