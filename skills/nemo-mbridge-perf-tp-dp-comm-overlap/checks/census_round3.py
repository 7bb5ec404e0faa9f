"""Checks for the sections added after the second held-out round (p2p peers and the shape
exchange, warm-up counts, middle pipeline stages, empty layout stages, CUDA graph capture and
teardown, userbuffers FP8 buffers and fixed shapes, MTP and TP overlap, the SM margin
variables, unused parameters and several distributed-optimizer instances). Same rule as the
other modules: each value is read out of the sentence and compared with what the installed
megatron-core / Megatron-Bridge does, by running the real functions on CPU (process groups,
streams and Transformer Engine replaced by stand-ins that record what they are given) or by
reading the installed source with inspect/ast."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import importlib.util
import inspect
import re
import textwrap
import types
from pathlib import Path
from unittest import mock

from runner.claims.kit import ClaimFailed, Context, assignment, claim, literal, raised, resolve, resolve_symbol, tiny_config

from .census_topics import _constants, _fields, _package_files, _raises, _source, _squash, _tc
from .overlap import comm_overlap_module, overlap, run_setup


def _tree(dotted: str) -> ast.AST:
    return ast.parse(textwrap.dedent(_source(dotted)))


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == name]


def _names(text: str) -> list[str]:
    """`a`, `b` and `c` -> [a, b, c]."""
    return [part.strip().strip("`") for part in re.split(r",\s*(?:and\s+|or\s+)?|\s+(?:and|or)\s+", text.strip()) if part.strip()]


# --- stand-ins for process groups and CUDA --------------------------------------------------------


class _Group:
    """A process group of `size` ranks seen from `rank`; global rank = 100 + group rank."""

    def __init__(self, size: int, rank: int) -> None:
        self._size, self._rank = size, rank

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return self._rank


def _global(group, rank: int) -> int:
    return 100 + rank


@contextlib.contextmanager
def _p2p_world(ops: list, backend: str = "nccl"):
    """torch.distributed's p2p calls record what they get; CUDA calls run on the CPU."""
    import torch
    import torch.distributed as dist

    class P2POp:
        def __init__(self, op, tensor, peer, group=None):
            self.kind, self.tensor = ("isend" if op is dist.isend else "irecv"), tensor
            ops.append((self.kind, peer, group, tensor))

    def isend(tensor=None, dst=None, group=None, **_):
        ops.append(("isend", dst, group, tensor))
        return mock.MagicMock()

    def irecv(tensor=None, src=None, group=None, **_):
        ops.append(("irecv", src, group, tensor))
        if tensor is not None and tensor.dtype == torch.int64:
            tensor.copy_(torch.tensor([7, 1, 64]))
        return mock.MagicMock()

    def batch(op_list):
        ops.append(("batch", len(op_list), None, None))
        for op in op_list:  # a received shape: 7 tokens, micro-batch 1, hidden 64
            if op.kind == "irecv" and op.tensor.dtype == torch.int64:
                op.tensor.copy_(torch.tensor([7, 1, 64]))
        return [mock.MagicMock() for _ in op_list]

    with (
        mock.patch.object(dist, "P2POp", P2POp),
        mock.patch.object(dist, "batch_isend_irecv", batch),
        mock.patch.object(dist, "get_global_rank", _global),
        mock.patch.object(dist, "get_backend", lambda group=None: backend),
        mock.patch.object(torch.cuda, "current_device", lambda: "cpu"),
        mock.patch.object(torch.cuda, "synchronize", lambda *a, **k: ops.append(("synchronize", None, None, None))),
    ):
        with mock.patch.object(dist, "isend", isend), mock.patch.object(dist, "irecv", irecv):
            yield


def _p2p_config(**fields):
    import torch
    from megatron.core.model_parallel_config import ModelParallelConfig

    return ModelParallelConfig(pipeline_dtype=torch.float32, **fields)


def _communicator(size: int, rank: int, **fields):
    import torch.distributed as dist
    from megatron.core.pipeline_parallel.p2p_communication import P2PCommunicator

    group = _Group(size, rank)
    with mock.patch.object(dist, "get_global_rank", _global):
        return P2PCommunicator(pp_group=group, config=_p2p_config(**fields)), group


# --- references/pp-p2p-internals.md -----------------------------------------------------------------


@claim("overlap-p2p-peer-group")
def p2p_peer_group(ctx: Context) -> None:
    import torch
    import torch.distributed as dist
    from megatron.core.pipeline_parallel import p2p_communication

    r = ctx.read(
        "**Each p2p operation names a global rank and the pipeline group.** megatron-core's `{cls:code}` turns the previous and next rank of its pipeline group into global ranks with `{conv:code}`."
    )
    asked = []
    with mock.patch.object(dist, "get_global_rank", lambda group, rank: asked.append((group, rank)) or _global(group, rank)):
        comm = getattr(p2p_communication, r.cls)(pp_group=_Group(4, 1), config=_p2p_config())
    ctx.expect(all(g is comm.pp_group for g, _ in asked) and sorted(n for _, n in asked) == [0, 2], f"{r.cls} asks for the global ranks of {asked}")
    ctx.expect((comm.prev_rank, comm.next_rank) == (100, 102), f"{r.cls} keeps {comm.prev_rank}, {comm.next_rank}")
    ctx.expect(r.conv.endswith(", ...)") and r.conv.removesuffix("...)") in _squash(_source(f"megatron.core.pipeline_parallel.p2p_communication.{r.cls}.__init__")), f"{r.cls} does not call {r.conv}")
    s = ctx.read(
        "`{fn:code}` builds every `{op:code}` from such a global rank and the `{arg:code}` argument, which `{comm:code}` fills with that pipeline group, "
        "and the shape exchange `{shapes:code}` builds its operations the same way."
    )
    ctx.expect(s.op == "torch.distributed.P2POp" and s.arg in inspect.signature(getattr(p2p_communication, s.fn)).parameters, f"{s.fn} takes no {s.arg}")
    comm, group = _communicator(4, 1, batch_p2p_comm=True, variable_seq_lengths=True)
    ops, given = [], []
    original = getattr(p2p_communication, s.fn)
    with _p2p_world(ops), mock.patch.object(p2p_communication, s.fn, lambda **kw: given.append(kw) or original(**kw)):
        getattr(comm, s.comm)(tensor_send_next=torch.zeros(7, 1, 64), tensor_send_prev=torch.zeros(7, 1, 64), recv_prev=True, recv_next=True, tensor_shape=[9, 1, 64])
    sent = [o for o in ops if o[0] in ("isend", "irecv")]
    ctx.expect(len(given) == 1 and given[0][s.arg] is group, f"{s.comm} hands {s.fn} {given}")
    ctx.expect(len(sent) == 8 and all(g is group and peer in (100, 102) for _, peer, g, _ in sent), f"the operations name {[(p, g) for _, p, g, _ in sent]}")
    shape_ops = [o for o in sent if o[3] is not None and o[3].dtype == torch.int64]
    ctx.expect(len(shape_ops) == 4 and hasattr(comm, s.shapes), f"{s.shapes} built {len(shape_ops)} operations")
    t = ctx.read(
        "So the `{arg:code}` argument belongs there: removing it is not a fix for a pipeline hang, and a hang in this release is not the cross-group mix-up of old reports, where the shape operations had no group."
    )
    ctx.expect(t.arg == s.arg, "the sentence names another argument")
    u = ctx.read(
        "With a pipeline group of {n:int} ranks and a backend other than `{ucc:code}`, the unbatched path `{fn:code}` sends one of its two directions through `{world:code}`, which works for the same reason: the peers are global ranks."
    )
    from torch.distributed.distributed_c10d import _WorldMeta

    world = object()

    def groups(size: int, backend: str) -> list:
        found = []
        with _p2p_world(found, backend), mock.patch.object(_WorldMeta, "WORLD", property(lambda cls: world)):
            pg = _Group(size, 0)
            getattr(p2p_communication, u.fn)(tensor_send_prev=torch.zeros(1), tensor_recv_prev=torch.zeros(1), tensor_send_next=torch.zeros(1), tensor_recv_next=torch.zeros(1), group=pg, prev_pipeline_rank=101, next_pipeline_rank=101)
        return [g for _, _, g, _ in found if g is not pg]

    ctx.expect(u.world == "torch.distributed.group.WORLD", f"{u.world} is not the global group")
    ctx.expect(len(groups(u.n, "nccl")) == 2 and all(g is world for g in groups(u.n, "nccl")), f"with {u.n} ranks {u.fn} does not use the global group for one direction")
    ctx.expect(not groups(u.n, u.ucc) and not groups(u.n + 1, "nccl"), f"{u.fn} uses the global group with {u.ucc} or with {u.n + 1} ranks")
    ctx.expect(u.fn != s.fn, "the unbatched path is the batched one")


@claim("overlap-p2p-shape-exchange-order")
def p2p_shape_exchange_order(ctx: Context) -> None:
    import torch

    ctx.says("**The shape exchange is one batch in a fixed order.**")
    r = ctx.read(
        "When `{flag:code}` is on, `{fn:code}` queues send-to-previous, receive-from-previous, send-to-next and receive-from-next, in that order, in one `{batch:code}` call, "
        "waits for each request and then calls `{sync:code}`."
    )
    comm, group = _communicator(4, 1, **{r.flag: True})
    for batched in (False, True):
        comm.config.batch_p2p_comm = batched
        ops = []
        with _p2p_world(ops):
            getattr(comm, r.fn)(torch.zeros(7, 1, 64), torch.zeros(7, 1, 64), True, True)
        order = [(kind, peer) for kind, peer, _, _ in ops]
        ctx.expect(order == [("isend", 100), ("irecv", 100), ("isend", 102), ("irecv", 102), ("batch", 4), ("synchronize", None)], f"{r.fn} with batch_p2p_comm={batched} runs {order}")
    ctx.expect(r.batch == "torch.distributed.batch_isend_irecv" and r.sync == "torch.cuda.synchronize()", f"{r.batch}/{r.sync}")
    ctx.expect("for req in reqs: req.wait()" in _squash(_source(f"megatron.core.pipeline_parallel.p2p_communication.P2PCommunicator.{r.fn}")), f"{r.fn} does not wait for each request")
    s = ctx.read("`{off:code}` does not change this; only `{ring:code}` replaces the batch.")
    name, value = assignment(s.off)
    ctx.expect(name == "batch_p2p_comm" and value is False, f"{s.off} is not the unbatched setting tested above")
    ring_name, ring_value = assignment(s.ring)
    comm.config.batch_p2p_comm = True
    setattr(comm.config, ring_name, ring_value)
    ops, rings = [], []
    with _p2p_world(ops), mock.patch.object(torch.distributed, "ring_exchange", lambda **kw: rings.append(kw), create=True):
        getattr(comm, r.fn)(torch.zeros(7, 1, 64), torch.zeros(7, 1, 64), True, True)
    ctx.expect(len(rings) == 1 and not [o for o in ops if o[0] == "batch"], f"{s.ring} still batches: {ops}")
    t = ctx.read("With a pipeline size of {two:int} the previous and the next rank are the same rank, so one batch holds two sends to one peer and two receives from it.")
    same, _ = _communicator(t.two, 0)
    ctx.expect(same.prev_rank == same.next_rank, f"at pipeline size {t.two} the neighbours differ")
    ctx.says(
        "The tracker reports that the two received shapes can then be swapped, which makes SFT with sequence packing and virtual pipeline stages fail its loss check at that pipeline size while a larger one passes; megatron-core has no fix for it."
    )
    u = ctx.read("With a pipeline size of {three:int} the two neighbours differ.")
    other, _ = _communicator(u.three, 0)
    ctx.expect(other.prev_rank != other.next_rank and u.three == t.two + 1, f"at pipeline size {u.three} the neighbours are the same")
    v = ctx.read("So at a pipeline size of {two:int} with virtual stages, turn sequence packing off (or drop the virtual stages), or use a larger pipeline size.")
    ctx.expect(v.two == t.two, "the advice names another pipeline size")
    # packing off: no variable_seq_lengths, so no shape exchange; without virtual stages the
    # schedule never exchanges with both neighbours in one call
    from megatron.bridge.models import GPTModelProvider  # noqa: F401 - the tiny config's model

    model = tiny_config(pp=t.two, vpp=2).model
    model.finalize()
    ctx.expect(getattr(model, r.flag) is False, f"{r.flag} is on without packing")
    both = "send_forward_backward_recv_forward_backward"
    plain = _squash(_source("megatron.core.pipeline_parallel.schedules.forward_backward_pipelining_without_interleaving"))
    interleaved = _squash(_source("megatron.core.pipeline_parallel.schedules.forward_backward_pipelining_with_interleaving"))
    ctx.expect(both not in plain and both in interleaved, "the schedules exchange with both neighbours otherwise")


@claim("overlap-p2p-seq-length")
def p2p_seq_length(ctx: Context) -> None:
    import torch
    from megatron.core.pipeline_parallel import schedules

    r = ctx.read(
        "**With `{flag:code}` the received shape decides, not `{seq:code}`.** `{fn:code}` replaces the shape it is given by the shapes `{shapes:code}` received whenever `{flag2:code}` or `{mtp:code}` is on, and allocates the receive buffers with them."
    )
    ctx.expect(r.flag == r.flag2 and r.seq == "seq_length", "the sentence names two flags")
    for flag in (r.flag, r.mtp):
        comm, _ = _communicator(4, 1, batch_p2p_comm=True, **{flag: True})
        ops = []
        with _p2p_world(ops):
            prev, nxt, _ = getattr(comm, r.fn)(tensor_send_next=None, tensor_send_prev=None, recv_prev=True, recv_next=False, tensor_shape=[64, 1, 64])
        ctx.expect(tuple(prev.shape) == (7, 1, 64) and nxt is None, f"with {flag} the receive buffer is {tuple(prev.shape)}")
        ctx.expect(hasattr(comm, r.shapes) and any(o[3] is not None and o[3].dtype == torch.int64 for o in ops), f"{r.shapes} was not used")
    comm, _ = _communicator(4, 1, batch_p2p_comm=True)
    with _p2p_world([]):
        prev, _, _ = getattr(comm, r.fn)(tensor_send_next=None, tensor_send_prev=None, recv_prev=True, recv_next=False, tensor_shape=[64, 1, 64])
    ctx.expect(tuple(prev.shape) == (64, 1, 64), "without the flag the given shape is not used")
    s = ctx.read(
        "The non-interleaved schedule's `{gts:code}` then returns `{empty:code}`, and the interleaved schedule builds `{shape:code}` (divided by the context-parallel size, and by the TP size with sequence parallelism) only to pass it along."
    )
    got = getattr(schedules, s.gts)(seq_length=64, micro_batch_size=1, decoder_seq_length=None, config=_p2p_config(**{r.flag: True}))
    ctx.expect(got == literal(s.empty), f"{s.gts} returns {got}")
    tree = _tree("megatron.core.pipeline_parallel.schedules.forward_backward_pipelining_with_interleaving")
    built = [ast.unparse(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "tensor_shape"]
    ctx.expect(built == [s.shape], f"the interleaved schedule builds {built}")
    body = _squash(_source("megatron.core.pipeline_parallel.schedules.forward_backward_pipelining_with_interleaving"))
    ctx.expect("tensor_shape[0] = tensor_shape[0] // cp_group.size() if config.sequence_parallel: tensor_shape[0] = tensor_shape[0] // tp_group.size()" in body, "the shape is divided otherwise")
    t = ctx.read(
        "So a `{seq:code}` shorter than a micro-batch does not make a receive too small in either schedule, as the `{gfb:code}` docstring says: \"{doc:quote}\""
    )
    ctx.expect(t.seq == r.seq and t.doc.endswith(".") and _squash(t.doc) in _squash(inspect.getdoc(getattr(schedules, t.gfb)) or ""), f"the {t.gfb} docstring does not say {t.doc!r}")
    u = ctx.read("A shape must still be passed: with `{none:code}`, `{fn:code}` raises `{error:code}`.")
    name, value = assignment(u.none)
    comm, _ = _communicator(4, 1, batch_p2p_comm=True, **{r.flag: True})
    with _p2p_world([]):
        _raises(ctx, lambda: getattr(comm, u.fn)(tensor_send_next=None, tensor_send_prev=None, recv_prev=True, recv_next=False, **{name: value}), u.error)


def _fake_communicator(size: int, rank: int, vpp):
    return types.SimpleNamespace(pp_group=_Group(size, rank), virtual_pipeline_model_parallel_size=vpp)


@claim("overlap-pp-warmup-microbatches")
def pp_warmup_microbatches(ctx: Context) -> None:
    from megatron.core.pipeline_parallel import schedules

    ctx.says("**How many forwards a stage runs before its first backward.**")
    r = ctx.read(
        "megatron-core's `{fn:code}` gives the interleaved schedule `{inter:code}` warm-up micro-batches, plus {extra:int} with `{ep:code}`, and the non-interleaved schedule `{plain:code}`."
    )
    fn = getattr(schedules, r.fn)

    def warmup(pp, rank, chunks, m, group, vpp=True, **kw):
        return fn(m, chunks, group, p2p_communicator=_fake_communicator(pp, rank, chunks if vpp else None), **kw)

    ep_name, ep_value = assignment(r.ep)
    for pp, chunks, m, group in ((4, 2, 64, 4), (4, 3, 64, 8), (8, 2, 64, 8), (2, 4, 64, 3)):
        for rank in range(pp):
            env = dict(pipeline_parallel_size=pp, pipeline_parallel_rank=rank, num_model_chunks=chunks, microbatch_group_size_per_vp_stage=group)
            want = eval(compile(ast.parse(r.inter, mode="eval"), "<skill>", "eval"), {}, env)  # noqa: S307 - the skill's arithmetic, names bound
            ctx.expect(warmup(pp, rank, chunks, m, group)[2] == want, f"PP {pp} rank {rank}: {r.fn} gives {warmup(pp, rank, chunks, m, group)[2]}, the formula {want}")
            ctx.expect(warmup(pp, rank, chunks, m, group, **{ep_name: ep_value})[2] == want + r.extra, f"{r.ep} adds another count")
            plain = eval(compile(ast.parse(r.plain, mode="eval"), "<skill>", "eval"), {}, env)  # noqa: S307
            ctx.expect(warmup(pp, rank, 1, m, group, vpp=False)[2] == plain, f"the non-interleaved count is {warmup(pp, rank, 1, m, group, vpp=False)[2]}")
    s = ctx.read("Both are capped at `{total:code}`, the total, when every micro-batch is a warm-up one.")
    total, all_warm, count, _ = warmup(4, 0, 2, 3, 4)
    env = dict(num_microbatches=3, num_model_chunks=2)
    ctx.expect(all_warm and count == total == eval(compile(ast.parse(s.total, mode="eval"), "<skill>", "eval"), {}, env), f"with 3 micro-batches {r.fn} gives {count} of {total}")  # noqa: S307
    t = ctx.read(
        "At PP {pp:int} with {chunks:int} model chunks, {m:int} micro-batches and the default group size (the PP size), rank {r0:int} runs {w0:int} warm-up forwards and rank {r1:int} runs {w1:int}."
    )
    from megatron.core.model_parallel_config import ModelParallelConfig

    default = ModelParallelConfig(pipeline_model_parallel_size=t.pp, virtual_pipeline_model_parallel_size=t.chunks, pipeline_dtype=__import__("torch").bfloat16).microbatch_group_size_per_vp_stage
    ctx.expect(default == t.pp, f"the default group size is {default}")
    ctx.expect(t.m >= default and t.m % default in (0,) + tuple(range(t.pp, default)) and 0 <= t.r0 < t.r1 < t.pp, f"{t.m} micro-batches at PP {t.pp} is not a valid interleaved run")
    got = (warmup(t.pp, t.r0, t.chunks, t.m, default)[2], warmup(t.pp, t.r1, t.chunks, t.m, default)[2])
    ctx.expect(got == (t.w0, t.w1), f"ranks {t.r0} and {t.r1} run {got}")
    u = ctx.read("The second term follows `{group:code}` (see [pp-layout.md](pp-layout.md)), which is why it reads as the PP size only by default.")
    ctx.expect(u.group in r.inter and u.group == "microbatch_group_size_per_vp_stage", f"{u.group} is not in the formula")
    ctx.says(
        "The maintainers' answer upstream explains the doubled first term: a stage runs forwards of its later chunks early so that its first backward can start as soon as the gradient from the next stage arrives."
    )


@claim("overlap-pp-warmup-flush")
def pp_warmup_flush(ctx: Context) -> None:
    from runner.claims.kit import get_field

    ctx.says("**Overlapping p2p in warm-up and flush too.**")
    r = ctx.read("`{field:code}` is a model field that `{cls:code}` does not have; set it on `{where:code}`.")
    ctx.expect(r.field not in {f.name for f in dataclasses.fields(getattr(comm_overlap_module(), r.cls))}, f"{r.cls} has {r.field}")
    ctx.expect(r.where == "cfg.model" and get_field(tiny_config(), f"{r.where}.{r.field}") is False, f"{r.where} has no {r.field}")
    s = ctx.read(
        "megatron-core accepts it only with `{on:code}` and `{off:code}`, which Bridge derives with virtual pipeline stages; without them `{fn:code}` raises `{error:code}`"
    )
    on, off = assignment(s.on), assignment(s.off)
    ctx.expect(s.fn == "cfg.validate()", f"{s.fn} is not the validation")
    for vpp in (2, None):
        cfg = tiny_config(pp=2, vpp=vpp)
        cfg.comm_overlap = overlap(tp_comm_overlap=False)
        setattr(cfg.model, r.field, True)
        if vpp:
            resolve(cfg, world_size=2)
            ctx.expect((getattr(cfg.model, on[0]), getattr(cfg.model, off[0])) == (on[1], off[1]), f"with VPP Bridge derives {getattr(cfg.model, on[0])}, {getattr(cfg.model, off[0])}")
        else:
            _raises(ctx, lambda cfg=cfg: resolve(cfg, world_size=2), s.error)
    _raises(ctx, lambda: _tc(num_layers=4, pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=2, **{r.field: True, on[0]: on[1], off[0]: not off[1]}), s.error)
    _tc(num_layers=4, pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=2, **{r.field: True, on[0]: on[1], off[0]: off[1]})


def _get_batch_run(cfg, *, pp: int, rank: int, vp_stage, vpp):
    """Bridge's gpt_step.get_batch on pipeline rank `rank` of `pp`: what it returned and the
    keyword arguments it read the batch with (None when it did not read it)."""
    import torch
    from megatron.bridge.training import gpt_step

    cfg.model.virtual_pipeline_model_parallel_size = vpp
    read = []
    batch = {"tokens": torch.zeros(1, 8), "labels": torch.zeros(1, 8), "loss_mask": torch.ones(1, 8), "position_ids": torch.zeros(1, 8), "cu_seqlens": torch.tensor([[0, 3, 8]])}
    pg = types.SimpleNamespace(pp=_Group(pp, rank), cp=_Group(1, 0))
    with (
        mock.patch.object(gpt_step, "is_pp_first_stage", lambda group: group.rank() == 0),
        mock.patch.object(gpt_step, "is_pp_last_stage", lambda group: group.rank() == group.size() - 1),
        mock.patch.object(gpt_step, "get_batch_from_iterator", lambda it, **kw: read.append(kw) or dict(batch)),
        mock.patch.object(gpt_step, "get_batch_on_this_cp_rank", lambda b, **kw: b),
    ):
        out = gpt_step.get_batch(iter([]), cfg, pg_collection=pg, vp_stage=vp_stage)
    return out, (read[0] if read else None)


def _sft_dataset(**fields):
    from megatron.bridge.data.builders.gpt_sft import GPTSFTDatasetConfig
    from megatron.bridge.data.packing.config import PackedSequenceSpecs

    size = fields.pop("packed_sequence_size", "unset")
    if size != "unset":
        fields.update(enable_offline_packing=True, offline_packing_specs=PackedSequenceSpecs(packed_sequence_size=size))
    return GPTSFTDatasetConfig(seq_length=64, dataset_root="/nonexistent", **fields)


@claim("overlap-pp-middle-stage-batch")
def pp_middle_stage_batch(ctx: Context) -> None:
    from megatron.bridge.training import gpt_step

    ctx.says("**Middle pipeline stages read the packing metadata.**")
    r = ctx.read(
        "Bridge's `{fn:code}` in `{module:code}` counts a model chunk as first only on the first pipeline rank and its first virtual stage, as last only on the last rank and its last virtual stage, "
        "and as middle otherwise, so PP {pp:int} with VPP {vpp:int} has middle chunks too."
    )
    ctx.expect(r.module == gpt_step.__name__ and callable(getattr(gpt_step, r.fn, None)), f"{r.module} has no {r.fn}")
    plain = tiny_config()
    roles = {}
    for rank in range(r.pp):
        for stage in range(r.vpp):
            out, read = _get_batch_run(plain, pp=r.pp, rank=rank, vp_stage=stage, vpp=r.vpp)
            roles[(rank, stage)] = "middle" if read is None else ("first" if read["is_first_pp_stage"] else "last" if read["is_last_pp_stage"] else "?")
    ctx.expect(roles[(0, 0)] == "first" and roles[(r.pp - 1, r.vpp - 1)] == "last" and list(roles.values()).count("middle") == r.pp * r.vpp - 2 > 0, f"the chunks count as {roles}")
    # the smallest such layout: without the virtual stages (or with a smaller one) no chunk is middle
    for pp, vpp in ((r.pp, r.vpp - 1), (r.pp - 1, r.vpp)):
        reads = [_get_batch_run(plain, pp=pp, rank=rank, vp_stage=stage if vpp > 1 else None, vpp=vpp if vpp > 1 else None)[1] for rank in range(pp) for stage in range(max(vpp, 1))]
        ctx.expect(all(read is not None for read in reads), f"PP {pp} with VPP {vpp} has middle chunks too")
    s = ctx.read(
        "A middle chunk returns six `{none:code}` values without reading the batch unless `{pred:code}` is true, which it is with `{inbatch:code}`, with `{offline:code}` when `{size:code}` is `{none2:code}` or above {zero:int}, "
        "and with `{mask:code}`."
    )
    out, read = _get_batch_run(plain, pp=4, rank=1, vp_stage=None, vpp=None)
    ctx.expect(read is None and out == (literal(s.none),) * 6 and literal(s.none2) is None, f"a middle stage returns {out}")
    pred = getattr(gpt_step, s.pred.removesuffix("(cfg)"))
    from megatron.bridge.data.builders.mock_vlm_sft import MockVLMSFTDatasetConfig

    def needs(dataset) -> bool:
        cfg = tiny_config()
        cfg.dataset = dataset
        return pred(cfg)

    inbatch, mask = assignment(s.inbatch), assignment(s.mask)
    ctx.expect(needs(MockVLMSFTDatasetConfig(seq_length=64, hf_processor_path="p", **{inbatch[0]: inbatch[1]})), f"{s.inbatch} does not need the batch")
    ctx.expect(needs(MockVLMSFTDatasetConfig(seq_length=64, hf_processor_path="p", **{mask[0]: mask[1]})), f"{s.mask} does not need the batch")
    ctx.expect(not needs(MockVLMSFTDatasetConfig(seq_length=64, hf_processor_path="p")), "a plain dataset needs the batch")
    offline = assignment(s.offline)
    ctx.expect(offline == ("enable_offline_packing", True), f"{s.offline} is not offline packing")
    got = {size: needs(_sft_dataset(**{s.size: size})) for size in (None, s.zero - 1, s.zero, s.zero + 1)}
    ctx.expect(got == {None: True, s.zero - 1: False, s.zero: False, s.zero + 1: True}, f"offline packing needs the batch for {got}")
    t = ctx.read(
        "Then it reads the batch with `{full:code}` and returns the `{cu:code}` of the packed documents, so attention on that stage stays inside each document."
    )
    cfg = tiny_config()
    cfg.dataset = MockVLMSFTDatasetConfig(seq_length=64, hf_processor_path="p", **{inbatch[0]: inbatch[1]})
    out, read = _get_batch_run(cfg, pp=4, rank=1, vp_stage=None, vpp=None)
    name, value = assignment(t.full)
    ctx.expect(read is not None and read[name] == value and isinstance(out[5], dict) and t.cu in out[5], f"a middle stage reads {read} and returns {out[5]}")
    ctx.says(
        "The tracker reports an abnormally low SFT loss with packed data at a large pipeline size from releases whose middle stages skipped the batch and attended across documents; in this release they do not."
    )


# --- references/pp-layout.md -------------------------------------------------------------------------


@claim("overlap-pp-layout-empty-stage")
def pp_layout_empty_stage(ctx: Context) -> None:
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout as Layout

    r = ctx.read("**Empty stages are accepted, and stage `{i:code}` belongs to rank `{rule:code}`.**")
    s = ctx.read(
        "megatron-core's `{cls:code}` splits the unrolled layout string on every `{sep:code}`, so `{double:code}` or a trailing `{sep2:code}` makes an empty stage, and the model config accepts it."
    )
    ctx.expect(s.cls == Layout.__name__ and s.sep == s.sep2 and s.double == s.sep * 2, f"{s.cls}, {s.sep}, {s.double}")
    middle, trailing = f"Et{s.double}tL", f"Et{s.sep}tL{s.sep}"
    ctx.expect(Layout.parse_str_to_list(middle)[1] == [] and Layout.parse_str_to_list(trailing)[-1] == [], f"{middle} or {trailing} has no empty stage")
    for layout in (middle, trailing):
        _tc(num_layers=2, pipeline_model_parallel_size=3, pipeline_model_parallel_layout=layout)  # accepted
    t = ctx.read(
        "Stage `{i:code}` is built by pipeline rank `{rank:code}` as its virtual stage `{vstage:code}`, so at PP {pp:int} with {stages:int} stages the last rank builds stages {a:int} and {b:int}."
    )
    ctx.expect(t.i == r.i and r.rule == f"{t.i} % PP" and t.rank == f"{t.i} % pipeline_model_parallel_size", f"{r.rule} and {t.rank} are not the same rule")
    text = "|".join("E" if k == 0 else ("t" * k + ("L" if k == 7 else "")) for k in range(8))  # stage k holds k decoder layers
    built = Layout(text, 4)
    for k in range(8):
        env = {t.i: k, "pipeline_model_parallel_size": 4}
        rank = eval(compile(ast.parse(t.rank, mode="eval"), "<skill>", "eval"), {}, env)  # noqa: S307 - the skill's arithmetic
        vstage = eval(compile(ast.parse(t.vstage, mode="eval"), "<skill>", "eval"), {}, env)  # noqa: S307
        ctx.expect(str(built.layout[rank][vstage]).count("decoder") == k, f"stage {k} is not rank {rank}'s virtual stage {vstage}")
    owned = [k for k in range(t.stages) if eval(compile(ast.parse(t.rank, mode="eval"), "<skill>", "eval"), {}, {t.i: k, "pipeline_model_parallel_size": t.pp}) == t.pp - 1]  # noqa: S307
    ctx.expect(owned == [t.a, t.b], f"at PP {t.pp} with {t.stages} stages the last rank builds {owned}")
    u = ctx.read(
        "The layout checks want the embedding first and the loss last, each exactly once, and as many decoder layers as `{field:code}`: `{one:code}` and `{two:code}` hold {held:int} decoder layers, "
        "so a {n:int}-layer model fails with `{error:code}` (the missing space is in the message)."
    )
    for bad, message in (("tE|tL", "The first layer must be embedding"), ("Et|Lt", "The last layer must be loss"), ("EEt|tL", "Embedding must be specified exactly once"), ("Et|LtL", "Loss must be specified exactly once")):
        try:
            Layout(bad, 2).validate_layer_layout(num_layers=bad.count("t"), mtp_num_layers=None)
        except AssertionError as error:
            ctx.expect(str(error).startswith(message), f"{bad} fails with {error}")
        else:
            raise ClaimFailed(f"the layout checks accept {bad}")
    ctx.expect(u.one != u.two, "the sentence names one layout twice")
    for layout in (u.one, u.two):
        stages = Layout.parse_str_to_list(layout)
        ctx.expect(len(stages) == t.stages and sum(str(st).count("decoder") for st in stages) == u.held, f"{layout} has {len(stages)} stages")
        _raises(ctx, lambda layout=layout: _tc(**{u.field: u.n, "pipeline_model_parallel_size": t.pp, "pipeline_model_parallel_layout": layout}), u.error)
    ctx.expect(f" {u.held}must" in u.error and u.error.endswith(f" {u.n}"), "the message names other counts")
    v = ctx.read("For the last rank to build only the loss, its other stage must be empty too: `{good:code}` at PP {pp:int} builds no decoder layer on rank {rank:int}.")
    good = _tc(**{u.field: u.n, "pipeline_model_parallel_size": v.pp, "pipeline_model_parallel_layout": v.good})
    layout = good.pipeline_model_parallel_layout
    ctx.expect(v.rank == v.pp - 1 and v.pp == t.pp, f"rank {v.rank} is not the last at PP {v.pp}")
    ctx.expect([layout.get_num_layers_to_build(pp_rank=v.rank, vp_stage=k) for k in range(2)] == [0, 0] and str(layout.layout[v.rank]).count("loss") == 1, f"{v.good} builds {layout.layout[v.rank]} on rank {v.rank}")
    ctx.expect([] in layout.layout[v.rank], f"{v.good} leaves no empty stage on rank {v.rank}")
    ctx.says("The upstream issue also reports hangs with empty stages; nothing in the installed code rejects them, so try such a layout on a short run first.")


# --- references/cuda-graph-capture.md ----------------------------------------------------------------


def _train_module():
    from megatron.bridge.training import train as train_module

    return train_module


def _module_tree(module: str) -> ast.AST:
    """The installed source of a module, read from its file without importing it (Bridge's
    pretrain module imports nvidia_resiliency_ext, which a CPU machine lacks)."""
    return ast.parse(Path(importlib.util.find_spec(module).origin).read_text("utf-8"))


def _function(tree: ast.AST, name: str) -> ast.FunctionDef:
    found = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name]
    if len(found) != 1:
        raise ClaimFailed(f"the module defines {len(found)} functions named {name}")
    return found[0]


def _graph_resolve(**fields):
    cfg = tiny_config()
    for name, value in fields.items():
        setattr(cfg.model, name, value)
    cfg.rerun_state_machine.check_for_nan_in_loss = False
    return resolve(cfg, world_size=1)


@claim("overlap-te-graph-capture-shapes")
def te_graph_capture_shapes(ctx: Context) -> None:
    import typing

    from megatron.core.transformer import TransformerConfig

    r = ctx.read(
        "**Transformer Engine graphs are captured once, at fixed shapes.** megatron-core's `{field:code}` takes `{a:code}` (the default), `{b:code}`, `{c:code}` or `{d:code}`."
    )
    cls, name = r.field.split(".")
    ctx.expect(cls == TransformerConfig.__name__, f"{cls} is not megatron-core's TransformerConfig")
    allowed = typing.get_args(typing.get_type_hints(TransformerConfig)[name])
    ctx.expect(list(allowed) == [literal(x) for x in (r.a, r.b, r.c, r.d)], f"{r.field} takes {allowed}")
    ctx.expect({f.name: f.default for f in dataclasses.fields(TransformerConfig)}[name] == literal(r.a), f"{r.field} defaults otherwise")
    s = ctx.read(
        "Set on the model, `{local:code}` fails Bridge's validation unless it is a full-iteration graph, so per-layer graphs in training, SFT included, need `{te:code}`."
    )
    local, te = assignment(s.local), assignment(s.te)
    ctx.expect(local == (name, literal(r.b)) and te == (name, literal(r.c)), f"{s.local} / {s.te} are not the values above")
    try:
        _graph_resolve(**dict([local]))
    except ValueError as error:
        ctx.expect("only for full-iteration CUDA graphs" in str(error), f"{s.local} fails with {error}")
    else:
        raise ClaimFailed(f"{s.local} passes Bridge's validation")
    ctx.expect(_graph_resolve(**dict([te])).model.cuda_graph_impl == te[1], f"{s.te} does not pass")
    ctx.expect(_graph_resolve(**{name: literal(r.d)}).model.cuda_graph_impl == literal(r.d), "a full-iteration graph does not pass")
    t = ctx.read(
        "With it Bridge's `{train:code}` builds a `{helper:code}` with `{seq:code}` and `{mbs:code}`, and calls its `{create:code}` once, "
        "when the steps run since the start equal `{warm:code}` (default `{default:code}`)."
    )
    tree = ast.parse(textwrap.dedent(_source(f"megatron.bridge.training.train.{t.train.removesuffix('()')}")))
    kwargs = next((n.value for n in ast.walk(tree) if isinstance(n, ast.AnnAssign) and ast.unparse(n.target) == "_te_cg_kwargs"), None)
    given = {k.arg: ast.unparse(k.value) for k in kwargs.keywords} if isinstance(kwargs, ast.Call) else {}
    for text, key in ((t.seq, "seq_length"), (t.mbs, "micro_batch_size")):
        ctx.expect(text == f"{key}={given.get(key)}", f"{t.train} gives {t.helper} {key}={given.get(key)}, not {text}")
    ctx.expect(_calls(tree, t.helper) and t.helper == "TECudaGraphHelper", f"{t.train} does not build {t.helper}")
    gates = [n for n in ast.walk(tree) if isinstance(n, ast.If) and _calls(n, f"cuda_graph_helper.{t.create.removesuffix('()')}") and "cuda_graph_helper.graphs_created()" in ast.unparse(n.test)]
    ctx.expect(len(gates) == 1 and f"global_state.train_state.step - start_iteration == model_config.{t.warm}" in ast.unparse(gates[0].test) and "not cuda_graph_helper.graphs_created()" in ast.unparse(gates[0].test), f"{t.create} is not called once after {t.warm} steps")
    ctx.expect({f.name: f.default for f in dataclasses.fields(TransformerConfig)}[t.warm] == literal(t.default) == tiny_config().model.cuda_graph_warmup_steps, f"{t.warm} defaults otherwise")
    u = ctx.read(
        "The helper allocates each layer's static inputs from that sequence length and micro-batch size, so every micro-batch replayed must have that shape: sequence lengths or batch sizes that change between steps do not fit."
    )
    ctx.expect("layer.get_layer_static_inputs(self.seq_length, self.micro_batch_size)" in _squash(_source("megatron.core.transformer.cuda_graphs.TECudaGraphHelper._get_sample_arguments")), "the static inputs are not sized from seq_length and micro_batch_size")
    v = ctx.read("Neither Bridge nor the installed Megatron-LM arguments know `{x:code}` or `{y:code}`.")
    arguments = Path(importlib.util.find_spec("megatron.training.arguments").origin).read_text("utf-8")
    ctx.expect(v.x != v.y and all(re.fullmatch(r"[a-z]+(_[a-z]+)+", flag) for flag in (v.x, v.y)), f"{v.x} / {v.y} are not two option names")
    for flag in (v.x, v.y):
        named = [p.name for p in _package_files("megatron.bridge") if flag in p.read_text("utf-8")]
        ctx.expect(not named and flag not in arguments and flag.replace("_", "-") not in arguments, f"{flag} is named in {named or 'megatron.training.arguments'}")


def _packed_sft_resolve(impl: str, modules, pad: bool, pad_cu: bool):
    from megatron.bridge.data.packing.config import PackedSequenceSpecs

    cfg = tiny_config()
    cfg.model.cuda_graph_impl = impl
    if modules is not None:
        cfg.model.cuda_graph_modules = modules
    cfg.dataset = _sft_dataset(enable_offline_packing=True, offline_packing_specs=PackedSequenceSpecs(packed_sequence_size=64, pad_cu_seqlens=pad_cu), dataset_kwargs={"pad_to_max_length": pad})
    cfg.rerun_state_machine.check_for_nan_in_loss = False
    return resolve(cfg, world_size=1)


@claim("overlap-graph-offline-packing")
def graph_offline_packing(ctx: Context) -> None:
    ctx.says("**SFT with offline packing must pad for training graphs.**")
    r = ctx.read("With a full-iteration graph or `{te:code}`, `{fn:code}` raises `{error:code}` without padding, and when the graphs include attention (full iteration, whole layers or `{attn:code}`) it raises `{error2:code}`")
    ctx.expect(r.fn == "cfg.validate()", f"{r.fn} is not the validation")
    _, impl = assignment(r.te)
    for graph in (impl, "full_iteration"):
        _raises(ctx, lambda graph=graph: _packed_sft_resolve(graph, None, False, False), r.error)
        _raises(ctx, lambda graph=graph: _packed_sft_resolve(graph, None, True, False), r.error2)
    _raises(ctx, lambda: _packed_sft_resolve(impl, [literal(r.attn)], True, False), r.error2)
    _packed_sft_resolve("none", None, False, False)  # no graph, no padding needed
    s = ctx.read("With `{cls:code}` the first is `{pad:code}` and the second `{spec:code}`; graphs of `{mlp:code}` only need the first.")
    ctx.expect(s.cls == "GPTSFTDatasetConfig" and s.pad == 'dataset_kwargs={"pad_to_max_length": True}' and s.spec == "PackedSequenceSpecs(pad_cu_seqlens=True)", f"{s.pad} / {s.spec} are not what the run below sets")
    _packed_sft_resolve(impl, None, True, True)
    _packed_sft_resolve(impl, [literal(s.mlp)], True, False)
    _raises(ctx, lambda: _packed_sft_resolve(impl, [literal(s.mlp)], False, False), r.error)


class _Stop(Exception):
    pass


def _captured(pp: int, chunks: int, microbatches: int, count_only: bool = False, **config):
    """Run TECudaGraphHelper._get_cuda_graph_input_data on a helper without Transformer
    Engine (its __init__ asserts TE) up to the sample arguments: the micro-batch count and the
    order it captures in."""
    import torch.distributed as dist
    from megatron.core.transformer import cuda_graphs

    group = _Group(pp, 0)
    helper = object.__new__(cuda_graphs.TECudaGraphHelper)
    fields = dict(overlap_moe_expert_parallel_comm=False, microbatch_group_size_per_vp_stage=pp)
    fields.update(config)
    helper.config = types.SimpleNamespace(**fields)
    helper.pp_group, helper.tp_group, helper.dp_cp_group = group, None, None
    helper.num_model_chunks = chunks
    helper.p2p_communicator = _fake_communicator(pp, 0, chunks if chunks > 1 else None)
    seen = {}

    def stop(order, chunk_id_list=None):
        seen.update(order=list(order), microbatches=helper.num_microbatches)
        raise _Stop

    helper._get_sample_arguments = stop
    from megatron.core.pipeline_parallel import schedules

    counts = schedules.get_pp_rank_microbatches

    def count(num_microbatches, *args, **kwargs):
        seen["microbatches"] = num_microbatches
        if count_only:
            raise _Stop
        return counts(num_microbatches, *args, **kwargs)

    with (
        mock.patch.object(schedules, "get_pp_rank_microbatches", count),
        mock.patch.object(cuda_graphs, "get_num_microbatches", lambda: microbatches),
        mock.patch.object(cuda_graphs, "log_on_each_pipeline_stage", lambda **kw: None),
        mock.patch.object(dist, "get_rank", lambda *a, **k: 0),
    ):
        try:
            helper._get_cuda_graph_input_data()
        except _Stop:
            pass
    return seen


@claim("overlap-te-graph-capture-microbatches")
def te_graph_capture_microbatches(ctx: Context) -> None:
    from megatron.core.pipeline_parallel.schedules import get_pp_rank_microbatches

    ctx.says("**With PP every micro-batch of a step is captured.**")
    r = ctx.read(
        "`{helper:code}` captures {one:int} micro-batch when the pipeline size is {pp1:int} (and `{ep:code}` is off) and otherwise `{count:code}` of them, ordered as the pipeline schedule runs them, interleaved with VPP."
    )
    ctx.expect(r.helper == "TECudaGraphHelper" and r.count == "get_num_microbatches()", f"{r.helper} / {r.count}")
    ctx.expect(_captured(r.pp1, 1, 8)["microbatches"] == r.one, f"at pipeline size {r.pp1} the helper captures {_captured(r.pp1, 1, 8)['microbatches']}")
    ctx.expect(_captured(r.pp1, 1, 8, count_only=True, **{r.ep: True}).get("microbatches") != r.one, f"with {r.ep} the helper still captures {r.one}")
    for pp, chunks in ((r.pp1 + 1, 1), (4, 2)):
        seen = _captured(pp, chunks, 8)
        warm = get_pp_rank_microbatches(8, chunks, pp, p2p_communicator=_fake_communicator(pp, 0, chunks if chunks > 1 else None))[2]
        first_backward = next(i for i, c in enumerate(seen["order"]) if c < 0)
        ctx.expect(seen["microbatches"] == 8 and len(seen["order"]) == 2 * 8 * chunks and first_backward == warm + 1, f"PP {pp}, {chunks} chunks: {seen}")  # warm-up forwards, then one forward and its first backward
        ctx.expect(chunks == 1 or set(seen["order"][:first_backward]) == set(range(1, chunks + 1)), "the forwards of the chunks are not interleaved")
    s = ctx.read(
        "`{create:code}` passes all layers to one `{mgc:code}` call with one set of static inputs per layer and micro-batch, and gives each layer one graph per micro-batch; "
        "`{sample:code}` lets a micro-batch reuse the input buffers of one whose backward has already run."
    )
    tree = _tree(f"megatron.core.transformer.cuda_graphs.TECudaGraphHelper.{s.create.removesuffix('()')}")
    calls = _calls(tree, s.mgc)
    ctx.expect(len(calls) == 1 and ast.unparse(calls[0].args[0]) == "tuple(self.flattened_callables)", f"{s.create} calls {s.mgc} {len(calls)} times")
    ctx.expect("for batch_number in range(self.num_microbatches): " in _squash(ast.unparse(tree)) and "layer.cuda_graphs.append(graphs[graph_idx])" in ast.unparse(tree), f"{s.create} does not give each layer one graph per micro-batch")
    doc = _squash(inspect.getdoc(resolve_symbol(f"megatron.core.transformer.cuda_graphs.TECudaGraphHelper.{s.sample}")) or "")
    ctx.expect("static input tensors for each (layer, microbatch) pair" in doc and "once a microbatch's backward pass completes, its input buffers are no longer needed" in doc, f"{s.sample} does not reuse buffers")
    t = ctx.read(
        "Bridge's `{recipe:code}` (TP {tp:int}, PP {pp:int}, VPP {vpp:int}, graphs of `{scope:code}`, global batch {gbs:int} at micro-batch {mbs:int} on {gpus:int} GPUs) "
        "therefore captures {m:int} micro-batches for every layer a rank holds, where PP {pp1:int} would capture {one:int}, and an out-of-memory error right after `{warm:code}` comes from that capture."
    )
    recipe = _function(_module_tree("megatron.bridge.perf_recipes.llama.gb200.llama3"), t.recipe)
    sets = {ast.unparse(n.targets[0]): ast.unparse(n.value) for n in recipe.body if isinstance(n, ast.Assign)}
    stated = {
        "cfg.model.tensor_model_parallel_size": str(t.tp), "cfg.model.pipeline_model_parallel_size": str(t.pp), "cfg.model.virtual_pipeline_model_parallel_size": str(t.vpp),
        "cfg.model.context_parallel_size": "1", "cfg.model.cuda_graph_impl": "'transformer_engine'", "cfg.model.cuda_graph_scope": ast.unparse(ast.parse(t.scope, mode="eval")),
        "cfg.train.global_batch_size": str(t.gbs), "cfg.train.micro_batch_size": str(t.mbs),
    }
    ctx.expect(all(sets.get(k) == v for k, v in stated.items()), f"{t.recipe} sets {[(k, sets.get(k)) for k in stated]}")
    ctx.expect(f"_{t.gpus}gpu_" in t.recipe, f"{t.recipe} is not a {t.gpus}-GPU recipe")
    for helper_name in ("megatron.bridge.perf_recipes.llama.common._llama_benchmark_common", "megatron.bridge.perf_recipes._common._benchmark_common"):
        body = _squash(_source(helper_name))
        ctx.expect(not re.search(r"(global_batch_size|micro_batch_size|pipeline_model_parallel_size) =", body), f"{helper_name} changes the layout")
    from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator

    calculator = ConstantNumMicroBatchesCalculator(global_batch_size=t.gbs, micro_batch_size=t.mbs, data_parallel_size=t.gpus // (t.tp * t.pp), decrease_batch_size_if_needed=False, rank=0)
    ctx.expect(calculator.get() == t.m, f"that layout runs {calculator.get()} micro-batches per step")
    seen = _captured(t.pp, t.vpp, t.m, microbatch_group_size_per_vp_stage=t.pp)
    ctx.expect(seen["microbatches"] == t.m and len(seen["order"]) == 2 * t.m * t.vpp, f"PP {t.pp}, VPP {t.vpp} captures {seen.get('microbatches')}")
    ctx.expect(t.pp1 == r.pp1 and t.one == r.one, "the comparison is not with the pipeline-free capture above")
    ctx.expect(t.warm == "cuda_graph_warmup_steps" and hasattr(tiny_config().model, t.warm), f"{t.warm} is not the warm-up field")
    u = ctx.read("To lower it, capture less with `{modules:code}` (for example `{example:code}`, not whole layers) or run fewer micro-batches per step.")
    from megatron.core.transformer.enums import CudaGraphModule

    names = literal(u.example)
    ctx.expect(all(name in CudaGraphModule.__members__ for name in names), f"{u.example} are not graph modules")
    cfg = _graph_resolve(cuda_graph_impl="transformer_engine", **{u.modules: names})
    ctx.expect([m.name for m in cfg.model.cuda_graph_modules] == names, f"{u.modules} comes out {cfg.model.cuda_graph_modules}")
    ctx.says("The tracker reports a Transformer Engine change that reduces the memory its capture keeps for this interleaved order and that removed such an error.")


@claim("overlap-cuda-graph-teardown")
def cuda_graph_teardown(ctx: Context) -> None:
    from megatron.core.full_cuda_graph import FullCudaGraphWrapper
    from megatron.core.transformer import cuda_graphs

    train_module = _train_module()
    ctx.says("**Graphs can outlive training.**")
    r = ctx.read(
        "`{old:code}` becomes `{local:code}` when the model config is finalized, after Bridge's first check of the graph settings, and passes `{rcu:code}` as per-layer graphs of whole layers (`{modules:code}` comes out `{empty:code}`), "
        "although `{local2:code}` set directly is rejected."
    )
    cfg = _graph_resolve(**dict([assignment(r.old)]))
    name, value = assignment(r.local)
    ctx.expect(r.local == r.local2 and getattr(cfg.model, name) == value and getattr(cfg.model, r.modules) == literal(r.empty), f"{r.old} comes out {getattr(cfg.model, name)}, {getattr(cfg.model, r.modules)}")
    ctx.expect(r.rcu == "runtime_config_update()", f"{r.rcu} is not the resolution")
    from megatron.bridge.training.config import ConfigContainer

    validate = _squash(_source("megatron.bridge.training.config.ConfigContainer.validate"))
    first_check, finalized = validate.find("validate_cuda_graph_configuration(self.model)"), validate.find("self.model.finalize()")
    ctx.expect(0 <= first_check < finalized and callable(ConfigContainer.validate), "Bridge checks the graph settings only after the model is finalized")
    try:
        _graph_resolve(**{name: value})
    except ValueError:
        pass
    else:
        raise ClaimFailed(f"{r.local} set directly passes")
    s = ctx.read(
        "Bridge frees graphs in one place, `{fn:code}`, which `{train:code}` calls at its end; its docstring says they hold references to NCCL buffers that block `{destroy:code}`."
    )
    bridge = [p.name for p in _package_files("megatron.bridge") if f"{s.fn}(" in p.read_text("utf-8")]
    ctx.expect(bridge == ["train.py"], f"{s.fn} appears in {bridge}")
    train_def = _function(_module_tree("megatron.bridge.training.train"), s.train.removesuffix("()"))
    top = [ast.unparse(n) for n in train_def.body]
    called = [i for i, stmt in enumerate(top) if stmt.startswith(f"{s.fn}(")]
    loop = max(i for i, n in enumerate(train_def.body) if isinstance(n, ast.While))
    ctx.expect(len(called) == 1 and called[0] > loop, f"{s.train} does not call {s.fn} after its loop")
    doc = _squash(inspect.getdoc(getattr(train_module, s.fn)) or "")
    ctx.expect("nccl buffers" in doc and f"{s.destroy.rsplit('.', 1)[-1]}" in doc and s.destroy.startswith("torch.distributed."), f"the docstring of {s.fn} says {doc!r}")
    t = ctx.read(
        "It deletes `{train_graph:code}`, the optimizer graph and the Transformer Engine helper's graphs, but never calls megatron-core's `{core:code}`, which frees the local per-layer graphs, nor the `{val:code}` full-iteration graph."
    )
    saved = dict(FullCudaGraphWrapper.cuda_graph)
    key = ast.literal_eval(ast.parse(t.train_graph, mode="eval").body.slice)
    try:
        FullCudaGraphWrapper.cuda_graph.update({key: object(), literal(t.val): object()})
        helper = mock.MagicMock()
        helper.graphs_created.return_value = True
        with mock.patch.object(cuda_graphs, t.core.removesuffix("()")) as core_delete:
            getattr(train_module, s.fn)(helper)
        ctx.expect(key not in FullCudaGraphWrapper.cuda_graph and FullCudaGraphWrapper.cuda_graph.get(literal(t.val)) is not None, f"{s.fn} leaves {FullCudaGraphWrapper.cuda_graph}")
        ctx.expect(helper.delete_cuda_graphs.called and not core_delete.called, f"{s.fn} frees the helper's graphs: {helper.delete_cuda_graphs.called}, megatron-core's: {core_delete.called}")
    finally:
        FullCudaGraphWrapper.cuda_graph.clear()
        FullCudaGraphWrapper.cuda_graph.update(saved)
    ctx.expect("OptimizerCudaGraphWrapper.cuda_graph = None" in _squash(_source(f"megatron.bridge.training.train.{s.fn}")), f"{s.fn} does not free the optimizer graph")
    ctx.expect("_CudagraphGlobalRecord.cudagraph_record = []" in _squash(_source(f"megatron.core.transformer.cuda_graphs.{t.core.removesuffix('()')}")), f"{t.core} does not free the local graphs")
    u = ctx.read(
        "After `{train:code}`, `{pre:code}` runs the final evaluation on the validation and test sets when it has them, then `{finish:code}`, which calls `{dgs:code}` (it destroys the model-parallel groups) and deletes no graph."
    )
    pre = _function(_module_tree("megatron.bridge.training.pretrain"), u.pre)
    order = [ast.unparse(c.func) for c in sorted((n for n in ast.walk(pre) if isinstance(n, ast.Call)), key=lambda c: (c.lineno, c.col_offset))]
    wanted = [u.train.removesuffix("()"), "evaluate_and_print_results", "evaluate_and_print_results", u.finish]
    ctx.expect([c for c in order if c in wanted] == wanted, f"{u.pre} calls {[c for c in order if c in wanted]}")
    tests = [ast.unparse(n.test) for n in ast.walk(pre) if isinstance(n, ast.If) and _calls(n, "evaluate_and_print_results")]
    ctx.expect(tests == ["state.train_state.do_valid", "state.train_state.do_test"], f"the final evaluation runs when {tests}")
    finish = _function(_module_tree("megatron.bridge.training.train"), u.finish)
    finish_calls = [ast.unparse(n.func) for n in ast.walk(finish) if isinstance(n, ast.Call)]
    ctx.expect(u.dgs.removesuffix("()") in finish_calls and not [c for c in finish_calls if "graph" in c.lower()], f"{u.finish} calls {finish_calls}")
    ctx.expect("parallel_state.destroy_model_parallel()" in _squash(_source(f"megatron.bridge.training.initialize.{u.dgs.removesuffix('()')}")), f"{u.dgs} keeps the groups")
    v = ctx.read("No setting changes this; free the graphs before that call yourself, for example by wrapping it before `{pretrain:code}`:")
    ctx.expect(v.pretrain == "pretrain()", f"{v.pretrain} is not the entry point")
    original = train_module.destroy_global_state
    state = {}

    def destroyed():
        state.update(validation=FullCudaGraphWrapper.cuda_graph.get(literal(t.val)), training=key in FullCudaGraphWrapper.cuda_graph, local=cuda_graphs._CudagraphGlobalRecord.cudagraph_created)

    saved = dict(FullCudaGraphWrapper.cuda_graph)
    try:
        train_module.destroy_global_state = destroyed
        FullCudaGraphWrapper.cuda_graph.update({key: object(), literal(t.val): object()})
        cuda_graphs._CudagraphGlobalRecord.cudagraph_created = True
        namespace: dict = {}
        exec(compile(ctx.code(0), "cuda-graph-capture.md", "exec"), namespace)  # noqa: S102 - the skill's block, as a user pastes it
        with mock.patch.object(train_module, "safe_shutdown_nvrx_straggler_manager"), mock.patch.object(train_module, "fault_tolerance"):
            getattr(train_module, u.finish)(mock.MagicMock(), mock.MagicMock())
        ctx.expect(state == {"validation": None, "training": False, "local": False}, f"at {u.dgs} the graphs are {state}")
    finally:
        train_module.destroy_global_state = original
        cuda_graphs._CudagraphGlobalRecord.cudagraph_created = False
        FullCudaGraphWrapper.cuda_graph.clear()
        FullCudaGraphWrapper.cuda_graph.update(saved)
    w = ctx.read("The tracker reports a later Bridge change that deletes the graphs in `{finish:code}`.")
    ctx.expect(w.finish == u.finish, "the sentence names another function")


# --- references/tp-userbuffers.md and tp-bring-up.md -------------------------------------------------


def _bootstrap(model_config, te_version: str):
    from .overlap_topics import _bootstrap as run

    return run(model_config, te_version)[0]


def _pipeline_entry(**fields):
    return comm_overlap_module().PipelineOverlapCfg(num_sm=24, cga_size=2, num_splits=4, set_sm_margin=True, **fields)


@claim("overlap-tp-fp8-buf")
def tp_fp8_buf(ctx: Context) -> None:
    co = comm_overlap_module()
    r = ctx.read(
        "**FP8 output buffers.** The default `{default:code}` of `{field:code}` is truthy, so a `{cls:code}` that does not set `{name:code}` hands Transformer Engine a true value; "
        "`{ring:code}` defaults to `{ring_default:code}`, and `{bulk:code}` has no such field."
    )
    cls, name = r.field.split(".")
    ctx.expect(cls == r.cls and name == r.name, f"{r.field} is not {r.cls}.{r.name}")
    value = getattr(_pipeline_entry(), name)
    ctx.expect(value == literal(r.default) and bool(value) and type(value) is tuple, f"{r.field} defaults to {value!r}")
    ring_cls, ring_name = r.ring.split(".")
    ctx.expect(ring_name == name and getattr(getattr(co, ring_cls)(), name) is literal(r.ring_default), f"{r.ring} defaults otherwise")
    ctx.expect(name not in {f.name for f in dataclasses.fields(getattr(co, r.bulk))} and r.bulk.endswith("OverlapCfg"), f"{r.bulk} has {name}")
    s = ctx.read("`{setup:code}` copies the value unchanged into the model's dict (`{entry:code}`).")
    layer = co.TransformerLayerTPOverlapCfg(**{f.name: _pipeline_entry() for f in dataclasses.fields(co.TransformerLayerTPOverlapCfg)})
    cfg = tiny_config(tp=2, sp=True)
    cfg.comm_overlap = overlap(tp_comm_overlap=True, tp_comm_overlap_cfg=layer)
    ctx.expect(s.setup == "setup()", f"{s.setup} is not CommOverlapConfig.setup()")
    run_setup(cfg, 2, te=True)
    key, stated = s.entry.split(": ", 1)
    ctx.expect(cfg.model.tp_comm_overlap_cfg["proj_fprop"][literal(key)] == literal(stated), f"the model's dict holds {cfg.model.tp_comm_overlap_cfg['proj_fprop']}")
    t = ctx.read(
        "With Transformer Engine {version:version} or newer, `{fn:code}` passes `{ub:code}` `{fp8:code}` when `{flag:code}` is set and `{none_modes:code}` when it is `{none:code}`, "
        "with `{extra:code}` added for FP8 runs whose first or last layers stay in bf16; older releases get `{old:code}` instead."
    )
    ctx.expect(t.ub == "initialize_ub" and t.fn == "_initialize_tp_communicators" and t.flag == "cfg.model.fp8" and literal(t.none) is None, f"{t.fn}/{t.ub}/{t.flag}")
    modes = types.SimpleNamespace(FP8="fp8", NONE="none")  # the stand-in's enumeration (overlap_topics._bootstrap)

    def stated_modes(text: str):
        key, value = text.split("=", 1) if "=" in text else ("quantization_modes", text)
        return key, [getattr(modes, ast.unparse(e).split(".")[-1]) for e in ast.parse(value, mode="eval").body.elts]

    key, fp8_modes = stated_modes(t.fp8)
    _, plain_modes = stated_modes(t.none_modes)
    model = tiny_config(tp=2, sp=True).model
    model.fp8 = "hybrid"
    ctx.expect(_bootstrap(model, t.version)["initialize_ub"].get(key) == fp8_modes, f"an FP8 model gets {_bootstrap(model, t.version)['initialize_ub']}")
    model.first_last_layers_bf16, model.num_layers_at_start_in_bf16 = True, 1
    ctx.expect(_bootstrap(model, t.version)["initialize_ub"].get(key) == fp8_modes + [getattr(modes, t.extra)], f"bf16 first layers give {_bootstrap(model, t.version)['initialize_ub']}")
    plain = tiny_config(tp=2, sp=True).model
    ctx.expect(_bootstrap(plain, t.version)["initialize_ub"].get(key) == plain_modes, f"a bf16 model gets {_bootstrap(plain, t.version)['initialize_ub']}")
    older = _bootstrap(plain, t.version + ".dev0")["initialize_ub"]
    ctx.expect(t.old in older and key not in older, f"an older Transformer Engine gets {older}")
    ctx.says(
        "Whether the linear layers then write FP8 into the buffers is decided inside Transformer Engine: the tracker reports that a refactor of its linear layers stopped honouring",
        "with userbuffers and that a later release restored it.",
    )
    u = ctx.read("`{name:code}` with userbuffers and that a later release restored it. Set `{name2:code}` on every `{cls:code}` you write, to `{t:code}` or `{f:code}`, instead of relying on its default.")
    ctx.expect(u.name == u.name2 == name and u.cls == r.cls and (literal(u.t), literal(u.f)) == (True, False), "the advice names another field")
    for explicit in (True, False):
        ctx.expect(getattr(_pipeline_entry(**{name: explicit}), name) is explicit, f"{name}={explicit} is not kept")


def _sm_margin_dicts():
    """(file, FWD value, BWD value) for every dict literal of megatron.bridge with the two keys."""
    found, other = [], []
    for path in _package_files("megatron.bridge"):
        text = path.read_text("utf-8")
        if "LAYERNORM_SM_MARGIN" not in text:
            continue
        tree = ast.parse(text)
        keys = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict):
                entries = {k.value: v for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant) and isinstance(k.value, str)}
                margin = {k: literal(ast.unparse(v)) for k, v in entries.items() if "LAYERNORM_SM_MARGIN" in k}
                if margin:
                    found.append((path, margin.get("NVTE_FWD_LAYERNORM_SM_MARGIN"), margin.get("NVTE_BWD_LAYERNORM_SM_MARGIN")))
                    keys.update(id(k) for k in node.keys)
        other += [path.name for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and "LAYERNORM_SM_MARGIN" in n.value and id(n) not in keys]
    return found, other


@claim("overlap-tp-sm-margin")
def tp_sm_margin(ctx: Context) -> None:
    ctx.says("**What the LayerNorm SM margins do.**")
    r = ctx.read(
        "`{fwd:code}` and `{bwd:code}` are read by Transformer Engine only: in `{bridge:code}` they appear only as keys of recipes' `{env:code}`, and no file of `{core:code}` names them."
    )
    ctx.expect(r.fwd.startswith("NVTE_FWD_") and r.bwd.startswith("NVTE_BWD_") and r.fwd[len("NVTE_FWD_"):] == r.bwd[len("NVTE_BWD_"):] == "LAYERNORM_SM_MARGIN", f"{r.fwd} / {r.bwd}")
    found, other = _sm_margin_dicts()
    ctx.expect(r.bridge == "megatron.bridge" and found and not other, f"{r.bridge} names them outside dict keys in {other}")
    ctx.expect(r.env == "env_vars" and hasattr(tiny_config(), r.env), f"{r.env} is not the config's environment")
    ctx.expect(not [p.name for p in _package_files(r.core) if "LAYERNORM_SM_MARGIN" in p.read_text("utf-8")], f"{r.core} names them")
    ctx.says(
        "A Transformer Engine maintainer explains in the tracker that they keep that many SMs out of the LayerNorm and RMSNorm kernels of the forward and backward passes, "
        "so that whichever communication kernels run at the same time have SMs to run on, not one particular kind of p2p, and that the value is found by trial."
    )
    s = ctx.read(
        "The recipes that set them use {a:int}, {b:int} (the Qwen3 MoE recipes in `{dir_b1:code}` and `{dir_b2:code}`) or {c:int} (one recipe in `{dir_c:code}`), always the same value for both; "
        "`{common:code}` does not set them."
    )
    ctx.expect(all(f == b for _, f, b in found), "a recipe sets two different values")
    values = {f for _, f, _ in found}
    ctx.expect(values == {s.a, s.b, s.c}, f"the recipes use {sorted(values)}")
    where = lambda value: sorted({str(p.parent.relative_to(p.parents[3])) + "/" + p.name for p, f, _ in found if f == value})  # noqa: E731
    ctx.expect(where(s.b) == [f"{s.dir_b2}/qwen3_moe.py", f"{s.dir_b1}/qwen3_moe.py"] or where(s.b) == [f"{s.dir_b1}/qwen3_moe.py", f"{s.dir_b2}/qwen3_moe.py"], f"{s.b} is used in {where(s.b)}")
    ctx.expect(s.dir_b1 != s.dir_b2 and len(where(s.c)) == 1 and where(s.c)[0].startswith(s.dir_c + "/"), f"{s.c} is used in {where(s.c)}")
    common = resolve_symbol(f"megatron.bridge.recipes.utils.environment_utils.{s.common}")
    ctx.expect(isinstance(common, dict) and not any("LAYERNORM_SM_MARGIN" in k for k in common), f"{s.common} sets them")
    t = ctx.read("The userbuffers entries have their own SM settings for the GEMMs they overlap: `{x:code}` and `{y:code}` on `{c1:code}`, `{c2:code}` and `{c3:code}`.")
    co = comm_overlap_module()
    ctx.expect(t.x != t.y, "the sentence names one setting twice")
    for cls in (t.c1, t.c2, t.c3):
        names = {f.name for f in dataclasses.fields(getattr(co, cls))}
        ctx.expect({t.x, t.y} <= names, f"{cls} lacks {t.x} or {t.y}")
    ctx.expect(len({t.c1, t.c2, t.c3}) == 3 and {t.c1, t.c2, t.c3} == {"PipelineOverlapCfg", "RingExchangeOverlapCfg", "BulkOverlapCfg"}, "the sentence names other classes")


@claim("overlap-tp-fixed-seq-length")
def tp_fixed_seq_length(ctx: Context) -> None:
    from megatron.bridge.data.builders.mock_vlm_sft import MockVLMSFTDatasetConfig

    ctx.says("**TP overlap needs every micro-batch at the full length.**")
    r = ctx.read(
        "Bridge calls `{fn:code}` once, while it initializes, and the buffers it asks for hold `{tokens:code}` tokens (the shape above), so every micro-batch must carry exactly `{seq:code}` tokens per sample."
    )
    callers = [(p.name, len(_calls(ast.parse(p.read_text("utf-8")), r.fn))) for p in _package_files("megatron.bridge") if f"{r.fn}(" in p.read_text("utf-8")]
    ctx.expect(callers == [("initialize.py", 1)], f"{r.fn} is called from {callers}")
    shape = [ast.unparse(n.value) for n in ast.walk(_tree(f"megatron.bridge.training.initialize.{r.fn}")) if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "input_shape"]
    ctx.expect(shape and f"[model_config.{r.tokens} // " in shape[0] and r.tokens == f"{r.seq} * micro_batch_size", f"the buffers hold {shape}")
    ctx.says(
        "The Transformer Engine maintainers confirm in the tracker that variable lengths, packed THD batches included, are not supported with TP overlap and that sequences must be padded to a fixed length."
    )
    s = ctx.read(
        "Bridge does not pad for TP overlap: `{fn:code}` turns on `{field:code}` of a dataset config that has the field only when `{pp:code}` or `{ep:code}` is above {one:int}."
    )
    ctx.expect(s.fn == "cfg.validate()", f"{s.fn} is not the validation")
    got = {}
    for pp, ep in ((1, 1), (s.one + 1, 1), (1, s.one + 1)):
        cfg = tiny_config(tp=2, sp=True, pp=pp)
        cfg.dataset = MockVLMSFTDatasetConfig(seq_length=64, hf_processor_path="p")
        cfg.model.expert_model_parallel_size = ep
        if ep > 1:
            cfg.model.num_moe_experts = 2
        cfg.comm_overlap = overlap(tp_comm_overlap=True)
        with mock.patch.object(comm_overlap_module(), "HAVE_TE", True):
            resolve(cfg, world_size=2 * pp * ep)
        ctx.expect(cfg.model.tp_comm_overlap is True, "TP overlap did not stay on")
        got[(getattr(cfg.model, s.pp), getattr(cfg.model, s.ep))] = getattr(cfg.dataset, s.field)
    ctx.expect(got == {(1, 1): False, (s.one + 1, 1): True, (1, s.one + 1): True}, f"{s.field} comes out {got}")
    t = ctx.read("With TP overlap alone, set `{setting:code}` yourself (for `{cls:code}`, in its `{kwargs:code}`).")
    name, value = assignment(t.setting)
    ctx.expect(name == s.field and value is True, f"{t.setting} is not the field above")
    ctx.expect(t.kwargs in {f.name for f in dataclasses.fields(resolve_symbol(f"megatron.bridge.data.builders.gpt_sft.{t.cls}"))}, f"{t.cls} has no {t.kwargs}")
    ctx.expect(f'"{name}": options.pop("{name}", False)' in Path(importlib.util.find_spec("megatron.bridge.data.builders.gpt_sft").origin).read_text("utf-8"), f"{t.cls} does not read {name} from {t.kwargs}")


@claim("overlap-tp-mtp-disables")
def tp_mtp_disables(ctx: Context) -> None:
    import warnings

    from megatron.core.transformer import TransformerConfig

    ctx.says("**An unknown buffer name turns TP overlap off in the shared model config.**")
    r = ctx.read(
        "megatron-core's `{fn:code}` sets `{setting:code}` when TP overlap is on and its `{arg:code}` is none of `{a:code}`, `{b:code}`, `{c:code}` and `{d:code}`, with the warning \"{warning:quote}\" (the missing space is in the message)."
    )
    cls, method = r.fn.split(".")
    te = _module_tree("megatron.core.extensions.transformer_engine")
    init = next(n for n in ast.walk(te) if isinstance(n, ast.ClassDef) and n.name == cls)
    init = next(n for n in init.body if isinstance(n, ast.FunctionDef) and n.name == method)
    gate = [n for n in ast.walk(init) if isinstance(n, ast.If) and any(isinstance(b, ast.Assign) and ast.unparse(b) == r.setting for b in n.body)]
    ctx.expect(len(gate) == 1, f"{r.fn} has {len(gate)} places that set {r.setting}")
    code = compile(ast.Module(body=[gate[0]], type_ignores=[]), "transformer_engine.py", "exec")

    def run(name):
        config = TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4)
        config.tp_comm_overlap = True
        holder = types.SimpleNamespace(config=config)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            exec(code, {"warnings": warnings}, {"self": holder, r.arg: name})  # noqa: S102 - the installed branch, run as is
        return config.tp_comm_overlap, [str(w.message) for w in caught]

    names = [r.a, r.b, r.c, r.d]
    ctx.expect(len(set(names)) == 4 and all(run(n) == (True, []) for n in names), f"{r.fn} turns overlap off for one of {names}")
    mtp = re.search(r"name (\S+) is", r.warning)
    kept, warned = run(mtp.group(1) if mtp else "")
    ctx.expect(kept is False and warned == [r.warning], f"{r.fn} with {mtp and mtp.group(1)} keeps {kept} and warns {warned}")
    ctx.says("That config object is the one every layer shares.")
    s = ctx.read(
        "The multi-token-prediction layer builds its `{proj:code}` with `{buffer:code}`, so with `{field:code}` set and Transformer Engine layers the config reads `{off:code}` from then on."
    )
    mtp_tree = _tree("megatron.core.transformer.multi_token_prediction.MultiTokenPredictionLayer.__init__")
    built = [n for n in ast.walk(mtp_tree) if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == f"self.{s.proj}"]
    name, value = assignment(s.buffer)
    ctx.expect(built and any(k.arg == name and ast.unparse(k.value) == repr(value) for k in built[0].value.keywords) and mtp and mtp.group(1) == value, f"{s.proj} is built with {[ast.unparse(b) for b in built]}")
    ctx.expect(s.field in {f.name for f in dataclasses.fields(TransformerConfig)} and (s.off == f"{r.setting.split('.')[-1].split(' =')[0]}=False"), f"{s.field} / {s.off}")
    t = ctx.read(
        "megatron-core's `{gpt:code}` builds its decoder before the MTP block, but Bridge's `{qwen:code}` passes the same `{config:code}` to `{sup:code}` and then rebuilds `{decoder:code}` from `{own:code}`, "
        "so every decoder layer of a Qwen3-VL model with MTP is built without TP overlap, and nothing fails."
    )
    gpt = ast.unparse(_tree(f"megatron.core.models.gpt.gpt_model.{t.gpt}.__init__")).splitlines()
    decoder_at = next(i for i, line in enumerate(gpt) if line.strip().startswith("self.decoder = "))
    mtp_at = next(i for i, line in enumerate(gpt) if line.strip().startswith("self.mtp = "))
    ctx.expect(decoder_at < mtp_at, f"{t.gpt} builds the MTP block first")
    qwen = next(n for n in ast.walk(_module_tree("megatron.bridge.models.qwen_vl.modelling_qwen3_vl.text_model")) if isinstance(n, ast.ClassDef) and n.name == t.qwen)
    qinit = next(n for n in qwen.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    body = [ast.unparse(n) for n in qinit.body]
    sup = next(i for i, line in enumerate(body) if line.startswith(t.sup.removesuffix("__init__") + "__init__("))
    ctx.expect(f"config={t.config}," in body[sup] and t.config == "config", f"{t.qwen} passes {body[sup][:80]}")
    rebuilt = next(i for i, line in enumerate(body) if line.startswith(f"{t.decoder} = "))
    ctx.expect(rebuilt > sup and f"config={t.own}" in body[rebuilt] and "deepcopy" not in "".join(body), f"{t.qwen} rebuilds {t.decoder} otherwise")
    ctx.expect(issubclass(resolve_symbol(f"megatron.bridge.models.qwen_vl.modelling_qwen3_vl.text_model.{t.qwen}"), resolve_symbol(f"megatron.core.models.gpt.gpt_model.{t.gpt}")), f"{t.qwen} is not a {t.gpt}")
    u = ctx.read(
        "In this release leave `{field:code}` unset (its default is `{default:code}`) when TP overlap matters for such a model; the tracker has an open fix that gives the parent class a copy of the config."
    )
    ctx.expect(u.field == s.field and {f.name: f.default for f in dataclasses.fields(TransformerConfig)}[u.field] == literal(u.default), f"{u.field} defaults otherwise")


@claim("overlap-tp-ub-replicas")
def tp_ub_replicas(ctx: Context) -> None:
    ctx.says(
        "**Userbuffers that fail to start only next to DP or PP replicas.** A TP size below the world size is the usual Bridge layout, so such a failure lies in Transformer Engine's bootstrap.",
        "The tracker reports that Transformer Engine fixed it in two steps (bootstrapping over Gloo where it can, then creating the bootstrap group so that ranks outside it need not join) and recommends",
    )
    r = ctx.read("recommends `{var:code}` and a `{kw:code}` passed to `{fn:code}`.")
    s = ctx.read(
        "Bridge sets neither: no file of `{p1:code}` or `{p2:code}` names `{var:code}`, and Bridge's call passes only `{a:code}`, `{b:code}`, `{c:code}`, `{d:code}` and `{e:code}`."
    )
    ctx.expect(s.var == r.var and (s.p1, s.p2) == ("megatron.bridge", "megatron.core"), "the sentence names another variable or package")
    for package in (s.p1, s.p2):
        ctx.expect(not [p.name for p in _package_files(package) if r.var in p.read_text("utf-8")], f"{package} names {r.var}")
    tree = _module_tree("megatron.bridge.training.initialize")
    calls = _calls(tree, r.fn)
    ctx.expect(len(calls) == 1 and ast.unparse(calls[0]) == f"{r.fn}(**init_process_group_kwargs)", f"Bridge calls {r.fn} as {[ast.unparse(c) for c in calls]}")
    kwargs = next(n.value for n in ast.walk(tree) if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "init_process_group_kwargs")
    keys = [k.value for k in kwargs.keys]
    import torch.distributed

    ctx.expect(keys == [s.a, s.b, s.c, s.d, s.e] and r.kw not in keys and r.kw in inspect.signature(getattr(torch.distributed, r.fn.rsplit(".", 1)[-1])).parameters, f"Bridge passes {keys}; {r.kw} is not an argument of {r.fn}")
    ctx.expect(r.fn == "torch.distributed.init_process_group", f"{r.fn} is not torch's init_process_group")
    t = ctx.read("Use a Transformer Engine with those fixes, export the variable in the launcher, and try `{cfg:code}`, which reaches `{ub:code}` as `{given:code}`.")
    from runner.claims.kit import call as parse_call

    cls, kwargs_given = parse_call(t.cfg)
    ctx.expect(cls == "CommOverlapConfig", f"{t.cfg} is not a CommOverlapConfig")
    cfg = tiny_config(tp=2, sp=True)
    cfg.comm_overlap = overlap(**kwargs_given)
    with mock.patch.object(comm_overlap_module(), "HAVE_TE", True):
        resolve(cfg, world_size=4)
    ctx.expect(cfg.model.tp_comm_overlap is True, f"{t.cfg} runs without userbuffers")
    key, value = assignment(t.given)
    got = _bootstrap(cfg.model, "2.8.0")[t.ub]
    ctx.expect(got.get(key) == value and value == kwargs_given.get("tp_comm_bootstrap_backend"), f"{t.ub} gets {key}={got.get(key)}")


# --- references/dp-grad-sync.md ----------------------------------------------------------------------


def _bucket_group(overlap_grad_reduce: bool, instances: int = 1):
    """A real _ParamAndGradBucketGroup of two parameters on a one-rank stand-in group; the
    collective itself is replaced by a handle that records nothing."""
    import torch
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.distributed.param_and_grad_buffer import _ParamAndGradBucketGroup

    params = [torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2))]
    config = DistributedDataParallelConfig(overlap_grad_reduce=overlap_grad_reduce, use_distributed_optimizer=True, num_distributed_optimizer_instances=instances)
    group = _ParamAndGradBucketGroup([types.SimpleNamespace(params_list=params)], config, _Group(1, 0), 1)

    def start(force_all_reduce=False):
        group.grad_reduce_handle = mock.MagicMock()

    group.start_grad_sync = start
    group._copy_back_extra_main_grads = lambda: None
    return group, params


@claim("overlap-grad-unused-param")
def grad_unused_param(ctx: Context) -> None:
    ctx.says("**A trainable parameter that the forward never uses breaks overlapped reduction.**")
    r = ctx.read(
        "megatron-core's DDP registers a gradient hook for every parameter with `{flag:code}`, and with `{overlap:code}` a bucket group starts its reduction only when the ready counts above match."
    )
    init = _squash(_source("megatron.core.distributed.DistributedDataParallel.__init__"))
    ctx.expect(f"for param in self.module.parameters(): if param.{r.flag}:" in init and "grad_acc.register_hook(self._make_backward_post_hook(param))" in init, f"DDP does not hook every parameter with {r.flag}")
    hook = _squash(_source("megatron.core.distributed.DistributedDataParallel._make_backward_post_hook"))
    ctx.expect(f"if self.ddp_config.{r.overlap}: self.param_to_bucket_group[param].register_grad_ready(" in hook, f"the hook does not count readiness under {r.overlap}")
    s = ctx.read(
        "A parameter with no gradient in the first batch fails `{reset:code}`, which `{zero:code}` calls before the next batch, with a bare `{exc:code}` (its `{check:code}` check has no message)."
    )
    group, (used, unused) = _bucket_group(True)
    group.register_grad_ready(used)
    group.finish_grad_sync()
    try:
        getattr(group, s.reset.removesuffix("()"))()
    except AssertionError as error:
        ctx.expect(s.exc == "AssertionError" and str(error) == "", f"{s.reset} fails with {error!r}")
    else:
        raise ClaimFailed(f"{s.reset} accepts a parameter without a gradient")
    asserts = [n for n in ast.walk(_tree(f"megatron.core.distributed.param_and_grad_buffer._ParamAndGradBucketGroup.{s.reset.removesuffix('()')}")) if isinstance(n, ast.Assert)]
    ctx.expect([ast.unparse(a.test) for a in asserts] == [s.check] and asserts[0].msg is None, f"{s.reset} asserts {[ast.unparse(a) for a in asserts]}")
    ctx.expect(f"bucket_group.{s.reset}" in _squash(_source(f"megatron.core.distributed.DistributedDataParallel.{s.zero.removesuffix('()')}")), f"{s.zero} does not call {s.reset}")
    t = ctx.read("One that stops getting a gradient later leaves its group unstarted, and `{finish:code}` raises `{error:code}` for a group of {n:int} parameters.")
    group, (used, later) = _bucket_group(True)
    group.register_grad_ready(used)
    group.register_grad_ready(later)
    group.finish_grad_sync()
    group.reset()  # the first batch's counts become the golden ones
    group.grad_reduce_handle = None
    group.register_grad_ready(used)
    ctx.expect(len(group.params) == t.n, f"the group holds {len(group.params)} parameters")
    _raises(ctx, lambda: getattr(group, t.finish.removesuffix("()"))(), t.error)
    u = ctx.read(
        "Use every trainable parameter in the forward, set `{off:code}` on those you do not use, or pass `{setting:code}` to `{cls:code}`, since Bridge turns it on with the distributed optimizer and more than {one:int} data-parallel rank."
    )
    ctx.expect(assignment(u.off) == (r.flag, False) and "self.params_with_grad.append(param)" in init and f"if not param.{r.flag}: continue" in init, f"{u.off} does not keep a parameter out of DDP")
    name, value = assignment(u.setting)
    ctx.expect(name == r.overlap and value is False and u.cls == "CommOverlapConfig", f"{u.setting} is not the overlap switch")
    quiet, _ = _bucket_group(False)
    quiet.finish_grad_sync()
    quiet.reset()  # no counts, nothing to assert
    for world, kwargs, expected in ((u.one + 1, {}, True), (u.one + 1, {name: value}, value), (u.one, {}, False)):
        cfg = tiny_config(distributed_optimizer=True)
        cfg.comm_overlap = overlap(tp_comm_overlap=False, **kwargs)
        run_setup(cfg, world, te=False)
        ctx.expect(getattr(cfg.ddp, name) is expected, f"at {world} data-parallel ranks with {kwargs} {name} comes out {getattr(cfg.ddp, name)}")


@claim("overlap-grad-optimizer-instances")
def grad_optimizer_instances(ctx: Context) -> None:
    import torch
    from megatron.core.distributed import DistributedDataParallelConfig

    ctx.says("**Several distributed-optimizer instances reduce on their own stream.**")
    r = ctx.read(
        "With `{field:code}` above {one:int} (the default is `{default:code}`), megatron-core's DDP asserts \"{message:quote}\" unless `{distopt:code}` is on, and gives its bucket groups a `{stream:code}`."
    )
    defaults = {f.name: f.default for f in dataclasses.fields(DistributedDataParallelConfig)}
    ctx.expect(defaults[r.field] == literal(r.default) == r.one, f"{r.field} defaults to {defaults[r.field]}")
    tree = _tree("megatron.core.distributed.DistributedDataParallel.__init__")
    gate = [n for n in ast.walk(tree) if isinstance(n, ast.If) and ast.unparse(n.test) == f"self.ddp_config.{r.field} > {r.one}" and any(isinstance(a, ast.Assert) for a in ast.walk(n))]
    ctx.expect(len(gate) == 1, f"DDP has {len(gate)} blocks for several instances")
    check = next(a for a in ast.walk(gate[0]) if isinstance(a, ast.Assert))
    ctx.expect(ast.unparse(check.test) == f"self.ddp_config.{r.distopt}" and check.msg.value == r.message, f"DDP asserts {ast.unparse(check)}")
    ctx.expect(f"bucket_group.{r.stream} = " in ast.unparse(gate[0]), f"the bucket groups get no {r.stream}")
    s = ctx.read(
        "With `{overlap:code}`, `{start:code}` makes that stream wait for `{current:code}`, the stream that is current when the gradient hook starts the reduction, "
        "and launches the reduction there without `{async_:code}`, which is used only with one instance; `{finish:code}` then makes the current stream wait for the communication stream."
    )
    start = _tree(f"megatron.core.distributed.param_and_grad_buffer._ParamAndGradBucketGroup.{s.start.removesuffix('()')}")
    branch = [n for n in ast.walk(start) if isinstance(n, ast.If) and f"self.ddp_config.{r.field} > {r.one}" in ast.unparse(n.test) and f"self.ddp_config.{s.overlap}" in ast.unparse(n.test)]
    ctx.expect(branch and f"self.{r.stream}.wait_stream({s.current})" in ast.unparse(branch[0]) and f"torch.cuda.stream(self.{r.stream})" in ast.unparse(branch[0]), f"{s.start} does not order the stream after {s.current}")
    flag = next((ast.unparse(n.value) for n in ast.walk(start) if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == s.async_), "")
    ctx.expect(flag == f"self.ddp_config.{s.overlap} and self.ddp_config.{r.field} == {r.one}", f"{s.async_} is {flag}")
    hook = _squash(_source("megatron.core.distributed.param_and_grad_buffer._ParamAndGradBucketGroup.register_grad_ready"))
    ctx.expect("self.start_grad_sync(" in hook, "the gradient hook does not start the reduction")
    group, _ = _bucket_group(True, instances=2)
    group.is_first_batch, group.grad_reduce_finished = False, False
    group.communication_stream = sentinel = object()
    current = mock.MagicMock()
    with mock.patch.object(torch.cuda, "current_stream", lambda *a, **k: current):
        getattr(type(group), s.finish.removesuffix("()"))(group)
    ctx.expect(current.wait_stream.call_args_list == [mock.call(sentinel)] and group.grad_reduce_finished, f"{s.finish} waits with {current.wait_stream.call_args_list}")
    t = ctx.read(
        "Wrong gradients with these two options were reported against older releases that waited on `{old:code}`, while `{wrap:code}` builds DDP inside `{ctx_:code}`, a side stream; "
        "the installed megatron-core waits on the current stream, so that race is fixed in this release."
    )
    buffer_source = Path(importlib.util.find_spec("megatron.core.distributed.param_and_grad_buffer").origin).read_text("utf-8")
    ctx.expect(t.old.endswith("()") and t.old.removesuffix("()") not in buffer_source and t.old.startswith("torch.cuda."), f"{t.old} is still used")
    wrap = _squash(_source(f"megatron.training.models.dist_utils.{t.wrap}"))
    ctx.expect(f"with {t.ctx_}:" in wrap and "ddp_stream = torch.cuda.Stream()" in wrap, f"{t.wrap} does not build DDP inside {t.ctx_}")
