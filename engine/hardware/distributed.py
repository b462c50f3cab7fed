"""Several processes, one run: what the engine needs to stay correct under `accelerate launch` / torchrun.

`accelerate launch --multi_gpu --num_processes N -m engine train --config run.yaml` starts N copies of the
same training command; transformers' Trainer then does data-parallel training (DDP: NCCL on GPUs, gloo on
CPUs) and writes checkpoints from rank 0 only. Everything *else* the engine writes into the run folder
(events.jsonl, config.yaml, the final adapter/model) and every decision that changes the control flow
(stop now?) must be made once, not N times, or the UI would see duplicate events and the ranks would
diverge (a rank that leaves the loop while another waits in an all-reduce deadlocks the job).

Rank and world size come from the environment the launcher sets (RANK, WORLD_SIZE, LOCAL_RANK), so they
are known before any process group exists and cost nothing in a normal single-process run, where every
helper here is a no-op (rank 0 of 1). The collectives (barrier, any_rank, broadcast_object) only act once
torch.distributed is initialized; `init` does that through accelerate's PartialState, the same object the
Trainer uses, so both agree on the backend and the device.
"""

from __future__ import annotations

import os
from typing import Any


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def world_size() -> int:
    """Number of processes training this run (1 without a launcher)."""
    return max(1, _env_int("WORLD_SIZE", 1))


def rank() -> int:
    """Global rank of this process (0 without a launcher)."""
    return _env_int("RANK", 0)


def local_rank() -> int:
    """Rank on this machine: the GPU index this process trains on (0 without a launcher)."""
    return max(0, _env_int("LOCAL_RANK", 0))


def is_distributed() -> bool:
    return world_size() > 1


def is_main_process() -> bool:
    """True for the one process that writes the run folder (rank 0, or the only process)."""
    return rank() == 0


def init(cpu: bool) -> None:
    """Create the process group now (before the Trainer does) so that the steps before training can
    synchronize too (e.g. the built-in base pretraining). `cpu` must match the Trainer's `use_cpu`:
    accelerate's PartialState is a process-wide singleton and the first call fixes the backend (gloo
    for CPUs, NCCL for GPUs)."""
    if not is_distributed():
        return
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return
    from accelerate import PartialState

    PartialState(cpu=cpu)


def _active() -> bool:
    import torch.distributed as dist

    return is_distributed() and dist.is_available() and dist.is_initialized()


def barrier() -> None:
    """Wait until every rank gets here (no-op in a single process)."""
    if _active():
        import torch.distributed as dist

        dist.barrier()


def any_rank(flag: bool) -> bool:
    """True on every rank if `flag` is true on at least one: one decision for all ranks (a STOP file may
    appear between two ranks' checks; acting on it in one rank only would deadlock the others)."""
    if not _active():
        return bool(flag)
    import torch
    import torch.distributed as dist

    # NCCL only reduces CUDA tensors; gloo (CPU) reduces CPU tensors.
    device = torch.device("cuda", torch.cuda.current_device()) if "nccl" in str(dist.get_backend()) else torch.device("cpu")
    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def broadcast_object(obj: Any) -> Any:
    """Rank 0's `obj` on every rank (pickled); `obj` itself in a single process."""
    if not _active():
        return obj
    import torch.distributed as dist

    box = [obj if is_main_process() else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def mode(chosen: str) -> str:
    """How this run's processes really share the work: "none" in one process, else the chosen ddp/fsdp ("ddp" when
    a launcher started several processes for a config that chose none: what the Trainer then does)."""
    if not is_distributed():
        return "fsdp" if chosen == "fsdp" else "none"
    return "ddp" if chosen == "none" else chosen


def check_mode(chosen: str, device_kind: str) -> None:
    """Refuse FSDP where the pinned accelerate (1.15) would not apply it: its FSDP plugin is only set up for GPU-like
    process groups (AcceleratorState keeps a CPU/gloo group MULTI_CPU, i.e. plain DDP), so a CPU run asked for FSDP
    would silently train unsharded."""
    if chosen == "fsdp" and device_kind != "cuda":
        from ..errors import EngineError

        raise EngineError(key="message.distributed.fsdp_needs_gpus", device=device_kind)


def launch_command(config: str = "run.yaml", processes: int = 2) -> str:
    """The shell command that trains `config` on `processes` processes (one per GPU), as the app's "Show command"
    prints it and docs/multi_gpu.md explains it. `--multi_gpu` is what makes accelerate spawn the processes
    (torchrun); on a machine without GPUs they train on the CPU over gloo. (`--cpu --num_processes N` would
    start a single process unless MPI is set up.)"""
    return f"accelerate launch --multi_gpu --num_processes {int(processes)} -m engine train --config {config}"


def launcher_argv(python: str, processes: int) -> list[str]:
    """The argv prefix that starts `python -m engine ...` on `processes` processes with accelerate's launcher (the
    app's Start for a ddp/fsdp config; `launch_command` is the same for people). The flags `accelerate config` would
    otherwise be asked for are given, and a free rendezvous port, so that two launches on one machine never meet."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return [python, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(int(processes)), "--num_machines", "1",
            "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(port), "-m"]
