"""The one results schema shared by verify, simulate, probe and report.

A results file is a JSON object ``{"schema": ..., "command": ..., "records": [...], "seeds": ...,
"versions": ..., ...}``. Each record names its claim ID, its kind, a verdict, the numbers behind
the verdict, and whether the statement as printed in the seeds holds.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

SCHEMA_VERSION = "expattn.results/1"
Verdict = Literal["pass", "fail", "supported", "not_supported", "inconclusive", "skipped"]
VERDICTS = ("pass", "fail", "supported", "not_supported", "inconclusive", "skipped")
KINDS = ("identity", "inequality", "dynamics", "empirical", "identity+dynamics", "identity+empirical")


@dataclass
class Record:
    """One checked claim.

    Attributes:
        id: claim ID from shared/CLAIMS.md (``"A3"``).
        kind: identity, inequality, dynamics or empirical (see ``KINDS``).
        verdict: ``pass``/``fail`` for exact claims, ``supported``/``not_supported``/
            ``inconclusive`` for hypotheses, ``skipped`` with a reason in ``notes``.
        metrics: named numbers (max error, tolerance, ratios, intervals...).
        as_printed: ``pass``/``fail`` for the statement exactly as the seed prints it, or
            ``None`` where the seed prints it right.
        statement, method, source: human-readable context for tables and the report.
        notes: free text (why skipped, which tokens were excluded...).
        details: nested, JSON-serialisable numbers too long for ``metrics`` (per-layer tables).
        plots: paths of PNG files, relative to the results file.
    """

    id: str
    kind: str
    verdict: Verdict
    metrics: dict[str, float] = field(default_factory=dict)
    as_printed: Literal["pass", "fail"] | None = None
    statement: str = ""
    method: str = ""
    source: str = ""
    notes: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    plots: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.as_printed not in (None, "pass", "fail"):
            raise ValueError(f"as_printed must be 'pass', 'fail' or None, got {self.as_printed!r}")

    @property
    def ok(self) -> bool:
        """True unless the verdict is a failure of an exact claim."""
        return self.verdict != "fail"


def _clean(value: Any) -> Any:
    """JSON-safe copy: non-finite floats become strings ('nan', 'inf') instead of invalid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        return _clean(value.item())
    return value


def versions() -> dict[str, str]:
    """Versions of Python and the libraries that shape the numbers."""
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for pkg in ("expattn", "torch", "numpy", "scipy", "transformers"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def results_document(records: list[Record], command: str, **extra: Any) -> dict[str, Any]:
    """The JSON object of a results file (records plus provenance)."""
    doc = {
        "schema": SCHEMA_VERSION,
        "command": command,
        "records": [dataclasses.asdict(r) for r in records],
        "versions": versions(),
    }
    doc.update(extra)
    return _clean(doc)


def load_records(path: str | os.PathLike) -> list[Record]:
    """Read the records back from a results file."""
    doc = json.loads(Path(path).read_text())
    names = {f.name for f in dataclasses.fields(Record)}
    return [Record(**{k: v for k, v in r.items() if k in names}) for r in doc["records"]]
