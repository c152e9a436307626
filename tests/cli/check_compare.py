"""Checks a `strata compare` output directory (tests/cli/compare_test.sh): the report files exist, results.csv
parses, every configuration's figures in results.json and results.csv equal its own summary.json, the resource
time series exist per rank, and (with --screenshot) that a rendered report.html is not blank. With --servers
(tests/cli/compare_servers_test.sh): the parameter servers' memory in results.json, results.csv and report.md."""
import argparse
import csv
import json
import math
import pathlib
import sys


def fail(message):
    print(f"check_compare: {message}")
    sys.exit(1)


def same(a, b, what):
    if isinstance(b, float) or isinstance(a, float):
        if a is None or b is None or not math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12):
            fail(f"{what}: report {a} != summary {b}")
    elif a != b:
        fail(f"{what}: report {a!r} != summary {b!r}")


def check_screenshot(path):
    from PIL import Image
    image = Image.open(path).convert("L")
    width, height = image.size
    dark = sum(1 for value in image.getdata() if value < 128)
    if width < 800 or height < 800 or dark < 2000:
        fail(f"{path}: {width}x{height} with {dark} dark pixels: the report did not render")
    print(f"screenshot {width}x{height}, {dark} dark pixels")


def mib(value):
    return f"{value / (1 << 20):.1f}"


def check_servers(out, expect_servers):
    """The parameter servers' own memory (summary.json's "servers") in results.json, results.csv and the memory
    table of report.md, equal to each run's summary.json; configurations without servers show none."""
    results = json.loads((out / "results.json").read_text())["configurations"]
    rows = {row["name"]: row for row in csv.DictReader(open(out / "results.csv", newline=""))}
    report = (out / "report.md").read_text()
    categories = ["parameters", "gradients", "optimizer_state", "activations", "communication", "workspace",
                  "compression", "other"]
    for r in results:
        name = r["name"]
        if r["status"] != "done":
            fail(f"{name}: {r['status']} ({r['reason']})")
        summary = json.loads((pathlib.Path(r["run_dir"]) / "summary.json").read_text())
        servers = summary.get("servers", [])
        if len(servers) != expect_servers.get(name, 0):
            fail(f"{name}: summary.json lists {len(servers)} servers, expected {expect_servers.get(name, 0)}")
        if len(r["servers"]) != len(servers):
            fail(f"{name}: results.json lists {len(r['servers'])} servers, summary.json {len(servers)}")
        for mine, theirs in zip(r["servers"], servers):
            for key in ["role", "index", "peak_memory_bytes", "memory_breakdown", "resident_peak_bytes"]:
                same(mine[key], theirs[key], f"{name} server {theirs['index']} {key}")
        row = rows[name]
        server_row = f"| {r['model']} | {r['label']}, {r['world_size']} ranks | servers ({len(servers)}) |"
        if not servers:
            if r["server_peak_memory_bytes"] is not None or row["servers"] or row["server_peak_memory_bytes"]:
                fail(f"{name}: server figures without servers: {r['server_peak_memory_bytes']}, {row}")
            if "| servers (" in "".join(line for line in report.splitlines() if f"| {r['label']}, " in line):
                fail(f"{name}: report.md shows a servers row without servers")
            continue
        peak = max(s["peak_memory_bytes"] for s in servers)
        resident = max(s["resident_peak_bytes"] for s in servers)
        same(r["server_peak_memory_bytes"], float(peak), f"{name} server_peak_memory_bytes")
        same(r["server_resident_peak_bytes"], float(resident), f"{name} server_resident_peak_bytes")
        same(int(row["servers"]), len(servers), f"{name} results.csv servers")
        same(float(row["server_peak_memory_bytes"]), float(peak), f"{name} results.csv server_peak_memory_bytes")
        same(float(row["server_resident_peak_bytes"]), float(resident), f"{name} results.csv server resident")
        cells = [mib(max(s["memory_breakdown"][c] for s in servers)) for c in categories] + [mib(resident)]
        for c in categories:
            most = max(s["memory_breakdown"][c] for s in servers)
            same(float(row[f"server_peak_{c}_bytes"]), float(most), f"{name} results.csv server_peak_{c}_bytes")
        expected = server_row + " " + " | ".join(cells) + " |"
        if expected not in report:
            fail(f"{name}: report.md lacks the servers' memory row {expected!r}")
    print(f"check_compare: the servers' memory of {len(results)} configurations agrees with their summary.json")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--expect-failed", action="append", default=[])
    parser.add_argument("--screenshot")
    parser.add_argument("--servers", action="append", default=[],
                        help="NAME=S: check only the servers' memory; configuration NAME has S servers")
    args = parser.parse_args()
    if args.screenshot:
        check_screenshot(args.screenshot)
        return
    if args.servers:
        check_servers(args.out, {k: int(v) for k, v in (item.split("=") for item in args.servers)})
        return
    for name in ["report.md", "report.html", "results.csv", "results.json", "comparison.json",
                 "figures/pareto-default_cnn.svg", "figures/loss.svg"]:
        if not (args.out / name).is_file() or (args.out / name).stat().st_size == 0:
            fail(f"{name} is missing or empty")
    html = (args.out / "report.html").read_text()
    if "http://" in html.replace("http://www.w3.org/2000/svg", "") or "https://" in html or "<script" in html:
        fail("report.html is not self-contained (it links out or runs scripts)")
    results = json.loads((args.out / "results.json").read_text())["configurations"]
    rows = {row["name"]: row for row in csv.DictReader(open(args.out / "results.csv", newline=""))}
    if len(rows) != len(results) or len(results) != 4:
        fail(f"{len(results)} configurations in results.json, {len(rows)} rows in results.csv; expected 4")
    for r in results:
        name = r["name"]
        if name in args.expect_failed:
            if r["status"] != "failed" or "signal 9" not in r["reason"]:
                fail(f"{name}: expected failed with its signal, got {r['status']}: {r['reason']}")
            if rows[name]["status"] != "failed":
                fail(f"{name}: results.csv says {rows[name]['status']}")
            continue
        if r["status"] != "done":
            fail(f"{name}: {r['status']} ({r['reason']})")
        summary = json.loads((pathlib.Path(r["run_dir"]) / "summary.json").read_text())
        for key in ["train_time_s", "samples_per_s", "steps", "final_train_loss", "test_accuracy"]:
            same(r[key], summary[key], f"{name} {key}")
            same(float(rows[name][key]), float(summary[key]), f"{name} results.csv {key}")
        same(r["world_size"], summary["world_size"], f"{name} world_size")
        same(r["strategy"], summary["strategy"], f"{name} strategy")
        communication_cpu = sum(rank["communication_cpu_s"] for rank in summary["ranks"]) / len(summary["ranks"])
        same(r["communication_cpu_s"], communication_cpu, f"{name} communication_cpu_s (mean of the ranks)")
        same(float(rows[name]["communication_cpu_s"]), communication_cpu, f"{name} results.csv communication_cpu_s")
        # The gradients' bytes per step and compression ratio, from the ranks' own counts (ddp reports them).
        if all("gradient_bytes_uncompressed" in rank for rank in summary["ranks"]):
            sent = sum(rank["gradient_bytes_sent"] for rank in summary["ranks"])
            whole = sum(rank["gradient_bytes_uncompressed"] for rank in summary["ranks"])
            per_step = sent / len(summary["ranks"]) / summary["steps"]
            same(r["gradient_bytes_per_step"], per_step, f"{name} gradient_bytes_per_step")
            same(float(rows[name]["gradient_bytes_per_step"]), per_step, f"{name} results.csv gradient_bytes_per_step")
            same(r["compression_ratio"], sent / whole, f"{name} compression_ratio")
        elif r["gradient_bytes_per_step"] is not None or rows[name]["gradient_bytes_per_step"] != "":
            fail(f"{name}: gradient bytes reported for a strategy that counts none")
        peak = max(rank["training_peak_memory_bytes"] for rank in summary["ranks"])
        same(r["training_peak_memory_bytes"], float(peak), f"{name} peak")
        same(float(rows[name]["training_peak_memory_bytes"]), float(peak), f"{name} results.csv peak")
        for rank in summary["ranks"]:
            mine = r["ranks"][rank["rank"]]
            same(mine["training_peak_memory_bytes"], rank["training_peak_memory_bytes"], f"{name} rank peak")
            same(mine["communication_s"], rank["communication_s"], f"{name} rank communication_s")
            same(mine["communication_cpu_s"], rank["communication_cpu_s"], f"{name} rank communication_cpu_s")
            series = pathlib.Path(r["run_dir"]) / "timeseries" / f"rank-{rank['rank']}.jsonl"
            samples = [json.loads(line) for line in series.read_text().splitlines()]
            if len(samples) < 2:
                fail(f"{series}: {len(samples)} samples")
            for s in samples:
                if sum(s["memory"].values()) != s["memory_bytes"] or s["rank"] != rank["rank"]:
                    fail(f"{series}: categories do not add up to memory_bytes: {s}")
            if samples[-1]["step"] != summary["steps"] or any(a["step"] > b["step"] for a, b in zip(samples, samples[1:])):
                fail(f"{series}: steps do not rise to the run's {summary['steps']}")
            # The communication threads' CPU is part of the process's (Note [Thread names]), held there by the
            # sampler (Note [Communication within the process]), not by timing.
            for s in samples:
                if not 0 <= s["communication_cpu_utilization"] <= s["cpu_utilization"]:
                    fail(f"{series}: communication CPU outside [0, the process's]: {s}")
                if s["reserved_bytes"] < s["memory_bytes"]:
                    fail(f"{series}: reserved bytes below the bytes in use: {s}")
            if summary["world_size"] > 1 and not rank["communication_cpu_s"] > 0:
                fail(f"{name} rank {rank['rank']}: no CPU seconds in its communication threads")
        # What the peak is made of: the largest rank's categories at its peak, each category's "measured /
        # predicted" in report.md's table, and the categories add up to that rank's peak.
        largest = max(summary["ranks"], key=lambda rank: rank["training_peak_memory_bytes"])
        at_peak = largest["training_memory_at_peak"]
        same(sum(at_peak.values()), largest["training_peak_memory_bytes"], f"{name} categories at the peak")
        same(r["ranks"][largest["rank"]]["memory_at_peak"], at_peak, f"{name} results.json memory_at_peak")
        predicted = r["prediction"]["memory_at_peak"] if r["prediction"] else None
        categories = ["parameters", "gradients", "optimizer_state", "activations", "communication", "workspace",
                      "compression", "other"]
        cells = [f"{mib(at_peak[c])} / {mib(predicted[c])}" if predicted else mib(at_peak[c]) for c in categories]
        ranks = f"{r['world_size']} rank" + ("" if r["world_size"] == 1 else "s")
        row = f"| {r['model']} | {r['label']}, {ranks} | " + " | ".join(cells) + " |"
        if row not in (args.out / "report.md").read_text():
            fail(f"{name}: report.md lacks the row of what its peak is made of {row!r}")
        # strata plan ran before each configuration: its memory prediction is within the 5%.
        prediction = r["prediction"]
        if not prediction or prediction["memory_error"] is None or abs(prediction["memory_error"]) > 0.05:
            fail(f"{name}: the prediction is missing or off by more than 5%: {prediction}")
        if not r["loss_curve"] or not r["accuracy_curve"]:
            fail(f"{name}: no loss or accuracy curve")
        if not (args.out / "figures" / f"memory-{name}.svg").is_file():
            fail(f"{name}: no memory figure")
    # The Pareto front: the finished configurations no other one beats in both time and memory.
    finished = [r for r in results if r["status"] == "done"]
    for r in results:
        if r["status"] != "done":
            if r["pareto_front"]:
                fail(f"{r['name']}: on the Pareto front although it did not finish")
            continue
        beaten = any(q is not r and q["train_time_s"] <= r["train_time_s"] and
                     q["training_peak_memory_bytes"] <= r["training_peak_memory_bytes"] and
                     (q["train_time_s"], q["training_peak_memory_bytes"]) !=
                     (r["train_time_s"], r["training_peak_memory_bytes"]) for q in finished)
        if r["pareto_front"] != (not beaten):
            fail(f"{r['name']}: pareto_front {r['pareto_front']}, but beaten={beaten}")
    print(f"check_compare: {len(results)} configurations agree with their summary.json")


if __name__ == "__main__":
    main()
