"""What a checkpoint of an FSDP job costs each rank: linkbench's sharded write through
``torch.distributed.checkpoint`` against the gather-to-rank-0 ``torch.save`` it replaced.

Two CPU ranks (gloo) train one step of a GPT under FSDP2's ``fully_shard`` (per block, then
the root, as ``strategy=fsdp`` does) with AdamW, then save its model and optimizer state
``--repeats`` times one way; each way runs in processes of its own:

- ``gather``: ``get_state_dict(full_state_dict=True, cpu_offload=True)`` and ``torch.save``
  on rank 0 (linkbench before DCP);
- ``dcp``: ``get_state_dict`` as each rank holds it and ``dcp.save`` (linkbench now).

Per rank and way it prints the median wall time of a save (between barriers), the bytes the
rank wrote, and the rank's peak resident memory during the saves above what it held after
the training step, before the first save (Linux: ``VmHWM``, reset through
``/proc/self/clear_refs`` before the first save).

    python benchmarks/checkpoint.py [--layers 8] [--width 768] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from linkbench.parts.models import GPT

VOCAB, SEQ, BATCH = 8192, 128, 2


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _measure(save, where: Path, rank: int) -> tuple[float, int]:
    """(seconds, bytes this rank wrote) of one save."""
    if rank == 0:
        shutil.rmtree(where, ignore_errors=True)
    dist.barrier()
    started = time.perf_counter()
    save(where)
    dist.barrier()
    took = time.perf_counter() - started
    mine = [where] if where.is_file() else sorted(where.glob(f"__{rank}_*"))
    written = sum(p.stat().st_size for p in mine if p.exists())
    dist.barrier()  # counted before the next save's directory is removed
    return took, written


def _worker(rank: int, way: str, args: argparse.Namespace, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = GPT(VOCAB, SEQ, args.layers, 8, args.width)
    mesh = init_device_mesh("cpu", (2,))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(VOCAB, (BATCH, SEQ + 1))
    logits = model(tokens[:, :-1])
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    params = sum(p.numel() for p in model.parameters())

    def gather(where: Path) -> None:
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        state = get_state_dict(model, optimizer, options=options)
        if rank == 0:
            torch.save({"model": state[0], "optimizer": state[1]}, where)

    def sharded(where: Path) -> None:
        state = get_state_dict(model, optimizer)
        dcp.save({"model": state[0], "optimizer": state[1]}, checkpoint_id=where)

    save, where = (
        (gather, Path(out) / f"full{rank}.pt") if way == "gather" else (sharded, Path(out) / "dcp")
    )
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    before = _status_kib("VmRSS")
    runs = [_measure(save, where, rank) for _ in range(args.repeats)]
    peak = (_status_kib("VmHWM") - before) * 1024
    seconds = statistics.median(r[0] for r in runs)
    written = statistics.median(r[1] for r in runs)
    print(
        f"{way:>6} rank {rank}: {seconds:6.2f} s, wrote {written / 1e6:7.1f} MB, peak RSS "
        f"+{peak / 1e6:7.1f} MB  ({params / 1e6:.1f} M parameters)",
        flush=True,
    )
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for port, way in enumerate(("gather", "dcp"), start=29517):
        with tempfile.TemporaryDirectory() as out:
            mp.spawn(_worker, args=(way, args, port, out), nprocs=2)


if __name__ == "__main__":
    main()
