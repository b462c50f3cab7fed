"""Every word a visitor reads (issue 32): each training method named and explained in both languages, the ONNX check's
rows as sentences, Portuguese prose without the English "adapter", and the Space notice's download path made of the
page's own labels."""

from __future__ import annotations

import re
import typing

import pytest

from engine import config, i18n  # noqa: F401 - importing config registers the fields' English texts
from engine.config import TrainConfig
from engine.views import finetune_form, space_view
from engine.views.playground import ONNX_ROWS, onnx_rows

METHODS = typing.get_args(typing.get_type_hints(TrainConfig)["method"])
RESULT = {"prompts": 2, "max_new_tokens": 16, "mismatches": [], "max_abs_logits_diff": 1.3e-06, "greedy_equal": True, "torch_tokens": 32,
          "onnx_tokens": 32, "torch_tokens_per_s": 1234.5678, "onnx_tokens_per_s": 99.12, "torch_no_cache_tokens_per_s": 50.0}


@pytest.mark.parametrize("lang", ["en", "pt-BR"])
def test_every_method_has_a_name_and_a_line_of_help(lang):
    assert {"dpo", "orpo", "grpo"} <= set(METHODS)
    for m in METHODS:
        name = i18n.t(f"text.choice.TrainConfig.method.{m}", lang)
        assert name and not name.startswith("text.") and name != m, m
        assert len(finetune_form.method_help(m, lang)) > 40, m
    assert "chosen" in finetune_form.method_help("dpo", lang) and "builtin:dates" in finetune_form.method_help("grpo", lang)  # what they need
    assert finetune_form.method_help("nope", lang) == ""


def test_the_onnx_rows_are_sentences_with_people_numbers():
    en, pt = onnx_rows(RESULT, "en"), onnx_rows(RESULT, "pt-BR")
    assert len(en) == len(ONNX_ROWS) and not any("_" in check for check, _ in en + pt)
    assert en[0] == ["same greedy answers as PyTorch", "yes"] and pt[0][1] == "sim"
    assert dict(en)["PyTorch speed, tokens/s (with its KV cache)"] == "1,234.6" and dict(pt)["velocidade do PyTorch, tokens/s (com o cache KV)"] == "1.234,6"
    assert dict(en)["largest difference of the logits from PyTorch's (0 = identical)"] == "0.0000013"  # never 1.3e-06


def test_the_data_check_headers_are_plain_text_in_each_language():
    assert finetune_form.check_headers(finetune_form.CHECK_COLUMNS, "pt-BR") != finetune_form.check_headers(finetune_form.CHECK_COLUMNS, "en")
    assert all(isinstance(h, str) and "__" not in h for h in finetune_form.check_headers(finetune_form.CHECK_COLUMNS, "pt-BR"))


def test_portuguese_prose_says_adaptador():
    """'adapter' stays only where it is a name: the folder adapter/, adapter_config.json, an API value."""
    names = re.compile(r"\{[^}]*\}|\badapter(?=/|_config|,\s*merged)|what\s*=\s*adapter")  # placeholders, names
    prose = {k: v for k, v in i18n.file_strings("pt-BR").items() if re.search(r"\badapter\b", names.sub("", v))}
    assert not prose, prose
    assert i18n.t("finetune.export.merge", "pt-BR").startswith("Mesclar o adaptador")


def test_the_space_notice_names_the_download_the_way_the_page_labels_it(monkeypatch, tmp_path):
    monkeypatch.setenv("SPACE_ID", "someone/lab")
    monkeypatch.setenv("COMPACT_LAB_SHARED", "1")
    for lang in ("en", "pt-BR"):
        notice = space_view.space_notice_md(tmp_path / "runs", lang)
        labels = [i18n.t(k, lang) for k in space_view.DOWNLOAD_PATH]
        assert " → ".join(labels) in notice, notice
