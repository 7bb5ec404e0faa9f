"""What a skill's own claim checks are written with (skills/<skill>/checks/*.py, found by
runner/claims/plugins.py): the one import a check module needs.

    from runner.claims.kit import Context, claim, tiny_config, resolve

    @claim("my-skill-enable")
    def enable(ctx: Context) -> None:
        r = ctx.read("Set `{field:code}` to `{value:code}`.")
        cfg = resolve(ctx.apply(tiny_config()))
        ctx.expect(...)

Standard library only at import, like the check modules themselves must be at their top
level; docs/claims.md describes the context and the sentence templates.
"""

from __future__ import annotations

from typing import Any

from ..core import MbskillsError
from .environment import (
    TE_ONLY_MODULES,
    NeedsTransformerEngine,
    collect_warnings,
    preserved_environ,
    quiet,
    resolve,
    te_only_modules,
    tiny_config,
    versions,
)
from .gpu import (
    HIDDEN,
    NUM_LAYERS,
    CheckFailed,
    GpuCheck,
    check_losses,
    close,
    ddp_of,
    expect,
    finite,
    fingerprint,
    gpu_check,
    pretrain,
    qualname,
    recorder,
    smoke_base,
    te_available,
)
from .registry import (
    Check,
    ClaimFailed,
    Context,
    Reading,
    arithmetic,
    assignment,
    attribute_path,
    call,
    claim,
    comparison,
    exception_type,
    function_source,
    get_field,
    literal,
    quote_not_raised,
    raised_messages,
    raised,
    resolve_symbol,
    set_field,
    source_of,
    threshold,
)


def registered_gpu_checks() -> dict[str, GpuCheck]:
    """The GPU checks registered so far, by name (a claim's CPU side can check its own)."""
    from .gpu import GPU_CHECKS

    return dict(GPU_CHECKS)


def check_release(ctx: Context) -> Any:
    """The release claim a skill opens with: the range it states holds what is installed,
    and its front matter and card say the same (register it: `claim("x-release")(check_release)`)."""
    from .release import check_release as run

    return run(ctx)


__all__ = [name for name in dir() if not name.startswith("_") and name not in ("annotations", "Any")]
