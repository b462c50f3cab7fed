"""The estimator panel's results without gradio, in English and Portuguese, and the fine-tune values it hands over."""

from __future__ import annotations

import re

import pytest

from engine.config import MemoryQuery
from engine.errors import ConfigError, EngineError
from engine.estimator import memory
from engine.estimator.catalog import hardware_tiers, tier_by_name
from engine.estimator.local_card import LocalCard, nearest_tier
from engine.estimator.texts import Msg
from engine.views import estimate_view
from engine.views.estimate_view import estimate_or_warning, estimate_outputs, finetune_values


def test_estimate_outputs_for_a_builtin_model():
    q = MemoryQuery(model="builtin:compact-mini", task="full", batch=2, grad_accum=3)
    p = estimate_outputs(q, "t4-16gb")
    assert "GiB allocated by PyTorch" in p.totals and "GiB for the whole process" in p.totals and "effective batch 6" in p.totals
    assert any("weights" in str(r).lower() for r in p.breakdown.iloc[:, 0])
    assert list(p.tiers.columns) == ["card", "needs (GiB)", "usable (GiB)", "verdict"]
    # a CPU card adds how long a step takes there (engine/estimator/cpu_time.py)
    assert all(v.split(" ", 1)[-1].split(" · ")[0] in ("fits", "tight", "does not fit") for v in p.tiers["verdict"])
    assert p.limits.startswith("On **NVIDIA T4 · 16 GB (Colab free, Kaggle)**: the largest batch that fits is")
    assert "t4-16gb" not in p.limits and "t4-16gb" not in p.bars  # cards by their names, never their ids


def test_an_unknown_card_is_a_limits_message_and_an_unknown_model_raises():
    p = estimate_outputs(MemoryQuery(model="builtin:compact-mini"), "no-such-card")
    assert p.limits.startswith("⚠") and p.fit.empty
    with pytest.raises(EngineError):
        estimate_outputs(MemoryQuery(model="no-such/model-xyz"), "t4-16gb")


def test_finetune_values_without_and_with_a_suggestion():
    q = MemoryQuery(model="builtin:compact-mini", task="lora", batch=4, seq_len=128)
    values, rank = finetune_values(q, "t4-16gb", None)
    assert rank is None and values["micro_batch_size"] == 4 and values["max_seq_len"] == 128
    values, rank = finetune_values(q, "t4-16gb", 999)  # no such suggestion: the query as it is
    assert rank is None and values["micro_batch_size"] == 4
    values, _ = finetune_values(MemoryQuery(model="qwen2.5-1.5b"), "t4-16gb", None)
    assert values["base_model"] == "Qwen/Qwen2.5-1.5B"  # a catalog short name is handed over as its Hugging Face id


def test_estimate_or_warning_shows_an_engine_error_in_place_of_the_totals():
    q = MemoryQuery(model="builtin:compact-mini")
    assert estimate_or_warning(lambda: q, "t4-16gb")[0] == estimate_outputs(q, "t4-16gb").totals

    def bad():
        raise ConfigError("batch", 0, "at least 1")

    assert estimate_or_warning(bad, "t4-16gb") == ("**⚠ batch = 0 is not allowed: at least 1.**", "", None, None, "", None, "", None, "")
    assert estimate_or_warning(lambda: MemoryQuery(model="no-such/model-xyz"), "t4-16gb")[0].startswith("**⚠ ")


def test_totals_carry_the_band_and_the_breakdown_the_named_components():
    q = MemoryQuery(model="llama-2-7b", task="qlora", seq_len=512, grad_ckpt=True)
    p = estimate_outputs(q, "t4-16gb")
    assert "80% band" in p.totals and "published QLoRA measurements" in p.totals
    named = [r for r in p.breakdown.iloc[:, 0] if str(r).startswith("↳")]
    assert any("dequantized 4-bit weight" in r for r in named) and any("fp32 upcast" in r for r in named)


def test_the_panel_opens_on_a_real_instruct_model_with_checkpointing():
    assert estimate_view.DEFAULT_MODEL in [value for _label, value in estimate_view.model_choices()]
    assert "instruct" in estimate_view.DEFAULT_MODEL.lower() and not estimate_view.DEFAULT_MODEL.startswith("builtin:")
    assert estimate_view.FORM_DEFAULTS["grad_ckpt"] is True
    q = MemoryQuery(model=estimate_view.DEFAULT_MODEL, **estimate_view.FORM_DEFAULTS)
    est = memory.estimate(q)  # offline, from presets/catalog_arch.json
    assert 1e9 < est.params < 4e9 and q.task in ("qlora", "lora", "full")
    p = estimate_outputs(q, "t4-16gb")
    assert estimate_view.DEFAULT_MODEL in p.totals and "1.54 B parameters" in p.totals


@pytest.mark.parametrize("model", ["llama-3.1-8b", "qwen2.5-7b", "mistral-7b-v0.3"])
def test_a_7_8b_qlora_with_checkpointing_fits_a_t4_at_batch_1_and_512_tokens(model):
    q = MemoryQuery(model=model, task="qlora", batch=1, seq_len=512, grad_ckpt=True)
    assert memory.tier_verdict(q, tier_by_name("t4-16gb")) == "fits"
    assert "nothing to change" in estimate_outputs(q, "t4-16gb").limits


def test_make_it_fit_says_how_much_room_is_left_when_nothing_is_needed():
    q = MemoryQuery(model="builtin:compact-mini", task="lora")
    for lang, words in (("en", "It already fits on NVIDIA T4 · 16 GB"), ("pt-BR", "Já cabe na NVIDIA T4 · 16 GB")):
        p = estimate_outputs(q, "t4-16gb", lang)
        assert words in p.limits and p.fit.empty
        spare = re.search(r"\*\*([\d.,]+) GiB\*\*", p.limits.split("\n\n")[-1]).group(1)
        assert float(spare.replace(",", ".")) > 10
    p = estimate_outputs(MemoryQuery(model="llama-3.1-8b", task="lora", batch=8, seq_len=2048), "t4-16gb")
    assert "the changes below, cheapest first" in p.limits and len(p.fit) >= 1 and list(p.fit.columns)[0] == "#"


def test_verdicts_advice_and_terms_in_portuguese():
    q = MemoryQuery(model="llama-3.1-8b", task="lora", batch=8, seq_len=2048)
    p = estimate_outputs(q, "t4-16gb", "pt-BR")
    assert "alocados pelo PyTorch" in p.totals and "processo inteiro" in p.totals and "parâmetros" in p.totals
    mixed = estimate_outputs(MemoryQuery(model="llama-3.1-8b", task="qlora", grad_ckpt=True), "t4-16gb", "pt-BR")
    verdicts = {v.split(" ", 1)[-1].split(" · ")[0] for v in mixed.tiers["veredito"]}  # a CPU card adds its time per step
    assert verdicts <= {"cabe", "no limite", "não cabe"} and "não cabe" in verdicts and "cabe" in verdicts
    assert list(p.breakdown.columns) == ["parte", "GiB", "o que é"] and "pesos" in list(p.breakdown["parte"])
    assert "Fazer caber" in p.limits and list(p.fit.columns) == ["nº", "mudança", "novo total (GiB)", "quanto custa"]
    english = {str(s.description) for s in memory.make_it_fit(q, "t4-16gb")}
    assert english and not set(p.fit["mudança"]) & english  # every change is said in Portuguese
    assert all(re.fullmatch(r"[\d.]+,\d\d", x) for x in p.tiers["precisa (GiB)"])  # 3,72 not 3.72
    assert "não cabe" in p.bars and "Memória por placa" in p.bars and "sua placa" in p.bars and "Para onde vai a memória" in p.chart


def test_card_bars_name_every_card_with_need_usable_and_verdict():
    q = MemoryQuery(model="llama-3.1-8b", task="qlora", grad_ckpt=True)
    p = estimate_outputs(q, "gpu-12gb")
    for tier in hardware_tiers():
        name = estimate_view.tier_choices()[[t.name for t in hardware_tiers()].index(tier.name)][0]
        assert name.replace("&", "&amp;") in p.bars
    assert p.bars.count('role="img"') == len(hardware_tiers())
    for colour in ("#16a34a", "#d97706", "#dc2626"):  # this job fits some cards, is tight on one, does not fit others
        assert f"background:{colour}" in p.bars
    assert "your card" in p.bars and "does not fit" in p.bars and "tight" in p.bars


def test_the_breakdown_chart_has_a_legend_entry_for_every_segment_the_largest_included():
    q = MemoryQuery(model="llama-3.1-8b", task="qlora", grad_ckpt=True)
    est = memory.estimate(q)
    p = estimate_outputs(q, "t4-16gb")
    shown = [term for term in memory.TERMS if est.breakdown_gib[term] > 0]
    largest = max(shown, key=lambda term: est.breakdown_gib[term])
    legend = p.chart.split("margin-top:6px", 1)[1]
    for term in shown:
        assert f"</span>{term} <b>" in legend
    assert legend.index(f"</span>{largest} <b>") < min(legend.index(f"</span>{t} <b>") for t in shown if t != largest)  # largest first
    what = p.breakdown.iloc[:, 2]
    assert all(len(w) <= 110 for w in what)  # "what it is" stays short enough to read in its column


def test_tier_choices_are_names_with_ids_as_values():
    ids = [t.name for t in hardware_tiers()]
    for lang in ("en", "pt-BR"):
        choices = estimate_view.tier_choices(lang)
        assert [v for _, v in choices] == ids and all(label != value for label, value in choices)
    assert dict((v, k) for k, v in estimate_view.tier_choices())["t4-16gb"] == "NVIDIA T4 · 16 GB (Colab free, Kaggle)"
    assert dict((v, k) for k, v in estimate_view.tier_choices("pt-BR"))["cpu-16gb"].startswith("CPU · 16 GB de RAM")


@pytest.mark.parametrize("card, tier", [
    (LocalCard("gpu", "Tesla T4", 14.6, False), "t4-16gb"),
    (LocalCard("gpu", "NVIDIA A10G", 22.0, True), "a10g-24gb"),
    (LocalCard("gpu", "NVIDIA H100 80GB HBM3", 79.6, True), "gpu-80gb"),
    (LocalCard("gpu", "NVIDIA A100-SXM4-40GB", 39.4, True), "a100-40gb"),
    (LocalCard("gpu", "NVIDIA GeForce RTX 3060", 11.8, True), "gpu-12gb"),
    (LocalCard("gpu", "Quadro RTX 5000", 15.7, False), "t4-16gb"),  # 16 GB without bf16: a T4's class, not the bf16 16 GB tier
    (LocalCard("gpu", "NVIDIA GeForce MX150", 2.0, False), "gpu-4gb"),  # below every GPU tier: the smallest
    (LocalCard("cpu", "CPU", 31.3, None), "cpu-32gb"),
    (LocalCard("cpu", "CPU", 20.0, None), "cpu-16gb"),
    (LocalCard("cpu", "CPU", 64.0, None), "cpu-64gb"),
    (LocalCard("cpu", "CPU", 7.7, None), "t4-16gb"),  # too little RAM for a CPU tier: the free Colab card
])
def test_this_machines_card_maps_to_the_nearest_tier(card, tier):
    assert nearest_tier(card) == tier


def test_the_opening_tier_needs_no_torch_on_a_machine_without_gpu(monkeypatch):
    from engine.estimator import local_card

    monkeypatch.setattr(local_card.shutil, "which", lambda name: None)
    card = local_card.detect_card()
    assert card.kind == "cpu" and card.total_gib > 0
    assert estimate_view.opening_tier() in {t.name for t in hardware_tiers()}


def test_engine_texts_read_english_and_render_in_portuguese():
    note = Msg("estimator.note.paged", gib=1.5)
    assert note == "Paged optimizer state (1.5 GiB) lives in unified memory: not in PyTorch's count, moved to CPU RAM when the GPU is full."
    assert "1,5 GiB" in note.render("pt-BR") and "memória unificada" in note.render("pt-BR")
    with pytest.raises(EngineError) as info:
        memory.estimate(MemoryQuery(model="no-such-model-name"))
    assert "Unknown model" in str(info.value) and "Modelo desconhecido" in info.value.render("pt-BR")
    with pytest.raises(ConfigError) as info:
        memory.arch_from_manual(32, 4096, 30, 8, 14336, 128256, False)
    assert info.value.field == "heads" and "um divisor do tamanho oculto (4.096)" in info.value.render("pt-BR")


def test_the_run_memory_line_says_which_figure_is_the_model_and_which_the_process():
    line = estimate_view.memory_status_line(0.1, 0.73, "cpu")
    assert "**0.10 GiB** for the model's training" in line and "**0.73 GiB** for the whole process" in line
    assert "processo inteiro" in estimate_view.memory_status_line(0.1, 0.73, "cpu", "pt-BR") and "0,73" in estimate_view.memory_status_line(0.1, 0.73, "cpu", "pt-BR")
    assert "PyTorch's peak on the GPU" in estimate_view.memory_status_line(3.1, 3.3, "cuda")


def test_a_cpu_tier_is_said_in_cpu_words():
    """No "CUDA context" (nor nvidia-smi) on a CPU tier: the Python runtime of the tier, in both languages; a GPU tier
    keeps the CUDA terms."""
    q = MemoryQuery(model="builtin:compact-mini", task="full")
    for lang, runtime in (("en", "Python runtime"), ("pt-BR", "runtime do Python")):
        cpu = estimate_outputs(q, "cpu-16gb", lang)
        text = cpu.totals + cpu.chart + cpu.breakdown.to_string()
        assert "CUDA" not in text and "nvidia-smi" not in text and runtime in text
    cpu = estimate_outputs(q, "cpu-16gb")
    row = cpu.breakdown[cpu.breakdown.iloc[:, 0] == "Python runtime"]
    assert row.iloc[0, 1] == "0.80"  # the tier's runtime (presets/hardware.yaml)
    gpu = estimate_outputs(q, "t4-16gb")
    assert "CUDA context" in gpu.breakdown.to_string() and "nvidia-smi" in gpu.totals
