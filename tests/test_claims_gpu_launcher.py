"""gpu/validate.sh -> gpu/launch.py run for real in a subprocess, with a stand-in Python
in place of the GPU machine's: it answers the torch probes, records the pip and torchrun
calls, and writes what a rank of gpu/smoke.py would.

Nothing here needs a GPU; what only a GPU can show is gpu/validate.sh's job."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from runner.load import Bundle

from gpu_common import FSDP, GPU_CLAIMS, MOE, OVERLAP, launch


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# --- the launcher -----------------------------------------------------------------------

FAKE_PYTHON = r'''#!{python}
"""Stands in for the GPU machine's python3: torch probes, pip and torchrun."""
import json, os, sys, time
sys.path.insert(0, {repo!r})
argv = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({{"argv": argv, "pythonpath": os.environ.get("PYTHONPATH", "")}}) + "\n")
if argv[:1] == ["-c"] and "torch.cuda" in argv[1]:
    gpus = int(os.environ.get("FAKE_GPUS", "1"))
    print(json.dumps([gpus > 0, gpus, "13.0" if gpus else None]))
elif argv[:1] == ["-c"]:
    print(json.dumps({{"python": "3.12.3", "torch": "2.11.0+cu130", "megatron-core": "0.19.2", "megatron-bridge": "0.6.2",
                      "transformers": "5.12.1", "transformer-engine": os.environ.get("FAKE_TE") or None}}))
elif argv[:2] == ["-m", "pip"]:
    sys.exit(int(os.environ.get("FAKE_PIP_STATUS", "0")))
elif argv[:2] == ["-m", "torch.distributed.run"]:
    from pathlib import Path
    from runner.claims.gpu import discover
    CHECKS = discover(Path({repo!r}))
    name, out = argv[argv.index("--check") + 1], argv[argv.index("--out-dir") + 1]
    mode = os.environ.get("FAKE_" + name.upper().replace("-", "_"), "passed")
    if mode == "hang":
        time.sleep(60)
    if mode == "crash":
        print("Traceback: CUDA error: out of memory")
        sys.exit(1)
    check = CHECKS[name]
    entry = {{"skill": check.skill, "claim": check.claim, "check": name, "status": mode, "rank": 0,
              "reason": "" if mode == "passed" else "the loss at the last iteration is not finite (None)",
              "losses": [6.9, 6.1, 5.2] + ([4.4] if mode == "passed" else [None]), "seconds": 1.0, "details": {{"world_size": 1}}}}
    with open(os.path.join(out, name + ".rank0.json"), "w") as handle:
        json.dump(entry, handle)
else:
    sys.exit("fake python: unexpected call " + repr(argv))
'''


@pytest.fixture
def machine(tmp_path: Path) -> dict:
    """A stand-in GPU machine: nvidia-smi on PATH, a Python that answers like torch on a GPU,
    a folder with one (empty) wheel per pin, and where the launcher would install them."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text('#!/bin/sh\necho "NVIDIA H200, 570.124.06"\n')
    fake = tmp_path / "python3"
    fake.write_text(FAKE_PYTHON.format(python=sys.executable, repo=str(REPO)))
    for path in (smi, fake):
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for pin in launch.read_pins():
        (wheels / f"{pin.name.replace('-', '_')}-{pin.version}-py3-none-any.whl").write_bytes(b"")
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", "PYTHONPATH", "CUDA_DEVICE_MAX_CONNECTIONS")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", PYTHON=sys.executable, MBSKILLS_GPU_PYTHON=str(fake),
               MBSKILLS_GPU_SITE=str(tmp_path / "site"), FAKE_LOG=str(tmp_path / "calls.jsonl"))
    return {"tmp": tmp_path, "env": env, "wheels": wheels, "bin": bin_dir, "out": tmp_path / "out" / "gpu-results.json"}


def validate_sh(machine: dict, *args: str, **env: str) -> subprocess.CompletedProcess:
    environment = dict(machine["env"], **env)
    return subprocess.run(["bash", str(REPO / "gpu" / "validate.sh"), *args], capture_output=True, text=True, env=environment, cwd=machine["tmp"], timeout=120)


def calls(machine: dict) -> list[list[str]]:
    log = machine["tmp"] / "calls.jsonl"
    return [json.loads(line)["argv"] for line in log.read_text().splitlines()] if log.exists() else []


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["--nproc", "0"], "--nproc must be a whole number of at least 1"),
        (["--nproc", "two"], "--nproc must be a whole number of at least 1, not 'two'"),
        (["--only", "moe"], "argument --only: invalid choice: 'moe'"),
        (["--wheels", "/no/such/folder"], "--wheels /no/such/folder: no such folder"),
        (["--timeout", "-5"], "--timeout must be a positive number"),
        (["--verbose"], "unrecognized arguments: --verbose"),
        (["--out"], "argument --out: expected one argument"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(machine, args, expect):
    done = validate_sh(machine, *args, "--out", str(machine["out"]))
    line = one_line(done.stderr)
    assert done.returncode == 2, done.stderr
    assert line.startswith("gpu/validate.sh: error:") and expect in line, line
    assert calls(machine) == [] and not (machine["tmp"] / "site").exists() and not machine["out"].exists()


def test_help_exits_0(machine):
    done = validate_sh(machine, "--help")
    assert done.returncode == 0 and "--nproc" in done.stdout and "--only" in done.stdout


def test_no_nvidia_smi_is_exit_3_before_anything_is_installed(machine):
    env = dict(machine["env"], PATH=os.pathsep.join(p for p in machine["env"]["PATH"].split(os.pathsep) if p != str(machine["bin"])))
    done = subprocess.run(["bash", str(REPO / "gpu" / "validate.sh"), "--wheels", str(machine["wheels"]), "--out", str(machine["out"])],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 3
    assert one_line(done.stderr).startswith("gpu/validate.sh: no CUDA GPU found (nvidia-smi is not on PATH)")
    assert calls(machine) == [] and not (machine["tmp"] / "site").exists() and not machine["out"].exists()


def test_torch_without_cuda_is_exit_3_before_anything_is_installed(machine):
    done = validate_sh(machine, "--wheels", str(machine["wheels"]), "--out", str(machine["out"]), FAKE_GPUS="0")
    assert done.returncode == 3
    line = one_line(done.stderr)
    assert line.startswith("gpu/validate.sh: no CUDA GPU found (torch.cuda.is_available() is False") and "NVIDIA H200" in line
    assert [c[0] for c in calls(machine)] == ["-c"]  # the probe, and no pip, no torchrun
    assert not (machine["tmp"] / "site").exists() and not machine["out"].exists()


def test_more_processes_than_gpus_is_a_usage_error(machine):
    done = validate_sh(machine, "--nproc", "4", "--wheels", str(machine["wheels"]), "--out", str(machine["out"]))
    assert done.returncode == 2 and "--nproc 4 is more than the 1 GPUs present" in one_line(done.stderr)
    assert not any(c[:2] == ["-m", "pip"] for c in calls(machine))


def load_results(path: Path):
    from runner.claims.gpu_results import load_results as load

    return load(path, Bundle(REPO))  # schema and bundle cross-check, as the merge does


def test_a_full_run_installs_runs_each_check_and_writes_valid_results(machine):
    done = validate_sh(machine, "--wheels", str(machine["wheels"]), "--out", str(machine["out"]))
    assert done.returncode == 0, done.stderr
    pip = [c for c in calls(machine) if c[:2] == ["-m", "pip"]]
    assert len(pip) == 1
    assert pip[0][:10] == ["-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir", "--upgrade", "--target"]
    installed = {launch.wheel_key(p)[0] for p in pip[0][11:]}
    assert installed | {"tokenizers"} == {norm(p.name) for p in launch.read_pins()}  # tokenizers: kept when this Python's satisfies
    runs = [c for c in calls(machine) if c[:2] == ["-m", "torch.distributed.run"]]
    assert [r[r.index("--check") + 1] for r in runs] == ["fsdp", "overlap-dp"]
    assert all("--standalone" in r and "--nproc_per_node=1" in r and r[4].endswith("gpu/smoke.py") for r in runs)
    pythonpath = [json.loads(line)["pythonpath"] for line in (machine["tmp"] / "calls.jsonl").read_text().splitlines() if "torch.distributed.run" in line]
    assert all(p.split(os.pathsep)[:2] == [str(machine["tmp"] / "site"), str(REPO)] for p in pythonpath)

    run = load_results(machine["out"])
    assert (run.gpu_model, run.gpu_count, run.driver) == ("NVIDIA H200", 1, "570.124.06")
    assert {(r.claim, r.status) for r in run.results} == {("fsdp-gpu-train-save-resume", "passed"), ("overlap-gpu-dp-overlap-trains", "passed"), ("overlap-gpu-tp-overlap", "skipped"), ("moe-gpu-overlap-trains", "skipped")}
    skipped = {r.claim: r.reason for r in run.results if r.status == "skipped"}
    assert skipped["overlap-gpu-tp-overlap"] == "needs at least 2 GPUs (this run has 1) and Transformer Engine (not installed here)"
    assert skipped["moe-gpu-overlap-trains"] == "needs at least 2 GPUs (this run has 1)"
    assert "overlap-tp: skipped: needs at least 2 GPUs" in done.stdout
    payload = json.loads(machine["out"].read_text())
    assert payload["versions"]["transformer-engine"] is None and "rank" not in payload["checks"][0]
    assert (machine["out"].parent / "gpu-logs" / "fsdp.log").is_file()


def test_only_and_out_from_the_environment(machine, tmp_path):
    out_dir = tmp_path / "device-out"
    out_dir.mkdir()
    done = validate_sh(machine, "--only", "fsdp", "--wheels", str(machine["wheels"]), OUT=str(out_dir))
    assert done.returncode == 0, done.stderr
    payload = json.loads((out_dir / "gpu-results.json").read_text())
    assert [c["check"] for c in payload["checks"]] == ["fsdp"]


def test_failed_crashed_and_hung_checks_are_recorded_and_exit_1(machine):
    done = validate_sh(machine, "--wheels", str(machine["wheels"]), "--out", str(machine["out"]), "--timeout", "2", FAKE_FSDP="failed", FAKE_OVERLAP_DP="crash")
    assert done.returncode == 1, done.stderr
    by_check = {c["check"]: c for c in json.loads(machine["out"].read_text())["checks"]}
    assert by_check["fsdp"]["status"] == "failed" and by_check["fsdp"]["losses"][-1] is None
    crashed = by_check["overlap-dp"]
    assert crashed["status"] == "error" and "no rank wrote a result" in crashed["reason"] and "out of memory" in crashed["reason"]
    hung = validate_sh(machine, "--only", "fsdp", "--wheels", str(machine["wheels"]), "--out", str(machine["out"]), "--timeout", "1", FAKE_FSDP="hang")
    assert hung.returncode == 1
    entry = json.loads(machine["out"].read_text())["checks"][0]
    assert entry["status"] == "error" and entry["reason"].startswith("timed out after 1 s")


def test_each_skill_registers_its_own_gpu_check_and_the_count_must_divide(machine):
    done = validate_sh(machine, "--only", MOE, "--wheels", str(machine["wheels"]), "--out", str(machine["out"]), FAKE_GPUS="2")
    assert done.returncode == 0, done.stderr
    runs = [c for c in calls(machine) if c[:2] == ["-m", "torch.distributed.run"]]
    assert [r[r.index("--check") + 1] for r in runs] == ["moe-ep-overlap"] and "--nproc_per_node=2" in runs[0]
    odd = validate_sh(machine, "--only", "moe-ep-overlap", "--wheels", str(machine["wheels"]), "--out", str(machine["out"]), FAKE_GPUS="3")
    entry = json.loads(machine["out"].read_text())["checks"][0]
    assert odd.returncode == 0 and entry["status"] == "skipped" and entry["reason"] == "needs a GPU count divisible by 2 (this run has 3)"


def test_two_gpus_with_transformer_engine_run_the_tp_check(machine):
    done = validate_sh(machine, "--only", OVERLAP, "--wheels", str(machine["wheels"]), "--out", str(machine["out"]), FAKE_GPUS="2", FAKE_TE="2.9.0")
    assert done.returncode == 0, done.stderr
    runs = [c for c in calls(machine) if c[:2] == ["-m", "torch.distributed.run"]]
    assert [r[r.index("--check") + 1] for r in runs] == ["overlap-dp", "overlap-tp"] and all("--nproc_per_node=2" in r for r in runs)


def test_a_missing_wheel_or_a_failing_pip_is_exit_4(machine):
    next(machine["wheels"].glob("megatron_core-*.whl")).unlink()
    done = validate_sh(machine, "--wheels", str(machine["wheels"]), "--out", str(machine["out"]))
    assert done.returncode == 4 and "no wheel for megatron-core==0.19.2; run gpu/prepare_wheels.sh" in one_line(done.stderr)
    (machine["wheels"] / "megatron_core-0.19.2-py3-none-any.whl").write_bytes(b"")
    done = validate_sh(machine, "--wheels", str(machine["wheels"]), "--out", str(machine["out"]), FAKE_PIP_STATUS="1")
    last = done.stderr.strip().splitlines()[-1]  # after the progress lines
    assert done.returncode == 4 and last.startswith("gpu/validate.sh: installing 3") and last.endswith("failed: exit status 1"), done.stderr
    assert not machine["out"].exists()


def test_launcher_checks_match_the_gpu_tier_claims():
    from runner.claims.gpu import discover

    checks = discover(REPO)
    assert {(c.skill, c.claim) for c in checks.values()} == GPU_CLAIMS
    for skill in {c.skill for c in checks.values()}:
        card = yaml.safe_load((REPO / "skills" / skill / "card.yaml").read_text())
        tiers = {(skill, c["id"]) for c in card["claims"] if c.get("tier") == "gpu"}
        assert tiers == {k for k in GPU_CLAIMS if k[0] == skill}
