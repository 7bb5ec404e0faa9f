"""The training checks' own logic (runner/claims/gpu.py) with Bridge's pretrain() simulated:
what they pass and fail on, and how the smoke worker reports.

Nothing here needs a GPU; what only a GPU can show is gpu/validate.sh's job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

from gpu_common import FSDP, OVERLAP, checks, launch, skill_module  # noqa: F401 - checks is a fixture


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
        fake = lambda cfg, watch=None: bridge(cfg, watch or gpu.recorder())  # noqa: E731
        for skill in (FSDP, OVERLAP):  # each skill's checks/gpu.py imported pretrain by name
            monkeypatch.setattr(skill_module(skill, "gpu"), "pretrain", fake)
        monkeypatch.setattr(skill_module(FSDP, "gpu"), "fingerprint", lambda model: (bridge.weights, bridge.weights ** 2))
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
    overlap_gpu = skill_module(OVERLAP, "gpu")
    monkeypatch.setattr(overlap_gpu, "ddp_of", lambda model: {"overlap_grad_reduce": False, "overlap_param_gather": False, "use_distributed_optimizer": True})
    entry = gpu.run_check("overlap-dp", REPO, tmp_path, 1)
    assert entry["status"] == "failed" and "not the distributed optimizer" in entry["reason"]  # the stand-in has no optimizer

    original = overlap_gpu.pretrain

    def with_optimizer(cfg, watch=None):
        run = original(cfg, watch)
        run.optimizer = DistributedOptimizer.__new__(DistributedOptimizer)
        return run

    monkeypatch.setattr(overlap_gpu, "pretrain", with_optimizer)
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
