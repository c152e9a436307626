"""Checks a `strata compare` output directory (tests/cli/compare_test.sh): the report files exist, results.csv
parses, every configuration's figures in results.json and results.csv equal its own summary.json, the resource
time series exist per rank, and (with --screenshot) that a rendered report.html is not blank."""
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--expect-failed", action="append", default=[])
    parser.add_argument("--screenshot")
    args = parser.parse_args()
    if args.screenshot:
        check_screenshot(args.screenshot)
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
        peak = max(rank["training_peak_memory_bytes"] for rank in summary["ranks"])
        same(r["training_peak_memory_bytes"], float(peak), f"{name} peak")
        same(float(rows[name]["training_peak_memory_bytes"]), float(peak), f"{name} results.csv peak")
        for rank in summary["ranks"]:
            mine = r["ranks"][rank["rank"]]
            same(mine["training_peak_memory_bytes"], rank["training_peak_memory_bytes"], f"{name} rank peak")
            same(mine["communication_s"], rank["communication_s"], f"{name} rank communication_s")
            series = pathlib.Path(r["run_dir"]) / "timeseries" / f"rank-{rank['rank']}.jsonl"
            samples = [json.loads(line) for line in series.read_text().splitlines()]
            if len(samples) < 2:
                fail(f"{series}: {len(samples)} samples")
            for s in samples:
                if sum(s["memory"].values()) != s["memory_bytes"] or s["rank"] != rank["rank"]:
                    fail(f"{series}: categories do not add up to memory_bytes: {s}")
            if samples[-1]["step"] != summary["steps"] or any(a["step"] > b["step"] for a, b in zip(samples, samples[1:])):
                fail(f"{series}: steps do not rise to the run's {summary['steps']}")
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
