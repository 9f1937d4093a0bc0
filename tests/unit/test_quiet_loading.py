"""Model loading keeps transformers' load report (unused weights such as a decoder's lm_head) quiet
unless the ``expattn`` logger is enabled for INFO (``--verbose``), and restores its verbosity after."""

from __future__ import annotations

import logging

import pytest
from tiny_models import tiny_config
from transformers.utils import logging as hf_logging

from expattn.probes.models.loading import quiet_loading


@pytest.fixture
def expattn_logger():
    logger = logging.getLogger("expattn")
    level = logger.level
    yield logger
    logger.setLevel(level)


def test_load_report_is_quiet_by_default_and_verbosity_restored(expattn_logger):
    report = hf_logging.get_logger("transformers.modeling_utils")
    before = hf_logging.get_verbosity()
    assert report.isEnabledFor(logging.WARNING) == (before <= logging.WARNING)
    with quiet_loading():
        assert not report.isEnabledFor(logging.WARNING)
        assert report.isEnabledFor(logging.ERROR)
    assert hf_logging.get_verbosity() == before


def test_verbose_keeps_the_load_report(expattn_logger):
    expattn_logger.setLevel(logging.INFO)
    before = hf_logging.get_verbosity()
    with quiet_loading():
        assert hf_logging.get_verbosity() == before


def test_verbosity_is_restored_after_an_error(expattn_logger):
    before = hf_logging.get_verbosity()
    with pytest.raises(RuntimeError), quiet_loading():
        raise RuntimeError("load failed")
    assert hf_logging.get_verbosity() == before


def test_a_decoder_backbone_loads_without_its_report_unless_verbose(tmp_path, caplog, expattn_logger):
    """A tiny untied Llama saved with its LM head and loaded as a backbone: transformers reports the
    head as UNEXPECTED only under ``--verbose``."""
    from transformers import AutoModel, LlamaForCausalLM

    config = tiny_config("llama", vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         tie_word_embeddings=False)
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    caplog.clear()
    with quiet_loading():
        AutoModel.from_pretrained(tmp_path)
    assert not [r for r in caplog.records if "LOAD REPORT" in r.getMessage()]
    expattn_logger.setLevel(logging.INFO)
    with quiet_loading():
        AutoModel.from_pretrained(tmp_path)
    reports = [r.getMessage() for r in caplog.records if "LOAD REPORT" in r.getMessage()]
    assert len(reports) == 1 and "lm_head.weight" in reports[0] and "UNEXPECTED" in reports[0]
