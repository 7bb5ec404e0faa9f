#!/usr/bin/env python3
"""Megatron FSDP preflight for a Megatron-Bridge 0.6.2 ConfigContainer, before any GPU time.

Two layers:
  1. `preflight(cfg, environ)` reads only config fields and reports the pitfalls that
     Bridge's validation would raise for Megatron FSDP (no torch needed to run it).
  2. `--validate` runs Bridge's own `runtime_config_update()` on a copy of the config
     with WORLD_SIZE set, which is how validation is reached in a real launch.

Usage:
  python fsdp_preflight.py --config my_pkg.recipes:my_config --world-size 8 [--validate]
The callable after the colon must return a ConfigContainer (a recipe function works).
Exit status: 0 no problem, 1 problems found, 2 the config could not be loaded.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import os
import sys
from dataclasses import dataclass
from typing import Any, Mapping

SHARDING_STRATEGIES = ("no_shard", "optim", "optim_grads", "optim_grads_params")


# Megatron-Bridge 0.6.2 imports Transformer Engine unconditionally in exactly these two
# modules, which the training config pulls in. Without TE (any CPU box) they are replaced
# by placeholders whose every use raises, so the config layer imports and megatron-core
# still sees TE as absent. Nothing else is touched: other import errors surface as usual.
_TE_ONLY_MODULES = frozenset({"megatron.bridge.peft.lora_layers", "megatron.bridge.models.gpt_full_te_layer_autocast_spec"})


def allow_import_without_te() -> bool:
    """Install the placeholders if Transformer Engine is absent; True when installed."""
    import importlib.abc
    import importlib.machinery
    import importlib.util
    import types

    if importlib.util.find_spec("transformer_engine") is not None:
        return False

    class _NeedsTE:
        def __init__(self, name: str) -> None:
            self._name = name

        def _fail(self, *args: Any, **kwargs: Any) -> Any:
            raise ImportError(f"{self._name} needs Transformer Engine, which is not installed")

        __call__ = _fail

        def __getattr__(self, item: str) -> Any:
            self._fail()

        def __mro_entries__(self, bases: tuple) -> tuple:
            self._fail()

    class _Placeholders(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path=None, target=None):
            return importlib.machinery.ModuleSpec(name, self) if name in _TE_ONLY_MODULES else None

        def create_module(self, spec):
            module = types.ModuleType(spec.name, "placeholder: needs Transformer Engine")
            module.__getattr__ = lambda attr, _n=spec.name: _NeedsTE(f"{_n}.{attr}")
            return module

        def exec_module(self, module) -> None:
            pass

    sys.meta_path.insert(0, _Placeholders())
    return True


@dataclass(frozen=True)
class Problem:
    field: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}. Fix: {self.fix}"


def _get(obj: Any, dotted: str, default: Any = None) -> Any:
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return default
    return obj


def fsdp_enabled(cfg: Any) -> bool:
    return bool(_get(cfg, "ddp.use_megatron_fsdp") or _get(cfg, "dist.use_megatron_fsdp"))


def preflight(cfg: Any, environ: Mapping[str, str] | None = None) -> list[Problem]:
    """Problems Bridge 0.6.2 would raise (or hide) for Megatron FSDP on this config."""
    environ = os.environ if environ is None else environ
    if not fsdp_enabled(cfg):
        return [Problem("ddp.use_megatron_fsdp", "Megatron FSDP is not enabled", "set cfg.ddp.use_megatron_fsdp = True")]
    problems = []
    strategy = _get(cfg, "ddp.data_parallel_sharding_strategy")
    if strategy not in SHARDING_STRATEGIES:
        problems.append(Problem("ddp.data_parallel_sharding_strategy", f"{strategy!r} is not one of {', '.join(SHARDING_STRATEGIES)}", 'use "optim_grads_params"'))
    elif strategy == "no_shard":
        problems.append(Problem("ddp.data_parallel_sharding_strategy", "'no_shard' shards nothing", 'use "optim_grads_params" to shard optimizer state, gradients and parameters'))
    saving = _get(cfg, "checkpoint.save") is not None or _get(cfg, "checkpoint.load") is not None
    if saving and _get(cfg, "checkpoint.ckpt_format") != "fsdp_dtensor":
        problems.append(Problem("checkpoint.ckpt_format", f"{_get(cfg, 'checkpoint.ckpt_format')!r} with save/load set fails validation ('Megatron-FSDP requires the fsdp_dtensor checkpointing format!')", 'cfg.checkpoint.ckpt_format = "fsdp_dtensor"'))
    if _get(cfg, "dist.use_torch_fsdp2"):
        problems.append(Problem("dist.use_torch_fsdp2", "PyTorch FSDP2 and Megatron FSDP are mutually exclusive; 0.6.2 validation may let the pair through and the model wrap then fails", "set cfg.dist.use_torch_fsdp2 = False"))
    if _get(cfg, "dist.use_tp_pp_dp_mapping"):
        problems.append(Problem("dist.use_tp_pp_dp_mapping", "not supported with Megatron FSDP", "set cfg.dist.use_tp_pp_dp_mapping = False"))
    connections = environ.get("CUDA_DEVICE_MAX_CONNECTIONS")
    if connections is None:
        connections = (_get(cfg, "env_vars") or {}).get("CUDA_DEVICE_MAX_CONNECTIONS")
    if connections is not None and str(connections) == "1":
        problems.append(Problem("CUDA_DEVICE_MAX_CONNECTIONS", "=1 fails validation ('FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset.')", "unset it or set it above 1 (shell and cfg.env_vars)"))
    if strategy == "optim_grads_params" and _get(cfg, "train.check_weight_hash_across_dp_replicas_interval") is not None:
        problems.append(Problem("train.check_weight_hash_across_dp_replicas_interval", "not supported with optim_grads_params", "set it to None"))
    return problems


def load_config(spec: str) -> Any:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--config must look like 'package.module:function', got {spec!r}")
    target = getattr(importlib.import_module(module_name), attr)
    return target() if callable(target) else target


def run_bridge_validation(cfg: Any, world_size: int) -> str | None:
    """Run Bridge's runtime_config_update on a copy; the error text, or None when it passes."""
    from megatron.bridge.training.config import runtime_config_update  # heavy: only here

    os.environ["WORLD_SIZE"] = str(world_size)
    try:
        runtime_config_update(copy.deepcopy(cfg))
    except (AssertionError, ValueError) as error:
        return f"{type(error).__name__}: {error}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--config", required=True, help="MODULE:CALLABLE returning a megatron.bridge ConfigContainer")
    parser.add_argument("--world-size", type=int, default=8, help="world size to validate for (default 8)")
    parser.add_argument("--validate", action="store_true", help="also run Bridge's runtime_config_update() on a copy")
    args = parser.parse_args(argv)
    allow_import_without_te()  # a recipe module imports Bridge's config layer
    try:
        cfg = load_config(args.config)
    except Exception as error:  # a user's module: report, don't trace
        print(f"fsdp_preflight: cannot load {args.config}: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    problems = preflight(cfg)
    for problem in problems:
        print(f"problem: {problem}")
    status = 1 if problems else 0
    if args.validate:
        error = run_bridge_validation(cfg, args.world_size)
        print(f"bridge validation: {'passed' if error is None else error}")
        status = 1 if error else status
    if not problems:
        print("preflight: no Megatron FSDP problem found in the config fields")
    return status


if __name__ == "__main__":
    sys.exit(main())
