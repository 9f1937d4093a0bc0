"""A probe run's progress by stage: loading the model, feeding it the sample, analysing each hypothesis.

``expattn.probes.runner.run_probe`` and ``expattn.probe`` take a ``progress`` callback of either kind:

- ``progress(done, total)``: tokens fed so far and in all, after each batch (the feeding stage only);
- ``progress(done, total, stage)`` with a parameter named ``stage``: every stage in order, ``stage`` a
  ``Stage`` and ``done``, ``total`` its counts. ``loading`` (0 of 1: reading the weights and the module
  tree), then ``feeding`` (tokens, from 0 to the total: the forward passes and the estimators' updates),
  then ``analyses`` (hypotheses finished, and the one being analysed in ``stage.hypotheses``, or all of them
  while they are measured two at a time; none when the run is done).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

STAGES = ("loading", "feeding", "analyses")


@dataclass(frozen=True)
class Stage:
    """Where a probe run is.

    Attributes:
        name: ``loading``, ``feeding`` or ``analyses``.
        done, total: tokens fed and to feed (feeding), hypotheses analysed and to analyse (analyses), 0 of 1
            (loading).
        hypotheses: the hypotheses updated while feeding; those being analysed (none once all are done).
    """

    name: str
    done: int
    total: int
    hypotheses: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.name not in STAGES:
            raise ValueError(f"stage name must be one of {', '.join(STAGES)}, got {self.name!r}")

    def __str__(self) -> str:
        """``loading the model``, ``feeding (E1,E5 updates) 512/2048 tokens``, ``analysing E5 (2 of 3)``,
        ``analysing E1,E5,E8 two at a time (0 of 3 done)``, ``analyses done (3 of 3)``."""
        if self.name == "loading":
            return "loading the model"
        if self.name == "feeding":
            return f"feeding ({','.join(self.hypotheses)} updates) {self.done}/{self.total} tokens"
        if not self.hypotheses:
            return f"analyses done ({self.done} of {self.total})"
        if len(self.hypotheses) > 1:
            return f"analysing {','.join(self.hypotheses)} two at a time ({self.done} of {self.total} done)"
        return f"analysing {self.hypotheses[0]} ({self.done + 1} of {self.total})"


def reporter(progress: Callable[..., None] | None) -> Callable[[Stage], None]:
    """``progress`` as a function of one ``Stage`` (see module docstring): a callback without a ``stage``
    parameter hears of the feeding only, as ``progress(tokens_done, tokens_total)``; None hears nothing."""
    if progress is None:
        return lambda stage: None
    try:
        params = inspect.signature(progress).parameters
    except (TypeError, ValueError):  # a builtin or C callable: the two-argument kind
        params = {}
    if "stage" in params:
        return lambda stage: progress(stage.done, stage.total, stage=stage)

    def tokens(stage: Stage) -> None:
        if stage.name == "feeding":
            progress(stage.done, stage.total)

    return tokens
