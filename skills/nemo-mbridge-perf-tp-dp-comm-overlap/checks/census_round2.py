"""Checks for the sections added after the first held-out round (pipeline splits and
finalize, in-batch packing and timeouts, deferred parameter gathers, MXFP8 forced sync,
ring-exchange presets, the userbuffers TP size). Same rule as the other modules: each
value is read out of the sentence and compared with what the installed megatron-core /
Megatron-Bridge does, by building real configs, calling the functions that decide, or
reading the installed source with inspect/ast."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import os
import re
import textwrap
from pathlib import Path

from runner.claims.kit import Context, assignment, claim, literal, raised, resolve_symbol, tiny_config

from .census_topics import _build, _constants, _fields, _package_files, _raises, _source, _squash, _tc
from .overlap import distinct, overlap, run_setup


def _tree(dotted: str) -> ast.AST:
    return ast.parse(textwrap.dedent(_source(dotted)))


def _counts(text: str) -> list[int]:
    """`7, 8, 8 and 7` -> [7, 8, 8, 7]."""
    return [int(part) for part in re.split(r",\s*|\s+and\s+", text.strip())]


def _bridge_model(**fields):
    model = tiny_config().model
    for name, value in fields.items():
        setattr(model, name, value)
    return model


# --- references/pp-layout.md ---------------------------------------------------------------------


@claim("overlap-pp-even-split")
def pp_even_split(ctx: Context) -> None:
    ctx.says("**An even split that does not divide fails when the model is built.**")
    r = ctx.read(
        "`{n:code}` and `{pp:code}`, with no first/last stage count and no layout, pass the model config's `{fin:code}`; "
        "then `{fn:code}` asserts `{error:code}` while the model is built, so the {left:int} layers left over are not dropped silently."
    )
    fields = _fields(r.n, r.pp)
    model = _bridge_model(**fields)
    ctx.expect(r.fin == "finalize()", f"{r.fin} is not the model config's finalize()")
    model.finalize()  # passes
    ctx.expect(model.pipeline_model_parallel_layout is None and model.num_layers_in_first_pipeline_stage is None, "the tiny model sets a layout")
    from megatron.core.transformer import transformer_block

    ctx.expect(getattr(transformer_block, r.fn, None) is not None, f"transformer_block has no {r.fn}")
    kind, message = raised(r.error)
    ctx.expect_raises(lambda: _build(model, 0) if r.fn == "get_num_layers_to_build" else None, kind, message)
    n, pp = fields["num_layers"], fields["pipeline_model_parallel_size"]
    ctx.expect(r.left == n % pp and r.left > 0, f"{n} layers at PP {pp} leave {n % pp}")
    s = ctx.read("Megatron-LM's `{fn:code}` would have stopped it earlier with \"{message:quote}\"; Bridge does not run it.")
    ctx.expect(_squash(s.message) in _constants(f"megatron.training.arguments.{s.fn}"), f"{s.fn} has no message {s.message!r}")
    bridge = [p for p in _package_files("megatron.bridge") if f"import {s.fn}" in p.read_text("utf-8") or f"arguments.{s.fn}" in p.read_text("utf-8")]
    ctx.expect(not bridge, f"Bridge calls {s.fn} in {bridge}")
    t = ctx.read(
        "Each of `{f1:code}` and `{f2:code}` adds {one:int} to the count that is divided: with only one of them, {n:int} layers at PP {pp:int} fail the model config with "
        "`{error:code}`, and with both they build {counts:text} layers."
    )
    f1, f2 = _fields(t.f1), _fields(t.f2)
    distinct(ctx, *f1, *f2)
    for alone in (f1, f2):
        _raises(ctx, lambda alone=alone: _tc(num_layers=t.n, pipeline_model_parallel_size=t.pp, **alone), t.error)
    ctx.expect(f": {t.n + t.one} " in t.error and t.error.endswith(f" {t.pp}"), f"the message does not divide {t.n} + {t.one} by {t.pp}")
    both = _tc(num_layers=t.n, pipeline_model_parallel_size=t.pp, **f1, **f2)
    got = [_build(both, rank) for rank in range(t.pp)]
    ctx.expect(got == _counts(t.counts), f"with both, the stages build {got}")
    u = ctx.read("Or set `{a:code}` and `{b:code}`, which build {counts:text}.")
    set_ = _tc(num_layers=t.n, pipeline_model_parallel_size=t.pp, **_fields(u.a, u.b))
    got = [_build(set_, rank) for rank in range(t.pp)]
    ctx.expect(got == _counts(u.counts) and sum(got) == t.n, f"{u.a}, {u.b} build {got}")


@claim("overlap-pp-middle-stages")
def pp_middle_stages(ctx: Context) -> None:
    ctx.says("**With first/last stage counts the middle stages still split evenly.**")
    r = ctx.read(
        "megatron-core's model config subtracts the first and last stage counts from `{field:code}` and divides the rest by the remaining stages: "
        "`{a:code}`, `{b:code}`, `{c:code}` and `{d:code}` raise `{error:code}` (the missing space is in the message)."
    )
    fields = _fields(r.a, r.b, r.c, r.d)
    ctx.expect(r.field in fields, f"the example does not set {r.field}")
    _raises(ctx, lambda: _tc(**fields), r.error)
    rest = fields[r.field] - fields["num_layers_in_first_pipeline_stage"] - fields["num_layers_in_last_pipeline_stage"]
    stages = fields["pipeline_model_parallel_size"] - 2
    ctx.expect(f"middle stage: {rest} " in r.error and r.error.endswith(f"size {stages}"), f"the message should name {rest} layers and {stages} stages")
    ok = dict(fields, **{r.field: fields[r.field] + (stages - rest % stages)})
    _tc(**ok)  # a count that divides is accepted
    s = ctx.read(
        "The counts work with VPP too, but then the first and last stage counts and the layers of each middle stage must each divide by the VPP size: "
        "`{first:code}` with `{vpp:code}` raises `{error:code}`."
    )
    vpp = _fields(s.vpp)
    size = vpp["virtual_pipeline_model_parallel_size"]
    base = dict(num_layers=8 * size, pipeline_model_parallel_size=4, **vpp)
    good = _tc(**base, num_layers_in_first_pipeline_stage=size, num_layers_in_last_pipeline_stage=size)
    ctx.expect([_build(good, rank, 0) for rank in range(4)] == [1, 3, 3, 1], "first/last stage counts with VPP do not build")
    _raises(ctx, lambda: _tc(**dict(base, num_layers=8 * size + 1), **_fields(s.first)), s.error)
    first = _fields(s.first)["num_layers_in_first_pipeline_stage"]
    ctx.expect(first % size != 0, f"{first} divides by {size}")
    for name, message in (("last", "number of layers at last stage"), ("middle", "number of layers on each middle pipeline rank")):
        bad = dict(base, num_layers_in_first_pipeline_stage=size, num_layers_in_last_pipeline_stage=size if name == "middle" else size + 1)
        if name == "middle":
            bad["num_layers"] = 2 * size + 2 * (size + 1)
        try:
            _tc(**bad)
        except ValueError as error:
            ctx.expect(str(error).startswith(message), f"the {name} stage fails with {error}")
        else:
            ctx.expect(False, f"a {name} stage count that does not divide by the VPP size is accepted")


@claim("overlap-pp-finalize-once")
def pp_finalize_once(ctx: Context) -> None:
    ctx.says("**Derived model fields are filled when the model config is finalized.**")
    r = ctx.read(
        "Bridge's `{post:code}` does nothing; `{fin:code}` sets `{pd:code}` to `{params:code}` when PP > {one:int} and it is unset, "
        "then runs megatron-core's `{core:code}`, and `{validate:code}` calls it at the end of `{rcu:code}`, so values set on a recipe's `{where:code}` before then are all seen."
    )
    from megatron.bridge.models import transformer_config as bridge_tc

    cls, method = r.post.split(".")
    fn = getattr(getattr(bridge_tc, cls), method)
    body = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0].body
    ctx.expect(all(isinstance(b, ast.Pass) or (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant)) for b in body), f"{r.post} does something")
    ctx.expect(r.core == method, f"{r.core} is not {method}")
    model = _bridge_model(pipeline_model_parallel_size=r.one + 1, num_layers=2 * (r.one + 1), pipeline_dtype=None)
    ctx.expect(r.fin == "finalize()", f"{r.fin} is not finalize()")
    model.finalize()
    ctx.expect(getattr(model, r.pd) == getattr(model, r.params) and getattr(model, r.pd) is not None, f"{r.pd} comes out {getattr(model, r.pd)}")
    flat = _bridge_model(pipeline_model_parallel_size=r.one, pipeline_dtype=None)
    flat.finalize()
    ctx.expect(getattr(flat, r.pd) is None, f"{r.pd} is set at PP {r.one}")
    stmts = [ast.unparse(s) for s in ast.parse(textwrap.dedent(inspect.getsource(bridge_tc.TransformerConfig.finalize))).body[0].body]
    sets = next((i for i, s in enumerate(stmts) if s.startswith("if") and f"self.{r.pd} = self.{r.params}" in s), None)
    runs = next((i for i, s in enumerate(stmts) if f".{r.core}(self)" in s), None)
    ctx.expect(sets is not None and runs is not None and sets < runs, f"finalize sets {r.pd} at {sets}, runs {r.core} at {runs}")
    from megatron.bridge.training.config import ConfigContainer, runtime_config_update

    ctx.expect(r.validate == "cfg.validate()" and "self.model.finalize()" in _squash(inspect.getsource(ConfigContainer.validate)), f"{r.validate} does not finalize the model")
    last = ast.parse(textwrap.dedent(inspect.getsource(runtime_config_update))).body[0].body[-1]
    ctx.expect(r.rcu == "runtime_config_update()" and ast.unparse(last) == r.validate, f"{r.rcu} ends with {ast.unparse(last)}")
    ctx.expect(r.where == "cfg.model", f"{r.where} is not the model config")
    s = ctx.read("megatron-core fills `{field:code}` only while it is `{none:code}`: a model config finalized at PP {a:int} and then changed to PP {b:int} keeps {kept:int} when `{fin:code}` runs again.")
    ctx.expect(literal(s.none) is None and s.fin == r.fin, "the sentence names another value or call")
    m = _bridge_model(pipeline_model_parallel_size=s.a, num_layers=s.a * s.b)
    ctx.expect(getattr(m, s.field) is None, f"{s.field} is filled before finalize()")
    m.finalize()
    ctx.expect(getattr(m, s.field) == s.a, f"{s.field} is {getattr(m, s.field)} at PP {s.a}")
    m.pipeline_model_parallel_size = s.b
    m.finalize()
    ctx.expect(getattr(m, s.field) == s.kept and s.kept != s.b, f"{s.field} comes out {getattr(m, s.field)}")
    t = ctx.read("If you finalized it yourself, set the field back to `{none:code}` (or to the group size you want) after changing the pipeline size.")
    setattr(m, s.field, literal(t.none))
    m.finalize()
    ctx.expect(getattr(m, s.field) == s.b, f"after a reset {s.field} comes out {getattr(m, s.field)}")


# --- references/pp-overlap.md ------------------------------------------------------------------


@claim("overlap-pp-in-batch-packing")
def pp_in_batch_packing(ctx: Context) -> None:
    ctx.says("**In-batch packing turns the shape exchange on.**")
    r = ctx.read(
        "When the dataset config has `{flag:code}` on, `{validate:code}` marks the model config, and its `{fin:code}` sets `{setting:code}` when PP > {one:int} (at PP {pp1:int} it stays `{off:code}`)."
    )
    from megatron.bridge.training.config import ConfigContainer

    src = _squash(inspect.getsource(ConfigContainer.validate))
    ctx.expect(r.validate == "cfg.validate()" and f'getattr(self.dataset, "{r.flag}", False)' in src and re.search(r"\b[\w.]+\._enable_in_batch_packing = True", src) is not None, f"{r.validate} does not mark the model for {r.flag}")
    name, value = assignment(r.setting)
    ctx.expect(r.fin == "finalize()", f"{r.fin} is not finalize()")
    for pp, expected in ((r.one + 1, value), (r.pp1, literal(r.off))):
        model = _bridge_model(pipeline_model_parallel_size=pp, num_layers=2 * pp)
        model._enable_in_batch_packing = True
        model.finalize()
        ctx.expect(getattr(model, name) == expected, f"at PP {pp} {name} comes out {getattr(model, name)}")
    ctx.expect(r.pp1 == r.one, f"PP {r.pp1} is not the boundary")
    s = ctx.read("Every p2p exchange of that run is then preceded by the batched shape exchange described above, whatever `{flag:code}` says.")
    from megatron.core.pipeline_parallel.p2p_communication import P2PCommunicator

    tree = ast.parse(textwrap.dedent(inspect.getsource(P2PCommunicator._communicate)))
    first = [n for n in ast.walk(tree) if isinstance(n, ast.If) and f"config.{name}" in ast.unparse(n.test) and "self._communicate_shapes(" in ast.unparse(n.body)]
    shapes = inspect.getsource(P2PCommunicator._communicate_shapes)
    ctx.expect(first and "batch_isend_irecv(" in shapes and s.flag not in shapes and hasattr(tiny_config().model, s.flag), f"the shape exchange depends on {s.flag}")


@claim("overlap-pp-timeout")
def pp_timeout(ctx: Context) -> None:
    ctx.says("**How long a stalled pipeline exchange waits.**")
    r = ctx.read("`{field:code}` defaults to `{default:code}`.")
    prefix, attr = r.field.rsplit(".", 1)
    ctx.expect(prefix == "cfg.dist", f"{r.field} is not on cfg.dist")
    dist_cls = type(tiny_config().dist)
    default = {f.name: f.default for f in dataclasses.fields(dist_cls)}[attr]
    ctx.expect(default == literal(r.default), f"{r.field} defaults to {default}")
    s = ctx.read(
        "Bridge passes it to `{fn:code}` as `{kw:code}` and to megatron-core's `{init:code}`, which creates the group named `{group:code}` with that timeout, "
        "so a send or receive between stages that waits longer than {mins:int} minutes is reported as a timeout of that group."
    )
    from megatron.bridge.training import initialize

    tree = ast.parse(Path(initialize.__file__).read_text("utf-8"))
    kwargs = [n for n in ast.walk(tree) if isinstance(n, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == s.kw and f"dist_config.{attr}" in ast.unparse(v) for k, v in zip(n.keys, n.values))]
    ctx.expect(len(kwargs) == 1, f"initialize.py builds {len(kwargs)} kwargs with {s.kw} from {attr}")
    calls = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == s.fn]
    ctx.expect("torch.distributed.init_process_group(**init_process_group_kwargs)" in calls and s.fn == "torch.distributed.init_process_group", f"{s.fn} is called as {calls}")
    inits = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func).endswith(s.init) and any(k.arg == attr and ast.unparse(k.value) == f"dist_config.{attr}" for k in n.keywords)]
    ctx.expect(inits, f"Bridge does not pass {attr} to {s.init}")
    core = _tree(f"megatron.core.parallel_state.{s.init}")
    ctx.expect(f"timeout = timedelta(minutes={attr})" in ast.unparse(core), f"{s.init} does not build its timeout from {attr}")
    groups = [n for n in ast.walk(core) if isinstance(n, ast.Call) and ast.unparse(n.func) == "create_group" and any(k.arg == "group_desc" and isinstance(k.value, ast.Constant) and k.value.value == s.group for k in n.keywords)]
    ctx.expect(len(groups) == 1 and any(k.arg == "timeout" and ast.unparse(k.value) == "timeout" for k in groups[0].keywords), f"{s.group} is not created with the timeout")
    ctx.expect(s.mins == default, f"the default is {default} minutes, not {s.mins}")
    t = ctx.read(
        "Raise it on `{where:code}` when a stage legitimately waits longer (a slow first step or checkpoint load); a wait that outlasts any timeout points to unmatched sends and receives, on the paths above."
    )
    ctx.expect(t.where == prefix, f"{t.where} is not where the field lives")


# --- references/dp-grad-sync.md -------------------------------------------------------------------


@claim("overlap-param-gather-deferred")
def param_gather_deferred(ctx: Context) -> None:
    r = ctx.read("**With `{flag:code}` the optimizer step gathers nothing.** megatron-core's `{method:code}` starts the parameter all-gather only when `{flag2:code}` is off.")
    ctx.expect(r.flag == r.flag2, "the sentence names two flags")
    tree = _tree(f"megatron.core.optimizer.distrib_optimizer.{r.method}")
    assigns = {ast.unparse(n.targets[0]): ast.unparse(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)}
    ctx.expect(assigns.get("should_sync_params", "").startswith(f"not self.ddp_config.{r.flag} and"), f"{r.method} syncs when {assigns.get('should_sync_params')}")
    gated = [n for n in ast.walk(tree) if isinstance(n, ast.If) and ast.unparse(n.test) == "should_sync_params"]
    ctx.expect(gated and "start_param_sync" in ast.unparse(gated[0].body), f"{r.method} does not gather under should_sync_params")
    s = ctx.read(
        "With it on, DDP installs its forward pre-hook, which gathers a module's parameters just before the module runs in the next forward, "
        "so between `{step:code}` and that forward each rank's full parameters are up to date only in its own shard."
    )
    from megatron.core.distributed import DistributedDataParallel as DDP

    ctx.expect(f"self.use_forward_hook = self.ddp_config.{r.flag}" in inspect.getsource(DDP.__init__), f"DDP's forward hook does not follow {r.flag}")
    ctx.expect("finish_param_sync(" in inspect.getsource(DDP._make_forward_pre_hook) and s.step == "optimizer.step()", "the pre-hook does not gather")
    ctx.says("Code that reads whole weights in that window (exporting them, refitting an inference engine, hashing them) reads stale values.")
    t = ctx.read(
        "Bridge syncs before its own readers when `{pred:code}` is true, which is the distributed optimizer with `{flag:code}` and without Megatron FSDP: "
        "`{save:code}` calls `{call1:code}`, and `{train:code}` calls `{call2:code}` before evaluating, which syncs the same way (its `{param:code}` defaults to `{default:code}`)."
    )
    from megatron.bridge.training import train as train_module

    pred = getattr(train_module, t.pred)
    ctx.expect(t.flag == r.flag and t.flag in inspect.signature(pred).parameters, f"{t.pred} does not take {t.flag}")
    table = {(f, d, o): pred(f, d, o) for f in (False, True) for d in (False, True) for o in (False, True)}
    ctx.expect(table[(False, True, True)] and sum(table.values()) == 1, f"{t.pred} is true for {[k for k, v in table.items() if v]}")
    save = ast.parse(textwrap.dedent(inspect.getsource(getattr(train_module, t.save))))
    want = ast.parse(t.call1).body[0].value
    ctx.expect(ast.unparse(want.func) == "force_param_sync", f"{t.call1} is not force_param_sync")
    flagged = {ast.unparse(n.targets[0]) for n in ast.walk(save) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and ast.unparse(n.value.func) == t.pred}
    guarded = [n for n in ast.walk(save) if isinstance(n, ast.If) and ast.unparse(n.test) in flagged]
    found = [c for g in guarded for c in ast.walk(g) if isinstance(c, ast.Call) and ast.unparse(c.func) == ast.unparse(want.func)]
    ctx.expect(found and [ast.unparse(a) for a in found[0].args] + [ast.unparse(k.value) for k in found[0].keywords] == [ast.unparse(a) for a in want.args], f"{t.save} calls {[ast.unparse(c) for c in found]}")
    loop = ast.parse(textwrap.dedent(inspect.getsource(getattr(train_module, t.train.rstrip("()")))))
    blocks = [n for n in ast.walk(loop) if isinstance(n, ast.If) and any(isinstance(c, ast.Call) and ast.unparse(c) == t.call2 for c in ast.walk(n)) and "evaluate_and_print_results(" in ast.unparse(n)]
    ctx.expect(t.train == "train()" and blocks, f"{t.train} does not call {t.call2} around evaluation")
    inner = min(blocks, key=lambda n: len(ast.unparse(n)))
    before = min(c.lineno for c in ast.walk(inner) if isinstance(c, ast.Call) and ast.unparse(c) == t.call2)
    evaluate = min(c.lineno for c in ast.walk(inner) if isinstance(c, ast.Call) and ast.unparse(c.func) == "evaluate_and_print_results")
    ctx.expect(before < evaluate, f"{t.call2} comes after the evaluation")
    disable = getattr(train_module, ast.unparse(ast.parse(t.call2).body[0].value.func))
    ctx.expect(inspect.signature(disable).parameters[t.param].default == literal(t.default), f"{t.param} defaults otherwise")
    u = ctx.read("Both call `{prep:code}` and then make each chunk run `{sync:code}`.")
    for fn in (train_module.force_param_sync, disable):
        src = inspect.getsource(fn)
        ctx.expect(u.prep in src, f"{fn.__name__} does not call {u.prep}")
    force = inspect.getsource(train_module.force_param_sync)
    ctx.expect(f"model_chunk.{u.sync}" in force and force.index(u.prep) < force.index(u.sync), f"force_param_sync does not run {u.sync} after {u.prep}")
    ctx.expect("model_chunk.disable_forward_pre_hook(param_sync=param_sync)" in inspect.getsource(disable) and f"self.{u.sync}" in inspect.getsource(DDP.disable_forward_pre_hook), f"disable_forward_pre_hook does not run {u.sync}")
    v = ctx.read("Call `{fn:code}` yourself before reading weights after a step, or pass `{setting:code}` to `{cls:code}`.")
    ctx.expect(v.fn == ast.unparse(want.func), f"{v.fn} is not the sync Bridge uses")
    cfg = tiny_config()
    cfg.ddp.use_distributed_optimizer = cfg.optimizer.use_distributed_optimizer = True
    cfg.comm_overlap = overlap(tp_comm_overlap=False, **_fields(v.setting))
    run_setup(cfg, 8, te=False)
    name, value = assignment(v.setting)
    ctx.expect(v.cls == "CommOverlapConfig" and getattr(cfg.ddp, name) == value, f"{v.setting} comes out {getattr(cfg.ddp, name)}")
    base = tiny_config()
    base.ddp.use_distributed_optimizer = base.optimizer.use_distributed_optimizer = True
    base.comm_overlap = overlap(tp_comm_overlap=False)
    run_setup(base, 8, te=False)
    ctx.expect(getattr(base.ddp, name) != value, f"{name} is {value} without the setting too")


@claim("overlap-mxfp8-forced-sync")
def mxfp8_forced_sync(ctx: Context) -> None:
    ctx.says("**The forced sync at checkpoint save handles MXFP8.**")
    r = ctx.read("No file of the installed `{pkg:code}` contains \"{message:quote}\".")
    ctx.expect(r.pkg == "megatron.core", f"{r.pkg} is not megatron.core")
    files = [p.name for p in _package_files(r.pkg) if _squash(r.message) in _squash(p.read_text("utf-8"))]
    ctx.expect(not files, f"{files} contain it")
    ctx.expect("MXFP8" in r.message and "DP AG overlap" in r.message, "the message is not the MXFP8 assertion")
    s = ctx.read("`{preset:code}` already sets `{a:code}` and `{b:code}`.")
    from megatron.bridge.training import mixed_precision

    made = getattr(mixed_precision, s.preset.rstrip("()"))()
    expected = _fields(s.a, s.b)
    distinct(ctx, assignment(s.a)[0], assignment(s.b)[0])
    ctx.expect(all(getattr(made, k) == v for k, v in expected.items()) and made.fp8_recipe == "mxfp8", f"{s.preset} sets {[(k, getattr(made, k)) for k in expected]}")
    t = ctx.read(
        "Before the forced sync at save, `{method:code}` zeroes the gradient buffers and copies the fp32 main parameters into the parameter buffer "
        "when both `{c1:code}` and `{c2:code}` are set, so the all-gather sends the updated weights."
    )
    tree = _tree(f"megatron.core.optimizer.distrib_optimizer.{t.method}")
    gate = [ast.unparse(n.test) for n in ast.walk(tree) if isinstance(n, ast.If) and any(isinstance(b, ast.Return) for b in n.body) and "self.config." in ast.unparse(n.test)]
    ctx.expect(gate == [f"not (self.config.{t.c1} and self.config.{t.c2})"], f"{t.method} returns early when {gate}")
    ctx.expect(t.c1 == assignment(s.b)[0], f"{t.c1} is not the field the preset sets")
    body = ast.unparse(tree)
    ctx.expect("model_chunk.zero_grad_buffer()" in body and "self._copy_main_params_to_param_buffer()" in body, f"{t.method} does not zero and copy")
    ctx.expect(f"optimizer.{t.method.split('.')[-1]}()" in _source("megatron.bridge.training.train.force_param_sync"), "the forced sync does not stage the parameters")


# --- references/tp-userbuffers.md ----------------------------------------------------------------


def _presets():
    from megatron.bridge.training import comm_overlap

    return {name: value for name, value in vars(comm_overlap).items() if isinstance(value, comm_overlap.TransformerLayerTPOverlapCfg)}


@claim("overlap-tp-ring-exchange-presets")
def tp_ring_exchange_presets(ctx: Context) -> None:
    ctx.says("**Which presets reduce-scatter by ring exchange.**")
    r = ctx.read("The reduce-scatter GEMMs of a layer are `{a:code}` and `{b:code}`, the forward GEMMs of the row-parallel layers megatron-core names `{pa:code}` and `{pb:code}`.")
    distinct(ctx, r.a, r.b)
    ctx.expect((r.a, r.b) == (f"{r.pa}_fprop", f"{r.pb}_fprop"), f"{r.a}/{r.b} are not the forward GEMMs of {r.pa}/{r.pb}")
    for module, name in (("attention", r.pa), ("mlp", r.pb)):
        tree = ast.parse(Path(resolve_symbol(f"megatron.core.transformer.{module}").__file__).read_text("utf-8"))
        built = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and any(k.arg == "tp_comm_buffer_name" and isinstance(k.value, ast.Constant) and k.value.value == name for k in n.keywords)]
        ctx.expect(built and all(any(k.arg == "input_is_parallel" and ast.unparse(k.value) == "True" for k in c.keywords) for c in built), f"{name} is not built row-parallel in {module}")
    ctx.expect("reduce_scatter_to_sequence_parallel_region(" in _source("megatron.core.tensor_parallel.layers.RowParallelLinear.forward"), "a row-parallel forward does not reduce-scatter")
    s = ctx.read(
        "Of the {n:int} presets, {both:int} give both a `{ring:code}`: every `{fp8:code}` preset except `{x1:code}` and `{x2:code}`, plus `{p1:code}` and `{p2:code}`; {one:int} more give it to one of the two."
    )
    presets = _presets()
    from megatron.bridge.training import comm_overlap

    ring = getattr(comm_overlap, s.ring)
    uses = {name: (isinstance(getattr(p, r.a), ring), isinstance(getattr(p, r.b), ring)) for name, p in presets.items()}
    both = {name for name, u in uses.items() if all(u)}
    ctx.expect(len(presets) == s.n and len(both) == s.both, f"{len(both)} of {len(presets)} presets use {s.ring} for both")
    fp8 = {name for name in presets if name.split("_")[1] == s.fp8}
    ctx.expect(both == (fp8 - {s.x1, s.x2}) | {s.p1, s.p2} and {s.x1, s.x2} <= fp8 and not ({s.p1, s.p2} & fp8), f"the presets with both are {sorted(both)}")
    ctx.expect(sum(1 for u in uses.values() if sum(u) == 1) == s.one, "another number uses it for one of the two")
    t = ctx.read(
        "`{setup:code}` turns the preset into a dict with `{asdict:code}`, and `{fn:code}` hands that to Transformer Engine's `{ub:code}` as `{kw:code}`, "
        "so how a ring exchange runs, and whether it can be captured in a CUDA graph, is decided inside Transformer Engine."
    )
    ctx.expect(f"model_config.tp_comm_overlap_cfg = {t.asdict}(comm_overlap_cfg.tp_comm_overlap_cfg)" in _source(f"megatron.bridge.training.comm_overlap.{t.setup.rstrip('()')}"), f"{t.setup} does not convert with {t.asdict}")
    init = _tree(f"megatron.bridge.training.initialize.{t.fn}")
    calls = [n for n in ast.walk(init) if isinstance(n, ast.Call) and ast.unparse(n.func) == t.ub]
    ctx.expect(len(calls) == 3 and all(any(k.arg == t.kw and ast.unparse(k.value) == "ub_cfgs" for k in c.keywords) for c in calls), f"{t.fn} does not pass {t.kw}")
    ctx.expect("ub_cfgs = model_config.tp_comm_overlap_cfg" in ast.unparse(init), "ub_cfgs is not the model's config")
    u = ctx.read("Bridge's `{v:code}` never reads `{field:code}`.")
    src = _source(f"megatron.bridge.utils.cuda_graph.{u.v}")
    ctx.expect(u.field not in src and hasattr(tiny_config().model, u.field), f"{u.v} reads {u.field}")
    w = ctx.read("If capture fails in a ring-exchange reduce-scatter, copy the preset with `{fn:code}` and give `{a:code}` and `{b:code}` a `{pipe:code}`.")
    ctx.expect((w.a, w.b) == (r.a, r.b), "the fix names other GEMMs")
    pipe = getattr(comm_overlap, w.pipe)
    name = sorted(both)[0]
    piped = next(getattr(p, w.a) for p in presets.values() if type(getattr(p, w.a)) is pipe)
    copy = resolve_symbol(w.fn)(presets[name], **{w.a: piped, w.b: piped})
    as_dict = dataclasses.asdict(copy)
    ctx.expect(as_dict[w.a]["method"] == as_dict[w.b]["method"] == "pipeline" and isinstance(getattr(presets[name], w.a), ring), f"{w.fn} does not replace the ring exchange")


# --- references/tp-bring-up.md -------------------------------------------------------------------


@claim("overlap-tp-ub-tp-size")
def tp_ub_tp_size(ctx: Context) -> None:
    r = ctx.read(
        "**Bridge gives `{ub:code}` the TP size, not a TP group.** Every call of `{ub2:code}` in `{fn:code}` passes `{kw:code}` and no process group; "
        "Transformer Engine builds the userbuffers groups from it."
    )
    ctx.expect(r.ub == r.ub2, "the sentence names two functions")
    tree = _tree(f"megatron.bridge.training.initialize.{r.fn}")
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == r.ub]
    name, _ = r.kw.split("=", 1)
    ctx.expect(len(calls) == 3, f"{r.fn} calls {r.ub} {len(calls)} times")
    for c in calls:
        given = {k.arg: ast.unparse(k.value) for k in c.keywords}
        ctx.expect(not c.args and f"{name}={given.get(name)}" == r.kw, f"{r.ub} gets {given}")
        ctx.expect(not any("group" in k or "pg" in k for k in given), f"{r.ub} gets a group: {given}")
    ctx.expect("created in Transformer Engine" in _source(f"megatron.bridge.training.initialize.{r.fn}"), "Bridge builds the group itself")
    s = ctx.read(
        "So a start-up failure that appears only when TP is smaller than the world size is decided inside Transformer Engine, and its switches, such as `{var:code}`, "
        "are Transformer Engine's (see [tp-userbuffers.md](tp-userbuffers.md))."
    )
    var = s.var
    named = [p.name for pkg in ("megatron.bridge", "megatron.core") for p in _package_files(pkg) if var in p.read_text("utf-8")]
    ctx.expect(var.startswith("UB_") and "=" not in var and not named, f"{var} is named in {named}")
    t = ctx.read("Without Transformer Engine the call raises `{error:code}`.")
    import importlib.util

    ctx.expect(importlib.util.find_spec("transformer_engine") is None, "Transformer Engine is installed here")
    fn = resolve_symbol(f"megatron.bridge.training.initialize.{r.fn}")
    _raises(ctx, lambda: fn(tiny_config().model, 1), t.error)


# --- references/dp-overlap.md ------------------------------------------------------------------


@claim("overlap-param-gather-synced")
def param_gather_synced(ctx: Context) -> None:
    import warnings

    from runner.claims.kit import resolve

    r = ctx.read("**`{field:code}` is made the same on `{a:code}` and `{b:code}`.** `{validate:code}` runs `{fn:code}`, which first turns `{distopt:code}` on in both configs when either has it, then sets `{field2:code}` to `{true:code}` in both when either has it, warning \"{message:quote}\" when they differed.")
    from megatron.bridge.training import config as config_module

    ctx.expect(r.field == r.field2 and (r.a, r.b) == ("cfg.ddp", "cfg.optimizer"), "the sentence names other configs")
    ctx.expect(r.validate == "cfg.validate()" and f"{r.fn}(self)" in inspect.getsource(config_module.ConfigContainer.validate), f"{r.validate} does not run {r.fn}")
    body = [ast.unparse(n) for n in ast.parse(textwrap.dedent(inspect.getsource(getattr(config_module, r.fn)))).body[0].body]
    first = next(i for i, b in enumerate(body) if r.distopt in b and b.startswith("if"))
    second = next(i for i, b in enumerate(body) if r.field in b and b.startswith("if"))
    ctx.expect(first < second, f"{r.fn} syncs {r.field} before {r.distopt}")
    ctx.expect(all(f"config.{c}.{r.distopt} = True" in body[first] for c in ("ddp", "optimizer")), f"{r.fn} does not turn {r.distopt} on in both")
    half = tiny_config()
    setattr(half.ddp, r.distopt, True)
    setattr(half.optimizer, r.distopt, False)
    resolve(half)
    ctx.expect(getattr(half.optimizer, r.distopt) is True, f"{r.distopt} on cfg.ddp alone is not synced")
    for ddp_value, opt_value in ((True, False), (False, True), (True, True), (False, False)):
        cfg = tiny_config()
        cfg.ddp.use_distributed_optimizer = True
        setattr(cfg.ddp, r.field, ddp_value)
        setattr(cfg.optimizer, r.field, opt_value)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            resolve(cfg)
        expected = literal(r.true) if (ddp_value or opt_value) else False
        ctx.expect(cfg.optimizer.use_distributed_optimizer is True, f"{r.distopt} is not synced")
        ctx.expect((getattr(cfg.ddp, r.field), getattr(cfg.optimizer, r.field)) == (expected, expected), f"{ddp_value}/{opt_value} come out {getattr(cfg.ddp, r.field)}/{getattr(cfg.optimizer, r.field)}")
        texts = [_squash(str(w.message)) for w in caught if "not in sync" in str(w.message) and r.field in str(w.message)]
        if (ddp_value, opt_value) == (True, False):
            ctx.expect(texts == [_squash(r.message)], f"the warning reads {texts}")
        else:
            ctx.expect((len(texts) == 1) == (ddp_value != opt_value), f"{ddp_value}/{opt_value} warn {texts}")
    s = ctx.read("So a `{false:code}` on one side never turns the other off; to run without the gather overlap, pass `{setting:code}` to `{cls:code}`, which sets it on both.")
    ctx.expect(literal(s.false) is False, f"{s.false} is not False")
    cfg = tiny_config()
    cfg.ddp.use_distributed_optimizer = cfg.optimizer.use_distributed_optimizer = True
    setattr(cfg.optimizer, r.field, True)
    ctx.expect(s.cls == "CommOverlapConfig", f"{s.cls} is not CommOverlapConfig")
    cfg.comm_overlap = overlap(tp_comm_overlap=False, **_fields(s.setting))
    resolve(cfg)
    name, value = assignment(s.setting)
    ctx.expect(value is False, f"{s.setting} does not run without the gather overlap")
    ctx.expect(name == r.field and (getattr(cfg.ddp, name), getattr(cfg.optimizer, name)) == (value, value), f"{s.setting} comes out {getattr(cfg.ddp, name)}/{getattr(cfg.optimizer, name)}")
