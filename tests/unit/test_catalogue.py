"""The claim catalogue is complete, points at files that exist, and agrees with every registry."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from expattn.catalogue import ENTRIES, GROUPS, Entry, entry, ids
from expattn.catalogue.registry import register_claim
from expattn.commands.checks import claims
from expattn.commands.claims import catalogue_markdown
from expattn.probes.runner import ESTIMATORS

ROOT = Path(__file__).resolve().parents[2]
# The IDs the specification lists, group by group (A1-A11, B1-B8, C1-C2, D1-D7, E1-E8), E9 (seed 000 §6's
# reading of W_q^T W_k), then the audit's findings (F1-F15) and the theory no other group covered (G1-G6). The
# E group grows with the probe: one ID per hypothesis about trained models, numbered in order.
PROBED = sum(e.probe for e in ENTRIES)
GROUP_SIZES = (("A", 11), ("B", 8), ("C", 2), ("D", 7), ("E", PROBED), ("F", 15), ("G", 6))
SPEC_IDS = [f"{g}{i}" for g, n in GROUP_SIZES for i in range(1, n + 1)]


def test_every_specified_id_has_one_entry_in_order():
    assert list(ids()) == SPEC_IDS
    assert [g.letter for g in GROUPS] == [g for g, _ in GROUP_SIZES]


@pytest.mark.parametrize("item", ENTRIES, ids=lambda e: e.id)
def test_entry_names_code_and_tests_that_exist(item: Entry):
    assert item.modules and item.tests and item.commands, item.id
    for path in (*item.modules, *item.tests):
        assert (ROOT / path).is_file(), f"{item.id}: {path} does not exist"
    assert all(p.startswith("src/expattn/") and p.endswith(".py") for p in item.modules)
    assert all(Path(p).name.startswith("test_") for p in item.tests)
    assert len(item.reproduce) == len(item.commands)


def test_as_printed_entries_are_the_known_misprints():
    printed = {e.id: e.as_printed_kind for e in ENTRIES if e.as_printed is not None}
    extraction = {f"D{i}": "extraction" for i in (1, 3, 4, 5, 6)}  # seed 004 lost every minus sign
    audit = {f"F{i}": "statement" for i in range(1, 16)} | {"F1": "convention"}
    assert printed == {"A4": "proof_step", "A6": "proof_step", "A8": "statement", "A9": "convention",
                       "B5": "statement", **extraction, **audit}


def test_every_check_names_a_catalogue_id_and_every_command_has_a_check():
    verify = {c.id for c in claims("verify")}
    presets = {(c.id, c.name) for c in claims("simulate")}
    assert verify == {e.id for e in ENTRIES if e.verify}
    assert presets == {(e.id, p) for e in ENTRIES for p in e.presets}
    assert [cls.claim for cls in ESTIMATORS] == [e.id for e in ENTRIES if e.probe]


def test_checks_default_to_the_catalogue_statement_and_seeds():
    a3 = next(c for c in claims("verify") if c.id == "A3")
    assert (a3.statement, a3.source, a3.kind) == (entry("A3").statement, entry("A3").seeds, "identity")
    b2 = next(c for c in claims("verify") if c.id == "B2")  # a narrower check keeps its own statement
    assert b2.kind == "inequality" and b2.statement != entry("B2").statement and b2.source == entry("B2").seeds


def test_lookup_is_case_insensitive_and_unknown_ids_are_named():
    assert entry(" e4 ") is entry("E4")
    with pytest.raises(ValueError, match=rf"unknown claim ID 'Z9'.*A1-A11.*E1-E{PROBED}.*G1-G6"):
        entry("Z9")
    with pytest.raises(TypeError, match="claim_id must be a string"):
        entry(4)


def test_register_claim_refuses_an_id_outside_the_catalogue():
    with pytest.raises(ValueError, match="unknown claim ID 'Z9'"):
        register_claim("Z9", kind="identity", statement="s", source="s", method="m")


def test_entry_rejects_bad_fields():
    good = entry("A4")
    for change, message in (
        ({"id": "a4"}, "id must be a group letter"),
        ({"kind": "theorem"}, "kind must be one of"),
        ({"statement": ""}, "statement must be a non-empty string"),
        ({"modules": ["src/expattn/core/tilted.py"]}, "modules must be a tuple"),
        ({"tests": ("unit/test_tilted.py",)}, "tests must be a tuple of paths under tests/"),
        ({"as_printed_kind": None}, "as_printed and as_printed_kind must be given together"),
        ({"as_printed_kind": "typo"}, "as_printed_kind must be one of"),
    ):
        with pytest.raises(ValueError, match=message):
            dataclasses.replace(good, **change)


def test_display_data_is_checked_and_only_probed_claims_have_it():
    from expattn.catalogue import Curve, HeadMap
    with pytest.raises(ValueError, match="reader must be one of"):
        Curve("y", "band", "spline", ("key",))
    with pytest.raises(ValueError, match="labels one per key"):
        Curve("y", "band", "interval", ("a", "b"), ("only one",))
    curve = Curve("y", "band", "interval", ("key",))
    with pytest.raises(ValueError, match="only a probed claim has a curve"):
        dataclasses.replace(entry("A4"), curve=curve)
    with pytest.raises(ValueError, match="only a probed claim has a curve"):
        dataclasses.replace(entry("A4"), head_map=HeadMap("key", "label", "text"))
    assert all(e.curve is not None for e in ENTRIES if e.probe)  # every hypothesis has its summary curve


def test_reproducing_commands():
    assert entry("A4").reproduce == ("expattn verify --only A4",)
    assert entry("B5").reproduce == ("expattn verify --only B5",
                                     "expattn simulate --only b5-theorem1 --out simulate-b5")
    assert entry("E4").reproduce == ("expattn probe --model minilm --only E4 --out probe-e4",)


def test_docs_claims_md_is_the_generated_catalogue():
    committed = (ROOT / "docs" / "CLAIMS.md").read_text(encoding="utf-8")
    assert committed == catalogue_markdown(), "regenerate: expattn claims --markdown > docs/CLAIMS.md"
    for item in ENTRIES:
        assert f'<a id="{item.id.lower()}"></a>' in committed and f"](#{item.id.lower()})" in committed
