"""The top-level names resolve to the classes of their modules, and importing expattn stays light."""

import subprocess
import sys

import pytest

import expattn


@pytest.mark.parametrize("name", expattn.__all__)
def test_top_level_name_is_the_module_object(name):
    module = __import__(expattn._EXPORTS[name], fromlist=[name])
    assert getattr(expattn, name) is getattr(module, name)


def test_unknown_name_raises_attribute_error():
    with pytest.raises(AttributeError, match="no_such_name"):
        expattn.no_such_name  # noqa: B018


def test_import_expattn_does_not_import_torch():
    code = "import sys, expattn; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_readme_style_import_works():
    from expattn import Empirical, ExpFamAttention, Hopfield

    assert Empirical.__module__ == "expattn.core.empirical"
    assert ExpFamAttention.__module__ == "expattn.nn.attention"
    assert Hopfield.__module__ == "expattn.nn.hopfield"
