"""One claim of the catalogue: what it states, where the seeds state it, and where it is checked.

An ``Entry`` is plain data. The checks (``register_claim``), the probe, the report and
``expattn claims`` read it; nothing else restates a claim's statement, seed location, title or
as-printed text. ``Group`` names a claim group (A..E) and its part of the seeds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from expattn.results.record import KINDS

# How a seed gets a claim wrong, when it does (``Entry.as_printed_kind``).
AS_PRINTED_KINDS = {
    "statement": "the claim itself is stated wrongly",
    "proof_step": "an intermediate line of the derivation is wrong; the claim as stated holds",
    "convention": "a convention (such as the order of arguments) is reversed",
    "extraction": "the seed's text lost a symbol when it was extracted",
}

PROBE_MODEL = "minilm"  # the model of the reproducing probe command; any model gives the same kind of record

_ID = re.compile(r"[A-Z][1-9][0-9]*")

# Each probed claim's headline number (``Entry.headline``): its unit and which way it points, short enough for a
# column of the report's matrix.
HEADLINE_READINGS = {
    "E1": "ratio; > 1 = widens",
    "E2": "ratio; < 1 = contracts",
    "E3": "|kurtosis|; 0 = Gaussian",
    "E4": "cosine; 1 = aligned",
    "E5": "max error; 0 = exact",
    "E6": "R²; 1 = linear",
    "E7": "decades lost; more = rank 1",
    "E8": "cosine; 0 = independent",
    "E9": "cosine; 1 = aligned",
}


# How the report reads a probed hypothesis's per-layer curve from its record's details (``Curve.reader``):
# ``interval``: each key an {"estimate", "low", "high"} entry (a second key dashed); ``median_over_heads`` /
# ``max_over_heads``: a (layer, head) grid; ``folds``: the mean of the keys starting with the prefix, band lowest to
# highest; ``decades``: -log10 of each key's first row over its first value (a second key dashed), no band.
CURVE_READERS = ("interval", "median_over_heads", "max_over_heads", "folds", "decades")


@dataclass(frozen=True)
class Curve:
    """How the report's summary figure draws a probed hypothesis per layer: plain data that
    ``report.figures_series`` reads. ``keys`` name the record's details (``folds``: a prefix); ``labels``, when
    given, one per key; ``band`` says what the shaded band is; ``reference`` draws a horizontal line."""

    ylabel: str
    band: str
    reader: str
    keys: tuple[str, ...]
    labels: tuple[str, ...] = ()
    reference: float | None = None
    log: bool = False

    def __post_init__(self) -> None:
        if self.reader not in CURVE_READERS:
            raise ValueError(f"reader must be one of {CURVE_READERS}, got {self.reader!r}")
        if not self.keys or (self.labels and len(self.labels) != len(self.keys)):
            raise ValueError(f"keys must be non-empty and labels one per key, got {self.keys!r}, {self.labels!r}")


@dataclass(frozen=True)
class HeadMap:
    """The report's per-head map (layer x head) of a probed hypothesis: its record's details ``key`` (a grid), the
    colour bar's ``label`` (matplotlib TeX), the same as plain ``text``, and a log10 colour scale."""

    key: str
    label: str
    text: str
    log: bool = False


@dataclass(frozen=True)
class Group:
    """A claim group: its letter (the first character of its IDs), title, seeds and notes."""

    letter: str
    title: str
    seeds: str
    notes: str = ""


@dataclass(frozen=True)
class Entry:
    """One claim ID.

    Attributes:
        id: ``A1`` .. ``E8``: the group letter, then a number.
        title: a few words, shown in tables and the report's summary.
        kind: one of ``results.record.KINDS``.
        statement: the claim in the project's words; a check's record carries it unless the
            check covers a narrower part of the claim.
        seeds: where the seeds state it (``seed 000 Prop. 1a; 002 eq. 7``); the records' ``source``.
        modules: repository paths of the source files that implement or check it.
        tests: repository paths of the test files that test them.
        verify: ``expattn verify`` has a check of this ID.
        presets: the ``expattn simulate`` presets that produce records of this ID.
        probe: ``expattn probe`` has an estimator of this ID.
        as_printed: ``None``, or what the seed prints wrongly (the corrected form is ``statement``).
        as_printed_kind: ``None``, or a key of ``AS_PRINTED_KINDS``: how the print is wrong.
        headline: for a probed hypothesis, its one headline number: ``(metric key of its record, what it is)``;
            the report's matrix, the probe's table and the spread over seeds show it.
        curve: for a probed hypothesis, the per-layer form of its headline in the report's summary figure.
        head_map: the report's per-head map of it, where it has one number per head.
    """

    id: str
    title: str
    kind: str
    statement: str
    seeds: str
    modules: tuple[str, ...]
    tests: tuple[str, ...]
    verify: bool = False
    presets: tuple[str, ...] = ()
    probe: bool = False
    as_printed: str | None = None
    as_printed_kind: str | None = None
    headline: tuple[str, str] | None = None
    curve: Curve | None = None
    head_map: HeadMap | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not _ID.fullmatch(self.id):
            raise ValueError(f"id must be a group letter and a number such as 'A3', got {self.id!r}")
        if self.kind not in KINDS:
            raise ValueError(f"{self.id}: kind must be one of {KINDS}, got {self.kind!r}")
        for name in ("title", "statement", "seeds"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"{self.id}: {name} must be a non-empty string, got {getattr(self, name)!r}")
        for name, prefix in (("modules", "src/expattn/"), ("tests", "tests/")):
            paths = getattr(self, name)
            if not isinstance(paths, tuple) or not all(isinstance(p, str) and p.startswith(prefix) for p in paths):
                raise ValueError(f"{self.id}: {name} must be a tuple of paths under {prefix}, got {paths!r}")
        if not isinstance(self.presets, tuple) or not all(isinstance(p, str) and p for p in self.presets):
            raise ValueError(f"{self.id}: presets must be a tuple of preset names, got {self.presets!r}")
        if (self.as_printed is None) != (self.as_printed_kind is None):
            raise ValueError(f"{self.id}: as_printed and as_printed_kind must be given together")
        if self.as_printed_kind is not None and self.as_printed_kind not in AS_PRINTED_KINDS:
            raise ValueError(
                f"{self.id}: as_printed_kind must be one of {tuple(AS_PRINTED_KINDS)}, got {self.as_printed_kind!r}"
            )
        if self.probe != (self.headline is not None):
            raise ValueError(f"{self.id}: a probed claim, and only one, names its headline, got {self.headline!r}")
        if self.headline is not None and not (
            isinstance(self.headline, tuple) and len(self.headline) == 2 and all(isinstance(h, str) and h
                                                                                 for h in self.headline)):
            raise ValueError(f"{self.id}: headline must be (metric key, description), got {self.headline!r}")
        if not self.probe and (self.curve is not None or self.head_map is not None):
            raise ValueError(f"{self.id}: only a probed claim has a curve or a head map")

    @property
    def group(self) -> str:
        """The group letter (``A`` for ``A10``)."""
        return self.id[0]

    @property
    def commands(self) -> tuple[str, ...]:
        """The commands that produce records of this ID: ``verify``, ``simulate``, ``probe``."""
        chosen = (("verify", self.verify), ("simulate", bool(self.presets)), ("probe", self.probe))
        return tuple(name for name, used in chosen if used)

    @property
    def reproduce(self) -> tuple[str, ...]:
        """Command lines that produce this ID's records, one per command."""
        lines = []
        if self.verify:
            lines.append(f"expattn verify --only {self.id}")
        if self.presets:
            lines.append(f"expattn simulate --only {','.join(self.presets)} --out simulate-{self.id.lower()}")
        if self.probe:
            lines.append(
                f"expattn probe --model {PROBE_MODEL} --only {self.id} --out probe-{self.id.lower()}"
            )
        return tuple(lines)
