"""report.html: one self-contained file (inline CSS and SVG, no scripts, no network)."""

from __future__ import annotations

from importlib import resources

from .aggregate import BASE
from .files import banner

TEMPLATE = "templates/report.html.j2"


def _colour(rate: float | None) -> str:
    if rate is None:
        return "#d9d9d9"
    # red (0) -> amber -> green (1)
    red = int(220 - 170 * rate)
    green = int(80 + 110 * rate)
    return f"rgb({red},{green},90)"


def _x(value: float, width: int = 360, pad: int = 20) -> float:
    """Uplift in [-1, 1] to an x position."""
    value = max(-1.0, min(1.0, value))
    return pad + (value + 1) / 2 * (width - 2 * pad)


def uplift_rows(report: dict) -> list[dict]:
    rows = []
    sources = [("overall", report["overall"])] + list(report["groups"].items())
    for name, summary in sources:
        for condition, entry in summary["uplift"].items():
            if entry["mean"] is None:
                continue
            # an undefined interval is drawn as the point alone, and says why in its label
            lo, hi = (entry["lo"], entry["hi"]) if entry["undefined"] is None else (entry["mean"], entry["mean"])
            rows.append({"name": name, "condition": condition, "entry": entry, "x": _x(entry["mean"]), "lo": _x(lo), "hi": _x(hi), "zero": _x(0.0)})
    return rows


def render(report: dict) -> str:
    from jinja2 import Environment, select_autoescape

    template = Environment(autoescape=select_autoescape(default=True), trim_blocks=True, lstrip_blocks=True).from_string(
        resources.files(__package__).joinpath(TEMPLATE).read_text()
    )
    conditions = report["run"]["conditions"]
    grid = []
    for row in report["behaviours"]:
        grid.append({**row, "cells": [(c, row["rates"].get(c), _colour(row["rates"].get(c))) for c in conditions]})
    return template.render(report=report, conditions=conditions, base=BASE, uplifts=uplift_rows(report), grid=grid, colour=_colour, banner=banner(report))
