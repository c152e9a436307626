"""What the multirank check scripts share: free ports for their jobs' stores, and an exported model's weights.

Every check used to take a fixed port of its own (and some the launcher's 29500), so two checks that ctest ran at
once could meet on one port, and a check run by hand beside a test run could too. A free port is taken just before
the job starts, from below Linux's ephemeral range (32768-60999 by default), where the kernel never hands out the
ports of outgoing connections, and at random, so two checks starting together do not pick the same one.
"""

import random
import socket

import onnx
from onnx import numpy_helper

_FIRST, _LAST = 20000, 32000


def _is_free(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def free_ports(count=1):
    """The first of `count` consecutive TCP ports that are free now."""
    rng = random.Random()
    for _ in range(1000):
        base = rng.randrange(_FIRST, _LAST - count)
        if all(_is_free(base + i) for i in range(count)):
            return base
    raise SystemExit(f"no {count} consecutive free TCP ports in {_FIRST}-{_LAST}")


def free_port():
    return free_ports(1)


def weights(path):
    """The initializers of an .onnx file, by name."""
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer}
