"""The Playground panel's text and tables: the request sent to the model (chat or completion), the stats line under a
generation, the loaded model's line, regenerate's last turn, and the rows of the Batch, Evaluate and Export tabs."""

from __future__ import annotations

from typing import Any

from engine.views.choices import NO_ADAPTER


def generation_request(mode: str, system: str, history: list[dict[str, Any]], prompt: str) -> Any:
    """Chat messages (system prompt, the conversation so far, the new prompt) in chat mode; the raw prompt in completion mode."""
    if mode == "chat":
        return ([{"role": "system", "content": system}] if system.strip() else []) + history + [{"role": "user", "content": prompt}]
    return prompt


def stats_line(upd: Any) -> str:
    """Tokens, speed, time to first token (and at the end: peak memory, why it ended, notes) of a streamed generation."""
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


def model_info(loaded: Any) -> str:
    """What is loaded, how long it took, its footprint and where it lives."""
    return f"**{loaded.ref}** · loaded in {loaded.load_seconds:.1f}s · {loaded.footprint_gib:.3f} GiB · {loaded.where}"


def drop_last_turn(history: list[dict[str, Any]] | None) -> tuple[list[dict[str, Any]], str] | None:
    """For Regenerate: the conversation without its last answer and last prompt, and that prompt's text (None: nothing to regenerate)."""
    history = list(history or [])
    while history and history[-1]["role"] == "assistant":
        history.pop()
    if not history:
        return None
    last = history.pop()
    text = last["content"] if isinstance(last["content"], str) else " ".join(p.get("text", "") for p in last["content"] if isinstance(p, dict))
    return history, text


def batch_rows(prog: Any) -> list[list[Any]]:
    """The Batch tab's table: #, prompt, output, tokens, seconds."""
    return [[r.index + 1, r.prompt, r.output, r.tokens, round(r.seconds, 2)] for r in prog.rows]


def batch_line(prog: Any) -> str:
    """Progress of a batch generation, ending with 'stopped' or 'done' once it is over."""
    line = f"{prog.done}/{prog.total} prompts · micro batch {prog.micro_batch} · {prog.elapsed:.1f}s" + ("".join(f" · {n}" for n in prog.notes))
    if prog.finished or prog.stopped:
        line += " · stopped" if prog.stopped else " · done"
    return line


def model_label(ref: str, extra: tuple) -> str:
    """The model's name in the Evaluate table, with its adapter when one is applied (extra: adapter, placement, budget)."""
    return f"{ref} + adapter {extra[0]}" if extra and extra[0] not in (None, "", NO_ADAPTER) else ref


def evaluation_row(kind: str, loaded: Any, label: str, text: str | None, dataset: str, window: float, stride: float) -> list[Any]:
    """One row of the Evaluate table: perplexity ('ppl': of the text, or of the dataset when the text is empty) or the
    date task's accuracy ('acc')."""
    from engine.inference.evaluate import dataset_perplexity, perplexity, task_accuracy

    if kind == "ppl":
        kw = {"window": int(window) or None, "stride": int(stride) or None}
        res = perplexity(loaded, [text], **kw) if (text or "").strip() else dataset_perplexity(loaded, dataset, **kw)
        return [label, "perplexity", round(res.ppl, 3), res.summary()]
    score = task_accuracy(loaded)
    return [label, "date-task accuracy", round(score.accuracy, 3), score.summary()]


def onnx_rows(result: dict[str, Any]) -> list[list[Any]]:
    """The ONNX-versus-PyTorch checks as (check, value) rows, scalars only."""
    return [[k, v if not isinstance(v, float) else round(v, 6)] for k, v in result.items() if not isinstance(v, (list, dict))]
