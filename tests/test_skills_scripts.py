"""The skills' reference scripts: importable without megatron, runnable with --help, and the
FSDP preflight's field rules on plain objects (the runs against megatron are the claim checks')."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import REPO

SCRIPTS = sorted(REPO.glob("skills/*/scripts/*.py"))


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_help_runs_without_megatron(script: Path):
    result = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout
    code = f"import importlib.util,sys; s=importlib.util.spec_from_file_location('m', {str(script)!r}); m=importlib.util.module_from_spec(s); sys.modules['m']=m; s.loader.exec_module(m); print(sorted(k for k in sys.modules if k.startswith(('torch','megatron'))))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "[]"


def fsdp_cfg(**overrides):
    cfg = SimpleNamespace(
        ddp=SimpleNamespace(use_megatron_fsdp=True, data_parallel_sharding_strategy="optim_grads_params"),
        dist=SimpleNamespace(use_megatron_fsdp=False, use_torch_fsdp2=False, use_tp_pp_dp_mapping=False),
        checkpoint=SimpleNamespace(save="/ckpt", load=None, ckpt_format="fsdp_dtensor"),
        train=SimpleNamespace(check_weight_hash_across_dp_replicas_interval=None),
        env_vars={},
    )
    for dotted, value in overrides.items():
        section, field = dotted.split("__")
        if section == "env_vars":
            cfg.env_vars[field] = value
        else:
            setattr(getattr(cfg, section), field, value)
    return cfg


def test_preflight_clean_config_has_no_problem():
    preflight = load(REPO / "skills/nemo-mbridge-perf-megatron-fsdp/scripts/fsdp_preflight.py")
    assert preflight.preflight(fsdp_cfg(), environ={}) == []


@pytest.mark.parametrize(
    ("overrides", "environ", "field"),
    [
        ({"checkpoint__ckpt_format": "torch_dist"}, {}, "checkpoint.ckpt_format"),
        ({"dist__use_torch_fsdp2": True}, {}, "dist.use_torch_fsdp2"),
        ({"dist__use_tp_pp_dp_mapping": True}, {}, "dist.use_tp_pp_dp_mapping"),
        ({}, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, "CUDA_DEVICE_MAX_CONNECTIONS"),
        ({"env_vars__CUDA_DEVICE_MAX_CONNECTIONS": 1}, {}, "CUDA_DEVICE_MAX_CONNECTIONS"),
        ({"train__check_weight_hash_across_dp_replicas_interval": 10}, {}, "train.check_weight_hash_across_dp_replicas_interval"),
        ({"ddp__data_parallel_sharding_strategy": "zero3"}, {}, "ddp.data_parallel_sharding_strategy"),
        ({"ddp__use_megatron_fsdp": False}, {}, "ddp.use_megatron_fsdp"),
    ],
)
def test_preflight_reports_each_pitfall(overrides, environ, field):
    preflight = load(REPO / "skills/nemo-mbridge-perf-megatron-fsdp/scripts/fsdp_preflight.py")
    problems = preflight.preflight(fsdp_cfg(**overrides), environ=environ)
    assert [p.field for p in problems] == [field]


def test_preflight_shell_value_wins_over_env_vars():
    preflight = load(REPO / "skills/nemo-mbridge-perf-megatron-fsdp/scripts/fsdp_preflight.py")
    cfg = fsdp_cfg(env_vars__CUDA_DEVICE_MAX_CONNECTIONS=1)
    assert preflight.preflight(cfg, environ={"CUDA_DEVICE_MAX_CONNECTIONS": "8"}) == []


def test_preflight_checkpoint_format_ignored_without_save_or_load():
    preflight = load(REPO / "skills/nemo-mbridge-perf-megatron-fsdp/scripts/fsdp_preflight.py")
    assert preflight.preflight(fsdp_cfg(checkpoint__save=None, checkpoint__ckpt_format="torch_dist"), environ={}) == []


def test_preflight_bad_config_spec_exits_2():
    script = REPO / "skills/nemo-mbridge-perf-megatron-fsdp/scripts/fsdp_preflight.py"
    result = subprocess.run([sys.executable, str(script), "--config", "no_such_module_xyz:cfg"], capture_output=True, text=True)
    assert result.returncode == 2 and "cannot load no_such_module_xyz:cfg" in result.stderr


def test_overlap_report_rejects_bad_sizes():
    script = REPO / "skills/nemo-mbridge-perf-tp-dp-comm-overlap/scripts/overlap_report.py"
    result = subprocess.run([sys.executable, str(script), "--tp", "0", "--world-size", "8"], capture_output=True, text=True)
    assert result.returncode == 2 and "sizes must be positive" in result.stderr
