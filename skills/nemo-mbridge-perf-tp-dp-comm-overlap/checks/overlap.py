"""Checks for this skill (claim ids match its SKILL.md markers).

Each check reads the values it tests out of the claim's sentences (`ctx.read`) and
compares them with what Bridge does; see registry.py for the rule."""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
from unittest import mock

from runner.claims.kit import collect_warnings, preserved_environ, resolve, tiny_config
from runner.claims.kit import Context, arithmetic, assignment, call, claim, function_source, literal, resolve_symbol, source_of, threshold
from runner.claims.kit import get_field as get_value, set_field as set_value

ENABLE = "overlap-enable-override"
DISABLING = "Disabling tensor parallel communication overlap"
DP_FIELDS = ("bucket_size", "overlap_grad_reduce", "overlap_param_gather", "align_param_gather")


def overlap(**fields):
    from megatron.bridge.training.comm_overlap import CommOverlapConfig

    return CommOverlapConfig(**fields)


def comm_overlap_module():
    from megatron.bridge.training import comm_overlap

    return comm_overlap


def run_setup(cfg, world_size: int, te: bool) -> list[str]:
    """finalize() and setup() as runtime_config_update runs them, with HAVE_TE as given."""
    with mock.patch.object(comm_overlap_module(), "HAVE_TE", te), collect_warnings() as warnings, preserved_environ():
        os.environ["WORLD_SIZE"] = str(world_size)
        cfg.set_data_parallel_size()
        cfg.comm_overlap.finalize()
        cfg.comm_overlap.setup(cfg.model, cfg.optimizer, cfg.ddp)
    return warnings


def distinct(ctx: Context, *values: str) -> None:
    """Names a sentence lists side by side are different names (a list that repeats one says less)."""
    ctx.expect(len(set(values)) == len(values), f"SKILL.md lists {values}, which repeats a name")


@claim(ENABLE)
def enable_override(ctx: Context) -> None:
    r = ctx.read("A layout with all three kinds of overlap (TP={tp:int} with sequence parallelism, PP={pp:int} with {vpp:int} virtual stages, the distributed optimizer for DP):")
    cfg = ctx.apply(tiny_config())
    model = cfg.model
    got = (model.tensor_model_parallel_size, model.sequence_parallel, model.pipeline_model_parallel_size, model.virtual_pipeline_model_parallel_size, cfg.ddp.use_distributed_optimizer)
    ctx.expect(got == (r.tp, True, r.pp, r.vpp, True), f"the block sets (TP, SP, PP, VPP, distributed optimizer) = {got}; the sentence says TP={r.tp} with SP, PP={r.pp}, VPP={r.vpp}, distributed optimizer")
    model.num_layers = r.pp * r.vpp  # the tiny model needs one layer per virtual stage
    model.num_attention_heads = max(4, r.tp)
    world = r.tp * r.pp * 2
    with mock.patch.object(comm_overlap_module(), "HAVE_TE", True):  # the TE-on branch is pure Python
        resolve(cfg, world_size=world)
    ctx.expect(cfg.data_parallel_size == 2, f"world size {world} gave DP={cfg.data_parallel_size}")
    kinds = {"TP": model.tp_comm_overlap, "PP": model.overlap_p2p_comm, "DP": cfg.ddp.overlap_grad_reduce and cfg.ddp.overlap_param_gather}
    ctx.expect(all(kinds.values()), f"the block does not get all three kinds of overlap from Bridge: {kinds}")


@claim("overlap-set-through-config")
def set_through_config(ctx: Context) -> None:
    r = ctx.read("**Set overlap values on the `{cls:code}`, not on the configs it writes.** With the distributed optimizer on, `{method:code}` replaces the DP fields of `{target:code}` with its own values at every data-parallel size.")
    comm_overlap = comm_overlap_module()
    ctx.expect(r.cls == comm_overlap.CommOverlapConfig.__name__, f"SKILL.md calls the overlap config {r.cls!r}")
    ctx.expect(r.method == f"{r.cls}.setup()" and callable(getattr(comm_overlap.CommOverlapConfig, "setup", None)), f"SKILL.md names {r.method!r}, not the config's setup()")
    for world, user in ((1, True), (8, False)):  # a user value opposite to what Bridge derives there
        cfg = tiny_config(distributed_optimizer=True)
        set_value(cfg, f"{r.target}.overlap_grad_reduce", user)
        cfg.comm_overlap = overlap(tp_comm_overlap=False)
        resolve(cfg, world_size=world)
        ctx.expect(get_value(cfg, f"{r.target}.overlap_grad_reduce") is (not user), f"at data-parallel size {world} a value set on {r.target} survived setup()")
    e = ctx.read("At a data-parallel size of {dp:int}, `{set1:code}` comes out `{out1:code}` and `{set2:code}` comes out `{out2:code}`, while `{kept:code}` keeps both values.")
    assignments = [assignment(e.set1), assignment(e.set2)]
    cfg = tiny_config(distributed_optimizer=True)
    for target, value in assignments:
        set_value(cfg, target, value)
    cfg.comm_overlap = overlap(tp_comm_overlap=False)
    resolve(cfg, world_size=e.dp)
    for (target, _), stated in zip(assignments, (e.out1, e.out2)):
        ctx.expect(get_value(cfg, target) == literal(stated), f"at data-parallel size {e.dp}, {target} comes out {get_value(cfg, target)!r}, not {stated}")
    name, kwargs = call(e.kept)
    ctx.expect(name == r.cls, f"the example passes the values to {name}, not {r.cls}")
    cfg = tiny_config(distributed_optimizer=True)
    cfg.comm_overlap = overlap(**kwargs)
    resolve(cfg, world_size=e.dp)
    for target, value in assignments:
        field = target.rsplit(".", 1)[1]
        ctx.expect(kwargs.get(field, object()) == value and get_value(cfg, target) == value, f"{e.kept} does not keep {field}={value!r}: {target} is {get_value(cfg, target)!r}")
    o = ctx.read("In the same way `{set3:code}` set on its own is reset to `{out3:code}`.")
    target, value = assignment(o.set3)
    cfg = tiny_config(distributed_optimizer=True)
    set_value(cfg, target, value)
    cfg.comm_overlap = overlap(tp_comm_overlap=False)
    resolve(cfg, world_size=e.dp)
    ctx.expect(get_value(cfg, target) == literal(o.out3) != value, f"{target} set alone comes out {get_value(cfg, target)!r}, the skill says {o.out3}")


# runtime_config_update's steps as the skill names them -> the call in its source
RUNTIME_STEPS = {
    "cfg.env_vars": "apply_environment_variables(cfg)",
    "mixed precision": "cfg.mixed_precision.setup(",
    "computes the data-parallel size": "cfg.set_data_parallel_size()",
    "CommOverlapConfig.finalize()": "cfg.comm_overlap.finalize()",
    ".setup(model, optimizer, ddp)": "cfg.comm_overlap.setup(cfg.model, cfg.optimizer, cfg.ddp)",
    "cfg.validate()": "cfg.validate()",
}


@claim("overlap-applied-at-runtime-update")
def applied_at_runtime_update(ctx: Context) -> None:
    r = ctx.read("Nothing is resolved when you assign `{attr:code}`.")
    cfg = tiny_config(distributed_optimizer=True)
    set_value(cfg, r.attr, overlap(tp_comm_overlap=False))
    ctx.expect(cfg.ddp.bucket_size is None and not cfg.ddp.overlap_grad_reduce, f"assigning {r.attr} already changed cfg.ddp")
    s = ctx.read("`{fn:code}` (called by `{caller:code}`) applies `{s1:code}`, then {s2:mixed precision|computes the data-parallel size}, then {s3:mixed precision|computes the data-parallel size}, then runs `{s4:code}` and `{s5:code}`, then `{s6:code}`.")
    fn_name = s.fn.split("(")[0]
    function = resolve_symbol(f"megatron.bridge.training.config.{fn_name}")
    ctx.expect(f"{fn_name}(" in function_source("megatron.bridge.training.pretrain", s.caller.split("(")[0]), f"{s.caller} does not call {fn_name}")
    body = source_of(function)
    stated = [s.s1, s.s2, s.s3, s.s4, s.s5, s.s6]
    unknown = [step for step in stated if step not in RUNTIME_STEPS]
    ctx.expect(not unknown, f"SKILL.md names {unknown} as steps of {fn_name}")
    positions = [body.find(RUNTIME_STEPS[step]) for step in stated]
    distinct(ctx, *stated)
    ctx.expect(all(p >= 0 for p in positions) and positions == sorted(positions), f"{fn_name} does not run {' -> '.join(stated)} in that order")
    resolve(cfg, world_size=8)
    ctx.expect(cfg.ddp.bucket_size is not None and cfg.ddp.overlap_grad_reduce, f"{fn_name} did not apply the overlap config")
    ctx.says("Inspect the resolved values after that call, not after building the recipe.")


@claim("overlap-tp-gates")
def tp_gates(ctx: Context) -> None:
    r = ctx.read("**TP overlap** stays on only if TP {op:>=|>|<=|<} {tp:int}, `{sp:code}` and Transformer Engine imports.")
    sp_field, sp_value = assignment(r.sp)

    def stays_on(tp: int, sp: bool, te: bool) -> tuple[bool, list[str]]:
        cfg = tiny_config(tp=tp, distributed_optimizer=True)
        setattr(cfg.model, sp_field, sp)
        cfg.comm_overlap = overlap(tp_comm_overlap=True)
        warnings = run_setup(cfg, 8, te)
        return cfg.model.tp_comm_overlap, [w for w in warnings if DISABLING in w]

    passing, failing = threshold(r.op, r.tp)
    on, quiet_log = stays_on(passing, sp_value, True)
    ctx.expect(on and not quiet_log, f"TP={passing} with {r.sp} and TE did not keep TP overlap on: {quiet_log}")
    actual = {}
    for case, layout in (("tp", (failing, sp_value, True)), ("sp", (passing, not sp_value, True)), ("te", (passing, sp_value, False))):
        on, messages = stays_on(*layout)
        ctx.expect(not on and len(messages) == 1, f"TP overlap with {layout} (TP, SP, TE) stayed {on}, warnings {messages}")
        actual[case] = messages[0]
    ctx.says("Otherwise Bridge switches it off with a warning, not an error:")
    m = ctx.read('"{tp_message:quote}", "{sp_message:quote}" or "{te_message:quote}"')
    for case in ("tp", "sp", "te"):
        ctx.expect(m[f"{case}_message"] == actual[case], f"SKILL.md quotes {m[f'{case}_message']!r}; Bridge logs {actual[case]!r}")
    ctx.says("Search the logs for that warning when overlap seems to do nothing.")


def p2p(pp: int, vpp: int | None) -> tuple[bool, bool]:
    cfg = tiny_config(pp=pp, vpp=vpp)
    cfg.comm_overlap = overlap(tp_comm_overlap=False)
    resolve(cfg, world_size=pp * 2)
    return cfg.model.overlap_p2p_comm, cfg.model.batch_p2p_comm


@claim("overlap-pp-p2p")
def pp_p2p(ctx: Context) -> None:
    r = ctx.read(
        "**PP overlap**: with PP {op1:>=|>} {pp1:int} and VPP {op2:>=|>} {vpp1:int}, Bridge sets `{a:code}` and `{b:code}` on the model config; "
        "with PP {op3:>=|>} {pp2:int} and no VPP, the reverse (`{c:code}`, `{d:code}`); with PP = {pp3:int}, both `{e:code}`."
    )
    pp, below_pp = threshold(r.op1, r.pp1)
    vpp, below_vpp = threshold(r.op2, r.vpp1)
    stated = dict([assignment(r.a), assignment(r.b)])
    got = dict(zip(("overlap_p2p_comm", "batch_p2p_comm"), p2p(pp, vpp)))
    ctx.expect(stated == got, f"PP={pp} with VPP={vpp} gives {got}, the skill says {stated}")
    # the stated bounds are the conditions: one step below either and the result changes
    for layout in ((below_pp, vpp), (pp, below_vpp)):
        if layout[0] >= 1 and layout[1] >= 1:
            ctx.expect(dict(zip(stated, p2p(layout[0], layout[1] if layout[1] > 1 else None))) != stated, f"PP={layout[0]}, VPP={layout[1]} also gives {stated}: the bounds PP {r.op1} {r.pp1}, VPP {r.op2} {r.vpp1} are not where it changes")
    pp_no_vpp, below_no_vpp = threshold(r.op3, r.pp2)
    ctx.expect(below_no_vpp < 1 or p2p(below_no_vpp, None) != p2p(pp_no_vpp, None), f"PP={below_no_vpp} without VPP gives the same as PP={pp_no_vpp}: the bound PP {r.op3} {r.pp2} is not where it changes")
    reverse = dict([assignment(r.c), assignment(r.d)])
    got = dict(zip(("overlap_p2p_comm", "batch_p2p_comm"), p2p(pp_no_vpp, None)))
    ctx.expect(reverse == got and reverse == {k: not v for k, v in stated.items()}, f"PP={pp_no_vpp} without VPP gives {got}, the skill says {reverse} (the reverse)")
    ctx.expect(p2p(r.pp3, None) == (literal(r.e),) * 2, f"PP={r.pp3} gives {p2p(r.pp3, None)}, the skill says both {r.e}")
    n = ctx.read("Overlapped p2p therefore needs `{field:code}` {op:>=|>} {vpp:int}.")
    ctx.expect(hasattr(tiny_config().model, n.field), f"the model config has no {n.field}")
    enough, too_few = threshold(n.op, n.vpp)
    ctx.expect(p2p(pp, enough)[0] is True and p2p(pp, too_few if too_few > 1 else None)[0] is False, f"overlap_p2p_comm does not switch at {n.field} {n.op} {n.vpp}")


@claim("overlap-dp-defaults")
def dp_defaults(ctx: Context) -> None:
    r = ctx.read(
        "**DP overlap**: when the data-parallel size is above {dp:int} and `{flag:code}` is `{flag_value:code}`, Bridge sets on `{target:code}`: "
        "`{bucket:code}` (`{expr:code}`), `{a:code}`, `{b:code}`, and `{c:code}` when PP {op1:>=|>} {pp:int} with VPP {op2:>=|>} {vpp:int}."
    )
    bucket_field, bucket = assignment(r.bucket)
    ctx.expect(arithmetic(r.expr) == bucket, f"{r.expr} is not {bucket}")
    stated = dict([(bucket_field, bucket), assignment(r.a), assignment(r.b)])
    conditional = dict([assignment(r.c)])
    pp, not_pp = threshold(r.op1, r.pp)
    vpp, _ = threshold(r.op2, r.vpp)

    def derived(world: int, pp: int, vpp: int | None):
        cfg = tiny_config(pp=pp, vpp=vpp)
        set_value(cfg, r.flag, literal(r.flag_value))
        cfg.comm_overlap = overlap(tp_comm_overlap=False)
        resolve(cfg, world_size=world * pp)
        return cfg

    above, _ = threshold(">", r.dp)
    cfg = derived(above, pp, vpp)
    target = get_value(cfg, r.target)
    baseline = get_value(derived(r.dp, pp, vpp), r.target)
    changed = {f.name for f in dataclasses.fields(target) if getattr(target, f.name) != getattr(baseline, f.name)}
    ctx.expect(changed == set(stated) | set(conditional), f"above data-parallel size {r.dp} Bridge changes {sorted(changed)} on {r.target}; the skill lists {sorted(set(stated) | set(conditional))}")
    for layout in ((not_pp, vpp), (pp, threshold(r.op2, r.vpp)[1])):
        if min(layout) >= 1:
            lower = get_value(derived(above, layout[0], layout[1] if layout[1] > 1 else None), r.target)
            ctx.expect(any(getattr(lower, f) != v for f, v in conditional.items()), f"PP={layout[0]}, VPP={layout[1]} also sets {conditional}: the bounds PP {r.op1} {r.pp}, VPP {r.op2} {r.vpp} are not where it changes")
    for field, value in {**stated, **conditional}.items():
        ctx.expect(getattr(target, field) == value, f"with DP={above}, PP={pp}, VPP={vpp}, Bridge sets {r.target}.{field}={getattr(target, field)!r}, the skill says {value!r}")
    plain = get_value(derived(above, not_pp if not_pp >= 1 else 1, None), r.target)
    for field, value in conditional.items():
        ctx.expect(getattr(plain, field) != value, f"{field} is set without PP {r.op1} {r.pp} and VPP")
    at_bound = get_value(derived(r.dp, 1, None), r.target)
    ctx.expect(not at_bound.overlap_grad_reduce, f"at data-parallel size {r.dp} Bridge already turns DP overlap on")
    o = ctx.read("Of these, `{opt:code}` has only `{field:code}`, which gets the same value.")
    named = set(stated) | set(conditional)
    optimizer = get_value(cfg, o.opt)
    has = {f.name for f in dataclasses.fields(optimizer)} & named
    ctx.expect(has == {o.field}, f"of {sorted(named)}, {o.opt} has {sorted(has)}")
    ctx.expect(getattr(optimizer, o.field) == getattr(target, o.field), f"{o.opt}.{o.field} differs from {r.target}.{o.field}")
    z = ctx.read("With a data-parallel size of {dp:int} they are all off.")
    single = get_value(derived(z.dp, 1, None), r.target)
    ctx.expect(not any(getattr(single, field) for field in named), f"at data-parallel size {z.dp}: {[(f, getattr(single, f)) for f in sorted(named)]}")


@claim("overlap-dp-needs-distributed-optimizer")
def dp_needs_distributed_optimizer(ctx: Context) -> None:
    ctx.says("**Pitfall: no distributed optimizer, no DP overlap from Bridge.**")
    r = ctx.read("If `{flag:code}` is `{value:code}`, `{method:code}` leaves `{t1:code}` and `{t2:code}` untouched: the bucket size and the overlap flags are whatever you set yourself.")
    ctx.expect(r.method == "CommOverlapConfig.setup()", f"SKILL.md names {r.method!r}")

    def user_values(flag_value: bool):
        cfg = tiny_config()
        set_value(cfg, r.flag, flag_value)
        mine = {f"{r.t1}.overlap_grad_reduce": True, f"{r.t1}.bucket_size": 1000, f"{r.t2}.overlap_param_gather": True}
        for target, value in mine.items():
            set_value(cfg, target, value)
        cfg.comm_overlap = overlap(tp_comm_overlap=False)
        with preserved_environ():
            os.environ["WORLD_SIZE"] = "8"
            cfg.set_data_parallel_size()
            cfg.comm_overlap.finalize()
            cfg.comm_overlap.setup(cfg.model, cfg.optimizer, cfg.ddp)
        return {target: get_value(cfg, target) for target in mine} == mine

    ctx.expect(user_values(literal(r.value)), f"with {r.flag}={r.value}, setup() changed values set on {r.t1} or {r.t2}")
    ctx.expect(not user_values(not literal(r.value)), f"with {r.flag}={not literal(r.value)} setup() also leaves them: the flag would not matter")


@claim("overlap-user-values-win")
def user_values_win(ctx: Context) -> None:
    r = ctx.read("**Values passed to `{cls:code}` win.** Any of its fields that is not `{unset:code}` (for example `{e1:code}` or `{e2:code}`) replaces the derived default: on the model for the PP fields, on `{dp_target:code}` for the DP fields.")
    ctx.expect(r.cls == comm_overlap_module().CommOverlapConfig.__name__, f"SKILL.md names {r.cls!r}")
    unset = literal(r.unset)

    def resolved(**fields):
        cfg = tiny_config(pp=2, vpp=2, distributed_optimizer=True)
        cfg.comm_overlap = overlap(tp_comm_overlap=False, **fields)
        resolve(cfg, world_size=8)
        return cfg

    ctx.expect(resolved(overlap_p2p_comm=unset).model.overlap_p2p_comm is True, f"overlap_p2p_comm={unset!r} replaced the derived default")
    default = resolved()
    for example, where in ((r.e1, "model"), (r.e2, r.dp_target)):
        field, value = assignment(example)
        holder_default = default.model if where == "model" else get_value(default, where)
        ctx.expect(value != unset and value != getattr(holder_default, field), f"the example {example} passes the value Bridge derives anyway, so it shows no replacing")
        cfg = resolved(**{field: value})
        holder = cfg.model if where == "model" else get_value(cfg, where)
        ctx.expect(getattr(holder, field) == value, f"{example} passed to {r.cls} did not reach {where}: {getattr(holder, field)!r}")
        kind = "PP" if field in ("overlap_p2p_comm", "batch_p2p_comm") else "DP"
        ctx.expect((where == "model") == (kind == "PP"), f"{field} is a {kind} field")


@claim("overlap-bucket-size-units")
def bucket_size_units(ctx: Context) -> None:
    r = ctx.read("**`{field:code}` counts {unit:parameters|bytes}, not {other:parameters|bytes}.** megatron-core documents `{owner:code}` as the \"{doc:quote}\", so `{value:code}` means {mi:int} Mi parameters per bucket.")
    cls_name, _, attr = r.owner.rpartition(".")
    ctx.expect(attr == r.field, f"SKILL.md documents {r.owner}, not {r.field}")
    source = source_of(resolve_symbol(f"megatron.core.distributed.{cls_name}"))
    index = source.find(f"{attr}: Optional[int] = None")
    opening = source.find('"""', index) + 3
    docstring = source[opening : source.find('"""', opening)].strip()
    ctx.expect(index >= 0 and docstring.split(". ")[0].rstrip(".") == r.doc, f"megatron-core's {attr} docstring reads {docstring!r}, not {r.doc!r}")
    ctx.expect(r.unit in r.doc.lower() and r.other not in r.doc.lower(), f"the docstring {r.doc!r} does not count {r.unit}")
    cfg = tiny_config(distributed_optimizer=True)
    cfg.comm_overlap = overlap(tp_comm_overlap=False)
    resolve(cfg, world_size=8)
    ctx.expect(literal(r.value) == cfg.ddp.bucket_size == r.mi * 1024 * 1024, f"Bridge's bucket size is {cfg.ddp.bucket_size}, the skill says {r.value} = {r.mi} Mi")


PRESET_NAME = r"userbuffers_(bf16|fp8)_[a-z0-9]+_h\d+_tp\d+_(cp\d+_)?mbs\d+_seqlen\d+"


@claim("overlap-tp-preset")
def tp_preset(ctx: Context) -> None:
    r = ctx.read("`{module:code}` ships `{cls:code}` presets named after dtype, GPU, hidden size, TP, micro-batch and sequence length (a few end in `{suffix:code}`), for example `{name:code}`:")
    module = resolve_symbol(r.module)
    kind = getattr(module, r.cls)
    presets = {n: getattr(module, n) for n in dir(module) if isinstance(getattr(module, n), kind)}
    ctx.expect(r.name in presets, f"{r.name} is not a {r.cls} in {r.module}")
    odd = [n for n in presets if not re.fullmatch(PRESET_NAME + f"({re.escape(r.suffix)})?", n)]
    ctx.expect(not odd and any(n.endswith(r.suffix) for n in presets), f"presets not named as the skill says: {odd}")
    block = ctx.code(0)
    ctx.expect(f"from {r.module} import {r.name}" in block, "the snippet does not import the named preset")
    cfg = tiny_config(tp=4, sp=True)
    cfg.comm_overlap = overlap(tp_comm_overlap=True)
    cfg = ctx.apply(cfg, index=0)
    ctx.expect(cfg.comm_overlap.tp_comm_overlap_cfg is presets[r.name], "the snippet does not attach the preset")
    s = ctx.read("When TP overlap stays on, `{method:code}` converts the preset into the dict Transformer Engine expects on `{target:code}` (fields left `{unset:code}` are dropped).")
    ctx.expect(s.method == "setup()", f"SKILL.md names {s.method!r}")
    unset = literal(s.unset)
    first = dataclasses.fields(presets[r.name])[0].name  # one field left unset, to see it dropped
    cfg.comm_overlap.tp_comm_overlap_cfg = dataclasses.replace(presets[r.name], **{first: unset})
    run_setup(cfg, 4, True)
    converted = get_value(cfg, s.target)
    expected = {k: v for k, v in dataclasses.asdict(presets[r.name]).items() if k != first}
    ctx.expect(isinstance(converted, dict) and converted == expected, f"{s.target} is not the preset without its {s.unset} fields: {converted}")
    m = ctx.read('Without a preset it logs "{message:quote}"')
    bare = tiny_config(tp=4, sp=True)
    bare.comm_overlap = overlap(tp_comm_overlap=True)
    ctx.expect(m.message in run_setup(bare, 4, True), f"no-preset warning is not {m.message!r}")


def _fsdp_ignores_grad_reduce_in_fp32(ctx: Context, knob: str) -> None:
    """Megatron FSDP's gradient dtypes are its own DDP fields; its package never reads the knob."""
    import importlib.util
    from pathlib import Path

    from megatron.core.distributed import DistributedDataParallelConfig

    u = ctx.read(
        "Under Megatron FSDP the copy of `{knob:code}` changes nothing: megatron-core's FSDP package never reads it,"
        " and its gradient dtypes are `{main:code}` and `{comm:code}`."
    )
    ctx.expect(u.knob == knob == "grad_reduce_in_fp32", f"the FSDP sentence names {u.knob}")
    package = Path(importlib.util.find_spec("megatron.core.distributed.fsdp").origin).parent
    readers = [str(p.relative_to(package)) for p in package.rglob("*.py") if re.search(rf"\b{re.escape(u.knob)}\b", p.read_text("utf-8"))]
    ctx.expect(not readers, f"megatron-core's FSDP package reads {u.knob} in {readers}")
    fields = {f.name for f in dataclasses.fields(DistributedDataParallelConfig)}
    for named in (u.main, u.comm):
        section, _, name = named.removeprefix("cfg.").partition(".")
        ctx.expect(section == "ddp" and name in fields, f"{named} is not a DDP config field")
        ctx.expect(bool(re.search(rf"\b{name}\b", (package / "mcore_fsdp_adapter.py").read_text("utf-8"))), f"the FSDP adapter does not read {name}")
    ctx.expect("grads" in u.main and "comm" in u.comm and u.main != u.comm, f"{u.main} / {u.comm} are not the main-gradient and communication dtypes")


@claim("overlap-precision-knobs")
def precision_knobs(ctx: Context) -> None:
    from megatron.bridge.training.mixed_precision import bf16_mixed

    r = ctx.read("**Precision knobs live in mixed precision.** `{k1:code}` and `{k2:code}` are fields of `{cls:code}` (`{attr:code}`).")
    distinct(ctx, r.k1, r.k2)
    owner = resolve_symbol(f"megatron.bridge.training.mixed_precision.{r.cls}")
    ctx.expect({r.k1, r.k2} <= {f.name for f in dataclasses.fields(owner)} and isinstance(get_value(_resolved_recipe(), r.attr), owner), f"{r.k1}/{r.k2} are not fields of {r.cls} on {r.attr}")
    s = ctx.read("During `{fn:code}`, its `{method:code}` copies them onto the DDP config, so a value set only on `{target:code}` is overwritten by the mixed-precision recipe's value.")
    ctx.expect(f"cfg.mixed_precision.{s.method.split('(')[0]}(" in source_of(resolve_symbol(f"megatron.bridge.training.config.{s.fn}")), f"{s.fn} does not call mixed precision's {s.method}")
    for knob in (r.k1, r.k2):
        recipe_value = getattr(bf16_mixed(), knob)
        cfg = tiny_config(distributed_optimizer=True)
        cfg.mixed_precision = "bf16_mixed"
        set_value(cfg, f"{s.target}.{knob}", not recipe_value)
        resolve(cfg)
        ctx.expect(get_value(cfg, f"{s.target}.{knob}") == recipe_value, f"{knob} set only on {s.target} survived the mixed-precision recipe")
    _fsdp_ignores_grad_reduce_in_fp32(ctx, r.k1)
    t = ctx.read("Recipes built on `{base:code}` leave `{attr:code}` as the preset's name, `{name:code}`, which `{fn:code}` turns into the object later, so setting a field on it straight away raises `{exc:exc}`.")
    from megatron.bridge.recipes import common

    recipe = getattr(common, t.base.split("(")[0])()
    ctx.expect(get_value(recipe, t.attr) == literal(t.name), f"{t.base} sets {t.attr} to {get_value(recipe, t.attr)!r}, not {t.name}")
    ctx.expect_raises(lambda: setattr(get_value(recipe, t.attr), r.k1, False), t.exc, r.k1)
    named = tiny_config()
    set_value(named, t.attr, literal(t.name))
    resolve_symbol(f"megatron.bridge.training.config.{t.fn}")  # the function the skill names
    resolve(named)
    ctx.expect(isinstance(get_value(named, t.attr), owner), f"{t.fn} did not turn the name into a {r.cls}")
    ctx.says("Resolve it first:")
    fixed = ctx.apply(getattr(common, t.base.split("(")[0])())
    ctx.expect(isinstance(fixed.mixed_precision, owner) and fixed.mixed_precision.grad_reduce_in_fp32 is False, "the snippet did not leave a MixedPrecisionConfig with grad_reduce_in_fp32 False")


def _resolved_recipe():
    cfg = tiny_config()
    cfg.mixed_precision = "bf16_mixed"
    return resolve(cfg)


@claim("overlap-env-vars")
def env_vars(ctx: Context) -> None:
    import pathlib

    r = ctx.read("**Launch environment.** `{v1:code}` and `{v2:code}` / `{v3:code}` are environment variables, not `{cls:code}` fields.")
    names = (r.v1, r.v2, r.v3)
    distinct(ctx, *names)
    fields = {f.name.lower() for f in dataclasses.fields(resolve_symbol(f"megatron.bridge.training.comm_overlap.{r.cls}"))}
    ctx.expect(not any(n.lower() in fields or n.lower().removeprefix("nvte_") in fields for n in names), f"{r.cls} has a field for one of {names}")
    s = ctx.read("Recipes set them through `{attr:code}` (a dict), which `{fn:code}` applies with `{how:code}`, so a value exported in the shell or by the launcher wins.")
    recipes = pathlib.Path(resolve_symbol("megatron.bridge.recipes").__file__).parent
    setters = [p for p in recipes.rglob("*.py") if all(f'"{n}"' in p.read_text("utf-8") for n in names) and "env_vars" in p.read_text("utf-8")]
    ctx.expect(setters, f"no shipped recipe sets {names} through env_vars")
    ctx.expect(isinstance(tiny_config().env_vars, dict) and s.attr == "cfg.env_vars", f"{s.attr} is not the config's dict of variables")
    apply = resolve_symbol(f"megatron.bridge.training.config.{s.fn.split('(')[0].replace('runtime_config_update', 'apply_environment_variables')}")
    ctx.expect(s.how.replace("os.environ.", "") in source_of(apply) and "apply_environment_variables(cfg)" in source_of(resolve_symbol(f"megatron.bridge.training.config.{s.fn.split('(')[0]}")), f"{s.fn} does not apply env_vars with {s.how}")
    cfg = tiny_config()
    cfg.env_vars = {r.v2: 16}
    with preserved_environ():
        os.environ[r.v2] = "8"
        apply(cfg)
        shell = os.environ[r.v2]
        del os.environ[r.v2]
        apply(cfg)
        recipe = os.environ[r.v2]
    ctx.expect((shell, recipe) == ("8", "16"), f"the shell's value does not win: {(shell, recipe)}")
    t = ctx.read("`{module:code}` {has:has no|has} `{plugin:code}`, which older skills point to.")
    module = resolve_symbol(t.module)
    plugins = [n for n in dir(module) if n.endswith("Plugin") and isinstance(getattr(module, n), type)]
    ctx.expect(t.plugin.isidentifier() and t.plugin.endswith("Plugin") and plugins, f"{t.plugin!r} is not a plugin class name next to {t.module}'s {plugins}")
    ctx.expect(hasattr(module, t.plugin) == (t.has == "has"), f"{t.module} {t.has} {t.plugin}: not so")
    u = ctx.read("Megatron FSDP rejects `{setting:code}`, so a launch script that exports it for TP overlap breaks an FSDP run.")
    name, value = u.setting.split("=")
    cfg = tiny_config()
    cfg.ddp.use_megatron_fsdp = True
    cfg.checkpoint.ckpt_format = "fsdp_dtensor"
    ctx.expect_raises(lambda: resolve(cfg, environ={name: value}), AssertionError, name)


@claim("overlap-code-anchors")
def code_anchors(ctx: Context) -> None:
    r = ctx.read("- `{cls:code}`: `{m1:code}`, `{m2:code}`, `{m3:code}` (TP gates, PP p2p), `{m4:code}` (DP defaults), `{m5:code}` (values passed to the config win).")
    cls = resolve_symbol(r.cls)
    distinct(ctx, r.m1, r.m2, r.m3, r.m4, r.m5)
    methods = {m: getattr(cls, m.removesuffix("()"), None) for m in (r.m1, r.m2, r.m3, r.m4, r.m5)}
    ctx.expect(all(callable(f) for f in methods.values()), f"{r.cls} lacks one of {list(methods)}")
    roles = {r.m3: (DISABLING, "overlap_p2p_comm"), r.m4: ("bucket_size = 128 * 1024 * 1024",), r.m5: ("user_value is not None",), r.m1: ("user_comm_overlap_cfg",), r.m2: ("_apply_cfgs",)}
    for method, markers in roles.items():
        ctx.expect(all(marker in source_of(methods[method]) for marker in markers), f"{method} does not hold {markers}")
    ctx.expect([r.m1, r.m2] == ["finalize()", "setup()"], "the first two methods are not finalize() and setup()")
    h = ctx.read("- `{flag:code}`: whether Transformer Engine imported.")
    import importlib.util

    ctx.expect(resolve_symbol(h.flag) is (importlib.util.find_spec("transformer_engine") is not None), f"{h.flag} does not say whether TE imported")
    e = ctx.read("- `{updater:code}` and `{applier:code}` (applies `{attr:code}`).")
    ctx.expect(e.applier.rsplit(".", 1)[1] + "(cfg)" in source_of(resolve_symbol(e.updater)) and "env_vars" in source_of(resolve_symbol(e.applier)) and e.attr == "cfg.env_vars", f"{e.updater} and {e.applier} do not apply {e.attr}")
    p = ctx.read("- `{copier:code}` (copies the precision knobs).")
    copier = resolve_symbol(p.copier)
    ctx.expect(callable(copier) and f"{p.copier.rsplit('.', 1)[1]}(self, " in source_of(resolve_symbol("megatron.bridge.training.mixed_precision.MixedPrecisionConfig.setup")), f"MixedPrecisionConfig.setup does not copy the knobs with {p.copier}")
    d = ctx.read("- `{ddp:code}`: the class behind `{attr:code}` (`{f1:code}`, `{f2:code}`, `{f3:code}`, `{f4:code}`).")
    owner = resolve_symbol(d.ddp)
    ctx.expect(type(get_value(tiny_config(), d.attr)) is owner, f"{d.attr} is not a {d.ddp}")
    ctx.expect({d.f1, d.f2, d.f3, d.f4} == set(DP_FIELDS) and all(f in {x.name for x in dataclasses.fields(owner)} for f in DP_FIELDS), f"{d.ddp} fields named: {d.f1, d.f2, d.f3, d.f4}")


@claim("overlap-report-script")
def report_script(ctx: Context) -> None:
    r = ctx.read("Without GPUs, print what Bridge will resolve for a layout with [{label}]({path}).")
    ctx.expect(r.label == r.path, f"the link text {r.label!r} is not its target {r.path!r}")
    script = ctx.load_script(r.path)
    s = ctx.read(
        "It builds a small GPT config with that layout and `{call:code}` (or loads yours with `{option:code}`), runs the real `{fn:code}` with the world size set, "
        "and lists the TP, PP and DP overlap fields, any \"{warning:quote}\" warning, and whether Bridge's validation passed."
    )
    command = ctx.code(0).strip()
    ctx.expect(command.startswith(f"python {r.path} "), f"the command does not run {r.path}")
    parser = script.build_parser()
    args = parser.parse_args(shlex.split(command)[2:])
    option, _, placeholder = s.option.partition(" ")
    ctx.expect(parser.parse_args([option, "pkg.mod:fn", "--world-size", "1"]).config == "pkg.mod:fn" and placeholder == "module:function", f"{s.option} is not how the script loads a config")
    cfg = script.build_config(args.tp, args.sp, args.pp, args.vpp, True, True)
    name, kwargs = call(s.call)
    ctx.expect(type(cfg.comm_overlap).__name__ == name and all(getattr(cfg.comm_overlap, k) == v for k, v in kwargs.items()), f"the script does not attach {s.call}")
    ctx.expect(f"{s.fn.split('(')[0]}(" in source_of(script.resolve), f"the script does not call {s.fn}")
    enable = ctx.sibling(ENABLE).apply(tiny_config())
    ctx.expect((args.tp, args.sp, args.pp, args.vpp) == (enable.model.tensor_model_parallel_size, enable.model.sequence_parallel, enable.model.pipeline_model_parallel_size, enable.model.virtual_pipeline_model_parallel_size), "the command's layout is not the enablement block's")
    with preserved_environ():
        report = script.resolve(cfg, args.world_size)
    ctx.expect(report["error"] is None, f"Bridge rejected the report's config: {report['error']}")
    t = ctx.read("For the layout above it shows `{a:code}`, `{b:code}` and `{c:code}`; on a machine without Transformer Engine it shows TP overlap disabled, as training there would.")
    shown = {**report["model"], **report["ddp"]}
    distinct(ctx, *(assignment(x)[0] for x in (t.a, t.b, t.c)))
    for text in (t.a, t.b, t.c):
        field, value = assignment(text)
        ctx.expect(shown.get(field) == value, f"the report shows {field} = {shown.get(field)!r}, the skill says {value!r}")
    if not comm_overlap_module().HAVE_TE:
        ctx.expect(report["model"]["tp_comm_overlap"] is False and any(w.split(" due to ")[0] == s.warning for w in report["warnings"]), f"the report does not show TP overlap disabled with {s.warning!r} without TE")
    text = script.format_report(report)
    ctx.expect("bridge validation: passed" in text and "model.overlap_p2p_comm = True" in text, "the printed report lacks the resolved fields")


@claim("overlap-gpu-dp-overlap-trains", tier="gpu")
def gpu_dp_overlap_trains(ctx: Context) -> None:
    """CPU side of the GPU run (checks/gpu.py check_overlap_dp): the block, fitted to
    1 and 2 GPUs, resolves as the GPU run expects: DP overlap off at one rank, on at two."""
    from .gpu import overlap_config

    ctx.says("On GPUs, the DP part of the block trains: with the distributed optimizer, a short")
    r = ctx.read("`{entry:code}` run wraps the model in Megatron's `{wrapper:code}` and logs a finite loss at its last iteration.")
    ctx.expect(r.entry == "pretrain()" and r.wrapper == "DistributedDataParallel", f"the GPU run calls pretrain() and checks the DistributedDataParallel wrapper, not {r.entry}/{r.wrapper}")
    s = ctx.read("With {many:int} or more data-parallel ranks the wrapped model has `{f1:code}` and `{f2:code}` on; with {one:int} rank Bridge turns them off, as there is nothing to overlap.")
    distinct(ctx, s.f1, s.f2)
    ctx.expect(s.many == s.one + 1, f"{s.one} rank and {s.many} or more leave a gap; the GPU run checks both sides of one boundary")
    for world_size, expected in ((s.one, False), (s.many, True)):
        cfg = overlap_config(ctx, world_size, tp=1, te=False)
        ctx.expect(cfg.ddp.use_distributed_optimizer, "the enablement block no longer turns on the distributed optimizer")
        resolve(cfg, world_size=world_size)
        ctx.expect(cfg.data_parallel_size == world_size, f"world size {world_size} with TP=1 gave DP={cfg.data_parallel_size}")
        got = (getattr(cfg.ddp, s.f1), getattr(cfg.ddp, s.f2))
        ctx.expect(got == (expected, expected), f"at data-parallel size {world_size} Bridge resolves ({s.f1}, {s.f2}) to {got}, the skill says {(expected, expected)}")


@claim("overlap-gpu-tp-overlap", tier="gpu")
def gpu_tp_overlap(ctx: Context) -> None:
    """CPU side of the GPU run (checks/gpu.py check_overlap_tp): the block at TP=2 with
    sequence parallelism keeps TP overlap on once TE is there (HAVE_TE patched: CPU has none)."""
    from .gpu import DISABLING_TP_OVERLAP, overlap_config

    r = ctx.read("TP overlap needs at least {gpus:int} GPUs and Transformer Engine.")
    s = ctx.read("On such a machine a run with TP {op:>=|>} {tp:int} and sequence parallelism must log no \"{warning:quote}\" warning, keep `{flag:code}` on and reach a finite loss; then check that iteration time drops against a run without overlap and that the loss matches it.")
    source = " ".join(source_of(comm_overlap_module().CommOverlapConfig._get_model_comm_overlap_cfgs).split())
    ctx.expect(f'logging.warning("{s.warning} due to' in source and s.flag == "tp_comm_overlap", f"Bridge logs no {s.warning!r} warning when it turns {s.flag} off")
    ctx.expect(s.warning == DISABLING_TP_OVERLAP, f"the GPU run looks for {DISABLING_TP_OVERLAP!r}, not {s.warning!r}")

    def kept(tp: int, te: bool) -> tuple[bool, list[str]]:
        """Bridge's own decision at TP=`tp` with sequence parallelism: `CommOverlapConfig.setup()`
        alone (the tiny model's head count need not divide by `tp`), as runtime_config_update calls it."""
        cfg = overlap_config(ctx, tp, tp=tp, te=False)
        cfg.model.sequence_parallel = True
        overlap = cfg.comm_overlap
        overlap.finalize()
        overlap.data_parallel_size = 1
        with mock.patch.object(comm_overlap_module(), "HAVE_TE", te), collect_warnings() as warnings:
            overlap.setup(cfg.model, cfg.optimizer, cfg.ddp)
        return getattr(cfg.model, s.flag) is True, [w for w in warnings if s.warning in w]

    # The GPU count is Bridge's TP threshold: one GPU fewer, Bridge turns the overlap off.
    ctx.expect(kept(r.gpus, True)[0] and not kept(r.gpus - 1, True)[0], f"Bridge keeps {s.flag} from TP={r.gpus}, not exactly from there")
    ctx.expect(not kept(r.gpus, False)[0], f"Bridge keeps {s.flag} without Transformer Engine")
    tp, _ = threshold(s.op, s.tp)
    cfg = overlap_config(ctx, tp, tp=tp, te=False)
    ctx.expect(isinstance(cfg.comm_overlap, comm_overlap_module().CommOverlapConfig) and cfg.comm_overlap.tp_comm_overlap, "the enablement block no longer asks for TP overlap")
    with mock.patch.object(comm_overlap_module(), "HAVE_TE", True), collect_warnings() as warnings:
        resolve(cfg, world_size=tp)
    disabled = [w for w in warnings if s.warning in w]
    ctx.expect(not disabled and getattr(cfg.model, s.flag) is True and cfg.model.sequence_parallel is True, f"at TP={tp} with SP and TE, Bridge resolves {s.flag}={getattr(cfg.model, s.flag)}: {disabled}")
