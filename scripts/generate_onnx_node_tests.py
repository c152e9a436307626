#!/usr/bin/env python3
"""Generates the ONNX backend node test suite (models and input/output TensorProtos) with Debian's python3-onnx.

Usage: generate_onnx_node_tests.py OUT_DIR   (writes OUT_DIR/node/test_*/...)
onnx 1.12 still uses numpy aliases that numpy 1.24 removed; they are restored before onnx is imported.
"""
import os
import sys

import numpy as np

for alias, target in (("float", float), ("int", int), ("bool", bool), ("object", object)):
    if not hasattr(np, alias):
        setattr(np, alias, target)

from onnx.backend.test import cmd_tools  # noqa: E402


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = sys.argv[1]
    stamp = os.path.join(out, "node", ".generated")
    if os.path.exists(stamp):
        return 0
    sys.argv = ["cmd_tools", "generate-data", "-o", out]
    cmd_tools.main()
    with open(stamp, "w", encoding="utf-8") as f:
        f.write("ok\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
