#!/usr/bin/env python3
"""The PyTorch peer of bench/fsdp_step.py: one model trained for a few Adam steps on 2 ranks x 1 thread over gloo
with torch.distributed.fsdp.fully_shard (FSDP2) or DistributedDataParallel, the same per-rank batch, and the same
units as Strata's `units=module` (fully_shard on every module that holds parameters of its own, then the root).
Prints one JSON line: rank 0's median step time after two warm-up steps. Needs a current PyTorch (FSDP2):
run it with $PEER_PY from ../shared/tools/peer-torch.sh.
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torchvision

MODELS = {"resnet18": torchvision.models.resnet18, "convnext_tiny": torchvision.models.convnext_tiny,
          "vgg16": torchvision.models.vgg16, "efficientnet_v2_s": torchvision.models.efficientnet_v2_s}


def build(args):
    torch.manual_seed(0)
    extra = {"stochastic_depth_prob": 0.0} if args.model == "convnext_tiny" else {}  # as bench/fsdp_step.py exports it
    model = MODELS[args.model](num_classes=10, **extra).train()
    if args.mode == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model)
    from torch.distributed.fsdp import fully_shard
    reshard = args.mode == "full"  # grad_op: parameters stay gathered from forward to backward (ZeRO-2)
    # Children first, so that a module with parameters of its own (ConvNeXt's block and its layer_scale) gets only
    # those, as a unit of Strata's units=module does.
    for module in reversed(list(model.modules())):
        if module is not model and any(True for _ in module.parameters(recurse=False)):
            fully_shard(module, reshard_after_forward=reshard)
    fully_shard(model, reshard_after_forward=reshard)
    return model


def rank_main(rank, args, result):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    model = build(args)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(rank)
    images = torch.randn(args.batch, 3, 32, 32, generator=generator)
    labels = torch.randint(0, 10, (args.batch,), generator=generator)
    times = []
    for step in range(args.steps + 2):
        start = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step >= 2:
            times.append(1000 * (time.perf_counter() - start))
    if rank == 0:
        result.put(statistics.median(times))
    dist.barrier()
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", choices=MODELS, required=True)
    parser.add_argument("--mode", choices=["ddp", "full", "grad_op"], required=True)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--port", type=int, default=29890)
    args = parser.parse_args()
    context = mp.get_context("spawn")
    result = context.Queue()
    mp.start_processes(rank_main, args=(args, result), nprocs=2, start_method="spawn")
    print(json.dumps({"torch": torch.__version__, "model": args.model, "mode": args.mode, "step_ms": result.get()}))


if __name__ == "__main__":
    main()
