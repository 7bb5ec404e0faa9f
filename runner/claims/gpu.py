"""The GPU tier: a tiny GPT trained by Megatron-Bridge's real `pretrain()`, configured by
each skill's own enablement block.

Two halves, both driven by what SKILL.md says:

- Building (`fsdp_configs`, `overlap_config`): a 2-layer GPT (hidden 128) on Megatron's
  mock data with the NullTokenizer, then the skill's enablement block executed on it the
  way a user pasting it would. Works on any machine: the CPU side of each GPU-tier claim
  (fsdp.py, overlap.py) builds these configs and runs Bridge's validation on them, so CI
  exercises them without a GPU.
- Training (`run_check`): inside `torchrun` on GPUs, called by gpu/smoke.py, which the
  launcher gpu/validate.sh starts once per check. It returns one result entry for the
  results file (runner/core/schemas/gpu-results.schema.json).

The module imports only the standard library (and runner.core, which is stdlib at import)
at load time: gpu/launch.py reads `CHECKS`
from it before anything is installed.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import MbskillsError
from .status import FAILED, PASSED

FSDP_SKILL = "nemo-mbridge-perf-megatron-fsdp"
OVERLAP_SKILL = "nemo-mbridge-perf-tp-dp-comm-overlap"
FSDP_ENABLE, OVERLAP_ENABLE = "fsdp-enable-override", "overlap-enable-override"


@dataclass(frozen=True)
class GpuCheck:
    name: str  # what `gpu/smoke.py --check` and `gpu/validate.sh --only` call it
    group: str  # --only fsdp|overlap
    skill: str
    claim: str
    min_gpus: int
    needs_te: bool


CHECKS = {
    c.name: c
    for c in (
        GpuCheck("fsdp", "fsdp", FSDP_SKILL, "fsdp-gpu-train-save-resume", 1, False),
        GpuCheck("overlap-dp", "overlap", OVERLAP_SKILL, "overlap-gpu-dp-overlap-trains", 1, False),
        GpuCheck("overlap-tp", "overlap", OVERLAP_SKILL, "overlap-gpu-tp-overlap", 2, True),
    )
}

# The model and the run: small enough that each check, imports included, takes about a
# minute on one GPU.
NUM_LAYERS, HIDDEN, FFN_HIDDEN, HEADS = 2, 128, 512, 4
SEQ_LENGTH, VOCAB, MICRO_BATCH = 128, 1024, 4
LR = 3e-3
FSDP_SAVE_AT, FSDP_ITERS = 4, 8  # train 8 saving at 4, then resume from 4 and train to 8 again
OVERLAP_ITERS = 6
LOSS_KEY = "lm loss"
# A resumed run must start from the saved weights: their fingerprint (sum and sum of squares
# of every parameter, gathered in full) equals the first run's at the save, and differs
# from the initial weights'; and its first loss matches the first run's loss at that
# iteration, the same batch on the same weights, within this much.
FINGERPRINT_RTOL = 1e-5
RESUME_LOSS_ATOL = 0.02

DISABLING_TP_OVERLAP = "Disabling tensor parallel communication overlap"


def te_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("transformer_engine") is not None


def tp_size_for(world_size: int) -> int | None:
    """The tensor-parallel size the TP-overlap check uses on `world_size` GPUs (None: none fits)."""
    for tp in (4, 2):
        if world_size >= tp and world_size % tp == 0:
            return tp
    return None


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


def fsdp_configs(ctx: Any, world_size: int, checkpoints: Path, *, te: bool | None = None) -> tuple[Any, Any]:
    """Two runs with the FSDP skill's enablement block: train to FSDP_ITERS saving every
    FSDP_SAVE_AT iterations, then load iteration FSDP_SAVE_AT and train to FSDP_ITERS again."""
    enable = ctx.sibling(FSDP_ENABLE)
    first = enable.apply(smoke_base(world_size, train_iters=FSDP_ITERS, te=te))
    first.checkpoint.save = str(checkpoints)
    first.checkpoint.save_interval = FSDP_SAVE_AT
    second = enable.apply(smoke_base(world_size, train_iters=FSDP_ITERS, te=te))
    second.checkpoint.load = str(checkpoints)
    second.checkpoint.ckpt_step = FSDP_SAVE_AT
    return first, second


def overlap_config(ctx: Any, world_size: int, *, tp: int = 1, te: bool | None = None, train_iters: int = OVERLAP_ITERS) -> Any:
    """The overlap skill's enablement block on the tiny GPT. The block's layout (TP=4, SP,
    PP=4, VPP=2) is for 64 GPUs; it is fitted to `world_size` (TP=`tp`, SP when TP > 1, no
    pipeline) and everything else the block sets is kept as it is."""
    cfg = ctx.sibling(OVERLAP_ENABLE).apply(smoke_base(world_size, train_iters=train_iters, tp=tp, te=te))
    cfg.model.tensor_model_parallel_size = tp
    cfg.model.sequence_parallel = tp > 1
    cfg.model.pipeline_model_parallel_size = 1
    cfg.model.virtual_pipeline_model_parallel_size = None
    return cfg


# --- training (inside torchrun, on GPUs) -------------------------------------------------


class CheckFailed(MbskillsError, AssertionError):
    pass


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _qualname(obj: Any) -> str:
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


def _close(a: tuple[float, float], b: tuple[float, float], rtol: float) -> bool:
    return all(abs(x - y) <= rtol * max(1.0, abs(x), abs(y)) for x, y in zip(a, b))


def _recorder(fingerprint_at: tuple[int, ...] = (), fingerprint_start: bool = False):
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


def _pretrain(cfg: Any, recorder: Any = None) -> Any:
    from megatron.bridge.training.gpt_step import forward_step
    from megatron.bridge.training.pretrain import pretrain

    recorder = recorder or _recorder()
    pretrain(cfg, forward_step, callbacks=[recorder])
    _expect(recorder.start_step is not None, "training never started (on_train_start did not fire)")
    return recorder


def _check_losses(recorder: Any, iterations: int, what: str) -> list[float | None]:
    losses = recorder.ordered()
    _expect(len(losses) == iterations, f"{what}: {len(losses)} iterations logged a loss, expected {iterations}")
    _expect(_finite(losses[-1]), f"{what}: the loss at the last iteration is not finite ({losses[-1]})")
    return losses


def _ddp_of(model: list[Any]) -> dict[str, Any]:
    ddp = getattr(model[0], "ddp_config", None)
    if ddp is None:
        return {}
    return {k: getattr(ddp, k, None) for k in ("use_distributed_optimizer", "overlap_grad_reduce", "overlap_param_gather", "bucket_size", "use_megatron_fsdp", "data_parallel_sharding_strategy")}


def check_fsdp(ctx: Any, world_size: int, workdir: Path) -> dict[str, Any]:
    import torch.distributed as dist
    from megatron.core.distributed.fsdp.mcore_fsdp_adapter import FullyShardedDataParallel

    checkpoints = workdir / "fsdp-checkpoints"
    first, second = fsdp_configs(ctx, world_size, checkpoints)
    trained = _pretrain(first, _recorder(fingerprint_at=(FSDP_SAVE_AT,), fingerprint_start=True))
    wrappers = [_qualname(m) for m in trained.model]
    _expect(all(isinstance(m, FullyShardedDataParallel) for m in trained.model), f"the model is wrapped by {wrappers}, not megatron.core.distributed.fsdp.mcore_fsdp_adapter.FullyShardedDataParallel")
    _expect(trained.cfg.checkpoint.ckpt_format == "fsdp_dtensor", f"training ran with ckpt_format {trained.cfg.checkpoint.ckpt_format!r}")
    before = _check_losses(trained, FSDP_ITERS, "first run")

    saved = checkpoints / f"iter_{FSDP_SAVE_AT:07d}"
    dist.barrier()
    _expect(saved.is_dir(), f"no checkpoint at {saved}")
    _expect((saved / ".metadata").is_file(), f"{saved} is not in fsdp_dtensor (PyTorch DCP) format: no .metadata file")
    from megatron.bridge.training.checkpointing import _get_checkpoint_format

    found_format = _get_checkpoint_format(str(saved))
    _expect(found_format == "fsdp_dtensor", f"Bridge reads the saved checkpoint as {found_format!r}, not fsdp_dtensor")

    resumed = _pretrain(second, _recorder(fingerprint_start=True))
    _expect(resumed.start_step == FSDP_SAVE_AT, f"the resumed run started at iteration {resumed.start_step}, not {FSDP_SAVE_AT}: the checkpoint was not loaded")
    _expect(all(isinstance(m, FullyShardedDataParallel) for m in resumed.model), "the resumed model is not wrapped by FullyShardedDataParallel")
    after = resumed.ordered()
    _expect(len(after) == FSDP_ITERS - FSDP_SAVE_AT, f"the resumed run logged {len(after)} iterations, expected {FSDP_ITERS - FSDP_SAVE_AT}")
    _expect(_finite(after[-1]), f"the resumed run's last loss is not finite ({after[-1]})")

    initial, at_save, loaded = trained.fingerprints[0], trained.fingerprints[FSDP_SAVE_AT], resumed.fingerprints[FSDP_SAVE_AT]
    stopped, again = before[FSDP_SAVE_AT], after[0]  # iteration SAVE_AT + 1 in each run: the same batch
    details = {
        "world_size": world_size,
        "wrapper": wrappers[0],
        "ckpt_format": found_format,
        "checkpoint": saved.name,
        "resumed_at_iteration": resumed.start_step,
        "first_run_losses": before,
        "resumed_losses": after,
        "weights_fingerprint": {"initial": initial, "saved": at_save, "loaded": loaded},
        "ddp": _ddp_of(trained.model),
    }
    _expect(not _close(initial, at_save, FINGERPRINT_RTOL), f"the weights did not change in {FSDP_SAVE_AT} iterations (fingerprint {initial})")
    _expect(_close(at_save, loaded, FINGERPRINT_RTOL), f"the resumed run's weights {loaded} are not the ones saved at iteration {FSDP_SAVE_AT} {at_save} (initial weights: {initial})")
    _expect(_finite(stopped) and _finite(again), f"non-finite loss at iteration {FSDP_SAVE_AT + 1}: {stopped} in the first run, {again} resumed")
    gap = abs(again - stopped)
    details["resume_loss_gap"] = gap
    _expect(gap <= RESUME_LOSS_ATOL, f"iteration {FSDP_SAVE_AT + 1} had loss {stopped:.4f} in the first run and {again:.4f} after resuming from iteration {FSDP_SAVE_AT}: off by {gap:.4f} (more than {RESUME_LOSS_ATOL})")
    return {"losses": before + after, "details": details}


def check_overlap_dp(ctx: Any, world_size: int, workdir: Path) -> dict[str, Any]:
    from megatron.core.distributed import DistributedDataParallel
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    cfg = overlap_config(ctx, world_size, tp=1)
    run = _pretrain(cfg)
    losses = _check_losses(run, OVERLAP_ITERS, "training")
    _expect(all(isinstance(m, DistributedDataParallel) for m in run.model), f"the model is wrapped by {[_qualname(m) for m in run.model]}, not Megatron's DistributedDataParallel")
    optimizers = list(getattr(run.optimizer, "chained_optimizers", None) or [run.optimizer])
    _expect(any(isinstance(o, DistributedOptimizer) for o in optimizers), f"the optimizer is {[_qualname(o) for o in optimizers]}, not the distributed optimizer")
    ddp = _ddp_of(run.model)
    data_parallel = int(run.cfg.data_parallel_size)
    details = {"world_size": world_size, "data_parallel_size": data_parallel, "ddp": ddp, "optimizer": [_qualname(o) for o in optimizers]}
    if data_parallel > 1:
        _expect(ddp.get("overlap_grad_reduce") is True and ddp.get("overlap_param_gather") is True, f"with data-parallel size {data_parallel} the wrapped model trained with {ddp}, not with grad-reduce and param-gather overlap")
    else:
        details["note"] = "data-parallel size 1: Bridge turns grad-reduce and param-gather overlap off (nothing to overlap); with 2 or more GPUs they train on"
        _expect(ddp.get("overlap_grad_reduce") is False, f"data-parallel size 1 trained with {ddp}; the skill says Bridge turns DP overlap off there")
    return {"losses": losses, "details": details}


def check_overlap_tp(ctx: Any, world_size: int, workdir: Path) -> dict[str, Any]:
    from .environment import collect_warnings

    tp = tp_size_for(world_size)
    _expect(tp is not None, f"no tensor-parallel size of 2 or 4 divides {world_size} GPUs")
    _expect(te_available(), "Transformer Engine is not installed")
    cfg = overlap_config(ctx, world_size, tp=tp, te=True)
    with collect_warnings() as warnings:
        run = _pretrain(cfg)
    losses = _check_losses(run, OVERLAP_ITERS, "training")
    disabled = [w for w in warnings if DISABLING_TP_OVERLAP in w]
    _expect(not disabled, f"Bridge switched TP overlap off: {disabled[0] if disabled else ''}")
    _expect(run.cfg.model.tp_comm_overlap is True and run.cfg.model.sequence_parallel is True, f"training ran with tp_comm_overlap={run.cfg.model.tp_comm_overlap}, sequence_parallel={run.cfg.model.sequence_parallel}")
    return {"losses": losses, "details": {"world_size": world_size, "tensor_parallel_size": tp, "tp_comm_overlap": True}}


RUNNERS = {"fsdp": check_fsdp, "overlap-dp": check_overlap_dp, "overlap-tp": check_overlap_tp}


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
    check = CHECKS[name]
    start = time.perf_counter()
    entry: dict[str, Any] = {"skill": check.skill, "claim": check.claim, "check": name, "status": PASSED, "reason": "", "losses": [], "seconds": 0.0}
    ctx = skill_context(bundle_root, check.skill, check.claim)
    try:
        measured = RUNNERS[name](ctx, world_size, workdir)
        entry["losses"], entry["details"] = measured["losses"], measured["details"]
    except AssertionError as failure:  # CheckFailed, or ClaimFailed from the skill's own block
        entry["status"], entry["reason"] = FAILED, str(failure) or "assertion failed"
    entry["seconds"] = round(time.perf_counter() - start, 3)
    return entry
