"""The execute worker: `python -m runner.execute.worker`, one JSON request per line on stdin,
one JSON reply per line on stdout. It imports Megatron-Bridge once, under an address-space
limit, then for each request builds the scenario's config (the claim checks' tiny GPT
config), applies the assignments, runs Bridge's `runtime_config_update()` at the scenario's
world size and environment, and reports what happened.

Assignments are data: a path of plain attribute names rooted at the config (no name
starting with `_`), and a value that is a literal, an allowed constructor with data
arguments, or a dotted name under torch or megatron that is a value (a dtype, an enum
member, a config instance), never a module, a function or a class. Nothing from an answer
is executed."""

from __future__ import annotations

import argparse
import dataclasses
import enum
import importlib
import inspect
import json
import sys
import time
from typing import Any

from ..core import MbskillsError, bridge_names

# Allowed constructors, by the name an answer writes, and the module each lives in.
CONSTRUCTORS = {name: module for name, (module, _section) in bridge_names.CONSTRUCTORS.items() if module}
NAME_ROOTS = ("torch", "megatron")


class Refused(MbskillsError):
    """An assignment that cannot be applied as data."""


def _segments(path: str) -> list[str]:
    parts = path.split(".")
    if not all(p.isidentifier() and not p.startswith("_") for p in parts):
        raise Refused(f"{path}: not a plain attribute path")
    return parts


def _name(dotted: str) -> Any:
    parts = _segments(dotted)
    if parts[0] not in NAME_ROOTS:
        raise Refused(f"{dotted}: a name outside torch and megatron")
    obj, index = None, len(parts)
    while index > 0:
        try:
            obj = importlib.import_module(".".join(parts[:index]))
            break
        except ImportError:
            index -= 1
    if obj is None:
        raise Refused(f"{dotted}: no such module")
    for part in parts[index:]:
        if not hasattr(obj, part):
            raise Refused(f"{dotted}: no such name")
        obj = getattr(obj, part)
    if inspect.ismodule(obj) or inspect.isroutine(obj) or inspect.isclass(obj):
        raise Refused(f"{dotted}: a module, function or class, not a value")
    import torch

    if not (isinstance(obj, (torch.dtype, enum.Enum, bool, int, float, str)) or dataclasses.is_dataclass(obj)):
        raise Refused(f"{dotted}: not a value this grader applies")
    return obj


def value_of(data: Any) -> Any:
    """An answer's value, from its JSON form, as a Python object."""
    if isinstance(data, dict) and set(data) == {"call", "kwargs"}:
        short = str(data["call"]).rsplit(".", 1)[-1]
        if short == "dict":
            return {str(k): value_of(v) for k, v in data["kwargs"].items()}
        module = CONSTRUCTORS.get(short)
        if module is None:
            raise Refused(f"{data['call']}: not an allowed constructor")
        cls = getattr(importlib.import_module(module), short)
        return cls(**{str(k): value_of(v) for k, v in data["kwargs"].items()})
    if isinstance(data, dict) and set(data) == {"name"}:
        return _name(str(data["name"]))
    if isinstance(data, dict) and set(data) == {"dict"}:
        return {str(k): value_of(v) for k, v in data["dict"].items()}
    if isinstance(data, list):
        return [value_of(v) for v in data]
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    raise Refused(f"{data!r}: not data")


def _sections(cfg: Any) -> list[str]:
    return [f.name for f in dataclasses.fields(cfg) if not f.name.startswith("_")]


def assign(cfg: Any, path: str, value: Any, notes: list[str]) -> None:
    """Set `path` on the config as an answer's script would (an AttributeError on a section
    that is None is the answer's own failure and propagates). A bare field is set on every
    section that has it; a field no section has is noted and left, as Python would leave
    an attribute nobody reads."""
    parts = _segments(path)
    if len(parts) == 1 and parts[0] in _sections(cfg):
        setattr(cfg, parts[0], value)
        return
    if len(parts) == 1:
        owners = [name for name in _sections(cfg) if getattr(cfg, name) is not None and hasattr(getattr(cfg, name), parts[0])]
        if not owners:
            notes.append(f"{path}: no config section has this field; not applied")
            return
        for owner in owners:
            setattr(getattr(cfg, owner), parts[0], value)
        return
    target = cfg
    for part in parts[:-1]:
        target = getattr(target, part)
    if target is not None and dataclasses.is_dataclass(target) and parts[-1] not in {f.name for f in dataclasses.fields(target)} and not hasattr(target, parts[-1]):
        notes.append(f"{path}: {type(target).__name__} has no field {parts[-1]}; not applied")
        return
    setattr(target, parts[-1], value)


def shown(value: Any) -> Any:
    """A resolved value as JSON: plain values as they are, anything else by its repr."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, enum.Enum):
        return value.name
    return repr(value)[:200]


def _read(cfg: Any, path: str) -> Any:
    target = cfg
    for part in _segments(path):
        if target is None or not hasattr(target, part):
            return {"missing": path}
        target = getattr(target, part)
    return shown(target)


def observe(request: dict) -> dict:
    from runner.claims import collect_warnings, quiet, resolve, tiny_config

    scenario = request["scenario"]
    notes: list[str] = []
    with quiet():
        cfg = tiny_config(tp=scenario.get("tp", 1), sp=scenario.get("sp", False), pp=scenario.get("pp", 1), vpp=scenario.get("vpp"))
        for path, value in scenario.get("set", []):
            assign(cfg, path, value_of(value), notes)  # a constructor spec builds its object
    environ = {str(k): str(v) for k, v in (scenario.get("env") or {}).items()}
    stage = "apply"
    try:
        for item in request.get("assignments", []):
            if item["path"].startswith("env.") and item["value"] == {"removed": True}:
                environ.pop(item["path"][4:], None)
                cfg.env_vars.pop(item["path"][4:], None) if isinstance(getattr(cfg, "env_vars", None), dict) else None
                continue
            try:
                path, value = item["path"], value_of(item["value"])
            except Refused as refused:
                return {"refused": {"line": item.get("line"), "why": str(refused)}}
            if path.startswith("env."):
                environ[path[4:]] = "" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
                continue
            try:
                assign(cfg, path, value, notes)
            except Refused as refused:
                return {"refused": {"line": item.get("line"), "why": str(refused)}}
        stage = "validate"
        with quiet(), collect_warnings() as warnings:
            resolve(cfg, world_size=int(scenario.get("world_size", 8)), environ=environ)
    except Exception as error:  # what Bridge (or the answer's own assignment) raised is the observation
        return {"raised": {"type": type(error).__name__, "message": str(error)[:2000], "stage": stage}, "warnings": [], "notes": notes}
    return {"raised": None, "fields": {path: _read(cfg, path) for path in request.get("fields", [])}, "warnings": [w[:500] for w in warnings], "notes": notes}


def _limit_memory(megabytes: int) -> None:
    try:
        import resource

        limit = megabytes * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):
        pass  # a platform without the limit runs without it


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--memory-mb", type=int, default=8192)
    args = parser.parse_args()
    _limit_memory(args.memory_mb)
    out = sys.stdout
    started = time.monotonic()
    try:
        from runner.claims import install_te_placeholders, quiet

        install_te_placeholders()
        with quiet(stderr=True):
            import megatron.bridge.training.config  # noqa: F401  the one import of the run
            import megatron.bridge.training.comm_overlap  # noqa: F401
    except Exception as error:
        out.write(json.dumps({"error": f"cannot import Megatron-Bridge: {type(error).__name__}: {error}"[:500]}) + "\n")
        out.flush()
        return 1
    out.write(json.dumps({"ready": True, "import_s": round(time.monotonic() - started, 2)}) + "\n")
    out.flush()
    for line in sys.stdin:
        try:
            request = json.loads(line)
        except ValueError:
            continue
        try:
            reply = observe(request)
        except MemoryError:
            reply = {"error": "the worker ran out of memory", "fatal": True}
        except Exception as error:  # a scenario the grader built wrongly: an error, not a verdict
            reply = {"error": f"{type(error).__name__}: {error}"[:500]}
        out.write(json.dumps(reply) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
