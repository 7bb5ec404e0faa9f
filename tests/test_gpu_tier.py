"""The GPU tier's CPU side: the launcher, the wheel set, the smoke configs, the merge.

Nothing here needs a GPU. The launcher runs for real (gpu/validate.sh in a subprocess)
with a stand-in Python in place of the GPU machine's: it answers the torch probes, records
the pip and torchrun calls, and writes what a rank of gpu/smoke.py would. What only a GPU
can show (that pretrain() trains, saves and resumes) is gpu/validate.sh's job.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
import yaml

from conftest import REPO, copy_bundle
from runner.cli import main
from runner.load import Bundle
from runner.validate import validate_path

sys.path.insert(0, str(REPO / "gpu"))
import launch  # noqa: E402 - gpu/launch.py, standard library only

FSDP = "nemo-mbridge-perf-megatron-fsdp"
OVERLAP = "nemo-mbridge-perf-tp-dp-comm-overlap"
GPU_CLAIMS = {(FSDP, "fsdp-gpu-train-save-resume"), (OVERLAP, "overlap-gpu-dp-overlap-trains"), (OVERLAP, "overlap-gpu-tp-overlap")}
WHEELS = REPO / ".whl"
PINS_FILE = REPO / "gpu" / "wheels.txt"
PLATFORMS = ["manylinux_2_39_x86_64", "manylinux_2_35_x86_64", "manylinux_2_34_x86_64", "manylinux_2_31_x86_64", "manylinux_2_28_x86_64",
             "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64", "linux_x86_64"]


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
    from runner.claims.gpu import CHECKS
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
    assert {(r.claim, r.status) for r in run.results} == {("fsdp-gpu-train-save-resume", "passed"), ("overlap-gpu-dp-overlap-trains", "passed"), ("overlap-gpu-tp-overlap", "skipped")}
    skipped = next(r for r in run.results if r.status == "skipped")
    assert skipped.reason == "needs at least 2 GPUs (this run has 1) and Transformer Engine (not installed here)"
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


def test_two_gpus_with_transformer_engine_run_the_tp_check(machine):
    done = validate_sh(machine, "--only", "overlap", "--wheels", str(machine["wheels"]), "--out", str(machine["out"]), FAKE_GPUS="2", FAKE_TE="2.9.0")
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
    from runner.claims.gpu import CHECKS

    assert {(c.skill, c.claim) for c in CHECKS.values()} == GPU_CLAIMS
    for skill in (FSDP, OVERLAP):
        card = yaml.safe_load((REPO / "skills" / skill / "card.yaml").read_text())
        tiers = {(skill, c["id"]) for c in card["claims"] if c.get("tier") == "gpu"}
        assert tiers == {k for k in GPU_CLAIMS if k[0] == skill}


# --- the wheel set ----------------------------------------------------------------------


def pins() -> dict[str, launch.Pin]:
    return {norm(p.name): p for p in launch.read_pins()}


def preinstalled() -> list[str]:
    return [line.strip() for line in (REPO / "gpu" / "preinstalled.txt").read_text().splitlines() if line.strip() and not line.startswith("#")]


def not_carried() -> set[str]:
    return {norm(m.group(1)) for m in re.finditer(r"^# not-carried: ([A-Za-z0-9._-]+):", PINS_FILE.read_text(), re.M)}


def test_pins_are_exact_and_agree_with_the_lock():
    locked = {}
    for name in ("lock.txt", "bridge-nodeps.txt"):
        for line in (REPO / "requirements" / name).read_text().splitlines():
            if "==" in line and not line.startswith("#"):
                key, version = line.split("==")
                locked[norm(key)] = version.strip()
    found = pins()
    assert {"megatron-core", "megatron-bridge", "transformers", "omegaconf", "nvidia-resiliency-ext"} <= set(found)
    assert found["megatron-bridge"].version == "0.6.2" and found["transformers"].version == "5.12.1"
    differ = {k: (p.version, locked[k]) for k, p in found.items() if k in locked and locked[k] != p.version}
    assert differ == {}
    assert not (set(found) & not_carried())


def wheel_requirements(key: str) -> list[str] | None:
    """Requires-Dist of a pinned distribution: from its wheel in .whl/ when there, else from
    this venv when it has the same version installed, else None."""
    from importlib.metadata import PackageNotFoundError, distribution

    pin = pins()[key]
    for wheel in WHEELS.glob("*.whl") if WHEELS.is_dir() else ():
        if launch.wheel_key(wheel.name) == (key, pin.version):
            with zipfile.ZipFile(wheel) as archive:
                meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
                return Parser().parsestr(archive.read(meta).decode()).get_all("Requires-Dist") or []
    try:
        found = distribution(pin.name)
    except PackageNotFoundError:
        return None
    return found.requires or [] if found.version == pin.version else None


def test_every_declared_dependency_is_carried_preinstalled_or_named():
    """What this proves: each pinned wheel's own Requires-Dist (read from .whl/ when
    prepare_wheels.sh has filled it, else from this venv's copy of the same version) names
    only distributions that gpu/wheels.txt pins (at a version inside the range), that the
    GPU machine has (gpu/preinstalled.txt), or that wheels.txt lists as not carried with its
    reason. It reads metadata only: it does not show that the set imports, which the opt-in
    import probe below and the GPU run itself do."""
    from packaging.requirements import Requirement

    found, machine_has, named = pins(), preinstalled(), not_carried()
    environment = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux", "platform_system": "Linux",
                   "platform_machine": "x86_64", "os_name": "posix", "implementation_name": "cpython", "extra": ""}
    read, problems = 0, []
    for key in found:
        requirements = wheel_requirements(key)
        if requirements is None:
            continue
        read += 1
        for text in requirements:
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate(environment):
                continue
            name = norm(requirement.name)
            if name in found:
                if not requirement.specifier.contains(found[name].version, prereleases=True):
                    problems.append(f"{key} needs {requirement}, the pin is {found[name].version}")
            elif not (name in named or any(name == norm(p) or (p.endswith("*") and name.startswith(p[:-1])) for p in machine_has)):
                problems.append(f"{key} needs {requirement}: neither pinned, preinstalled nor named as not carried")
    assert problems == []
    assert read >= len(found) - 3  # the venv lacks only a few of them (nvidia-resiliency-ext, defusedxml)


@pytest.mark.skipif(not any(WHEELS.glob("*.whl")) if WHEELS.is_dir() else True, reason="no .whl/ folder: run gpu/prepare_wheels.sh to fill it")
def test_prepared_wheel_folder_resolves_for_the_gpu_machine(tmp_path):
    """What this proves: pip, offline and without dependencies, finds in .whl/ a wheel for
    every pin in gpu/wheels.txt that installs on CPython 3.12 for x86-64 Linux (glibc up to
    2.39), i.e. what validate.sh's `pip install --no-index --no-deps --target` will need."""
    requirements = tmp_path / "pins.txt"
    requirements.write_text("".join(f"{p.name}=={p.version}\n" for p in launch.read_pins()))
    platforms = [arg for tag in PLATFORMS for arg in ("--platform", tag)]
    done = subprocess.run([sys.executable, "-m", "pip", "--isolated", "install", "--dry-run", "--disable-pip-version-check", "--no-index", "--no-deps",
                           "--find-links", str(WHEELS), "--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp", *platforms,
                           "--target", str(tmp_path / "target"), "-r", str(requirements)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    would = done.stdout.strip().splitlines()[-1]
    assert would.startswith("Would install ")
    assert {norm(item.rsplit("-", 1)[0]) for item in would.removeprefix("Would install ").split()} == set(pins())
    stray = {launch.wheel_key(w.name) for w in WHEELS.glob("*.whl")} - {(k, p.version) for k, p in pins().items()}
    assert stray == set()
    assert sum(w.stat().st_size for w in WHEELS.glob("*.whl")) < 48 * 1024 * 1024  # the whole tree must travel in 64 MiB


def test_scripts_parse():
    for script in ("prepare_wheels.sh", "validate.sh"):
        done = subprocess.run(["bash", "-n", str(REPO / "gpu" / script)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


@pytest.mark.skipif(os.environ.get("MBSKILLS_GPU_IMPORT_PROBE") != "1", reason="slow (about a minute): set MBSKILLS_GPU_IMPORT_PROBE=1")
@pytest.mark.skipif(not WHEELS.is_dir(), reason="no .whl/ folder: run gpu/prepare_wheels.sh")
def test_pretrain_path_imports_with_only_the_preinstalled_and_carried_packages(tmp_path):
    """The GPU machine's site, simulated: this venv's copies of the preinstalled
    distributions only, the carried wheels unpacked in front, TE and pulp as placeholders;
    then everything gpu/smoke.py imports. A missing module fails here, not on the GPU."""
    site_packages = Path(next(p for p in sys.path if p.endswith("site-packages")))
    machine = tmp_path / "machine"
    machine.mkdir()
    wanted = preinstalled()
    for info in site_packages.glob("*.dist-info"):
        name = norm(info.name[: -len(".dist-info")].rsplit("-", 1)[0])
        if name in ("nvidia-modelopt", "nvidia-resiliency-ext", "nvidia-ml-py") or not any(name == norm(p) or (p.endswith("*") and name.startswith(p[:-1])) for p in wanted):
            continue
        for line in (info / "RECORD").read_text().splitlines():
            top = line.split(",")[0].split("/")[0]
            if top and not top.startswith("..") and top != "megatron" and (site_packages / top).exists() and not (machine / top).exists():
                (machine / top).symlink_to(site_packages / top)
    carried = tmp_path / "carried"
    for wheel in WHEELS.glob("*.whl"):
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(carried)
    probe = (
        "import sys\n"
        f"sys.path[:0] = [{str(REPO)!r}, {str(carried)!r}, {str(machine)!r}]\n"
        "from runner.claims.environment import install_absent_placeholders, install_te_placeholders\n"
        "install_te_placeholders(); install_absent_placeholders(('pulp',))\n"
        "import megatron.bridge.training.config, megatron.bridge.training.pretrain, megatron.bridge.training.gpt_step\n"
        "import megatron.bridge.training.checkpointing, megatron.core.distributed.fsdp.mcore_fsdp_adapter\n"
        "from megatron.bridge.models import GPTModelProvider\n"
        "import runner.claims.gpu, runner.claims.fsdp, runner.claims.overlap\n"
        "import transformers, megatron.bridge\n"
        "assert transformers.__version__ == '5.12.1', transformers.__version__\n"
        "print('IMPORTS OK')\n"
    )
    done = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True, timeout=600)
    assert "IMPORTS OK" in done.stdout, done.stderr[-3000:]


# --- the smoke configs, built on CPU from each SKILL.md ---------------------------------


@pytest.fixture(scope="module")
def checks():
    from runner.claims.run import load_checks

    return load_checks()


def context(skill: str, claim: str, root: Path = REPO):
    from runner.claims.gpu import skill_context

    return skill_context(root, skill, claim)


def test_fsdp_smoke_configs_come_from_the_block_and_validate(checks, tmp_path):
    from runner.claims.environment import quiet, resolve
    from runner.claims.gpu import FSDP_ITERS, FSDP_SAVE_AT, HIDDEN, NUM_LAYERS, fsdp_configs, smoke_base

    base = smoke_base(1, train_iters=FSDP_ITERS, te=False)
    assert base.ddp.use_megatron_fsdp is False and base.checkpoint.ckpt_format == "torch_dist"  # the block supplies both
    assert (base.model.num_layers, base.model.hidden_size, base.tokenizer.tokenizer_type) == (NUM_LAYERS, HIDDEN, "NullTokenizer")
    for world_size in (1, 2, 8):
        first, second = fsdp_configs(context(FSDP, "fsdp-gpu-train-save-resume"), world_size, tmp_path / "ckpt", te=False)
        with quiet():
            resolve(first, world_size=world_size)
            resolve(second, world_size=world_size)
        assert first.ddp.use_megatron_fsdp and first.ddp.data_parallel_sharding_strategy == "optim_grads_params"
        assert first.optimizer.use_distributed_optimizer and first.checkpoint.ckpt_format == "fsdp_dtensor"
        assert (first.checkpoint.save_interval, second.checkpoint.ckpt_step) == (FSDP_SAVE_AT, FSDP_SAVE_AT)
        assert first.train.global_batch_size == first.train.micro_batch_size * world_size == first.train.micro_batch_size * first.data_parallel_size


def test_overlap_smoke_configs_come_from_the_block_and_validate(checks):
    from unittest import mock

    from megatron.bridge.training import comm_overlap

    from runner.claims.environment import quiet, resolve
    from runner.claims.gpu import overlap_config

    for world_size, on in ((1, False), (2, True), (4, True)):
        cfg = overlap_config(context(OVERLAP, "overlap-gpu-dp-overlap-trains"), world_size, tp=1, te=False)
        assert cfg.model.tensor_model_parallel_size == 1 and cfg.model.pipeline_model_parallel_size == 1
        assert isinstance(cfg.comm_overlap, comm_overlap.CommOverlapConfig)  # from the block: the base has none
        with quiet():
            resolve(cfg, world_size=world_size)
        assert cfg.ddp.use_distributed_optimizer and (cfg.ddp.overlap_grad_reduce, cfg.ddp.overlap_param_gather) == (on, on)
    cfg = overlap_config(context(OVERLAP, "overlap-gpu-tp-overlap"), 2, tp=2, te=False)
    with mock.patch.object(comm_overlap, "HAVE_TE", True), quiet():
        resolve(cfg, world_size=2)
    assert cfg.model.tp_comm_overlap is True and cfg.model.sequence_parallel is True and cfg.data_parallel_size == 1


def snapshot_cards(bundle: Path) -> dict[str, bytes]:
    return {p.parent.name: p.read_bytes() for p in sorted((bundle / "skills").glob("*/card.yaml"))}


def test_gpu_claims_need_a_gpu_on_cpu_and_write_cards_leaves_them(checks, tmp_path, capsys):
    bundle = copy_bundle(tmp_path)
    before = snapshot_cards(bundle)
    code = main(["check", "--bundle", str(bundle), "--claim", "*-gpu-*", "--out", str(tmp_path / "claims"), "--write-cards"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.rstrip().endswith("0 passed, 0 failed, 3 need a GPU (not run here)")
    assert len(re.findall(r"\bneeds-gpu\b", out.split("\n\n")[0])) >= 3
    assert snapshot_cards(bundle) == before
    results = json.loads((tmp_path / "claims" / "claims.json").read_text())["results"]
    assert {(r["claim"], r["status"], r["tier"]) for r in results} == {(c, "needs-gpu", "gpu") for _, c in GPU_CLAIMS}
    assert (tmp_path / "claims" / "junit.xml").read_text().count("<skipped") == 3


def test_the_gpu_run_follows_the_skill_block(checks, tmp_path):
    """Drop one line of the FSDP enablement block: the GPU claim's CPU side fails, because the
    GPU run would train without Megatron FSDP."""
    from runner.claims.run import FAILED, run_checks

    bundle = copy_bundle(tmp_path)
    skill_md = bundle / "skills" / FSDP / "SKILL.md"
    skill_md.write_text(skill_md.read_text().replace("cfg.ddp.use_megatron_fsdp = True\n", "", 1))
    result = {r.claim: r for r in run_checks(Bundle(bundle), skills=[FSDP], pattern="fsdp-gpu-*")}["fsdp-gpu-train-save-resume"]
    assert result.status == FAILED and "Megatron FSDP" in result.message, result.message


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
    assert changed == GPU_CLAIMS - {(OVERLAP, "overlap-gpu-tp-overlap")} | {(OVERLAP, "overlap-gpu-tp-overlap")}
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


# --- the training checks' own logic, with Bridge's pretrain() simulated ------------------


class FakeBridge:
    """Calls a check's Recorder the way Bridge's train loop does (on_train_start, then
    on_train_step_end per iteration with the reduced loss), writes what a save would, and
    stands in for the weights with a counter the fingerprint reads."""

    def __init__(self, wrapper, losses, load_weights=None, save_fsdp=True):
        self.wrapper, self.losses, self.load_weights, self.save_fsdp = wrapper, losses, load_weights, save_fsdp
        self.weights = 0.0
        self.saved: dict[int, float] = {}

    def __call__(self, cfg, recorder):
        from types import SimpleNamespace

        import torch

        model = self.wrapper.__new__(self.wrapper)
        start = 0
        if cfg.checkpoint.load:
            start = cfg.checkpoint.ckpt_step
            self.weights = self.saved[start] if self.load_weights is None else self.load_weights
        else:
            self.weights = 0.0
        state = SimpleNamespace(train_state=SimpleNamespace(step=start), cfg=cfg)
        cfg.data_parallel_size = 1
        context = SimpleNamespace(state=state, model=[model], optimizer=None, loss_dict=None)
        recorder.on_train_start(context)
        for step in range(start, cfg.train.train_iters):
            self.weights += 1.0
            state.train_state.step = step
            loss = self.losses[step]
            recorder.on_train_step_end(SimpleNamespace(state=state, model=[model], optimizer=None, loss_dict={"lm loss": torch.tensor(loss)}))
            if cfg.checkpoint.save and (step + 1) % cfg.checkpoint.save_interval == 0:
                self.saved[step + 1] = self.weights
                folder = Path(cfg.checkpoint.save) / f"iter_{step + 1:07d}"
                folder.mkdir(parents=True)
                if self.save_fsdp:
                    (folder / ".metadata").write_bytes(b"")
        return recorder


@pytest.fixture
def simulated(checks, monkeypatch):
    import torch.distributed

    from runner.claims import gpu

    monkeypatch.setattr(torch.distributed, "barrier", lambda *a, **k: None)

    def install(bridge):
        monkeypatch.setattr(gpu, "_pretrain", lambda cfg, recorder=None: bridge(cfg, recorder or gpu._recorder()))
        monkeypatch.setattr(gpu, "fingerprint", lambda model: (bridge.weights, bridge.weights ** 2))
        return gpu

    return install


LOSSES = [6.93, 6.9, 6.7, 6.2, 5.8, 5.1, 4.6, 4.0]


def test_fsdp_check_passes_on_a_faithful_save_and_resume(simulated, tmp_path):
    from megatron.core.distributed.fsdp.mcore_fsdp_adapter import FullyShardedDataParallel

    gpu = simulated(FakeBridge(FullyShardedDataParallel, LOSSES))
    entry = gpu.run_check("fsdp", REPO, tmp_path, 1)
    assert entry["status"] == "passed", entry["reason"]
    assert entry["losses"] == pytest.approx(LOSSES + LOSSES[4:])
    details = entry["details"]
    assert details["checkpoint"] == "iter_0000004" and details["ckpt_format"] == "fsdp_dtensor" and details["resumed_at_iteration"] == 4
    assert tuple(details["weights_fingerprint"]["saved"]) == tuple(details["weights_fingerprint"]["loaded"]) == (4.0, 16.0)
    assert tuple(details["weights_fingerprint"]["initial"]) == (0.0, 0.0)


@pytest.mark.parametrize(
    ("bridge", "expect"),
    [
        (lambda w: FakeBridge(w, LOSSES, load_weights=0.0), "are not the ones saved at iteration 4"),
        (lambda w: FakeBridge(w, LOSSES[:-1] + [float("nan")]), "the loss at the last iteration is not finite"),
        (lambda w: FakeBridge(w, LOSSES, save_fsdp=False), "is not in fsdp_dtensor (PyTorch DCP) format"),
        (lambda w: FakeBridge(__import__("megatron.core.distributed", fromlist=["DistributedDataParallel"]).DistributedDataParallel, LOSSES), "not megatron.core.distributed.fsdp.mcore_fsdp_adapter.FullyShardedDataParallel"),
    ],
    ids=["restarted-weights", "nan-loss", "torch-dist-checkpoint", "plain-ddp"],
)
def test_fsdp_check_fails_when_resume_or_wrapper_is_wrong(simulated, tmp_path, bridge, expect):
    from megatron.core.distributed.fsdp.mcore_fsdp_adapter import FullyShardedDataParallel

    gpu = simulated(bridge(FullyShardedDataParallel))
    entry = gpu.run_check("fsdp", REPO, tmp_path, 1)
    assert entry["status"] == "failed" and expect in entry["reason"], entry["reason"]


def test_overlap_dp_check_reads_what_training_used(simulated, tmp_path, monkeypatch):
    from megatron.core.distributed import DistributedDataParallel
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    gpu = simulated(FakeBridge(DistributedDataParallel, LOSSES))
    monkeypatch.setattr(gpu, "_ddp_of", lambda model: {"overlap_grad_reduce": False, "overlap_param_gather": False, "use_distributed_optimizer": True})
    entry = gpu.run_check("overlap-dp", REPO, tmp_path, 1)
    assert entry["status"] == "failed" and "not the distributed optimizer" in entry["reason"]  # the stand-in has no optimizer

    original = gpu._pretrain

    def with_optimizer(cfg, recorder=None):
        run = original(cfg, recorder)
        run.optimizer = DistributedOptimizer.__new__(DistributedOptimizer)
        return run

    monkeypatch.setattr(gpu, "_pretrain", with_optimizer)
    entry = gpu.run_check("overlap-dp", REPO, tmp_path, 1)
    assert entry["status"] == "passed", entry["reason"]
    assert entry["details"]["data_parallel_size"] == 1 and "nothing to overlap" in entry["details"]["note"]
    assert entry["losses"] == pytest.approx(LOSSES[:6])


def test_collect_prefers_rank_0_and_reports_a_peer_crash(tmp_path):
    def write(rank, status, reason=""):
        entry = {"skill": FSDP, "claim": "fsdp-gpu-train-save-resume", "check": "fsdp", "status": status, "reason": reason, "losses": [1.0], "seconds": 1.0, "rank": rank}
        (tmp_path / f"fsdp.rank{rank}.json").write_text(json.dumps(entry))

    write(0, "passed")
    write(1, "passed")
    assert launch.collect("fsdp", tmp_path, 2)["status"] == "passed"
    write(1, "error", "RuntimeError: NCCL timeout")
    (tmp_path / "fsdp.rank0.json").unlink()
    chosen = launch.collect("fsdp", tmp_path, 2)
    assert chosen["status"] == "error" and chosen["reason"] == "rank 1: RuntimeError: NCCL timeout" and "rank" not in chosen
    assert launch.collect("overlap-dp", tmp_path, 2) is None


def test_smoke_worker_without_a_gpu_writes_an_error_entry(tmp_path):
    """gpu/smoke.py run directly on this CPU machine: it gets as far as CUDA and reports the
    crash as its rank's result entry, which is what the launcher reads."""
    done = subprocess.run([sys.executable, str(REPO / "gpu" / "smoke.py"), "--check", "overlap-dp", "--out-dir", str(tmp_path), "--workdir", str(tmp_path / "work")],
                          capture_output=True, text=True, timeout=300, env={k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")})
    assert done.returncode == 1
    entry = json.loads((tmp_path / "overlap-dp.rank0.json").read_text())
    assert (entry["skill"], entry["claim"], entry["status"], entry["rank"]) == (OVERLAP, "overlap-gpu-dp-overlap-trains", "error", 0)
    assert "nvidia" in entry["reason"].lower() or "cuda" in entry["reason"].lower(), entry["reason"]
