"""The app's main functions as tools for an AI assistant (MCP, `python app.py --mcp`): typed, documented, JSON text.

gradio's MCP server turns a function's signature into the tool's input schema and its docstring (the "Args:" lines)
into the descriptions an assistant reads, so each tool here has simple typed parameters with defaults and a
docstring written for an assistant: what it does, when to use it, what each value means (choices as `Literal`, so
the schema lists them as an enum). They call the same engine functions as the page, with the same checks:

- references: every model and dataset goes through the page's checks (engine/estimator/handoff.py), run inside
  `visitor_scope(None)` (engine/refs.py): an MCP caller cannot upload, so no reference may name a file on the server,
  and the engine's own gate refuses it again on a shared app; a refused path gets the same answer whether it exists;
- ownership: an MCP caller has no browser, and gradio's MCP transport keeps no session (stateless streamable HTTP),
  so each run started here gets its own random owner key, returned once by `start_training`; `stop_training` needs it
  on a shared app (engine/training/jobs.py `check_control`), exactly as the page's Stop needs the browser's key;
- stopping: `stop_training` is the page's Stop (engine/views/run_control.py `stop_run`): the STOP file, then the
  process tree killed after the grace period if the run does not exit;
- results: runs are shown as the page shows them to everyone: an uploaded dataset as "(an uploaded file)" on a shared
  app, error texts with the server's folders replaced (`public_summary`); nothing names a server path.

Login: gradio's MCP server neither checks nor carries the page's login, so the app refuses `--mcp` with a login
(engine/sharing.py `check_mcp_login`, which names the gradio code).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import run_access
from ..config import Method, Task
from ..errors import EngineError
from ..i18n import t
from ..refs import looks_like_path, visitor_scope
from .run_history import data_label
from .run_view import scrub_paths

if TYPE_CHECKING:
    from ..runs import RunSummary
    from ..training.jobs import JobManager

MCP_OWNER_PREFIX = "mcp:"  # an owner key made for one MCP-started run (a browser's key is a different string)


def public_summary(s: RunSummary, runs_dir: Path) -> dict[str, Any]:
    """A run as any MCP caller may see it: what the page's history shows everyone, never a server path (an uploaded
    dataset by `data_label`, a model folder as "(a model folder)", the server's folders in an error replaced)."""
    base = s.base_model
    return {"run": s.name, "state": s.state, "method": s.method, "base_model": "(a model folder)" if base and looks_like_path(base) else base,
            "dataset": data_label(s.dataset), "step": s.step, "max_steps": s.max_steps, "last_loss": s.last_loss,
            "best_eval_loss": s.best_eval_loss, "output": s.output, "error": scrub_paths(s.error, runs_dir) if s.error else s.error,
            "task_accuracy": dict(s.task_scores or {}), "resumable": s.resumable,
            "restartable": s.restartable}


def _json(value: Any) -> str:
    # JSON text, not a Python repr: gradio's MCP server hands a tool's return value to the assistant as text
    return json.dumps(value, ensure_ascii=False, default=str)


def tools(jobs: JobManager, *, allow_control: bool = True, allow_local_models: bool = False) -> list[Callable[..., Any]]:
    """The tool functions, bound to the app's job manager. allow_control: offer start/stop of training runs (with an
    owner key per run on a shared app, see the module docstring)."""
    from ..estimator.handoff import check_ui_estimator_model, check_ui_model_ref, check_ui_train_config

    def estimate_memory(model: str = "builtin:compact-mini", task: Task = "qlora", batch: int = 1, seq_len: int = 512,
                        grad_ckpt: bool = True) -> str:
        """Estimate the GPU/CPU memory a job needs before running it, and whether it fits common cards (T4 16 GB, 24 GB, ...).

        Use this first when someone asks "can I fine-tune / run model X on my GPU?". Counts parameters exactly from the
        model's architecture (no weights are downloaded).

        Args:
            model: a built-in model (builtin:compact-mini), a catalog name, or a Hugging Face model id such as Qwen/Qwen2.5-0.5B.
            task: one of inference, full, lora, qlora (LoRA on a 4-bit base: the smallest way to fine-tune).
            batch: sequences per forward/backward pass (micro batch).
            seq_len: tokens per sequence.
            grad_ckpt: gradient checkpointing (recompute activations in backward: much less memory, ~30% slower).
        Returns:
            total_gib (what nvidia-smi would show), the breakdown per term in GiB, the verdict per hardware tier (fits / tight / no), notes.
        """
        from ..config import MemoryQuery
        from ..estimator import memory

        run_access.check_run_access(jobs.runs_dir, model, None, "estimate", owner_only=jobs.owner_only)
        with visitor_scope(None):  # an MCP caller has no uploads: no server file, and the same answer whether it exists
            ref = check_ui_estimator_model(model, None)
            est = memory.estimate(MemoryQuery(model=ref, task=task, batch=int(batch), seq_len=int(seq_len), grad_ckpt=bool(grad_ckpt)))
        return _json({"model": est.model, "task": task, "params": est.params, "trainable_params": est.trainable_params,
                      "total_gib": round(est.total_gib, 3), "breakdown_gib": {k: round(v, 3) for k, v in est.breakdown_gib.items()},
                      "verdict_per_tier": est.tiers, "notes": list(est.notes)})

    def list_models() -> str:
        """List the models this app can train or generate with: built-in models, the catalog of Hub models, and finished runs.

        Returns:
            {"train": [...references for start_training's base_model], "generate": [...references for generate]}.
        """
        from . import choices

        return _json({"train": choices.train_model_choices(jobs), "generate": choices.playground_models(jobs)})

    def list_runs() -> str:
        """List the training runs (newest first) with their state (running, finished, stopped, failed), progress and losses.

        Returns:
            one record per run: run name, state, method, base model, dataset, step / max_steps, last and best eval loss, task accuracy.
        """
        return _json([public_summary(s, jobs.runs_dir) for s in jobs.list_runs()])

    def training_status(run: str) -> str:
        """The state and latest numbers of one training run; call it again to follow a run started with start_training.

        Args:
            run: the run name (as returned by start_training or list_runs).
        Returns:
            state (running, finished, stopped, failed, killed), step / max_steps, last loss, eval loss, error message if it failed.
        """
        if not run:
            raise EngineError("Give the run name (list_runs shows them).")
        run_access.check_run_access(jobs.runs_dir, run, None, "watch", plain=True, owner_only=jobs.owner_only)
        return _json(public_summary(jobs.status(run), jobs.runs_dir))

    def generate(prompt: str, model: str = "builtin:compact-mini", max_new_tokens: int = 64, chat: bool = True) -> str:
        """Generate text with a model: a built-in model, a finished run (run:NAME) or a Hugging Face model id.

        Greedy decoding (reproducible). Use a finished run to check what fine-tuning taught the model.

        Args:
            prompt: the user's message (chat=True, put through the model's chat template) or text to continue (chat=False).
            model: builtin:NAME, run:NAME (a run's adapter on its base), run:NAME/merged, or a Hugging Face model id.
            max_new_tokens: the most tokens to generate (1 to 1024).
            chat: True to answer as a chat turn, False for a raw continuation.
        Returns:
            the generated text.
        """
        from ..config import GenerationSettings
        from ..inference.generate import stream_generate
        from .playground_load import load_for_playground

        if not (prompt or "").strip():
            raise EngineError("The prompt is empty.")
        with visitor_scope(None):
            ref = check_ui_model_ref(model, jobs.runs_dir, allow_local=allow_local_models)
            loaded = load_for_playground(jobs, ref, "none", allow_local_models=allow_local_models)
        settings = GenerationSettings(max_new_tokens=max(1, min(int(max_new_tokens), 1024)), do_sample=False)
        text = ""
        for update in stream_generate(loaded, prompt, settings, chat=bool(chat)):
            text = update.text
        return text

    def start_training(base_model: str = "builtin:compact-mini", dataset: str = "builtin:dates", method: Method = "full",
                       max_steps: int = 200, learning_rate: float = 0.001) -> str:
        """Start a training run in the background (one at a time). Follow it with training_status; keep the owner_key it returns.

        The defaults fine-tune the small built-in model on the built-in date-conversion task on a CPU in minutes. Check the
        memory first with estimate_memory for larger models.

        Args:
            base_model: builtin:NAME, a finished run (run:NAME) or a Hugging Face model id.
            dataset: builtin:dates, builtin:corpus, builtin:instructions, builtin:preferences (dpo, orpo, kto), builtin:feedback (kto),
                builtin:date-mistakes (dpo, orpo, kto: pairs of the base model's own date mistakes, made when the run starts) or
                hub:owner/name (a Hugging Face dataset).
            method: qlora (4-bit base + LoRA, least memory), lora, full (every weight), scratch (a built-in model from random weights),
                distill, or a preference/reward method: dpo, orpo (preference pairs), kto (answers labelled good or bad) or grpo (built-in rewards).
            max_steps: optimizer steps to train.
            learning_rate: peak learning rate (1e-3 for the built-in model, ~2e-4 for LoRA on Hub models).
        Returns:
            {"run": the new run's name, "owner_key": the key stop_training needs to stop this run, "message": ...}.
        """
        from ..config import TrainConfig
        from .finetune_form import FT_DEFAULTS

        cfg = TrainConfig(**{**FT_DEFAULTS, "base_model": base_model, "dataset": dataset, "method": method, "max_steps": int(max_steps),
                             "learning_rate": float(learning_rate)})
        key = MCP_OWNER_PREFIX + secrets.token_urlsafe(24)  # this run's owner: whoever holds the key (see the module docstring)
        with visitor_scope(None):
            check_ui_train_config(cfg, jobs.runs_dir, None, allow_local_models=allow_local_models)
            name = jobs.start(cfg, owner=key)
        return _json({"run": name, "owner_key": key, "message": t("gate.mcp.started", run=name)})

    def stop_training(run: str, owner_key: str = "") -> str:
        """Stop a running training run: it saves a checkpoint first (so it can be resumed), and is killed if it does not exit in time.

        Args:
            run: the run name.
            owner_key: the owner_key start_training returned for this run (needed on a shared app: only its starter may stop it).
        Returns:
            a confirmation message.
        """
        from .run_control import stop_run

        if not run:
            raise EngineError("Give the run name (list_runs shows them).")
        return stop_run(jobs, run, owner_key or None)

    out: list[Callable[..., Any]] = [estimate_memory, list_models, list_runs, training_status, generate]
    return out + ([start_training, stop_training] if allow_control else [])
