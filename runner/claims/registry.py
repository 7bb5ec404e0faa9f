"""The claim registry and the context each check receives.

A check is a function registered with `@claim(skill, claim_id)`. It gets a `Context`
holding its SKILL.md section and fails by raising `ClaimFailed` (or AssertionError) with
a message saying what is no longer true. A check reads the values it tests out of the
skill's sentences (`ctx.read` with a template), so the skill's text is the input: change a
stated value and the comparison with the library fails; change the sentence and it is no
longer read. After a check passes, `Context.unread()` must be empty: every part of the
section's prose matched, every fact token captured as a value, every code block run.
"""

from __future__ import annotations

import functools

import importlib
import inspect
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..core import MbskillsError
from .sections import MARKDOWN_PUNCTUATION, ClaimSection, fact_tokens


class ClaimFailed(MbskillsError, AssertionError):
    """The claim is not true for the installed release, or the skill no longer states it."""


TIERS = ("cpu", "gpu")


@dataclass(frozen=True)
class Check:
    skill: str
    claim_id: str
    func: Callable[["Context"], None]
    tier: str = "cpu"  # gpu: the claim itself needs a GPU run; `func` is what a CPU can check of it


CHECKS: dict[tuple[str, str], Check] = {}


def claim(claim_id: str, tier: str = "cpu") -> Callable[[Callable[["Context"], None]], Callable[["Context"], None]]:
    """Register a check for claim `claim_id` of the skill whose `checks/` folder holds the
    decorated function (runner/claims/plugins.py loads it). A `tier="gpu"` check runs on CPU
    too, but only to build and validate what the GPU run (gpu/validate.sh) will train;
    passing it reports the claim as needing a GPU."""
    if tier not in TIERS:
        raise ValueError(f"{claim_id}: tier must be one of {TIERS}, not {tier!r}")
    from .plugins import skill_of_module

    # The module that calls claim() owns the check, so a shared function (the release check)
    # can be registered by each skill as its own.
    caller = inspect.currentframe().f_back.f_globals.get("__name__", "")

    def register(func: Callable[["Context"], None]) -> Callable[["Context"], None]:
        skill = skill_of_module(caller)
        if skill is None:
            raise RuntimeError(f"claim({claim_id!r}) in {caller}: checks register from a skill's checks/ folder (runner/claims/plugins.py)")
        key = (skill, claim_id)
        if key in CHECKS:
            raise RuntimeError(f"two checks registered for {skill}/{claim_id}")
        CHECKS[key] = Check(skill, claim_id, func, tier)
        return func

    return register


def forget_skill(skill: str) -> None:
    """Drop every check registered for `skill` (before its checks are loaded again)."""
    for key in [k for k in CHECKS if k[0] == skill]:
        del CHECKS[key]
    from .gpu import GPU_CHECKS

    for name in [n for n, c in GPU_CHECKS.items() if c.skill == skill]:
        del GPU_CHECKS[name]


def _squash(text: str) -> str:
    return " ".join(text.split())


_PLACEHOLDER_RE = re.compile(r"\{(\w+)(?::([^{}]+))?\}")
# What each kind of placeholder matches in the prose, and how its text becomes a value.
_KINDS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "text": (r".+?", str),
    "code": (r"[^`]+", str),  # between backticks in the template
    "quote": (r'[^"]+', str),  # between double quotes in the template
    "word": (r"[^\s`\"]+?", str),
    "int": (r"-?[0-9][0-9_]*", lambda text: int(text.replace("_", ""))),
    "version": (r"[0-9]+(?:\.[0-9]+)+", str),
    "bool": (r"True|False", lambda text: text == "True"),
    "exc": (r"[A-Z][A-Za-z]*(?:Error|Exception)", lambda text: exception_type(text)),
}


def exception_type(name: str) -> type[BaseException]:
    import builtins

    kind = getattr(builtins, name, None)
    if not (isinstance(kind, type) and issubclass(kind, BaseException)):
        raise ClaimFailed(f"SKILL.md names {name!r}, which is no built-in exception type")
    return kind


@dataclass(frozen=True)
class Template:
    """A sentence of the skill with holes: literal text (whitespace-insensitive) and
    `{name}`, `{name:kind}` or `{name:one|two}` placeholders the check reads values from."""

    source: str
    pattern: re.Pattern
    converters: dict[str, Callable[[str], Any]]

    @classmethod
    def compile(cls, template: str) -> "Template":
        parts, converters, position = [], {}, 0
        text = template.replace("{{", "\0").replace("}}", "\1")
        for match in _PLACEHOLDER_RE.finditer(text):
            parts.append(_literal(text[position : match.start()]))
            name, kind = match.group(1), match.group(2) or "text"
            if hasattr(dict, name):  # Reading is a dict: r.update would be the method
                raise ValueError(f"template {template!r}: placeholder name {name!r} shadows a dict method")
            if "|" in kind:
                regex, convert = "|".join(re.escape(_squash(c)) for c in kind.split("|")), str
            elif kind in _KINDS:
                regex, convert = _KINDS[kind]
            else:
                raise ValueError(f"template {template!r}: unknown placeholder kind {kind!r}")
            parts.append(f"(?P<{name}>{regex})")
            converters[name] = convert
            position = match.end()
        parts.append(_literal(text[position:]))
        return cls(template, re.compile("".join(parts)), converters)


def _literal(text: str) -> str:
    words = [re.escape(word.replace("\0", "{").replace("\1", "}")) for word in text.split()]
    lead = r"\s*" if text[:1].isspace() and words else ""
    tail = r"\s*" if text[-1:].isspace() else ""
    return lead + r"\s*".join(words) + tail


class Reading(dict):
    """The values a template read from the skill, by placeholder name (also as attributes)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


@dataclass
class Trace:
    """What a check read of its skill: spans of its own section's prose it matched (and the
    parts it captured as values), the code blocks it ran, and the other claims it used."""

    read: list[tuple[int, int]] = field(default_factory=list)
    captured: list[tuple[int, int]] = field(default_factory=list)
    code: set[int] = field(default_factory=set)
    siblings: set[str] = field(default_factory=set)


@dataclass
class Context:
    skill: str
    skill_root: Path
    section: ClaimSection
    sections: dict[str, ClaimSection]
    trace: Trace | None = None  # None for a sibling: only the claim's own section is traced
    parent: "Context | None" = None

    def __post_init__(self) -> None:
        if self.trace is None and self.parent is None:
            self.trace = Trace()

    def sibling(self, claim_id: str) -> "Context":
        """Another claim of the same skill, e.g. the enablement block other claims build on."""
        if claim_id not in self.sections:
            raise ClaimFailed(f"SKILL.md lost claim {claim_id}, which claim {self.section.claim_id} builds on")
        root = self.parent or self
        root.trace.siblings.add(claim_id)
        return Context(self.skill, self.skill_root, self.sections[claim_id], self.sections, None, root)

    # --- what the skill says -----------------------------------------------------------

    def read(self, template: str) -> Reading:
        """Find the one place in this claim's prose that `template` matches and return the
        values of its placeholders. The check then compares those values with the library,
        so a changed value in the skill fails the check."""
        readings = self.read_all(template, at_least=1)
        if len(readings) > 1:
            raise ClaimFailed(f"claim {self.section.claim_id}: {template!r} matches {len(readings)} places in SKILL.md, expected one")
        return readings[0]

    def read_all(self, template: str, at_least: int = 1) -> list[Reading]:
        """Every place `template` matches, e.g. one bullet of a list each."""
        compiled = Template.compile(template)
        prose = self.section.prose
        matches = list(compiled.pattern.finditer(prose))
        if len(matches) < at_least:
            raise ClaimFailed(f"SKILL.md no longer says {_squash(template)!r} under claim {self.section.claim_id}")
        readings = []
        for match in matches:
            self._record(match.span(), [match.span(name) for name in compiled.converters])
            readings.append(Reading({name: convert(match.group(name)) for name, convert in compiled.converters.items()}))
        return readings

    def says(self, *phrases: str) -> None:
        """Each phrase must appear in this claim's prose (whitespace-insensitive). Framing
        only: a fact token in a phrase is not captured, so coverage still reports it."""
        for phrase in phrases:
            self.read_all(phrase.replace("{", "{{").replace("}", "}}"))

    def _record(self, span: tuple[int, int], captured: list[tuple[int, int]]) -> None:
        if self.trace is not None:
            self.trace.read.append(span)
            self.trace.captured.extend(captured)

    def code(self, index: int = 0) -> str:
        blocks = self.section.code_blocks
        if len(blocks) <= index:
            raise ClaimFailed(f"claim {self.section.claim_id} has no code block #{index + 1} in SKILL.md")
        if self.trace is not None:
            self.trace.code.add(index)
        return blocks[index]

    def apply(self, cfg: Any, index: int = 0) -> Any:
        """Execute the section's code block with `cfg` bound, as a user pasting it would."""
        namespace: dict[str, Any] = {"cfg": cfg}
        exec(compile(self.code(index), f"{self.section.path}:claim:{self.section.claim_id}", "exec"), namespace)  # noqa: S102 - the skill's own snippet is the subject under test
        return namespace["cfg"]

    def load_script(self, relative: str) -> Any:
        """Import one of the skill's scripts as a module (what an agent would run)."""
        import importlib.util
        import sys

        path = self.skill_root / relative
        self.expect(path.is_file(), f"{relative} is missing from the skill")
        name = f"mbskills_script_{self.skill_root.name}_{path.stem}".replace("-", "_")
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses in the script look their module up here
        spec.loader.exec_module(module)
        return module

    def unread(self) -> list[str]:
        """What this claim's section states that its check did not read: prose outside any
        matched template, fact tokens outside any captured value, code blocks never run."""
        problems = []
        prose, trace = self.section.prose, self.trace
        covered = bytearray(len(prose))
        for start, end in trace.read:
            covered[start:end] = b"\1" * (end - start)
        leftover = "".join(ch if not covered[i] else " " for i, ch in enumerate(prose))
        stray = " ".join(part for part in leftover.split(" ") if part and not set(part) <= MARKDOWN_PUNCTUATION)
        if stray:
            problems.append(f"its check does not read {stray[:80]!r}")
        for token in fact_tokens(prose):
            if not any(start <= token.start and token.end <= end for start, end in trace.captured):
                problems.append(f"its check reads {token.text!r} as literal text, not as a value it compares")
        for index in range(len(self.section.code_blocks)):
            if index not in trace.code:
                problems.append(f"its check never runs code block #{index + 1}")
        return problems

    # --- what the library does ------------------------------------------------------------

    @staticmethod
    def expect_raises(action: Callable[[], Any], kind: type[BaseException], message: str) -> BaseException:
        try:
            action()
        except kind as error:
            if _squash(message) not in _squash(str(error)):
                raise ClaimFailed(f"{kind.__name__} raised with {str(error)!r}, not {message!r}") from None
            return error
        except Exception as error:  # a different failure is a failed claim too
            raise ClaimFailed(f"expected {kind.__name__} {message!r}, got {type(error).__name__}: {error}") from None
        raise ClaimFailed(f"expected {kind.__name__} {message!r}, but nothing was raised")

    @staticmethod
    def expect(condition: bool, message: str) -> None:
        if not condition:
            raise ClaimFailed(message)


def resolve_symbol(dotted: str) -> Any:
    """Import the longest module prefix of `dotted`, then walk attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(module)
        except ModuleNotFoundError as error:
            if error.name and (module == error.name or module.startswith(error.name + ".")):
                continue  # this prefix is not a module: try a shorter one
            raise ClaimFailed(f"{dotted}: importing {module} failed: {error}") from None
        except ImportError as error:
            raise ClaimFailed(f"{dotted}: importing {module} failed: {error}") from None
        for attribute in parts[cut:]:
            if not hasattr(obj, attribute):
                raise ClaimFailed(f"{dotted}: {'.'.join(parts[:cut])} has no attribute path {'.'.join(parts[cut:])!r}")
            obj = getattr(obj, attribute)
        return obj
    raise ClaimFailed(f"{dotted}: no importable module")


def source_of(obj: Any) -> str:
    return _squash(inspect.getsource(obj))


# --- reading values out of the skill's text (parsed, never executed) ----------------------


def literal(text: str) -> Any:
    """A Python literal as the skill writes it (`True`, `1234`, `"bf16_mixed"`)."""
    import ast

    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        raise ClaimFailed(f"SKILL.md writes {text!r} where a Python literal belongs") from None


def arithmetic(text: str) -> int:
    """An integer expression of literals and + - * (e.g. `128 * 1024 * 1024`)."""
    import ast
    import operator

    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            return ops[type(node.op)](value(node.left), value(node.right))
        raise ClaimFailed(f"SKILL.md writes {text!r} where an integer expression belongs")

    try:
        return value(ast.parse(text.strip(), mode="eval").body)
    except SyntaxError:
        raise ClaimFailed(f"SKILL.md writes {text!r} where an integer expression belongs") from None


def assignment(text: str) -> tuple[str, Any]:
    """`cfg.ddp.bucket_size = 1234`, `ckpt_format="fsdp_dtensor"` or
    `CUDA_DEVICE_MAX_CONNECTIONS=1` as the skill writes it: (target, literal value)."""
    import ast

    try:
        body = ast.parse(text.strip()).body
    except SyntaxError:
        body = []
    if len(body) != 1 or not isinstance(body[0], ast.Assign) or len(body[0].targets) != 1:
        raise ClaimFailed(f"SKILL.md writes {text!r} where an assignment belongs")
    try:
        value = ast.literal_eval(body[0].value)
    except ValueError:
        raise ClaimFailed(f"SKILL.md's {text!r} does not assign a literal value") from None
    return ast.unparse(body[0].targets[0]), value


def comparison(text: str) -> tuple[str, str, Any]:
    """`pipeline_model_parallel_size > 1` as the skill writes it: (name, operator, value)."""
    import ast

    operators = {ast.Gt: ">", ast.GtE: ">=", ast.Lt: "<", ast.LtE: "<="}
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        node = None
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in operators):
        raise ClaimFailed(f"SKILL.md writes {text!r} where one comparison belongs")
    return ast.unparse(node.left), operators[type(node.ops[0])], literal(ast.unparse(node.comparators[0]))


def raised(text: str) -> tuple[type[BaseException], str]:
    """`AssertionError: message` as the skill writes it: (exception type, message)."""
    name, sep, message = text.partition(": ")
    if not sep or not message.strip():
        raise ClaimFailed(f"SKILL.md's {text!r} does not read 'ErrorType: message'")
    return exception_type(name.strip()), message


def call(text: str) -> tuple[str, dict[str, Any]]:
    """`CommOverlapConfig(tp_comm_overlap=False, bucket_size=1234)` -> (name, keyword values)."""
    import ast

    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        node = None
    if not isinstance(node, ast.Call) or node.args or not isinstance(node.func, (ast.Name, ast.Attribute)):
        raise ClaimFailed(f"SKILL.md writes {text!r} where a call with keyword arguments belongs")
    try:
        return ast.unparse(node.func), {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    except ValueError:
        raise ClaimFailed(f"SKILL.md writes {text!r} with a keyword value that is not a literal") from None


def threshold(op: str, bound: int) -> tuple[int, int]:
    """The smallest value that satisfies `x op bound` (for > and >=) or the largest (for <
    and <=), and the nearest one that does not: the pair a check tests the boundary with."""
    table = {">": (bound + 1, bound), ">=": (bound, bound - 1), "<": (bound - 1, bound), "<=": (bound, bound + 1)}
    if op not in table:
        raise ClaimFailed(f"SKILL.md writes the comparison {op!r}")
    return table[op]


def attribute_path(root: Any, dotted: str) -> tuple[Any, str]:
    """`cfg.ddp.bucket_size` (or `ddp.bucket_size`) against a config -> (the ddp object, "bucket_size")."""
    parts = dotted.strip().split(".")
    if parts[0] == "cfg":
        parts = parts[1:]
    if not parts or not all(parts):
        raise ClaimFailed(f"{dotted!r} is not a cfg.* field")
    obj = root
    for part in parts[:-1]:
        if not hasattr(obj, part):
            raise ClaimFailed(f"a ConfigContainer has no {dotted}: no {part!r}")
        obj = getattr(obj, part)
    if not hasattr(obj, parts[-1]):
        raise ClaimFailed(f"a ConfigContainer has no {dotted}: {type(obj).__name__} has no field {parts[-1]!r}")
    return obj, parts[-1]


def get_field(cfg: Any, dotted: str) -> Any:
    obj, name = attribute_path(cfg, dotted)
    return getattr(obj, name)


def set_field(cfg: Any, dotted: str, value: Any) -> None:
    obj, name = attribute_path(cfg, dotted)
    setattr(obj, name, value)


def function_source(module: str, name: str) -> str:
    """The source of `module.name` read from its file, without importing the module (some
    modules need packages a CPU machine lacks, e.g. pretrain's nvidia_resiliency_ext)."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        raise ClaimFailed(f"{module} is not installed")
    text = Path(spec.origin).read_text("utf-8")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return _squash(ast.get_source_segment(text, node) or "")
    raise ClaimFailed(f"{module} defines no {name}")


def raised_messages(*packages: str) -> list[str]:
    """The messages of every raise, assert and warning in the installed `packages` (cached
    per process: mutate asks again for every mutant)."""
    return list(_raised_messages(packages))


@functools.cache
def _raised_messages(packages: tuple[str, ...]) -> tuple[str, ...]:
    """The messages of every `raise X("...")`, `assert ..., "..."` and logged warning in the
    installed `packages` (read from their files with ast, nothing imported): the text a user
    sees, adjacent literals joined, each f-string field shown as `{}`."""
    import ast
    import importlib.util

    def text_of(node: ast.AST) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):
            return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        return None

    messages: list[str] = []
    for package in packages:
        # located from the top-level package's folders: importing a subpackage would run
        # its __init__, which may need packages a CPU machine lacks
        top, *rest = package.split(".")
        spec = importlib.util.find_spec(top)
        places = [Path(p).joinpath(*rest) for p in (spec.submodule_search_locations or [])] if spec else []
        files = next((sorted(p.rglob("*.py")) for p in places if p.is_dir()), None) or [p.with_suffix(".py") for p in places if p.with_suffix(".py").is_file()]
        if not files:
            raise ClaimFailed(f"{package} is not installed")
        for file in files:
            try:
                tree = ast.parse(file.read_text("utf-8"))
            except (SyntaxError, UnicodeDecodeError):
                continue
            for node in ast.walk(tree):
                candidates: list[ast.AST] = []
                if isinstance(node, ast.Assert) and node.msg is not None:
                    candidates.append(node.msg)
                elif isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
                    candidates.append(node.exc.args[0])
                elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith(("warning", "warn")) and node.args:
                    candidates.extend(node.args[:2])
                for candidate in candidates:
                    text = text_of(candidate)
                    if text:
                        messages.append(_squash(text))
    return tuple(messages)


def quote_not_raised(quoted: str, *packages: str) -> str | None:
    """Why `quoted` is not a message the installed `packages` raise or log word for word (or,
    when it ends in '...', the start of one, cut at a word's end); None when it is."""
    messages = raised_messages(*packages)
    if quoted.endswith("..."):
        head = quoted.removesuffix("...").rstrip()
        return None if any(m.startswith(head + " ") for m in messages) else f'no message of {", ".join(packages)} starts with "{head}"'
    return None if quoted in messages else f'{", ".join(packages)} raise no message "{quoted}", word for word'
