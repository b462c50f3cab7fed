"""Configuration dataclasses: the single source of truth for every job.

The UI form (ui/), the CLI flags (engine/cli.py) and the saved run config (`config.yaml`) are all
generated from and validated by these classes. Each field carries in its `metadata`, once (`opt`), a one-sentence plain
help, its label, bounds and expert detail (docs/settings.md is generated from them); `Literal`s give the choices. The machinery that reads them
(introspection, dict/flat round trips, range and choice checks) lives in engine/fields.py.
`__post_init__` validates and raises `ConfigError` naming the field, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from . import i18n
from .errors import ConfigError
from .fields import field_texts, opt, settings_markdown, validate
from .mix_config import MixConfig
from .objectives import OBJECTIVE_METHODS, REWARD_METHODS, parse_rewards
from .refs import BUILTIN_PREFIX, check_hub_config, check_hub_ref, check_split, is_folder_safe_name, is_hub_ref, parse_columns
from .sharing import check_remote_code

# --- Model loading ---------------------------------------------------------------------------------

# "int8-dynamic" is torch dynamic quantization (CPU inference only); the others are bitsandbytes.
QuantMode = Literal["none", "8bit", "4bit", "int8-dynamic"]
DtypeChoice = Literal["auto", "fp16", "bf16", "fp32"]

# --- Several GPUs (issue 28): TrainConfig.distributed and MemoryQuery.distributed ---
Distributed = Literal["none", "ddp", "fsdp"]
DISTRIBUTED_HELP = {
    "none": "One process on one GPU or the CPU.",
    "ddp": "Data parallel: each GPU trains a whole copy of the model on its own micro-batches.",
    "fsdp": "Fully sharded data parallel: the weights, gradients and optimizer state are split across the GPUs.",
}


@dataclass
class QuantSettings:
    """How weights are loaded: unquantized, bitsandbytes 8-bit or 4-bit, or torch int8 dynamic (CPU). The Playground's *Load as*, `generate --quant-mode`."""

    mode: QuantMode = opt(
        "none", "Loads the weights in fewer bits to save memory: 8bit needs half, 4bit a quarter, and int8-dynamic speeds up answers on a CPU.",
        label="Quantization", details="Quantization of the frozen weights; bitsandbytes for 8bit and 4bit, torch for int8-dynamic.",
        choices_help={
            "none": "Unquantized weights in the compute dtype.",
            "8bit": "bitsandbytes LLM.int8: about half of 16-bit memory; GPU or CPU.",
            "4bit": "bitsandbytes 4-bit (nf4/fp4): about a quarter of 16-bit memory; what QLoRA trains on.",
            "int8-dynamic": "torch dynamic int8 (torch.ao quantize_dynamic) of every Linear layer: CPU inference only (about 4x smaller "
            "linear layers, usually faster on a CPU), weights int8, activations quantized on the fly; a LoRA adapter is merged first.",
        },
    )
    quant_type: Literal["nf4", "fp4"] = opt("nf4", "The 4-bit number format; nf4 is the usual and better choice.", label="4-bit type",
                                            details="nf4 (NormalFloat 4, QLoRA's choice) suits normally distributed weights; fp4 is a plain 4-bit float.")
    double_quant: bool = opt(True, "Squeezes 4-bit weights a little further at almost no cost; leave it on.", label="Double quantization",
                             details="Quantizes the quantization constants too (bnb_4bit_use_double_quant): about 0.4 bit less per parameter.")
    compute_dtype: DtypeChoice = opt(
        "auto", "The number format for the math; auto picks the best one your hardware supports.", label="Compute precision",
        details="dtype of the matmuls and unquantized layers. auto: bf16 on Ampere or newer GPUs, fp16 on a T4 or older GPU, bf16 on a CPU "
        "with fast bf16 (AMX), else fp32. int8-dynamic computes in fp32 only.",
    )

    def __post_init__(self) -> None:
        validate(self)
        # torch's dynamic int8 kernels take fp32 activations only: a 16-bit compute dtype cannot work there.
        if self.mode == "int8-dynamic" and self.compute_dtype not in ("auto", "fp32"):
            raise ConfigError.of("quant.compute_dtype", self.compute_dtype, "int8_dtype", "TrainConfig")


# --- Training --------------------------------------------------------------------------------------

Method = Literal["qlora", "lora", "full", "scratch", "distill", "dpo", "orpo", "kto", "grpo"]

# --- Preference and reward tuning (DPO, ORPO, GRPO: issue 27): the method names and the reward list, engine/objectives.py
Tuning = Literal["lora", "qlora", "full"]


@dataclass
class LoraSettings:
    """LoRA adapter shape (peft)."""

    r: int = opt(16, "Size of the LoRA adapters: bigger can learn more but uses more memory; 8 to 64 is typical.", min=1, max=512, step=1,
                 label="LoRA rank", details="Rank of the low-rank update: each targeted linear layer gets r x (d_in + d_out) trainable weights.")
    alpha: int = opt(32, "How strongly the adapters change the model; twice the rank is a common choice.", min=1, max=2048, step=1,
                     label="LoRA alpha", details="The update is scaled by alpha / r (alpha / sqrt(r) with rsLoRA).")
    dropout: float = opt(0.05, "Randomly hides part of the adapters' input while training, which helps against overfitting.", min=0.0, max=0.9,
                         step=0.01, label="LoRA dropout", details="Dropout on the LoRA input during training (peft lora_dropout); 0 turns it off.")
    targets: str = opt("all-linear", "Which layers get adapters: all-linear for the best quality, attention for less memory, or a list of layer names.",
                       label="LoRA targets", details="'all-linear' (every linear layer but the output head), 'attention' (q, k, v, o) or a "
                       "comma-separated list of module names such as q_proj,v_proj.")
    use_rslora: bool = opt(False, "A steadier adapter scaling that helps at large ranks, 64 and up.", label="rsLoRA",
                           details="Rank-stabilized LoRA: scales the update by alpha / sqrt(r) instead of alpha / r.")
    use_dora: bool = opt(False, "A LoRA variant that often learns a bit better but trains about 20% slower.", label="DoRA",
                         details="Weight-decomposed LoRA: learns a magnitude per output besides the LoRA direction.")

    def __post_init__(self) -> None:
        validate(self)
        t = self.targets.strip()
        if not t:
            raise ConfigError.of("lora.targets", self.targets, "lora_targets", "TrainConfig")
        for name in t.split(","):
            if not name.strip().replace("_", "").replace(".", "").replace("-", "").isalnum():
                raise ConfigError.of("lora.targets", self.targets, "module_names", "TrainConfig")
        self.targets = ",".join(n.strip() for n in t.split(","))


@dataclass
class TrainConfig:
    """One training run: what to train, on what, and how (the Fine-tune panel, `python -m engine train`). Saved as the run's config.yaml."""

    method: Method = opt(
        "lora", "How to train: small LoRA adapters, the same on a 4-bit model to save memory, every weight, a new model from scratch, or distill.",
        label="Method",
        choices_help={
            "qlora": "LoRA adapters on a 4-bit base model (bitsandbytes): the least memory.",
            "lora": "LoRA adapters on a 16/32-bit base model: only the adapters (a few MB) are trained and saved.",
            "full": "Updates every weight: the most memory; the whole model is saved.",
            "scratch": "Trains a compact model (base model builtin:NAME) from random weights with its own tokenizer.",
            "distill": "Knowledge distillation: the base model (the student) learns to imitate a teacher model's output distribution.",
            "dpo": "Direct Preference Optimization (trl): learns from pairs of a better and a worse answer, against a frozen reference.",
            "orpo": "ORPO (trl.experimental.orpo): learns the better answer and, in the same loss, to prefer it over the worse one; no reference model.",
            "kto": "KTO (trl): learns from answers marked good or bad one at a time (thumbs-up/down data; pairs work too), against a frozen reference.",
            "grpo": "GRPO (trl): writes several answers to each prompt, scores them with built-in rewards, and learns from the better ones.",
        },
    )
    base_model: str = opt(
        "builtin:compact-mini", "The model you start from: a built-in model, one of your finished runs, a Hugging Face id or a model folder.",
        label="Base model", details="builtin:NAME, run:NAME, a Hugging Face id (owner/name) or a local model folder. For scratch it names the "
        "compact preset (builtin:NAME); for distill it is the student.",
    )
    teacher_model: str = opt(
        "", "Only for distill: the bigger model whose answers the base model learns to copy.", label="Teacher model (distill)",
        details="builtin:NAME, run:NAME, a Hugging Face id or a local model folder; frozen and loaded unquantized in the compute dtype. "
        "A builtin:NAME student is built from random weights with the teacher's tokenizer; any other student must share its vocabulary.",
    )
    distill_temperature: float = opt(
        2.0, "Only for distill: above 1, the student also learns how the teacher ranks its second guesses; 2 is a good start.",
        min=0.1, max=20.0, step=0.1, label="Distillation temperature", details="Both models' logits are divided by T before the softmax; "
        "T > 1 exposes the teacher's 'dark knowledge'. The soft term is multiplied by T^2 to keep its gradients comparable.",
    )
    # --- Preference and reward tuning (dpo, orpo, grpo) ---
    tuning: Tuning = opt(
        "lora", "Only for dpo, orpo, kto and grpo: which weights learn: small LoRA adapters, LoRA on a 4-bit model, or every weight.",
        label="Weights (dpo/orpo/kto/grpo)", details="What the methods lora, qlora and full are for supervised training. With LoRA "
        "and QLoRA, DPO's and KTO's reference model is the base with the adapter switched off (no second copy in memory); a full DPO run keeps a "
        "frozen copy of the starting model.",
        choices_help={"lora": "LoRA adapters on a 16/32-bit base model.", "qlora": "LoRA adapters on a 4-bit base model (bitsandbytes).",
                      "full": "Every weight; DPO keeps a frozen copy of the starting model as its reference."},
    )
    beta: float = opt(
        0.1, "Only for dpo, orpo and kto: how strongly the preference counts; 0.1 is the usual start.", min=0.001, max=10.0, step=0.01,
        label="Beta (dpo, orpo, kto)", details="DPO and KTO: the inverse temperature of the implicit reward (higher keeps the model "
        "closer to the reference). ORPO: the weight lambda of the odds-ratio term added to the chosen answer's cross-entropy.",
    )
    reward: str = opt(
        "dates", "Only for grpo: the built-in rewards that score each answer, with optional weights, e.g. dates or dates, format:0.5.",
        label="Rewards (grpo)", details="Comma-separated name[:weight] of built-in rewards (never your own code): dates (1 when the first "
        "line is exactly the expected ISO date, from the date task's scorer), date_parts (a third for each of year, month and day in "
        "the right place: partial credit, much less sparse), format (1 for a well-formed YYYY-MM-DD first line), length (0 down to -1 as "
        "the answer grows past a short first line). The weighted sum is the reward.",
    )
    num_generations: int = opt(
        8, "Only for grpo: how many answers the model writes to each prompt to compare them; more gives a steadier signal.", min=2,
        max=64, step=1, label="Answers per prompt (grpo)", details="The group size G: advantages are each answer's reward minus its "
        "group's mean. Micro batch x gradient accumulation must be a multiple of it (that many answers per step).",
    )
    max_completion_length: int = opt(
        16, "Only for grpo: the longest answer the model writes while training, in tokens.", min=1, max=8192, step=1,
        label="Max answer length (grpo)", details="Generation stops at the end token or here; the KV cache and logits of every answer "
        "grow with it (the memory estimate counts them).",
    )
    sampling_temperature: float = opt(
        1.0, "Only for grpo: how varied the model's answers are while it explores; higher tries more different answers.", min=0.05,
        max=3.0, step=0.05, label="Sampling temperature (grpo)", details="Temperature of the sampling that writes the answers; a group "
        "of identical answers has no advantage to learn from.",
    )
    # --- end preference and reward tuning ---
    distill_alpha: float = opt(
        0.5, "Only for distill: how much to copy the teacher, from 0 for only the data's answers to 1 for only the teacher.", min=0.0,
        max=1.0, step=0.05, label="Distillation alpha", details="loss = alpha * T^2 * KL(teacher || student) + (1 - alpha) * cross-entropy.",
    )
    dataset: str = opt(
        "builtin:instructions", "The data to learn from: a built-in sample, a Hugging Face dataset named hub:owner/name, or a file you uploaded.",
        label="Dataset", details="Built-in samples: builtin:instructions, builtin:dates, builtin:corpus. A Hub dataset needs internet the "
        "first time. Files: .jsonl, .json, .csv, .txt or .parquet.",
    )
    hub_config: str = opt("", "For a Hub dataset with several subsets: which one to use, e.g. en; leave empty for its default.",
                          label="Hub subset", details="The dataset's configuration (the name argument of datasets.load_dataset).")
    hub_split: str = opt("train", "Which part of a Hub dataset to use, e.g. train, or train[:2000] for its first 2,000 rows.", label="Hub split",
                         details="Optionally sliced: train[:2000], train[:10%], train[100:200]. The whole split is downloaded once to the HF cache.")
    columns: str = opt(
        "", "Only if your columns have other names: say which is which, e.g. instruction=question, output=answer; empty means detect.",
        label="Column mapping", details="target=source pairs applied before format detection: 'instruction=question, output=answer', "
        "'text=body', 'prompt=q, completion=a' or 'messages=conversation'. Targets: text, instruction, input, output, system, prompt, "
        "completion, messages, conversations. Also applied to an eval dataset that has these columns.",
    )
    too_long: Literal["truncate", "drop"] = opt(
        "truncate", "What to do with examples longer than the max sequence length: cut their end, or leave them out.", label="Long rows",
        details="Plain-text data is cut into blocks instead.",
        choices_help={"truncate": "The end of the row is cut.", "drop": "The row is left out and listed in the data report."},
    )
    eval_dataset: str = opt("", "A separate dataset to check progress on; leave empty to set aside part of the training data instead.",
                            label="Eval dataset", details="A built-in sample, hub:owner/name or an uploaded file.")
    eval_split: str = opt("test", "Which part of a Hub eval dataset to use, e.g. test or validation[:500].", label="Eval split (Hub)")
    max_seq_len: int = opt(256, "The longest example the model trains on, in tokens; a larger value needs more memory.", min=16, max=32768,
                           step=16, label="Max sequence length", details="Longer rows are truncated or dropped (Long rows); plain text is "
                           "cut into blocks of this length.")
    epochs: float = opt(3.0, "How many times to go through the whole dataset; not used when max steps is above 0.", min=0.01, max=1000,
                        step=0.5, label="Epochs", details="Fractions are allowed: 0.5 is half of the data.")
    max_steps: int = opt(0, "Stop after this many training steps; 0 means use epochs instead.", min=0, max=10_000_000, step=1,
                         label="Max steps", details="One step is one optimizer update, on micro batch x gradient accumulation samples.")
    learning_rate: float = opt(2e-4, "How big each update is: lower it if the loss jumps around, raise it if the loss barely moves.", min=1e-7,
                               max=1.0, label="Learning rate", details="The peak learning rate, reached after the warmup. Usual: 0.0001 to "
                               "0.0003 for LoRA and QLoRA, 0.00001 to 0.00005 for full fine-tuning.")
    lr_scheduler: Literal["linear", "cosine", "constant"] = opt(
        "cosine", "How the learning rate changes after the warmup; cosine is a safe choice.", label="Learning-rate schedule",
        choices_help={"linear": "Decreases in a straight line to 0.", "cosine": "Decreases along a half cosine to 0.", "constant": "Stays at the peak."},
    )
    warmup_ratio: float = opt(0.05, "Share of the training spent raising the learning rate slowly from 0, for a calmer start.", min=0.0,
                              max=0.5, step=0.01, label="Warmup", details="A fraction of the steps: 0.05 is the first 5%.")
    micro_batch_size: int = opt(8, "Examples processed at once; lower it first when you run out of memory.", min=1, max=4096, step=1,
                                label="Micro batch", details="Samples per forward/backward pass: the batch that sets activation memory.")
    grad_accum: int = opt(1, "Adds up this many micro batches before each update, for a bigger batch without more memory.", min=1, max=4096,
                          step=1, label="Gradient accumulation", details="Effective batch = micro batch x gradient accumulation.")
    precision: DtypeChoice = opt(
        "auto", "The number format for training; auto picks the best one your hardware supports.", label="Precision",
        details="auto: bf16 on Ampere or newer GPUs, fp16 mixed precision on a T4 or older GPU (never bf16), bf16 autocast on a CPU "
        "with fast bf16 (AMX), else fp32. Model families that overflow in fp16 get fp32 on a GPU without bf16.",
    )
    grad_checkpointing: bool = opt(False, "Saves a lot of memory for about 30% slower training; turn it on when memory runs short.",
                                   label="Gradient checkpointing", details="Recomputes each layer's activations in the backward pass.")
    optimizer: Literal["adamw", "adamw-8bit", "paged-adamw-8bit", "paged-adamw-32bit", "sgd"] = opt(
        "adamw", "The method that updates the weights; adamw is the usual choice, the 8-bit ones save memory on a GPU.", label="Optimizer",
        choices_help={"adamw": "AdamW: 2 states per trainable weight, 8 bytes in fp32.",
                      "adamw-8bit": "bitsandbytes 8-bit AdamW: about 2 bytes per trainable weight.",
                      "paged-adamw-8bit": "8-bit AdamW in paged memory, which can spill to CPU RAM when the GPU is full.",
                      "paged-adamw-32bit": "fp32 AdamW in paged memory.", "sgd": "Plain SGD: no optimizer state."},
    )
    weight_decay: float = opt(0.0, "Gently pulls the weights toward zero against overfitting; 0 is fine for short fine-tunes.", min=0.0,
                              max=1.0, step=0.01, label="Weight decay", details="AdamW's decoupled weight decay.")
    max_grad_norm: float = opt(1.0, "Caps the size of each update so that one bad batch cannot derail training; 0 turns it off.", min=0.0,
                               max=1000.0, label="Gradient clipping", details="The gradients' global L2 norm is clipped to this value.")
    seed: int = opt(42, "Any number: the same seed repeats the same shuffling and starting weights.", min=0, max=2**31 - 1, step=1,
                    label="Seed", details="Seeds initialization, shuffling and dropout.")
    logging_steps: int = opt(5, "How often, in steps, the loss and the speed are reported.", min=1, max=100_000, step=1, label="Log every")
    save_steps: int = opt(50, "How often, in steps, a checkpoint is saved so that the run can be resumed.", min=1, max=1_000_000, step=1,
                          label="Checkpoint every")
    save_total_limit: int = opt(2, "How many of the latest checkpoints to keep on disk; older ones are deleted.", min=1, max=100, step=1,
                                label="Keep checkpoints")
    eval_steps: int = opt(0, "How often, in steps, the model is checked on the eval data; 0 means at every checkpoint.", min=0, max=1_000_000,
                          step=1, label="Eval every", details="Measures the eval loss and logs sample generations: a pass over the eval set.")
    eval_fraction: float = opt(0.1, "Share of the data set aside to check the model on examples it never trained on; 0 means none.",
                               min=0.0, max=0.5, step=0.01, label="Eval fraction")
    train_on_prompt: bool = opt(False, "Also learn to write the prompts, not only the answers; usually left off.", label="Train on prompt",
                                details="Computes the loss on the prompt tokens too (default: on the responses only).")
    packing: bool = opt(
        True, "Puts several short examples in one row instead of padding them, so training is faster.", label="Packing",
        details="Samples never see each other (attention, positions and loss restart per sample). Each micro-batch is packed when it "
        "is built, so every step trains on the same samples as without packing. Plain-text data is always cut into full blocks.",
    )
    curriculum: Literal["none", "short-to-long", "column"] = opt(
        "none", "The order of the examples: shuffled, shortest first, or easiest first by a difficulty column.", label="Curriculum",
        details="With a curriculum the samples are not shuffled: every epoch in the same order.",
        choices_help={"none": "Shuffled each epoch (the usual choice).", "short-to-long": "Shortest samples first, by token count.",
                      "column": "Ascending by the numeric value in the difficulty column of the data."},
    )
    difficulty_column: str = opt("", "For the column curriculum: the numeric column of your data that says how hard each example is.",
                                 label="Difficulty column", details="Lowest value first, e.g. a column named difficulty.")
    stop_at_loss: float = opt(0.0, "Finish early once the training loss falls to this value; 0 means never.", min=0.0, max=100.0,
                              label="Stop at loss", details="Compared with the logged training loss; the model is saved at the stop.")
    early_stopping_patience: int = opt(
        0, "Finish early when the eval loss has not improved this many checks in a row; 0 means off.", min=0, max=1000, step=1,
        label="Early stopping patience", details="Needs an eval set (eval fraction > 0 or an eval dataset). The saved model is the one at "
        "the stop; the checkpoint of the best evaluation is kept when one was saved at that step.",
    )
    sample_generations: bool = opt(True, "At each check, write short answers to two eval prompts in the log, to see what the model learned.",
                                   label="Sample generations", details="Greedy continuations of 2 eval prompts, logged to TensorBoard "
                                   "(Text tab) and to the run's events.")
    quant: QuantSettings = opt(QuantSettings(), "How the base model's weights are loaded: 4bit for qlora, none or 8bit for lora.")
    lora: LoraSettings = opt(LoraSettings(), "The LoRA adapters' settings, for qlora and lora.")
    trust_remote_code: bool = opt(False, "Lets a Hub model run its own Python code on this computer; only for models you trust.",
                                  label="Trust remote code", details="transformers' trust_remote_code; always off on a shared app.")
    run_name: str = opt("", "A name for the run's folder; leave empty to name it after the method and the time.", label="Run name",
                        details="Letters, digits, '-', '_' and '.' only.")
    # --- several GPUs (issue 28) ---
    distributed: Distributed = opt(
        "none", "Train on several GPUs: ddp gives each a whole copy of the model, fsdp splits the model between them.", label="Several GPUs",
        details="Started with `accelerate launch` (one process per GPU; the app's Start does it for you). fsdp uses accelerate's FSDP "
        "plugin (FULL_SHARD, one unit per decoder layer); QLoRA under fsdp stores the 4-bit weights in the compute dtype "
        "(bnb_4bit_quant_storage), as peft documents, so that FSDP can shard them.", choices_help=DISTRIBUTED_HELP)
    gpus: int = opt(2, "How many GPUs train together when several GPUs is ddp or fsdp.", min=2, max=64, step=1, label="GPUs",
                    details="One process per GPU; the micro batch size is per GPU, so the effective batch is micro batch x accumulation x GPUs.")

    def __post_init__(self) -> None:
        validate(self)
        check_remote_code(self.trust_remote_code)  # refused on a shared app, in the app and in its training subprocess alike
        if not self.base_model.strip():
            raise ConfigError.of("base_model", self.base_model, "base_model", "TrainConfig")
        if not self.dataset.strip():
            raise ConfigError.of("dataset", self.dataset, "dataset", "TrainConfig")
        self._check_data_sources()
        if self.early_stopping_patience > 0 and self.eval_fraction == 0 and not self.eval_dataset:
            raise ConfigError.of("early_stopping_patience", self.early_stopping_patience, "patience_needs_eval", "TrainConfig")
        self.difficulty_column = self.difficulty_column.strip().lower()  # data.py lower-cases column names
        if self.curriculum == "column" and not self.difficulty_column:
            raise ConfigError.of("difficulty_column", self.difficulty_column, "difficulty_column", "TrainConfig")
        if self.quant.mode == "int8-dynamic":
            raise ConfigError.of("quant.mode", self.quant.mode, "quant_training", "TrainConfig")
        self._check_objective()
        if self.weights == "qlora" and self.quant.mode != "4bit":
            self.quant = dataclasses.replace(self.quant, mode="4bit")  # QLoRA is LoRA on a 4-bit base, by definition
        if self.weights == "full" and self.quant.mode != "none":
            raise ConfigError.of("quant.mode", self.quant.mode, "quant_trainable", "TrainConfig")
        if self.weights == "lora" and self.quant.mode == "4bit":
            raise ConfigError.of("quant.mode", self.quant.mode, "quant_lora", "TrainConfig")
        if self.method == "scratch" and not self.base_model.startswith(BUILTIN_PREFIX):
            raise ConfigError.of("base_model", self.base_model, "scratch_base", "TrainConfig")
        self.teacher_model = self.teacher_model.strip()
        if self.method == "distill" and not self.teacher_model:
            raise ConfigError.of("teacher_model", self.teacher_model, "teacher", "TrainConfig")
        name = self.run_name.strip()
        if name and not is_folder_safe_name(name):
            raise ConfigError.of("run_name", self.run_name, "folder_name", "TrainConfig")
        self.run_name = name

    @property
    def weights(self) -> str:
        """Which weights the run trains: "qlora", "lora" or "full" (scratch and distill train every weight; dpo, orpo
        and grpo take it from `tuning`). Everything about loading, adapters and saving follows this, not `method`."""
        if self.method in OBJECTIVE_METHODS:
            return self.tuning
        return "full" if self.method in ("scratch", "distill") else self.method

    def _check_objective(self) -> None:
        """The fields of dpo, orpo, kto and grpo: a known reward list, whole groups of answers per optimizer step, and
        KTO's two rows or more per micro batch."""
        self.reward = ", ".join(f"{n}:{w:g}" if w != 1 else n for n, w in parse_rewards(self.reward))
        if self.method in REWARD_METHODS and (self.micro_batch_size * self.grad_accum) % self.num_generations:
            raise ConfigError.of("num_generations", self.num_generations, "generations_batch", "TrainConfig",
                                 batch=self.micro_batch_size * self.grad_accum)
        if self.method == "kto" and self.micro_batch_size < 2:  # trl's KL estimate pairs each row with another of its batch
            raise ConfigError.of("micro_batch_size", self.micro_batch_size, "kto_batch", "TrainConfig")
        if self.method in REWARD_METHODS and self.early_stopping_patience > 0:  # GRPO has no eval loss to watch
            raise ConfigError.of("early_stopping_patience", self.early_stopping_patience, "patience_grpo", "TrainConfig")

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


# --- Generation ------------------------------------------------------------------------------------


@dataclass
class GenerationSettings:
    """Decoding settings for the Playground and `python -m engine generate`."""

    # Class constants (not fields: no annotation). Each stop string costs a token-table precomputation in
    # HF's StopStringCriteria, and a list this long is already unusual.
    MAX_STOP_STRINGS = 8
    MAX_STOP_STRING_CHARS = 100

    max_new_tokens: int = opt(128, "The longest answer the model may write, in tokens.", min=1, max=8192, step=1, label="Max new tokens",
                              details="Clamped to the model's context length.")
    do_sample: bool = opt(True, "On: varied answers, words picked at random by how likely they are; off: always the most likely word.",
                          label="Sampling", details="Off is greedy decoding: temperature, top-k, top-p, min-p and the seed are not used.")
    temperature: float = opt(0.8, "Lower gives safer, more predictable text; higher gives more varied, surprising text.", min=0.01, max=5.0,
                             step=0.05, label="Temperature", details="Divides the logits before the softmax: < 1 sharpens, > 1 flattens.")
    top_k: int = opt(50, "Picks only among the k most likely next tokens; 0 turns it off.", min=0, max=10_000, step=1, label="Top-k")
    top_p: float = opt(0.95, "Picks only among the most likely tokens that together reach this probability; 1 turns it off.", min=0.01,
                       max=1.0, step=0.01, label="Top-p", details="Nucleus sampling.")
    repetition_penalty: float = opt(1.1, "Above 1, makes the model less likely to repeat itself; 1 turns it off.", min=1.0, max=3.0, step=0.05,
                                    label="Repetition penalty", details="Divides the score of every token already in the text (CTRL's penalty).")
    seed: int = opt(0, "Use the same seed above 0 to get the same answer again; 0 picks a new one each time.", min=0, max=2**31 - 1, step=1,
                    label="Seed")
    min_p: float = opt(0.0, "Drops tokens much less likely than the best one, e.g. 0.05; 0 turns it off.", min=0.0, max=1.0, step=0.01,
                       label="Min-p", details="Keeps tokens at least min_p times as likely as the most likely one: adapts to the model's "
                       "confidence, unlike top-p.")
    no_repeat_ngram_size: int = opt(0, "Forbids repeating any run of this many tokens; 3 or 4 stops loops, 0 turns it off.", min=0, max=20,
                                    step=1, label="No-repeat n-gram size", details="1 or 2 also block ordinary repeated words.")
    stop_strings: str = opt(
        "", "Text that ends the answer once the model writes it, one per line; write \\n for a line break.", label="Stop strings",
        details=f"At most {MAX_STOP_STRINGS} strings of {MAX_STOP_STRING_CHARS} characters each; the stop string is kept in the output. "
        "A line \\n\\n stops at a blank line.",
    )

    def __post_init__(self) -> None:
        if isinstance(self.stop_strings, (list, tuple)):  # Python callers may pass a list: store the text form
            self.stop_strings = "\n".join(str(s) for s in self.stop_strings)
        validate(self)
        stops = self.stop_list()  # raises on bad lines; keep the text as typed (the UI shows it back)
        if len(stops) > self.MAX_STOP_STRINGS:
            raise ConfigError.of("stop_strings", self.stop_strings, "stop_count", "GenerationSettings", max=self.MAX_STOP_STRINGS, count=len(stops))

    def stop_list(self) -> list[str]:
        """The stop strings as a list: one per non-blank line, surrounding spaces dropped, `\\n`/`\\t` unescaped
        (a newline cannot be typed inside a one-per-line list otherwise), duplicates removed."""
        out: list[str] = []
        for line in str(self.stop_strings or "").splitlines():
            line = line.strip()
            if not line:
                continue
            if len(line) > self.MAX_STOP_STRING_CHARS:
                raise ConfigError.of("stop_strings", line, "stop_length", "GenerationSettings", max=self.MAX_STOP_STRING_CHARS)
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
    """One "will it fit?" question (the Memory estimator panel, `python -m engine estimate`). Keys equal the `estimate --queries` JSONL format (engine/estimator/memory.py)."""

    model: str = opt("builtin:compact-mini", "The model to check: a built-in or catalog name, a Hugging Face id, or a config.json.", label="Model",
                     details="Built-in preset, catalog name, Hugging Face id (only its config.json is fetched), path to a config.json, or "
                     "manual:L=..,h=..,a=..,kv=..,i=..,v=..,tied=0|1.")
    task: Task = opt(
        "qlora", "What you want to do: only run the model, or train it fully, with LoRA, or with QLoRA.", label="Task",
        choices_help={"inference": "The prompt plus the generated tokens, no training.", "full": "Full fine-tuning: every weight trained.",
                      "lora": "LoRA adapters on 16/32-bit weights.", "qlora": "LoRA adapters on 4-bit weights."},
    )
    weight_precision: WeightPrecision = opt(
        "auto", "How the model's weights are stored; auto picks what the task usually uses.", label="Weight precision",
        details="auto: nf4 for QLoRA, bf16 for LoRA and inference, fp32 master weights for AMP full fine-tuning. int8, nf4, fp4: bitsandbytes.",
    )
    double_quant: bool = opt(True, "For 4-bit weights: squeezes them a little further, about 0.4 bits per weight less.", label="Double quant",
                             details="Quantizes the quantization constants too.")
    training_precision: Literal["amp-fp16", "amp-bf16", "pure-bf16", "fp32"] = opt(
        "amp-bf16", "The number format while training; amp-bf16 is the usual choice, amp-fp16 on older GPUs such as a T4.",
        label="Training precision", details="Ignored for inference.",
        choices_help={"amp-fp16": "Autocast to fp16, trainable weights kept in fp32 (HF Trainer fp16=True).",
                      "amp-bf16": "Autocast to bf16, trainable weights kept in fp32 (HF Trainer bf16=True).",
                      "pure-bf16": "Everything in bf16, adapters and optimizer state included (litgpt bf16-true, torchtune).",
                      "fp32": "No autocast."},
    )
    optimizer: Literal["adamw", "adamw-foreach", "adamw-8bit", "paged-adamw-8bit", "paged-adamw-32bit", "sgd", "adafactor"] = opt(
        "adamw", "The method that updates the weights; the 8-bit ones need about a quarter of adamw's memory.", label="Optimizer",
        choices_help={"adamw": "Fused AdamW, as transformers 5 runs it: 2 states per trainable weight (8 bytes in fp32).",
                      "adamw-foreach": "torch's default (transformers 4's adamw_torch): adds a state-sized temporary at the step.",
                      "adamw-8bit": "bitsandbytes 8-bit AdamW: about 2 bytes per trainable weight.",
                      "paged-adamw-8bit": "8-bit AdamW in unified (paged) memory, which can spill to CPU RAM.",
                      "paged-adamw-32bit": "fp32 AdamW in unified (paged) memory.", "sgd": "SGD without momentum (HF's 'sgd'): no state.",
                      "adafactor": "Factored second moments: a small fraction of AdamW's state."},
    )
    lora_r: int = opt(16, "Size of the LoRA adapters: bigger can learn more but uses more memory.", min=1, max=1024, step=1,
                      label="LoRA rank", details="Each targeted linear layer gets r x (d_in + d_out) trainable weights.")
    lora_targets: str = opt("all-linear", "Which layers get adapters: all-linear, attention, or a list such as q,v.", label="LoRA targets",
                            details="'all-linear', 'attention', or a comma list of q,k,v,o,gate,up,down,lm_head (module names such as "
                            "q_proj also work). In a JSON query it may also be a list.")
    lora_dropout: float = opt(0.05, "Dropout on the adapters' input; above 0 it costs a little extra memory.", min=0.0, max=0.9, step=0.01,
                              label="LoRA dropout", details="> 0 keeps a mask and a copy of each adapter's input for the backward pass.")
    batch: int = opt(1, "Sequences processed at once; memory grows with it.", min=1, max=65536, step=1, label="Batch",
                     details="The micro-batch size: sequences per forward/backward pass.")
    seq_len: int = opt(512, "Tokens per sequence: the training length, or the prompt length for inference.", min=1, max=1_048_576, step=1,
                       label="Sequence length", details="Training: the padded length.")
    new_tokens: int = opt(256, "Only for inference: how many tokens the model writes after the prompt.", min=0, max=1_048_576, step=1,
                          label="New tokens")
    grad_ckpt: bool = opt(False, "Saves a lot of memory for about 30% slower training; the usual recipes turn it on.", label="Gradient checkpointing",
                          details="Keeps only each layer's input and recomputes the rest in the backward pass.")
    attention: Literal["sdpa", "eager"] = opt("sdpa", "How attention is computed: sdpa is fast and lean, eager needs much more memory for long texts.",
                                              label="Attention", details="sdpa/flash keeps O(seq) per layer; eager materializes the seq x seq matrix.")
    chunked_loss: bool = opt(False, "Computes the loss in pieces, so that a large vocabulary needs less memory.", label="Chunked loss",
                             details="Chunked cross-entropy (litgpt/torchtune style): no fp32 copy of the full logits.")
    grad_accum: int = opt(1, "Adds up this many batches before each update, for a bigger batch without more activation memory.", min=1,
                          max=65536, step=1, label="Gradient accumulation",
                          details="Effective batch = batch x accumulation; the gradients are then kept between micro-batches.")
    # --- several GPUs (issue 28): the estimate is per GPU ---
    distributed: Distributed = opt(
        "none", "How several GPUs share the job; the estimate is then the memory of each GPU.", label="Several GPUs",
        details="ddp: every GPU holds the whole model, plus a gradient-sized DDP bucket. fsdp (FULL_SHARD, one unit per decoder layer): "
        "weights, gradients and optimizer state split across the GPUs; each GPU gathers two layers at a time and keeps the "
        "embeddings and lm_head whole.", choices_help=DISTRIBUTED_HELP)
    gpus: int = opt(2, "How many GPUs train together; only used when several GPUs is ddp or fsdp.", min=1, max=1024, step=1, label="GPUs",
                    details="One process per GPU; the micro-batch is per GPU.")

    def __post_init__(self) -> None:
        # A JSON query may give lora_targets as a list; store the canonical comma form (the CLI/UI use text).
        if isinstance(self.lora_targets, (list, tuple)):
            if not all(isinstance(t, str) for t in self.lora_targets):
                raise ConfigError.of("lora_targets", self.lora_targets, "targets_list", "MemoryQuery")
            self.lora_targets = ",".join(t.strip() for t in self.lora_targets)
        validate(self)
        if not str(self.model).strip():
            raise ConfigError.of("model", self.model, "memory_model", "MemoryQuery")
        if not str(self.lora_targets).strip():
            raise ConfigError.of("lora_targets", self.lora_targets, "targets_comma", "MemoryQuery")


# --- end memory -----------------------------------------------------------------------------------


# --- GGUF export -----------------------------------------------------------------------------------

GgufType = Literal["f16", "q8_0", "q4_0"]


@dataclass
class GgufSettings:
    """How a model is written to GGUF for llama.cpp / Ollama (the Export tab, `python -m engine export-gguf`; engine/export/gguf.py)."""

    type: GgufType = opt(
        "q8_0", "How much to shrink the weights: f16 is exact, q8_0 is half its size with almost no loss, q4_0 the smallest with some loss.",
        label="GGUF type", details="Bytes a weight: f16 2, q8_0 about 1.06, q4_0 about 0.56 (its embeddings and output head stay q8_0).",
        choices_help={"f16": "16-bit floats: the reference, largest.", "q8_0": "8-bit blocks of 32: half of f16, almost no loss.",
                      "q4_0": "4-bit blocks of 32: a quarter of f16, some loss."},
    )
    preset: str = opt("balanced", "The answer style saved with the model for Ollama: precise, balanced or creative.", label="Decoding preset",
                      details="A decoding preset of presets/generation.yaml, written as the Modelfile's PARAMETER lines.")

    def __post_init__(self) -> None:
        validate(self)
        if not str(self.preset).strip():
            raise ConfigError.of("preset", self.preset, "gguf_preset", "GgufSettings")


# --- benchmarks (lm-evaluation-harness) -------------------------------------------------------------

BenchQuant = Literal["auto", "none", "8bit", "4bit"]


@dataclass
class BenchConfig:
    """A benchmark job: lm-evaluation-harness tasks on a model or a run (the Playground's Benchmarks tab, `python -m engine bench`;
    engine/inference/harness.py). The tasks are the curated list of presets/benchmarks.yaml."""

    model: str = opt("builtin:compact-mini", "The model to score: a built-in one, one of your runs, or a Hugging Face id.", label="Model",
                     details="A run is scored with its adapter applied; its base model is scored too, in the same precision, for the before/after table.")
    tasks: str = opt("dates_mc", "The tasks to run, separated by commas, from the list of benchmarks.", label="Tasks",
                     details="Names from presets/benchmarks.yaml (lm-evaluation-harness task names); dates_mc and dates_iso need no download.")
    limit: int = opt(100, "How many questions of each task to score; fewer answers sooner.", min=1, max=100_000, step=1, label="Questions per task",
                     details="The harness's --limit: the first N rows of each task (of each subject, for a group such as global_mmlu_pt).")
    quant: BenchQuant = opt("auto", "How the weights are loaded; auto uses what the run was trained with and shrinks a model that would not fit.",
                            label="Precision", details="auto: a QLoRA run's 4-bit base, otherwise 16/32-bit; on a GPU too small for that, 8-bit, then "
                            "4-bit, as the memory estimator says. The base model is scored in the same precision as the run.",
                            choices_help={"auto": "The run's own precision, smaller when the estimator says it does not fit.",
                                          "none": "16-bit on a GPU, 32-bit on a CPU.", "8bit": "bitsandbytes 8-bit.", "4bit": "bitsandbytes 4-bit nf4."})
    batch_size: int = opt(8, "How many questions the model reads at once; lower it if memory runs out.", min=1, max=256, step=1, label="Batch size",
                          details="The harness's --batch_size.")
    with_base: bool = opt(True, "For a run, also score its base model, so the table shows before and after.", label="Score the base too",
                          details="The base's scores are kept per model and precision (runs/_benchmarks/) and reused by every run of that base.")

    def __post_init__(self) -> None:
        validate(self)
        from .benchmarks import check_task_names

        check_task_names(self.tasks)  # ConfigError naming the field and listing the allowed names


# The dataclasses the web form and the CLI are generated from: their English labels and help become the language files'
# `field.*` keys (engine/i18n.py), translated in presets/lang/pt-BR.yaml.
FORM_CLASSES: list[type] = [TrainConfig, MemoryQuery, GenerationSettings, GgufSettings, QuantSettings, BenchConfig, MixConfig]
i18n.register_fields(field_texts(FORM_CLASSES))

if __name__ == "__main__":  # python -m engine.config > docs/settings.md (tests/test_field_help.py checks it is up to date)
    print(settings_markdown(FORM_CLASSES), end="")
