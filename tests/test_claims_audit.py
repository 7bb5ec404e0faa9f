"""The four statements an audit found misleading, the three it found imprecise, and the wrong
one census round 3's reviewers found (0.6.2 / megatron-core 0.19.2): each old wording put back in its section fails its check against the
real library, and a reading of the new wording with the old fact in it is contradicted."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPO, copy_bundle
from runner.claims.run import FAILED, PASSED, load_checks, run_checks
from runner.claims.sections import read_skill_sections
from runner.load import Bundle

MEGATRON_FSDP = "nemo-mbridge-perf-megatron-fsdp"
OVERLAP = "nemo-mbridge-perf-tp-dp-comm-overlap"

# The sections as they stood before the fix, word for word.
OLD = {
    'fsdp-ep-overlap-double-buffer': (MEGATRON_FSDP, "With `overlap_moe_expert_parallel_comm=True` in the model config, the Megatron FSDP wrapper\nrefuses the double buffer as it is built:\n`AssertionError: 1F1B overlap with FSDP does not support double buffer. Please set fsdp_double_buffer=False in the ddp config.`\nIt then accepts only the `cuda_graph_impl` values `none` and `full_iteration`. Two settings bring\nthe double buffer back: `cfg.ddp.megatron_fsdp_max_pool_double_buffer=True` turns\n`fsdp_double_buffer` on in the DDP config's own `__post_init__`, and NCCL user buffers turn it\non when the buffer is built (see above), so neither combines with this overlap."),
    'fsdp-code-anchors': (MEGATRON_FSDP, "- `megatron.bridge.training.config.ConfigContainer.validate`: the FSDP/FSDP2 exclusion\n  check, then `_validate_and_apply_megatron_fsdp_configs` when either FSDP flag is set.\n- `megatron.bridge.training.config.ConfigContainer._validate_and_apply_megatron_fsdp_configs`:\n  sets both flags and the distributed optimizer, then asserts on `ckpt_format`,\n  `CUDA_DEVICE_MAX_CONNECTIONS`, `check_weight_hash_across_dp_replicas_interval` and\n  `use_tp_pp_dp_mapping`, in that order.\n- `megatron.bridge.training.config.runtime_config_update`: applies `cfg.env_vars`, mixed\n  precision and comm overlap, then calls `validate()`.\n- `megatron.training.models.dist_utils._ddp_wrap` (megatron-core; Bridge re-exports it as\n  `megatron.bridge.models.common.unimodal._ddp_wrap`): picks the wrapper,\n  `FullyShardedDataParallel` when `use_megatron_fsdp` is set,\n  `TorchFullyShardedDataParallel` when `use_torch_fsdp2` is, `DistributedDataParallel`\n  otherwise.\n- `megatron.core.distributed.fsdp.mcore_fsdp_adapter.FullyShardedDataParallel`: the\n  Megatron FSDP wrapper itself.\n- `megatron.core.distributed.DistributedDataParallelConfig`: the class behind `cfg.ddp`,\n  with the override's `use_megatron_fsdp`, `data_parallel_sharding_strategy` and\n  `average_in_collective`."),
    'fsdp-checkpoint-hf-sidecar': (MEGATRON_FSDP, '`cfg.checkpoint.also_save_hf_checkpoint=True` cannot be combined with Megatron FSDP once\n`cfg.checkpoint.save` is set. With `ckpt_format="fsdp_dtensor"`, validation raises\n`ValueError: also_save_hf_checkpoint=True is not supported together with ckpt_format=\'fsdp_dtensor\'. Use ckpt_format=\'torch_dist\' when exporting additional HF weights during training.`\nWith `ckpt_format="torch_dist"`, the FSDP check fails instead, with\n`AssertionError: Megatron-FSDP requires the fsdp_dtensor checkpointing format!`. Export after\ntraining instead, as the next section describes.'),
    'fsdp-validate-side-effects': (MEGATRON_FSDP, '`ConfigContainer.validate()` finishes the job: for a config with either FSDP flag set,\nit sets **both** `cfg.dist.use_megatron_fsdp` and `cfg.ddp.use_megatron_fsdp` to True\nand turns the distributed optimizer on (`cfg.ddp.use_distributed_optimizer` and\n`cfg.optimizer.use_distributed_optimizer`). There is no need to set those by hand; they\nfollow from the override.'),
    'fsdp-nccl-ub': (MEGATRON_FSDP, "**NCCL user buffers.** With `cfg.ddp.nccl_ub=True`, Bridge's validation turns on\n`cfg.ddp.fsdp_manual_registration` (Bridge then registers the buffers once, after the first\ntraining step) but leaves `cfg.ddp.fsdp_double_buffer` as it is, False by default; the\nMegatron-LM command line sets both. Megatron FSDP turns the double buffer on itself: its\nparameter buffer sets `fsdp_double_buffer = True` as it is built with user buffers, before\nthe check that user buffers need it. Manual registration without user buffers fails\nvalidation: `cfg.ddp.fsdp_manual_registration=True` alone raises\n`AssertionError: DDP.fsdp_manual_registration requires DDP.nccl_ub!`. User buffers alone are\nenough:\n\n```python\ncfg.ddp.nccl_ub = True\n```"),
    'overlap-optimizer-step-gather': (OVERLAP, '**`overlap_param_gather_with_optimizer_step` stays off unless you pass it to\n`CommOverlapConfig`.** It is a field of `OptimizerConfig` (`cfg.optimizer`), not of\n`DistributedDataParallelConfig`. With the distributed optimizer, `setup()` writes `False` to\nit; the line that would turn it on for PP > 1 with VPP > 1 is commented out under "Currently\ndisabled due to an issue with checkpointing". Passing\n`overlap_param_gather_with_optimizer_step=True` to `CommOverlapConfig` survives\n`runtime_config_update()`, and Bridge hands the value to `_ddp_wrap`, which then disables\nbucketing for every model chunk.'),
    # census round 3's W: a preset's name is never checked against the run
    'overlap-tp-ub-shape': (OVERLAP, "**The buffers are sized from the run's shape.** Bridge's `_initialize_tp_communicators`\npasses Transformer Engine's `initialize_ub` the shape\n`[(model_config.seq_length * micro_batch_size) // model_config.context_parallel_size, model_config.hidden_size]`,\nso a preset only fits the hidden size, micro-batch size and sequence length it was\nwritten for. How fast the overlap runs is decided inside Transformer Engine."),
    'overlap-precision-knobs': (OVERLAP, '**Precision knobs live in mixed precision.** `grad_reduce_in_fp32` and\n`fp8_param_gather` are fields of `MixedPrecisionConfig` (`cfg.mixed_precision`).\nDuring `runtime_config_update`, its `setup()` copies them onto the DDP config, so a value\nset only on `cfg.ddp` is overwritten by the mixed-precision recipe\'s value. Recipes built\non `_pretrain_common()` leave `cfg.mixed_precision` as the preset\'s name,\n`"bf16_mixed"`, which `runtime_config_update` turns into the object later, so setting a\nfield on it straight away raises `AttributeError`. Resolve it first:\n\n```python\nfrom megatron.bridge.training.mixed_precision import get_mixed_precision_config\n\ncfg.mixed_precision = get_mixed_precision_config(cfg.mixed_precision)  # name -> MixedPrecisionConfig\ncfg.mixed_precision.grad_reduce_in_fp32 = False\n```'),}


@pytest.fixture(scope="module")
def checks():
    from runner.claims.plugins import skill_roots

    return load_checks(skill_roots(REPO))


def section_file(bundle: Path, skill: str, claim_id: str) -> tuple[Path, str]:
    """The document holding the claim (SKILL.md or a reference) and the section's body."""
    section = read_skill_sections(bundle / "skills" / skill)[claim_id]
    return section.path, "\n".join(section.lines).strip("\n")


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text("utf-8")
    assert text.count(old) == 1, f"{old[:60]!r} must occur exactly once in {path}"
    path.write_text(text.replace(old, new), "utf-8")


def result_of(bundle: Path, skill: str, claim_id: str):
    return {r.claim: r for r in run_checks(Bundle(bundle), skills=[skill], pattern=claim_id)}[claim_id]


@pytest.mark.parametrize("claim_id", sorted(OLD))
def test_the_old_wording_fails_its_check(checks, tmp_path: Path, claim_id: str):
    skill, old = OLD[claim_id]
    bundle = copy_bundle(tmp_path)
    path, body = section_file(bundle, skill, claim_id)
    edit(path, body, old)
    result = result_of(bundle, skill, claim_id)
    assert result.status == FAILED, result.message


@pytest.mark.parametrize(
    "skill, claim_id, new, wrong, because",
    [
        # EP overlap with NCCL user buffers: the second chunk, not the first, trips the assertion
        (MEGATRON_FSDP, "fsdp-ep-overlap-double-buffer", "with `cfg.ddp.nccl_ub=True` the first model", "with `cfg.ddp.nccl_ub=False` the first model", "does not turn user buffers on"),
        # the fifth assertion named in the wrong place
        (MEGATRON_FSDP, "fsdp-code-anchors", "`CUDA_DEVICE_MAX_CONNECTIONS`,\n  `fsdp_manual_registration`", "`fsdp_manual_registration`,\n  `CUDA_DEVICE_MAX_CONNECTIONS`", "in another order"),
        # the allocator refusal is on PyTorch older than 2.11, not 2.10
        (MEGATRON_FSDP, "fsdp-nccl-ub", "With PyTorch older than 2.11", "With PyTorch older than 2.10", "user buffers with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True on PyTorch 2.10 fails validation"),
        # setup() derives DP overlap only when the distributed optimizer is already on
        (MEGATRON_FSDP, "fsdp-validate-side-effects", "is already\nTrue.", "is already\nFalse.", "does not set"),
        # a GPU count taken from the project's own run instead of Bridge's TP threshold
        (OVERLAP, "overlap-gpu-tp-overlap", "needs at least 2 GPUs", "needs at least 4 GPUs", "Bridge keeps tp_comm_overlap from TP=4, not exactly from there"),
        # a recipe running a preset named for TP=4 at TP=4 would show nothing about names
        (OVERLAP, "overlap-tp-ub-shape", "sets `tensor_model_parallel_size` to 8", "sets `tensor_model_parallel_size` to 4", "named for another TP"),
    ],
)
def test_the_new_wording_with_the_old_fact_is_contradicted(checks, tmp_path: Path, skill: str, claim_id: str, new: str, wrong: str, because: str):
    bundle = copy_bundle(tmp_path)
    path, _ = section_file(bundle, skill, claim_id)
    edit(path, new, wrong)
    result = result_of(bundle, skill, claim_id)
    assert result.status == FAILED and because in result.message, result.message


def test_the_new_wording_passes(checks):
    for claim_id, (skill, _) in sorted(OLD.items()):
        assert result_of(REPO, skill, claim_id).status == PASSED, claim_id
