"""Checks for the sections of this skill that answer problems users reported upstream
(claim ids match the markers in its SKILL.md and references/). Same rule as the other
check modules: read each stated value from the sentence, compare it with the library.

What only a training run shows (timing, a real userbuffers bootstrap) is not claimed; the
checks run Bridge's validation, call the library functions that decide (with the process
groups or Transformer Engine they would need replaced by stand-ins), or evaluate the
conditions of the installed source on both sides of each stated boundary."""

from __future__ import annotations

import ast
import copy
import dataclasses
import functools
import importlib
import importlib.util
import os
import sys
import types
import typing
import warnings
from pathlib import Path
from unittest import mock

from runner.claims.kit import MbskillsError
from runner.claims.kit import collect_warnings, preserved_environ, resolve, tiny_config
from .overlap import comm_overlap_module, distinct, get_value, overlap, p2p, set_value
from runner.claims.kit import ClaimFailed, Context, assignment, claim, comparison, literal, raised, resolve_symbol, source_of, threshold

VARIABLE = "CUDA_DEVICE_MAX_CONNECTIONS"


# --- reading the installed source -----------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _module_source(module: str) -> tuple[str, ast.Module]:
    """The text and syntax tree of an installed module, read without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        raise ClaimFailed(f"{module} is not installed")
    text = Path(spec.origin).read_text("utf-8")
    return text, ast.parse(text)


def _definition(module: str, dotted: str) -> ast.AST:
    """`name` or `Class.method` defined in `module`, as a syntax tree node."""
    _, tree = _module_source(module)
    scope: list[ast.AST] = list(tree.body)
    node = None
    for part in dotted.split("."):
        node = next((n for n in scope if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part), None)
        if node is None:
            raise ClaimFailed(f"{module} defines no {dotted}")
        scope = list(node.body)
    return node


def _run_block(node: ast.stmt, namespace: dict) -> dict:
    """Execute one statement of the installed source (an `if` block) with stand-in names."""
    exec(compile(ast.Module(body=[node], type_ignores=[]), "<installed source>", "exec"), namespace)  # noqa: S102 - the library's own statement, run on stand-ins
    return namespace


def _evaluate(expression: ast.expr, **names) -> object:
    return eval(compile(ast.Expression(expression), "<installed source>", "eval"), {"__builtins__": {}}, names)  # noqa: S307 - a condition of the library's own source


def _names(expression: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(expression) if isinstance(n, ast.Name)}


def _statements(node: ast.AST, kind: type) -> list:
    return [n for n in ast.walk(node) if isinstance(n, kind)]


def _comment_lines(module: str, node: ast.AST) -> list[tuple[int, str]]:
    """(line number, text) of the `#` comments inside a definition of `module`."""
    text, _ = _module_source(module)
    lines = text.split("\n")
    out = []
    for number in range(node.lineno, node.end_lineno + 1):
        stripped = lines[number - 1].strip()
        if stripped.startswith("#"):
            out.append((number, stripped.lstrip("#").strip()))
    return out


def _comment_text(module: str, node: ast.AST) -> str:
    return " ".join(" ".join(text for _, text in _comment_lines(module, node)).split())


MEGATRON_LM_ARGUMENTS = "megatron.training.arguments"


def _validate_args(name: str = "validate_args") -> ast.FunctionDef:
    """Megatron-LM's argument validation (or the function a sentence names in its module)."""
    return _definition(MEGATRON_LM_ARGUMENTS, name)


def _args(**fields) -> types.SimpleNamespace:
    """A stand-in for Megatron-LM's parsed arguments: what a block reads, nothing more."""
    return types.SimpleNamespace(rank=0, **fields)


@functools.lru_cache(maxsize=None)
def _bridge_trees() -> tuple[tuple[str, ast.Module], ...]:
    root = Path(resolve_symbol("megatron.bridge").__path__[0])
    return tuple((str(path.relative_to(root.parent.parent)), ast.parse(path.read_text("utf-8"))) for path in sorted(root.rglob("*.py")))


def _reads_of(variable: str) -> list[tuple[str, str]]:
    """Where Bridge's code reads an environment variable (os.getenv, os.environ.get or
    os.environ[...] with that name), as (file, enclosing function or "<module>")."""
    found = set()

    def visit(node: ast.AST, path: str, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inside = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else where
            key = None
            if isinstance(child, ast.Call) and child.args and ast.unparse(child.func) in ("os.getenv", "os.environ.get", "getenv", "environ.get"):
                key = child.args[0]
            elif isinstance(child, ast.Subscript) and ast.unparse(child.value) in ("os.environ", "environ"):
                key = child.slice
            if isinstance(key, ast.Constant) and key.value == variable:
                found.add((path, inside))
            visit(child, path, inside)

    for path, tree in _bridge_trees():
        visit(tree, path, "<module>")
    return sorted(found)


def _resolve_with(named: str, cfg, world_size: int, environ: dict[str, str] | None = None):
    """Run the Bridge function the sentence names (written `runtime_config_update()`) on
    `cfg` at `world_size` ranks, as `resolve()` runs runtime_config_update."""
    function = resolve_symbol(f"megatron.bridge.training.config.{named.split('(')[0]}")
    if not callable(function) or function.__name__ != "runtime_config_update":
        raise ClaimFailed(f"SKILL.md names {named}, not the function that resolves a config")
    with preserved_environ():
        os.environ["WORLD_SIZE"] = str(world_size)
        os.environ.update(environ or {})
        function(cfg)
    return cfg


# --- stand-ins for what a CPU machine lacks --------------------------------------------------


class _Group:
    """A process group of `size` ranks, as far as the code under test asks."""

    def __init__(self, size: int, rank: int = 0) -> None:
        self._size, self._rank = size, rank

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return self._rank


class _Stop(MbskillsError):
    """Raised where the wrapper would start touching CUDA: everything before it has run."""


def _stub_model(model_config) -> list:
    import torch

    module = torch.nn.Module()
    module.config = model_config
    module.model_type = None
    return [module]


def _ddp_wrap_bucket(ddp_config, dp_cp: int, *, model_config=None) -> object:
    """Run megatron-core's `_ddp_wrap` up to its CUDA stream and return the bucket size it
    leaves on (a copy of) the DDP config."""
    from megatron.training.models import dist_utils

    ddp = copy.deepcopy(ddp_config)
    model_config = model_config or tiny_config().model
    pg = types.SimpleNamespace(dp_cp=_Group(dp_cp), pp=_Group(1), intra_dp_cp=None, intra_expt_dp=None, expt_dp=_Group(1))
    with mock.patch("torch.cuda.Stream", side_effect=_Stop):
        try:
            dist_utils._ddp_wrap(_stub_model(model_config), False, ddp, False, pg_collection=pg)
        except _Stop:
            return ddp.bucket_size
    raise ClaimFailed("_ddp_wrap did not reach its CUDA stream; the stand-in no longer fits it")


def _ddp_config(**fields):
    from megatron.core.distributed import DistributedDataParallelConfig

    return DistributedDataParallelConfig(**fields)


# --- references/dp-overlap.md: the launch variable -------------------------------------------


def _linear_warnings(environ: dict[str, str], **flags) -> list[str]:
    """What megatron-core's linear function warns about the variable, for one environment."""
    from megatron.core.tensor_parallel import layers

    function = layers.linear_with_grad_accumulation_and_async_allreduce
    saved = getattr(function, "warned", False)
    arguments = dict(input=None, weight=None, bias=None, gradient_accumulation_fusion=False, allreduce_dgrad=False, sequence_parallel=False)
    arguments.update(flags)
    try:
        function.warned = False
        with preserved_environ(), mock.patch.object(layers.LinearWithGradAccumulationAndAsyncCommunication, "apply", return_value=None), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            os.environ.update(environ)
            function(**arguments)
        return [str(w.message) for w in caught]
    finally:
        function.warned = saved


@claim("overlap-max-connections-mcore")
def max_connections_mcore(ctx: Context) -> None:
    r = ctx.read("**`{setting:code}` is asked for by TP, not by DP overlap.**")
    name, value = assignment(r.setting)
    s = ctx.read("megatron-core's `{fn:code}` warns \"{message:quote}\" when sequence parallelism is on and the variable is not `{quiet:code}`.")
    function = resolve_symbol(f"megatron.core.tensor_parallel.layers.{s.fn}")
    ctx.expect(callable(function), f"{s.fn} is not a function of megatron.core.tensor_parallel.layers")
    unset = _linear_warnings({}, sequence_parallel=True)
    ctx.expect(unset == [s.message], f"with the variable unset and sequence parallelism on, {s.fn} warns {unset}, not {s.message!r}")
    ctx.expect(name in s.message, f"the warning {s.message!r} is not about {name}")
    for environ in ({name: str(literal(s.quiet))}, {name: str(value)}):
        ctx.expect(_linear_warnings(environ, sequence_parallel=True) == [], f"with {environ} {s.fn} still warns: the variable is not what it asks for")
    ctx.expect(_linear_warnings({}, sequence_parallel=False) == [], f"{s.fn} warns without sequence parallelism")
    t = ctx.read("Its data-parallel package `{package:code}` never reads the variable: `{cls:code}` only notes in a comment that, because of the use of `{setting:code}`, \"{comment:quote}\".")
    package = resolve_symbol(t.package)
    ctx.expect(hasattr(package, "__path__"), f"{t.package} is not a package")
    readers = []
    for path in sorted(Path(package.__path__[0]).rglob("*.py")):
        tree = ast.parse(path.read_text("utf-8"))
        docstrings = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body and isinstance(n.body[0], ast.Expr)}
        if any(isinstance(n, ast.Constant) and isinstance(n.value, str) and name in n.value and id(n) not in docstrings for n in ast.walk(tree)):
            readers.append(path.name)
    ctx.expect(not readers, f"{t.package} names {name} in code, not only in comments: {readers}")
    owner = resolve_symbol(f"{t.package}.{t.cls}")
    init = _definition(owner.__module__, f"{t.cls}.__init__")
    comment = _comment_text(owner.__module__, init)
    ctx.expect(f"because of the use of {t.setting}, {t.comment}." in comment, f"{t.cls}.__init__ has no comment saying that because of {t.setting}, {t.comment!r}")
    ctx.expect(assignment(t.setting) == (name, value), f"the comment's {t.setting} is not the headline's {r.setting}")


def _connections_block(fn: str = "validate_args") -> ast.If:
    """validate_args' top-level `if` that asserts the variable equals some value."""
    blocks = []
    for node in _validate_args(fn).body:
        if isinstance(node, ast.If):
            for a in _statements(node, ast.Assert):
                if VARIABLE in ast.unparse(a.test) and isinstance(a.test, ast.Compare) and isinstance(a.test.ops[0], ast.Eq):
                    blocks.append(node)
    if len(blocks) != 1:
        raise ClaimFailed(f"validate_args has {len(blocks)} blocks asserting {VARIABLE} equals a value, expected one")
    return blocks[0]


def _connections_outcome(environ: dict[str, str], arch: int, **layout) -> tuple[str | None, list[str]]:
    """Run that block: (assertion message or None, warnings) for one layout and GPU."""
    fields = dict(tensor_model_parallel_size=1, context_parallel_size=1, use_torch_fsdp2=False, use_megatron_fsdp=False, overlap_moe_expert_parallel_comm=False)
    fields.update(layout)
    warned: list[str] = []
    namespace = {"args": _args(**fields), "os": types.SimpleNamespace(environ=dict(environ)), "get_device_arch_version": lambda: arch, "warn_rank_0": lambda message, rank=0: warned.append(message)}
    try:
        _run_block(_connections_block(), namespace)
    except AssertionError as error:
        return str(error), warned
    return None, warned


@claim("overlap-max-connections-validate-args")
def max_connections_validate_args(ctx: Context) -> None:
    r = ctx.read(
        "Megatron-LM's `{fn:code}`, which megatron-core ships as `{module:code}`, asserts `{setting:code}` only when TP {op1:>|>=} {tp:int} or CP {op2:>|>=} {cp:int} "
        "and `{arch_fn:code}` is below {arch:int}, beside the comment \"{comment:quote}\"."
    )
    from importlib.metadata import files

    shipped = {str(f) for f in files("megatron-core") or []}
    ctx.expect(r.module.replace(".", "/") + ".py" in shipped, f"{r.module} is not a file of the megatron-core distribution")
    _definition(r.module, r.fn)
    ctx.expect(r.module == MEGATRON_LM_ARGUMENTS and r.arch_fn.removesuffix("()") in _names(_connections_block(r.fn).test), f"{r.fn}'s block does not test {r.arch_fn}")
    name, value = assignment(r.setting)
    ctx.expect(name == VARIABLE, f"SKILL.md names {name}")
    tp_on, tp_off = threshold(r.op1, r.tp)
    cp_on, cp_off = threshold(r.op2, r.cp)
    old, new = r.arch - 1, r.arch
    ok = {name: str(value)}
    for layout in ({"tensor_model_parallel_size": tp_on}, {"context_parallel_size": cp_on}):
        fired, _ = _connections_outcome({}, old, **layout)
        ctx.expect(fired is not None, f"with {layout} on a GPU of arch {old} and the variable unset, {r.fn} does not assert")
        ctx.expect(_connections_outcome(ok, old, **layout)[0] is None, f"with {layout} and {r.setting}, {r.fn} still asserts")
        ctx.expect(_connections_outcome({}, new, **layout)[0] is None, f"on arch {new} {r.fn} asserts as well: the bound is not {r.arch}")
    quiet = {"tensor_model_parallel_size": max(tp_off, 1), "context_parallel_size": max(cp_off, 1)}
    ctx.expect(_connections_outcome({}, old, **quiet)[0] is None, f"{r.fn} asserts at {quiet}: the bounds TP {r.op1} {r.tp}, CP {r.op2} {r.cp} are not where it starts")
    lines = [text for _, text in _comment_lines(r.module, _connections_block())]
    ctx.expect(r.comment in lines, f"the block has no comment line {r.comment!r}: {lines}")
    w = ctx.read("With `{f1:code}`, `{f2:code}` or `{f3:code}` it only warns.")
    distinct(ctx, w.f1, w.f2, w.f3)
    inner = {a.attr for n in _statements(_connections_block(), ast.If) if n is not _connections_block() for a in ast.walk(n.test) if isinstance(a, ast.Attribute)}
    ctx.expect({w.f1, w.f2, w.f3} == inner, f"the block makes exceptions for {sorted(inner)}, SKILL.md lists {w.f1, w.f2, w.f3}")
    for flag in (w.f1, w.f2, w.f3):
        fired, warned = _connections_outcome({}, old, tensor_model_parallel_size=tp_on, **{flag: True})
        ctx.expect(fired is None and len(warned) == 1 and name in warned[0], f"with {flag} the block asserts ({fired}) or does not warn ({warned})")


PERF_RECIPES = "megatron.bridge.perf_recipes.llama.h100.llama3"


def _recipe_layout(module: str, function: str) -> dict[str, object]:
    """The literal assignments a perf recipe function makes, and its env_vars entries."""
    node = _definition(module, function)
    out: dict[str, object] = {}
    for statement in _statements(node, ast.Assign):
        if len(statement.targets) != 1:
            continue
        target = ast.unparse(statement.targets[0])
        if isinstance(statement.value, ast.Constant):
            out[target] = statement.value.value
        elif isinstance(statement.value, ast.Dict):
            out[target] = {ast.literal_eval(k): ast.unparse(v) for k, v in zip(statement.value.keys, statement.value.values) if isinstance(k, ast.Constant)}
    return out


@claim("overlap-max-connections-bridge")
def max_connections_bridge(ctx: Context) -> None:
    r = ctx.read("**Bridge checks the variable only for Megatron FSDP.** Its one read of `{var:code}` is in `{fn:code}`, so a TP layout with sequence parallelism and DP overlap passes `{updater:code}` whether the variable is unset or set to any value.")
    reads = _reads_of(r.var)
    ctx.expect([f for _, f in reads] == [r.fn], f"Bridge reads {r.var} in {reads}, not only in {r.fn}")
    ctx.expect("use_megatron_fsdp" in source_of(resolve_symbol("megatron.bridge.training.config.ConfigContainer.validate")) and f"self.{r.fn}()" in source_of(resolve_symbol("megatron.bridge.training.config.ConfigContainer.validate")), f"validate() does not run {r.fn} for Megatron FSDP")
    for environ in ({}, {r.var: "1"}, {r.var: "8"}, {r.var: "32"}):
        cfg = tiny_config(tp=2, sp=True, distributed_optimizer=True)
        cfg.comm_overlap = overlap(tp_comm_overlap=False)
        _resolve_with(r.updater, cfg, 8, environ)
        ctx.expect(cfg.ddp.overlap_grad_reduce and cfg.ddp.overlap_param_gather and cfg.model.sequence_parallel, f"with {environ} the layout lost DP overlap or sequence parallelism")
    fsdp = tiny_config()
    fsdp.ddp.use_megatron_fsdp = True
    fsdp.checkpoint.ckpt_format = "fsdp_dtensor"
    ctx.expect_raises(lambda: resolve(fsdp, environ={r.var: "1"}), AssertionError, r.var)
    s = ctx.read(
        "Bridge's H100 perf recipes set it per layout through `{attr:code}`: `{one:code}` (TP {tp1:int}, CP {cp1:int}) sets `{v1:code}`, and `{two:code}` (TP {tp2:int}, CP {cp2:int}) sets `{v2:code}`."
    )
    distinct(ctx, s.one, s.two)
    for fn, tp, cp, stated in ((s.one, s.tp1, s.cp1, s.v1), (s.two, s.tp2, s.cp2, s.v2)):
        ctx.expect("_h100_" in fn, f"{fn} is not an H100 recipe")
        layout = _recipe_layout(PERF_RECIPES, fn)
        got = (layout.get("cfg.model.tensor_model_parallel_size"), layout.get("cfg.model.context_parallel_size"), (layout.get(s.attr) or {}).get(r.var))
        ctx.expect(got == (tp, cp, stated), f"{fn} sets (TP, CP, {r.var}) = {got}; SKILL.md says {(tp, cp, stated)} through {s.attr}")
    ctx.expect(literal(s.v2) == 1 < literal(s.v1) and (s.cp2 > 1 or s.tp2 > 1) and s.tp1 == s.cp1 == 1, f"the two recipes do not split TP/CP layouts ({s.v2}) from the plain one ({s.v1})")
    t = ctx.read("For a layout with TP {tp:int} and CP {cp:int}, unset it or raise it where the job is launched: `{attr:code}` does not replace a value the launcher exported.")
    ctx.expect((t.tp, t.cp) == (s.tp1, s.cp1), f"the advice is for TP {t.tp}, CP {t.cp}; the recipe that raises the variable has TP {s.tp1}, CP {s.cp1}")
    apply = resolve_symbol("megatron.bridge.training.config.apply_environment_variables")
    cfg = tiny_config()
    set_value(cfg, t.attr, {r.var: 32})
    ctx.expect(t.attr == s.attr == "cfg.env_vars", f"{t.attr} is not the recipes' {s.attr}")
    with preserved_environ():
        os.environ[r.var] = "1"
        apply(cfg)
        kept = os.environ[r.var]
    ctx.expect(kept == "1", f"{t.attr} replaced the exported value: {kept}")


# --- references/dp-overlap.md: flags and buckets ----------------------------------------------


def _param_gather_block(fn: str = "validate_args") -> ast.If:
    blocks = [n for n in _statements(_validate_args(fn), ast.If) if ast.unparse(n.test) == "args.overlap_param_gather" and any(isinstance(b, ast.Assert) for b in n.body)]
    if len(blocks) != 1:
        raise ClaimFailed(f"validate_args has {len(blocks)} asserting overlap_param_gather blocks, expected one")
    return blocks[0]


def _megatron_lm_rejects(fn: str = "validate_args", **flags) -> BaseException | None:
    fields = dict(overlap_param_gather=False, overlap_grad_reduce=False, use_distributed_optimizer=True, use_megatron_fsdp=False, optimizer="adam")
    fields.update(flags)
    try:
        _run_block(_param_gather_block(fn), {"args": _args(**fields)})
    except AssertionError as error:
        return error
    return None


@claim("overlap-param-gather-needs-grad-reduce")
def param_gather_needs_grad_reduce(ctx: Context) -> None:
    r = ctx.read("**`{gather:code}` without `{reduce:code}` passes Bridge's validation.**")
    gather_field, gather = assignment(r.gather)
    reduce_field, reduce = assignment(r.reduce)
    pair = {gather_field: gather, reduce_field: not reduce}
    s = ctx.read("Megatron-LM's `{fn:code}` rejects that pair with `{error:code}`, but nothing in Bridge calls `{called:code}`, and Bridge's own validation does not compare the two.")
    kind, message = raised(s.error)
    error = _megatron_lm_rejects(s.fn, **pair)
    ctx.expect(s.fn == s.called and error is not None, f"Megatron-LM's {s.fn} does not reject {pair}")
    ctx.expect(type(error) is kind and str(error) == message, f"{s.fn} raises {type(error).__name__}: {error}, not {s.error}")
    ctx.expect(_megatron_lm_rejects(s.fn, **{gather_field: gather, reduce_field: reduce}) is None, f"{s.fn} also rejects {r.gather} with {r.reduce}")
    callers = [path for path, tree in _bridge_trees() for n in _statements(tree, ast.Call) if ast.unparse(n.func).split(".")[-1] == s.called]
    ctx.expect(not callers, f"Bridge calls {s.called} in {callers}")
    t = ctx.read("With the distributed optimizer, the pair set on `{target:code}` without a `{cls:code}`, or passed to `{cls2:code}`, comes out of `{updater:code}` unchanged.")
    ctx.expect(t.cls == t.cls2 == comm_overlap_module().CommOverlapConfig.__name__, f"SKILL.md names {t.cls}/{t.cls2}")
    for world in (1, 8):
        for through_config in (False, True):
            cfg = tiny_config(distributed_optimizer=True)
            if through_config:
                cfg.comm_overlap = overlap(tp_comm_overlap=False, **pair)
            else:
                for field, value in pair.items():
                    set_value(cfg, f"{t.target}.{field}", value)
            _resolve_with(t.updater, cfg, world)
            got = {field: get_value(cfg, f"{t.target}.{field}") for field in pair}
            ctx.expect(got == pair, f"at data-parallel size {world} ({'passed to' if through_config else 'set without'} {t.cls}) {t.updater} gives {got}, not {pair}")
    u = ctx.read("Set `{fix:code}` with it.")
    field, value = assignment(u.fix)
    ctx.expect(field == reduce_field and _megatron_lm_rejects(s.fn, **{gather_field: gather, field: value}) is None, f"{u.fix} next to {r.gather} is still what Megatron-LM rejects")


@claim("overlap-bucket-size-default")
def bucket_size_default(ctx: Context) -> None:
    r = ctx.read("**`{field:code}` only counts with `{flag:code}`.**")
    flag, on = assignment(r.flag)
    s = ctx.read("Bridge wraps the model with megatron-core's `{fn:code}` from `{module:code}`, which fills an unset `{field:code}` with `{expr:code}` parameters, then sets it to `{none:code}` whenever `{flag:code}` is `{off:code}`, whatever you or Bridge chose.")
    from megatron.bridge.models import model_provider

    wrap = resolve_symbol(f"{s.module}.{s.fn}")
    ctx.expect(getattr(model_provider, s.fn, None) is wrap and f"{s.fn}(" in source_of(model_provider.get_model), f"Bridge's get_model does not wrap with {s.module}.{s.fn}")
    ctx.expect(s.field == r.field and s.flag == flag, f"the sentences name {s.field}/{s.flag} and {r.field}/{flag}")
    try:
        expression = ast.parse(s.expr.strip(), mode="eval")
    except SyntaxError:
        raise ClaimFailed(f"SKILL.md writes {s.expr!r} where an expression belongs") from None
    ctx.expect(_names(expression) <= {"max", "pg_collection"}, f"{s.expr} uses names other than max and pg_collection")
    for size in (1, 8, 39, 40, 41, 64, 512):
        stated = _evaluate(expression.body, max=max, pg_collection=types.SimpleNamespace(dp_cp=_Group(size)))
        got = _ddp_wrap_bucket(_ddp_config(**{flag: on}), size)
        ctx.expect(got == stated, f"at a dp_cp size of {size} {s.fn} fills {r.field} with {got}, {s.expr} gives {stated}")
    off = literal(s.off)
    ctx.expect(off != on, f"{r.flag} and {s.flag} = {s.off} are the same setting")
    ctx.expect(_ddp_wrap_bucket(_ddp_config(**{flag: on, r.field: 1234}), 8) == 1234, f"with {r.flag} {s.fn} does not keep a bucket size you chose")
    ctx.expect(_ddp_wrap_bucket(_ddp_config(**{flag: off, r.field: 1234}), 8) == literal(s.none), f"with {flag}={off} a bucket size you chose is not turned into {s.none}")
    bridge = tiny_config(distributed_optimizer=True)
    bridge.comm_overlap = overlap(tp_comm_overlap=False, **{flag: off})
    resolve(bridge, world_size=8)
    ctx.expect(bridge.ddp.bucket_size is not None and _ddp_wrap_bucket(bridge.ddp, 8) == literal(s.none), f"the bucket size Bridge chose ({bridge.ddp.bucket_size}) survives {s.fn} with {flag}={off}")
    t = ctx.read("There `{group:code}` is the \"{doc:quote}\".")
    from megatron.core.process_groups_config import ProcessGroupCollection

    ctx.expect(f"pg_collection.{t.group}.size()" in " ".join(s.expr.split()), f"{s.expr} does not count the {t.group} group")
    ctx.expect(f"{t.group}: {t.doc}" in [line.strip() for line in (ProcessGroupCollection.__doc__ or "").split("\n")], f"ProcessGroupCollection does not document {t.group} as {t.doc!r}")
    u = ctx.read("Bridge itself leaves `{field:code}` unset without the distributed optimizer, so a plain DDP run with `{plain:code}` gets that default.")
    ctx.expect(u.plain == r.flag and u.field == r.field, f"{u.plain} is not {r.flag}")
    plain = tiny_config()
    plain.ddp.overlap_grad_reduce = on
    plain.comm_overlap = overlap(tp_comm_overlap=False)
    resolve(plain, world_size=8)
    ctx.expect(get_value(plain, f"cfg.ddp.{u.field}") is None, f"without the distributed optimizer Bridge sets {u.field}={plain.ddp.bucket_size}")
    stated = _evaluate(expression.body, max=max, pg_collection=types.SimpleNamespace(dp_cp=_Group(64)))
    ctx.expect(_ddp_wrap_bucket(plain.ddp, 64) == stated, "a plain DDP run does not get the default")


def _wrap_bucketing_flag() -> ast.expr:
    """The expression `_ddp_wrap` assigns to `disable_bucketing`."""
    node = _definition("megatron.training.models.dist_utils", "_ddp_wrap")
    values = [a.value for a in _statements(node, ast.Assign) if [ast.unparse(t) for t in a.targets] == ["disable_bucketing"]]
    if len(values) != 1:
        raise ClaimFailed(f"_ddp_wrap assigns disable_bucketing {len(values)} times, expected once")
    calls = [c for c in _statements(node, ast.Call) if any(k.arg == "disable_bucketing" and ast.unparse(k.value) == "disable_bucketing" for k in c.keywords)]
    if not calls:
        raise ClaimFailed("_ddp_wrap does not pass disable_bucketing to the wrapper")
    return values[0]


def _ddp_bucket_off_test() -> ast.expr:
    """The condition under which DistributedDataParallel sets its bucket size to None."""
    node = _definition("megatron.core.distributed.distributed_data_parallel", "DistributedDataParallel.__init__")
    tests = [n.test for n in _statements(node, ast.If) if any(ast.unparse(s) == "self.bucket_size = None" for s in n.body)]
    if len(tests) != 1:
        raise ClaimFailed(f"DistributedDataParallel.__init__ drops its bucket size under {len(tests)} conditions, expected one")
    return tests[0]


@claim("overlap-bucketing-first-chunk")
def bucketing_first_chunk(ctx: Context) -> None:
    ctx.says("**Even then, only the first pipeline stage and the first model chunk are bucketed.**")
    r = ctx.read("`{fn:code}` sets `{flag:code}` for every virtual-pipeline model chunk after the first (`{chunk:code}`) and for all chunks when `{gather:code}` is on, and `{cls:code}` drops its bucket size to `{none:code}` when `{flag2:code}` is set or on pipeline ranks after the first (`{rank:code}`).")
    ctx.expect(r.fn == "_ddp_wrap" and r.flag == r.flag2 == "disable_bucketing", f"SKILL.md names {r.fn} and {r.flag}/{r.flag2}")
    wrap = _wrap_bucketing_flag()
    chunk, op, bound = comparison(r.chunk)
    on, off = threshold(op, bound)
    ctx.expect(_names(wrap) == {chunk, r.gather}, f"{r.fn} decides {r.flag} from {sorted(_names(wrap))}, SKILL.md names {chunk} and {r.gather}")
    ctx.expect(_evaluate(wrap, **{chunk: on, r.gather: False}) and not _evaluate(wrap, **{chunk: off, r.gather: False}), f"{r.flag} does not switch at {r.chunk}")
    ctx.expect(off == 0 and _evaluate(wrap, **{chunk: 0, r.gather: True}), f"{r.gather} does not disable bucketing for the first chunk too")
    test = _ddp_bucket_off_test()
    rank, rank_op, rank_bound = comparison(r.rank)
    rank_on, rank_off = threshold(rank_op, rank_bound)
    ctx.expect(_names(test) == {r.flag2, rank}, f"{r.cls} drops its bucket size on {sorted(_names(test))}, SKILL.md names {r.flag2} and {rank}")
    ctx.expect(_evaluate(test, **{r.flag2: True, rank: 0}) and _evaluate(test, **{r.flag2: False, rank: rank_on}) and not _evaluate(test, **{r.flag2: False, rank: rank_off}), f"{r.cls} does not drop the bucket size as {r.flag2} or {r.rank} say")
    ctx.expect(rank_off == 0 and literal(r.none) is None, f"{r.rank} leaves out a rank other than the first, or {r.none} is not None")
    owner = resolve_symbol(f"megatron.core.distributed.{r.cls}")
    ctx.expect(owner.__init__ is not None and "self.bucket_size = None" in source_of(owner.__init__), f"{r.cls} does not hold the bucket size rule")
    d = ctx.read("megatron-core documents `{flag:code}` as \"{doc:quote}\".")
    ctx.expect(d.flag == r.flag, f"SKILL.md documents {d.flag}, not {r.flag}")
    ctx.expect(f"{d.flag}: {d.doc}." in " ".join((owner.__doc__ or "").split()), f"{r.cls} does not document {d.flag} as {d.doc!r}")


def _optimizer_step_comment(field: str) -> tuple[list[str], ast.If]:
    """The comment lines above the commented-out assignment of `field` in
    _get_optimizer_overlap_cfgs, and the `if` block they sit in."""
    module = "megatron.bridge.training.comm_overlap"
    method = _definition(module, "CommOverlapConfig._get_optimizer_overlap_cfgs")
    comments = _comment_lines(module, method)
    at = [i for i, (_, text) in enumerate(comments) if text.replace(" ", "") == f"comm_overlap_cfg.{field}=True"]
    if len(at) != 1:
        raise ClaimFailed(f"_get_optimizer_overlap_cfgs has {len(at)} commented-out assignments of {field} to True")
    line = comments[at[0]][0]
    blocks = [n for n in _statements(method, ast.If) if n.lineno < line <= n.end_lineno]
    innermost = max(blocks, key=lambda n: n.lineno)
    return [text for number, text in comments[: at[0]] if innermost.lineno < number <= innermost.end_lineno], innermost


@claim("overlap-optimizer-step-gather")
def optimizer_step_gather(ctx: Context) -> None:
    r = ctx.read("**`{field:code}` is reset only through a `{cls:code}`.** It is a field of `{owner:code}` (`{attr:code}`), not of `{other:code}`.")
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig

    owner, other = resolve_symbol(f"megatron.core.optimizer.{r.owner}"), resolve_symbol(f"megatron.core.distributed.{r.other}")
    ctx.expect(owner is OptimizerConfig and other is DistributedDataParallelConfig, f"SKILL.md names {r.owner}/{r.other}")
    ctx.expect(r.field in {f.name for f in dataclasses.fields(owner)} and r.field not in {f.name for f in dataclasses.fields(other)}, f"{r.field} is not a field of {r.owner} only")
    ctx.expect(isinstance(get_value(tiny_config(), r.attr), owner), f"{r.attr} is not the {r.owner}")
    s = ctx.read("With a `{cls:code}` attached and the distributed optimizer on, `{method:code}` writes `{value:code}` to it; the line that would turn it on for PP {op1:>|>=} {pp:int} with VPP {op2:>|>=} {vpp:int} is commented out under \"{comment:quote}\".")
    ctx.expect(s.method == "setup()" and s.cls == r.cls, f"SKILL.md names {s.cls}.{s.method}")
    pp_on, pp_off = threshold(s.op1, s.pp)
    vpp_on, vpp_off = threshold(s.op2, s.vpp)
    for world, pp, vpp in ((2, pp_on, vpp_on), (1, 1, None), (8, 1, None)):
        cfg = tiny_config(pp=pp, vpp=vpp, distributed_optimizer=True)
        set_value(cfg, f"{r.attr}.{r.field}", not literal(s.value))
        cfg.comm_overlap = overlap(tp_comm_overlap=False)
        resolve(cfg, world_size=world * pp)
        ctx.expect(get_value(cfg, f"{r.attr}.{r.field}") == literal(s.value), f"at DP={world}, PP={pp}, VPP={vpp} setup() leaves {r.field}={get_value(cfg, f'{r.attr}.{r.field}')!r}")
    above, block = _optimizer_step_comment(r.field)
    ctx.expect(s.comment in above, f"the commented-out assignment of {r.field} sits under {above}, not {s.comment!r}")

    def block_runs(pp: int, vpp: int) -> bool:
        return bool(_evaluate(block.test, model_cfg=types.SimpleNamespace(pipeline_model_parallel_size=pp), vp_size=vpp))

    ctx.expect(block_runs(pp_on, vpp_on) and not block_runs(pp_off, vpp_on) and not block_runs(pp_on, vpp_off), f"the commented-out line's block does not run exactly for PP {s.op1} {s.pp} with VPP {s.op2} {s.vpp}")
    w = ctx.read("Without one (`{where:code}` is `{none:code}`, as `{base:code}` leaves it), `{method:code}` never runs, and `{on:code}` set on `{attr:code}` survives `{updater:code}`.")
    from megatron.bridge.recipes import common

    base = getattr(common, w.base.removesuffix("()"))()
    ctx.expect(w.method == s.method and w.attr == r.attr and literal(w.none) is None and get_value(base, w.where) is None, f"{w.base} leaves {w.where}={get_value(base, w.where)!r}")
    for distributed in (True, False):
        cfg = tiny_config(pp=pp_on, vpp=vpp_on, distributed_optimizer=distributed)
        set_value(cfg, w.where, None)
        set_value(cfg, f"{r.attr}.{r.field}", literal(w.on))
        _resolve_with(w.updater, cfg, pp_on * 2)
        ctx.expect(get_value(cfg, f"{r.attr}.{r.field}") == literal(w.on) != literal(s.value), f"without a {r.cls}, {w.on} on {r.attr} comes out {get_value(cfg, f'{r.attr}.{r.field}')!r}")
    # with one attached but no distributed optimizer, setup() leaves it too
    cfg = tiny_config(pp=pp_on, vpp=vpp_on, distributed_optimizer=False)
    set_value(cfg, f"{r.attr}.{r.field}", literal(w.on))
    cfg.comm_overlap = overlap(tp_comm_overlap=False)
    _resolve_with(w.updater, cfg, pp_on * 2)
    ctx.expect(get_value(cfg, f"{r.attr}.{r.field}") == literal(w.on), f"setup() changes {r.field} without the distributed optimizer")
    t = ctx.read("Passing `{passed:code}` to `{cls:code}` survives `{updater:code}` too, and Bridge hands the value to `{fn:code}`, which then disables bucketing for every model chunk.")
    field, value = assignment(t.passed)
    ctx.expect(field == r.field and t.cls == r.cls == "CommOverlapConfig", f"SKILL.md passes {t.passed} to {t.cls}")
    cfg = tiny_config(pp=pp_on, vpp=vpp_on, distributed_optimizer=True)
    cfg.comm_overlap = overlap(tp_comm_overlap=False, **{field: value})
    _resolve_with(t.updater, cfg, pp_on * 2)
    ctx.expect(get_value(cfg, f"{r.attr}.{field}") == value != literal(s.value), f"{t.passed} passed to {t.cls} comes out {get_value(cfg, f'{r.attr}.{field}')!r}")
    # the hand-over: setup's model build -> provide_distributed_model -> get_model -> _ddp_wrap
    build = _definition("megatron.bridge.training.setup", "_build_distributed_model")
    handed = [k for c in _statements(build, ast.Call) if ast.unparse(c.func).endswith("provide_distributed_model") for k in c.keywords if k.arg == field]
    ctx.expect([ast.unparse(k.value) for k in handed] == [f"cfg.optimizer.{field}"], f"_build_distributed_model does not hand {r.attr}.{field} to provide_distributed_model")
    provide = _definition("megatron.bridge.models.model_provider", "ModelProviderMixin.provide_distributed_model")
    ctx.expect(any(ast.unparse(c.func) == "get_model" and any(k.arg == field and ast.unparse(k.value) == field for k in c.keywords) for c in _statements(provide, ast.Call)), f"provide_distributed_model does not pass {field} on to get_model")
    get_model = _definition("megatron.bridge.models.model_provider", "get_model")
    wraps = [c for c in _statements(get_model, ast.Call) if ast.unparse(c.func) == t.fn]
    ctx.expect(len(wraps) == 1 and len(wraps[0].args) > 3 and ast.unparse(wraps[0].args[3]) == field, f"get_model does not hand {field} to {t.fn}")
    wrap = _wrap_bucketing_flag()
    chunk = (_names(wrap) - {field}).pop()
    ctx.expect(all(_evaluate(wrap, **{chunk: i, field: value}) for i in range(4)), f"{t.fn} does not disable bucketing for every chunk when {field}={value}")


# --- references/pp-overlap.md -----------------------------------------------------------------


def _schedule(pp: int, vpp: int | None, picker: str = "get_forward_backward_func"):
    """The schedule megatron-core's picker returns for a layout."""
    function = resolve_symbol(f"megatron.core.pipeline_parallel.schedules.{picker}")
    try:
        return function(pp_size=pp, vp_size=vpp)
    except TypeError as error:
        raise ClaimFailed(f"{picker} does not pick a schedule for a layout: {error}") from None


def _first_step_error(model_config, pp: int, vpp: int | None) -> BaseException | None:
    """Call the schedule megatron-core picks for (pp, vpp) with the resolved model config and
    stand-in process groups; the error it raises before any communication, if any."""
    schedule = _schedule(pp, vpp)
    chunks = 1 if vpp is None else vpp
    model = _stub_model(model_config) * chunks
    kwargs = dict(forward_step_func=None, data_iterator=[None] * chunks, model=model, num_microbatches=max(pp, 1) * 2, seq_length=model_config.seq_length, micro_batch_size=1)
    if vpp is not None:
        kwargs.update(p2p_communicator=types.SimpleNamespace(config=model_config), pg_collection=types.SimpleNamespace(tp=_Group(1), cp=_Group(1)))
    try:
        schedule(**kwargs)
    except Exception as error:  # noqa: BLE001 - what it raises is the subject
        return error
    return None


@claim("overlap-p2p-without-vpp")
def p2p_without_vpp(ctx: Context) -> None:
    r = ctx.read("**`{setting:code}` without virtual pipeline stages fails at the first step, not in validation.**")
    field, value = assignment(r.setting)
    s = ctx.read("A value passed to `{cls:code}` wins over the derived one, so with PP {op:>|>=} {pp:int} and no VPP the model config gets `{got1:code}` next to the derived `{got2:code}`, and `{updater:code}` passes.")
    ctx.expect(s.cls == "CommOverlapConfig" and assignment(s.got1) == (field, value), f"SKILL.md passes {r.setting} but the model gets {s.got1}")
    pp_on, pp_off = threshold(s.op, s.pp)
    cfg = tiny_config(pp=pp_on)
    cfg.comm_overlap = overlap(tp_comm_overlap=False, **{field: value})
    _resolve_with(s.updater, cfg, pp_on * 2)  # passes validation
    other, other_value = assignment(s.got2)
    ctx.expect(getattr(cfg.model, field) == value and getattr(cfg.model, other) == other_value, f"with PP={pp_on} and no VPP the model gets {field}={getattr(cfg.model, field)}, {other}={getattr(cfg.model, other)}")
    ctx.expect(p2p(pp_on, None) == (not value, other_value), f"Bridge does not derive {other}={other_value} and the opposite {field} for PP={pp_on} without VPP")
    t = ctx.read("Without VPP, megatron-core's `{picker:code}` returns `{schedule:code}`, which raises `{error:code}` as soon as its model config has `{flag:code}` on.")
    kind, message = raised(t.error)
    ctx.expect(_schedule(pp_on, None, t.picker).__name__ == t.schedule, f"{t.picker} returns {_schedule(pp_on, None, t.picker).__name__} for PP={pp_on} without VPP, not {t.schedule}")
    ctx.expect(_schedule(pp_off, None, t.picker).__name__ != t.schedule and _schedule(pp_on, 2, t.picker).__name__ != t.schedule, f"{t.schedule} is also picked at PP={pp_off} or with VPP: the bound PP {s.op} {s.pp} is not where it starts")
    error = _first_step_error(cfg.model, pp_on, None)
    ctx.expect(type(error) is kind and str(error) == message, f"{t.schedule} raises {type(error).__name__}: {error}, not {t.error}")
    ctx.expect(t.flag == field, f"the schedule is said to test {t.flag}, not {field}")
    derived = tiny_config(pp=pp_on)
    derived.comm_overlap = overlap(tp_comm_overlap=False)
    resolve(derived, world_size=pp_on * 2)
    calm = _first_step_error(derived.model, pp_on, None)
    ctx.expect(not (type(calm) is kind and str(calm) == message), f"{t.schedule} raises {t.error} with {field} off as well")
    u = ctx.read("Megatron-LM's `{fn:code}` would have reset it to `{reset:code}` instead.")
    blocks = [n for n in _statements(_validate_args(u.fn), ast.If) if ast.unparse(n.test) == "args.virtual_pipeline_model_parallel_size is not None" and any(ast.unparse(a.targets[0]) == f"args.{field}" for a in _statements(n, ast.Assign))]
    ctx.expect(len(blocks) == 1, f"{u.fn} has {len(blocks)} blocks resetting {field} without VPP")
    args = _args(virtual_pipeline_model_parallel_size=None, pipeline_model_parallel_size=pp_on, **{field: value, "align_param_gather": True})
    _run_block(blocks[0], {"args": args, "print": lambda *a, **k: None, "print_rank_0": lambda *a, **k: None})
    ctx.expect(getattr(args, field) == literal(u.reset) != value, f"{u.fn} leaves {field}={getattr(args, field)} without VPP, not {u.reset}")
    v = ctx.read("Leave the field unset so Bridge derives it, or use `{vpp_field:code}` {op:>|>=} {vpp:int}, where Bridge derives `{d1:code}` and `{d2:code}`.")
    ctx.expect(getattr(derived.model, field) is not value, "left unset, Bridge does not derive the other value")
    vpp_on, vpp_off = threshold(v.op, v.vpp)
    ctx.expect(hasattr(tiny_config().model, v.vpp_field), f"the model config has no {v.vpp_field}")
    stated = dict([assignment(v.d1), assignment(v.d2)])
    got = dict(zip((field, other), p2p(pp_on, vpp_on)))
    ctx.expect(stated == got, f"with {v.vpp_field}={vpp_on} Bridge derives {got}, not {stated}")
    ctx.expect(p2p(pp_on, vpp_off if vpp_off > 1 else None)[0] != got[field], f"{v.vpp_field}={vpp_off} also derives {field}={got[field]}: the bound is not {v.op} {v.vpp}")


@claim("overlap-p2p-batch-with-vpp")
def p2p_batch_with_vpp(ctx: Context) -> None:
    r = ctx.read("With VPP {op:>|>=} {vpp:int} the opposite mistake fails the same way: passing `{setting:code}` to `{cls:code}` leaves both on, and `{schedule:code}` raises `{error:code}`.")
    field, value = assignment(r.setting)
    kind, message = raised(r.error)
    vpp_on, vpp_off = threshold(r.op, r.vpp)
    ctx.expect(r.cls == "CommOverlapConfig", f"SKILL.md names {r.cls}")
    cfg = tiny_config(pp=2, vpp=vpp_on)
    cfg.comm_overlap = overlap(tp_comm_overlap=False, **{field: value})
    resolve(cfg, world_size=4)
    ctx.expect(cfg.model.overlap_p2p_comm is True and getattr(cfg.model, field) is value is True, f"with VPP={vpp_on} and {r.setting} the model gets overlap_p2p_comm={cfg.model.overlap_p2p_comm}, {field}={getattr(cfg.model, field)}")
    ctx.expect(_schedule(2, vpp_on).__name__ == r.schedule, f"with VPP={vpp_on} megatron-core picks {_schedule(2, vpp_on).__name__}")
    error = _first_step_error(cfg.model, 2, vpp_on)
    ctx.expect(type(error) is kind and str(error) == message, f"{r.schedule} raises {type(error).__name__}: {error}, not {r.error}")
    lower = tiny_config(pp=2, vpp=vpp_off if vpp_off > 1 else None)
    lower.comm_overlap = overlap(tp_comm_overlap=False, **{field: value})
    resolve(lower, world_size=4)
    ctx.expect(lower.model.overlap_p2p_comm is False, f"at VPP={vpp_off} Bridge also derives overlap_p2p_comm: the bound VPP {r.op} {r.vpp} is not where the mistake starts")


@claim("overlap-defer-embedding-wgrad")
def defer_embedding_wgrad(ctx: Context) -> None:
    ctx.says("**Deferring the embedding weight gradient needs a limit as well.**")
    r = ctx.read("Bridge derives `{d1:code}` and `{d2:code}` on the model, so passing only `{only:code}` to `{cls:code}` fails `{updater:code}` with `{error:code}`")
    derived = dict([assignment(r.d1), assignment(r.d2)])
    cfg = tiny_config(pp=2)
    cfg.comm_overlap = overlap(tp_comm_overlap=False)
    resolve(cfg, world_size=4)
    got = {k: getattr(cfg.model, k) for k in derived}
    ctx.expect(got == derived, f"Bridge derives {got} on the model, not {derived}")
    field, value = assignment(r.only)
    kind, message = raised(r.error)
    ctx.expect(field in derived and value != derived[field] and r.cls == "CommOverlapConfig", f"{r.only} is not one of the derived fields turned the other way")

    def attempt(pp: int, fusion: bool, **fields):
        cfg = tiny_config(pp=pp)
        cfg.model.gradient_accumulation_fusion = fusion
        cfg.comm_overlap = overlap(tp_comm_overlap=False, **fields)
        try:
            _resolve_with(r.updater, cfg, pp * 2)
        except ClaimFailed:
            raise
        except Exception as error:  # noqa: BLE001 - what validation raises is the subject
            return error
        return None

    error = attempt(2, True, **{field: value})
    ctx.expect(type(error) is kind and str(error) == message, f"passing only {r.only} gives {type(error).__name__}: {error}, not {r.error}")
    s = ctx.read("Pass `{limit:code}` too; megatron-core documents `{zero:code}` as \"{doc:quote}\".")
    limit_field, limit = assignment(s.limit)
    ctx.expect(limit_field in derived and limit_field != field and limit == literal(s.zero), f"{s.limit} is not the limit documented as {s.zero}")
    ctx.expect(attempt(2, True, **{field: value, limit_field: limit}) is None, f"{r.only} with {s.limit} still fails validation")
    from megatron.core.model_parallel_config import ModelParallelConfig

    ctx.expect(f"Defaults to {s.zero}, which means {s.doc}." in source_of(ModelParallelConfig), f"ModelParallelConfig does not document {limit_field}={s.zero} as {s.doc!r}")
    t = ctx.read("It also raises a `{exc:exc}` with PP = {pp:int} or without `{fusion:code}`.")
    ctx.expect(t.fusion == "gradient_accumulation_fusion", f"SKILL.md names {t.fusion}")
    fixed = {field: value, limit_field: limit}
    for case, error in (("PP", attempt(t.pp, True, **fixed)), (t.fusion, attempt(2, False, **fixed))):
        ctx.expect(type(error) is t.exc, f"with the limit set, {case} gives {type(error).__name__}: {error}, not a {t.exc.__name__}")
    ctx.expect(attempt(t.pp + 1, True, **fixed) is None, f"PP={t.pp + 1} fails too: the rejected size is not PP = {t.pp}")


# --- references/tp-bring-up.md ----------------------------------------------------------------


def _bootstrap(model_config, te_version: str, fn: str = "_initialize_tp_communicators") -> tuple[dict, list[str]]:
    """Run Bridge's _initialize_tp_communicators against a stand-in Transformer Engine of
    `te_version`: what it passed to initialize_ub and new_group, and what it warned."""
    import torch.distributed
    import yaml  # noqa: F401 - imported before sys.modules is patched, as the function imports it
    from packaging.version import Version

    init = importlib.import_module("megatron.bridge.training.initialize")
    calls: dict = {}
    pytorch = types.ModuleType("transformer_engine.pytorch")
    pytorch.initialize_ub = lambda **kwargs: calls.setdefault("initialize_ub", kwargs)
    pytorch.UserBufferQuantizationMode = types.SimpleNamespace(FP8="fp8", NONE="none")
    engine = types.ModuleType("transformer_engine")
    engine.pytorch = pytorch
    installed = Version(te_version)
    with (
        mock.patch.dict(sys.modules, {"transformer_engine": engine, "transformer_engine.pytorch": pytorch}),
        mock.patch.object(init, "is_te_min_version", lambda version, check_equality=True: installed >= Version(version)),
        mock.patch.object(init, "get_te_version", lambda: installed),
        mock.patch.object(torch.distributed, "new_group", lambda **kwargs: calls.setdefault("new_group", kwargs)),
        warnings.catch_warnings(record=True) as caught,
    ):
        warnings.simplefilter("always")
        function = getattr(init, fn, None)
        if not callable(function):
            raise ClaimFailed(f"megatron.bridge.training.initialize has no function {fn}")
        function(model_config, 1)
    return calls, [str(w.message) for w in caught]


def _tp_model(te: bool, **fields):
    cfg = tiny_config(tp=2, sp=True)
    cfg.comm_overlap = overlap(tp_comm_overlap=True, **fields)
    with mock.patch.object(comm_overlap_module(), "HAVE_TE", te):
        resolve(cfg, world_size=2)
    return cfg


@claim("overlap-tp-bootstrap-backend")
def tp_bootstrap_backend(ctx: Context) -> None:
    ctx.says("**The userbuffers bootstrap backend is NCCL unless you ask for another.**")
    r = ctx.read("`{field:code}` defaults to `{default:code}`, as does megatron-core's `{core:code}`, whose type allows `{a:code}`, `{b:code}` and `{c:code}`.")
    cls_name, _, name = r.field.rpartition(".")
    ours = {f.name: f for f in dataclasses.fields(resolve_symbol(f"megatron.bridge.training.comm_overlap.{cls_name}"))}
    ctx.expect(name in ours and ours[name].default == literal(r.default), f"{r.field} defaults to {ours.get(name) and ours[name].default!r}, not {r.default}")
    core_cls, _, core_name = r.core.rpartition(".")
    from megatron.core import model_parallel_config

    owner = getattr(model_parallel_config, core_cls or "-", None)
    ctx.expect(dataclasses.is_dataclass(owner), f"{r.core} is not a field of a megatron-core config class")
    core = {f.name: f for f in dataclasses.fields(owner)}
    ctx.expect(core_name == name and core[name].default == literal(r.default), f"{r.core} defaults to {core.get(core_name) and core[core_name].default!r}")
    distinct(ctx, r.a, r.b, r.c)
    allowed = set(typing.get_args(typing.get_type_hints(owner)[name]))
    ctx.expect(allowed == {r.a, r.b, r.c}, f"{r.core} allows {sorted(allowed)}, SKILL.md lists {r.a, r.b, r.c}")
    s = ctx.read("`{method:code}` copies the `{cls:code}` value onto `{target:code}` whether or not TP overlap stays on, replacing a value set only on the model.")
    ctx.expect(s.method == "setup()" and s.cls == cls_name, f"SKILL.md names {s.method} of {s.cls}")
    for te in (True, False):
        cfg = tiny_config(tp=2, sp=True)
        set_value(cfg, s.target, "gloo")
        cfg.comm_overlap = overlap(tp_comm_overlap=True, **{name: "mpi"})
        with mock.patch.object(comm_overlap_module(), "HAVE_TE", te):
            resolve(cfg, world_size=2)
        ctx.expect(cfg.model.tp_comm_overlap is te and get_value(cfg, s.target) == "mpi", f"with TP overlap {'on' if te else 'off'}, {s.target} is {get_value(cfg, s.target)!r}, not the {s.cls} value")
    t = ctx.read("When TP overlap is on, Bridge's `{fn:code}` hands it to Transformer Engine's `{ub:code}` as `{kw:code}`.")
    _, module = _module_source("megatron.bridge.training.initialize")
    gated = [n for n in _statements(module, ast.If) if ast.unparse(n.test) == "model_config.tp_comm_overlap" and any(ast.unparse(c.func) == t.fn for c in _statements(n, ast.Call))]
    callers = [c for c in _statements(module, ast.Call) if ast.unparse(c.func) == t.fn]
    ctx.expect(len(gated) == 1 and len(callers) == 1, f"{t.fn} is not called only when model_config.tp_comm_overlap is on")
    cfg = _tp_model(True)
    for version in ("1.9.0", "2.8.0", "2.12.0"):
        calls, _ = _bootstrap(cfg.model, version, t.fn)
        ctx.expect(t.ub in ("initialize_ub",) and calls.get(t.ub, {}).get(t.kw) == literal(r.default) and "new_group" not in calls, f"with TE {version}, {t.fn} calls {calls}")


@claim("overlap-tp-bootstrap-old-te")
def tp_bootstrap_old_te(ctx: Context) -> None:
    r = ctx.read("Only Transformer Engine older than {version:version} forces MPI: there `{fn:code}` warns that the installed version \"{warning:quote}\", creates a process group with backend `{backend:code}` and calls `{ub:code}` without a backend.")
    from packaging.version import Version

    cfg = _tp_model(True)
    older = str(Version(r.version).base_version) + ".dev0"  # the newest release that is still older
    calls, warned = _bootstrap(cfg.model, older, r.fn)
    ctx.expect(calls.get("new_group") == {"backend": literal(r.backend)}, f"with TE {older} Bridge creates {calls.get('new_group')}, not a {r.backend} group")
    ctx.expect(r.ub in calls and "bootstrap_backend" not in calls[r.ub], f"with TE {older} {r.ub} gets {calls.get(r.ub)}")
    ctx.expect(len(warned) == 1 and warned[0].startswith(f"Transformer Engine v{older} ") and warned[0].endswith(f" {r.warning}."), f"with TE {older} Bridge warns {warned}, not that the version {r.warning!r}")
    calls, warned = _bootstrap(cfg.model, r.version, r.fn)
    ctx.expect("new_group" not in calls and not warned and calls[r.ub].get("bootstrap_backend") == cfg.model.tp_comm_bootstrap_backend, f"TE {r.version} still forces MPI: {calls}, {warned}")
    s = ctx.read("So if TP overlap dies in MPI at start-up, remove an explicit `{setting:code}` and use a newer Transformer Engine rather than launching through MPI.")
    field, value = assignment(s.setting)
    ctx.expect(value == literal(r.backend) and field in {f.name for f in dataclasses.fields(comm_overlap_module().CommOverlapConfig)}, f"{s.setting} is not the {r.backend} backend field of CommOverlapConfig")
    default = _tp_model(True)
    ctx.expect(getattr(default.model, field) != value, f"without an explicit {s.setting} Bridge still asks for {value}")


# --- SKILL.md ---------------------------------------------------------------------------------


@claim("overlap-finalize-once")
def finalize_once(ctx: Context) -> None:
    r = ctx.read("**`{method:code}` takes its snapshot once.** The first call copies the fields of the `{cls:code}` into `{snapshot:code}` and later calls return early, so edits to `{attr:code}` after a first `{updater:code}` change nothing.")
    config_cls = getattr(comm_overlap_module(), r.cls, None)
    method = getattr(config_cls, r.method.removesuffix("()"), None)
    ctx.expect(isinstance(config_cls, type) and callable(method) and r.method.endswith("()"), f"{r.cls} has no method {r.method}")
    ctx.expect(r.updater.endswith("(cfg)") and f"cfg.comm_overlap.{method.__name__}()" in source_of(resolve_symbol(f"megatron.bridge.training.config.{r.updater.split('(')[0]}")), f"{r.updater} does not call {r.method}")
    # the method itself: a first call snapshots, a second one after an edit keeps the snapshot
    config = overlap(tp_comm_overlap=True, bucket_size=1000)
    method(config)
    taken = getattr(config, r.snapshot, None)
    config.bucket_size = 2000
    method(config)
    ctx.expect(taken is not None and getattr(config, r.snapshot) is taken and taken.bucket_size == 1000, f"{r.method} does not keep its first {r.snapshot}")

    def update(cfg):
        return _resolve_with(r.updater, cfg, 8)

    with mock.patch.object(comm_overlap_module(), "HAVE_TE", True):
        cfg = tiny_config(tp=2, sp=False, distributed_optimizer=True)
        set_value(cfg, r.attr, overlap(tp_comm_overlap=True))
        with collect_warnings() as first:
            update(cfg)
        snapshot = get_value(cfg, f"{r.attr}.{r.snapshot}")
        ctx.expect(dataclasses.is_dataclass(snapshot) and {f.name for f in dataclasses.fields(snapshot)} <= {f.name for f in dataclasses.fields(get_value(cfg, r.attr))}, f"{r.attr}.{r.snapshot} is not a copy of the config's fields")
        bucket = cfg.ddp.bucket_size
        cfg.model.sequence_parallel = True
        get_value(cfg, r.attr).bucket_size = bucket // 2
        with collect_warnings() as second:
            update(cfg)
        ctx.expect(get_value(cfg, f"{r.attr}.{r.snapshot}") is snapshot and cfg.ddp.bucket_size == bucket, f"the second call did not keep the first snapshot: bucket_size {cfg.ddp.bucket_size}")
        s = ctx.read("A TP gate that fired stays recorded there as `{recorded:code}`, while `{field:code}` still reads `{still:code}`.")
        name, value = assignment(s.recorded)
        ctx.expect(any("Disabling tensor parallel communication overlap" in w for w in first) and not any("Disabling" in w for w in second), f"the gate did not fire once: {first} / {second}")
        ctx.expect(getattr(snapshot, name) == value and cfg.model.tp_comm_overlap == value, f"the snapshot records {name}={getattr(snapshot, name)}, the model {cfg.model.tp_comm_overlap}")
        ctx.expect(s.field == f"{r.attr}.{name}" and get_value(cfg, s.field) == literal(s.still) != value, f"{s.field} reads {get_value(cfg, s.field)!r}, not {s.still}")
        t = ctx.read("To try other values, assign a new `{fresh:code}` before running again, or resolve a `{clone:code}`, which leaves the original untouched.")
        ctx.expect(t.fresh == r.cls, f"SKILL.md assigns a new {t.fresh}")
        set_value(cfg, r.attr, overlap(tp_comm_overlap=True, bucket_size=bucket // 2))
        update(cfg)
        ctx.expect(cfg.model.tp_comm_overlap is True and cfg.ddp.bucket_size == bucket // 2, "a new CommOverlapConfig did not apply its values")
        original = tiny_config(tp=2, sp=True, distributed_optimizer=True)
        set_value(original, r.attr, overlap(tp_comm_overlap=True))
        try:
            copied = _evaluate(ast.parse(t.clone, mode="eval").body, copy=copy, cfg=original)
        except Exception as error:  # noqa: BLE001 - a stated expression that does not run is a false statement
            raise ClaimFailed(f"{t.clone} does not copy the config: {type(error).__name__}: {error}") from None
        ctx.expect(copied is not original, f"{t.clone} is the same object")
        update(copied)
        ctx.expect(not hasattr(get_value(original, r.attr), r.snapshot) and original.ddp.bucket_size is None and copied.model.tp_comm_overlap is True, f"resolving {t.clone} changed the original")
