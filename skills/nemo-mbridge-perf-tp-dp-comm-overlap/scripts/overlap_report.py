#!/usr/bin/env python3
"""Show which TP/DP/PP communication-overlap settings Megatron-Bridge 0.6.2 resolves for a layout.

Builds a small GPT config with the requested parallel layout (or loads yours with
--config), attaches CommOverlapConfig(tp_comm_overlap=...), runs Bridge's own
runtime_config_update() with WORLD_SIZE set (no GPU and no process group needed), and
prints the resolved model, DDP and optimizer overlap fields plus any warning Bridge
logged, such as "Disabling tensor parallel communication overlap due to ...".

Usage:
  python overlap_report.py --tp 4 --sp --pp 4 --vpp 2 --world-size 64
  python overlap_report.py --config my_pkg.recipes:my_config --world-size 64 --json
Exit status: 0 resolved, 1 Bridge rejected the config, 2 bad arguments or config.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import json
import logging
import os
import sys
from typing import Any

MODEL_FIELDS = ("tensor_model_parallel_size", "sequence_parallel", "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size", "tp_comm_overlap", "overlap_p2p_comm", "batch_p2p_comm")
DDP_FIELDS = ("use_distributed_optimizer", "overlap_grad_reduce", "overlap_param_gather", "align_param_gather", "bucket_size", "grad_reduce_in_fp32")
OPTIMIZER_FIELDS = ("use_distributed_optimizer", "overlap_param_gather_with_optimizer_step")


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


def build_config(tp: int, sp: bool, pp: int, vpp: int | None, distributed_optimizer: bool, tp_overlap: bool) -> Any:
    """A tiny GPT ConfigContainer (mock data, NullTokenizer) with the given layout."""
    from megatron.bridge.models import GPTModelProvider
    from megatron.bridge.training.comm_overlap import CommOverlapConfig
    from megatron.bridge.training.config import (
        CheckpointConfig,
        ConfigContainer,
        LoggerConfig,
        MockGPTDatasetConfig,
        OptimizerConfig,
        SchedulerConfig,
        TokenizerConfig,
        TrainingConfig,
    )
    from megatron.core.distributed import DistributedDataParallelConfig

    stages = pp * (vpp or 1)
    seq_length = 64
    model = GPTModelProvider(
        num_layers=max(2, stages),  # each virtual stage needs at least one layer
        hidden_size=64,
        num_attention_heads=max(4, tp),
        seq_length=seq_length,
        vocab_size=256,
        tensor_model_parallel_size=tp,
        sequence_parallel=sp,
        pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vpp,
        apply_rope_fusion=False,
    )
    return ConfigContainer(
        model=model,
        train=TrainingConfig(global_batch_size=128, micro_batch_size=1, train_iters=10),
        optimizer=OptimizerConfig(optimizer="adam", lr=1e-4, use_distributed_optimizer=distributed_optimizer),
        scheduler=SchedulerConfig(lr_decay_style="constant", lr_warmup_iters=0),
        dataset=MockGPTDatasetConfig(seq_length=seq_length, random_seed=1234, reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False),
        logger=LoggerConfig(),
        tokenizer=TokenizerConfig(tokenizer_type="NullTokenizer", vocab_size=256),
        checkpoint=CheckpointConfig(),
        ddp=DistributedDataParallelConfig(use_distributed_optimizer=distributed_optimizer),
        comm_overlap=CommOverlapConfig(tp_comm_overlap=tp_overlap),
    )


def load_config(spec: str) -> Any:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--config must look like 'package.module:function', got {spec!r}")
    target = getattr(importlib.import_module(module_name), attr)
    return target() if callable(target) else target


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def resolve(cfg: Any, world_size: int) -> dict:
    """Run runtime_config_update on a copy of cfg and report the overlap-related result."""
    from megatron.bridge.training import comm_overlap
    from megatron.bridge.training.config import runtime_config_update

    cfg = copy.deepcopy(cfg)
    os.environ["WORLD_SIZE"] = str(world_size)
    collector = _Collect()
    logging.getLogger().addHandler(collector)
    error = None
    try:
        runtime_config_update(cfg)
    except (AssertionError, ValueError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    finally:
        logging.getLogger().removeHandler(collector)
    return {
        "world_size": world_size,
        "data_parallel_size": getattr(cfg, "data_parallel_size", None),
        "transformer_engine": comm_overlap.HAVE_TE,
        "model": {name: getattr(cfg.model, name, None) for name in MODEL_FIELDS},
        "ddp": {name: getattr(cfg.ddp, name, None) for name in DDP_FIELDS},
        "optimizer": {name: getattr(cfg.optimizer, name, None) for name in OPTIMIZER_FIELDS},
        "warnings": [m for m in collector.messages if "overlap" in m.lower()],
        "error": error,
    }


def format_report(report: dict) -> str:
    lines = [f"world size {report['world_size']}, data-parallel size {report['data_parallel_size']}, Transformer Engine {'found' if report['transformer_engine'] else 'absent'}"]
    for section in ("model", "ddp", "optimizer"):
        for name, value in report[section].items():
            lines.append(f"  {section}.{name} = {value}")
    lines += [f"warning: {message}" for message in report["warnings"]]
    lines.append(f"bridge validation: {report['error'] or 'passed'}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--config", help="MODULE:CALLABLE returning a ConfigContainer (instead of the layout flags)")
    parser.add_argument("--tp", type=int, default=1, help="tensor_model_parallel_size")
    parser.add_argument("--sp", action="store_true", help="sequence_parallel=True")
    parser.add_argument("--pp", type=int, default=1, help="pipeline_model_parallel_size")
    parser.add_argument("--vpp", type=int, default=None, help="virtual_pipeline_model_parallel_size")
    parser.add_argument("--no-distributed-optimizer", action="store_true", help="leave the distributed optimizer off")
    parser.add_argument("--no-tp-overlap", action="store_true", help="CommOverlapConfig(tp_comm_overlap=False)")
    parser.add_argument("--world-size", type=int, required=True, help="number of ranks to resolve for")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if min(args.tp, args.pp, args.world_size) < 1 or (args.vpp is not None and args.vpp < 1):
        parser.error("sizes must be positive integers")
    if allow_import_without_te():
        print("note: Transformer Engine is not installed; TP overlap will resolve as disabled", file=sys.stderr)
    try:
        if args.config:
            cfg = load_config(args.config)
        else:
            cfg = build_config(args.tp, args.sp, args.pp, args.vpp, not args.no_distributed_optimizer, not args.no_tp_overlap)
    except Exception as error:  # report a bad layout or module in one line
        print(f"overlap_report: cannot build the config: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    report = resolve(cfg, args.world_size)
    print(json.dumps(report, indent=2, default=str) if args.json else format_report(report))
    return 1 if report["error"] else 0


if __name__ == "__main__":
    sys.exit(main())
