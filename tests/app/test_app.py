"""The app end to end through its API (gradio_client): estimator, fine-tune (start/poll/stop/resume), playground.

The app is launched in-process with prevent_thread_lock=True on a free local port; training runs as a real
subprocess on the built-in compact model, exactly as when a person clicks Start.
"""

from __future__ import annotations

import time

import pytest
from conftest import running_app, wait_for_no_live_run

gr = pytest.importorskip("gradio")
from gradio_client import Client, handle_file  # noqa: E402

from engine.config import GenerationSettings, MemoryQuery, TrainConfig  # noqa: E402
from engine.fields import field_specs  # noqa: E402
from engine.views.finetune_form import FT_DATA, FT_DEFAULTS, FT_LORA, FT_MAIN, FT_RUN, FT_TRAIN  # noqa: E402


@pytest.fixture(scope="module")
def client(runs_dir):
    with running_app(runs_dir) as demo:
        yield Client(demo.local_url, verbose=False)


def _defaults(cls, names, overrides=None):
    specs = {s.name: s.default for s in field_specs(cls)}
    values = {**specs, **FT_DEFAULTS, **(overrides or {})} if cls is TrainConfig else {**specs, **(overrides or {})}
    # the fine-tune form ends with the eval-file upload (None = none)
    return [values[n] for n in names] + ([None] if cls is TrainConfig else [])


FT_NAMES = FT_MAIN + FT_TRAIN + FT_LORA + FT_RUN + FT_DATA
EST_NAMES = [s.name for s in field_specs(MemoryQuery) if s.name != "model"]
GEN_NAMES = [s.name for s in field_specs(GenerationSettings)]


def test_estimator_api(client):
    out = client.predict("builtin:compact-mini", "t4-16gb", *_defaults(MemoryQuery, EST_NAMES), api_name="/estimate")
    totals, chart, breakdown, tiers, limits, _fit, runs_md, _runs_plot, bars = out
    assert "GiB" in totals and "parameters" in totals and "80% band" in totals and "measurements" in totals
    assert "run" in runs_md.lower()  # "your runs": none yet, or this machine's finished runs
    rows = breakdown["data"] if isinstance(breakdown, dict) else breakdown
    assert any("weights" in str(r[0]).lower() for r in rows)
    tier_rows = tiers["data"] if isinstance(tiers, dict) else tiers
    assert all(r[3].split(" ", 1)[-1].split(" · ")[0] in ("fits", "tight", "does not fit") for r in tier_rows)  # CPU cards: + time a step
    assert "Memory per card" in bars and "NVIDIA T4 · 16 GB" in bars and "Where the memory goes" in chart
    assert "nothing to change" in limits and "to spare" in limits


def test_estimator_speaks_the_visitors_language(client):
    pt = Client(client.src, verbose=False, headers={"Accept-Language": "pt-BR,pt;q=0.9"})
    out = pt.predict("Qwen/Qwen2.5-1.5B-Instruct", "t4-16gb", *_defaults(MemoryQuery, EST_NAMES, {"grad_ckpt": True}), api_name="/estimate")
    totals, _chart, _breakdown, tiers, limits, _fit, _runs_md, _runs_plot, bars = out
    assert "alocados pelo PyTorch" in totals and "Já cabe na NVIDIA T4" in limits and "Memória por placa" in bars
    tier_rows = tiers["data"] if isinstance(tiers, dict) else tiers
    assert {r[3].split(" ", 1)[-1].split(" · ")[0] for r in tier_rows} <= {"cabe", "no limite", "não cabe"}


def test_bad_estimator_input_is_a_message_not_a_crash(client):
    out = client.predict("no-such/model-xyz", "t4-16gb", *_defaults(MemoryQuery, EST_NAMES), api_name="/estimate")
    assert "⚠" in out[0]


@pytest.mark.parametrize(("method", "dataset", "extra"), [
    ("dpo", "", {}),  # preference pairs uploaded through the form (below)
    ("kto", "", {}),  # answers labelled good or bad (a thumbs-up/down export) uploaded through the form
    ("grpo", "builtin:instructions", {"num_generations": 4, "max_completion_length": 8, "reward": "format"}),
])
def test_objective_methods_start_from_the_page_and_finish(client, runs_dir, tmp_path, method, dataset, extra):
    """DPO, KTO and GRPO started exactly as the form's Start does (its API, its field order), as a real subprocess."""
    from conftest import write_jsonl

    from engine.training.jobs import JobManager

    wait_for_no_live_run(runs_dir)
    upload = None
    if method == "dpo":  # preference pairs as an upload, as a person would bring them
        upload = handle_file(str(write_jsonl(tmp_path / "pairs.jsonl", [{"prompt": f"Say yes {i}", "chosen": "yes", "rejected": "no"} for i in range(12)])))
        dataset = ""
    if method == "kto":
        rows = [{"prompt": f"Say yes {i}", "completion": "yes" if i % 2 else "no", "label": "👍" if i % 2 else "👎"} for i in range(12)]
        upload = handle_file(str(write_jsonl(tmp_path / "feedback.jsonl", rows)))
        dataset = ""
    name = f"ui-{method}"
    values = _defaults(TrainConfig, FT_NAMES, {"method": method, "tuning": "lora", "dataset": dataset, "max_steps": 2, "save_steps": 2,
                                               "logging_steps": 1, "micro_batch_size": 4, "max_seq_len": 64, "run_name": name,
                                               "eval_fraction": 0.0, "sample_generations": False, **extra})
    assert client.predict(upload, *values, api_name="/start_training")["value"] == name
    jobs, deadline = JobManager(runs_dir), time.time() + 300
    while time.time() < deadline and jobs.status(name).state in ("running", "queued"):
        time.sleep(1)
    s = jobs.status(name)
    assert s.state == "finished", (runs_dir / name / "train.log").read_text()[-3000:]
    assert (runs_dir / name / "adapter").is_dir()


def test_finetune_start_poll_finish_then_generate(client, runs_dir):
    wait_for_no_live_run(runs_dir)
    values = _defaults(TrainConfig, FT_NAMES, {"max_steps": 4, "save_steps": 2, "logging_steps": 1, "run_name": "ui-lora", "eval_fraction": 0.1})
    picked = client.predict(None, *values, api_name="/start_training")  # gr.State outputs are not returned
    assert picked["value"] == "ui-lora"
    with pytest.raises(Exception, match="still training"):
        client.predict(None, *_defaults(TrainConfig, FT_NAMES, {"run_name": "ui-second"}), api_name="/start_training")
    deadline = time.time() + 240
    from engine.training.jobs import JobManager

    jobs = JobManager(runs_dir)
    while time.time() < deadline and jobs.status("ui-lora").state == "running":
        time.sleep(1)
    s = jobs.status("ui-lora")
    assert s.state == "finished", (runs_dir / "ui-lora" / "train.log").read_text()[-3000:]
    gen = _defaults(GenerationSettings, GEN_NAMES, {"max_new_tokens": 6, "do_sample": False})
    chat, _prompt, stats, info = client.predict("run:ui-lora", "none", "chat", "", "Converta a data 05/09/2023 para o formato ISO (AAAA-MM-DD).", [], *gen,
                                          api_name="/generate")
    assert chat[-1]["role"] == "assistant" and "tokens/s" in stats and "loaded in" in info


def test_estimator_shows_your_runs_after_a_run(client, runs_dir):
    # the run of the test above finished with a recorded prediction and a measured peak
    out = client.predict("builtin:compact-mini", "t4-16gb", *_defaults(MemoryQuery, EST_NAMES), api_name="/estimate")
    runs_md, runs_plot = out[6], out[7]
    assert "**Your runs**" in runs_md and "finished" in runs_md
    data = runs_plot["value"]["data"] if isinstance(runs_plot, dict) and "value" in runs_plot else runs_plot["data"]
    assert any("ui-lora" in str(row) for row in data)


def test_upload_of_a_bad_file_is_a_clear_error(client, tmp_path, runs_dir):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"instruction": "a", "output": "b"}\n{not json\n')
    values = _defaults(TrainConfig, FT_NAMES, {"max_steps": 2, "run_name": "ui-bad"})
    # Start checks the data first (issue 32): refused with the line number, and no run folder
    with pytest.raises(Exception, match="line 2"):
        client.predict(handle_file(str(bad)), *values, api_name="/start_training")
    assert not (runs_dir / "ui-bad").exists()


@pytest.mark.parametrize("override,fragment", [({"learning_rate": -1}, "learning_rate"), ({"base_model": "/etc/passwd"}, "server paths"),
                                                ({"method": "ppo"}, "ppo.*qlora")])
def test_bad_form_values_get_messages(client, override, fragment):
    values = _defaults(TrainConfig, FT_NAMES, override)
    with pytest.raises(Exception, match=fragment):
        client.predict(None, *values, api_name="/show_command")


def test_show_command(client):
    text = client.predict(None, *_defaults(TrainConfig, FT_NAMES), api_name="/show_command")
    value = text["value"] if isinstance(text, dict) else text
    assert "python -m engine train --config" in value and "method: full" in value


def test_manual_architecture_and_server_paths_in_estimator(client):
    update = client.predict(32, 4096, 32, 8, 14336, 128256, False, api_name="/manual_architecture")
    ref = update["value"] if isinstance(update, dict) else update
    assert ref.startswith("manual:L=32,h=4096")
    out = client.predict(ref, "t4-16gb", *_defaults(MemoryQuery, EST_NAMES), api_name="/estimate")
    assert "parameters" in out[0] and "8.03 B parameters" in out[0]  # a Llama-3-8B-shaped model: ~8,030 M parameters
    out = client.predict("/etc/passwd.json", "t4-16gb", *_defaults(MemoryQuery, EST_NAMES), api_name="/estimate")
    assert "server paths are not accepted" in out[0]


def test_form_shows_live_memory_prediction(client):
    text = client.predict(None, *_defaults(TrainConfig, FT_NAMES), api_name="/predict_memory")
    assert "Effective batch **16**" in text and "Predicted peak" in text and "fits" in text
    text = client.predict(None, *_defaults(TrainConfig, FT_NAMES, {"base_model": "Qwen/Qwen2.5-7B", "method": "full", "max_seq_len": 4096,
                                                                   "micro_batch_size": 64}), api_name="/predict_memory")
    assert "does not fit" in text
    text = client.predict(None, *_defaults(TrainConfig, FT_NAMES, {"precision": "fp16"}), api_name="/predict_memory")
    assert "⚠" in text and "precision" in text  # fp16 training on a CPU is refused with the field named


def test_data_preview_marks_trained_tokens_and_reports_drops(client, tmp_path):
    summary, rows, _hist, dropped = client.predict(None, *_defaults(TrainConfig, FT_NAMES), api_name="/inspect_data")
    assert "rows kept" in summary and "responses only" in summary
    data = rows["data"] if isinstance(rows, dict) else rows
    assert "⟦" in data[0][1] and data[0][3] > 0
    bad = tmp_path / "mixed.jsonl"
    bad.write_text('{"instruction": "Diga oi", "output": "Oi!"}\n{"instruction": "vazio", "output": ""}\n')
    summary, _rows, _hist, dropped = client.predict(handle_file(str(bad)), *_defaults(TrainConfig, FT_NAMES), api_name="/inspect_data")
    drops = dropped["data"] if isinstance(dropped, dict) else dropped
    assert drops and drops[0][0] == 2


def test_data_check_with_column_mapping_long_rows_and_eval_upload(client, tmp_path):
    qa = tmp_path / "qa.csv"
    qa.write_text("pergunta,resposta\nDiga oi,Oi!\nLonga," + "palavra " * 200 + "\n", encoding="utf-8")
    with pytest.raises(Exception, match="instruction=pergunta, output=resposta"):  # nothing detected: the mapping is suggested
        client.predict(handle_file(str(qa)), *_defaults(TrainConfig, FT_NAMES), api_name="/inspect_data")
    values = _defaults(TrainConfig, FT_NAMES, {"columns": "instruction=pergunta, output=resposta", "too_long": "drop"})
    summary, rows, _hist, dropped = client.predict(handle_file(str(qa)), *values[:-1], handle_file(str(qa)), api_name="/inspect_data")
    assert "1/2 rows kept" in summary and "Eval: **2 instruction rows from" in summary
    drops = dropped["data"] if isinstance(dropped, dict) else dropped
    assert drops[0][0] == 2 and "longer than max_seq_len" in drops[0][1]
    with pytest.raises(Exception, match="not reachable"):  # offline: a message, not a traceback
        client.predict(None, *_defaults(TrainConfig, FT_NAMES, {"dataset": "hub:someone/some-data"}), api_name="/inspect_data")
    with pytest.raises(Exception, match="eval_dataset"):
        client.predict(None, *_defaults(TrainConfig, FT_NAMES, {"eval_dataset": "/etc/passwd"}), api_name="/show_command")


def test_batch_evaluate_and_presets(client, tmp_path):
    gen = _defaults(GenerationSettings, GEN_NAMES, {"max_new_tokens": 5, "do_sample": False})
    status, table, csv = client.predict("builtin:compact-mini", "none", "chat", "Olá\nHello\nBom dia", None, 2, *gen, api_name="/batch_generate")
    rows = table["data"] if isinstance(table, dict) else table
    assert "3/3" in status and [r[1] for r in rows] == ["Olá", "Hello", "Bom dia"]
    path = csv["value"] if isinstance(csv, dict) else csv
    assert str(path).endswith(".csv")
    with pytest.raises(Exception, match="prompt"):
        client.predict("builtin:compact-mini", "none", "chat", "", None, 2, *gen, api_name="/batch_generate")
    out = client.predict("builtin:compact-mini", "builtin:compact-mini", "none", False, "A memória da GPU é limitada. " * 40, "builtin:corpus",
                         32, 16, api_name="/perplexity")
    rows = out["data"] if isinstance(out, dict) else out
    assert rows[0][1] == "perplexity" and rows[0][2] > 1
    out = client.predict("builtin:compact-mini", "builtin:compact-mini", "none", True, "", "builtin:corpus", 0, 0, api_name="/task_accuracy")
    rows = out["data"] if isinstance(out, dict) else out
    assert len(rows) == 2 and 0 <= rows[0][2] <= 1


def test_onnx_export_matches_pytorch(client):
    pytest.importorskip("onnxruntime")
    rows, onnx_file = client.predict("builtin:compact-mini", "A memória da GPU\nThe KV cache", api_name="/export_onnx")
    data = dict((r[0], r[1]) for r in (rows["data"] if isinstance(rows, dict) else rows))
    # the rows in words (engine/views/playground.py onnx_rows): no variable names, numbers for people
    assert data["same greedy answers as PyTorch"] == "yes" and float(data["largest difference of the logits from PyTorch's (0 = identical)"]) < 1e-3
    assert not any("_" in check for check in data)
