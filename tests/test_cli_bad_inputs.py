"""The malformed-input corpus for the commands that run evals: every entry ends with exit
2 and one line on stderr naming the file and place, with no traceback and nothing
written. (`mbskills validate` reports bad files as findings instead; its corpus is
tests/fixtures/bad/.)"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from runner.cli import main

from conftest import REPO

FSDP = "skills/nemo-mbridge-perf-megatron-fsdp"
SKILL_MD, EVALS, CHECKS, CARD = f"{FSDP}/SKILL.md", f"{FSDP}/evals/evals.json", f"{FSDP}/evals/checks.yaml", f"{FSDP}/card.yaml"
ANSWER = "evals/calibration/nemo-mbridge-perf-megatron-fsdp/fsdp-minimal-override.md"
BAD_ANSWER = "evals/calibration/nemo-mbridge-perf-megatron-fsdp/fsdp-minimal-override.bad-1.md"
HUGE = 17 * 1024 * 1024
LOOP, DIRECTORY, DELETE = object(), object(), object()
CASE = {"id": "c1", "question": "q?", "expected_skill": None, "expected_script": None, "ground_truth": "g", "expected_behavior": ["b"]}


@dataclass(frozen=True)
class Bad:
    id: str
    command: str  # eval | grade | calibrate | show | check | args
    place: str | None  # file in the bundle copy (or run dir for show/grade run files)
    content: object  # bytes, or LOOP / DIRECTORY / DELETE, or CLI arguments for `args`
    expect: str
    line: int | None = None


def flat(*cases: dict) -> bytes:
    return json.dumps(list(cases)).encode()


CORPUS = [
    # SKILL.md, read by eval
    Bad("skill-no-frontmatter", "eval", SKILL_MD, b"# Title\nbody\n", "skill/frontmatter", 1),
    Bad("skill-unclosed-frontmatter", "eval", SKILL_MD, b"---\nname: x\ndescription: y\n", "never closed", 1),
    Bad("skill-bad-yaml", "eval", SKILL_MD, b"---\nname: [x\n---\nbody\n", "yaml/syntax"),
    Bad("skill-frontmatter-list", "eval", SKILL_MD, b"---\n- a\n---\nbody\n", "must be a YAML mapping", 2),
    Bad("skill-non-utf8", "eval", SKILL_MD, b"---\nname: x\n---\n\xff\xfe body\n", "file/encoding", 4),
    Bad("skill-empty", "eval", SKILL_MD, b"", "skill/frontmatter", 1),
    Bad("skill-symlink-loop", "eval", SKILL_MD, LOOP, "skill/missing"),
    Bad("skill-huge", "eval", SKILL_MD, b"x" * HUGE, "file/too-large", 1),
    Bad("skill-is-a-directory", "eval", SKILL_MD, DIRECTORY, "skill/missing"),
    # evals files, both formats, read by eval
    Bad("evals-invalid-json", "eval", EVALS, b'[{"id": "a",', "json/syntax", 1),
    Bad("evals-empty", "eval", EVALS, b"", "json/syntax", 1),
    Bad("evals-top-level-string", "eval", EVALS, b'"hello"', "evals/format", 1),
    Bad("evals-flat-missing-question", "eval", EVALS, flat({k: v for k, v in CASE.items() if k != "question"}), "evals/schema"),
    Bad("evals-flat-behaviours-not-a-list", "eval", EVALS, flat(dict(CASE, expected_behavior="b")), "evals/schema"),
    Bad("evals-duplicate-id", "eval", EVALS, json.dumps([CASE, CASE], indent=1).encode(), "evals/duplicate-id", 13),
    Bad("evals-duplicate-key", "eval", EVALS, b'[{"id": "a", "id": "b", "question": "q", "expected_skill": null, "expected_script": null, "ground_truth": "g", "expected_behavior": ["b"]}]', "json/duplicate-key", 1),
    Bad("evals-non-utf8", "eval", EVALS, b'[{"id": "\xe9"}]', "file/encoding", 1),
    Bad("evals-huge", "eval", EVALS, b"[" + b" " * HUGE + b"]", "file/too-large", 1),
    Bad("evals-symlink-loop", "eval", EVALS, LOOP, "file/unreadable", 1),
    Bad("evals-bom-then-garbage", "eval", EVALS, b"\xef\xbb\xbf[{", "json/syntax", 1),
    Bad("evals-control-character", "eval", EVALS, b'[{"id": "a\x01"}]', "json/syntax", 1),
    Bad("evals-agentskills-no-evals", "eval", "evals/extra.json", b'{"skill_name": "x"}', "evals/schema"),
    Bad("evals-agentskills-prompt-number", "eval", "evals/extra.json", b'{"skill_name": "x", "evals": [{"id": 1, "prompt": 5}]}', "evals/schema"),
    # recorded answers, read by eval --model replay:
    Bad("replay-bad-yaml", "eval", ANSWER, b"---\nactivate: [x\n---\ntext\n", "yaml/syntax"),
    Bad("replay-activate-list", "eval", ANSWER, b"---\nactivate: [a, b]\n---\ntext\n", "'activate' must be a skill name", 2),
    Bad("replay-read-mapping", "eval", ANSWER, b"---\nread: {a: b}\n---\ntext\n", "'read' must be a list", 2),
    Bad("replay-non-utf8", "eval", ANSWER, b"\xc3\x28 text\n", "file/encoding", 1),
    Bad("replay-missing-answer", "eval", ANSWER, DELETE, "no recorded answer nemo-mbridge-perf-megatron-fsdp/fsdp-minimal-override.md"),
    # a price table, read by eval --pricing
    Bad("pricing-not-a-mapping", "eval", "prices.yaml", b"- a\n", "expected a mapping with a 'models' list"),
    Bad("pricing-price-not-a-number", "eval", "prices.yaml", b"models:\n  - {provider: replay, match: x, input: cheap, output: 1}\n", "models[0]: needs provider, match, input and output"),
    Bad("pricing-bad-yaml", "eval", "prices.yaml", b"models: [\n", "cannot read the pricing file"),
    # deterministic-check sidecars, read by grade
    Bad("checks-bad-yaml", "grade", CHECKS, b"fsdp-minimal-override: [\n", "yaml/syntax"),
    Bad("checks-unknown-case", "grade", CHECKS, b"nope:\n  - behaviour: x\n    must: [a]\n", "checks/unknown-case", 1),
    Bad("checks-unknown-behaviour", "grade", CHECKS, b"fsdp-minimal-override:\n  - behaviour: Sets nothing.\n    must: [a]\n", "checks/unknown-behaviour", 2),
    Bad("checks-bad-regex", "grade", CHECKS, b"fsdp-minimal-override:\n  - behaviour: Sets cfg.ddp.use_megatron_fsdp = True.\n    must: ['(']\n", "checks/regex", 3),
    Bad("checks-not-a-list", "grade", CHECKS, b"fsdp-minimal-override: 3\n", "checks/schema", 1),
    Bad("checks-non-utf8", "grade", CHECKS, b"fsdp-minimal-override:\n  - behaviour: \xff\n", "file/encoding", 2),
    # labelled answers, read by calibrate
    Bad("calibration-fails-not-a-list", "calibrate", BAD_ANSWER, b"---\nfails: oops\ncorrect: false\n---\ntext\n", "calibration/labels", 2),
    Bad("calibration-unknown-behaviour", "calibrate", BAD_ANSWER, b"---\nfails: [Says nothing.]\ncorrect: false\n---\ntext\n", "has no behaviour 'Says nothing.'", 2),
    Bad("calibration-correct-not-bool", "calibrate", BAD_ANSWER, b"---\nfails: []\ncorrect: maybe\n---\ntext\n", "'correct' must be true or false", 3),
    Bad("calibration-no-frontmatter", "calibrate", BAD_ANSWER, b"just text\n", "needs frontmatter", 1),
    Bad("calibration-unclosed-frontmatter", "calibrate", BAD_ANSWER, b"---\nfails: []\n", "never closed", 1),
    Bad("calibration-bom-crlf-with-a-wrong-label", "calibrate", BAD_ANSWER, b"\xef\xbb\xbf---\r\nfails: [x]\r\ncorrect: false\r\n---\r\ntext\r\n", "has no behaviour 'x'", 2),
    # run directories, read by grade and show
    Bad("run-json-not-json", "grade", "RUN/run.json", b"{", "run.json:1: not JSON"),
    Bad("records-damaged-line", "show", "RUN/records.jsonl", b'{"key": "a"}\nnot json\n{"key": "b"}\n', "records.jsonl:2: not a run record"),
    Bad("run-json-missing", "show", "RUN/run.json", DELETE, "not a run directory (no run.json)"),
    # skill cards, read by check --write-cards before any claim runs
    Bad("card-bad-yaml", "check", CARD, b"title: [x\n", "yaml/syntax"),
    Bad("card-not-a-mapping", "check", CARD, b"- a\n- b\n", "expected a mapping with a 'claims' list", 1),
    Bad("card-claims-not-a-list", "check", CARD, b"title: t\nclaims: all verified\n", "expected a mapping with a 'claims' list"),
    Bad("card-claim-without-id", "check", CARD, b"title: t\nclaims:\n  - status: unchecked\n", "claims[0] needs an 'id'", 3),
    Bad("card-non-utf8", "check", CARD, b"title: \xff\n", "file/encoding", 1),
    Bad("card-duplicate-key", "check", CARD, b"title: a\ntitle: b\nclaims: []\n", "yaml/duplicate-key", 2),
    # command-line arguments
    Bad("args-trials-not-a-number", "args", None, ["--trials", "abc"], "argument --trials: 'abc' is not a whole number"),
    Bad("args-jobs-zero", "args", None, ["-j", "0"], "argument -j/--jobs: 0 is under 1"),
    Bad("args-unknown-condition", "args", None, ["--conditions", "baseline,oracle"], "unknown oracle"),
    Bad("args-model-without-provider", "args", None, ["--model", "gpt-4o"], "expected openai:MODEL"),
    Bad("args-unknown-option", "args", None, ["--temprature", "0"], "unrecognized arguments: --temprature"),
    Bad("args-timeout-not-a-number", "args", None, ["--timeout", "soon"], "argument --timeout: 'soon' is not a number"),
    Bad("args-limit-negative", "args", None, ["--limit", "-3"], "argument --limit: -3 is under 1"),
]


def test_the_corpus_is_large_and_names_unique():
    assert len(CORPUS) >= 40 and len({b.id for b in CORPUS}) == len(CORPUS)


@pytest.fixture(scope="module")
def replay_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bad-inputs") / "run"
    assert main(["eval", "--bundle", str(REPO), "--model", f"replay:{REPO / 'evals' / 'calibration'}", "--conditions", "baseline,skills", "--out", str(out), "--progress", "plain"]) == 0
    return out


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def place(target: Path, content: object) -> None:
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.is_dir():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if content is LOOP:
        os.symlink(target, target)
    elif content is DIRECTORY:
        target.mkdir()
    elif content is not DELETE:
        target.write_bytes(content)


@pytest.mark.parametrize("bad", CORPUS, ids=[b.id for b in CORPUS])
def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path, repo_bundle, replay_run, capsys, bad: Bad):
    run = tmp_path / "run"
    shutil.copytree(replay_run, run)
    out = tmp_path / "out"
    if bad.place:
        target = run / bad.place.removeprefix("RUN/") if bad.place.startswith("RUN/") else (tmp_path if bad.place == "prices.yaml" else repo_bundle) / bad.place
        place(target, bad.content)
    replay = ["--model", f"replay:{repo_bundle / 'evals' / 'calibration'}"]
    before = snapshot(run)
    if bad.command == "eval":
        args = ["eval", "--bundle", str(repo_bundle), *replay, "--conditions", "baseline,skills", "--out", str(out)]
        if bad.place == "prices.yaml":
            args += ["--pricing", str(tmp_path / "prices.yaml")]
    elif bad.command == "args":
        args = ["eval", "--bundle", str(repo_bundle), *replay, "--out", str(out), *bad.content]
        if "--model" in bad.content:
            args = ["eval", "--bundle", str(repo_bundle), "--out", str(out), *bad.content]
    elif bad.command == "grade":
        args = ["grade", str(run), "--bundle", str(repo_bundle)]
    elif bad.command == "check":
        args = ["check", "--bundle", str(repo_bundle), "--write-cards", "--out", str(out)]
    elif bad.command == "calibrate":
        args = ["calibrate", "--bundle", str(repo_bundle), "--out", str(out / "calibration.json")]
    else:
        args = ["show", str(run)]
    code = main(args)
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("mbskills: error:") and "Traceback" not in err, err
    assert bad.expect in err, err
    if bad.place and bad.content is not DELETE or bad.id == "run-json-missing":
        name = Path(bad.place).name if bad.id != "run-json-missing" else "run"
        assert name in err, err
    if bad.line is not None:
        assert f":{bad.line}:" in err, err
    assert not out.exists()
    if bad.command in ("grade", "show"):
        expected = before if not bad.place or not bad.place.startswith("RUN/") else snapshot(run)
        assert snapshot(run) == expected
        assert not (run / "report.json").exists() or (run / "report.json").read_bytes() == before.get("report.json")


def test_bom_and_crlf_files_are_read_like_any_other(tmp_path, repo_bundle, capsys):
    for relative in (SKILL_MD, EVALS, ANSWER):
        path = repo_bundle / relative
        text = path.read_text()
        path.write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())
    out = tmp_path / "out"
    assert main(["eval", "--bundle", str(repo_bundle), "--model", f"replay:{repo_bundle / 'evals' / 'calibration'}", "--conditions", "skills",
                 "--case", "fsdp-minimal-override", "--out", str(out)]) == 0
    record = json.loads((out / "records.jsonl").read_text())
    assert record["status"] == "ok" and record["activated_skills"] == ["nemo-mbridge-perf-megatron-fsdp"]
    assert record["answer"] and not record["answer"].startswith("\ufeff")
    assert "# Megatron FSDP in Megatron-Bridge" in record["messages"][2]["content"]  # the CRLF SKILL.md body reached the model
