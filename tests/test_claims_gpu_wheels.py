"""The wheel set the GPU machine installs (gpu/wheels.txt): exact pins that agree with the
lock, every dependency carried, preinstalled or named, and the pretrain() path importable
with only those packages.

Nothing here needs a GPU; what only a GPU can show is gpu/validate.sh's job."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from conftest import REPO

from gpu_common import launch
WHEELS = REPO / ".whl"
PINS_FILE = REPO / "gpu" / "wheels.txt"
PLATFORMS = ["manylinux_2_39_x86_64", "manylinux_2_35_x86_64", "manylinux_2_34_x86_64", "manylinux_2_31_x86_64", "manylinux_2_28_x86_64",
             "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64", "linux_x86_64"]


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


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
        "import pathlib, runner.claims.gpu\n"
        f"assert runner.claims.gpu.discover(pathlib.Path({str(REPO)!r})), 'no GPU check found'\n"
        "import transformers, megatron.bridge\n"
        "assert transformers.__version__ == '5.12.1', transformers.__version__\n"
        "print('IMPORTS OK')\n"
    )
    done = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True, timeout=600)
    assert "IMPORTS OK" in done.stdout, done.stderr[-3000:]
