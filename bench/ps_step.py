#!/usr/bin/env python3
"""Synchronous parameter-server step time: Strata beside a PyTorch RPC parameter server, CPU, one run.

Both: W workers and 1 server on this machine, one thread each, the same model and per-worker batch, SGD. A step is
forward + cross-entropy + backward on every worker, the gradients sent to the server, one update from their
average, and the new parameters sent back to every worker.
- Strata: `strata train --nproc W --strategy ps --strategy-opt mode=sync --threads 1` on the model exported for
  training (auth off and on, CURVE being Strata's default); the median per-step time logged by rank 0 after two
  warm-up steps.
- PyTorch: torch.distributed.rpc with the batch-updating parameter server of PyTorch's RPC tutorials
  ("Implementing Batch RPC Processing Using Asynchronous Executions"): each worker calls
  `update_and_fetch_model` with its gradients; the server sums them, steps the optimizer when all W arrived and
  completes every caller's future with the new model. The median step time on worker 1 after two warm-up steps.
Run with the current PyTorch: eval "$(../shared/tools/peer-torch.sh)"; "$PEER_PY" bench/ps_step.py
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import torch
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from forward_latency import FashionCnn  # noqa: E402

CASES = {
    "fashion_cnn": (FashionCnn, (32, 1, 28, 28)),
    "resnet18": (lambda: torchvision.models.resnet18(num_classes=10), (16, 3, 32, 32)),
}


class BatchUpdateParameterServer:
    """PyTorch's tutorial design: gradients summed as they come, one step when every worker has sent."""

    def __init__(self, name, workers):
        torch.manual_seed(0)
        self.model = CASES[name][0]()
        self.lock = threading.Lock()
        self.future_model = torch.futures.Future()
        self.workers = workers
        self.curr_update_size = 0
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        for p in self.model.parameters():
            p.grad = torch.zeros_like(p)

    def get_model(self):
        return self.model

    @staticmethod
    @rpc.functions.async_execution
    def update_and_fetch_model(ps_rref, grads):
        self = ps_rref.local_value()
        with self.lock:
            self.curr_update_size += 1
            for p, g in zip(self.model.parameters(), grads):
                p.grad += g
            fut = self.future_model
            if self.curr_update_size >= self.workers:
                for p in self.model.parameters():
                    p.grad /= self.workers
                self.curr_update_size = 0
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=False)
                fut.set_result(self.model)
                self.future_model = torch.futures.Future()
        return fut


def torch_process(rank, world, name, steps, port, queue):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    options = rpc.TensorPipeRpcBackendOptions(num_worker_threads=8, rpc_timeout=600)
    rpc.init_rpc("ps" if rank == 0 else f"worker{rank}", rank=rank, world_size=world,
                 rpc_backend_options=options)
    if rank == 0:
        ps_rref = rpc.RRef(BatchUpdateParameterServer(name, world - 1))
        futures = [rpc.rpc_async(f"worker{r}", run_worker, args=(ps_rref, name, steps)) for r in range(1, world)]
        queue.put(torch.futures.wait_all(futures)[0])  # worker 1's median
    rpc.shutdown()


def run_worker(ps_rref, name, steps):
    torch.set_num_threads(1)
    shape = CASES[name][1]
    model = ps_rref.rpc_sync().get_model()
    x = torch.randn(*shape)
    y = torch.randint(0, 10, (shape[0],))
    times = []
    for i in range(steps + 2):
        start = time.perf_counter()
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        model = rpc.rpc_sync(ps_rref.owner(), BatchUpdateParameterServer.update_and_fetch_model,
                             args=(ps_rref, [p.grad for p in model.parameters()]))
        if i >= 2:
            times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


def torch_ms(name, workers, steps, port):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    mp.start_processes(torch_process, args=(workers + 1, name, steps, port, queue), nprocs=workers + 1,
                       start_method="spawn")
    return queue.get()


def strata_ms(strata, model_path, shape, workers, steps, work, port, auth):
    out = os.path.join(work, "run")
    subprocess.run([strata, "train", model_path, "--data", "synthetic", "--synthetic-samples",
                    str(workers * shape[0] * (steps + 2)), "--batch-size", str(shape[0]), "--max-steps",
                    str(steps + 2), "--nproc", str(workers), "--strategy", "ps", "--strategy-opt", "mode=sync",
                    "--strategy-opt", f"auth={auth}", "--threads", "1", "--master-port", str(port), "--lr", "0.01",
                    "--lr-schedule", "constant", "--out", out, "--log-every", "1"], check=True, capture_output=True)
    with open(os.path.join(out, "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    os.remove(os.path.join(out, "metrics.jsonl"))
    return statistics.median(r["step_time_ms"] for r in records if r["type"] == "step" and r["step"] > 2)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", default=os.path.join(os.path.dirname(__file__), "..", "build", "cli", "strata"))
    parser.add_argument("--models", default="fashion_cnn,resnet18")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {args.workers} workers + 1 server x 1 thread, sync, "
          f"{args.rounds} rounds x {args.steps} steps")
    print(f"{'model':<13}{'batch/worker':<16}{'strata ms':>10}{'(CURVE)':>9}{'torch rpc ms':>14}{'ratio':>8}"
          f"{'(CURVE)':>9}")
    port = 29711
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            constructor, shape = CASES[name]
            torch.manual_seed(0)
            path = os.path.join(tmp, f"{name}.onnx")
            export = dict(opset_version=17, do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
            if tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 5):
                export["dynamo"] = False  # the TorchScript exporter, as Strata's tests export (no onnxscript)
            torch.onnx.export(constructor().train(), torch.randn(*shape), path, **export)
            plain, curve, peer = [], [], []
            for _ in range(args.rounds):
                port += 1
                plain.append(strata_ms(args.strata, path, shape, args.workers, args.steps, tmp, port, "off"))
                port += 1
                curve.append(strata_ms(args.strata, path, shape, args.workers, args.steps, tmp, port, "on"))
                port += 1
                peer.append(torch_ms(name, args.workers, args.steps, port))
            s, c, t = statistics.median(plain), statistics.median(curve), statistics.median(peer)
            print(f"{name:<13}{'x'.join(map(str, shape)):<16}{s:>10.1f}{c:>9.1f}{t:>14.1f}{s / t:>8.2f}{c / t:>9.2f}")


if __name__ == "__main__":
    main()
