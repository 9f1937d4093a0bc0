"""Regenerate ``docs/FINDINGS.md`` from ``docs/results.json`` and ``docs/seeds/*.json``, and
``docs/headlines-by-size.png`` (each headline over seeds against the model's parameter count) from the latter.

    .venv/bin/expattn report --out report --overwrite      # the README's main command (full mode, seed 0)
    cp report/results.json docs/results.json              # (report/timings.json: the wall clock, not read here)
    for m in minilm smollm2 gemma3 qwen2.5-0.5b; do        # each headline over seeds 0, 1 and 2
      .venv/bin/expattn probe --model $m --seeds 0,1,2 --out seeds-$m --overwrite   # qwen2.5-0.5b: --twin
      cp seeds-$m/seeds.json docs/seeds/$m.json
    done
    .venv/bin/expattn probe --model qwen2.5-1.5b --twin --seeds 0,1,2 --out seeds-1.5b --resume  # setup.sh --qwen
    cp seeds-1.5b/seeds.json docs/seeds/qwen2.5-1.5b.json
    # both Qwens again with --dtype bfloat16 --twin, into docs/seeds/MODEL-bfloat16.json
    .venv/bin/python scripts/findings.py                   # writes docs/FINDINGS.md

The report probes each model beside its random-init twin, so the findings separate what training earned from what
the architecture gives: the matrix marks an architectural verdict, and the section "Learned or architectural"
(``expattn.report.twins``) lists every probed verdict by class, the trained model's and the twin's side by side.

``tests/unit/test_findings_doc.py`` fails while the two disagree, or while a claim of the catalogue has no record.
"""

from __future__ import annotations

import sys
from pathlib import Path

from expattn.probes.models.loading import parameter_count, resolve_model_dir
from expattn.report.figures_size import size_figure
from expattn.report.markdown import findings_markdown, read_spreads
from expattn.results.files import write_text_atomic
from expattn.results.plotting import save_figure
from expattn.results.timings import read_document

DOCS = Path(__file__).resolve().parents[1] / "docs"
SIZE_FIGURE = "headlines-by-size.png"


def main() -> int:
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else DOCS / "results.json"
    document = read_document(source)  # with a sibling timings.json, if there is one
    spreads = read_spreads(DOCS / "seeds")
    write_text_atomic(DOCS / "FINDINGS.md", findings_markdown(document, spreads))
    print(f"docs/FINDINGS.md written from {source}")
    parameters = {d["model"]: parameter_count(resolve_model_dir(d["model"])) for d in spreads}
    save_figure(size_figure(spreads, parameters), DOCS, SIZE_FIGURE)
    print(f"docs/{SIZE_FIGURE} written from docs/seeds ({', '.join(f'{m} {n:,}' for m, n in parameters.items())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
