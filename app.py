"""Compact LLM Lab: the single gr.Blocks page (memory estimator, fine-tune, playground).

Thin by design: each handler turns form values into a config dataclass (engine/config.py), calls the
engine, and maps the result onto components. Form widgets are generated from the dataclass fields (their
help text, bounds and choices live there, once). Long work never runs here: training is a subprocess
(engine/training/jobs.py) polled with gr.Timer; generation streams from a worker thread (engine/inference/generate.py).

Run: `python app.py [--share] [--port N] [--runs-dir DIR]`.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import os
import secrets
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from engine.config import GenerationSettings, MemoryQuery, QuantSettings, TrainConfig, field_specs, from_flat
from engine.errors import EngineError
from engine.estimator import memory
from engine.estimator.handoff import check_ui_estimator_model, check_ui_model_ref, check_ui_train_config, train_values_from_query
from engine.estimator.recipes import AUTO as AUTO_TIER
from engine.estimator.recipes import tier_choices
from engine.runs import config_yaml, log_tail, run_path
from engine.training.jobs import JobManager

BUILTIN_DATASETS = {
    "builtin:dates": "Date conversion to ISO (scored task: accuracy before/after is reported)",
    "builtin:instructions": "Instructions PT/EN about LLMs on small hardware",
    "builtin:corpus": "Text corpus PT/EN (for training from scratch)",
}


# --------------------------------------------------------------------------------------------------
# Widgets generated from the config dataclasses
# --------------------------------------------------------------------------------------------------


def make_inputs(cls: type, *, only: list[str] | None = None, skip: tuple[str, ...] = (), values: dict[str, Any] | None = None,
                suggest: dict[str, list[str]] | None = None) -> dict[str, gr.components.Component]:
    """One typed, bounded widget per dataclass field (dotted names for nested fields). `suggest`: text fields shown as a
    dropdown of suggestions that still accepts any typed value (e.g. model references)."""
    values, suggest = values or {}, suggest or {}
    comps: dict[str, gr.components.Component] = {}
    specs = {s.name: s for s in field_specs(cls)}
    for name in only or list(specs):
        if name in skip:
            continue
        spec = specs[name]
        value = values.get(name, spec.default)
        common = {"label": spec.label, "info": spec.help, "value": value, "elem_id": f"{cls.__name__}-{name}".replace(".", "-")}
        if name in suggest:
            comps[name] = gr.Dropdown(choices=suggest[name], allow_custom_value=True, **common)
        elif spec.type is bool:
            comps[name] = gr.Checkbox(**common)
        elif spec.choices:
            comps[name] = gr.Dropdown(choices=list(spec.choices), **common)
        elif spec.type in (int, float) and spec.min is not None and spec.max is not None and spec.step and (spec.max - spec.min) / spec.step <= 5000:
            comps[name] = gr.Slider(minimum=spec.min, maximum=spec.max, step=spec.step, **common)
        elif spec.type in (int, float):
            # No gradio-side bounds: the dataclass validates, with a message that names the field.
            bounds = f" Allowed: {spec.min:g} to {spec.max:g}." if spec.min is not None and spec.max is not None else ""
            comps[name] = gr.Number(precision=0 if spec.type is int else None, **{**common, "info": spec.help + bounds})
        else:
            comps[name] = gr.Textbox(**common)
    return comps


def getattr_dotted(obj: Any, name: str) -> Any:
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def ui_errors(fn):
    """Engine errors become a readable gr.Error in the browser, never a traceback or a dead server."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except EngineError as exc:
            raise gr.Error(str(exc)) from None

    return wrapper


def ui_errors_gen(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            yield from fn(*args, **kwargs)
        except EngineError as exc:
            raise gr.Error(str(exc)) from None

    return wrapper


# --------------------------------------------------------------------------------------------------
# Panel 1: memory estimator
# --------------------------------------------------------------------------------------------------


def build_estimator(upload_dir: Path) -> dict[str, Any]:
    gr.Markdown("Will it fit? Pick a model and a job; the breakdown and the verdict per card update as you change settings.")
    with gr.Row():
        with gr.Column(scale=2):
            model = gr.Dropdown(choices=memory.model_choices(), value="builtin:compact-mini", allow_custom_value=True, label="Model",
                                info="A built-in or catalog model, or type any Hugging Face id (its config.json is fetched when online).")
            with gr.Accordion("…or upload a config.json / describe the architecture", open=False):
                config_file = gr.File(label="config.json", file_types=[".json"])
                with gr.Row():
                    m_layers = gr.Number(value=32, precision=0, label="Layers")
                    m_hidden = gr.Number(value=4096, precision=0, label="Hidden size")
                    m_heads = gr.Number(value=32, precision=0, label="Attention heads")
                    m_kv = gr.Number(value=8, precision=0, label="KV heads")
                with gr.Row():
                    m_inter = gr.Number(value=14336, precision=0, label="MLP intermediate")
                    m_vocab = gr.Number(value=128256, precision=0, label="Vocabulary")
                    m_tied = gr.Checkbox(value=False, label="Tied embeddings")
                manual_btn = gr.Button("Use this architecture (Llama-style)", size="sm")
            form = make_inputs(MemoryQuery, skip=("model",))
            tier_names = [t.name for t in memory.hardware_tiers()]
            tier = gr.Dropdown(choices=tier_names, value="t4-16gb" if "t4-16gb" in tier_names else tier_names[0], label="Your card",
                               info="Used for the largest batch / sequence that fit and for 'make it fit'.")
        with gr.Column(scale=3):
            totals = gr.Markdown()
            chart = gr.BarPlot(x="job", y="GiB", color="term", title="Memory breakdown", height=260, show_label=False)
            breakdown = gr.Dataframe(headers=["term", "GiB", "what it is"], interactive=False, label="Breakdown", wrap=True)
            tiers = gr.Dataframe(headers=["card", "usable GiB", "verdict"], interactive=False, label="Verdict per card")
            limits = gr.Markdown()
            fit = gr.Dataframe(headers=["#", "change", "new total GiB", "cost"], interactive=False, label="Make it fit (cheapest first)")
            with gr.Row():
                pick = gr.Number(value=1, precision=0, minimum=1, label="Suggestion #", scale=1)
                copy_btn = gr.Button("Use these settings in Fine-tune", scale=2)
    inputs = [model, tier, *form.values()]
    names = list(form)

    def query_of(model_v: str, *vals: Any) -> MemoryQuery:
        return from_flat(MemoryQuery, {"model": model_v, **dict(zip(names, vals, strict=True))})

    def on_estimate(model_v: str, tier_v: str, *vals: Any):
        try:
            q = query_of(check_ui_estimator_model(model_v, upload_dir), *vals)
            est = memory.estimate(q)
        except EngineError as exc:
            return f"**⚠ {exc}**", None, None, None, "", None
        rows = memory.breakdown_rows(est)
        chart_df = pd.DataFrame([{"job": q.task, "term": r[0], "GiB": r[1]} for r in rows if r[1] > 0])
        verdicts = {"fits": "fits", "tight": "tight", "no": "does not fit"}
        tier_rows = [[t.label, t.usable_gib, verdicts.get(est.tiers.get(t.name, ""), "?")] for t in memory.hardware_tiers()]
        md = (f"### {est.allocated_gib:.2f} GiB allocated by PyTorch · {est.total_gib:.2f} GiB in nvidia-smi\n"
              f"{est.params / 1e6:,.1f} M parameters, {est.trainable_params / 1e6:,.2f} M trainable · effective batch {q.batch * q.grad_accum}")
        if est.notes:
            md += "\n\n" + "\n".join(f"- {n}" for n in est.notes)
        try:
            mb, ms = memory.max_batch(q, tier_v), memory.max_seq_len(q, tier_v)
            lim = f"On **{tier_v}**: largest batch that fits **{mb}** (at seq {q.seq_len}), longest sequence **{ms}** (at batch {q.batch})."
            sugg = memory.make_it_fit(q, tier_v)
            fit_rows = [[s.rank, s.description, round(s.new_total_gib, 2), s.cost] for s in sugg]
        except EngineError as exc:
            lim, fit_rows = f"⚠ {exc}", []
        return md, chart_df, rows, tier_rows, lim, fit_rows

    outputs = [totals, chart, breakdown, tiers, limits, fit]
    for comp in inputs:
        comp.change(on_estimate, inputs, outputs, queue=False, show_progress="hidden")

    @ui_errors
    def on_manual(layers, hidden, heads, kv, inter, vocab, tied):
        return gr.update(value=memory.arch_from_manual(layers, hidden, heads, kv, inter, vocab, tied).ref)

    def on_config_upload(path):
        return gr.update(value=str(_keep_upload(path, upload_dir))) if path else gr.skip()

    manual_btn.click(on_manual, [m_layers, m_hidden, m_heads, m_kv, m_inter, m_vocab, m_tied], [model], api_name="manual_architecture")
    config_file.upload(on_config_upload, [config_file], [model])
    return {"inputs": inputs, "names": names, "query_of": query_of, "copy_btn": copy_btn, "pick": pick, "outputs": outputs, "on_estimate": on_estimate}


# --------------------------------------------------------------------------------------------------
# Panel 2: fine-tune
# --------------------------------------------------------------------------------------------------

FT_MAIN = ["method", "base_model", "teacher_model", "dataset"]
FT_TRAIN = ["max_steps", "epochs", "learning_rate", "lr_scheduler", "warmup_ratio", "micro_batch_size", "grad_accum", "max_seq_len",
            "precision", "grad_checkpointing", "optimizer", "weight_decay", "max_grad_norm", "seed", "eval_fraction", "train_on_prompt",
            "stop_at_loss", "early_stopping_patience", "packing", "distill_temperature", "distill_alpha"]
FT_LORA = ["lora.r", "lora.alpha", "lora.dropout", "lora.targets", "lora.use_rslora", "lora.use_dora", "quant.mode", "quant.quant_type",
           "quant.double_quant", "quant.compute_dtype"]
FT_RUN = ["logging_steps", "save_steps", "eval_steps", "save_total_limit", "sample_generations", "run_name", "trust_remote_code"]
FT_DATA = ["hub_config", "hub_split", "columns", "too_long", "eval_dataset", "eval_split", "curriculum", "difficulty_column"]
DATA_FILE_TYPES = [".jsonl", ".json", ".csv", ".txt", ".parquet"]
# The offline first run: fully fine-tune the built-in compact model on the scored date task. Measured on a 2-core CPU:
# ~1.5 min (77 s with packing), date accuracy 0% -> 75% (LoRA on a 2M-parameter model needs several times more steps for the same skill).
FT_DEFAULTS = {"method": "full", "base_model": "builtin:compact-mini", "dataset": "builtin:dates", "max_steps": 1000,
               "learning_rate": 1e-3, "micro_batch_size": 16, "max_seq_len": 64, "logging_steps": 10, "save_steps": 200}


def _run_choices(jobs: JobManager) -> list[str]:
    return [s.name for s in jobs.list_runs()]


def _history_rows(jobs: JobManager) -> list[list[Any]]:
    rows = []
    for s in jobs.list_runs():
        mem = f"{s.predicted_gib:.2f} / {s.measured_gib:.2f}" if s.predicted_gib and s.measured_gib else (f"- / {s.measured_gib:.2f}" if s.measured_gib else "")
        score = " → ".join(f"{v:.0%}" for v in s.task_scores.values()) if s.task_scores else ""
        rows.append([s.name, s.state, s.method, s.base_model, s.dataset, f"{s.step}/{s.max_steps}",
                     None if s.best_eval_loss is None else round(s.best_eval_loss, 4), score,
                     None if s.duration_s is None else round(s.duration_s), mem, "yes" if s.resumable else ""])
    return rows


def _status_md(s) -> str:
    icon = {"running": "🟢", "finished": "✅", "stopped": "⏸", "failed": "❌", "killed": "⚠", "created": "…"}.get(s.state, "")
    lines = [f"### {icon} {s.name}: {s.state}" + (f" — {s.phase}" if s.state == "running" and s.phase else "")]
    if s.max_steps:
        lines.append(f"step **{s.step} / {s.max_steps}**" + (f" · loss **{s.last_loss:.4f}**" if s.last_loss is not None else ""))
    if s.predicted_gib or s.measured_gib:
        measured = "process RSS peak on CPU" if s.device == "cpu" else "torch max allocated"
        lines.append(f"memory: predicted **{s.predicted_gib or 0:.2f} GiB** / measured **{s.measured_gib or 0:.2f} GiB** ({measured})")
    if s.task_scores:
        lines.append("date task accuracy: " + " → ".join(f"{k} **{v:.0%}**" for k, v in s.task_scores.items()))
    if s.state == "finished":
        lines.append(f"Saved **{s.output}/** in `{s.path}` — choose `run:{s.name}` in the Playground.")
    if s.state == "failed" and s.error:
        lines.append(f"**Error:** {s.error}")
        if s.error_kind == "oom":
            lines.append("Click **Retry after OOM** to rerun with half the micro batch and twice the accumulation (same effective batch).")
    if s.resumable:
        lines.append("This run can be resumed from its last checkpoint (Resume).")
    return "\n\n".join(lines)


def _progress_html(s, last: dict | None) -> str:
    step, total, label = s.step, s.max_steps, ""
    if s.state == "running" and s.base_progress and not s.max_steps:  # still pretraining the built-in base
        step, total, label = s.base_progress.get("step", 0), s.base_progress.get("max_steps", 0), "pretraining the built-in base · "
        last = s.base_progress
    pct = 100.0 if s.state == "finished" else (100.0 * step / total if total else 0.0)
    extra = ""
    if last and s.state == "running":
        eta = last.get("eta_s")
        extra = f" · {last.get('tokens_per_s') or 0:.0f} tokens/s" + (f" · ETA {int(eta // 60)}m{int(eta % 60):02d}s" if eta is not None else "")
    return (f"<div style='width:100%;background:#eee;border-radius:6px'><div style='width:{pct:.1f}%;background:#4f8ef7;height:14px;"
            f"border-radius:6px'></div></div><small>{label}{pct:.0f}%{extra}</small>")


def _loss_frame(losses: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(losses, columns=["step", "loss", "kind"])
    # numeric axes; the colour column as plain Python objects (pandas 3's inferred StringDtype is not plotted)
    return df.astype({"step": "int64", "loss": "float64", "kind": object})


def build_finetune(jobs: JobManager, upload_dir: Path, allow_local_models: bool = False) -> dict[str, Any]:
    watched = gr.State(None)  # the run this browser session is watching
    owner = gr.State(None)  # this browser's key (see build_app), as a session State: it never appears in the API
    with gr.Row():
        with gr.Column(scale=2):
            model_choices = _train_model_choices(jobs)
            main = make_inputs(TrainConfig, only=FT_MAIN, values=FT_DEFAULTS, suggest={"base_model": model_choices, "teacher_model": model_choices})
            with gr.Row(equal_height=True):  # hardware presets: engine/estimator/recipes.py adapts the tier's recipe to the model
                preset = gr.Dropdown(choices=tier_choices(), value=AUTO_TIER, label="Hardware preset", scale=3,
                                     info="Fills method, precision, batch, sequence length and optimizer for this card and the model above.")
                preset_btn = gr.Button("Apply preset", scale=1)
            preset_note = gr.Markdown(elem_id="finetune-preset-note")
            upload = gr.File(label="…or upload a dataset (.jsonl .json .csv .txt .parquet)", file_types=DATA_FILE_TYPES)
            with gr.Accordion("Data: Hub dataset, column mapping, long rows, eval set", open=False):
                data = make_inputs(TrainConfig, only=FT_DATA, values=FT_DEFAULTS)
                eval_upload = gr.File(label="…or upload an eval file (replaces the eval fraction)", file_types=DATA_FILE_TYPES)
            with gr.Accordion("Data preview & validation", open=False):
                inspect_btn = gr.Button("Check the data", size="sm")
                data_summary = gr.Markdown()
                data_preview = gr.Dataframe(headers=["row", "as the model sees it (⟦trained⟧)", "tokens", "trained tokens"], interactive=False,
                                            wrap=True, label="First rows")
                data_hist = gr.BarPlot(x="tokens", y="rows", title="Token lengths", height=200, show_label=False, sort=None)
                data_dropped = gr.Dataframe(headers=["row", "why it was dropped"], interactive=False, label="Dropped rows")
            with gr.Accordion("Training", open=False):
                train = make_inputs(TrainConfig, only=FT_TRAIN, values=FT_DEFAULTS)
            with gr.Accordion("LoRA / quantization", open=False):
                lora = make_inputs(TrainConfig, only=FT_LORA, values=FT_DEFAULTS)
            with gr.Accordion("Run", open=False):
                runf = make_inputs(TrainConfig, only=FT_RUN, values=FT_DEFAULTS)
            prediction = gr.Markdown(elem_id="finetune-prediction")
            with gr.Row():
                start = gr.Button("Start training", variant="primary")
                stop = gr.Button("Stop (saves a checkpoint)", variant="stop")
            gr.Markdown("One run at a time: a second start while a run is going is refused (stop it or wait for it). "
                        + ("On this shared app, only the browser that started a run can stop, resume or delete it; everyone can "
                           "watch it and use it once it has finished." if jobs.owner_only else
                           "Anyone who can open this app can stop, resume or delete a run (single-user mode)."))
            show_cmd = gr.Button("Show command")
            command = gr.Code(label="Reproduce headless", language="yaml", visible=False)
        with gr.Column(scale=3):
            status = gr.Markdown("No run yet. The defaults fine-tune the built-in compact model to convert dates to ISO format "
                                 "(accuracy is scored before and after). The first run also pretrains the built-in model (~2 min, once).")
            progress = gr.HTML()
            plot = gr.LinePlot(x="step", y="loss", color="kind", title="Loss", height=280, show_label=False)
            log = gr.Textbox(label="Log (tail)", lines=8, max_lines=8, autoscroll=True)
            with gr.Row():
                run_pick = gr.Dropdown(choices=_run_choices(jobs), label="Run", info="Watch, resume or delete a run.", scale=3)
                resume = gr.Button("Resume", scale=1)
                retry = gr.Button("Retry after OOM (½ micro batch, 2× accumulation)", scale=2)
                delete = gr.Button("Delete", scale=1)
            with gr.Row():
                zip_btn = gr.Button("Download run (zip)", size="sm")
                merge_btn = gr.Button("Merge adapter into a 16-bit model", size="sm")
            download = gr.File(label="Download", visible=False)
            with gr.Accordion("Push to the Hugging Face Hub", open=False):
                with gr.Row():
                    push_repo = gr.Textbox(label="Repo id", placeholder="your-name/model-name", scale=3)
                    push_what = gr.Radio(["adapter", "merged", "model"], value="adapter", label="What", scale=2,
                                         info="adapter (LoRA/QLoRA), merged (after Merge adapter) or model (full / from scratch)")
                    push_private = gr.Checkbox(value=True, label="Private", info="for a new repo", scale=1)
                # The token is never returned to any output (the box is cleared after a push) and never read from the
                # server's HF_TOKEN: on a shared link that would let anyone push with the owner's account.
                push_token = gr.Textbox(type="password", label="Hugging Face token (write permission)", placeholder="hf_…",
                                        info="Used for this push only: never stored, logged or shown.")
                push_btn = gr.Button("Push to the Hub", size="sm")
                push_result = gr.Markdown()

                @ui_errors
                def on_push(name, repo, what, private, token):
                    from engine.export.hub import push_run

                    if not name:
                        raise gr.Error("Pick a finished run to push.")
                    url = push_run(run_path(jobs.runs_dir, name), repo, what=what, token=token, private=bool(private),
                                   use_env_token=False, runs_dir=jobs.runs_dir)
                    return f"✅ Pushed the {what} of **{name}** with a model card to [{url}]({url})", ""

                def push_default(name):  # a full/scratch run has a model, not an adapter
                    try:
                        return "model" if name and jobs.status(name).output == "model" else "adapter"
                    except EngineError:
                        return gr.skip()

                push_btn.click(on_push, [run_pick, push_repo, push_what, push_private, push_token], [push_result, push_token],
                               api_name="push_to_hub")
                run_pick.change(push_default, [run_pick], [push_what], queue=False, show_progress="hidden", api_visibility="private")
            history = gr.Dataframe(headers=["run", "state", "method", "base", "data", "steps", "best eval loss", "task acc", "seconds",
                                            "memory pred/meas GiB", "resumable"], interactive=False, label="Run history", wrap=True)
    form = {**main, **train, **lora, **runf, **data}
    distill_only = [form[n] for n in ("teacher_model", "distill_temperature", "distill_alpha")]
    for comp in distill_only:  # shown for method 'distill' only (read when the page is built; toggled below)
        comp.visible = FT_DEFAULTS.get("method") == "distill"
    names = list(form)
    timer = gr.Timer(1.0)

    def config_of(upload_path: str | None, *vals: Any) -> TrainConfig:
        *vals, eval_path = vals  # the eval upload comes last (form_inputs below)
        values = dict(zip(names, vals, strict=True))
        if upload_path:
            values["dataset"] = str(_keep_upload(upload_path, upload_dir))
        if eval_path:
            values["eval_dataset"] = str(_keep_upload(eval_path, upload_dir))
        # qlora always loads the base in 4-bit; lora may use an 8-bit base; full/scratch train unquantized weights
        method, mode = values.get("method"), values.get("quant.mode")
        values["quant.mode"] = "4bit" if method == "qlora" else ("8bit" if method == "lora" and mode == "8bit" else "none")
        cfg = from_flat(TrainConfig, values)
        check_ui_train_config(cfg, jobs.runs_dir, upload_dir, allow_local_models=allow_local_models)
        return cfg

    def predict(cfg: TrainConfig) -> tuple[str, str | None]:
        """(markdown, verdict) of the estimator for this form on the machine the run will use."""
        from engine.estimator.handoff import fit_verdict, query_from_train
        from engine.hardware.device import detect_device, dtype_name, resolve_dtype

        device = detect_device()
        dtype = resolve_dtype(cfg.precision, device, field="precision")
        head = f"Effective batch **{cfg.micro_batch_size * cfg.grad_accum}** (micro batch {cfg.micro_batch_size} × accumulation {cfg.grad_accum})."
        if cfg.base_model.startswith("run:"):
            return head + " Memory prediction: shown once the run starts (the base comes from a previous run).", None
        if cfg.method == "distill":  # the student's training plus the frozen teacher (engine/training/distill.py)
            from engine.training.distill import estimate_distill

            est = estimate_distill(cfg, dtype_name(dtype))
            if est is None:
                return head + " Memory prediction: shown once the run starts (the teacher's architecture is not known yet).", None
        else:
            est = memory.estimate(query_from_train(cfg, dtype_name(dtype)))
        need = est.total_gib if device.kind == "cuda" else est.allocated_gib
        verdict = fit_verdict(need, device.total_gib)
        word = {"fits": "✅ fits", "tight": "⚠ tight", "no": "❌ does not fit"}[verdict]
        return (f"{head}\n\nPredicted peak **{est.allocated_gib:.2f} GiB** allocated ({est.total_gib:.2f} GiB as nvidia-smi shows it) · "
                f"{device.name} ({device.kind}, {device.total_gib:.1f} GiB): **{word}**"
                + ("" if verdict == "fits" else " — the Memory estimator's *Make it fit* lists the cheapest changes.")), verdict

    def on_predict(upload_path, *vals):
        try:
            return predict(config_of(upload_path, *vals))[0]
        except EngineError as exc:
            return f"⚠ {exc}"

    @ui_errors
    def on_start(owner_v, upload_path, *vals):
        cfg = config_of(upload_path, *vals)
        _, verdict = predict(cfg)
        if verdict == "no":
            gr.Warning("The estimator predicts this run will not fit in this machine's memory; it may stop with an out-of-memory error.")
        name = jobs.start(cfg, owner=owner_v)
        gr.Info(f"Started run '{name}'. You can close this tab: the run goes on and is shown again when you come back.")
        return name, gr.update(choices=_run_choices(jobs), value=name)

    def on_poll(name):
        if not name:
            return gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip()
        try:
            s = jobs.status(name)
        except EngineError:
            return gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip()
        return _status_md(s), _progress_html(s, s.last_progress), _loss_frame(s.losses), log_tail(s.path, 40), _history_rows(jobs)

    @ui_errors
    def on_stop(name, owner_v):
        if not name:
            raise gr.Error("No run selected.")
        jobs.check_control(name, owner_v, "stop")
        jobs.stop(name, wait=False)
        gr.Info(f"Asked '{name}' to stop: it saves a checkpoint at the next step, then exits (Resume continues it).")

    @ui_errors
    def on_resume(name, owner_v):
        if not name:
            raise gr.Error("Pick a run to resume.")
        jobs.check_control(name, owner_v, "resume")
        jobs.resume(name)
        gr.Info(f"Resuming '{name}' from its last complete checkpoint.")
        return name

    @ui_errors
    def on_inspect(upload_path, *vals):
        from engine.training.data_check import inspect_dataset

        ins = inspect_dataset(config_of(upload_path, *vals), jobs.runs_dir)
        rows = [[p["row"], p["text"], p["n_tokens"], p["n_trainable"]] for p in ins.preview]
        hist = pd.DataFrame(ins.histogram, columns=["tokens", "rows"])
        return ins.summary, rows, hist, ins.dropped or []

    @ui_errors
    def on_retry(name, owner_v):
        if not name:
            raise gr.Error("Pick the run that ran out of memory.")
        jobs.check_control(name, owner_v, "retry")
        new = jobs.retry_smaller_batch(name, owner=owner_v)
        gr.Info(f"Started '{new}' with half the micro batch and twice the accumulation (same effective batch).")
        return new, gr.update(choices=_run_choices(jobs), value=new)

    @ui_errors
    def on_delete(name, owner_v):
        if not name:
            raise gr.Error("Pick a run to delete.")
        jobs.check_control(name, owner_v, "delete")
        jobs.delete(name)
        return None, gr.update(choices=_run_choices(jobs), value=None), _history_rows(jobs)

    @ui_errors
    def on_preset(tier, upload_path, *vals):
        from engine.estimator.recipes import apply_recipe

        current = dict(zip(names, vals[:-1], strict=True))  # the eval upload comes last
        applied = apply_recipe(current, tier or AUTO_TIER, current["base_model"])
        return [applied.explanation, *[gr.update(value=applied.values[n]) if n in applied.values else gr.skip() for n in names]]

    @ui_errors
    def on_show_cmd(upload_path, *vals):
        cfg = config_of(upload_path, *vals)
        from engine.hardware.distributed import launch_command

        text = (f"# save as run.yaml, then:\n#   python -m engine train --config run.yaml\n"
                f"# on 2 GPUs (one process each; each step then sees 2x the effective batch; see docs/multi_gpu.md):\n"
                f"#   {launch_command('run.yaml', 2)}\n{config_yaml(cfg)}")
        return gr.update(value=text, visible=True)

    @ui_errors
    def on_zip(name):
        from engine.export.merge import zip_run

        if not name:
            raise gr.Error("Pick a run to download.")
        return gr.update(value=str(zip_run(run_path(jobs.runs_dir, name))), visible=True)

    @ui_errors
    def on_merge(name):
        from engine.export.merge import merge_adapter

        if not name:
            raise gr.Error("Pick a finished LoRA/QLoRA run to merge.")
        if jobs.status(name).state != "finished":
            raise gr.Error(f"Run '{name}' has not finished; merge needs its final adapter.")
        out = merge_adapter(run_path(jobs.runs_dir, name), runs_dir=jobs.runs_dir)
        gr.Info(f"Merged model saved in {out} (base reloaded unquantized, adapter merged, safetensors).")

    def on_load():
        active = jobs.active()
        runs = _run_choices(jobs)
        name = active or (runs[0] if runs else None)
        models = gr.update(choices=_train_model_choices(jobs))  # runs finished since the page was built
        return name, gr.update(choices=runs, value=name), _history_rows(jobs), models, models

    def init_owner(key):
        key = key or secrets.token_urlsafe(18)
        return key, key

    form_inputs = [upload, *form.values(), eval_upload]
    start.click(on_start, [owner, *form_inputs], [watched, run_pick], api_name="start_training", concurrency_limit=1, concurrency_id="jobs")
    stop.click(on_stop, [watched, owner], None, api_name="stop_training")
    resume.click(on_resume, [run_pick, owner], [watched], api_name="resume_training", concurrency_limit=1, concurrency_id="jobs")
    delete.click(on_delete, [run_pick, owner], [watched, run_pick, history], api_name="delete_run")
    retry.click(on_retry, [run_pick, owner], [watched, run_pick], api_name="retry_oom", concurrency_limit=1, concurrency_id="jobs")
    inspect_btn.click(on_inspect, form_inputs, [data_summary, data_preview, data_hist, data_dropped], api_name="inspect_data")
    run_pick.input(lambda n: n, [run_pick], [watched], queue=False)
    zip_btn.click(on_zip, [run_pick], [download], api_name="download_run")
    merge_btn.click(on_merge, [run_pick], None, api_name="merge_adapter", concurrency_limit=1, concurrency_id="gpu")
    show_cmd.click(on_show_cmd, form_inputs, [command], api_name="show_command")
    preset_btn.click(on_preset, [preset, *form_inputs], [preset_note, *form.values()], api_name="apply_preset").then(
        on_predict, form_inputs, [prediction], queue=False, show_progress="hidden")
    timer.tick(on_poll, [watched], [status, progress, plot, log, history], show_progress="hidden", queue=False)
    main["method"].change(lambda m: [gr.update(visible=m == "distill")] * len(distill_only), [main["method"]], distill_only,
                          queue=False, show_progress="hidden", api_visibility="private")
    for comp in form.values():
        comp.change(on_predict, form_inputs, [prediction], queue=False, show_progress="hidden")
    return {"form": form, "watched": watched, "run_pick": run_pick, "history": history, "on_load": on_load, "poll": on_poll,
            "init_owner": init_owner, "owner": owner,
            "status": status, "predict": on_predict, "form_inputs": form_inputs, "prediction": prediction}


def _keep_upload(path: str, upload_dir: Path) -> Path:
    """Copy an upload out of gradio's temp dir (cleaned on exit) so the run can be resumed later."""
    src = Path(path)
    digest = hashlib.sha256(src.read_bytes()).hexdigest()[:12]
    dest = upload_dir / f"{digest}-{src.name}"
    if not dest.exists():
        shutil.copyfile(src, dest)
    return dest


# --------------------------------------------------------------------------------------------------
# Panel 3: playground
# --------------------------------------------------------------------------------------------------


def _train_model_choices(jobs: JobManager) -> list[str]:
    """Suggestions for the base and teacher models: every built-in preset (pretrained on first use), finished runs (to
    continue from) and their merged models, then the catalog's Hub ids."""
    from engine.models.compact import compact_presets

    known = _playground_models(jobs)
    return [f"builtin:{p}" for p in compact_presets()] + [m for m in known if not m.startswith("builtin:")]


def _playground_models(jobs: JobManager) -> list[str]:
    """Built-in models, finished runs, their merged models, then the catalog's Hub ids (downloaded when online)."""
    from engine.estimator.catalog import catalog
    from engine.models.compact import compact_presets
    from engine.models.loading import builtin_model_dir

    out = [f"builtin:{p}" for p in compact_presets() if (builtin_model_dir(p, jobs.runs_dir) / "config.json").exists()]
    for s in jobs.finished_runs():
        out.append(f"run:{s.name}")
        if (jobs.runs_dir / s.name / "merged" / "config.json").exists():
            out.append(f"run:{s.name}/merged")
    return out + [m.hf_id for m in catalog() if m.hf_id]


NO_ADAPTER = "(none)"
PLACEMENTS = {"one device": None, "auto (offload to CPU/disk)": "auto"}  # label -> device_map for engine.models.loading.load_model


def _adapter_choices(jobs: JobManager) -> list[str]:
    return [NO_ADAPTER] + [f"run:{s.name}" for s in jobs.finished_runs() if (jobs.runs_dir / s.name / "adapter" / "adapter_config.json").exists()]


class StopSignals:
    """One threading.Event per browser session, so Stop ends that session's generation and nobody else's.

    Shared by every session (process-wide), guarded by its own lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[str, threading.Event] = {}

    def fresh(self, session: str) -> threading.Event:
        with self._lock:
            ev = self._events[session] = threading.Event()
            return ev

    def stop(self, session: str) -> None:
        with self._lock:
            ev = self._events.get(session)
        if ev is not None:
            ev.set()


def _stats_line(upd: Any) -> str:
    if upd.ttft is None:
        return "generating…"
    info = f"{upd.n_tokens} tokens · {upd.tokens_per_s:.1f} tokens/s · first token {upd.ttft:.2f}s"
    if upd.done and upd.peak_gib:
        info += f" · peak {upd.peak_gib:.2f} GiB"
    if upd.done and upd.finish_reason:
        info += f" · ended by {upd.finish_reason}"
    if upd.notes:
        info += " · " + "; ".join(upd.notes)
    return info


def build_playground(jobs: JobManager, allow_local_models: bool = False) -> dict[str, Any]:
    from engine.models.loading import MODEL_CACHE

    signals = StopSignals()
    with gr.Row():
        with gr.Column(scale=2):
            choices = _playground_models(jobs)
            model = gr.Dropdown(choices=choices, value=choices[0] if choices else None, allow_custom_value=True, label="Model", elem_id="playground-model",
                                info="A pretrained built-in model, a finished run (run:NAME: adapter applied on its base; run:NAME/merged: its merged "
                                     "16-bit model), or a Hugging Face id (the catalog's are listed; downloaded once, when online).")
            with gr.Row():
                refresh = gr.Button("Refresh model list", size="sm")
                unload = gr.Button("Unload models (free memory)", size="sm")
            quant = gr.Dropdown(choices=[c for c in field_specs(QuantSettings)[0].choices], value="none", label="Load as",
                                info=field_specs(QuantSettings)[0].help)
            with gr.Accordion("Adapter and placement", open=False):
                adapter = gr.Dropdown(choices=_adapter_choices(jobs), value=NO_ADAPTER, label="Adapter", elem_id="playground-adapter", allow_custom_value=True,
                                      info="A LoRA adapter from a run, applied on top of the model above without merging "
                                           "(the model must be the adapter's base, e.g. base vs base + adapter in Compare).")
                placement = gr.Radio(choices=list(PLACEMENTS), value="one device", label="Placement",
                                     info="auto: accelerate spreads a model larger than the GPU over GPU, CPU RAM and disk "
                                          "(slower, but it runs). On a machine without a GPU everything is in RAM either way.")
                gpu_budget = gr.Number(value=0, minimum=0, maximum=1024, label="GPU budget for auto (GiB, 0 = all free memory)",
                                       info="Cap the GPU share so the rest of the card stays free (e.g. for a training run).")
            model_info = gr.Markdown(elem_id="playground-model-info")
            mode = gr.Radio(choices=["chat", "completion"], value="chat", label="Mode", info="chat: the model's chat template; completion: raw text continuation.")
            system = gr.Textbox(label="System prompt (chat)", lines=2)
            from engine.inference.generate import generation_presets

            presets = generation_presets()
            preset = gr.Radio(choices=list(presets), value=None, label="Decoding preset",
                              info=" · ".join(f"{k}: {v['description']}" for k, v in presets.items()))
            gen = make_inputs(GenerationSettings)
        with gr.Column(scale=3):
            with gr.Tabs():
                with gr.Tab("Chat"):
                    chat = gr.Chatbot(label="Conversation", height=420, buttons=["copy"])
                    prompt = gr.Textbox(label="Prompt", placeholder="Converta a data 05/09/2023 para o formato ISO (AAAA-MM-DD).", lines=2)
                    with gr.Row():
                        send = gr.Button("Generate", variant="primary")
                        stop = gr.Button("Stop")
                        regen = gr.Button("Regenerate")
                        clear = gr.Button("Clear")
                    stats = gr.Markdown(elem_id="playground-stats")
                with gr.Tab("Compare"):
                    gr.Markdown("The same prompt, settings and seed on two models, one after the other (so only one has to fit in memory).")
                    model_b = gr.Dropdown(choices=choices, value=choices[-1] if choices else None, allow_custom_value=True, label="Model B",
                                          info="Model A is the one chosen on the left.")
                    cmp_prompt = gr.Textbox(label="Prompt", lines=2, placeholder="Convert the date 11/04/1999 (DD/MM/YYYY) to ISO format (YYYY-MM-DD).")
                    with gr.Row():
                        cmp_btn = gr.Button("Compare", variant="primary")
                        cmp_stop = gr.Button("Stop")
                    with gr.Row():
                        with gr.Column():
                            out_a = gr.Textbox(label="Model A", lines=8)
                            stats_a = gr.Markdown()
                        with gr.Column():
                            out_b = gr.Textbox(label="Model B", lines=8)
                            stats_b = gr.Markdown()
                with gr.Tab("Batch"):
                    gr.Markdown("Many prompts, generated in memory-safe micro-batches (halved automatically after an out-of-memory).")
                    batch_text = gr.Textbox(label="Prompts, one per line", lines=6)
                    batch_file = gr.File(label="…or a .txt / .jsonl / .csv file (column prompt, instruction or text)", file_types=[".txt", ".jsonl", ".csv"])
                    batch_size = gr.Slider(1, 64, value=8, step=1, label="Micro batch")
                    with gr.Row():
                        batch_btn = gr.Button("Generate all", variant="primary")
                        batch_stop = gr.Button("Stop")
                    batch_status = gr.Markdown()
                    batch_table = gr.Dataframe(headers=["#", "prompt", "output", "tokens", "seconds"], interactive=False, wrap=True)
                    batch_csv = gr.File(label="Results (CSV)", visible=False)
                with gr.Tab("Evaluate"):
                    gr.Markdown("Perplexity with a sliding window (for texts longer than the context) and the built-in date task's accuracy, "
                                "for one model or two (A = left, B = the Compare tab's Model B).")
                    eval_text = gr.Textbox(label="Text (empty: use the dataset below)", lines=4)
                    eval_data = gr.Dropdown(choices=list(BUILTIN_DATASETS), value="builtin:corpus", label="…or a built-in dataset")
                    with gr.Row():
                        eval_window = gr.Number(value=0, precision=0, label="Window (0 = the model's context)")
                        eval_stride = gr.Number(value=0, precision=0, label="Stride (0 = window / 2)")
                        eval_both = gr.Checkbox(value=False, label="Also model B")
                    with gr.Row():
                        ppl_btn = gr.Button("Perplexity", variant="primary")
                        acc_btn = gr.Button("Date-task accuracy")
                    eval_out = gr.Dataframe(headers=["model", "metric", "value", "details"], interactive=False, wrap=True)
                with gr.Tab("Export (ONNX)"):
                    gr.Markdown("Export the model on the left (a compact model, a full/scratch run, or a merged run) to ONNX, run it with "
                                "ONNX Runtime on the CPU, and compare it with PyTorch (needs `pip install -r requirements-onnx.txt`).")
                    onnx_prompts = gr.Textbox(label="Test prompts, one per line", lines=3, value="A memória da GPU\nThe KV cache")
                    onnx_btn = gr.Button("Export and compare", variant="primary")
                    onnx_out = gr.Dataframe(headers=["check", "value"], interactive=False)
                    onnx_file = gr.File(label="model.onnx", visible=False)
    gen_names = list(gen)

    def load(ref_v: str, quant_mode: str, extra: tuple = ()) -> Any:
        """The cached model for (reference, quantization) plus the optional (adapter, placement, GPU budget)."""
        from engine.hardware.coexist import check_room_to_generate, cuda_free_gib

        ref = check_ui_model_ref(ref_v, jobs.runs_dir, allow_local=allow_local_models)
        adapter_v, placement_v, budget = (tuple(extra) + (NO_ADAPTER, "one device", 0))[:3]
        adapter_ref = None if adapter_v in (None, "", NO_ADAPTER) else check_ui_model_ref(adapter_v, jobs.runs_dir)
        device_map, max_memory = PLACEMENTS.get(placement_v, None), None
        if device_map == "auto" and budget and float(budget) > 0:
            from engine.hardware.device import ram_gib

            # accelerate only uses the devices named here: give the CPU the machine's RAM less a margin for the app
            max_memory = {0: f"{float(budget):g}GiB", "cpu": f"{max(1.0, ram_gib() - 2):.0f}GiB"}
        active, free = jobs.active(), cuda_free_gib()
        if active and free is not None and not any(e["ref"] == ref for e in MODEL_CACHE.loaded()):
            try:
                weights = memory.estimate(MemoryQuery(model=ref, task="inference", weight_precision={"4bit": "nf4", "8bit": "int8"}.get(quant_mode, "auto"),
                                                      batch=1, seq_len=16, new_tokens=0)).breakdown_gib.get("weights", 0.0)
            except EngineError:
                weights = 0.0  # unknown to the estimator (run:NAME): let the load itself decide
            check_room_to_generate(weights, training_run=active, free_gib=free)
        # The playground never trains (training loads its own copy in a subprocess), so the faster packed
        # bitsandbytes CPU layout is safe here (engine/models/bnb_safety.py explains the hazard it poses to training).
        return MODEL_CACHE.get_or_load(ref, QuantSettings(mode=quant_mode), runs_dir=jobs.runs_dir, allow_cpu_repack=True, adapter=adapter_ref,
                                       device_map=device_map, max_memory=max_memory, allow_local_paths=allow_local_models)

    def info_of(loaded: Any) -> str:
        return f"**{loaded.ref}** · loaded in {loaded.load_seconds:.1f}s · {loaded.footprint_gib:.3f} GiB · {loaded.where}"

    def settings_of(gen_vals: tuple) -> GenerationSettings:
        return from_flat(GenerationSettings, dict(zip(gen_names, gen_vals[: len(gen_names)], strict=True)))

    def extra_of(rest: tuple) -> tuple:
        """The (adapter, placement, GPU budget) inputs, which follow the generation settings (optional over the API)."""
        return tuple(rest[len(gen_names):])

    @ui_errors_gen
    def on_send(request: gr.Request, model_ref, quant_mode, mode_v, system_v, prompt_v, history, *gen_vals):
        from engine.inference.generate import stream_generate

        settings = settings_of(gen_vals)
        if not (prompt_v or "").strip():
            raise gr.Error("Type a prompt first.")
        loaded = load(model_ref, quant_mode, extra_of(gen_vals))
        history = list(history or [])
        if mode_v == "chat":
            request_msgs: Any = ([{"role": "system", "content": system_v}] if system_v.strip() else []) + history + [{"role": "user", "content": prompt_v}]
        else:
            request_msgs = prompt_v
        history = history + [{"role": "user", "content": prompt_v}, {"role": "assistant", "content": ""}]
        stop_ev = signals.fresh(request.session_hash or "")
        info = info_of(loaded)
        yield history, "", "generating…", info
        for upd in stream_generate(loaded, request_msgs, settings, chat=mode_v == "chat", stop_event=stop_ev):
            history[-1]["content"] = upd.text
            yield history, "", _stats_line(upd), info

    def on_regenerate(history):
        history = list(history or [])
        while history and history[-1]["role"] == "assistant":
            history.pop()
        if not history:
            raise gr.Error("Nothing to regenerate yet.")
        last = history.pop()
        text = last["content"] if isinstance(last["content"], str) else " ".join(p.get("text", "") for p in last["content"] if isinstance(p, dict))
        return history, text

    @ui_errors_gen
    def on_compare(request: gr.Request, ref_a, ref_b, quant_mode, mode_v, system_v, prompt_v, *gen_vals):
        from engine.inference.generate import stream_generate

        settings = settings_of(gen_vals)
        if not (prompt_v or "").strip():
            raise gr.Error("Type a prompt first.")
        if settings.do_sample and settings.seed == 0:
            settings = dataclasses.replace(settings, seed=1234)  # same seed on both sides, or sampling is not comparable
        msgs: Any = ([{"role": "system", "content": system_v}] if system_v.strip() else []) + [{"role": "user", "content": prompt_v}]
        request_msgs = msgs if mode_v == "chat" else prompt_v
        stop_ev = signals.fresh(request.session_hash or "")
        texts, lines = ["", ""], ["", ""]
        for side, ref in enumerate((ref_a, ref_b)):
            if stop_ev.is_set():
                break
            lines[side] = f"loading {ref}…"
            yield texts[0], lines[0], texts[1], lines[1]
            extra = extra_of(gen_vals)  # the adapter goes on model A only: base + adapter vs base, for example
            loaded = load(ref, quant_mode, extra if side == 0 else (NO_ADAPTER, *extra[1:]))
            for upd in stream_generate(loaded, request_msgs, settings, chat=mode_v == "chat", stop_event=stop_ev):
                texts[side], lines[side] = upd.text, _stats_line(upd)
                yield texts[0], lines[0], texts[1], lines[1]

    def on_preset(name, *gen_vals):
        from engine.inference.generate import apply_preset

        new = apply_preset(name, settings_of(gen_vals))
        return [gr.update(value=getattr_dotted(new, n)) for n in gen_names]

    @ui_errors_gen
    def on_batch(request: gr.Request, ref_v, quant_mode, mode_v, text_v, file_v, micro, *gen_vals):
        from engine.inference.batch import batch_generate, parse_prompts, write_csv

        prompts = parse_prompts(text_v or None, file_v)
        loaded = load(ref_v, quant_mode, extra_of(gen_vals))
        stop_ev = signals.fresh(request.session_hash or "")
        rows: list = []
        for prog in batch_generate(loaded, prompts, settings_of(gen_vals), chat=mode_v == "chat", micro_batch=int(micro), stop_event=stop_ev):
            rows = [[r.index + 1, r.prompt, r.output, r.tokens, round(r.seconds, 2)] for r in prog.rows]
            line = f"{prog.done}/{prog.total} prompts · micro batch {prog.micro_batch} · {prog.elapsed:.1f}s" + ("".join(f" · {n}" for n in prog.notes))
            if prog.finished or prog.stopped:
                out = jobs.runs_dir / "_exports" / f"batch-{int(time.time())}.csv"
                write_csv(prog.rows, out)
                yield line + (" · stopped" if prog.stopped else " · done"), rows, gr.update(value=str(out), visible=True)
            else:
                yield line, rows, gr.skip()

    @ui_errors
    def on_eval(kind, ref_a, ref_b, quant_mode, both, text_v, data_v, window, stride, *extra):
        from engine.inference.evaluate import dataset_perplexity, perplexity, task_accuracy

        out = []
        for side, ref in enumerate([ref_a] + ([ref_b] if both else [])):
            loaded = load(ref, quant_mode, extra if side == 0 else (NO_ADAPTER, *extra[1:]))
            if side == 0 and extra and extra[0] not in (None, "", NO_ADAPTER):
                ref = f"{ref} + adapter {extra[0]}"
            if kind == "ppl":
                kw = {"window": int(window) or None, "stride": int(stride) or None}
                res = perplexity(loaded, [text_v], **kw) if (text_v or "").strip() else dataset_perplexity(loaded, data_v, **kw)
                out.append([ref, "perplexity", round(res.ppl, 3), res.summary()])
            else:
                score = task_accuracy(loaded)
                out.append([ref, "date-task accuracy", round(score.accuracy, 3), score.summary()])
        return out

    @ui_errors
    def on_onnx(ref_v, prompts_v):
        from engine.export.onnx import compare_onnx, export_onnx

        ref = check_ui_model_ref(ref_v, jobs.runs_dir, allow_local=allow_local_models)
        loaded = MODEL_CACHE.get_or_load(ref, QuantSettings(mode="none"), runs_dir=jobs.runs_dir, allow_local_paths=allow_local_models)
        if getattr(loaded, "adapter", None):
            raise gr.Error("This run is a LoRA adapter: merge it first (Fine-tune → Merge adapter), then export the merged model.")
        out_dir = jobs.runs_dir / "_exports" / f"onnx-{ref.replace(':', '-').replace('/', '-')}"
        path = export_onnx(loaded, out_dir, runs_dir=jobs.runs_dir)
        prompts = [p for p in (prompts_v or "").splitlines() if p.strip()] or ["Hello"]
        res = compare_onnx(loaded, path, prompts, no_cache_baseline=True)
        rows = [[k, v if not isinstance(v, float) else round(v, 6)] for k, v in res.items() if not isinstance(v, (list, dict))]
        return rows, gr.update(value=str(path), visible=True)

    def on_stop(request: gr.Request) -> None:
        signals.stop(request.session_hash or "")

    def on_unload():
        n = MODEL_CACHE.unload_all()
        return f"Unloaded {n} model(s)."

    load_extra = [adapter, placement, gpu_budget]  # last, so API callers may leave them out
    send_inputs = [model, quant, mode, system, prompt, chat, *gen.values(), *load_extra]
    ev = send.click(on_send, send_inputs, [chat, prompt, stats, model_info], api_name="generate", concurrency_limit=1, concurrency_id="gpu")
    ev2 = prompt.submit(on_send, send_inputs, [chat, prompt, stats, model_info], concurrency_limit=1, concurrency_id="gpu")
    regen.click(on_regenerate, [chat], [chat, prompt], queue=False).success(
        on_send, send_inputs, [chat, prompt, stats, model_info], concurrency_limit=1, concurrency_id="gpu")
    stop.click(on_stop, None, None, queue=False, api_name="stop_generation")
    clear.click(lambda: ([], ""), None, [chat, stats], queue=False)
    cmp_btn.click(on_compare, [model, model_b, quant, mode, system, cmp_prompt, *gen.values(), *load_extra], [out_a, stats_a, out_b, stats_b],
                  api_name="compare", concurrency_limit=1, concurrency_id="gpu")
    cmp_stop.click(on_stop, None, None, queue=False)
    refresh.click(lambda: (gr.update(choices=_playground_models(jobs)),) * 2 + (gr.update(choices=_adapter_choices(jobs)),), None,
                  [model, model_b, adapter], queue=False)
    unload.click(on_unload, None, [model_info], api_name="unload_models")
    preset.input(on_preset, [preset, *gen.values()], list(gen.values()), queue=False)
    onnx_btn.click(on_onnx, [model, onnx_prompts], [onnx_out, onnx_file], api_name="export_onnx", concurrency_limit=1, concurrency_id="gpu")
    batch_btn.click(on_batch, [model, quant, mode, batch_text, batch_file, batch_size, *gen.values(), *load_extra], [batch_status, batch_table, batch_csv],
                    api_name="batch_generate", concurrency_limit=1, concurrency_id="gpu")
    batch_stop.click(on_stop, None, None, queue=False)
    eval_inputs = [model, model_b, quant, eval_both, eval_text, eval_data, eval_window, eval_stride, *load_extra]
    ppl_btn.click(functools.partial(on_eval, "ppl"), eval_inputs, [eval_out], api_name="perplexity", concurrency_limit=1, concurrency_id="gpu")
    acc_btn.click(functools.partial(on_eval, "acc"), eval_inputs, [eval_out], api_name="task_accuracy", concurrency_limit=1, concurrency_id="gpu")
    del ev, ev2
    return {"model": model, "model_b": model_b, "adapter": adapter}


# --------------------------------------------------------------------------------------------------
# The page
# --------------------------------------------------------------------------------------------------


def build_app(runs_dir: Path, allow_local_models: bool = False, owner_only: bool = False) -> gr.Blocks:
    """The whole page. allow_local_models lets the playground load model folders from this machine's disk: only for a
    local, trusted `python app.py --allow-local-models`, never on a public link. owner_only: only the browser that
    started a run may stop, resume or delete it (a public link, a Space)."""
    runs_dir = Path(runs_dir)
    runs_dir.mkdir(parents=True, exist_ok=True)
    upload_dir = runs_dir / "_uploads"
    upload_dir.mkdir(exist_ok=True)
    jobs = JobManager(runs_dir, owner_only=owner_only)  # shared by every browser session (its own lock serializes start/stop)
    with gr.Blocks(title="Compact LLM Lab") as demo:
        # This browser's key (engine/training/jobs.py "Who may stop a run"), kept in its local storage so that it survives reloads,
        # closed tabs and app restarts. At the top level: components inside a tab are not mounted until the tab is
        # opened, and an unmounted BrowserState is never read from or saved to the browser.
        browser_key = gr.BrowserState(None, storage_key="compact-llm-lab-owner")
        gr.Markdown("# Compact LLM Lab\nEstimate memory, fine-tune with QLoRA/LoRA, and generate — on a small GPU, a free Colab T4, or a CPU. "
                    f"Runs are saved in `{runs_dir}`.")
        with gr.Tabs():
            with gr.Tab("Memory estimator"):
                est = build_estimator(upload_dir)
            with gr.Tab("Fine-tune"):
                ft = build_finetune(jobs, upload_dir, allow_local_models)
            with gr.Tab("Playground") as pg_tab:
                pg = build_playground(jobs, allow_local_models)

        form = ft["form"]

        @ui_errors
        def copy_to_finetune(pick_n, *vals):
            q = est["query_of"](vals[0], *vals[2:])
            sugg = memory.make_it_fit(q, vals[1]) if pick_n else []
            chosen = next((s for s in sugg if s.rank == int(pick_n)), None)
            if chosen is not None:
                q = from_flat(MemoryQuery, {**{k: getattr(q, k) for k in q.__dataclass_fields__}, **chosen.changes})
            values = train_values_from_query(q)
            gr.Info("Copied to the Fine-tune form" + (f" with suggestion #{chosen.rank}" if chosen else "") + ".")
            return [gr.update(value=values[n]) if n in values else gr.skip() for n in form]

        est["copy_btn"].click(copy_to_finetune, [est["pick"], *est["inputs"]], list(form.values()), api_name="copy_to_finetune")
        demo.load(est["on_estimate"], est["inputs"], est["outputs"], api_name="estimate")
        demo.load(ft["on_load"], None, [ft["watched"], ft["run_pick"], ft["history"], ft["form"]["base_model"], ft["form"]["teacher_model"]])
        demo.load(ft["init_owner"], [browser_key], [browser_key, ft["owner"]], api_visibility="private", queue=False)
        demo.load(ft["predict"], ft["form_inputs"], [ft["prediction"]], api_name="predict_memory")
        # finished runs appear in the playground as soon as its tab is opened
        pg_tab.select(lambda: (gr.update(choices=_playground_models(jobs)),) * 2 + (gr.update(choices=_adapter_choices(jobs)),), None,
                      [pg["model"], pg["model_b"], pg["adapter"]], queue=False)
    return demo


def shared_app(share_flag: bool) -> bool:
    """Will people other than the one who started the app reach it? A --share link, a Hugging Face Space, or Colab (where
    gradio turns the public link on by itself)."""
    return bool(share_flag or os.environ.get("SPACE_ID") or os.environ.get("COLAB_RELEASE_TAG"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Compact LLM Lab web app")
    parser.add_argument("--share", action="store_true", help="Create a public gradio.live link (on by default on Colab).")
    parser.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", 7860)))
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"), help="0.0.0.0 to listen on all interfaces.")
    parser.add_argument("--runs-dir", default=None, help="Where runs are stored (default: $COMPACT_LAB_RUNS or ./runs).")
    parser.add_argument("--allow-local-models", action="store_true",
                        help="Let the playground and the fine-tune form use model folders on this machine's disk (a trusted local app only, never with --share).")
    args = parser.parse_args(argv)
    if args.allow_local_models and shared_app(args.share):
        parser.error("--allow-local-models cannot be used on a shared app (--share, a Space, Colab): anyone with the link could read "
                     "model folders on this machine.")
    if args.runs_dir:
        os.environ["COMPACT_LAB_RUNS"] = args.runs_dir
    from engine.runs import default_runs_dir

    runs_dir = default_runs_dir()
    demo = build_app(runs_dir, allow_local_models=args.allow_local_models, owner_only=shared_app(args.share))
    demo.queue(default_concurrency_limit=1)
    exports = runs_dir / "_exports"  # zips, CSVs and ONNX files offered for download (and nothing else of the runs dir)
    exports.mkdir(exist_ok=True)
    demo.launch(share=args.share or None, server_name=args.host, server_port=args.port, theme=gr.themes.Soft(), allowed_paths=[str(exports)])


if __name__ == "__main__":
    main()
