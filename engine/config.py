"""Configuration dataclasses: the single source of truth for every job.

The UI form (app.py), the CLI flags (engine/cli.py) and the saved run config (`config.yaml`) are all
generated from and validated by these classes. Each field carries its help text and bounds in
`metadata`, once (`opt`); `Literal` annotations give the allowed choices. The machinery that reads them
(introspection, dict/flat round trips, range and choice checks) lives in engine/fields.py.
`__post_init__` validates and raises `ConfigError` naming the field, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from .errors import ConfigError
from . import i18n
from .fields import field_texts, opt, validate
from .refs import BUILTIN_PREFIX, check_hub_config, check_hub_ref, check_split, is_folder_safe_name, is_hub_ref, parse_columns
from .sharing import check_remote_code

# --------------------------------------------------------------------------------------------------
# Model loading
# --------------------------------------------------------------------------------------------------

# "int8-dynamic" is torch dynamic quantization (CPU inference only); the others are bitsandbytes.
QuantMode = Literal["none", "8bit", "4bit", "int8-dynamic"]
DtypeChoice = Literal["auto", "fp16", "bf16", "fp32"]


@dataclass
class QuantSettings:
    """How weights are loaded: unquantized, bitsandbytes 8-bit or 4-bit, or torch int8 dynamic (CPU)."""

    mode: QuantMode = opt(
        "none",
        "Weight quantization: none (16/32-bit), 8bit (bitsandbytes LLM.int8), 4bit (bitsandbytes, QLoRA) or "
        "int8-dynamic (torch dynamic int8 for CPU inference: ~4x smaller linear layers, usually faster on a CPU; "
        "not for GPUs or training).",
        label="Quantization",
        choices_help={
            "none": "Unquantized weights in the compute dtype.",
            "8bit": "bitsandbytes LLM.int8: about half of 16-bit memory; GPU or CPU.",
            "4bit": "bitsandbytes 4-bit (nf4/fp4): about a quarter of 16-bit memory; what QLoRA trains on.",
            "int8-dynamic": "torch dynamic int8 (torch.ao quantize_dynamic) of every Linear layer: CPU inference only, "
            "weights int8, activations quantized on the fly; a LoRA adapter is merged first.",
        },
    )
    quant_type: Literal["nf4", "fp4"] = opt(
        "nf4", "4-bit data type: nf4 (NormalFloat, best for normally distributed weights) or fp4.", label="4-bit type"
    )
    double_quant: bool = opt(
        True, "Quantize the quantization constants too (saves ~0.4 bit per parameter).", label="Double quantization"
    )
    compute_dtype: DtypeChoice = opt(
        "auto",
        "dtype used for matmuls and unquantized layers. auto: bf16 on Ampere+, fp16 on T4/older GPUs, fp32 on CPU.",
        label="Compute dtype",
    )

    def __post_init__(self) -> None:
        validate(self)
        # torch's dynamic int8 kernels take fp32 activations only: a 16-bit compute dtype cannot work there.
        if self.mode == "int8-dynamic" and self.compute_dtype not in ("auto", "fp32"):
            raise ConfigError(
                "quant.compute_dtype", self.compute_dtype, "auto or fp32 with int8-dynamic (its kernels compute in fp32)"
            )


# --------------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------------

Method = Literal["qlora", "lora", "full", "scratch", "distill"]


@dataclass
class LoraSettings:
    """LoRA adapter shape (peft)."""

    r: int = opt(16, "LoRA rank: size of the low-rank update. Higher = more capacity and memory.", min=1, max=512, step=1, label="LoRA rank r")
    alpha: int = opt(32, "LoRA alpha: the update is scaled by alpha / r.", min=1, max=2048, step=1, label="LoRA alpha")
    dropout: float = opt(0.05, "Dropout on the LoRA input during training.", min=0.0, max=0.9, step=0.01, label="LoRA dropout")
    targets: str = opt(
        "all-linear",
        "Which linear layers get adapters: 'all-linear', 'attention' (q,k,v,o), or a comma-separated list of module names.",
        label="LoRA targets",
    )
    use_rslora: bool = opt(False, "rsLoRA: scale the update by alpha / sqrt(r) instead of alpha / r (more stable at high ranks).", label="rsLoRA")
    use_dora: bool = opt(False, "DoRA: learn a magnitude per output besides the LoRA direction (often better quality, ~20% slower).", label="DoRA")

    def __post_init__(self) -> None:
        validate(self)
        t = self.targets.strip()
        if not t:
            raise ConfigError("lora.targets", self.targets, "'all-linear', 'attention' or a comma-separated list of module names")
        for name in t.split(","):
            if not name.strip().replace("_", "").replace(".", "").replace("-", "").isalnum():
                raise ConfigError("lora.targets", self.targets, "module names made of letters, digits, '_' and '.'")
        self.targets = ",".join(n.strip() for n in t.split(","))


@dataclass
class TrainConfig:
    """One training run: what to train, on what, and how. Saved as the run's config.yaml."""

    method: Method = opt(
        "lora",
        "qlora: 4-bit base + LoRA; lora: 16/32-bit base + LoRA; full: update every weight; scratch: train a compact model from random weights with its own tokenizer; "
        "distill: train a compact student (base model) to imitate a teacher model's output distribution (knowledge distillation).",
        label="Method",
    )
    base_model: str = opt(
        "builtin:compact-mini",
        "Built-in compact model (builtin:NAME), a finished run (run:NAME), a Hugging Face id, or a local model folder. For 'scratch' this names the compact preset (builtin:NAME); for 'distill' it is the student.",
        label="Base model",
    )
    teacher_model: str = opt(
        "",
        "Teacher for method 'distill' (ignored otherwise): a built-in model (builtin:NAME), a finished run (run:NAME), a Hugging Face id or "
        "a local model folder. It is frozen and loaded unquantized in the compute dtype. The student is the base model: builtin:NAME builds "
        "that compact preset from random weights with the teacher's tokenizer; any other model must share the teacher's vocabulary.",
        label="Teacher model (distill)",
    )
    distill_temperature: float = opt(
        2.0, "Distillation temperature T: both models' logits are divided by T before the softmax; T > 1 exposes the teacher's "
        "'dark knowledge' (how it ranks the wrong tokens). The soft term is multiplied by T^2 to keep its gradients comparable.",
        min=0.1, max=20.0, step=0.1, label="Distillation temperature",
    )
    distill_alpha: float = opt(
        0.5, "Weight of the soft term: loss = alpha * T^2 * KL(teacher || student) + (1 - alpha) * cross-entropy on the labels. "
        "1 = imitate the teacher only, 0 = ordinary training on the data.",
        min=0.0, max=1.0, step=0.05, label="Distillation alpha",
    )
    dataset: str = opt(
        "builtin:instructions",
        "Built-in sample (builtin:instructions, builtin:dates, builtin:corpus), a Hugging Face dataset (hub:owner/name, needs internet "
        "the first time) or the path of an uploaded .jsonl/.json/.csv/.txt/.parquet file.",
        label="Dataset",
    )
    hub_config: str = opt("", "Configuration (subset) of a Hub dataset, e.g. 'en'; empty = its default.", label="Hub config")
    hub_split: str = opt(
        "train", "Split of a Hub dataset, optionally sliced: train, train[:2000], train[:10%]. The whole split is downloaded once to the HF cache.",
        label="Hub split",
    )
    columns: str = opt(
        "",
        "Column mapping applied before format detection, target=source pairs: 'instruction=question, output=answer', 'text=body', "
        "'prompt=q, completion=a' or 'messages=conversation'. Targets: text, instruction, input, output, system, prompt, completion, "
        "messages, conversations. Empty = detect from the column names. Also applied to an eval dataset that has these columns.",
        label="Column mapping",
    )
    too_long: Literal["truncate", "drop"] = opt(
        "truncate", "Rows longer than the max sequence length: truncate them (the end is cut) or drop them (listed in the report). "
        "Plain-text data is cut into blocks instead.", label="Long rows",
    )
    eval_dataset: str = opt(
        "", "Evaluate on this dataset instead of holding out the eval fraction: a built-in sample, hub:owner/name or an uploaded file. Empty = use the eval fraction.",
        label="Eval dataset",
    )
    eval_split: str = opt("test", "Split of a Hub eval dataset (hub:...), optionally sliced: test, validation[:500].", label="Eval split (Hub)")
    max_seq_len: int = opt(256, "Longest training sequence in tokens; longer samples are truncated.", min=16, max=32768, step=16, label="Max sequence length")
    epochs: float = opt(3.0, "Passes over the data (ignored when max steps > 0).", min=0.01, max=1000, step=0.5, label="Epochs")
    max_steps: int = opt(0, "Stop after this many optimizer steps; 0 = use epochs.", min=0, max=10_000_000, step=1, label="Max steps")
    learning_rate: float = opt(2e-4, "Peak learning rate.", min=1e-7, max=1.0, label="Learning rate")
    lr_scheduler: Literal["linear", "cosine", "constant"] = opt("cosine", "Learning-rate schedule after warmup.", label="LR schedule")
    warmup_ratio: float = opt(0.05, "Fraction of the steps spent warming the learning rate up from 0.", min=0.0, max=0.5, step=0.01, label="Warmup ratio")
    micro_batch_size: int = opt(8, "Samples per forward/backward pass (the memory-relevant batch).", min=1, max=4096, step=1, label="Micro batch")
    grad_accum: int = opt(1, "Micro-batches accumulated per optimizer step (effective batch = micro batch x accumulation).", min=1, max=4096, step=1, label="Gradient accumulation")
    precision: DtypeChoice = opt(
        "auto", "Training precision. auto: bf16 on Ampere+, fp16 mixed precision on T4/older GPUs (never bf16), fp32 on CPU.", label="Precision"
    )
    grad_checkpointing: bool = opt(False, "Recompute activations in the backward pass: much less memory, ~30% slower.", label="Gradient checkpointing")
    optimizer: Literal["adamw", "adamw-8bit", "paged-adamw-8bit", "paged-adamw-32bit", "sgd"] = opt(
        "adamw", "Optimizer. 8-bit AdamW (bitsandbytes) stores its state in ~2 bytes per trainable parameter instead of 8.", label="Optimizer"
    )
    weight_decay: float = opt(0.0, "AdamW weight decay.", min=0.0, max=1.0, step=0.01, label="Weight decay")
    max_grad_norm: float = opt(1.0, "Clip the gradient norm to this value (0 = no clipping).", min=0.0, max=1000.0, label="Max grad norm")
    seed: int = opt(42, "Random seed for initialization, shuffling and dropout.", min=0, max=2**31 - 1, step=1, label="Seed")
    logging_steps: int = opt(5, "Write a progress event every N optimizer steps.", min=1, max=100_000, step=1, label="Log every")
    save_steps: int = opt(50, "Save a resumable checkpoint every N optimizer steps.", min=1, max=1_000_000, step=1, label="Checkpoint every")
    save_total_limit: int = opt(2, "Keep only the last K checkpoints.", min=1, max=100, step=1, label="Keep checkpoints")
    eval_steps: int = opt(
        0, "Measure the eval loss (and log sample generations) every N optimizer steps; 0 = at every checkpoint (save steps). "
        "Evaluating costs a pass over the eval set.", min=0, max=1_000_000, step=1, label="Eval every",
    )
    eval_fraction: float = opt(0.1, "Fraction of the data held out to measure eval loss (0 = none).", min=0.0, max=0.5, step=0.01, label="Eval fraction")
    train_on_prompt: bool = opt(False, "Also compute the loss on prompt tokens (default: responses only).", label="Train on prompt")
    packing: bool = opt(
        True,
        "Put several short samples in one row instead of padding each one: faster on short instruction/chat data. Samples "
        "never see each other (attention, positions and loss restart per sample), and a micro-batch still holds about "
        "micro batch samples, so an epoch has the same steps and learning-rate schedule as without packing. "
        "Plain-text data is always cut into full blocks.",
        label="Packing",
    )
    curriculum: Literal["none", "short-to-long", "column"] = opt(
        "none",
        "Order of the training samples: none (shuffled each epoch), short-to-long (by token count), or column (ascending by "
        "the numeric difficulty column). With a curriculum the samples are not shuffled, every epoch in the same order.",
        label="Curriculum",
        choices_help={
            "none": "Shuffled each epoch (the usual choice).",
            "short-to-long": "Shortest samples first, by token count.",
            "column": "Ascending by the numeric value in the difficulty column of the data.",
        },
    )
    difficulty_column: str = opt(
        "", "The numeric column that orders the samples when curriculum is 'column' (lowest first), e.g. 'difficulty'.",
        label="Difficulty column",
    )
    stop_at_loss: float = opt(0.0, "Finish early (saving the model) once the logged training loss is at or below this value; 0 = off.",
                              min=0.0, max=100.0, label="Stop at loss")
    early_stopping_patience: int = opt(
        0, "Finish early (saving the model) when the eval loss has not improved for this many evaluations in a row; 0 = off. "
        "Needs an eval set (eval fraction > 0 or an eval dataset). The saved model is the one at the stop; the checkpoint of the "
        "best evaluation is kept when one was saved at that step.", min=0, max=1000, step=1, label="Early stopping patience",
    )
    sample_generations: bool = opt(
        True, "At each evaluation, log a short greedy continuation of 2 eval prompts to TensorBoard (Text tab) and to the run's events.",
        label="Sample generations",
    )
    quant: QuantSettings = opt(QuantSettings(), "Quantization of the frozen base model: 4bit for qlora (set automatically), none or 8bit for lora.")
    lora: LoraSettings = opt(LoraSettings(), "LoRA adapter settings (qlora / lora).")
    trust_remote_code: bool = opt(False, "Run Python code shipped with a Hub model. Only for models you trust.", label="Trust remote code")
    run_name: str = opt("", "Name of the run folder; empty = generated from method and time.", label="Run name")

    def __post_init__(self) -> None:
        validate(self)
        check_remote_code(self.trust_remote_code)  # refused on a shared app, in the app and in its training subprocess alike
        if not self.base_model.strip():
            raise ConfigError("base_model", self.base_model, "a built-in name, run:NAME, a Hub id or a model folder")
        if not self.dataset.strip():
            raise ConfigError("dataset", self.dataset, "a built-in dataset name, hub:owner/name or an uploaded file")
        self._check_data_sources()
        if self.early_stopping_patience > 0 and self.eval_fraction == 0 and not self.eval_dataset:
            raise ConfigError("early_stopping_patience", self.early_stopping_patience,
                              "0 (off) without an eval set: set an eval fraction > 0 or an eval dataset to stop on eval loss")
        self.difficulty_column = self.difficulty_column.strip().lower()  # data.py lower-cases column names
        if self.curriculum == "column" and not self.difficulty_column:
            raise ConfigError("difficulty_column", self.difficulty_column, "the name of a numeric column of the data when curriculum is 'column'")
        if self.quant.mode == "int8-dynamic":
            raise ConfigError("quant.mode", self.quant.mode, "none, 8bit or 4bit for training (int8-dynamic is for CPU inference only)")
        if self.method == "qlora" and self.quant.mode != "4bit":
            self.quant = dataclasses.replace(self.quant, mode="4bit")  # QLoRA is LoRA on a 4-bit base, by definition
        if self.method in ("full", "scratch", "distill") and self.quant.mode != "none":
            raise ConfigError("quant.mode", self.quant.mode, "none for full fine-tuning / from scratch / distill (quantized weights cannot be trained; use qlora or lora)")
        if self.method == "lora" and self.quant.mode == "4bit":
            raise ConfigError("quant.mode", self.quant.mode, "none or 8bit with method 'lora' (LoRA on a 4-bit base is method 'qlora')")
        if self.method == "scratch" and not self.base_model.startswith(BUILTIN_PREFIX):
            raise ConfigError("base_model", self.base_model, "a built-in compact preset (builtin:NAME) when method is 'scratch'")
        self.teacher_model = self.teacher_model.strip()
        if self.method == "distill" and not self.teacher_model:
            raise ConfigError("teacher_model", self.teacher_model, "a teacher for method 'distill': builtin:NAME, run:NAME, a Hugging Face id or a model folder")
        name = self.run_name.strip()
        if name and not is_folder_safe_name(name):
            raise ConfigError("run_name", self.run_name, "letters, digits, '-', '_' and '.' only (it becomes a folder name)")
        self.run_name = name

    def _check_data_sources(self) -> None:
        self.dataset, self.eval_dataset = self.dataset.strip(), self.eval_dataset.strip()
        for name in ("dataset", "eval_dataset"):
            if is_hub_ref(getattr(self, name)):
                check_hub_ref(getattr(self, name), name)
        self.hub_config = check_hub_config(self.hub_config)
        self.hub_split = check_split(self.hub_split, "hub_split")
        self.eval_split = check_split(self.eval_split, "eval_split")
        self.columns = self.columns.strip()
        parse_columns(self.columns)


# --------------------------------------------------------------------------------------------------
# Generation
# --------------------------------------------------------------------------------------------------


@dataclass
class GenerationSettings:
    """Decoding settings for the playground and `python -m engine generate`."""

    # Class constants (not fields: no annotation). Each stop string costs a token-table precomputation in
    # HF's StopStringCriteria, and a list this long is already unusual.
    MAX_STOP_STRINGS = 8
    MAX_STOP_STRING_CHARS = 100

    max_new_tokens: int = opt(128, "Most tokens to generate (clamped to the model's context).", min=1, max=8192, step=1, label="Max new tokens")
    do_sample: bool = opt(True, "Sample from the distribution (on) or always take the most likely token (greedy, off).", label="Sampling")
    temperature: float = opt(0.8, "Sharpens (<1) or flattens (>1) the distribution when sampling.", min=0.01, max=5.0, step=0.05, label="Temperature")
    top_k: int = opt(50, "Sample only among the k most likely tokens (0 = off).", min=0, max=10_000, step=1, label="Top-k")
    top_p: float = opt(0.95, "Sample only among the most likely tokens whose probabilities add up to p (1 = off).", min=0.01, max=1.0, step=0.01, label="Top-p")
    repetition_penalty: float = opt(1.1, "Penalize tokens that already appeared (1 = off).", min=1.0, max=3.0, step=0.05, label="Repetition penalty")
    seed: int = opt(0, "Random seed for sampling (0 = a new random seed each time).", min=0, max=2**31 - 1, step=1, label="Seed")
    min_p: float = opt(
        0.0,
        "Sample only among tokens at least min_p times as likely as the most likely one (0 = off). Adapts to the model's confidence, unlike top-p.",
        min=0.0, max=1.0, step=0.01, label="Min-p",
    )
    no_repeat_ngram_size: int = opt(
        0, "Never repeat a sequence of this many tokens (0 = off). 3-4 stops loops; 1-2 also blocks normal repeated words.",
        min=0, max=20, step=1, label="No-repeat n-gram size",
    )
    stop_strings: str = opt(
        "",
        f"Strings that end the answer once generated, one per line (at most {MAX_STOP_STRINGS}, {MAX_STOP_STRING_CHARS} characters each; "
        "kept in the output). Write \\n for a newline, e.g. a line \\n\\n stops at a blank line.",
        label="Stop strings",
    )

    def __post_init__(self) -> None:
        if isinstance(self.stop_strings, (list, tuple)):  # Python callers may pass a list: store the text form
            self.stop_strings = "\n".join(str(s) for s in self.stop_strings)
        validate(self)
        stops = self.stop_list()  # raises on bad lines; keep the text as typed (the UI shows it back)
        if len(stops) > self.MAX_STOP_STRINGS:
            raise ConfigError("stop_strings", self.stop_strings, f"at most {self.MAX_STOP_STRINGS} stop strings, one per line (got {len(stops)})")

    def stop_list(self) -> list[str]:
        """The stop strings as a list: one per non-blank line, surrounding spaces dropped, `\\n`/`\\t` unescaped
        (a newline cannot be typed inside a one-per-line list otherwise), duplicates removed."""
        out: list[str] = []
        for line in str(self.stop_strings or "").splitlines():
            line = line.strip()
            if not line:
                continue
            if len(line) > self.MAX_STOP_STRING_CHARS:
                raise ConfigError("stop_strings", line, f"stop strings of at most {self.MAX_STOP_STRING_CHARS} characters each")
            stop = line.replace("\\n", "\n").replace("\\t", "\t")
            if stop not in out:
                out.append(stop)
        return out


# --- memory ---------------------------------------------------------------------------------------
# (The estimator's query. Owned by engine/estimator/memory.py's author: keep the keys equal to the CLI query format.)

Task = Literal["inference", "full", "lora", "qlora"]
WeightPrecision = Literal["auto", "fp32", "fp16", "bf16", "int8", "nf4", "fp4"]


@dataclass
class MemoryQuery:
    """One "will it fit?" question. Keys equal the `estimate --queries` JSONL format (engine/estimator/memory.py)."""

    model: str = opt("builtin:compact-mini", "Built-in preset, catalog name, Hugging Face id, path to a config.json, or manual:L=..,h=..,a=..,kv=..,i=..,v=..,tied=0|1.", label="Model")
    task: Task = opt("qlora", "inference (prompt + generated tokens), full fine-tune, LoRA on 16/32-bit weights, or QLoRA (LoRA on 4-bit weights).", label="Task")
    weight_precision: WeightPrecision = opt(
        "auto",
        "Storage of the base weights. auto: nf4 for QLoRA, bf16 for LoRA and inference, fp32 master weights for AMP full fine-tuning. int8/nf4/fp4 are bitsandbytes.",
        label="Weight precision",
    )
    double_quant: bool = opt(True, "4-bit double quantization: quantize the quantization constants too (~0.4 bit per weight less).", label="Double quant")
    training_precision: Literal["amp-fp16", "amp-bf16", "pure-bf16", "fp32"] = opt(
        "amp-bf16",
        "amp-*: autocast to 16-bit, trainable weights kept in fp32 (HF Trainer fp16/bf16=True); pure-bf16: everything in bf16, "
        "adapters and optimizer state included (litgpt bf16-true, torchtune); fp32: no autocast. Ignored for inference.",
        label="Training precision",
    )
    optimizer: Literal["adamw", "adamw-foreach", "adamw-8bit", "paged-adamw-8bit", "paged-adamw-32bit", "sgd", "adafactor"] = opt(
        "adamw",
        "AdamW (fused, as transformers 5 runs it) keeps 2 states per trainable weight (8 bytes in fp32); adamw-foreach (torch's default, "
        "transformers 4's adamw_torch) adds a state-sized temporary at the step; 8-bit AdamW ~2 bytes; paged variants live in unified memory "
        "and can spill to CPU RAM; SGD (no momentum, as HF's 'sgd') none; Adafactor factored second moments.",
        label="Optimizer",
    )
    lora_r: int = opt(16, "LoRA rank: each targeted linear layer gets r x (d_in + d_out) trainable weights.", min=1, max=1024, step=1, label="LoRA rank")
    lora_targets: str = opt(
        "all-linear",
        "'all-linear', 'attention', or a comma list of q,k,v,o,gate,up,down,lm_head (module names such as q_proj also work). "
        "In a JSON query it may also be a list.",
        label="LoRA targets",
    )
    lora_dropout: float = opt(0.05, "LoRA dropout (> 0 keeps a mask and a copy of each adapter's input for backward).", min=0.0, max=0.9, step=0.01, label="LoRA dropout")
    batch: int = opt(1, "Micro-batch size: sequences per forward/backward pass.", min=1, max=65536, step=1, label="Batch")
    seq_len: int = opt(512, "Tokens per sequence (training: padded length; inference: prompt length).", min=1, max=1_048_576, step=1, label="Sequence length")
    new_tokens: int = opt(256, "Tokens generated after the prompt (inference only).", min=0, max=1_048_576, step=1, label="New tokens")
    grad_ckpt: bool = opt(False, "Gradient checkpointing: keep only each layer's input and recompute the rest in backward (~30% slower).", label="Gradient checkpointing")
    attention: Literal["sdpa", "eager"] = opt("sdpa", "sdpa/flash keeps O(seq) per layer; eager materializes the seq x seq attention matrix.", label="Attention")
    chunked_loss: bool = opt(False, "Chunked cross-entropy (litgpt/torchtune style): no fp32 copy of the full logits.", label="Chunked loss")
    grad_accum: int = opt(1, "Gradient accumulation steps (effective batch = batch x accumulation; gradients are then kept between micro-batches).", min=1, max=65536, step=1, label="Gradient accumulation")

    def __post_init__(self) -> None:
        # A JSON query may give lora_targets as a list; store the canonical comma form (the CLI/UI use text).
        if isinstance(self.lora_targets, (list, tuple)):
            if not all(isinstance(t, str) for t in self.lora_targets):
                raise ConfigError("lora_targets", self.lora_targets, "a list of names such as ['q', 'v']")
            self.lora_targets = ",".join(t.strip() for t in self.lora_targets)
        validate(self)
        if not str(self.model).strip():
            raise ConfigError("model", self.model, "a built-in preset, catalog name, Hugging Face id, config.json path or manual:... architecture")
        if not str(self.lora_targets).strip():
            raise ConfigError("lora_targets", self.lora_targets, "'all-linear', 'attention' or a comma list such as 'q,v'")


# --- end memory -----------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------------
# GGUF export
# --------------------------------------------------------------------------------------------------

GgufType = Literal["f16", "q8_0", "q4_0"]


@dataclass
class GgufSettings:
    """How a model is written to GGUF for llama.cpp / Ollama (engine/export/gguf.py)."""

    type: GgufType = opt(
        "q8_0",
        "Weight type in the GGUF file: f16 (exact, 2 bytes a weight), q8_0 (8-bit blocks, ~1.06 bytes a weight, near-lossless) "
        "or q4_0 (4-bit blocks, ~0.56 bytes a weight, smallest; embeddings and output head stay q8_0).",
        label="GGUF type",
        choices_help={"f16": "16-bit floats: the reference, largest.", "q8_0": "8-bit blocks of 32: half of f16, almost no loss.",
                      "q4_0": "4-bit blocks of 32: a quarter of f16, some loss."},
    )
    preset: str = opt(
        "balanced", "Decoding preset (presets/generation.yaml) written as the Modelfile's PARAMETERs: precise, balanced or creative.",
        label="Decoding preset",
    )

    def __post_init__(self) -> None:
        validate(self)
        if not str(self.preset).strip():
            raise ConfigError("preset", self.preset, "a decoding preset name from presets/generation.yaml (precise, balanced, creative)")


# The dataclasses the web form and the CLI are generated from: their English labels and help become the language files'
# `field.*` keys (engine/i18n.py), translated in presets/lang/pt-BR.yaml.
FORM_CLASSES: list[type] = [TrainConfig, MemoryQuery, GenerationSettings, GgufSettings, QuantSettings]
i18n.register_fields(field_texts(FORM_CLASSES))
