"""TensorBoard event files in the run folder: scalars, the run config and sample generations.

`tensorboard --logdir runs/NAME/tensorboard` (or `--logdir runs` for every run side by side) shows:

    train/loss, train/perplexity, train/learning_rate, train/grad_norm, train/epoch   every logging step
    memory/peak_gib      torch max allocated on a GPU, peak process RSS on a CPU (as events.jsonl)
    eval/loss, eval/perplexity, eval/runtime ...                                      every evaluation
    samples (Text tab)   a greedy continuation of 2 fixed eval prompts, every evaluation
    config, args (Text tab)   the run's config.yaml and the Trainer's arguments

Built on transformers' own `TensorBoardCallback` (the `train/` and `eval/` tag names are its); we only add
what it lacks: perplexity, memory, samples, a writer fixed to tensorboardX (light: numpy + protobuf,
where `torch.utils.tensorboard` needs the whole tensorboard package), and a purge step on resume so that
steps logged after the last checkpoint by a killed run are hidden instead of drawn twice.

`read_logdir` parses the event files back (the TFRecord framing + tensorboardX's Event proto) without
the tensorboard package; tests use it, and so can anything that wants the numbers.
"""

from __future__ import annotations

import contextlib
import logging
import math
import struct
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerControl, TrainerState, TrainingArguments
from transformers.integrations import TensorBoardCallback

from ..hardware.device import DeviceInfo, peak_memory_gib
from ..runs import EventLog

log = logging.getLogger("engine.training.run")

TB_DIRNAME = "tensorboard"
SAMPLE_PROMPTS = 2
SAMPLE_NEW_TOKENS = 32
_PROMPT_FALLBACK_TOKENS = 32  # prompt length when an example has no masked prompt (plain text, train_on_prompt)
IGNORE_INDEX = -100


# --------------------------------------------------------------------------------------------------
# Sample generations
# --------------------------------------------------------------------------------------------------


def sample_prompts(examples: Sequence[dict[str, list[int]]], n: int = SAMPLE_PROMPTS) -> list[list[int]]:
    """Prompt token ids of the first `n` eval examples: the tokens before the first trained label.

    Instruction/chat data masks its prompt (labels -100), so this is exactly the prompt the model answers.
    Plain text, from-scratch blocks and `train_on_prompt` data train every token; there the first half of
    the example (at most 32 tokens) stands in for a prompt.
    """
    prompts = []
    for ex in list(examples)[:n]:
        ids, labels = list(ex["input_ids"]), list(ex.get("labels") or ex["input_ids"])
        first = next((i for i, label in enumerate(labels) if label != IGNORE_INDEX), 0)
        if first <= 0 or first >= len(ids):
            first = max(1, min(len(ids) // 2, _PROMPT_FALLBACK_TOKENS))
        if ids[:first]:
            prompts.append(ids[:first])
    return prompts


def generate_samples(model: Any, tokenizer: Any, prompts: Sequence[list[int]], *, max_new_tokens: int = SAMPLE_NEW_TOKENS,
                     autocast_dtype: torch.dtype | None = None) -> list[dict[str, str]]:
    """Greedy continuations of `prompts` by the model being trained, leaving it as it was found.

    Restores train/eval mode; passes `use_cache=True` to `generate` only (gradient checkpointing sets
    `config.use_cache = False` for training and that stays untouched); and, since `generate` runs 4-bit
    layers in eval mode without gradients, re-applies the bitsandbytes CPU-repack guard afterwards
    (design.md §6: backward through a repacked layer is silently wrong).
    """
    from transformers import GenerationConfig

    from ..models.bnb_safety import prepare_for_training

    was_training = model.training
    device = model.get_input_embeddings().weight.device
    max_pos = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    eos = tokenizer.eos_token_id
    gen_cfg = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, use_cache=True, eos_token_id=eos,
                               pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos)
    amp = torch.autocast(device.type, dtype=autocast_dtype) if autocast_dtype is not None and device.type == "cuda" else contextlib.nullcontext()
    out = []
    model.eval()
    try:
        with torch.no_grad(), amp:
            for prompt in prompts:
                if max_pos and len(prompt) + max_new_tokens > max_pos:  # learned positions: keep the prompt's end
                    prompt = prompt[-max(1, max_pos - max_new_tokens):]
                ids = torch.tensor([prompt], device=device)
                gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=gen_cfg)
                new = gen[0, ids.shape[1]:].tolist()
                out.append({"prompt": tokenizer.decode(prompt, skip_special_tokens=False),
                            "output": tokenizer.decode(new, skip_special_tokens=False)})
    finally:
        model.train(was_training)
        prepare_for_training(model)  # a no-op without 4-bit layers
    return out


def samples_markdown(samples: Sequence[dict[str, str]]) -> str:
    """TensorBoard's Text tab renders markdown: indented blocks keep template tokens like <|user|> visible."""

    def block(text: str) -> str:
        return "\n".join("    " + line for line in (text or " ").splitlines() or [" "])

    parts = []
    for i, s in enumerate(samples, 1):
        parts.append(f"**prompt {i}**\n\n{block(s['prompt'])}\n\n**greedy continuation**\n\n{block(s['output'])}")
    return "\n\n---\n\n".join(parts)


# --------------------------------------------------------------------------------------------------
# The callback
# --------------------------------------------------------------------------------------------------


class TensorBoardLogCallback(TensorBoardCallback):
    """transformers' TensorBoardCallback writing to `<run>/tensorboard` with tensorboardX, plus perplexity,
    peak memory and sample generations. Writes from the main process only (`accelerate launch`)."""

    def __init__(self, logdir: Path, device: DeviceInfo, *, tokenizer: Any = None, prompts: Sequence[list[int]] = (),
                 config_text: str = "", events: EventLog | None = None) -> None:
        super().__init__()
        self.logging_dir = str(logdir)  # fixed: never TENSORBOARD_LOGGING_DIR or a date-named folder
        self.device = device
        self.tokenizer = tokenizer
        self.prompts = [list(p) for p in prompts]
        self.config_text = config_text
        self.events = events

    def _open(self, purge_step: int | None) -> None:
        from tensorboardX import SummaryWriter

        # The file name is time-in-seconds + host; a suffix keeps a quick in-process resume from truncating
        # the previous file (tensorboardX opens it with "wb").
        self.tb_writer = SummaryWriter(logdir=self.logging_dir, purge_step=purge_step, flush_secs=30,
                                       filename_suffix=f".{uuid.uuid4().hex[:8]}")

    def _init_summary_writer(self, args: TrainingArguments) -> None:  # the parent's lazy (re)open
        self._open(None)

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any) -> None:
        if not state.is_world_process_zero:
            return
        if self.tb_writer is None:
            # Resuming from checkpoint N: hide what a killed run logged after N (steps > N are logged again now).
            self._open(state.global_step + 1 if state.global_step > 0 else None)
        super().on_train_begin(args, state, control, **kw)
        if self.config_text:
            self.tb_writer.add_text("config", "    " + self.config_text.replace("\n", "\n    "), state.global_step)

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, logs: dict | None = None, **kw: Any) -> None:
        if not state.is_world_process_zero:
            return
        logs = logs or {}
        extra = {}
        if _finite(logs.get("loss")) is not None and logs["loss"] < 50:
            extra["train/perplexity"] = math.exp(logs["loss"])
            mem = peak_memory_gib(self.device)
            if mem is not None:
                extra["memory/peak_gib"] = mem
        if _finite(logs.get("eval_loss")) is not None and logs["eval_loss"] < 50:
            extra["eval/perplexity"] = math.exp(logs["eval_loss"])
        super().on_log(args, state, control, logs=logs, **kw)  # opens the writer if needed, writes, flushes
        for tag, value in extra.items():
            self.tb_writer.add_scalar(tag, value, state.global_step)
        if extra:
            self.tb_writer.flush()

    def on_evaluate(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, metrics: dict | None = None,
                    model: Any = None, **kw: Any) -> None:
        if not state.is_world_process_zero or not self.prompts or model is None or self.tokenizer is None:
            return
        dtype = torch.bfloat16 if args.bf16 else torch.float16 if args.fp16 else None
        samples = generate_samples(model, self.tokenizer, self.prompts, autocast_dtype=dtype)
        if self.tb_writer is None:
            self._open(None)
        self.tb_writer.add_text("samples", samples_markdown(samples), state.global_step)
        self.tb_writer.flush()
        if self.events is not None:
            self.events.write("samples", step=state.global_step, samples=samples)

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any) -> None:
        # Keep the writer open: the final evaluation in train.py comes after the Trainer's loop ends.
        if self.tb_writer is not None:
            self.tb_writer.flush()

    def close(self) -> None:
        if self.tb_writer is not None:
            self.tb_writer.close()
            self.tb_writer = None


# --------------------------------------------------------------------------------------------------
# Reading event files back (no tensorboard package needed)
# --------------------------------------------------------------------------------------------------


@dataclass
class TensorBoardData:
    """What a logdir holds: scalars[tag] = [(step, value)], texts[tag] = [(step, text)], in file order."""

    scalars: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    texts: dict[str, list[tuple[int, str]]] = field(default_factory=dict)


def _records(path: Path) -> Iterator[bytes]:
    """TFRecord framing: u64 length, u32 masked crc32c(length), data, u32 masked crc32c(data). A torn last
    record (a run killed mid-write) ends the file; a corrupt one raises."""
    from tensorboardX.record_writer import masked_crc32c

    with open(path, "rb") as fh:
        while True:
            header = fh.read(12)
            if len(header) < 12:
                return
            (length,), (crc,) = struct.unpack("<Q", header[:8]), struct.unpack("<I", header[8:])
            if masked_crc32c(header[:8]) != crc:
                raise ValueError(f"{path}: corrupt record header")
            data, footer = fh.read(length), fh.read(4)
            if len(data) < length or len(footer) < 4:
                return
            if masked_crc32c(data) != struct.unpack("<I", footer)[0]:
                raise ValueError(f"{path}: corrupt record")
            yield data


def read_logdir(logdir: Path) -> TensorBoardData:
    """Scalars and texts of every event file under `logdir` (sorted by file name, i.e. by start time)."""
    from tensorboardX.proto.event_pb2 import Event

    out = TensorBoardData()
    for path in sorted(Path(logdir).rglob("*tfevents*")):
        for data in _records(path):
            event = Event.FromString(data)
            if not event.HasField("summary"):
                continue
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    out.scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
                elif value.metadata.plugin_data.plugin_name == "text" and value.tensor.string_val:
                    out.texts.setdefault(value.tag, []).append((event.step, value.tensor.string_val[0].decode("utf-8")))
    return out


def _finite(x: Any) -> float | None:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None
