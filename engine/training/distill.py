"""Knowledge distillation: train a compact student to imitate a frozen teacher (method "distill").

The loss, per scored position (label != -100, after the usual causal shift), is

    alpha * T^2 * KL( softmax(teacher / T) || softmax(student / T) )  +  (1 - alpha) * CE(student, label)

(Hinton et al. 2015, as in the course). T > 1 softens both distributions so that the student also learns how
the teacher ranks the wrong tokens; the T^2 factor keeps the soft term's gradients on the scale of the hard
term's. Both terms are averaged over the same scored tokens (over the whole accumulated batch when the
Trainer passes `num_items_in_batch`), exactly like the model's own cross-entropy.

Who is who:
- the teacher is `TrainConfig.teacher_model`, loaded with `engine.models.loading.load_model` (built-in, pretrained on
  first use by engine/training/builtin.py, run:NAME, Hub id or folder), unquantized in the compute dtype, in eval mode, with no gradients;
- the student is `TrainConfig.base_model`. `builtin:NAME` builds that compact preset from random weights
  (sized by the preset) with the *teacher's* tokenizer and vocabulary, so the two output distributions
  cover the same tokens; any other reference is a pretrained model trained in full, which must share the
  teacher's vocabulary (e.g. two sizes of one model family).

Memory: transformers' Trainer has no distillation loss, so the loss is ours. The soft and hard terms are
computed only on the scored positions and in chunks of rows, with the gradient with respect to the student's
logits produced chunk by chunk in the forward pass (a custom autograd function, as fused-loss kernels do),
so the fp32 softmax copies of a large vocabulary never exist for the whole batch at once.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from transformers import Trainer

from ..config import QuantSettings, TrainConfig
from ..errors import ConfigError, EngineError
from ..runs import EventLog
from .builtin import Pretrain, ensure_builtin

log = logging.getLogger("engine.training.distill")

# fp32 values per chunk buffer (rows x vocabulary): 16M x 4 B = 64 MiB, and about five such buffers live at once, so the
# loss adds ~0.3 GiB at most whatever the vocabulary (110 rows of a 152k vocabulary, 8192 rows of a 2k one).
CHUNK_ELEMENTS = 2**24


# --------------------------------------------------------------------------------------------------
# The loss
# --------------------------------------------------------------------------------------------------


class DistillLoss(NamedTuple):
    """The training loss and its two parts (both already divided by the number of scored tokens)."""

    loss: torch.Tensor  # alpha * kd + (1 - alpha) * ce, differentiable w.r.t. the student logits
    kd: torch.Tensor  # T^2 * KL(teacher || student), detached
    ce: torch.Tensor  # cross-entropy on the labels, detached


class _DistillSum(torch.autograd.Function):
    """Sum over rows of alpha*T^2*KL + (1-alpha)*CE for (N, V) logits, with the gradient computed chunk by chunk.

    Forward returns (total, kd_sum, ce_sum); only `total` is differentiable. Backward multiplies the stored
    gradient (N, V), in the student's logits dtype, by the incoming scalar.
    """

    @staticmethod
    def forward(ctx: Any, s: torch.Tensor, t: torch.Tensor, y: torch.Tensor, temperature: float, alpha: float, chunk: int) -> Any:
        grad = torch.empty_like(s)
        kd_sum = torch.zeros((), dtype=torch.float32, device=s.device)
        ce_sum = torch.zeros((), dtype=torch.float32, device=s.device)
        T = float(temperature)
        for i in range(0, s.shape[0], chunk):
            sc = s[i : i + chunk].float()  # (n, V)
            tc = t[i : i + chunk].float()
            yc = y[i : i + chunk]
            rows = torch.arange(sc.shape[0], device=s.device)
            # hard term: -log p_student(label); d/ds = softmax(s) - onehot(label)
            logp = F.log_softmax(sc, dim=-1)
            ce_sum += -logp[rows, yc].sum()
            g_ce = logp.exp_()
            g_ce[rows, yc] -= 1.0
            # soft term: KL(q_t || q_s) at temperature T; d/ds = (q_s - q_t) / T, times the T^2 factor = T * (q_s - q_t)
            logq_t = F.log_softmax(tc / T, dim=-1)
            logq_s = F.log_softmax(sc / T, dim=-1)
            q_t = logq_t.exp()
            # where q_t == 0 (a -inf teacher logit) the term is 0 by convention, not 0 * -inf = nan
            kd_sum += torch.where(q_t > 0, q_t * (logq_t - logq_s), torch.zeros_like(q_t)).sum()
            g_kd = logq_s.exp_().sub_(q_t).mul_(T)
            grad[i : i + chunk] = (g_ce.mul_(1.0 - alpha).add_(g_kd, alpha=alpha)).to(s.dtype)
            del logp, g_ce, logq_t, logq_s, q_t, g_kd, sc, tc
        kd_sum = kd_sum * (T * T)
        total = alpha * kd_sum + (1.0 - alpha) * ce_sum
        ctx.save_for_backward(grad)
        ctx.mark_non_differentiable(kd_sum, ce_sum)
        return total, kd_sum, ce_sum

    @staticmethod
    def backward(ctx: Any, g_total: torch.Tensor, _g_kd: Any, _g_ce: Any) -> Any:
        (grad,) = ctx.saved_tensors
        return grad * g_total.to(grad.dtype), None, None, None, None, None


def distillation_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    temperature: float,
    alpha: float,
    num_items_in_batch: torch.Tensor | int | None = None,
    chunk_rows: int | None = None,
) -> DistillLoss:
    """KD loss of a causal LM batch: logits (B, T, V) of both models, labels (B, T) with -100 = not scored.

    Position t's logits predict label t+1 (the causal shift the models' own losses apply). Only positions
    whose shifted label is not -100 count. The sums are divided by `num_items_in_batch` when given (the
    Trainer's count of scored tokens over the whole accumulated batch), else by the scored tokens here.
    chunk_rows: positions computed at once (default: as many as fit CHUNK_ELEMENTS fp32 values per buffer).
    """
    if student_logits.shape[:-1] != labels.shape or teacher_logits.shape[:-1] != labels.shape:
        raise ValueError(f"logits {tuple(student_logits.shape)} / {tuple(teacher_logits.shape)} do not match labels {tuple(labels.shape)}")
    if student_logits.shape[-1] != teacher_logits.shape[-1]:
        raise ValueError(f"student and teacher logits have different vocabularies: {student_logits.shape[-1]} vs {teacher_logits.shape[-1]}")
    y = labels[:, 1:].to(student_logits.device)  # (B, T-1)
    mask = y != -100
    s = student_logits[:, :-1][mask]  # (N, V): only scored positions are ever copied to fp32
    t = teacher_logits[:, :-1].to(student_logits.device)[mask]
    y = y[mask]
    n = int(mask.sum())
    if n == 0:  # nothing scored in this batch (every label masked): a zero that still has a graph
        zero = student_logits.sum() * 0.0
        return DistillLoss(zero, zero.detach(), zero.detach())
    if int(y.max()) >= s.shape[-1] or int(y.min()) < 0:
        raise EngineError(f"A label id ({int(y.max())}) is outside the {s.shape[-1]}-token vocabulary shared by student and teacher.")
    chunk = chunk_rows or CHUNK_ELEMENTS // s.shape[-1]
    total, kd_sum, ce_sum = _DistillSum.apply(s, t, y, float(temperature), float(alpha), max(1, int(chunk)))
    denom = num_items_in_batch if num_items_in_batch is not None else n
    if torch.is_tensor(denom):
        denom = denom.to(total.device, torch.float32)
    return DistillLoss(total / denom, (kd_sum / denom).detach(), (ce_sum / denom).detach())


# --------------------------------------------------------------------------------------------------
# Teacher and student
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class DistillSetup:
    """Everything a distillation run needs besides the data: both models, the tokenizer, the shared vocabulary."""

    student: Any
    tokenizer: Any  # the student's (for a built-in student: a copy of the teacher's)
    teacher: Any  # frozen, eval mode
    vocab: int  # logits columns compared (the common output size of both models)
    context: int  # longest sequence both models accept
    student_config_path: Path | None  # config.json of a pretrained student (memory estimator), None for a built-in one
    teacher_config_path: Path | None


def output_size(model: Any) -> int:
    """Number of logits the model produces per position (its output embedding rows)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    if weight is not None and weight.ndim == 2:
        return int(weight.shape[0])
    return int(model.config.get_text_config().vocab_size)


def _context(model: Any, default: int) -> int:
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    for name in ("max_position_embeddings", "n_positions", "seq_length"):
        value = getattr(cfg, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return default


def load_teacher(cfg: TrainConfig, runs_dir: Path, dtype: torch.dtype, events: EventLog, *, pretrain: Pretrain) -> Any:
    """The teacher as a `LoadedModel`: unquantized in the compute dtype, frozen, in eval mode (a built-in teacher
    is pretrained with `pretrain` first if needed)."""
    from ..models.loading import load_model

    if cfg.teacher_model.startswith("builtin:"):
        ensure_builtin(cfg.teacher_model.split(":", 1)[1], runs_dir, parent_events=events, pretrain=pretrain)
    events.write("phase", phase=f"loading the teacher {cfg.teacher_model}")
    loaded = load_model(cfg.teacher_model, QuantSettings(mode="none", compute_dtype=cfg.precision), runs_dir=runs_dir,
                        trust_remote_code=cfg.trust_remote_code, allow_local_paths=True, dtype=dtype)
    teacher = loaded.model
    teacher.eval()  # no dropout: the soft targets must be the teacher's actual predictions
    teacher.requires_grad_(False)
    return loaded


def _build_compact_student(cfg: TrainConfig, teacher: Any, teacher_tok: Any) -> tuple[Any, Any]:
    """A compact preset from random weights, with the teacher's tokenizer and an output of the teacher's size."""
    from ..models.compact import new_compact_model

    tokenizer = copy.deepcopy(teacher_tok)  # saved with the student; the teacher's object stays as it was
    # logits column i must mean token i for both models: same size as the teacher's head, not len(tokenizer)
    student = new_compact_model(cfg.base_model.split(":", 1)[1], tokenizer, vocab_size=output_size(teacher), seed=cfg.seed)
    gen = getattr(teacher, "generation_config", None)
    if gen is not None and gen.eos_token_id is not None:  # e.g. chat models that also stop at <|im_end|>
        student.generation_config.eos_token_id = gen.eos_token_id
    return student, tokenizer


def _check_vocabularies(cfg: TrainConfig, student_tok: Any, teacher_tok: Any, student: Any, teacher: Any) -> int:
    """The number of logits to compare; ConfigError when the two models do not speak the same tokens."""
    vs, vt = output_size(student), output_size(teacher)
    if student_tok.get_vocab() != teacher_tok.get_vocab():
        raise ConfigError("teacher_model", cfg.teacher_model, allowed_key="error.allowed.teacher_vocab", owner="TrainConfig",
                          student=cfg.base_model, n_student=len(student_tok), n_teacher=len(teacher_tok))
    # Same tokenizer, different head sizes (padded vocabularies, e.g. 151936 vs 152064): compare the common columns,
    # which hold every real token.
    common = min(vs, vt)
    if len(teacher_tok) > common:
        raise ConfigError("teacher_model", cfg.teacher_model, allowed_key="error.allowed.teacher_logits", owner="TrainConfig",
                          n=len(teacher_tok), student=vs, teacher=vt)
    return common


def prepare_models(cfg: TrainConfig, runs_dir: Path, dtype: torch.dtype, events: EventLog, load_student: Callable[[], Any], *,
                   pretrain: Pretrain) -> DistillSetup:
    """Load the teacher, then build (builtin:NAME) or load (`load_student()`, anything else) the student.

    `pretrain` is run.py's run_training, for a built-in teacher not pretrained yet (see engine/training/builtin.py)."""
    teacher_loaded = load_teacher(cfg, runs_dir, dtype, events, pretrain=pretrain)
    teacher, teacher_tok = teacher_loaded.model, teacher_loaded.tokenizer
    if cfg.base_model.startswith("builtin:"):
        events.write("phase", phase=f"building the student {cfg.base_model} from random weights with the teacher's tokenizer")
        student, tokenizer = _build_compact_student(cfg, teacher, teacher_tok)
        student_cfg_path = None
    else:
        loaded = load_student()
        student, tokenizer, student_cfg_path = loaded.model, loaded.tokenizer, getattr(loaded, "config_path", None)
    vocab = _check_vocabularies(cfg, tokenizer, teacher_tok, student, teacher)
    context = min(_context(student, cfg.max_seq_len), _context(teacher, cfg.max_seq_len))
    n_s = sum(p.numel() for p in student.parameters())
    n_t = sum(p.numel() for p in teacher.parameters())
    events.write("distill", teacher=cfg.teacher_model, student=cfg.base_model, student_params=n_s, teacher_params=n_t,
                 vocab=vocab, temperature=cfg.distill_temperature, alpha=cfg.distill_alpha)
    return DistillSetup(student, tokenizer, teacher, vocab, context, student_cfg_path, teacher_loaded.config_path)


# --------------------------------------------------------------------------------------------------
# The Trainer
# --------------------------------------------------------------------------------------------------


class DistillTrainer(Trainer):
    """transformers' Trainer with the distillation loss in training; evaluation keeps the student's own
    cross-entropy, so that eval loss and perplexity stay comparable with the other methods' runs."""

    def __init__(self, *args: Any, distill: DistillSetup, temperature: float, alpha: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.teacher = distill.teacher
        self.vocab = distill.vocab
        self.temperature = temperature
        self.alpha = alpha
        placed = {str(d) for d in (getattr(self.teacher, "hf_device_map", None) or {}).values()}
        if len(placed) <= 1:  # one device: run the teacher where the student's batches are (each process under accelerate)
            self.teacher.to(self.args.device)
        self._parts: list[torch.Tensor] = []  # (kd, ce) per micro-batch since the last log

    def _teacher_device(self) -> torch.device:
        return next(self.teacher.parameters()).device

    def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False, num_items_in_batch: Any = None) -> Any:
        if not model.training:
            return super().compute_loss(model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch)
        labels = inputs["labels"]
        # no labels to the models: the student's own CE would be a second full-vocabulary pass for nothing
        feed = {k: v for k, v in inputs.items() if k != "labels"}
        dev = self._teacher_device()
        with torch.no_grad():
            t_logits = self.teacher(**{k: v.to(dev) if torch.is_tensor(v) else v for k, v in feed.items()}, use_cache=False).logits
        outputs = model(**feed, use_cache=False)
        V = self.vocab
        parts = distillation_loss(outputs.logits[..., :V], t_logits[..., :V], labels, temperature=self.temperature, alpha=self.alpha,
                                  num_items_in_batch=num_items_in_batch)
        del t_logits
        loss = parts.loss
        if num_items_in_batch is not None and self.args.average_tokens_across_devices and self.model_accepts_loss_kwargs:
            # mirror Trainer.compute_loss: num_items_in_batch counts the tokens of every process
            loss = loss * (self.accelerator.num_processes if self.args.n_gpu <= 1 else self.args.n_gpu)
        # per-micro-batch means of the two parts, for the progress events (kd_loss / ce_loss)
        scale = (float(num_items_in_batch) / max(1, int((labels[:, 1:] != -100).sum()))) if num_items_in_batch is not None else 1.0
        self._parts.append(torch.stack([parts.kd, parts.ce]) * scale)
        return (loss, outputs) if return_outputs else loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs and self._parts:
            kd, ce = torch.stack(self._parts).mean(0).tolist()
            logs["kd_loss"], logs["ce_loss"] = round(kd, 4), round(ce, 4)
            self._parts = []
        super().log(logs, start_time)


# --------------------------------------------------------------------------------------------------
# Memory prediction
# --------------------------------------------------------------------------------------------------


def estimate_distill(cfg: TrainConfig, dtype: str, *, student_config: Path | None = None, teacher_config: Path | None = None) -> Any:
    """The estimator's `MemoryEstimate` for a distillation run in `dtype` ("fp32" | "fp16" | "bf16"), or None.

    The estimator knows one model per query, so this adds two queries up: the student's full training (a
    built-in student with the teacher's vocabulary, as it will be built: the embedding and the logits grow with
    it) plus what the frozen teacher keeps during the student's step, its weights and its logits for one micro-batch.
    None when an architecture is unknown offline (a Hub id without internet, a run before it is loaded).
    """
    from ..config import MemoryQuery
    from ..estimator.handoff import query_from_train
    from ..estimator.memory import estimate
    from ..estimator.model_config import resolve
    from ..models.compact import load_compact_preset

    t_ref = str(teacher_config) if teacher_config else cfg.teacher_model
    s_ref = str(student_config) if student_config else cfg.base_model
    if t_ref.startswith("run:") or s_ref.startswith("run:"):
        return None  # a run's architecture is read from its folder once loaded (the training run passes its config.json)
    try:
        vocab = resolve(t_ref).vocab
        teacher = estimate(MemoryQuery(model=t_ref, task="inference", weight_precision=dtype, batch=cfg.micro_batch_size,
                                       seq_len=cfg.max_seq_len, new_tokens=0))
        with tempfile.TemporaryDirectory() as tmp:
            if not student_config and cfg.base_model.startswith("builtin:"):
                config = load_compact_preset(cfg.base_model.split(":", 1)[1])
                config.vocab_size = vocab
                s_ref = str(Path(tmp) / "config.json")
                config.to_json_file(s_ref)
            student = estimate(query_from_train(cfg, dtype, s_ref))
    except EngineError as exc:
        log.info("no memory prediction for this distillation: %s", exc)
        return None
    logits = cfg.micro_batch_size * cfg.max_seq_len * vocab * (4 if dtype == "fp32" else 2)
    extra = teacher.breakdown_gib.get("weights", 0.0) + logits / 2**30
    return dataclasses.replace(student, allocated_gib=student.allocated_gib + extra, total_gib=student.total_gib + extra,
                               notes=[*student.notes, f"Includes the frozen teacher {cfg.teacher_model}: {extra:.2f} GiB of weights and logits."])


def predict_memory(cfg: TrainConfig, device: Any, dtype: torch.dtype, setup: DistillSetup) -> dict[str, Any] | None:
    """The `memory` event of a distillation run (engine.training.run.predict_memory's format), None when unknown."""
    from ..hardware.device import dtype_name

    est = estimate_distill(cfg, dtype_name(dtype), student_config=setup.student_config_path, teacher_config=setup.teacher_config_path)
    if est is None:
        return None
    return {"predicted_gib": round(est.allocated_gib, 3), "predicted_total_gib": round(est.total_gib, 3), "device": device.name}
