"""The GPU tier's smoke configs, built on CPU from each SKILL.md's own blocks and validated
by Bridge; on CPU the GPU-tier claims report needs-gpu and the cards keep them.

Nothing here needs a GPU; what only a GPU can show is gpu/validate.sh's job."""

from __future__ import annotations

import json
import re

from conftest import copy_bundle
from runner.cli import main
from runner.load import Bundle

from gpu_common import FSDP, GPU_CLAIMS, MOE, OVERLAP, checks, context, skill_module, snapshot_cards  # noqa: F401 - checks is a fixture


# --- the smoke configs, built on CPU from each SKILL.md ---------------------------------


def test_fsdp_smoke_configs_come_from_the_block_and_validate(checks, tmp_path):
    from runner.claims.environment import quiet, resolve
    from runner.claims.gpu import HIDDEN, NUM_LAYERS, smoke_base

    fsdp_gpu = skill_module(FSDP, "gpu")
    FSDP_ITERS, FSDP_SAVE_AT, fsdp_configs = fsdp_gpu.FSDP_ITERS, fsdp_gpu.FSDP_SAVE_AT, fsdp_gpu.fsdp_configs

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
    overlap_config = skill_module(OVERLAP, "gpu").overlap_config

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


def test_moe_smoke_config_comes_from_the_block_and_validates(checks):
    from runner.claims.environment import quiet, resolve

    moe_config = skill_module(MOE, "gpu").moe_config
    for world_size in (2, 4):
        cfg = moe_config(context(MOE, "moe-gpu-overlap-trains"), world_size, 2, te=False)
        assert (cfg.model.num_moe_experts, cfg.model.moe_token_dispatcher_type, cfg.model.expert_model_parallel_size) == (8, "alltoall", 2)
        with quiet():
            resolve(cfg, world_size=world_size)
        assert cfg.model.overlap_moe_expert_parallel_comm is True and cfg.model.bf16 is True
    cfg = moe_config(context(MOE, "moe-gpu-overlap-trains"), 2, 1, te=False)  # EP=1: the overlap is refused
    with quiet():
        try:
            resolve(cfg, world_size=2)
        except AssertionError as error:
            assert "expert_model_parallel_size > 1" in str(error)
        else:
            raise AssertionError("EP=1 with the overlap passed validation")


def test_gpu_claims_need_a_gpu_on_cpu_and_write_cards_leaves_them(checks, tmp_path, capsys):
    bundle = copy_bundle(tmp_path)
    before = snapshot_cards(bundle)
    code = main(["check", "--bundle", str(bundle), "--claim", "*-gpu-*", "--out", str(tmp_path / "claims"), "--write-cards"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.rstrip().endswith(f"0 passed, 0 failed, {len(GPU_CLAIMS)} need a GPU (not run here)")
    assert len(re.findall(r"\bneeds-gpu\b", out.split("\n\n")[0])) >= len(GPU_CLAIMS)
    assert snapshot_cards(bundle) == before
    results = json.loads((tmp_path / "claims" / "claims.json").read_text())["results"]
    assert {(r["claim"], r["status"], r["tier"]) for r in results} == {(c, "needs-gpu", "gpu") for _, c in GPU_CLAIMS}
    assert (tmp_path / "claims" / "junit.xml").read_text().count("<skipped") == len(GPU_CLAIMS)


def test_the_gpu_run_follows_the_skill_block(checks, tmp_path):
    """Drop one line of the FSDP enablement block: the GPU claim's CPU side fails, because the
    GPU run would train without Megatron FSDP."""
    from runner.claims.run import FAILED, run_checks

    bundle = copy_bundle(tmp_path)
    skill_md = bundle / "skills" / FSDP / "SKILL.md"
    skill_md.write_text(skill_md.read_text().replace("cfg.ddp.use_megatron_fsdp = True\n", "", 1))
    result = {r.claim: r for r in run_checks(Bundle(bundle), skills=[FSDP], pattern="fsdp-gpu-*")}["fsdp-gpu-train-save-resume"]
    assert result.status == FAILED and "Megatron FSDP" in result.message, result.message
