"""The GPU tier: a tiny GPT trained by Megatron-Bridge's real `pretrain()`, configured by
each skill's own enablement block. The engine's half; each skill's GPU checks live in its
`checks/` folder and register with `gpu_check` (runner/claims/plugins.py finds them).

- Building (`smoke_base`): a 2-layer GPT (hidden 128) on Megatron's mock data with the
  NullTokenizer, before any skill's block. A skill's check executes its enablement block on
  it the way a user pasting it would. Works on any machine: the CPU side of each GPU-tier
  claim builds the same configs and runs Bridge's validation on them, so CI exercises them
  without a GPU.
- Training (`run_check`): inside `torchrun` on GPUs, called by gpu/smoke.py, which the
  launcher gpu/validate.sh starts once per check. It returns one result entry for the
  results file (runner/core/schemas/gpu-results.schema.json). The helpers a check trains
  with (`pretrain`, `recorder`, `check_losses`, `fingerprint`, `ddp_of`) are here.

The module imports only the standard library (and runner.core, which is stdlib at import)
at load time: gpu/launch.py reads the registered checks before anything is installed.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..core import MbskillsError
from .status import FAILED, PASSED


@dataclass(frozen=True)
class GpuCheck:
    name: str  # what `gpu/smoke.py --check` and `gpu/validate.sh --only` call it
    skill: str
    claim: str
    min_gpus: int
    needs_te: bool
    run: Callable[[Any, int, Path], dict[str, Any]]  # (claim context, world size, scratch folder) -> {"losses", "details"}
    divisible_by: int = 1  # the GPU count must be a multiple of this (a tensor-parallel size)
    env: tuple[tuple[str, str], ...] = ()  # environment variables torchrun starts the check with


GPU_CHECKS: dict[str, GpuCheck] = {}


def gpu_check(name: str, claim: str, *, min_gpus: int = 1, needs_te: bool = False, divisible_by: int = 1, env: dict[str, str] | None = None) -> Callable:
    """Register a GPU check of the calling skill: the decorated function trains and returns
    {"losses": [...], "details": {...}}, or raises AssertionError (`expect`) saying what failed."""
    import inspect

    from .plugins import skill_of_module

    caller = inspect.currentframe().f_back.f_globals.get("__name__", "")

    def register(func: Callable) -> Callable:
        skill = skill_of_module(caller)
        if skill is None:
            raise RuntimeError(f"gpu_check({name!r}) in {caller}: GPU checks register from a skill's checks/ folder (runner/claims/plugins.py)")
        if name in GPU_CHECKS:
            raise RuntimeError(f"two GPU checks are called {name!r} ({GPU_CHECKS[name].skill}, {skill})")
        GPU_CHECKS[name] = GpuCheck(name, skill, claim, min_gpus, needs_te, func, divisible_by, tuple(sorted((env or {}).items())))
        return func

    return register


def discover(bundle_root: Path) -> dict[str, GpuCheck]:
    """Load every skill's checks in the bundle; the GPU checks they registered, by name."""
    from .plugins import load_checks_of, skill_roots

    load_checks_of(skill_roots(bundle_root))
    return dict(GPU_CHECKS)


# The model and the run: small enough that each check, imports included, takes about a
# minute on one GPU.
NUM_LAYERS, HIDDEN, FFN_HIDDEN, HEADS = 2, 128, 512, 4
SEQ_LENGTH, VOCAB, MICRO_BATCH = 128, 1024, 4
LR = 3e-3
LOSS_KEY = "lm loss"


def te_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("transformer_engine") is not None


# --- building the configs (any machine) ------------------------------------------------


def smoke_base(world_size: int, *, train_iters: int, tp: int = 1, te: bool | None = None) -> Any:
    """The tiny GPT before any skill's block: mock data, NullTokenizer, fp32, no fused kernels
    (each would need Apex, TE or a torch.compile warm-up; none is what a check is about)."""
    from megatron.bridge.models import GPTModelProvider
    from megatron.bridge.models.gpt_provider import default_layer_spec, local_layer_spec
    from megatron.bridge.training.config import (
        CheckpointConfig,
        ConfigContainer,
        DistributedDataParallelConfig,
        LoggerConfig,
        MockGPTDatasetConfig,
        OptimizerConfig,
        RNGConfig,
        SchedulerConfig,
        TokenizerConfig,
        TrainingConfig,
        ValidationConfig,
    )

    if te is None:
        te = te_available()
    data_parallel = max(1, world_size // tp)
    return ConfigContainer(
        model=GPTModelProvider(
            num_layers=NUM_LAYERS,
            hidden_size=HIDDEN,
            ffn_hidden_size=FFN_HIDDEN,
            num_attention_heads=HEADS,
            seq_length=SEQ_LENGTH,
            vocab_size=None,  # from the tokenizer, padded
            tensor_model_parallel_size=tp,
            sequence_parallel=tp > 1,
            pipeline_model_parallel_size=1,
            hidden_dropout=0.0,
            attention_dropout=0.0,
            apply_rope_fusion=False,
            bias_activation_fusion=False,
            bias_dropout_fusion=False,
            masked_softmax_fusion=False,
            cross_entropy_loss_fusion=False,
            gradient_accumulation_fusion=False,
            transformer_layer_spec=default_layer_spec if te else local_layer_spec,
        ),
        train=TrainingConfig(train_iters=train_iters, global_batch_size=MICRO_BATCH * data_parallel, micro_batch_size=MICRO_BATCH),
        validation=ValidationConfig(eval_interval=None, eval_iters=0),
        optimizer=OptimizerConfig(optimizer="adam", lr=LR, min_lr=LR, weight_decay=0.0, clip_grad=1.0, bf16=False, fp16=False, use_distributed_optimizer=False),
        scheduler=SchedulerConfig(lr_decay_style="constant", lr_warmup_iters=0),
        dataset=MockGPTDatasetConfig(
            seq_length=SEQ_LENGTH,
            random_seed=1234,
            reset_attention_mask=False,
            reset_position_ids=False,
            eod_mask_loss=False,
            num_dataset_builder_threads=1,
            dataloader_type="single",
            num_workers=0,
        ),
        logger=LoggerConfig(log_interval=1),
        tokenizer=TokenizerConfig(tokenizer_type="NullTokenizer", vocab_size=VOCAB),
        checkpoint=CheckpointConfig(async_save=False),
        ddp=DistributedDataParallelConfig(),
        rng=RNGConfig(seed=1234),
    )


# --- training (inside torchrun, on GPUs) -------------------------------------------------


class CheckFailed(MbskillsError, AssertionError):
    pass


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def qualname(obj: Any) -> str:
    kind = type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"


def fingerprint(model: list[Any]) -> tuple[float, float]:
    """Sum and sum of squares of every parameter, each gathered in full (a collective: every
    rank calls it at the same point). Megatron FSDP's sharded DTensors are gathered with its
    own uneven-shard helper, so the value does not depend on how the weights are sharded."""
    from torch.distributed.tensor import DTensor

    try:
        from megatron.core.distributed.fsdp.src.megatron_fsdp.uneven_dtensor import uneven_dtensor_to_full_tensor
    except ImportError:  # pragma: no cover - other megatron-core layouts
        uneven_dtensor_to_full_tensor = None
    total = squares = 0.0
    for chunk in model:
        settle = getattr(getattr(chunk, "module", None), "_replace_param_with_distributed_if_needed", None)
        if callable(settle):  # Megatron FSDP: module parameters are its sharded DTensors again
            settle()
        for _, param in sorted(chunk.named_parameters(), key=lambda item: item[0]):
            if isinstance(param, DTensor):
                full = uneven_dtensor_to_full_tensor(param) if uneven_dtensor_to_full_tensor else param.full_tensor()
            else:
                full = param
            values = full.detach().double()
            total += float(values.sum())
            squares += float((values * values).sum())
    return total, squares


def close(a: tuple[float, float], b: tuple[float, float], rtol: float) -> bool:
    return all(abs(x - y) <= rtol * max(1.0, abs(x), abs(y)) for x, y in zip(a, b))


def recorder(fingerprint_at: tuple[int, ...] = (), fingerprint_start: bool = False):
    """A Bridge callback that keeps the loss of every iteration and what training really used;
    optionally the weights' fingerprint before the first step and after given iterations."""
    from megatron.bridge.training.callbacks import Callback

    class Recorder(Callback):
        def __init__(self) -> None:
            self.losses: dict[int, float | None] = {}
            self.start_step: int | None = None
            self.model: list[Any] = []
            self.optimizer: Any = None
            self.cfg: Any = None
            self.fingerprints: dict[int, tuple[float, float]] = {}

        def on_train_start(self, context) -> None:
            self.start_step = int(context.state.train_state.step)
            self.model = list(context.model)
            self.optimizer = context.optimizer
            self.cfg = context.state.cfg
            if fingerprint_start:
                self.fingerprints[self.start_step] = fingerprint(self.model)

        def on_train_step_end(self, context) -> None:
            iteration = int(context.state.train_state.step) + 1  # Bridge counts the step after this callback
            value = (context.loss_dict or {}).get(LOSS_KEY)
            loss = None if value is None else float(value)
            self.losses[iteration] = loss if loss is not None and math.isfinite(loss) else None
            if iteration in fingerprint_at:
                self.fingerprints[iteration] = fingerprint(self.model)

        def ordered(self) -> list[float | None]:
            return [self.losses[k] for k in sorted(self.losses)]

    return Recorder()


def pretrain(cfg: Any, watch: Any = None) -> Any:
    """Bridge's pretrain() on `cfg` with a `recorder()` (or `watch`); returns the recorder."""
    from megatron.bridge.training.gpt_step import forward_step
    from megatron.bridge.training.pretrain import pretrain as bridge_pretrain

    watch = watch or recorder()
    bridge_pretrain(cfg, forward_step, callbacks=[watch])
    expect(watch.start_step is not None, "training never started (on_train_start did not fire)")
    return watch


def check_losses(watch: Any, iterations: int, what: str) -> list[float | None]:
    losses = watch.ordered()
    expect(len(losses) == iterations, f"{what}: {len(losses)} iterations logged a loss, expected {iterations}")
    expect(finite(losses[-1]), f"{what}: the loss at the last iteration is not finite ({losses[-1]})")
    return losses


def ddp_of(model: list[Any]) -> dict[str, Any]:
    ddp = getattr(model[0], "ddp_config", None)
    if ddp is None:
        return {}
    return {k: getattr(ddp, k, None) for k in ("use_distributed_optimizer", "overlap_grad_reduce", "overlap_param_gather", "bucket_size", "use_megatron_fsdp", "data_parallel_sharding_strategy")}


def skill_context(bundle_root: Path, skill: str, claim_id: str) -> Any:
    from .registry import ClaimFailed, Context
    from .sections import read_skill_sections

    root = bundle_root / "skills" / skill
    sections = read_skill_sections(root)
    if claim_id not in sections:
        raise ClaimFailed(f"skills/{skill}/SKILL.md has no marker for claim {claim_id}")
    return Context(skill, root, sections[claim_id], sections)


def run_check(name: str, bundle_root: Path, workdir: Path, world_size: int) -> dict[str, Any]:
    """Train one check; a result entry (status passed or failed; a crash propagates)."""
    check = discover(bundle_root)[name]
    start = time.perf_counter()
    entry: dict[str, Any] = {"skill": check.skill, "claim": check.claim, "check": name, "status": PASSED, "reason": "", "losses": [], "seconds": 0.0}
    ctx = skill_context(bundle_root, check.skill, check.claim)
    try:
        measured = check.run(ctx, world_size, workdir)
        entry["losses"], entry["details"] = measured["losses"], measured["details"]
    except AssertionError as failure:  # CheckFailed, or ClaimFailed from the skill's own block
        entry["status"], entry["reason"] = FAILED, str(failure) or "assertion failed"
    entry["seconds"] = round(time.perf_counter() - start, 3)
    return entry
