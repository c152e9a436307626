"""Ends a GPU reference check that cannot run here before it loads PyTorch: importing torch and torchvision takes
about 1.4 s, and CI without a GPU skips 18 such checks."""
import argparse
import subprocess
import sys


def skip_reason(strata: str, device: str):
    """Why `strata --device DEVICE` cannot run here (no GPU, or built without CUDA), or None when it can."""
    if device == "cpu":
        return None
    probe = subprocess.run([strata, "run", "--device", device], capture_output=True, text=True)
    if probe.returncode != 0 and any(why in probe.stderr for why in ("cannot use CUDA", "without the CUDA backend")):
        return probe.stderr.strip().splitlines()[-1]
    return None


def exit_if_skipped():
    """Reads --strata and --device from the command line; exits with ctest's skip code (77) and the reason when that
    device cannot run here."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--strata")
    parser.add_argument("--device", default="cpu")
    known, _ = parser.parse_known_args()
    reason = skip_reason(known.strata, known.device) if known.strata else None
    if reason:
        print(f"skipped: {reason}")
        sys.exit(77)
