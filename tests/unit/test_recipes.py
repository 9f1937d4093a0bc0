"""Training recipes: the one source of training defaults, read by the CLI, the report and the Python API."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import typer

from expattn.cli import app
from expattn.nn.lm import LMConfig
from expattn.train.loop import TrainConfig
from expattn.train.recipes import RECIPES, default, recipe


def test_single_is_the_dataclasses_defaults_and_sweeps_are_smaller(tmp_path):
    assert recipe("single", tmp_path) == TrainConfig(out=tmp_path, model=LMConfig())
    sweep = recipe("sweep", tmp_path)
    assert (sweep.model.layers, sweep.model.dim, sweep.iters, sweep.eval_every) == (2, 64, 400, 100)
    quick = recipe("sweep-quick", tmp_path)
    assert (quick.model.layers, quick.model.dim, quick.iters, quick.eval_every) == (2, 64, 100, 50)
    assert sweep.batch == quick.batch == TrainConfig(out=tmp_path).batch  # what a recipe does not set: the default


def test_a_given_field_overrides_the_recipe_and_none_leaves_it(tmp_path):
    cfg = recipe("sweep", tmp_path, layers=3, dim=None, lr=2e-3, carrier=None)
    assert (cfg.model.layers, cfg.model.dim, cfg.lr, cfg.model.carrier) == (3, 64, 2e-3, "empirical")
    with pytest.raises(ValueError, match=r"unknown training fields \['depth'\]"):
        recipe("single", tmp_path, depth=3)
    with pytest.raises(ValueError, match="recipe must be one of single, sweep, sweep-quick"):
        recipe("large", tmp_path)
    with pytest.raises(ValueError, match="heads must divide dim"):  # the configs still check what they get
        recipe("single", tmp_path, heads=3)


OPTION_FIELDS = {"carrier": "carrier", "norm": "norm", "layers": "layers", "dim": "dim", "heads": "heads",
                 "context": "context", "dropout": "dropout", "jacobian_reg": "jacobian_reg", "batch": "batch",
                 "iters": "iters", "lr": "lr", "seed": "seed", "corpus": "corpus", "split": "split",
                 "eval_every": "eval_every", "ckpt_every": "ckpt_every", "device": "device", "dtype": "dtype",
                 "grad_accum": "grad_accum"}


def test_the_train_helps_defaults_are_the_recipes():
    """The bracketed defaults in ``expattn train --help`` are text (the CLI does not import torch for its help):
    each must equal the recipes' value, ``[single]`` or ``[single; sweeps sweep]``."""
    params = {p.name: p for p in typer.main.get_command(app).commands["train"].params}
    for option, field in OPTION_FIELDS.items():
        param = params[option]
        assert param.default is None  # left out: left to the recipe
        shown = re.search(r"\[([^\]]+)\]\.?$", param.help).group(1)
        single, _, sweep = shown.partition("; sweeps ")
        assert single == _text(default("single", field)), option
        assert sweep == ("" if default("sweep", field) == default("single", field) else _text(default("sweep", field)))


def _text(value: object) -> str:
    return value if isinstance(value, str) else f"{value:g}"


def test_every_recipe_field_is_a_config_field(tmp_path):
    fields = {f.name for c in (LMConfig, TrainConfig) for f in dataclasses.fields(c)}
    for name, values in RECIPES.items():
        assert set(values) <= fields, name
        recipe(name, Path(tmp_path))  # valid configs
