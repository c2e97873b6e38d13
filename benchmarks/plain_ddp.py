"""A DDP training script written the textbook way: the baseline linkbench is timed against.

    python benchmarks/plain_ddp.py --model resnet50 --batch 256 --precision bf16 --nproc 1

It follows PyTorch's DDP tutorial: ``mp.spawn`` one process per device,
``init_process_group``, the model wrapped in ``DistributedDataParallel``, SGD with momentum
(AdamW for gpt), and a loop of zero_grad, autocast forward, backward, step, printing the loss
every ``--log-every`` steps. Model, synthetic data (one batch made on the device), batch and
precision are linkbench's, so the two measure the same work. Throughput is timed on rank 0
from the end of the warmup steps to the last step, the device synchronised at both ends.
Rank 0 writes its numbers as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from linkbench.parts.models import GPT, TinyCNN

GPT_SHAPE = {"vocab_size": 8192, "seq_len": 256, "n_layer": 4, "n_head": 8, "d_model": 512}


def build(args: argparse.Namespace, device: torch.device) -> tuple[torch.nn.Module, tuple]:
    """The model and one synthetic batch (inputs, targets) on ``device``."""
    if args.model == "gpt":
        model = GPT(**GPT_SHAPE)
        tokens = torch.randint(GPT_SHAPE["vocab_size"], (args.batch, GPT_SHAPE["seq_len"] + 1))
        return model, (tokens[:, :-1].to(device), tokens[:, 1:].to(device))
    if args.model == "tiny":
        model, size, classes = TinyCNN(10), 32, 10
    else:
        import torchvision

        model, size, classes = getattr(torchvision.models, args.model)(num_classes=1000), 224, 1000
    images = torch.randn(args.batch, 3, size, size).to(device)
    labels = torch.randint(classes, (args.batch,)).to(device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
        images = images.contiguous(memory_format=torch.channels_last)
    return model, (images, labels)


def worker(rank: int, args: argparse.Namespace, port: int) -> None:
    os.environ.update(MASTER_ADDR="localhost", MASTER_PORT=str(port))
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=args.nproc)
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // args.nproc))
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    torch.manual_seed(0)
    model, (inputs, targets) = build(args, device)
    model = DDP(model.to(device), device_ids=[rank] if cuda else None)
    if args.model == "gpt":
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    scaler = torch.amp.GradScaler(device.type, enabled=args.precision == "fp16")

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    started = 0.0
    loop_started = time.perf_counter()
    for step in range(1, args.steps + 1):
        optimizer.zero_grad()
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            output = model(inputs)
            loss = F.cross_entropy(output.reshape(-1, output.shape[-1]), targets.reshape(-1))
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        if step == 1:
            sync()  # untimed: the warmup steps follow
            first_step_done_at, first_step_s = time.time(), time.perf_counter() - loop_started
        if step % args.log_every == 0 and rank == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
        if step == args.warmup:
            sync()
            started = time.perf_counter()
    sync()
    elapsed = time.perf_counter() - started
    if rank == 0:
        timed = args.steps - args.warmup
        result = {
            "samples_per_sec": args.batch * args.nproc * timed / elapsed,
            "step_time_ms": elapsed / timed * 1e3,
            "first_step_done_at": first_step_done_at,
            "first_step_s": first_step_s,
            "max_allocated_gb": torch.cuda.max_memory_allocated() / 1e9 if cuda else None,
        }
        with open(args.out, "w") as out:
            json.dump(result, out)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--nproc", type=int, default=torch.cuda.device_count() or 2)
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--cudnn-benchmark", action="store_true", help="not textbook; linkbench's")
    parser.add_argument("--out", default="plain_ddp.json")
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args, port), nprocs=args.nproc)


if __name__ == "__main__":
    main()
