#!/usr/bin/env python3
"""DDP with gradient compression on a slow link: Strata's compressors beside PyTorch DDP (plain, and its PowerSGD
comm hook at the same rank), two nodes joined by a rate-limited link, one run.

The link: two network namespaces joined by a veth pair (scripts/netns.sh), each end's sending rate limited by tc's
tbf qdisc (`scripts/netns.sh rate 100mbit`). One rank per node, one thread each. --model resnet18: ResNet-18 for
Fashion-MNIST (torchvision's, first convolution on 1 channel, 10 classes); --model gpt: a GPT-2-style decoder over
bytes (models/make_gpt.py: 4 layers, 256 wide, 4 heads, sequence 128, 3.4M parameters) on the built-in corpus
(`--data text`). Each is built once here from one seed, so Strata and PyTorch start from the same weights.

Timing, per rate: every configuration trains --steps + 2 steps on the two nodes (synthetic data of the same shape);
the median step time of node 0 after two warm-up steps (Strata: metrics.jsonl's step_time_ms; PyTorch: wall time
of zero_grad, forward, backward, step), and the gradient bytes each rank handed to collectives per step (Strata:
summary.json's gradient_bytes_sent; PyTorch's hook: the tensors it passes to all_reduce, counted by a wrapper;
plain PyTorch DDP: the parameters' bytes, which its reducer all-reduces).
Accuracy: the same configurations on loopback (the link changes time, not arithmetic) for --accuracy-steps steps,
then ResNet-18's test accuracy on Fashion-MNIST's 10,000 test images, or the GPT's validation perplexity (Strata:
the last 5% of the corpus's windows; PyTorch: the same windows of the token file Strata's first run wrote).

Run as root (network namespaces) with the current PyTorch (../shared/tools/peer-torch.sh):
  eval "$(cat /tmp/peer-torch.env)"; sudo "$PEER_PY" bench/compression_link.py --rates 100mbit,1gbit
"""
import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
NETNS = ["bash", os.path.join(HERE, "..", "scripts", "netns.sh")]
PREFIX = "stratacl"
FASHION = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # Strata's Fashion-MNIST normalisation (loaders/src/idx_dataset.cpp)


def resnet18():
    import torch
    import torchvision
    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = torch.nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)
    return model


GPT = dict(layers=4, width=256, heads=4, vocab=256, seq_len=128)


def gpt():
    import torch
    sys.path.insert(0, os.path.join(HERE, "..", "models"))
    import make_gpt
    torch.manual_seed(0)
    return make_gpt.Gpt(**GPT)


def build(name):
    import torch
    torch.manual_seed(0)
    return gpt() if name == "gpt" else resnet18()


def export(path, batch, name):
    import warnings
    import torch
    warnings.filterwarnings("ignore")
    if name == "gpt":  # make_gpt.export's arguments, without the dynamo exporter the current PyTorch defaults to
        kwargs = dict(input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}}, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
        idx = torch.zeros(2, GPT["seq_len"], dtype=torch.int64)
        try:
            torch.onnx.export(build("gpt").train(), idx, path, dynamo=False, **kwargs)
        except TypeError:
            torch.onnx.export(build("gpt").train(), idx, path, **kwargs)
        return
    model = build(name).train()
    kwargs = dict(opset_version=17, do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
    try:  # the current PyTorch exports with dynamo unless told not to
        torch.onnx.export(model, torch.randn(batch, 1, 28, 28), path, dynamo=False, **kwargs)
    except TypeError:
        torch.onnx.export(model, torch.randn(batch, 1, 28, 28), path, **kwargs)


def idx(name):
    with gzip.open(os.path.join(FASHION, name)) as f:
        data = f.read()
    if name.endswith("labels-idx1-ubyte.gz"):
        return np.frombuffer(data, np.uint8, offset=8).astype(np.int64)
    return ((np.frombuffer(data, np.uint8, offset=16).reshape(-1, 1, 28, 28) / 255.0 - MEAN) / STD).astype(np.float32)


def token_windows(path):
    """A Strata token file's ids (32-byte header: STRATOK1, id width, vocabulary, count) as windows of T + 1."""
    with open(path, "rb") as f:
        header = f.read(32)
        width = int.from_bytes(header[8:12], "little")
        ids = np.frombuffer(f.read(), dtype=np.uint16 if width == 2 else np.uint32).astype(np.int64)
    t = GPT["seq_len"] + 1
    return ids[:len(ids) // t * t].reshape(-1, t)


def torch_worker(args):
    """One PyTorch DDP rank; prints a JSON line with its median step time, bytes per step and test metric."""
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = args.master
    os.environ["MASTER_PORT"] = str(args.port)
    dist.init_process_group("gloo", rank=args.rank, world_size=2)
    torch.manual_seed(0)
    # The hook's collectives are issued from Gloo's completion callbacks as well as from backward, so with several
    # buckets the two ranks issued them in different orders (a size mismatch in Gloo, 2 of 2 tries with PyTorch
    # 2.15): the hook runs with one bucket; plain DDP keeps its 25 MB buckets.
    buckets = 1024 if args.hook.startswith("powersgd") else 25
    model = torch.nn.parallel.DistributedDataParallel(build(args.model).train(), bucket_cap_mb=buckets)
    sent = [0]
    if args.hook.startswith("powersgd"):
        rank = int(args.hook.split("=")[1])
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=rank,
                                            start_powerSGD_iter=2, min_compression_rate=2, use_error_feedback=True,
                                            warm_start=True)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        all_reduce = dist.all_reduce

        def counted(tensor, *a, **k):
            sent[0] += tensor.numel() * tensor.element_size()
            return all_reduce(tensor, *a, **k)
        dist.all_reduce = counted  # the hook calls dist.all_reduce
    else:
        sent_per_step = sum(p.numel() * p.element_size() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr) if args.model == "gpt" else \
        torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    lm = args.model == "gpt"
    if lm:
        windows = token_windows(args.tokens) if args.accuracy else \
            np.random.default_rng(args.rank).integers(0, 256, (args.batch, GPT["seq_len"] + 1))
        train_windows = windows[:len(windows) - len(windows) // 20]  # the last 5% are validation, as Strata's
        images, labels = train_windows[:, :-1], train_windows[:, 1:]
        order = np.random.default_rng(1).permutation(len(images))
    elif args.accuracy:
        images, labels = idx("train-images-idx3-ubyte.gz"), idx("train-labels-idx1-ubyte.gz")
        order = np.random.default_rng(1).permutation(len(labels))
    else:
        images = np.random.default_rng(args.rank).standard_normal((args.batch, 1, 28, 28)).astype(np.float32)
        labels = np.random.default_rng(args.rank).integers(0, 10, args.batch)
    times = []
    counted_from = 0
    for step in range(args.steps):
        if args.accuracy or lm:
            start = ((step * 2 + args.rank) * args.batch) % max(1, len(order) - args.batch)
            chosen = order[start:start + args.batch]
            x, y = torch.from_numpy(images[chosen]), torch.from_numpy(labels[chosen])
        else:
            x, y = torch.from_numpy(images), torch.from_numpy(labels)
        if step == 2:
            counted_from = sent[0]
        began = time.perf_counter()
        optimizer.zero_grad()
        logits = model(x)
        torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).backward()
        optimizer.step()
        times.append(time.perf_counter() - began)
    measured = args.steps - 2
    if args.hook.startswith("powersgd"):
        sent_per_step = (sent[0] - counted_from) / measured
    accuracy = None
    if args.accuracy and args.rank == 0 and lm:
        held = windows[len(windows) - len(windows) // 20:]
        model.eval()
        total, count = 0.0, 0
        with torch.no_grad():
            for i in range(0, len(held), 64):
                x = torch.from_numpy(held[i:i + 64, :-1])
                y = torch.from_numpy(held[i:i + 64, 1:])
                logits = model.module(x)
                total += float(torch.nn.functional.cross_entropy(logits.reshape(-1, 256), y.reshape(-1),
                                                                 reduction="sum"))
                count += y.numel()
        accuracy = float(np.exp(total / count))
    elif args.accuracy and args.rank == 0:
        test_images, test_labels = idx("t10k-images-idx3-ubyte.gz"), idx("t10k-labels-idx1-ubyte.gz")
        model.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, len(test_labels), 500):
                logits = model.module(torch.from_numpy(test_images[i:i + 500]))
                correct += int((logits.argmax(1).numpy() == test_labels[i:i + 500]).sum())
        accuracy = correct / len(test_labels)
    if args.rank == 0:
        print(json.dumps({"ms": 1000 * statistics.median(times[2:]), "bytes": sent_per_step, "accuracy": accuracy}))
    dist.barrier()  # neither rank closes its connections while the other still reads
    dist.destroy_process_group()


def port():
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "support"))
    import multirank
    return multirank.free_port()


def run_nodes(commands, timeout):
    """Starts one command per node, waits for all; returns node 0's output."""
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=NETENV)
             for c in commands]
    outputs = [p.communicate(timeout=timeout)[0] for p in procs]
    failed = [f"{' '.join(c)} failed ({p.returncode}):\n{out[-3000:]}" for c, p, out in zip(commands, procs, outputs)
              if p.returncode != 0]
    if failed:
        raise SystemExit("\n".join(failed))
    return outputs[0]


def strata_run(args, model, work, compress, steps, linked, accuracy):
    out = os.path.join(work, f"strata-{compress or 'none'}-{'acc' if accuracy else 'time'}-{time.time_ns()}"
                       .replace(":", "_"))
    if args.model == "gpt" and accuracy:
        data = ["--data", "text", "--optimizer", "adamw"]
    elif args.model == "gpt":
        # Timing on random bytes: the corpus's validation windows would take longer to evaluate than the steps.
        tokens = os.path.join(work, "random_tokens.bin")
        if not os.path.exists(tokens):
            windows = 4 * args.batch * steps
            np.random.default_rng(3).integers(0, 256, windows * (GPT["seq_len"] + 1) + 1).astype("<u2").tofile(tokens)
        data = ["--data", f"tokens:{tokens}", "--optimizer", "adamw"]
    else:
        data = ["--data", "fashion-mnist"] if accuracy else ["--data", "synthetic", "--synthetic-samples",
                                                             str(2 * args.batch * steps)]
    common = [args.strata, "train", model] + data + [
        "--batch-size", str(args.batch), "--max-steps", str(steps), "--threads", "1", "--strategy", "ddp",
        "--lr", str(args.lr), "--momentum", "0.9", "--lr-schedule", "constant", "--seed", "1", "--log-every", "1"]
    if compress:
        common += ["--strategy-opt", f"compress={compress}"]
    p = port()
    if linked:
        master = subprocess.run(NETNS + ["addr", "0"], env=NETENV, capture_output=True, text=True).stdout.strip()
        commands = [NETNS + ["exec", str(i)] + common + ["--nnodes", "2", "--node-rank", str(i), "--nproc", "1",
                                                           "--master-addr", master, "--master-port", str(p),
                                                           "--out", f"{out}-{i}"] for i in (0, 1)]
        run_nodes(commands, args.timeout)
        out = f"{out}-0"
    else:
        run_nodes([common + ["--nproc", "2", "--master-port", str(p), "--out", out]], args.timeout)
    summary = json.load(open(os.path.join(out, "summary.json")))
    records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    times = [r["step_time_ms"] for r in records if r["type"] == "step" and r["step"] > 2]
    rank0 = summary["ranks"][0]
    tokens = [os.path.join(out, "data", f) for f in os.listdir(os.path.join(out, "data"))
              if f.endswith(".tokens")] if os.path.isdir(os.path.join(out, "data")) else []
    return {"ms": statistics.median(times) if times else None,
            "bytes": rank0["gradient_bytes_sent"] / summary["steps"],
            "accuracy": summary.get("test_perplexity" if args.model == "gpt" else "test_accuracy"),
            "tokens": tokens[0] if tokens else None}


def torch_run(args, hook, steps, linked, accuracy, tokens=None):
    p = port()
    worker = [args.peer_python or sys.executable, os.path.abspath(__file__), "--torch-worker", "--hook", hook,
              "--steps", str(steps), "--batch", str(args.batch), "--lr", str(args.lr), "--port", str(p),
              "--model", args.model] + (["--tokens", tokens] if tokens else [])
    if accuracy:
        worker.append("--accuracy")
    if linked:
        master = subprocess.run(NETNS + ["addr", "0"], env=NETENV, capture_output=True, text=True).stdout.strip()
        commands = [NETNS + ["exec", str(i), "env", f"GLOO_SOCKET_IFNAME={PREFIX}-v{i}"] + worker
                    + ["--rank", str(i), "--master", master] for i in (0, 1)]
    else:
        commands = [worker + ["--rank", str(i), "--master", "127.0.0.1"] for i in (0, 1)]
    out = run_nodes(commands, args.timeout)
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


NETENV = dict(os.environ, NETNS_PREFIX=PREFIX)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strata", default=os.path.join(HERE, "..", "build", "cli", "strata"))
    parser.add_argument("--peer-python", help="the Python of the current PyTorch (default: this one)")
    parser.add_argument("--rates", default="100mbit,1gbit", help="tc rates of the link; none: no timing runs")
    parser.add_argument("--compressors", default="none;fp16;powersgd:rank=4;topk:ratio=0.01;randomk:ratio=0.01;sign",
                        help="Strata's configurations, separated by ';' (a compressor's options take commas)")
    parser.add_argument("--torch-hooks", default="none;powersgd", help="PyTorch's: none, powersgd (';'; empty: none)")
    parser.add_argument("--torch-rank", type=int, default=4, help="PowerSGD rank of the PyTorch hook")
    parser.add_argument("--steps", type=int, default=8, help="timed steps (after 2 warm-up steps)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--accuracy-steps", type=int, default=0, help="0: no accuracy runs")
    parser.add_argument("--model", choices=["resnet18", "gpt"], default="resnet18")
    parser.add_argument("--batch", type=int, help="per rank (default: 32 for resnet18, 16 for gpt)")
    parser.add_argument("--lr", type=float, help="default: 0.05 (SGD, resnet18) or 3e-3 (AdamW, gpt)")
    parser.add_argument("--tokens", help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=int, default=3600)
    parser.add_argument("--keep", help="a directory to keep the runs in (default: a temporary one)")
    parser.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--hook", default="none", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--master", default="127.0.0.1", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--accuracy", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.batch = args.batch or (16 if args.model == "gpt" else 32)
    args.lr = args.lr or (3e-3 if args.model == "gpt" else 0.05)
    if args.torch_worker:
        torch_worker(args)
        return
    import torch
    compressors = [c for c in args.compressors.split(";") if c]
    hooks = [h if h == "none" else f"powersgd={args.torch_rank}" for h in args.torch_hooks.split(";") if h]
    with tempfile.TemporaryDirectory() as scratch:
        work = args.keep or scratch
        os.makedirs(work, exist_ok=True)
        model = os.path.join(work, f"{args.model}.onnx")
        export(model, args.batch, args.model)
        cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
                   "?")
        what = "GPT (4 x 256, sequence 128, bytes)" if args.model == "gpt" else "ResNet-18 (1x28x28)"
        print(f"{time.strftime('%Y-%m-%d')}, {cpu}, torch {torch.__version__}, {what}, batch "
              f"{args.batch}/rank, 2 nodes x 1 rank x 1 thread, {args.rounds} rounds x {args.steps} steps")
        for rate in [r for r in args.rates.split(",") if r and r != "none"]:
            subprocess.run(NETNS + ["up"], env=NETENV, check=True)
            try:
                subprocess.run(NETNS + ["rate", rate], env=NETENV, check=True)
                rows = {}
                for _ in range(args.rounds):
                    for c in compressors:
                        r = strata_run(args, model, work, None if c == "none" else c, args.steps + 2, True, False)
                        rows.setdefault(("strata", c), []).append(r)
                    for h in hooks:
                        r = torch_run(args, h, args.steps + 2, True, False)
                        rows.setdefault(("torch", h), []).append(r)
            finally:
                subprocess.run(NETNS + ["down"], env=NETENV)
            base = statistics.median(r["ms"] for r in rows.get(("strata", "none"), [{"ms": float("nan")}]))
            psgd = rows.get(("torch", f"powersgd={args.torch_rank}"), [{"ms": float("nan")}])
            torch_psgd = statistics.median(r["ms"] for r in psgd)
            print(f"\nlink {rate}")
            print(f"{'configuration':<34}{'step ms':>10}{'rounds min-max':>18}{'vs none':>9}{'vs torch psgd':>15}"
                  f"{'MB/step':>10}")
            for (who, c), results in rows.items():
                each = [r["ms"] for r in results]
                ms = statistics.median(each)
                mb = statistics.median(r["bytes"] for r in results) / 2**20
                spread = f"{min(each):.0f}-{max(each):.0f}"
                print(f"{who + ' ' + c:<34}{ms:>10.1f}{spread:>18}{base / ms:>8.2f}x{ms / torch_psgd:>14.2f}x"
                      f"{mb:>10.3f}")
        if args.accuracy_steps > 0:
            lm = args.model == "gpt"
            metric = "validation perplexity" if lm else "test accuracy"
            print(f"\n{metric} after {args.accuracy_steps} steps (loopback)")
            shown = (lambda v: f"{v:>9.3f}") if lm else (lambda v: f"{100 * v:>8.2f}%")
            tokens = None
            for c in compressors:
                r = strata_run(args, model, work, None if c == "none" else c, args.accuracy_steps, False, True)
                tokens = tokens or r["tokens"]
                print(f"{'strata ' + c:<34}{shown(r['accuracy'])}")
            for h in hooks:
                r = torch_run(args, h, args.accuracy_steps, False, True, tokens)
                print(f"{'torch ' + h:<34}{shown(r['accuracy'])}")


if __name__ == "__main__":
    main()
