"""The one results schema shared by verify, simulate, probe and report.

A results file is a JSON object ``{"schema": ..., "command": ..., "records": [...], "seeds": ...,
"versions": ..., ...}``. Each record names its claim ID, its kind, a verdict, the numbers behind
the verdict, whether the statement as printed in the seeds holds, the decision rule it applied
(``criterion``) and the controls that show the rule can fail (``controls``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

SCHEMA_VERSION = "expattn.results/1"
Verdict = Literal["pass", "fail", "supported", "not_supported", "inconclusive", "skipped", "error"]
VERDICTS = ("pass", "fail", "supported", "not_supported", "inconclusive", "skipped", "error")
KINDS = ("identity", "inequality", "dynamics", "empirical", "identity+dynamics", "identity+empirical")
CONTROL_KINDS = ("negative", "positive", "twin")
TRAINING = ("learned", "architectural", "undecided")  # what training did to a verdict (``results.twin``)
PASSING = ("pass", "supported")  # verdicts that accept a claim
FAILING = ("fail", "not_supported")  # verdicts that reject it


@dataclass
class Control:
    """A run of a record's own decision rule on an input whose answer is known.

    A ``negative`` control feeds the rule an input for which the claim is false (a wrong formula,
    shuffled keys, coherent heads); its verdict must reject the claim (``fail``/``not_supported``).
    A ``positive`` control feeds it an input for which the claim holds; its verdict must accept it.
    A ``twin`` control is the same measurement on a random-init twin of the model (``results.twin``): it demands
    no verdict, and what it gave classifies the record's ``training``.

    Attributes:
        name: what was fed in (``"as printed"``, ``"uniform averaging"``).
        kind: ``negative``, ``positive`` or ``twin``.
        verdict: the verdict the rule gave (one of ``VERDICTS``).
        metrics: the numbers the rule read.
    """

    name: str
    kind: str
    verdict: Verdict
    metrics: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in CONTROL_KINDS:
            raise ValueError(f"control kind must be one of {CONTROL_KINDS}, got {self.kind!r}")
        if self.verdict not in VERDICTS:
            raise ValueError(f"control verdict must be one of {VERDICTS}, got {self.verdict!r}")

    @property
    def behaved(self) -> bool:
        """True when the verdict is the one the control's kind demands (a ``twin`` control demands none)."""
        if self.kind == "twin":
            return True
        return self.verdict in (FAILING if self.kind == "negative" else PASSING)


@dataclass
class Record:
    """One checked claim.

    Attributes:
        id: claim ID of the catalogue (``expattn.catalogue``, docs/CLAIMS.md), e.g. ``"A3"``.
        kind: identity, inequality, dynamics or empirical (see ``KINDS``).
        verdict: ``pass``/``fail`` for exact claims, ``supported``/``not_supported``/
            ``inconclusive`` for hypotheses, ``skipped`` with a reason in ``notes`` (the claim does not apply),
            ``error`` when the code that measures it raised (``error_record``: the exception in ``notes``,
            its traceback in ``details["traceback"]``); an error says nothing about the claim.
        metrics: named numbers (max error, tolerance, ratios, intervals...).
        as_printed: ``pass``/``fail`` for the statement exactly as the seed prints it, or
            ``None`` where the seed prints it right.
        statement, method, source: human-readable context for tables and the report.
        notes: free text (why skipped, which tokens were excluded...).
        details: nested, JSON-serialisable numbers too long for ``metrics`` (per-layer tables).
        plots: paths of PNG files, relative to the results file.
        criterion: the decision rule, fixed before the data (measure, threshold, interval rule).
        controls: runs of the same rule on inputs with known answers (``Control``); see
            ``enforce_controls``.
        training: for a probed model measured beside its random-init twin, what training did to the verdict
            (``learned``, ``architectural`` or ``undecided``: ``results.twin.training``); None without a twin.
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
    criterion: str = ""
    controls: list[Control] = field(default_factory=list)
    training: Literal["learned", "architectural", "undecided"] | None = None

    def __post_init__(self) -> None:
        self.controls = [c if isinstance(c, Control) else Control(**c) for c in self.controls]
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.as_printed not in (None, "pass", "fail"):
            raise ValueError(f"as_printed must be 'pass', 'fail' or None, got {self.as_printed!r}")
        if self.training not in (None, *TRAINING):
            raise ValueError(f"training must be one of {TRAINING} or None, got {self.training!r}")

    @property
    def ok(self) -> bool:
        """True unless the verdict is a failure of an exact claim or an error of the code that measured it, or one
        of its controls (a negative control, a random-init twin...) errored: the record then stands, but the run
        did not measure all it was asked to."""
        return self.verdict not in ("fail", "error") and all(c.verdict != "error" for c in self.controls)


def error_record(claim: str, kind: str, stage: str, err: BaseException) -> Record:
    """The record of a claim whose ``stage`` (``check``, ``update``, ``analysis``...) raised ``err``: verdict
    ``error``, the exception in ``notes`` and its whole traceback in ``details["traceback"]``."""
    return Record(
        id=claim,
        kind=kind,
        verdict="error",
        notes=f"{stage} raised {type(err).__name__}: {err}",
        details={"traceback": "".join(traceback.format_exception(err))},
    )


def enforce_controls(record: Record) -> Record:
    """Demote ``record`` when a control misbehaves: a rule that accepts a false claim (a negative
    control passing) or rejects a true one (a positive control failing) cannot vouch for its verdict.

    An exact claim (``pass``/``fail``) becomes ``fail``, a hypothesis ``inconclusive``; the note
    names the controls. Skipped and error records and records without controls are returned unchanged.
    """
    bad = [c for c in record.controls if not c.behaved]
    if not bad or record.verdict in ("skipped", "error"):
        return record
    exact = record.verdict in ("pass", "fail")
    names = ", ".join(f"{c.kind} control '{c.name}' gave {c.verdict}" for c in bad)
    record.notes = (f"verdict demoted from {record.verdict}: {names}. " + record.notes).strip()
    record.verdict = "fail" if exact else "inconclusive"
    return record


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
