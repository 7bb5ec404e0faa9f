"""replay:DIR (recorded answers), the shipped answer set, the price table and progress output."""

from __future__ import annotations

import io
import json

import pytest

from runner.cli import main
from runner.core import UsageError
from runner.providers import PriceTable
from runner.run.progress import PlainProgress, RichProgress, make_progress
from runner.providers import Usage

from conftest import REPO
from runner.load import Bundle, bundle_cases

CALIBRATION = REPO / "evals" / "calibration"


def test_shipped_answers_replay_every_case_under_every_condition(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["eval", "--bundle", str(REPO), "--model", f"replay:{CALIBRATION}", "--conditions", "baseline,skills,inline", "--out", str(out), "--progress", "plain"]) == 0
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(records) == len(bundle_cases(Bundle(REPO))) * 3 and all(r["status"] == "ok" and r["answer"] for r in records)
    for record in records:
        if record["condition"] == "skills":
            # the recorded agent's routing matches the case (the answers are known-good)
            assert record["activated_skills"] == ([record["expected_skill"]] if record["expected_skill"] else [])
            script = record["expected_script"]
            assert record["files_read"] == ([f"{record['expected_skill']}/{script}"] if script else [])
        else:
            assert record["activated_skills"] == []
    assert "0 errors" in capsys.readouterr().err


def test_replay_condition_override_and_missing_answers(tmp_path, capsys):
    answers = tmp_path / "answers" / "routing"
    answers.mkdir(parents=True)
    (answers / "route-none-hf-conversion.md").write_text("Use the conversion script.\n")
    (answers / "route-none-hf-conversion.baseline.md").write_text("I am not sure.\n")
    base = ["eval", "--bundle", str(REPO), "--model", f"replay:{tmp_path / 'answers'}", "--progress", "plain"]
    assert main([*base, "--case", "route-none-hf-conversion", "--out", str(tmp_path / "a")]) == 0
    records = {r["condition"]: r for r in map(json.loads, (tmp_path / "a" / "records.jsonl").read_text().splitlines())}
    assert records["baseline"]["answer"] == "I am not sure." and records["skills"]["answer"] == "Use the conversion script."
    capsys.readouterr()
    assert main([*base, "--case", "routing/*", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "no recorded answer routing/route-fsdp-oom.md for case routing/route-fsdp-oom (baseline) and 5 more" in err
    assert not (tmp_path / "b").exists()


def test_replay_frontmatter_errors_name_the_file_and_line(tmp_path, capsys):
    answers = tmp_path / "answers" / "routing"
    answers.mkdir(parents=True)
    (answers / "route-none-hf-conversion.md").write_text("---\nactivate: [a, b]\n---\ntext\n")
    assert main(["eval", "--bundle", str(REPO), "--model", f"replay:{tmp_path / 'answers'}", "--case", "route-none-hf-conversion", "--out", str(tmp_path / "a")]) == 2
    assert "route-none-hf-conversion.md:2: replay/frontmatter: 'activate' must be a skill name" in capsys.readouterr().err


def test_price_lookup_longest_match_and_user_override(tmp_path):
    table = PriceTable()
    assert table.lookup("openai", "gpt-4o-mini-2024-07-18").match == "gpt-4o-mini"
    assert table.lookup("openai", "gpt-4o-2024-08-06").match == "gpt-4o"
    assert table.lookup("anthropic", "claude-opus-4-5-20251101").input == 5.0
    assert table.lookup("openai", "my-finetune") is None
    usage = Usage(input_tokens=1_000_000, output_tokens=500_000, cached_input_tokens=200_000)
    assert table.lookup("openai", "gpt-4o").cost(usage) == pytest.approx(0.8 * 2.5 + 0.2 * 1.25 + 0.5 * 10.0)
    extra = tmp_path / "prices.yaml"
    extra.write_text("models:\n  - {provider: openai, match: gpt-4o, input: 1, output: 2}\n")
    mine = PriceTable(extra).lookup("openai", "gpt-4o-2024-08-06")
    assert (mine.input, mine.cached_input, mine.output) == (1.0, 1.0, 2.0)


@pytest.mark.parametrize("text", ["models: 3\n", "models:\n  - {provider: openai, match: x, input: cheap, output: 1}\n", "[unclosed\n"])
def test_bad_price_tables_are_usage_errors(tmp_path, text):
    path = tmp_path / "prices.yaml"
    path.write_text(text)
    with pytest.raises(UsageError, match=str(path)):
        PriceTable(path)


RECORD = {"key": "s/c#skills#0", "status": "ok", "finish": "answered", "error": None, "requests": 2, "cached_responses": 0, "turns": [{}, {}], "latency_s": 0.5}


def test_plain_progress_is_one_line_per_record():
    stream = io.StringIO()
    with make_progress(2, stream) as progress:
        assert isinstance(progress, PlainProgress)
        progress.advance(RECORD)
        progress.advance(dict(RECORD, status="error", finish="error", error={"kind": "timeout", "message": "took too long"}))
    lines = stream.getvalue().splitlines()
    assert lines[0] == "[1/2] answered   s/c#skills#0  2 turns, 2 req, 0.50 s"
    assert lines[1].startswith("[2/2] error") and lines[1].endswith("timeout: took too long")


def test_rich_progress_draws_a_bar_with_the_error_count():
    stream = io.StringIO()
    with make_progress(2, stream, mode="rich") as progress:
        assert isinstance(progress, RichProgress)
        progress.advance(dict(RECORD, status="error", error={"kind": "server", "message": "x"}))
        progress.advance(RECORD)
    assert "2/2" in stream.getvalue() and "1 errors" in stream.getvalue()
