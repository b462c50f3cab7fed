"""Per-GPU memory of a training job on several GPUs (MemoryQuery.distributed / gpus): what FSDP splits across the
GPUs and what each GPU keeps whole, and what DDP adds to a whole copy of the model.

Pure arithmetic on the terms engine/estimator/memory.py has already counted for one GPU (bytes); activations, the
loss and the backward working set are per micro-batch and stay whole on every GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config import MemoryQuery
from .architecture import Arch
from .precision import FLOAT_BYTES, QUANT_DTYPES, PrecisionPlan
from .texts import Msg


@dataclass
class Shares:
    """One GPU's share of the static terms (bytes), the DDP bucket and the named parts inside them."""

    weights: float
    consts: float
    adapters: float
    grads: float
    opt_state: float
    paged: float
    ddp_bucket: float = 0.0
    details: dict[str, float] = field(default_factory=dict)


def per_gpu(q: MemoryQuery, arch: Arch, p: PrecisionPlan, full: bool, one: Shares) -> Shares:
    """`one` (the terms of a single GPU) as each GPU holds them under `q.distributed` on `q.gpus` GPUs."""
    gpus = q.gpus if q.distributed != "none" else 1
    if gpus > 1 and q.distributed == "fsdp":
        # FULL_SHARD with one FSDP unit per decoder layer (accelerate's TRANSFORMER_BASED_WRAP): every GPU keeps 1/gpus of
        # each flat parameter, its gradient and its optimizer state. While a layer runs it is gathered whole, and the
        # next one is prefetched: two layers' weights at a time. The root unit (embeddings, lm_head, final norm) is
        # gathered at the start of forward and stays whole until the end of backward. Under mixed precision the
        # gathered copies are in the compute dtype (accelerate sets FSDP's param_dtype to it); packed 4-bit weights are
        # gathered as they are stored.
        quant = p.storage in QUANT_DTYPES
        stored = p.master if full else (p.nonquant if quant else FLOAT_BYTES.get(p.storage, p.c))
        gathered = p.c if p.autocast else stored
        root_params = arch.params_embedding + arch.params_lm_head
        root = root_params * gathered
        per_layer = (one.weights + one.consts - root_params * stored) / arch.n_layers
        two_layers = 2 * (per_layer if quant else per_layer * gathered / stored)
        return Shares(one.weights / gpus + root + two_layers, one.consts / gpus, one.adapters / gpus, one.grads / gpus,
                      one.opt_state / gpus, one.paged / gpus,
                      details={Msg("estimator.detail_dist.fsdp_root"): root, Msg("estimator.detail_dist.fsdp_gathered"): two_layers})
    if gpus > 1 and q.distributed == "ddp":
        # DDP's reducer allocates its gradient buckets once, the size of all gradients (gradient_as_bucket_view is off
        # in accelerate's default DistributedDataParallelKwargs), and keeps them for the whole run.
        return Shares(one.weights, one.consts, one.adapters, one.grads, one.opt_state, one.paged, ddp_bucket=one.grads,
                      details={Msg("estimator.detail_dist.ddp_bucket"): one.grads})
    return one
