"""Stage 4, report: graded records -> the numbers of report.json (per case, per skill,
overall, with intervals and paired uplift), BENCHMARK.md, report.html, junit.xml, and the
CI gates."""

from .aggregate import SCHEMA_VERSION, build
from .compare import comparison, comparison_markdown
from .files import benchmark_md, gates, junit_xml, write_all
from .html import render
from .publish import Gates, Published, publish

__all__ = [
    "SCHEMA_VERSION",
    "Gates",
    "Published",
    "benchmark_md",
    "build",
    "comparison",
    "comparison_markdown",
    "gates",
    "junit_xml",
    "publish",
    "render",
    "write_all",
]
