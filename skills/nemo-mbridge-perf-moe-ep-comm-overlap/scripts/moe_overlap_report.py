#!/usr/bin/env python3
"""What Megatron-Bridge 0.6.2 resolves for a MoE expert-parallel overlap layout, on a CPU.

Builds a small GPT (2 layers, hidden 64, mock data) with the MoE layout given, sets
cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=False,
overlap_moe_expert_parallel_comm=..., delay_wgrad_compute=...) and runs Bridge's own
runtime_config_update() with WORLD_SIZE set, as a launch does. Prints the resolved overlap
fields, or the exception (with its message) that stops the layout.

Usage:
  python moe_overlap_report.py --experts 8 --topk 2 --ep 4 --world-size 8
      [--tp N] [--pp N] [--vpp N] [--dispatcher alltoall|flex|allgather]
      [--precision bf16|fp16|fp32] [--delay-wgrad] [--no-overlap]
      [--recompute full|selective] [--mtp-layers N] [--shared-expert-overlap]
Exit status: 0 the overlap is on, 1 it is off or the layout is refused, 2 bad arguments.
The flex dispatcher's validation queries the GPU, so without one a flex layout is refused.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from typing import Any

FLAG, DELAY = "overlap_moe_expert_parallel_comm", "delay_wgrad_compute"
# Bridge 0.6.2 imports Transformer Engine at the top of these two modules, which its
# training config imports; on a machine without TE they become stand-ins that fail on use.
_TE_ONLY_MODULES = frozenset({"megatron.bridge.peft.lora_layers", "megatron.bridge.models.gpt_full_te_layer_autocast_spec"})


class _Missing:
    """Any name of a TE-only module: fails when used, not when imported."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise ImportError(f"{self.name} needs Transformer Engine")

    def __getattr__(self, attribute: str) -> Any:
        raise ImportError(f"{self.name}.{attribute} needs Transformer Engine")

    def __mro_entries__(self, bases: tuple) -> tuple:
        raise ImportError(f"{self.name} needs Transformer Engine")


class _StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name: str, path: Any = None, target: Any = None):
        return importlib.machinery.ModuleSpec(name, self) if name in _TE_ONLY_MODULES else None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__getattr__ = lambda attribute, _m=spec.name: _Missing(f"{_m}.{attribute}")
        return module

    def exec_module(self, module) -> None:
        return None


def _without_te() -> None:
    if importlib.util.find_spec("transformer_engine") is None and not any(isinstance(f, _StandIns) for f in sys.meta_path):
        sys.meta_path.insert(0, _StandIns())


def build(args: argparse.Namespace) -> Any:
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

    seq_length, vocab = 64, 256
    model = GPTModelProvider(
        num_layers=max(2, args.pp * (args.vpp or 1)),
        hidden_size=64,
        num_attention_heads=max(4, args.tp),
        seq_length=seq_length,
        vocab_size=vocab,
        tensor_model_parallel_size=args.tp,
        sequence_parallel=args.tp > 1,
        pipeline_model_parallel_size=args.pp,
        virtual_pipeline_model_parallel_size=args.vpp,
        apply_rope_fusion=False,
        num_moe_experts=args.experts,
        moe_router_topk=args.topk,
        expert_model_parallel_size=args.ep,
        moe_token_dispatcher_type=args.dispatcher,
    )
    if args.recompute:
        model.recompute_granularity = args.recompute
    if args.mtp_layers:
        model.mtp_num_layers = args.mtp_layers
    if args.shared_expert_overlap:
        model.moe_shared_expert_intermediate_size = 64
        model.moe_shared_expert_overlap = True
    return ConfigContainer(
        model=model,
        train=TrainingConfig(global_batch_size=128, micro_batch_size=1, train_iters=10),
        optimizer=OptimizerConfig(optimizer="adam", lr=1e-4, use_distributed_optimizer=True),
        scheduler=SchedulerConfig(lr_decay_style="constant", lr_warmup_iters=0),
        dataset=MockGPTDatasetConfig(seq_length=seq_length, random_seed=1234, reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False),
        logger=LoggerConfig(),
        tokenizer=TokenizerConfig(tokenizer_type="NullTokenizer", vocab_size=vocab),
        checkpoint=CheckpointConfig(),
        ddp=DistributedDataParallelConfig(use_distributed_optimizer=True),
        mixed_precision=None if args.precision == "fp32" else f"{args.precision}_mixed",
        comm_overlap=CommOverlapConfig(tp_comm_overlap=False, **{FLAG: not args.no_overlap, DELAY: args.delay_wgrad}),
    )


def resolve(cfg: Any, world_size: int) -> None:
    from megatron.bridge.training.config import runtime_config_update

    before = os.environ.get("WORLD_SIZE")
    os.environ["WORLD_SIZE"] = str(world_size)
    try:
        runtime_config_update(cfg)
    finally:
        if before is None:
            os.environ.pop("WORLD_SIZE", None)
        else:
            os.environ["WORLD_SIZE"] = before


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="moe_overlap_report.py", description=__doc__.splitlines()[0])

    def positive(text: str) -> int:
        if not text.isdigit() or int(text) < 1:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
        return int(text)

    p.add_argument("--experts", type=positive, required=True, help="num_moe_experts")
    p.add_argument("--topk", type=positive, default=2, help="moe_router_topk")
    p.add_argument("--ep", type=positive, required=True, help="expert_model_parallel_size")
    p.add_argument("--world-size", type=positive, required=True, help="GPUs of the launch (WORLD_SIZE)")
    p.add_argument("--tp", type=positive, default=1)
    p.add_argument("--pp", type=positive, default=1)
    p.add_argument("--vpp", type=positive, default=None)
    p.add_argument("--dispatcher", choices=("alltoall", "flex", "allgather"), default="alltoall")
    p.add_argument("--precision", choices=("bf16", "fp16", "fp32"), default="bf16")
    p.add_argument("--recompute", choices=("full", "selective"))
    p.add_argument("--mtp-layers", type=positive)
    p.add_argument("--shared-expert-overlap", action="store_true")
    p.add_argument("--delay-wgrad", action="store_true", help="also ask for delay_wgrad_compute")
    p.add_argument("--no-overlap", action="store_true", help="leave overlap_moe_expert_parallel_comm off")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    _without_te()
    cfg = build(args)
    try:
        resolve(cfg, args.world_size)
    except Exception as error:  # noqa: BLE001 - the refusal is the report
        print(f"refused: {type(error).__name__}: {' '.join(str(error).split())}")
        return 1
    model = cfg.model
    for name in (FLAG, DELAY, "moe_token_dispatcher_type", "expert_model_parallel_size"):
        print(f"{name} = {getattr(model, name)}")
    print(f"data_parallel_size = {cfg.data_parallel_size}")
    return 0 if getattr(model, FLAG) is True else 1


if __name__ == "__main__":
    sys.exit(main())
