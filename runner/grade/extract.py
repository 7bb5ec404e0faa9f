"""Reading an answer as the configuration it proposes, never running it.

Two views of one answer, shared by every grader:

`normalise(answer)`: the text the regex checks match. Markdown emphasis and inline-code
backticks go, curly quotes become straight, contractions are spelled out, a shell command
split over lines with `\\` is joined, removed lines of a diff are dropped and the `+` of
added lines goes, YAML blocks and field/value tables are also written as `a.b = value`
lines, and names bound in the answer are resolved (`import ... as co`, `ddp = cfg.ddp`).

`extract(answer)`: the facts, each with its source line:
  python  fenced Python (and unlabelled blocks that parse as Python), read with `ast`:
          assignments to attribute chains rooted at the config (`cfg.ddp.x = 1`, a section
          bound to a name, a constructor bound to a name and later assigned), constructor
          keywords (`ConfigContainer(ddp=DistributedDataParallelConfig(x=1))`),
          `os.environ[...]` and `cfg.env_vars`; imports and calls are listed
  yaml    fenced YAML, nested keys flattened (safe_load; aliases refused: an answer is data)
  hydra   `a.b=value` overrides on a command line (shell blocks, inline code, prose)
  env     `export X=1`, `X=1 torchrun ...`
  table   Markdown rows `| a.b | value |`
  prose   `a.b = value` and "set a.b to value" in text; a statement that is denied or
          described as failing ("instead of X", "X = Y fails validation") is kept, marked
          `negated`, and proposes nothing

A value is data: a literal, constant arithmetic, a dotted name (`torch.bfloat16`), or an
allowed constructor with data arguments (`CommOverlapConfig(tp_comm_overlap=True)`);
anything else is `Opaque`. A Python line that imports a module outside the allowed roots,
calls something that reaches the system (`os.system`, `open`, `exec`, `subprocess.run`) or
touches a dunder attribute is a `refused` problem; a block that does not parse is a
`syntax` problem. Both name their line; the execute grader leaves a behaviour ungraded on
either, and nothing in an answer is ever executed.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

from ..core import bridge_names

_CONTRACTIONS = {
    "can't": "cannot", "won't": "will not", "shan't": "shall not", "isn't": "is not", "aren't": "are not",
    "wasn't": "was not", "weren't": "were not", "doesn't": "does not", "don't": "do not", "didn't": "did not",
    "hasn't": "has not", "haven't": "have not", "hadn't": "had not", "shouldn't": "should not",
    "wouldn't": "would not", "couldn't": "could not", "mustn't": "must not", "needn't": "need not",
}
_CONTRACTION_RE = re.compile(r"\b(" + "|".join(re.escape(k) for k in _CONTRACTIONS) + r")\b", re.IGNORECASE)
_EMPHASIS_RE = re.compile(r"(?<![\w*])(\*{1,3})(?=\S)(.+?)(?<=\S)\1(?![\w*])|(?<![\w])(_{1,2})(?=[^\s_])(.+?)(?<=[^\s_])\3(?!\w)")
_FENCE_RE = re.compile(r"^(\s*)(```|~~~)\s*([\w+-]*)")
_ALIAS_RE = re.compile(r"^\s*import\s+([\w.]+)\s+as\s+(\w+)\s*$|^\s*from\s+([\w.]+)\s+import\s+(\w+)\s+as\s+(\w+)\s*$", re.MULTILINE)
_QUOTED_KEY_RE = re.compile(r"[\"']((?:\w+\.)+\w+)[\"']\s*:")
_TABLE_ROW_RE = re.compile(r"^\s*\|\s*(?:cfg\.)?((?:\w+\.)*\w*_\w*|\w+\.\w+(?:\.\w+)*)\s*\|\s*([^|]{1,60}?)\s*\|")
_BINDING_RE = re.compile(r"^\s*(\w+)\s*=\s*((?:cfg|config|c)(?:\.\w+)+)\s*$", re.MULTILINE)


def _diff_lines(lines: list[str]) -> list[str]:
    out, fence = [], None
    for line in lines:
        match = _FENCE_RE.match(line)
        if match:
            fence = None if fence is not None else match.group(3).lower()
            out.append(line)
            continue
        if fence in ("diff", "patch") and not line.startswith(("+++", "---")):
            if line.startswith("-"):
                continue  # what the diff removes is not advice
            if line.startswith("+"):
                line = line[1:]
        out.append(line)
    return out


def _yaml_paths(data, prefix: str = "") -> list[str]:
    out = []
    if isinstance(data, dict):
        for key, value in data.items():
            out += _yaml_paths(value, f"{prefix}{key}.")
    elif prefix:
        shown = repr(data) if isinstance(data, str) else str(data)
        out.append(f"{prefix[:-1]} = {shown}")
    return out


def _flatten_config_blocks(lines: list[str]) -> list[str]:
    """After a YAML block and after a Markdown table, the same settings as `a.b = value`
    lines, so that an override written as nested YAML or as a field/value table reads like
    the assignment it stands for."""
    import yaml

    out, block, fence = [], [], None
    for line in lines:
        match = _FENCE_RE.match(line)
        if match and fence is None:
            fence = match.group(3).lower()
            block = []
            out.append(line)
            continue
        if match and fence is not None:
            out.append(line)
            if fence in ("yaml", "yml"):
                try:
                    # an answer is data: a block with aliases could expand without bound, so it is left as text
                    events = list(yaml.parse("\n".join(block), Loader=yaml.SafeLoader))
                    data = None if any(isinstance(e, yaml.AliasEvent) for e in events) else yaml.safe_load("\n".join(block))
                except yaml.YAMLError:
                    data = None
                out += _yaml_paths(data)
            fence = None
            continue
        if fence is not None:
            block.append(line)
        row = None if fence is not None else _TABLE_ROW_RE.match(line.replace("`", ""))
        out.append(line)
        if row and not set(row.group(2)) <= set("-: "):
            out.append(f"{row.group(1)} = {row.group(2).strip()}")
    return out


def normalise(answer: str) -> str:
    text = answer.replace("\u2018", "'").replace("\u2019", "'").replace("\u201c", '"').replace("\u201d", '"')
    text = "\n".join(_flatten_config_blocks(_diff_lines(text.split("\n"))))
    text = _QUOTED_KEY_RE.sub(r"\1:", text)
    text = re.sub(r"[ \t]*\\\n[ \t]*", " ", text)  # shell line continuations
    text = _CONTRACTION_RE.sub(lambda m: _CONTRACTIONS[m.group(1).lower()], text)
    for _ in range(2):  # nested emphasis: ***x*** or **_x_**
        text = _EMPHASIS_RE.sub(lambda m: m.group(2) if m.group(2) is not None else m.group(4), text)
    text = text.replace("`", "")
    for match in _ALIAS_RE.finditer(text):
        if match.group(1):
            module, alias = match.group(1), match.group(2)
            text = re.sub(rf"(?<![\w.]){re.escape(alias)}\.", module + ".", text)
        else:
            name, alias = match.group(4), match.group(5)
            text = re.sub(rf"(?<![\w.]){re.escape(alias)}(?=[.(])", name, text)
    for match in _BINDING_RE.finditer(text):
        name, target = match.group(1), match.group(2)
        if name not in ("cfg", "config"):
            text = re.sub(rf"(?<![\w.]){re.escape(name)}\.(?=\w)", target + ".", text)
    return text




# -- facts ---------------------------------------------------------------------------------

ENV = "env"  # facts about environment variables: env.NAME
# Constructors whose keyword arguments are data, and the section an instance stands for.
SECTIONS = bridge_names.SECTIONS
CONSTRUCTORS = {name: section for name, (_module, section) in bridge_names.CONSTRUCTORS.items()}
ALLOWED_IMPORT_ROOTS = frozenset({"megatron", "torch", "transformer_engine", "os", "dataclasses", "functools", "typing", "math", "logging", "copy", "omegaconf", "nvidia_resiliency_ext", "__future__"})
# Calls that reach the system, whatever their arguments.
REFUSED_CALLS = frozenset({"open", "exec", "eval", "compile", "__import__", "input", "breakpoint", "getattr", "setattr", "delattr", "globals", "locals", "vars", "importlib.import_module"})
_OS_ALLOWED = ("os.environ", "os.getenv")
_ROOT_NAMES = ("cfg", "config", "c", "config_container", "container")
_PYTHON_FENCES = ("python", "py", "python3", "ipython", "diff", "patch")
_SHELL_FENCES = ("bash", "sh", "shell", "console", "zsh", "text", "")
_YAML_FENCES = ("yaml", "yml")


@dataclass(frozen=True)
class Call:
    """An allowed constructor with data arguments."""

    name: str  # as written: CommOverlapConfig, or the dotted form
    kwargs: tuple[tuple[str, Any], ...] = ()

    @property
    def short(self) -> str:
        return self.name.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class Name:
    """A dotted name used as a value: torch.bfloat16, a userbuffers preset, an enum member."""

    dotted: str


@dataclass(frozen=True)
class Opaque:
    """A value that is not data (a variable, a call outside the allow-list)."""

    text: str


@dataclass(frozen=True)
class Removed:
    """A key the answer deletes: `cfg.env_vars.pop("X")`, `del os.environ["X"]`, `unset X`."""


REMOVED = Removed()


@dataclass(frozen=True)
class Fact:
    path: str  # "ddp.use_megatron_fsdp", "env.CUDA_DEVICE_MAX_CONNECTIONS", or a bare field "use_megatron_fsdp"
    value: Any
    line: int  # 1-based, in the answer as given
    source: str  # python | yaml | hydra | env | table | prose
    negated: bool = False  # stated as what not to do, or as what fails
    derived: bool = False  # a constructor's keyword: ddp = DDPConfig(x=1) also gives ddp.x = 1

    @property
    def bare(self) -> bool:
        return "." not in self.path and self.path not in SECTIONS


@dataclass(frozen=True)
class Problem:
    line: int
    kind: str  # syntax | refused
    text: str


@dataclass
class Extraction:
    facts: list[Fact] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    imports: list[tuple[str, int]] = field(default_factory=list)
    calls: list[tuple[str, int]] = field(default_factory=list)

    def mentions(self, path: str) -> list[Fact]:
        """Every proposed fact for `path`, code and prose alike, bare names included."""
        leaf = path.rsplit(".", 1)[-1]
        return [f for f in self.facts if not f.negated and (f.path == path or (f.bare and f.path == leaf))]

    def about(self, path: str) -> list[Fact]:
        """Proposed facts for `path` in answer order: its own, a constructor keyword that
        stands for it, or a bare field of the same name written in code (a bare name in
        prose is as often an explanation as a proposal). Where code (a block, a table, a
        command line) sets the path, prose mentions of it are left out: prose describes as
        often as it proposes."""
        leaf = path.rsplit(".", 1)[-1]
        found = [f for f in self.facts if not f.negated and (f.path == path or (f.bare and f.path == leaf and f.source != "prose"))]
        coded = [f for f in found if f.source != "prose"]
        return coded or found

    def proposed(self) -> list[Fact]:
        """What the answer proposes to apply, in answer order: not denied, not derived, and
        prose only for paths no code sets."""
        facts = [f for f in self.facts if not f.negated and not f.derived and not (f.bare and f.source == "prose")]
        coded = {f.path for f in facts if f.source != "prose"}
        return [f for f in facts if f.source != "prose" or f.path not in coded]


def _dotted(node: ast.AST) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id] + parts[::-1]
    return None


_ARITH = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b, ast.FloorDiv: lambda a, b: a // b, ast.Div: lambda a, b: a / b}


def _arith(node: ast.AST) -> int | float | None:
    """Constant arithmetic (`128 * 1024 ** 2`), bounded; None for anything else."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _arith(node.operand)
        return None if inner is None else -inner
    if isinstance(node, ast.BinOp):
        left, right = _arith(node.left), _arith(node.right)
        if left is None or right is None:
            return None
        if isinstance(node.op, (ast.Pow, ast.LShift)):
            if not isinstance(right, int) or not 0 <= right <= 64 or abs(left) > 2**20:
                return None
            return left**right if isinstance(node.op, ast.Pow) else int(left) << right
        op = _ARITH.get(type(node.op))
        if op is None or (isinstance(node.op, (ast.Div, ast.FloorDiv)) and right == 0):
            return None
        return op(left, right)
    return None


class _Python:
    """One Python block's facts: bindings are followed in statement order."""

    def __init__(self, out: Extraction, offset: int) -> None:
        self.out, self.offset = out, offset
        self.sections: dict[str, str] = {}  # name -> section it is bound to (ddp = cfg.ddp)
        self.values: dict[str, Any] = {}  # name -> data it is bound to
        self.roots: set[str] = set()  # names bound to a whole config

    def line(self, node: ast.AST) -> int:
        return self.offset + getattr(node, "lineno", 1)

    def value(self, node: ast.AST) -> Any:
        try:
            data = ast.literal_eval(node)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            pass
        else:
            if not isinstance(data, (set, frozenset, bytes, complex)):
                return list(data) if isinstance(data, tuple) else data
        number = _arith(node)
        if number is not None:
            return number
        if isinstance(node, ast.Name) and node.id in self.values:
            return self.values[node.id]
        if isinstance(node, ast.Attribute):
            chain = _dotted(node)
            if chain and chain[0] not in self.roots and chain[0] not in self.sections and not (len(chain) > 1 and chain[1] in SECTIONS):
                return Name(".".join(chain))
        if isinstance(node, ast.Call) and not node.args:
            chain = _dotted(node.func)
            if chain and chain[-1] in CONSTRUCTORS:
                return Call(".".join(chain), tuple((k.arg, self.value(k.value)) for k in node.keywords if k.arg))
        if isinstance(node, ast.Dict):
            # {**cfg.env_vars, "X": "1"}: the spread keeps what is there; the keys written are the data
            pairs = [(k, v) for k, v in zip(node.keys, node.values) if k is not None]
            keys = [self.value(k) for k, _ in pairs]
            if all(isinstance(k, str) for k in keys):
                return {k: self.value(v) for k, (_, v) in zip(keys, pairs)}
        return Opaque(ast.unparse(node)[:200])

    def path(self, target: ast.AST) -> str | None:
        """The config path an assignment target names, or None."""
        if isinstance(target, ast.Subscript):
            base = _dotted(target.value)
            key = target.slice
            if base and isinstance(key, ast.Constant) and isinstance(key.value, str):
                if base == ["os", "environ"] or base[-1] == "env_vars":
                    return f"{ENV}.{key.value}"
            return None
        chain = _dotted(target)
        if not chain or len(chain) < 2:
            return None
        head, rest = chain[0], chain[1:]
        if head in self.sections:
            return ".".join([self.sections[head]] + rest)
        bound = self.values.get(head)
        if isinstance(bound, Call) and CONSTRUCTORS.get(bound.short):
            return ".".join([CONSTRUCTORS[bound.short]] + rest)
        if rest[0] in SECTIONS and (len(rest) > 1 or head in self.roots or head in _ROOT_NAMES):
            return ".".join(rest)
        if head in SECTIONS:
            return ".".join(chain)
        return None

    def add(self, path: str, value: Any, node: ast.AST, *, derived: bool = False) -> None:
        line = self.line(node)
        if path == "env_vars" and isinstance(value, dict):
            for key, item in value.items():
                self.out.facts.append(Fact(f"{ENV}.{key}", item, line, "python", derived=derived))
            return
        self.out.facts.append(Fact(path, value, line, "python", derived=derived))
        if isinstance(value, Call):
            for key, item in value.kwargs:
                if value.short == "ConfigContainer" and key in SECTIONS:
                    self.add(key, item, node, derived=derived)
                else:
                    self.add(f"{path}.{key}", item, node, derived=True)

    def refuse(self, node: ast.AST, why: str) -> None:
        self.out.problems.append(Problem(self.line(node), "refused", why))

    def screen(self, tree: ast.AST) -> None:
        """Imports, calls and dunders anywhere in the block: listed, and refused where they
        reach outside data."""
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self.out.imports.append((alias.name, self.line(node)))
                    if alias.name.split(".")[0] not in ALLOWED_IMPORT_ROOTS:
                        self.refuse(node, f"imports {alias.name}")
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                self.out.imports.append((module, self.line(node)))
                if node.level or module.split(".")[0] not in ALLOWED_IMPORT_ROOTS:
                    self.refuse(node, f"imports from {module or '.'}")
            elif isinstance(node, ast.Call):
                chain = _dotted(node.func)
                name = ".".join(chain) if chain else ast.unparse(node.func)[:80]
                self.out.calls.append((name, self.line(node)))
                if name in REFUSED_CALLS or (chain and chain[0] in ("os", "subprocess", "shutil", "socket", "sys") and not name.startswith(_OS_ALLOWED)):
                    self.refuse(node, f"calls {name}")
            elif isinstance(node, ast.Attribute) and node.attr.startswith("__"):
                self.refuse(node, f"touches {node.attr}")

    def statements(self, body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if node.value is None:
                    continue
                for target in targets:
                    self.assign(target, node.value, node)
            elif isinstance(node, ast.Delete):
                for target in node.targets:
                    path = self.path(target)
                    if path is not None and path.startswith(f"{ENV}."):
                        self.out.facts.append(Fact(path, REMOVED, self.line(node), "python"))
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                chain = _dotted(node.value.func)
                if chain and chain[-1] == "pop" and len(chain) >= 2 and (chain[:-1] == ["os", "environ"] or chain[-2] == "env_vars") and node.value.args:
                    key = node.value.args[0]
                    if isinstance(key, ast.Constant) and isinstance(key.value, str):
                        self.out.facts.append(Fact(f"{ENV}.{key.value}", REMOVED, self.line(node), "python"))
                if chain and chain[-1] == "update" and len(chain) >= 2 and (chain[:-1] == ["os", "environ"] or chain[-2] == "env_vars"):
                    for arg in node.value.args:
                        data = self.value(arg)
                        if isinstance(data, dict):
                            for key, item in data.items():
                                self.out.facts.append(Fact(f"{ENV}.{key}", item, self.line(node), "python"))
            for attr in ("body", "orelse", "finalbody"):
                inner = getattr(node, attr, None)
                if isinstance(inner, list) and not isinstance(node, ast.ClassDef):
                    self.statements(inner)
            for handler in getattr(node, "handlers", []) or []:
                self.statements(handler.body)

    def assign(self, target: ast.AST, value: ast.AST, node: ast.AST) -> None:
        if isinstance(target, ast.Name):
            chain = _dotted(value)
            if chain and len(chain) == 2 and chain[1] in SECTIONS and (chain[0] in self.roots or chain[0] in ("cfg", "config", "c")):
                self.sections[target.id] = chain[1]
                return
            data = self.value(value)
            if isinstance(data, Call) and data.short == "ConfigContainer":
                self.roots.add(target.id)
                for key, item in data.kwargs:
                    if key in SECTIONS:
                        self.add(key, item, node)
                return
            if isinstance(value, ast.Call) and not isinstance(data, Call):
                self.roots.add(target.id)  # cfg = some_recipe(): the config the answer edits
                return
            self.values[target.id] = data
            return
        path = self.path(target)
        if path is not None:
            self.add(path, self.value(value), node)


def _python(out: Extraction, code: str, offset: int) -> bool:
    """Facts of one Python block starting after line `offset`; False when it does not parse."""
    import textwrap

    code = textwrap.dedent(code)  # "+ cfg.x = 1" in a diff keeps the space after the +
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
        line = offset + (getattr(error, "lineno", None) or 1)
        out.problems.append(Problem(line, "syntax", f"{type(error).__name__}: {getattr(error, 'msg', error)}"))
        return False
    reader = _Python(out, offset)
    reader.screen(tree)
    reader.statements(tree.body)
    return True


_SCALAR_RE = re.compile(r"""^(?:"[^"\n]*"|'[^'\n]*'|True|False|None|true|false|null|-?\d[\d_]*(?:\.\d+)?(?:e-?\d+)?(?:\s*(?:\*\*?|<<)\s*\d[\d_]*)*|[A-Za-z_]\w*(?:\.\w+)*(?:\([^()\n]{0,300}\))?)$""")


def _scalar(text: str) -> Any:
    """A value written in YAML, Hydra or prose: YAML's reading of a scalar, constant
    arithmetic, a constructor or a dotted name; Opaque for anything else."""
    import yaml

    text = text.strip().strip("`").strip()
    if not text or not (_SCALAR_RE.match(text) or re.fullmatch(r"[^\s()\[\]{}*&!|>%@`]+", text)):
        return Opaque(text[:200])
    if text in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[text]
    if "(" in text or re.search(r"\*|<<", text):
        try:
            node = ast.parse(text, mode="eval").body
        except SyntaxError:
            return Opaque(text[:200])
        return _Python(Extraction(), 0).value(node)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return Opaque(text[:200])
    if isinstance(data, str) and "." in data and re.fullmatch(r"[A-Za-z_][\w.]*", data) and data.split(".")[0] in ("torch", "megatron", "AttnBackend", "CudaGraphScope"):
        return Name(data)
    return data if isinstance(data, (bool, int, float, str)) or data is None else Opaque(text[:200])


def _config_path(raw: str) -> str | None:
    """A dotted or bare field path as an answer writes it, with `cfg.` dropped; None when it
    names nothing in the config."""
    parts = raw.strip().strip("`").lstrip("+~").split(".")
    if parts and parts[0] in ("cfg", "config", "config_container"):
        parts = parts[1:]
    if not parts or not all(re.fullmatch(r"[A-Za-z_]\w*", p) for p in parts):
        return None
    if len(parts) == 1:
        return parts[0] if "_" in parts[0] and parts[0].islower() else None
    if parts[0] == "env_vars" and len(parts) == 2:
        return f"{ENV}.{parts[1]}"
    return ".".join(parts) if parts[0] in SECTIONS else None


def _yaml_block(out: Extraction, code: str, offset: int) -> None:
    import yaml

    try:
        events = list(yaml.parse(code, Loader=yaml.SafeLoader))
        if any(isinstance(e, yaml.AliasEvent) for e in events):
            return  # an alias can expand without bound: left as text
        root = yaml.compose(code, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return

    def walk(node: Any, prefix: list[str]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, item in node.value:
                if isinstance(key, yaml.ScalarNode):
                    walk(item, prefix + [str(key.value)])
        elif isinstance(node, yaml.SequenceNode) and prefix and all(isinstance(item, yaml.ScalarNode) for item in node.value):
            path = _config_path(".".join(prefix[1:] if prefix[0] in ("cfg", "config") else prefix))
            if path:
                items = [_scalar(item.value) if item.style is None else item.value for item in node.value]
                out.facts.append(Fact(path, items, offset + node.start_mark.line + 1, "yaml"))
        elif isinstance(node, yaml.ScalarNode) and prefix:
            if prefix[0] in ("cfg", "config"):
                prefix = prefix[1:]
            path = _config_path(".".join(prefix)) if prefix else None
            if path:
                value = _scalar(node.value) if node.style is None else node.value  # a quoted scalar is a string
                out.facts.append(Fact(path, value, offset + node.start_mark.line + 1, "yaml"))

    walk(root, [])


_HYDRA_RE = re.compile(r"(?<![\w./-])[+~]?((?:cfg\.)?[a-z_]\w*(?:\.\w+)+)=(\"[^\"\n]*\"|'[^'\n]*'|[^\s`'\",;)]+)")
_ENV_RE = re.compile(r"(?:^|[\s;&(])(?:export\s+)?([A-Z][A-Z0-9_]{2,})=(\"[^\"\n]*\"|'[^'\n]*'|[^\s`;]*)")
_PROSE_RE = re.compile(
    r"(?<![\w.])((?:(?:cfg|config)\.)?[a-z_]\w*(?:\.\w+)*)\s*(?:=|==|:=)\s*"
    r"(\"[^\"\n]*\"|'[^'\n]*'|-?\d[\d_,]*(?:\.\d+)?(?:[eE]-?\d+)?(?:\s*(?:\*\*?|<<)\s*\d[\d_]*)*|[A-Za-z_]\w*(?:\.\w+)*(?:\([^()\n]{0,300}\))?)"
)
# "path: value" in prose only where the value ends the clause ("- `ddp.bucket_size`: 134217728").
_COLON_RE = re.compile(
    r"(?<![\w.])((?:(?:cfg|config)\.)?[a-z_]\w*(?:\.\w+)+)\s*:\s+"
    r"(\"[^\"\n]*\"|'[^'\n]*'|True|False|None|true|false|null|-?\d[\d_,]*(?:\.\d+)?|[a-z_]\w*)(?=\s*(?:$|[,;)]|\.(?:\s|$)))"
)
_SET_TO_RE = re.compile(
    r"\bset(?:s|ting)?\s+((?:(?:cfg|config)\.)?[a-z_]\w*(?:\.\w+)*)\s+(?:to|=)\s+(?!(?:e\.g|i\.e|the|a|an|some|something|whatever|your|its|any|one|either)\b)"
    r"(\"[^\"\n]*\"|'[^'\n]*'|-?\d[\d_,]*(?:\.\d+)?(?:[eE]-?\d+)?|[A-Za-z_]\w*(?:\.\w+)*(?:\([^()\n]{0,300}\))?)", re.IGNORECASE
)
# A statement of what not to do, or of what fails: the words before it in its clause...
_DENIED_BEFORE_RE = re.compile(r"\b(?:not|never|don't|do not|doesn't|does not|won't|isn't|avoid|instead of|rather than|without|no need|drop|wrong(?:ly)?|incorrect(?:ly)?|old|before|previously|was|were|if you (?:leave|keep)|leaving|keeping|you could|you might|could also|tempting|obvious knob)\b|\bnot\s+set\b", re.IGNORECASE)
# ... or the predicate after it.
_DENIED_AFTER_RE = re.compile(r"^\W{0,3}(?:(?:\w+\s+){0,4}?)(?:fails?|raises?|errors?|crash(?:es)?|is (?:refused|rejected|wrong|not|invalid|unsupported|ignored)|are (?:refused|rejected|wrong|not)|will (?:fail|raise|not)|would (?:be )?(?:fail|raise|rejected|refused|not)|does not|doesn't|isn't|aren't|won't|wouldn't|didn't|cannot|can't|trips?|breaks?|is what (?:fails|breaks)|is the obvious|looks? (?:right|tempting))\b", re.IGNORECASE)
_CLAUSE_RE = re.compile(r"[.;!?](?:\s|$)|\n|\bbut\b|\bhowever\b|\bwhereas\b|\bwhile\b", re.IGNORECASE)
# A value described rather than proposed: "X = Y (the default)", "X = Y allows ...", "X = Y: it asserts".
_DESCRIBED_AFTER_RE = re.compile(
    r"^\W{0,4}(?:(?:\w+\s+){0,3}?)(?:\(?the default\)?|is (?:the|its|their) default|by default|is already|already (?:is|the)|allows|asserts|is (?:pointless|useless|unnecessary|redundant|not needed|a no-op)|has no effect|does nothing|only (?:matters|applies)|(?:is|are) (?:only )?(?:checked|read) (?:only )?when)\b",
    re.IGNORECASE,
)
# Advice put in someone else's mouth ("You'll find posts that set X = Y"), or denied by the next sentence.
_ATTRIBUTED_RE = re.compile(r"\byou(?:'ll| will| may| might| can)? (?:see|find|read|hear)\b|\b(?:posts?|threads?|forums?|people|folks|some users|others|blog)\b|\bsuggest(?:ed|s|ion|ions)?\b|\boften (?:recommended|suggested|advised)\b|\bcommon (?:advice|suggestion|fix)\b", re.IGNORECASE)
_DENIAL_NEXT_RE = re.compile(r"^\s*(?:I'?d avoid|avoid|don'?t|do not|never|that is wrong|that'?s wrong|this is wrong|it is wrong|wrong|no[,.]|not so|that (?:does not|doesn'?t|won'?t|will not)|it (?:does not|doesn'?t|won'?t|will not)|this (?:does not|doesn'?t|won'?t|will not))\b", re.IGNORECASE)
_SENTENCE_RE = re.compile(r"[.!?](?:\s|$)")
# What Bridge or the log does, told rather than proposed: "Bridge then sets X = Y", "the warning
# says ... due to X = Y", "X becomes Y".
_DESCRIBED_BEFORE_RE = re.compile(
    r"\b(?:bridge|megatron(?:-core)?|it|validation|setup\(\)|runtime_config_update\(\)|finalize\(\)|the recipe|the preset|the default|the config)\s+(?:then\s+|also\s+|itself\s+|now\s+|still\s+)?"
    r"(?:sets?|derives?|turns?|forces?|overwrites?|writes?|copies|resolves?|leaves?|keeps?|has|gets?)\b"
    r"|\b(?:becomes|ends up|resolves to|you(?:'ll| will) see|prints?|logs?|reports?|shows?|warns?|warning|defaults? to|by default|due to|because of|caused by|triggered by|quoted|the log|the error|the message)\b",
    re.IGNORECASE,
)


def _denied(text: str, start: int, end: int) -> bool:
    """Whether `text[start:end]` is a value the answer denies, describes or attributes
    rather than proposes."""
    clause = 0
    for found in _CLAUSE_RE.finditer(text, 0, start):
        clause = found.end()
    before = " ".join(text[clause:start].split()[-6:])
    stop = _CLAUSE_RE.search(text, end)
    after = text[end : stop.start() if stop else len(text)]
    if _DENIED_BEFORE_RE.search(before) or _DESCRIBED_BEFORE_RE.search(before) or _DENIED_AFTER_RE.search(after) or _DESCRIBED_AFTER_RE.search(text[end : end + 80]):
        return True
    sentence = 0
    for found in _SENTENCE_RE.finditer(text, 0, start):
        sentence = found.end()
    close = _SENTENCE_RE.search(text, end)
    if _ATTRIBUTED_RE.search(text[sentence : close.start() if close else len(text)]):
        return True
    return bool(close and _DENIAL_NEXT_RE.match(text[close.end() :]))


def _line_of(text: str, position: int) -> int:
    return text.count("\n", 0, position) + 1


def _prose(out: Extraction, text: str, offset: int, source: str = "prose") -> None:
    """Assignments written in a line of text (inline code included, backticks dropped)."""
    seen: set[int] = set()
    for regex in (_SET_TO_RE, _HYDRA_RE, _PROSE_RE, _COLON_RE):
        for match in regex.finditer(text):
            if any(p in seen for p in range(match.start(1), match.end(1))):
                continue
            path = _config_path(match.group(1))
            if path is None:
                continue
            raw = match.group(2).rstrip(",")
            seen.update(range(match.start(1), match.end(1)))
            kind = "hydra" if regex is _HYDRA_RE and source == "shell" else source
            value = _scalar(raw)
            fact = Fact(path, value, offset + _line_of(text, match.start()), kind, negated=_denied(text, match.start(1), match.end()))
            out.facts.append(fact)
            if isinstance(value, Call):  # cfg.comm_overlap = CommOverlapConfig(x=1) in a sentence gives comm_overlap.x too
                out.facts += [Fact(f"{path}.{key}", item, fact.line, kind, fact.negated, derived=True) for key, item in value.kwargs]
            if regex is _PROSE_RE:
                seen.update(range(match.start(2), match.end(2)))  # keywords inside a constructor are not facts of their own
    for match in _ENV_RE.finditer(text):
        out.facts.append(Fact(f"{ENV}.{match.group(1)}", match.group(2).strip("'\""), offset + _line_of(text, match.start()), "env", negated=_denied(text, match.start(), match.end())))


_UNSET_RE = re.compile(r"(?:^|[\s;&])unset\s+((?:[A-Z][A-Z0-9_]{2,}\s*)+)")


def _shell(out: Extraction, code: str, offset: int) -> None:
    for number, line in enumerate(code.split("\n"), start=1):
        if line.lstrip().startswith("#"):
            continue
        for match in _UNSET_RE.finditer(line):
            for name in match.group(1).split():
                out.facts.append(Fact(f"{ENV}.{name}", REMOVED, offset + number, "env"))
        for match in _ENV_RE.finditer(line):
            out.facts.append(Fact(f"{ENV}.{match.group(1)}", match.group(2).strip("'\""), offset + number, "env"))
        for match in _HYDRA_RE.finditer(line):
            path = _config_path(match.group(1))
            if path:
                out.facts.append(Fact(path, _scalar(match.group(2)), offset + number, "hydra"))


_CELL_RE = re.compile(r"^\s*(\S+?)\s*(?:\(.*\))?\s*$")
# Which column of a table holds what the answer proposes: "Change to", "New value", "Set to";
# a column of the user's current values or of what Bridge does is never it.
_PROPOSED_COLUMN_RE = re.compile(r"^\W*(?:change(?:d)? to|set (?:it )?to|new(?: value)?|fix(?:ed)?|recommended|should be|use|value|proposed|target|to)\W*$", re.IGNORECASE)
_OTHER_COLUMN_RE = re.compile(r"\b(?:current|your|before|old|default|was|today|now|after validation|bridge|result|effect|why|condition|reason|note|meaning)\b", re.IGNORECASE)


def _cells(line: str) -> list[str] | None:
    stripped = line.strip()
    if not stripped.startswith("|") or stripped.count("|") < 3:
        return None
    return [cell.strip() for cell in stripped.strip("|").split("|")]


def _table(out: Extraction, rows: list[tuple[int, list[str]]]) -> None:
    """Facts of one Markdown table: the first column names a path, the proposed value sits
    in the second column of a two-column table whose header does not call it the current
    value, or in the column headed "Change to" (or the like) of a wider one."""
    header = rows[0][1]
    body = [(n, cells) for n, cells in rows[1:] if not all(set(c) <= set("-: ") for c in cells)]
    if len(rows) > 1 and all(set(c) <= set("-: ") for c in rows[1][1]):
        column = None
        named = [i for i, cell in enumerate(header) if i and _PROPOSED_COLUMN_RE.match(cell.replace("`", "").replace("*", ""))]
        if named:
            column = named[-1]
        elif len(header) == 2 and not _OTHER_COLUMN_RE.search(header[1]):
            column = 1
    else:
        body = [(n, cells) for n, cells in rows if not all(set(c) <= set("-: ") for c in cells)]
        column = 1 if all(len(cells) == 2 for _, cells in body) else None  # a table without a header row
    if column is None:
        return
    for number, cells in body:
        if len(cells) <= column:
            continue
        path = _config_path(cells[0].replace("`", "").strip())
        cell = cells[column].replace("`", "").replace("**", "").strip()
        if path and cell and not set(cell) <= set("-: "):
            token = _CELL_RE.match(cell)
            out.facts.append(Fact(path, _scalar(token.group(1)) if token else Opaque(cell[:200]), number, "table"))


def _answer_lines(answer: str) -> list[str]:
    """The answer's lines with quotes straightened and a diff's removed lines blanked (so
    that line numbers stay the answer's own)."""
    text = answer.replace("\u2018", "'").replace("\u2019", "'").replace("\u201c", '"').replace("\u201d", '"').replace("\r\n", "\n")
    out, fence = [], None
    for line in text.split("\n"):
        match = _FENCE_RE.match(line)
        if match:
            fence = None if fence is not None else match.group(3).lower()
        elif fence in ("diff", "patch") and not line.startswith(("+++", "---")):
            line = "" if line.startswith("-") else line[1:] if line.startswith("+") else line
        out.append(line)
    return out


def extract(answer: str) -> Extraction:
    """The facts an answer proposes (see the module docstring)."""
    out = Extraction()
    lines = _answer_lines(answer or "")
    index = 0
    while index < len(lines):
        match = _FENCE_RE.match(lines[index])
        if not match:
            rows = []
            while index < len(lines) and _cells(lines[index]) is not None:
                rows.append((index + 1, _cells(lines[index])))
                index += 1
            if rows:
                _table(out, rows)
                continue
            _prose(out, lines[index].replace("`", ""), index)
            index += 1
            continue
        language, start = match.group(3).lower(), index
        index += 1
        body = []
        while index < len(lines) and not _FENCE_RE.match(lines[index]):
            body.append(lines[index])
            index += 1
        index += 1  # the closing fence
        code = "\n".join(body)
        if language in _PYTHON_FENCES:
            _python(out, code, start + 1)
        elif language in _YAML_FENCES:
            _yaml_block(out, code, start + 1)
        elif language in _SHELL_FENCES:
            if language == "" and re.search(r"^\s*(?:\w+\.)+\w+\s*=(?!=)\s*\S", code, re.MULTILINE) and _parses(code):
                _python(out, code, start + 1)
            else:
                _shell(out, code, start + 1)
        elif language in ("toml", "ini", "json", "jsonc"):
            for number, line in enumerate(body, start=start + 2):
                _prose(out, line, number - 1, "prose")
    out.facts.sort(key=lambda f: f.line)
    return out


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True
