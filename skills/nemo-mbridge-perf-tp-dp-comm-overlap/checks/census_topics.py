"""Checks for the sections added for the user-reported problems of the census (pipeline
layouts, p2p paths, userbuffers configs, gradient sync, CUDA graphs). Same rule as the
other modules: each value is read out of the sentence and compared with what the
installed megatron-core / Megatron-Bridge does, by building real configs, calling the
functions that decide, or reading the installed source with inspect/ast."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import inspect
import os
import textwrap
from pathlib import Path
from unittest import mock

from runner.claims.kit import ClaimFailed, Context, assignment, claim, literal, raised, resolve_symbol, tiny_config
from runner.claims.kit import get_field as get_value

from .overlap import distinct, overlap, run_setup


# --- helpers ---------------------------------------------------------------------------------


def _squash(text: str) -> str:
    return " ".join(text.split())


def _tc(**fields):
    """A megatron-core TransformerConfig of a tiny model with the fields a sentence names."""
    import torch
    from megatron.core.transformer import TransformerConfig

    base = dict(num_layers=8, hidden_size=64, num_attention_heads=4, pipeline_dtype=torch.bfloat16)
    base.update(fields)
    return TransformerConfig(**base)


def _fields(*texts: str) -> dict:
    """`a=1` spans of a sentence as keyword arguments."""
    out = {}
    for text in texts:
        name, value = assignment(text)
        out[name.split(".")[-1]] = value
    return out


def _raises(ctx: Context, action, error: str) -> None:
    kind, message = raised(error)
    ctx.expect_raises(action, kind, message)


def _source(dotted: str) -> str:
    return inspect.getsource(resolve_symbol(dotted))


def _has(ctx: Context, dotted: str, *texts: str) -> None:
    """The installed source of `dotted` contains each text (whitespace-insensitive)."""
    body = _squash(_source(dotted))
    for text in texts:
        ctx.expect(_squash(text) in body, f"{dotted} does not contain {text!r}")


def _package_files(package: str) -> list[Path]:
    spec = importlib.util.find_spec(package)
    return sorted(Path(spec.submodule_search_locations[0]).rglob("*.py"))


# --- references/pp-layout.md -------------------------------------------------------------------


def _build(config, pp_rank: int, vp_stage=None) -> int:
    from megatron.core import parallel_state
    from megatron.core.transformer.transformer_block import get_num_layers_to_build

    with mock.patch.object(parallel_state, "get_pipeline_model_parallel_rank", return_value=pp_rank):
        return get_num_layers_to_build(config, vp_stage=vp_stage, pp_rank=pp_rank)


@claim("overlap-pp-layout-order")
def pp_layout_order(ctx: Context) -> None:
    r = ctx.read(
        "megatron-core's `{fn:code}` returns the count from `{layout:code}` when it is set; otherwise it honours `{first:code}` and `{last:code}`."
    )
    from megatron.core.transformer import transformer_block

    fn = getattr(transformer_block, r.fn)
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    tests = [ast.unparse(n.test) for n in ast.walk(tree) if isinstance(n, ast.If)]
    order = [next((i for i, t in enumerate(tests) if f"config.{name}" in t), None) for name in (r.layout, r.first, r.last)]
    ctx.expect(None not in order and order[0] < order[1] and order[1] == order[2], f"{r.fn} tests {r.layout}, {r.first}, {r.last} at {order}")
    ctx.says("**The layout string wins, then the first/last stage counts, then an even split.**")
    s = ctx.read(
        "With `{n:code}` and `{pp:code}`, `{first_set:code}` builds {a:int} layers on stage {r0:int} and {b:int} on stage {r1:int}, and the layout `{string:code}` builds the same."
    )
    base = _fields(s.n, s.pp)
    ctx.expect(assignment(s.first_set)[0] == r.first, f"{s.first_set} does not set {r.first}")
    uneven = _tc(**base, **_fields(s.first_set))
    got = (_build(uneven, s.r0), _build(uneven, s.r1))
    ctx.expect(got == (s.a, s.b), f"{s.first_set} builds {got}")
    laid = _tc(**base, **{r.layout: s.string})
    got = (_build(laid, s.r0, 0), _build(laid, s.r1, 0))
    ctx.expect(got == (s.a, s.b), f"layout {s.string} builds {got}")
    t = ctx.read(
        "In a layout `{e:code}` is the embedding, `{t:code}` a decoder layer, `{l:code}` the loss, `{sep:code}` separates stages and `{rep:code}` repeats."
    )
    from megatron.core.transformer.enums import LayerType
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

    ctx.expect(PipelineParallelLayerLayout.parse_str_to_list(f"{t.e}{t.t}{t.rep}2{t.sep}{t.t}{t.l}") == [[LayerType.embedding, LayerType.decoder, LayerType.decoder], [LayerType.decoder, LayerType.loss]], "the layout letters parse otherwise")
    u = ctx.read(
        "The layout's number of stages divided by the PP size becomes the virtual pipeline size: `{string:code}` at PP {pp:int} gives `{vpp_field:code}` {vpp:int}."
    )
    c = _tc(num_layers=u.string.count(t.t), pipeline_model_parallel_size=u.pp, **{r.layout: u.string})
    ctx.expect(getattr(c, u.vpp_field) == u.vpp == (u.string.count(t.sep) + 1) // u.pp, f"{u.string} at PP {u.pp} gives {u.vpp_field}={getattr(c, u.vpp_field)}")
    v = ctx.read("Both are plain fields of Bridge's model providers (`{where:code}`).")
    model = tiny_config().model
    ctx.expect(v.where == "cfg.model" and all(hasattr(model, f) for f in (r.layout, r.first, r.last)), f"{v.where} lacks the fields")


@claim("overlap-pp-layout-conflicts")
def pp_layout_conflicts(ctx: Context) -> None:
    ctx.says("**What the model config rejects.**")
    r = ctx.read("A layout together with a first/last stage count raises `{error:code}`")
    _raises(ctx, lambda: _tc(num_layers=7, pipeline_model_parallel_size=2, pipeline_model_parallel_layout="Et*3|t*4L", num_layers_in_first_pipeline_stage=3), r.error)
    s = ctx.read("A first/last stage count together with `{flag:code}` raises `{error:code}` (the missing spaces are in the message).")
    _raises(ctx, lambda: _tc(num_layers=7, pipeline_model_parallel_size=2, num_layers_in_first_pipeline_stage=3, **_fields(s.flag)), s.error)
    t = ctx.read("A layout with {per:int} stages per rank next to an explicit `{vpp:code}` raises `{error:code}`.")
    name, value = assignment(t.vpp)
    stages = "|".join(["Et"] + ["t"] * (2 * t.per - 2) + ["tL"])
    _raises(ctx, lambda: _tc(num_layers=2 * t.per, pipeline_model_parallel_size=2, pipeline_model_parallel_layout=stages, **{name: value}), t.error)
    ctx.expect(_tc(num_layers=2 * t.per, pipeline_model_parallel_size=2, pipeline_model_parallel_layout=stages).virtual_pipeline_model_parallel_size == t.per, "the layout does not give that many stages per rank")
    u = ctx.read("Bridge runs these checks when `{fn:code}` finalizes the model config.")
    from megatron.bridge.training.config import ConfigContainer

    ctx.expect(u.fn == "cfg.validate()", f"{u.fn} is not ConfigContainer.validate")
    ctx.expect("self.model.finalize()" in _squash(inspect.getsource(ConfigContainer.validate)), "ConfigContainer.validate does not finalize the model")
    cfg = tiny_config()
    cfg.model.num_layers, cfg.model.pipeline_model_parallel_size = 7, 2
    cfg.model.pipeline_model_parallel_layout, cfg.model.num_layers_in_first_pipeline_stage = "Et*3|t*4L", 3
    kind, message = raised(r.error)
    ctx.expect_raises(cfg.model.finalize, kind, message)


@claim("overlap-pp-last-stage-pp1")
def pp_last_stage_pp1(ctx: Context) -> None:
    r = ctx.read("**A last-stage count with PP = {pp:int} is rejected.** `{n:code}`, `{pp_set:code}` and `{last:code}` raise `{error:code}`; `{ok:code}` is accepted.")
    fields = _fields(r.n, r.pp_set, r.last)
    ctx.expect(fields["pipeline_model_parallel_size"] == r.pp, f"{r.pp_set} is not PP = {r.pp}")
    _raises(ctx, lambda: _tc(**fields), r.error)
    fields.update(_fields(r.ok))
    ctx.expect(assignment(r.ok)[0] == assignment(r.last)[0], "the accepted value sets another field")
    _tc(**fields)


@claim("overlap-pp-vpp-divisible")
def pp_vpp_divisible(ctx: Context) -> None:
    ctx.says("**Layers per stage must divide by the VPP size.**")
    r = ctx.read("`{n:code}`, `{pp:code}` and `{vpp:code}` pass the model config, then `{fn:code}` asserts `{error:code}` while the model is built, so no layers are dropped silently.")
    c = _tc(**_fields(r.n, r.pp, r.vpp))
    from megatron.core.transformer import transformer_block

    kind, message = raised(r.error)
    ctx.expect_raises(lambda: _build(c, 0, 0) if r.fn == "get_num_layers_to_build" else getattr(transformer_block, r.fn), kind, message)
    s = ctx.read(
        "Counting the embedding and loss as layers does not rescue {n:int} layers at PP {pp:int} with VPP {vpp:int}: with `{f1:code}` and `{f2:code}` the config raises `{error:code}`."
    )
    fields = dict(num_layers=s.n, pipeline_model_parallel_size=s.pp, virtual_pipeline_model_parallel_size=s.vpp, **_fields(s.f1, s.f2))
    _raises(ctx, lambda: _tc(**fields), s.error)
    plain = _tc(num_layers=s.n, pipeline_model_parallel_size=s.pp, virtual_pipeline_model_parallel_size=s.vpp)
    _build(plain, 0, 0)  # without the flags the layout itself is valid
    ctx.says("Use a layout string to move layers off the first and last stage instead.")


@claim("overlap-pp-layout-reload")
def pp_layout_reload(ctx: Context) -> None:
    ctx.says("**A layout is saved as the string or list it was built from.**")
    r = ctx.read("Bridge's `{fn:code}` writes a `{cls:code}` as its `{attr:code}`, and `{loader:code}` resets a `{field:code}` that a run config holds as a dict (an older save) to `{none:code}`.")
    from megatron.bridge.training.utils.config_utils import _ConfigContainerBase
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

    ctx.expect(r.cls == PipelineParallelLayerLayout.__name__, f"{r.cls} is not the layout class")
    for given in ("Et|tL", [["embedding", "decoder"], ["decoder", "loss"]]):
        layout = PipelineParallelLayerLayout(given, 2)
        written = getattr(_ConfigContainerBase, r.fn)(layout)
        ctx.expect(getattr(layout, r.attr) is given and written == getattr(_ConfigContainerBase, r.fn)(given) and written == given, f"{r.fn} writes {written!r} for {given!r}")
    tree = ast.parse(textwrap.dedent(_source(f"megatron.bridge.training.model_load_save.{r.loader}")))
    resets = [n for n in ast.walk(tree) if isinstance(n, ast.If) and "isinstance" in ast.unparse(n.test) and r.field in ast.unparse(n.test) and "dict" in ast.unparse(n.test)]
    ctx.expect(len(resets) == 1 and any(isinstance(s, ast.Assign) and ast.unparse(s.value) == r.none for s in resets[0].body), f"{r.loader} has no reset of a dict {r.field} to {r.none}")
    s = ctx.read("`{fn:code}` also clears it when the model is loaded with `{pp:code}` {one:int} and no VPP.")
    tree = ast.parse(textwrap.dedent(_source(f"megatron.bridge.training.model_load_save.{s.fn}")))
    clears = [ast.unparse(n.test) for n in ast.walk(tree) if isinstance(n, ast.If) and any(isinstance(b, ast.Assign) and ast.unparse(b.targets[0]).endswith(r.field) and ast.unparse(b.value) == r.none for b in n.body)]
    ctx.expect(f"model_cfg.{s.pp} == {s.one} and model_cfg.virtual_pipeline_model_parallel_size is None" in clears, f"{s.fn} clears the layout when {clears}")
    u = ctx.read("When a model is loaded for a different pipeline size above {above:int}, set a layout that fits that size yourself.")
    ctx.expect(u.above == s.one, f"the layout is cleared at PP {s.one}, not kept above {u.above}")


@claim("overlap-pp-memory-estimate")
def pp_memory_estimate(ctx: Context) -> None:
    ctx.says("**The theoretical memory estimate knows the first/last stage counts, not layouts.**")
    r = ctx.read("`{module:code}` reads `{first:code}` and `{last:code}` to find the most loaded stage and never reads `{layout:code}`, so a split given only as a layout is estimated as an even one.")
    spec = importlib.util.find_spec(r.module)
    text = Path(spec.origin).read_text("utf-8")
    distinct(ctx, r.first, r.last)
    ctx.expect(all(hasattr(_tc(), f) for f in (r.first, r.last, r.layout)), "the sentence names fields the model config does not have")
    ctx.expect(r.first in text and r.last in text, f"{r.module} does not read {r.first}/{r.last}")
    ctx.expect(r.layout not in text, f"{r.module} reads {r.layout}")
    ctx.expect("most_loaded" in text, f"{r.module} has no most-loaded-stage estimate")


@claim("overlap-pp-microbatch-group")
def pp_microbatch_group(ctx: Context) -> None:
    r = ctx.read("**`{field:code}` is checked in the schedule, not in the config.** megatron-core fills it with the PP size when it is `{none:code}`.")
    ctx.expect(literal(r.none) is None and getattr(_tc(pipeline_model_parallel_size=6, num_layers=12), r.field) == 6, f"{r.field} is not filled with the PP size")
    ctx.expect(r.field not in _squash(_source("megatron.core.transformer.TransformerConfig.__post_init__")), f"TransformerConfig checks {r.field}")
    s = ctx.read(
        "The interleaved schedule `{fn:code}` raises `{error:code}` when the group size is above the number of micro-batches or below the PP size; "
        "here the default group of {group:int} exceeds {m:int} micro-batches, so raise the number of micro-batches (global batch size) to at least the PP size."
    )
    kind, message = raised(s.error)
    ctx.expect(kind is ValueError, f"{s.fn} raises ValueError, not {kind.__name__}")
    src = _source(f"megatron.core.pipeline_parallel.schedules.{s.fn}")
    import re

    m = re.search(r"\[PP=(\d+) , M=(\d+)\]", message)
    ctx.expect(m is not None and (int(m.group(1)), int(m.group(2))) == (s.group, s.m), "the example numbers differ from the message")
    ctx.expect("'The number of contiguous micro-batches in a virtual pipeline stage' f'should range in [PP={pipeline_parallel_size} , M={num_microbatches}]'" in _squash(src).replace("\"", "'") or
               (_squash("The number of contiguous micro-batches in a virtual pipeline stage'") in _squash(src) and "should range in [PP={pipeline_parallel_size} , M={num_microbatches}]" in src), f"{s.fn} has no such message")
    ctx.expect(message.startswith("The number of contiguous micro-batches in a virtual pipeline stageshould range in"), "the message is not the schedule's concatenation")
    tree = ast.parse(textwrap.dedent(inspect.getsource(resolve_symbol(f"megatron.core.pipeline_parallel.schedules.{s.fn}"))))
    conds = [ast.unparse(n.test) for n in ast.walk(tree) if isinstance(n, ast.If) and "microbatch_group_size_per_vp_stage" in ast.unparse(n.test) and "num_microbatches" in ast.unparse(n.test)]
    ctx.expect(any("> num_microbatches" in c and "< pipeline_parallel_size" in c for c in conds), f"{s.fn} tests {conds}")
    t = ctx.read("It raises `{exc:code}` when the remainder of the micro-batches divided by the group size is neither {zero:int} nor at least the PP size.")
    raised_here = {ast.unparse(x.exc.func) for n in ast.walk(tree) if isinstance(n, ast.If) and "The remainder of M" in ast.unparse(n) for x in n.body if isinstance(x, ast.Raise)}
    ctx.expect(raised_here == {t.exc} and "% microbatch_group_size" in src.replace("config.microbatch_group_size_per_vp_stage", "microbatch_group_size") and t.zero == 0, f"{s.fn} raises {raised_here} about the remainder")


@claim("overlap-pp-recompute-remainder")
def pp_recompute_remainder(ctx: Context) -> None:
    ctx.says("**Uniform full recompute with a remainder.**")
    r = ctx.read("In megatron-core's `{fn:code}` the uniform method ends each chunk at `{end:code}`, so `{field:code}` need not divide the layers per stage.")
    from megatron.core import recompute

    ctx.expect(callable(getattr(recompute, r.fn, None)), f"megatron.core.recompute defines no {r.fn}")
    body = _squash(inspect.getsource(getattr(recompute, r.fn)))
    ctx.expect(f"chunk_end = {r.end}" in body.replace("( ", "(").replace(" )", ")"), f"{r.fn} does not end chunks at {r.end}")
    ctx.expect(f"self.config.{r.field}" in r.end, f"{r.end} does not read {r.field}")
    s = ctx.read("With `{gran:code}` and `{method:code}` it must be set: `{unset:code}` raises `{error:code}`.")
    fields = _fields(s.gran, s.method, s.unset)
    ctx.expect(assignment(s.unset)[0] == r.field, f"{s.unset} is not {r.field}")
    _raises(ctx, lambda: _tc(**fields), s.error)
    fields[r.field] = 3  # 8 layers, chunks of 3: accepted
    _tc(**fields)


# --- references/pp-overlap.md: batched and unbatched p2p --------------------------------------


def _pp_config(pp: int, vpp=None, comm=None):
    cfg = tiny_config()
    cfg.model.pipeline_model_parallel_size = pp
    cfg.model.virtual_pipeline_model_parallel_size = vpp
    cfg.model.num_layers = pp * (vpp or 1)
    cfg.comm_overlap = comm
    return cfg


@claim("overlap-p2p-model-overwritten")
def p2p_model_overwritten(ctx: Context) -> None:
    h = ctx.read("**With a `{cls:code}`, p2p values set on the model are overwritten.**")
    ctx.expect(h.cls == "CommOverlapConfig", f"{h.cls} is not CommOverlapConfig")
    r = ctx.read("`{setting:code}` at PP {pp:int} without VPP comes out `{after:code}`, next to `{other:code}` `{other_value:code}`, once `{fn:code}` has run. Pass the value to `{cls:code}` instead.")
    name, value = assignment(r.setting)
    field = name.split(".")[-1]
    cfg = _pp_config(r.pp, None, overlap(tp_comm_overlap=False))
    setattr(cfg.model, field, value)
    ctx.expect(r.fn == "setup()", f"{r.fn} is not CommOverlapConfig.setup")
    run_setup(cfg, r.pp * 2, te=False)
    got = (getattr(cfg.model, field), getattr(cfg.model, r.other))
    ctx.expect(got == (literal(r.after), literal(r.other_value)) and got[0] != value, f"{field}, {r.other} come out {got}")
    kept = _pp_config(r.pp, None, overlap(tp_comm_overlap=False, **{field: value}))
    run_setup(kept, r.pp * 2, te=False)
    ctx.expect(r.cls == "CommOverlapConfig" and getattr(kept.model, field) == value, f"{field} passed to {r.cls} comes out {getattr(kept.model, field)}")


@claim("overlap-p2p-no-config-defaults")
def p2p_no_config_defaults(ctx: Context) -> None:
    h = ctx.read("**Without a `{cls:code}` nothing is derived.**")
    ctx.expect(h.cls == "CommOverlapConfig", f"{h.cls} is not CommOverlapConfig")
    r = ctx.read("`{field:code}` defaults to `{default:code}`; then a model with PP {pp:int} and VPP {vpp:int} keeps megatron-core's defaults `{a:code}` and `{b:code}` after `{fn:code}`.")
    from megatron.bridge.training.config import ConfigContainer
    from megatron.core.model_parallel_config import ModelParallelConfig

    cls, attr = r.field.split(".")
    ctx.expect(cls == ConfigContainer.__name__, f"{cls} is not ConfigContainer")
    default = {f.name: f.default for f in dataclasses.fields(ConfigContainer)}[attr]
    ctx.expect(default == literal(r.default), f"{r.field} defaults to {default!r}")
    core = {f.name: f.default for f in dataclasses.fields(ModelParallelConfig)}
    expected = _fields(r.a, r.b)
    ctx.expect(len(expected) == 2, f"{r.a} and {r.b} set the same field")
    ctx.expect(all(core[k] == v for k, v in expected.items()), f"megatron-core defaults {[(k, core[k]) for k in expected]}")
    from runner.claims.kit import resolve

    cfg = resolve(_pp_config(r.pp, r.vpp, None), world_size=r.pp)
    ctx.expect(r.fn == "runtime_config_update()", f"{r.fn} is not runtime_config_update")
    got = {k: getattr(cfg.model, k) for k in expected}
    ctx.expect(got == expected, f"after runtime_config_update the model has {got}")
    s = ctx.read("Megatron-LM's `{fn:code}` would reject that layout: \"{message:quote}\". Bridge does not run it, and megatron-core's `{init:code}` only requires \"{core_message:quote}\".")
    tree = ast.parse(textwrap.dedent(_source(f"megatron.training.arguments.{s.fn}")))
    gates = [a.test for a in ast.walk(tree) if isinstance(a, ast.Assert) and isinstance(a.msg, ast.Constant) and a.msg.value == s.message]
    ctx.expect(len(gates) == 1, f"validate_args has {len(gates)} such assertions")
    import types

    passes = lambda pp: eval(compile(ast.Expression(gates[0]), "<validate_args>", "eval"), {"__builtins__": {}}, {"args": types.SimpleNamespace(pipeline_model_parallel_size=pp)})  # noqa: E731,S307 - the library's own condition
    ctx.expect(not passes(r.pp) and passes(r.pp + 1), f"validate_args' gate does not start above PP {r.pp}")
    bridge = [p for p in _package_files("megatron.bridge") if "validate_args" in p.read_text("utf-8") and "import validate_args" in p.read_text("utf-8")]
    ctx.expect(not bridge, f"Bridge imports validate_args in {bridge}")
    _says_const(ctx, f"megatron.core.parallel_state.{s.init}", s.core_message)
    t = ctx.read("So with VPP at PP {pp:int} attach a `{cls:code}`, which derives `{derived:code}`.")
    ctx.expect(not passes(t.pp), f"PP {t.pp} passes validate_args' gate: no need for the fix there")
    fixed = _pp_config(t.pp, r.vpp, overlap(tp_comm_overlap=False))
    run_setup(fixed, t.pp, te=False)
    name, value = assignment(t.derived)
    ctx.expect(t.cls == "CommOverlapConfig" and getattr(fixed.model, name) == value, f"{t.cls} derives {name}={getattr(fixed.model, name)}")


@claim("overlap-p2p-batched-path")
def p2p_batched_path(ctx: Context) -> None:
    ctx.says("**Which path a p2p exchange takes.**")
    r = ctx.read(
        "megatron-core's `{method:code}` sends through `{batched:code}`, one `{call:code}` call for all sends and receives, when `{flag:code}` is on, and through `{plain:code}`, separate `{isend:code}` and `{irecv:code}` calls, otherwise."
    )
    from megatron.core.pipeline_parallel import p2p_communication as p2p_module

    cls, method = r.method.split(".")
    tree = ast.parse(textwrap.dedent(inspect.getsource(getattr(getattr(p2p_module, cls), method))))
    branch = next((n for n in ast.walk(tree) if isinstance(n, ast.If) and ast.unparse(n.test) == f"config.{r.flag}"), None)
    ctx.expect(branch is not None and f"p2p_func = {r.batched}" in ast.unparse(branch) and f"p2p_func = {r.plain}" in ast.unparse(branch.orelse), f"{r.method} does not choose {r.batched}/{r.plain} on {r.flag}")
    ctx.expect(r.call.split(".")[-1] + "(" in _source(f"megatron.core.pipeline_parallel.p2p_communication.{r.batched}"), f"{r.batched} does not call {r.call}")
    distinct(ctx, r.isend, r.irecv)
    plain = _source(f"megatron.core.pipeline_parallel.p2p_communication.{r.plain}")
    ctx.expect(f"torch.distributed.{r.isend}(" in plain and f"torch.distributed.{r.irecv}(" in plain and "batch_isend_irecv" not in plain, f"{r.plain} does not issue separate {r.isend}/{r.irecv}")
    s = ctx.read(
        "`{call:code}` issues its operations under `{manager:code}`, so a hang reported on a coalesced operation is on the batched path"
        " or in the shape exchange that comes first when `{varlen:code}` is on: `{shapes:code}` sends the shapes through `{call2:code}`"
        " whatever `{flag2:code}` says (only `{ring:code}` replaces it)."
    )
    ctx.expect(s.call == r.call and s.manager in _source(s.call), f"{s.call} does not use {s.manager}")
    # the shape exchange: called first under variable_seq_lengths, batched whatever batch_p2p_comm says
    communicate = ast.unparse(tree)
    first = next((n for n in ast.walk(tree) if isinstance(n, ast.If) and f"config.{s.varlen}" in ast.unparse(n.test) and f"self.{s.shapes}(" in ast.unparse(n.body)), None)
    choose = next((n for n in ast.walk(tree) if isinstance(n, ast.If) and ast.unparse(n.test) == f"config.{r.flag}"), None)
    ctx.expect(first is not None and choose is not None and first.lineno < choose.lineno, f"{r.method} does not exchange shapes under {s.varlen} before it chooses its path")
    shapes = inspect.getsource(getattr(getattr(p2p_module, cls), s.shapes))
    ctx.expect(s.call2 == r.call.split(".")[-1] and f"torch.distributed.{s.call2}(" in shapes and s.flag2 == r.flag and s.flag2 not in shapes, f"{s.shapes} does not batch whatever {s.flag2} says")
    ctx.expect(f"if config.{s.ring}:" in shapes and "ring_exchange(" in shapes, f"{s.ring} does not replace the batched shape exchange")
    ctx.expect(communicate.count(s.shapes) >= 1, f"{r.method} never exchanges shapes")
    t = ctx.read("With VPP Bridge derives the unbatched path; to take the batched one at PP {pp:int} with VPP {vpp:int}, pass `{ctor:code}`, which the model then carries as `{a:code}` and `{b:code}`.")
    derived = _pp_config(t.pp, t.vpp, overlap(tp_comm_overlap=False))
    run_setup(derived, t.pp, te=False)
    ctx.expect(getattr(derived.model, r.flag) is False, "Bridge derives the batched path with VPP")
    tree = ast.parse(t.ctor).body[0].value
    ctx.expect(ast.unparse(tree.func) == "CommOverlapConfig", f"{t.ctor} is not a CommOverlapConfig")
    cfg = _pp_config(t.pp, t.vpp, overlap(**{k.arg: ast.literal_eval(k.value) for k in tree.keywords}))
    run_setup(cfg, t.pp, te=False)
    expected = _fields(t.a, t.b)
    ctx.expect(len(expected) == 2, f"{t.a} and {t.b} set the same field")
    ctx.expect({k: getattr(cfg.model, k) for k in expected} == expected and expected.get(r.flag) is True, f"the model carries {[(k, getattr(cfg.model, k)) for k in expected]}")


@claim("overlap-pp-dsv4-layout")
def pp_dsv4_layout(ctx: Context) -> None:
    ctx.says("**DeepSeek-V4 gets a layout of its own.**")
    r = ctx.read(
        "When `{attr:code}` is `{value:code}`, PP > {pp:int} and `{layout:code}` is `{none:code}`, Bridge's `{method:code}` calls `{fn:code}` before it finalizes the model config."
    )
    cls, method = r.method.split(".")
    src = _source(f"megatron.bridge.models.model_provider.{cls}.{method}")
    tree = ast.parse(textwrap.dedent(src))
    branch = next((n for n in ast.walk(tree) if isinstance(n, ast.If) and r.attr in ast.unparse(n.test)), None)
    ctx.expect(branch is not None, f"{r.method} does not test {r.attr}")
    test = ast.unparse(branch.test)
    ctx.expect(f"== '{literal(r.value)}'" in test and f"> {r.pp}" in test and f"'{r.layout}', None) is {r.none}" in test, f"{r.method} tests {test}")
    ctx.expect(f"{r.fn}(self)" in ast.unparse(branch), f"the branch does not call {r.fn}")
    body = [ast.unparse(s) for s in tree.body[0].body]
    ctx.expect(body.index(next(b for b in body if b.startswith("if") and r.attr in b)) < body.index("self.finalize()"), "the layout is set after finalize")
    ctx.says("Set an explicit layout to place the stages yourself.")


def _constants(dotted: str) -> set[str]:
    """The string constants (adjacent literals joined, as Python joins them) in a definition."""
    tree = ast.parse(textwrap.dedent(_source(dotted)))
    out = {_squash(n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    for n in ast.walk(tree):  # f-strings: their literal parts
        if isinstance(n, ast.JoinedStr):
            out.add(_squash("".join(v.value if isinstance(v, ast.Constant) else "{}" for v in n.values)))
    return out


def _says_const(ctx: Context, dotted: str, message: str) -> None:
    ctx.expect(_squash(message) in _constants(dotted), f"{dotted} has no message {message!r}")


def _files_naming(package: str, text: str) -> list[str]:
    return [p.name for p in _package_files(package) if text in p.read_text("utf-8")]


# --- references/tp-userbuffers.md ------------------------------------------------------------


def _co():
    from megatron.bridge.training import comm_overlap

    return comm_overlap


@claim("overlap-tp-cfg-structure")
def tp_cfg_structure(ctx: Context) -> None:
    ctx.says("**A preset names one overlap method per GEMM.**")
    r = ctx.read("`{cls:code}` has {n:int} fields: {names:text}.")
    names = [n.strip().strip("`") for n in r.names.replace(" and ", ", ").split(",")]
    fields = [f.name for f in dataclasses.fields(getattr(_co(), r.cls))]
    ctx.expect(names == fields and len(fields) == r.n, f"{r.cls} has fields {fields}")
    s = ctx.read("Each holds a `{bulk:code}` (method `{m1:code}`), a `{ring:code}` (method `{m2:code}`) or a `{pipe:code}` (method `{m3:code}`, the only one with `{splits:code}`), or `{none:code}` for a GEMM left without overlap, as the {k:int} LoRA presets leave `{w1:code}` and `{w2:code}`.")
    presets = {n: v for n, v in vars(_co()).items() if isinstance(v, getattr(_co(), r.cls))}
    kinds = {type(getattr(v, f)).__name__ for v in presets.values() for f in fields}
    ctx.expect(kinds == {s.bulk, s.ring, s.pipe, type(literal(s.none)).__name__}, f"the presets' fields hold {sorted(kinds)}")
    empty = {n: sorted(f for f in fields if getattr(v, f) is None) for n, v in presets.items() if any(getattr(v, f) is None for f in fields)}
    ctx.expect(len(empty) == s.k and all(n.endswith("_lora") for n in empty) and all(e == sorted([s.w1, s.w2]) for e in empty.values()), f"presets with empty fields: {empty}")
    for cls, method in ((s.bulk, s.m1), (s.ring, s.m2), (s.pipe, s.m3)):
        defaults = {f.name: f.default for f in dataclasses.fields(getattr(_co(), cls))}
        ctx.expect(defaults.get("method") == literal(method), f"{cls}.method defaults to {defaults.get('method')!r}")
        ctx.expect(issubclass(getattr(_co(), cls), _co().TPOverlapCfg), f"{cls} is no TPOverlapCfg")
        ctx.expect((s.splits in defaults) == (cls == s.pipe), f"{cls} {'lacks' if cls == s.pipe else 'has'} {s.splits}")
    t = ctx.read("`{field:code}` defaults to the tuple `{tup:code}`, not `{nott:code}`, and `{ring:code}` defaults to `{a:code}` and `{b:code}`.")
    cls, attr = t.field.split(".")
    default = {f.name: f.default for f in dataclasses.fields(getattr(_co(), cls))}[attr]
    ctx.expect(default == literal(t.tup) and isinstance(default, tuple) and default != literal(t.nott) and default[0] == literal(t.nott), f"{t.field} defaults to {default!r}")
    distinct(ctx, assignment(t.a)[0], assignment(t.b)[0])
    ring = {f.name: f.default for f in dataclasses.fields(getattr(_co(), t.ring))}
    ctx.expect(all(ring[k] == v for k, v in _fields(t.a, t.b).items()), f"{t.ring} defaults {ring}")


@claim("overlap-tp-preset-catalog")
def tp_preset_catalog(ctx: Context) -> None:
    r = ctx.read("`{module:code}` ships {n:int} presets, each for an `{g1:code}` or a `{g2:code}` GPU; none is tuned for another GPU.")
    module = resolve_symbol(r.module)
    presets = [name for name, value in vars(module).items() if isinstance(value, module.TransformerLayerTPOverlapCfg)]
    ctx.expect(len(presets) == r.n, f"{r.module} has {len(presets)} presets")
    gpus = {name.split("_")[2] for name in presets}
    ctx.expect(gpus == {r.g1, r.g2}, f"the presets are for {sorted(gpus)}")
    s = ctx.read("Start from the preset with your hidden size, TP, micro-batch size and sequence length, copy it with `{fn:code}`, and tune the `{a:code}`, `{b:code}` and `{c:code}` of its entries on your hardware.")
    ctx.expect(all(part.startswith(("h", "tp", "cp", "mbs", "seqlen", "lora")) for name in presets for part in name.split("_")[3:]), "a preset name holds more than hidden size, TP, CP, micro-batch and sequence length")
    preset = getattr(module, presets[0])
    copy = resolve_symbol(s.fn)(preset, qkv_dgrad=preset.qkv_dgrad)
    ctx.expect(isinstance(copy, module.TransformerLayerTPOverlapCfg) and copy is not preset, f"{s.fn} does not copy a preset")
    tunable = {f.name for cls in (module.BulkOverlapCfg, module.PipelineOverlapCfg, module.RingExchangeOverlapCfg) for f in dataclasses.fields(cls)}
    distinct(ctx, s.a, s.b, s.c)
    ctx.expect({s.a, s.b, s.c} <= tunable, f"{s.a, s.b, s.c} are not all overlap-config fields")


@claim("overlap-tp-ub-shape")
def tp_ub_shape(ctx: Context) -> None:
    ctx.says("**The buffers are sized from the run's shape, not from the preset.**")
    r = ctx.read("Bridge's `{fn:code}` passes Transformer Engine's `{ub:code}` the shape `{shape:code}`.")
    dotted = f"megatron.bridge.training.initialize.{r.fn}"
    tree = ast.parse(textwrap.dedent(_source(dotted)))
    shapes = [ast.unparse(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "input_shape"]
    ctx.expect(shapes == [ast.unparse(ast.parse(r.shape).body[0].value)], f"{r.fn} builds the shape {shapes}")
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == r.ub]
    ctx.expect(calls and all(any(k.arg == "shape" and ast.unparse(k.value) == "input_shape" for k in c.keywords) for c in calls), f"{r.fn} does not pass the shape to {r.ub}")
    # A preset carries no shape: its fields are GEMM names whose values say only how to overlap.
    p = ctx.read("A preset, a `{cls:code}`, holds only how each of its {n:int} GEMMs overlaps, with no field for the hidden size, TP size, micro-batch size or sequence length, so a preset named for another shape still runs: Bridge's own `{recipe:code}` sets `{field:code}` to {tp:int} and uses `{preset:code}`.")
    co = _co()
    cls = getattr(co, p.cls)
    fields = [f.name for f in dataclasses.fields(cls)]
    ctx.expect(len(fields) == p.n and all(f.split("_")[-1] in ("fprop", "dgrad", "wgrad") for f in fields), f"{p.cls} has the fields {fields}")
    per_gemm = {f.name for c in (co.BulkOverlapCfg, co.PipelineOverlapCfg, co.RingExchangeOverlapCfg) for f in dataclasses.fields(c)}
    shape_words = ("hidden", "seq", "tensor", "tp_size", "micro", "batch", "mbs")
    ctx.expect(not [f for f in per_gemm | set(fields) if any(w in f for w in shape_words)], f"a preset field names a shape: {sorted(per_gemm)}")
    ctx.expect(isinstance(getattr(co, p.preset), cls) and "_tp4_" in p.preset and p.tp != 4, f"{p.preset} is not a {p.cls} named for another TP")
    recipe = next(n for n in ast.walk(_recipe_tree(p.recipe)) if isinstance(n, ast.FunctionDef) and n.name == p.recipe)
    sets = {ast.unparse(n.targets[0]): ast.unparse(n.value) for n in ast.walk(recipe) if isinstance(n, ast.Assign) and len(n.targets) == 1}
    ctx.expect(sets.get(f"cfg.model.{p.field}") == str(p.tp), f"{p.recipe} sets {p.field} to {sets.get(f'cfg.model.{p.field}')}")
    used = [k for n in ast.walk(recipe) if isinstance(n, ast.Call) and ast.unparse(n.func) == "CommOverlapConfig" for k in n.keywords if k.arg == "tp_comm_overlap_cfg"]
    ctx.expect([ast.unparse(k.value) for k in used] == [p.preset], f"{p.recipe} passes {[ast.unparse(k.value) for k in used]} to CommOverlapConfig")
    ctx.says("A preset's name says what it was tuned for.", "How fast the overlap runs is decided inside Transformer Engine.")


def _recipe_tree(name: str) -> ast.AST:
    """The module of Bridge's recipes that defines `name` (read, not run: recipes fetch Hugging Face configs)."""
    root = Path(importlib.util.find_spec("megatron.bridge.recipes").origin).parent
    for path in sorted(root.rglob("*.py")):
        text = path.read_text("utf-8")
        if f"def {name}(" in text:
            return ast.parse(text)
    raise ClaimFailed(f"no Bridge recipe defines {name}")


@claim("overlap-tp-cfg-yaml")
def tp_cfg_yaml(ctx: Context) -> None:
    ctx.says("**A YAML file is read only from the model config.**")
    r = ctx.read("`{fn:code}` opens `{field:code}` with `{loader:code}` when it is a `{kind:code}`, the Bridge counterpart of Megatron-LM's `{flag:code}` (\"{help:quote}\").")
    tree = ast.parse(textwrap.dedent(_source(f"megatron.bridge.training.initialize.{r.fn}")))
    branch = next((n for n in ast.walk(tree) if isinstance(n, ast.If) and ast.unparse(n.test) == f"isinstance({r.field}, {r.kind})"), None)
    ctx.expect(branch is not None and f"{r.loader}(stream)" in ast.unparse(branch) and "open(" in ast.unparse(branch), f"{r.fn} does not read a {r.kind} {r.field} with {r.loader}")
    args = _squash(Path(importlib.util.find_spec("megatron.training.arguments").origin).read_text("utf-8"))
    ctx.expect(f"'{r.flag}', type=str, default=None, help='{r.help}'" in args, f"Megatron-LM has no {r.flag} with help {r.help!r}")
    s = ctx.read("But when TP overlap stays on, `{setup:code}` converts its own `{own:code}` with `{fn:code}`, so a path string passed there raises `{exc:code}`. Pass a `{cls:code}` to `{cfg_cls:code}` instead.")
    ctx.expect(f"{s.fn}(comm_overlap_cfg.{s.own})" in _source(f"megatron.bridge.training.comm_overlap.{s.setup.removesuffix('()')}"), f"{s.setup} does not call {s.fn} on {s.own}")
    cfg = tiny_config()
    cfg.model.tensor_model_parallel_size, cfg.model.sequence_parallel = 2, True
    cfg.comm_overlap = overlap(tp_comm_overlap=True, **{s.own: "/tmp/ub.yaml"})
    kind = __builtins__[s.exc] if isinstance(__builtins__, dict) else getattr(__builtins__, s.exc)
    try:
        run_setup(cfg, 2, te=True)
    except kind:
        pass
    else:
        raise ClaimFailed(f"a path string passed to CommOverlapConfig raises no {s.exc}")
    good = tiny_config()
    good.model.tensor_model_parallel_size, good.model.sequence_parallel = 2, True
    good.comm_overlap = resolve_symbol(f"megatron.bridge.training.comm_overlap.{s.cfg_cls}")(tp_comm_overlap=True, **{s.own: _co().userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192})
    ctx.expect(isinstance(getattr(good.comm_overlap, s.own), getattr(_co(), s.cls)) and s.cls != s.cfg_cls, f"the preset is not a {s.cls}")
    run_setup(good, 2, te=True)
    ctx.expect(isinstance(good.model.tp_comm_overlap_cfg, dict), "a preset does not reach the model as a dict")


@claim("overlap-tp-launch-env-absent")
def tp_launch_env_absent(ctx: Context) -> None:
    ctx.says("**Transformer Engine's and OpenMPI's variables are yours to set.**")
    r = ctx.read("No file of `{p1:code}` or `{p2:code}` names `{v1:code}` or any `{v2:code}` variable, so Bridge never sets them.")
    distinct(ctx, r.p1, r.p2)
    distinct(ctx, r.v1, r.v2)
    for package in (r.p1, r.p2):
        for name in (r.v1, r.v2):
            ctx.expect(not _files_naming(package, name), f"{package} names {name} in {_files_naming(package, name)}")
    s = ctx.read("Export them in the launcher, or put them in `{field:code}`, which `{fn:code}` copies into `{env:code}` when they are not already set.")
    from runner.claims.kit import preserved_environ, resolve

    with preserved_environ():
        os.environ.pop(r.v1, None)
        cfg = tiny_config()
        ctx.expect(s.field == "cfg.env_vars" and s.fn == "runtime_config_update()", f"{s.field}/{s.fn} are not what applies the variables")
        cfg.env_vars = {r.v1: "1"}
        update = resolve_symbol("megatron.bridge.training.config.runtime_config_update")
        os.environ["WORLD_SIZE"] = "1"
        update(cfg)
        ctx.expect(resolve_symbol(s.env).get(r.v1) == "1", f"{s.field} did not reach {s.env}")
        os.environ[r.v1] = "0"
        cfg = tiny_config()
        cfg.env_vars = {r.v1: "1"}
        update(cfg)
        ctx.expect(os.environ[r.v1] == "0", "cfg.env_vars replaced an exported value")
    t = ctx.read("The OpenMPI settings matter only when userbuffers bootstrap over MPI, with `{backend:code}` or a Transformer Engine older than {version:version} (see [tp-bring-up.md](tp-bring-up.md)).")
    name, value = assignment(t.backend)
    body = _source("megatron.bridge.training.initialize._initialize_tp_communicators")
    ctx.expect(f'is_te_min_version("{t.version}")' in body and f'backend="{value}"' in body and name in body, f"the MPI path is not gated on {t.version} / {t.backend}")
    u = ctx.read("To run without userbuffers at all, pass `{ctor:code}`: the model then gets `{field:code}` `{value:code}`.")
    call_node = ast.parse(u.ctor).body[0].value
    cfg = tiny_config()
    cfg.model.tensor_model_parallel_size, cfg.model.sequence_parallel = 2, True
    cfg.comm_overlap = overlap(**{k.arg: ast.literal_eval(k.value) for k in call_node.keywords})
    run_setup(cfg, 2, te=True)
    ctx.expect(ast.unparse(call_node.func) == "CommOverlapConfig" and getattr(cfg.model, u.field) == literal(u.value), f"the model has {u.field}={getattr(cfg.model, u.field)}")


@claim("overlap-tp-sp-assert-cli")
def tp_sp_assert_cli(ctx: Context) -> None:
    ctx.says("**The sequence-parallel assertion is Megatron-LM's, not Bridge's.**")
    r = ctx.read("Megatron-LM's `{fn:code}` asserts \"{message:quote}\".")
    _says_const(ctx, f"megatron.training.arguments.{r.fn}", r.message)
    s = ctx.read("Bridge never runs it: with TP {tp:int}, `{sp:code}` and `{ctor:code}`, `{fn:code}` passes, logs \"{warning:quote}\" and leaves `{field:code}` `{value:code}`.")
    from runner.claims.kit import collect_warnings, resolve

    cfg = tiny_config()
    cfg.model.tensor_model_parallel_size = s.tp
    name, value = assignment(s.sp)
    setattr(cfg.model, name, value)
    call_node = ast.parse(s.ctor).body[0].value
    cfg.comm_overlap = overlap(**{k.arg: ast.literal_eval(k.value) for k in call_node.keywords})
    with mock.patch.object(_co(), "HAVE_TE", True), collect_warnings() as caught:
        resolve(cfg, world_size=s.tp)
    ctx.expect(s.fn == "runtime_config_update()", f"{s.fn} is not runtime_config_update")
    ctx.expect(any(_squash(s.warning) == _squash(w) for w in caught), f"no warning {s.warning!r}: {caught}")
    ctx.expect(get_value(cfg, s.field) == literal(s.value), f"{s.field} is {get_value(cfg, s.field)}")
    t = ctx.read("Turn on `{fix:code}` to keep TP overlap.")
    cfg = tiny_config()
    cfg.model.tensor_model_parallel_size = s.tp
    name, value = assignment(t.fix)
    setattr(cfg.model, name, value)
    cfg.comm_overlap = overlap(**{k.arg: ast.literal_eval(k.value) for k in call_node.keywords})
    with mock.patch.object(_co(), "HAVE_TE", True):
        resolve(cfg, world_size=s.tp)
    ctx.expect(get_value(cfg, s.field) is True, f"with {t.fix} TP overlap is still off")


# --- references/dp-grad-sync.md --------------------------------------------------------------


@claim("overlap-grad-reduce-fp32")
def grad_reduce_fp32(ctx: Context) -> None:
    ctx.says("**With bf16, gradients are accumulated and reduced in fp32 by default.**")
    r = ctx.read("`{field:code}` defaults to `{default:code}`; the `{bf16:code}` preset keeps `{bf16_value:code}` and `{fp16:code}` sets `{fp16_value:code}`.")
    from megatron.bridge.training import mixed_precision

    cls, attr = r.field.split(".")
    defaults = {f.name: f.default for f in dataclasses.fields(getattr(mixed_precision, cls))}
    ctx.expect(defaults[attr] == literal(r.default), f"{r.field} defaults to {defaults[attr]!r}")
    for preset, value in ((r.bf16, r.bf16_value), (r.fp16, r.fp16_value)):
        got = getattr(getattr(mixed_precision, preset.removesuffix("()"))(), attr)
        ctx.expect(got == literal(value), f"{preset} sets {attr}={got}")
    s = ctx.read("megatron-core's `{ddp_field:code}` defaults to `{ddp_default:code}`, and `{fn:code}` replaces it with the mixed-precision value.")
    from megatron.core.distributed import DistributedDataParallelConfig
    from runner.claims.kit import resolve

    dcls, dattr = s.ddp_field.split(".")
    ctx.expect(dcls == DistributedDataParallelConfig.__name__ and DistributedDataParallelConfig().__getattribute__(dattr) == literal(s.ddp_default), f"{s.ddp_field} defaults otherwise")
    cfg = tiny_config()
    cfg.mixed_precision = r.bf16.removesuffix("()")
    setattr(cfg.ddp, dattr, literal(s.ddp_default))
    resolve(cfg, world_size=1)
    ctx.expect(s.fn == "runtime_config_update()" and getattr(cfg.ddp, dattr) == literal(r.bf16_value), f"after {s.fn} the DDP config has {getattr(cfg.ddp, dattr)}")
    t = ctx.read("megatron-core's DDP gives the gradient buffers `{dtype:code}` when it is on and the parameter dtype otherwise, so the buckets, and their reduce-scatter or all-reduce, use that dtype.")
    tree = ast.parse(textwrap.dedent(_source("megatron.core.distributed.param_and_grad_buffer.group_params_for_buffers")))
    picks = [ast.unparse(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "grad_dtype"]
    ctx.expect(picks == [f"{t.dtype} if grad_reduce_in_fp32 else param.dtype"], f"group_params_for_buffers picks {picks}")
    ctx.expect(f"group_params_for_buffers(all_params, self.ddp_config.{dattr})" in _source("megatron.core.distributed.DistributedDataParallel.__init__"), "DDP does not group its buffers by the flag")
    u = ctx.read("Set it on `{where:code}` to change it (see SKILL.md).")
    ctx.expect(u.where == "cfg.mixed_precision" and attr in {f.name for f in dataclasses.fields(getattr(mixed_precision, cls))}, f"{u.where} has no {attr}")


@claim("overlap-grad-ready-counts")
def grad_ready_counts(ctx: Context) -> None:
    r = ctx.read("**\"{message:quote}\" no longer exists.** No file of the installed `{package:code}` contains it.")
    ctx.expect(not _files_naming(r.package, r.message), f"{r.package} still says {r.message!r}")
    s = ctx.read(
        "Each bucket group counts, in `{hook:code}`, how often each parameter's gradient became ready in the last micro-batch, and starts `{start:code}` once `{counts:code}` equals `{golden:code}`, which `{reset:code}` records at the end of the first batch; a parameter used twice in the forward is therefore allowed."
    )
    base = "megatron.core.distributed.param_and_grad_buffer._ParamAndGradBucketGroup"
    hook = _squash(_source(f"{base}.{s.hook}"))
    ctx.expect(f"self.{s.counts} == self.{s.golden}" in hook and f"self.{s.start.removesuffix('()')}(" in hook and "is_last_microbatch" in hook, f"{s.hook} does not start the sync when the counts match")
    ctx.expect(f"self.{s.counts}[param] += 1" in hook, f"{s.hook} does not count per parameter")
    reset = _squash(_source(f"{base}.{s.reset.removesuffix('()')}"))
    ctx.expect(f"self.{s.golden} = self.{s.counts}" in reset and "is_first_batch" in reset, f"{s.reset} does not record the first batch's counts")
    t = ctx.read("In that first batch the reduction starts from `{finish:code}` instead, so the first iteration is not overlapped.")
    tree = ast.parse(textwrap.dedent(_source(f"{base}.{t.finish.removesuffix('()')}")))
    first = [n for n in ast.walk(tree) if isinstance(n, ast.If) and ast.unparse(n.test) == "self.is_first_batch"]
    ctx.expect(any("self.start_grad_sync(" in ast.unparse(n) for n in first), f"{t.finish} does not start the reduction in the first batch")


@claim("overlap-param-gather-order")
def param_gather_order(ctx: Context) -> None:
    ctx.says("**A forward order that differs from registration costs overlap, not correctness.**")
    r = ctx.read("With `{flag:code}`, the DDP forward pre-hook calls `{finish:code}` on the bucket group of every parameter of a module before it runs.")
    hook = _squash(_source("megatron.core.distributed.DistributedDataParallel._make_forward_pre_hook"))
    ctx.expect(f"self.param_to_bucket_group[param].{r.finish.removesuffix('()')}(" in hook and "for param in module.parameters(recurse=False)" in hook, f"the pre-hook does not call {r.finish} per parameter")
    init = _squash(_source("megatron.core.distributed.DistributedDataParallel.__init__"))
    ctx.expect(f"self.use_forward_hook = self.ddp_config.{r.flag}" in init and "if self.use_forward_hook: self.enable_forward_pre_hook()" in init, f"the pre-hook is not installed by {r.flag}")
    s = ctx.read("That method dispatches the group's all-gather itself if it was not dispatched yet, waits for it, then dispatches the next group; if the next group was dispatched already it warns \"{warning:quote}\"")
    dotted = f"megatron.core.distributed.param_and_grad_buffer._ParamAndGradBucketGroup.{r.finish.removesuffix('()')}"
    tree = ast.parse(textwrap.dedent(_source(dotted)))
    body = [ast.unparse(n) for n in tree.body[0].body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    ctx.expect(any(b.startswith("if not self.param_gather_dispatched:") and "self.start_param_sync()" in b for b in body), f"{r.finish} does not dispatch a missing gather")
    waited = next((b for b in body if b.startswith("if self.param_gather_handle is not None:")), "")
    ctx.expect(".wait()" in waited and "next_param_gather_bucket_group.start_param_sync()" in waited, f"{r.finish} does not wait then dispatch the next group")
    _says_const(ctx, dotted, s.warning)


@claim("overlap-mxfp8-param-gather")
def mxfp8_param_gather(ctx: Context) -> None:
    ctx.says("**MXFP8 parameter all-gathers reuse the gradient buffer.**")
    r = ctx.read("megatron-core's `{cls:code}` raises `{error:code}` when both are set.")
    from megatron.core import optimizer as core_optimizer

    kind, message = raised(r.error)
    fields = {"overlap_param_gather_with_optimizer_step": True, "reuse_grad_buf_for_mxfp8_param_ag": True}
    ctx.expect(all(name in message for name in fields), f"{r.error} does not name both fields")
    ctx.expect_raises(lambda: getattr(core_optimizer, r.cls)(**fields), kind, message)
    s = ctx.read("Outside Megatron FSDP, Bridge's `{fn:code}` asserts \"{message:quote}\".")
    from megatron.bridge.training.config import ConfigContainer

    ctx.expect(s.fn == "cfg.validate()", f"{s.fn} is not ConfigContainer.validate")
    _says_const(ctx, "megatron.bridge.training.config.ConfigContainer.validate", s.message)
    tree = ast.parse(textwrap.dedent(_source("megatron.bridge.training.config.ConfigContainer.validate")))
    gate = next(n for n in ast.walk(tree) if isinstance(n, ast.If) and any(isinstance(a, ast.Assert) and isinstance(a.msg, ast.Constant) and _squash(a.msg.value) == _squash(s.message) for a in n.body))
    ctx.expect("not is_fsdp" in ast.unparse(gate.test) and "is_fsdp = self.dist.use_megatron_fsdp or self.ddp.use_megatron_fsdp" in ast.unparse(tree), "the assertion is not limited to non-FSDP runs")
    t = ctx.read("So run MXFP8 with `{fix:code}` on `{where:code}` and leave `{off:code}` off; `{cls:code}` never turns it on (see [dp-overlap.md](dp-overlap.md)).")
    name, value = assignment(t.fix)
    from megatron.bridge.training.mixed_precision import MixedPrecisionConfig

    ctx.expect(t.where == "cfg.mixed_precision" and name in {f.name for f in dataclasses.fields(MixedPrecisionConfig)} and value is True, f"{t.fix} is not a mixed-precision field")
    ctx.expect(t.off == "overlap_param_gather_with_optimizer_step" and t.cls == "CommOverlapConfig", f"{t.off}/{t.cls}")
    cfg = tiny_config()
    cfg.model.pipeline_model_parallel_size, cfg.model.virtual_pipeline_model_parallel_size, cfg.model.num_layers = 2, 2, 4
    cfg.ddp.use_distributed_optimizer = True
    cfg.comm_overlap = overlap(tp_comm_overlap=False)
    run_setup(cfg, 4, te=False)
    ctx.expect(getattr(cfg.optimizer, t.off) is False, f"{t.cls} turns {t.off} on")


@claim("overlap-cuda-graph-hooks")
def cuda_graph_hooks(ctx: Context) -> None:
    ctx.says("**The DDP hooks step aside while a graph is captured.**")
    r = ctx.read("megatron-core's DDP forward pre-hook and backward post-hook return at once while `{fn:code}` is true.")
    for hook in ("_make_forward_pre_hook", "_make_backward_post_hook"):
        tree = ast.parse(textwrap.dedent(_source(f"megatron.core.distributed.DistributedDataParallel.{hook}")))
        gates = [n for n in ast.walk(tree) if isinstance(n, ast.If) and ast.unparse(n.test) == r.fn]
        ctx.expect(any(isinstance(n.body[0], ast.Return) for n in gates), f"{hook} does not return while {r.fn}")
    s = ctx.read("With `{impl:code}`, Bridge's `{train:code}` disables the forward pre-hook around `{create:code}` (when it uses the distributed optimizer with `{flag:code}`) and then calls `{manual:code}`.")
    tree = ast.parse(textwrap.dedent(_source(f"megatron.bridge.training.train.{s.train.removesuffix('()')}")))
    name, value = assignment(s.impl)
    block = next((n for n in ast.walk(tree) if isinstance(n, ast.If) and f"model_config.{name} == '{value}'" in ast.unparse(n.test) and "cuda_graph_helper" in ast.unparse(n.test)), None)
    ctx.expect(block is not None, f"{s.train} has no {s.impl} graph block")
    lines = [ast.unparse(b) for b in block.body]
    at = lines.index(s.create)
    ctx.expect("disable_forward_pre_hook(" in lines[at - 1] and "enable_forward_pre_hook(" in lines[at + 1] and s.manual in lines[at + 1], f"{s.train} does not wrap {s.create}: {lines}")
    toggle = _squash(_source("megatron.bridge.training.utils.train_utils.should_disable_forward_pre_hook") if _has_symbol("megatron.bridge.training.utils.train_utils.should_disable_forward_pre_hook") else _source("megatron.bridge.training.train.should_disable_forward_pre_hook"))
    ctx.expect("use_distributed_optimizer" in toggle and s.flag in toggle, f"the toggle does not depend on the distributed optimizer and {s.flag}")


def _has_symbol(dotted: str) -> bool:
    try:
        resolve_symbol(dotted)
        return True
    except Exception:
        return False


@claim("overlap-cuda-graph-full-iteration")
def cuda_graph_full_iteration(ctx: Context) -> None:
    ctx.says("**Full-iteration graphs: one check only.**")
    r = ctx.read("With `{impl:code}`, `{fn:code}` asserts \"{message:quote}\"")
    ctx.expect(r.fn == "cfg.validate()", f"{r.fn} is not ConfigContainer.validate")
    _says_const(ctx, "megatron.bridge.training.config.ConfigContainer.validate", r.message)
    s = ctx.read("It does not reject `{setting:code}` passed to `{cls:code}`: that config passes `{resolver:code}`, and the gather it starts in the optimizer step is outside the captured graph. Leave it off with full-iteration graphs.")
    from runner.claims.kit import resolve

    name, value = assignment(s.setting)
    impl, impl_value = assignment(r.impl)
    cfg = tiny_config()
    setattr(cfg.model, impl, impl_value)
    cfg.rerun_state_machine.check_for_nan_in_loss = False
    cfg.ddp.use_distributed_optimizer = True
    cfg.comm_overlap = overlap(tp_comm_overlap=False, **{name: value})
    resolve(cfg, world_size=2)
    ctx.expect(s.cls == "CommOverlapConfig" and s.resolver == "runtime_config_update()" and getattr(cfg.optimizer, name) is value, f"{s.setting} came out {getattr(cfg.optimizer, name)}")
    default = {f.name: f.default for f in dataclasses.fields(type(cfg.optimizer))}[name]
    ctx.expect(value != default, f"{s.setting} is the default: nothing to reject")
    cfg = tiny_config()
    setattr(cfg.model, impl, impl_value)
    kind = AssertionError
    ctx.expect_raises(lambda: resolve(cfg, world_size=1), kind, r.message.split(". ")[0])


@claim("overlap-cuda-graph-moe-scopes")
def cuda_graph_moe_scopes(ctx: Context) -> None:
    ctx.says("**Scoped graphs with MoE.**")
    r = ctx.read("megatron-core's `{cls:code}` asserts \"{m1:quote}\" and, for an MoE that does not drop and pad to capacity, \"{m2:quote}\"; with recompute other than selective it asserts \"{m3:quote}\"")
    dotted = f"megatron.core.transformer.{r.cls}.__post_init__"
    for message in (r.m1, r.m2, r.m3):
        _says_const(ctx, dotted, message)
    tree = ast.parse(textwrap.dedent(_source(dotted)))
    drop = [n for n in ast.walk(tree) if isinstance(n, ast.If) and "moe_pad_expert_input_to_capacity" in ast.unparse(n.test) and any(isinstance(a, ast.Assert) and isinstance(a.msg, ast.Constant) and a.msg.value == r.m2 for a in ast.walk(n))]
    ctx.expect(bool(drop), f"{r.m2!r} is not tied to drop-and-pad")
    recompute = [n for n in ast.walk(tree) if isinstance(n, ast.If) and "recompute_granularity != 'selective'" in ast.unparse(n.test) and any(isinstance(a, ast.Assert) and isinstance(a.msg, ast.Constant) and a.msg.value == r.m3 for a in ast.walk(n))]
    ctx.expect(bool(recompute), f"{r.m3!r} is not tied to non-selective recompute")
    s = ctx.read("Bridge's `{fn:code}` accepts `{local:code}` only for full-iteration graphs, so scoped capture such as `{scope:code}` needs `{te:code}`.")
    import types

    from megatron.bridge.utils import cuda_graph

    check = getattr(cuda_graph, s.fn)
    from megatron.core.transformer.enums import CudaGraphModule

    ctx.expect(s.scope in CudaGraphModule.__members__, f"{s.scope} is not a CUDA graph scope")
    name, local = assignment(s.local)
    _, te = assignment(s.te)
    scoped = types.SimpleNamespace(**{name: local, "cuda_graph_modules": [s.scope], "cuda_graph_scope": [s.scope]})
    try:
        check(scoped)
    except ValueError as error:
        ctx.expect(te in str(error), f"{s.fn} rejects scoped local graphs without pointing to {te}: {error}")
    else:
        raise ClaimFailed(f"{s.fn} accepts {s.local} with scope {s.scope}")
    check(types.SimpleNamespace(**{name: "full_iteration"}))


@claim("overlap-ep-a2a-needs-vpp")
def ep_a2a_needs_vpp(ctx: Context) -> None:
    ctx.says("**Expert-parallel all-to-all overlap with PP needs VPP.**")
    r = ctx.read("With `{flag:code}` and PP > {pp:int}, both Bridge's `{bridge:code}` and megatron-core's `{core:code}` assert \"{message:quote}\".")
    name, value = assignment(r.flag)
    for dotted in (f"megatron.bridge.training.comm_overlap.{r.bridge}._get_model_comm_overlap_cfgs", f"megatron.core.transformer.{r.core}.__post_init__"):
        _says_const(ctx, dotted, r.message)
        tree = ast.parse(textwrap.dedent(_source(dotted)))
        gate = [n for n in ast.walk(tree) if isinstance(n, ast.If) and ast.unparse(n.test).endswith(f"pipeline_model_parallel_size > {r.pp}") and any(isinstance(a, ast.Assert) and isinstance(a.msg, ast.Constant) and a.msg.value == r.message for a in n.body)]
        ctx.expect(bool(gate), f"{dotted} does not gate the assertion on PP > {r.pp}")
        ctx.expect(name in _source(dotted) and value is True, f"{dotted} does not read {name}")
    ctx.says("The MoE expert-parallel overlap skill covers its other requirements.")


def _sets_layout(text: str, field: str) -> set[str]:
    """The values a function's source assigns to `<something>.<field>`."""
    if not text:
        return set()
    tree = ast.parse(textwrap.dedent(text))
    return {ast.unparse(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign) and any(ast.unparse(t).endswith("." + field) for t in n.targets)}


@claim("overlap-pp-llama70b-recipe")
def pp_llama70b_recipe(ctx: Context) -> None:
    ctx.says("**The Llama 70B FP8 perf recipe for H100 sets no layout.**")
    r = ctx.read("`{fn:code}` in `{module:code}` sets PP {pp:int} and VPP {vpp:int} and never sets `{layout:code}`, so every one of the {pp2:int} × {vpp2:int} chunks gets the same number of layers and the first and last stage carry the embedding and the loss on top.")
    spec = importlib.util.find_spec(r.module)
    tree = ast.parse(Path(spec.origin).read_text("utf-8"))
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == r.fn), None)
    ctx.expect(fn is not None, f"{r.module} defines no {r.fn}")
    sets = {ast.unparse(n.targets[0]): ast.unparse(n.value) for n in ast.walk(fn) if isinstance(n, ast.Assign) and len(n.targets) == 1}
    ctx.expect(sets.get("cfg.model.pipeline_model_parallel_size") == str(r.pp) and sets.get("cfg.model.virtual_pipeline_model_parallel_size") == str(r.vpp), f"{r.fn} sets PP/VPP {sets.get('cfg.model.pipeline_model_parallel_size')}/{sets.get('cfg.model.virtual_pipeline_model_parallel_size')}")
    ctx.expect((r.pp2, r.vpp2) == (r.pp, r.vpp), "the chunk count is not PP x VPP")
    called = {ast.unparse(n.func) for n in ast.walk(fn) if isinstance(n, ast.Call)}
    for name in called:  # the recipe and the helpers it calls, in this module or imported
        target = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
        imported = resolve_symbol(r.module).__dict__.get(name)
        text = ast.unparse(target) if target is not None else (inspect.getsource(imported) if inspect.isfunction(imported) else "")
        ctx.expect(_sets_layout(text, r.layout) <= {"None"}, f"{name} sets {r.layout} to {_sets_layout(text, r.layout)}")
    ctx.expect(not _sets_layout(ast.unparse(fn), r.layout), f"{r.fn} sets {r.layout}")
    c = _tc(num_layers=80, pipeline_model_parallel_size=r.pp, virtual_pipeline_model_parallel_size=r.vpp)
    ctx.expect({_build(c, rank, v) for rank in range(r.pp) for v in range(r.vpp)} == {80 // (r.pp * r.vpp)}, "the uniform split is not even per chunk")
    s = ctx.read("To balance them, set a layout on `{where:code}` after building the recipe; its stage count fixes the VPP.")
    ctx.expect(s.where == "cfg.model" and hasattr(tiny_config().model, r.layout), f"{s.where} has no {r.layout}")


@claim("overlap-cuda-graph-deprecated-flags")
def cuda_graph_deprecated_flags(ctx: Context) -> None:
    import warnings

    ctx.says("**Old CUDA-graph flags still work, with a warning.**")
    r = ctx.read(
        "megatron-core's `{cls:code}` turns `{old1:code}` into `{new1:code}` with the warning \"{w1:quote}\", and `{old2:code}` into `{new2:code}`. "
        "A `{scope:code}` of `{value:code}` becomes `{modules:code}` with the warning \"{w2:quote}\""
    )
    ctx.expect(r.cls == "TransformerConfig", f"{r.cls} is not TransformerConfig")

    def build(**fields):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            config = _tc(num_layers=2, **fields)
        return config, [_squash(str(w.message)) for w in caught]

    for old, new, warning in ((r.old1, r.new1, r.w1), (r.old2, r.new2, None)):
        config, caught = build(**_fields(old))
        name, value = assignment(new)
        ctx.expect(getattr(config, name) == value, f"{old} gives {name}={getattr(config, name)!r}")
        if warning is not None:
            ctx.expect(_squash(warning) in caught, f"{old} warns {caught}")
    config, caught = build(**{r.scope: literal(r.value), "cuda_graph_impl": assignment(r.new1)[1]})
    ctx.expect([m.name for m in getattr(config, r.modules)] == literal(r.value), f"{r.scope} gives {r.modules}={getattr(config, r.modules)}")
    ctx.expect(_squash(r.w2) in caught, f"{r.scope} warns {caught}")
