#!/usr/bin/env python3
"""Writes the seed corpora of Strata's fuzz targets (tests/fuzz) into OUTDIR/<target>/.

Seeds are small valid inputs of each format, made the way the tests and the build make the real files:
- onnx_importer_fuzzer: models built like models/make_default_model.py (the bundled CNN at a small width, an MLP,
  batch norm and residual adds, an opset-11 model that goes through ONNX's version converter, an opset-20 one that
  Strata rewrites as 17), a few KB each.
- tensor_proto_fuzzer: TensorProto files as `strata step --input` and the reference tests write them (raw data and
  typed fields, every dtype Strata reads).
- idx_dataset_fuzzer: the first images and labels of the installed Fashion-MNIST test split
  (/usr/share/datasets/fashion-mnist, Debian's dataset-fashion-mnist), raw and gzipped, in the target's input
  layout (u32 length of the images file, images file, labels file).
- cifar10_dataset_fuzzer: CIFAR-10 binary records (label byte and 3072 pixels) made from those images, raw and
  gzipped (no CIFAR-10 package exists in Debian).
- store_protocol_fuzzer: the requests a rendezvous sends (TcpStore's Add, Set, Wait, Get, Check), framed as in
  core/src/comm/store_protocol.h and split into the target's client records.
- ps_message_fuzzer: parameter-server requests as workers send them (plugins/ps/ps_protocol.h: a 64-byte header,
  an Init's layout frame, data frames), as the target's u16-length-prefixed frames.
No file is downloaded; the corpora are not committed (scripts/fuzz.sh and the fuzz.seeds test run this script).
"""
import argparse
import gzip
import os
import struct

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FASHION = "/usr/share/datasets/fashion-mnist"


def write(out, target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- ONNX models -------------------------------------------------------------------------------------------------
def weights(rng, name, shape, inits):
    inits.append(numpy_helper.from_array(rng.uniform(-0.5, 0.5, size=shape).astype(np.float32), name))
    return name


def model(nodes, inputs, outputs, inits, opset=17):
    graph = helper.make_graph(nodes, "seed", inputs, outputs, initializer=inits)
    m = helper.make_model(graph, producer_name="strata-fuzz-seeds", opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8 if opset >= 13 else 6
    onnx.checker.check_model(m)
    return m.SerializeToString()


def small_cnn(rng):
    """models/make_default_model.py's CNN at width 2 and 4 on 8x8 images."""
    inits = []
    w = lambda n, s: weights(rng, n, s, inits)
    nodes = [
        helper.make_node("Conv", ["input", w("conv1.weight", (2, 1, 3, 3)), w("conv1.bias", (2,))], ["c1"],
                         name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", w("conv2.weight", (4, 2, 3, 3)), w("conv2.bias", (4,))], ["c2"],
                         name="conv2", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("MaxPool", ["r2"], ["p2"], name="pool2", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p2"], ["f"], name="flatten", axis=1),
        helper.make_node("Gemm", ["f", w("fc1.weight", (8, 16)), w("fc1.bias", (8,))], ["h"], name="fc1", transB=1),
        helper.make_node("Relu", ["h"], ["hr"], name="relu3"),
        helper.make_node("Gemm", ["hr", w("fc2.weight", (10, 8)), w("fc2.bias", (10,))], ["logits"], name="fc2",
                         transB=1),
    ]
    return model(nodes, [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 8, 8])],
                 [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)


def mlp(rng, opset=17):
    inits = []
    w = lambda n, s: weights(rng, n, s, inits)
    nodes = [
        helper.make_node("MatMul", ["input", w("w1", (6, 5))], ["m"]),
        helper.make_node("Add", ["m", w("b1", (5,))], ["a"]),
        helper.make_node("Sigmoid", ["a"], ["s"]),
        helper.make_node("Gemm", ["s", w("w2", (3, 5)), w("b2", (3,))], ["logits"], transB=1),
    ]
    return model(nodes, [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 6])],
                 [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])], inits, opset)


def opset20_head(rng):
    """What PyTorch >= 2.9 writes (opset 20, IR 10): Gelu, Mish and ReduceMean's axes input, which Strata rewrites
    as opset 17 (Note [Opsets above 17]). ONNX 1.12's checker knows none of it, so the seed is not checked."""
    inits = [numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")]
    w = lambda n, sh: weights(rng, n, sh, inits)
    nodes = [
        helper.make_node("MatMul", ["input", w("w1", (6, 4))], ["m"], name="fc1"),
        helper.make_node("Gelu", ["m"], ["g"], name="gelu", approximate="tanh"),
        helper.make_node("Mish", ["g"], ["h"], name="mish"),
        helper.make_node("ReduceMean", ["h", "axes"], ["r"], name="mean", keepdims=1),
        helper.make_node("Mul", ["h", "r"], ["logits"], name="scale"),
    ]
    graph = helper.make_graph(nodes, "seed", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 6])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4])], initializer=inits)
    m = helper.make_model(graph, producer_name="strata-fuzz-seeds", opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 10
    return m.SerializeToString()


def residual_bn(rng):
    inits = []
    w = lambda n, s: weights(rng, n, s, inits)
    inits.append(numpy_helper.from_array(np.array([-1, 12], dtype=np.int64), "shape"))
    nodes = [
        helper.make_node("Conv", ["input", w("conv.weight", (3, 3, 3, 3))], ["c"], kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", w("bn.scale", (3,)), w("bn.bias", (3,)), w("bn.mean", (3,)),
                                                 w("bn.var", (3,))], ["b"]),
        helper.make_node("Add", ["b", "input"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["g"]),
        helper.make_node("Concat", ["g", "g"], ["cat"], axis=1),
        helper.make_node("Reshape", ["cat", "shape"], ["flat"]),
        helper.make_node("Gemm", ["flat", w("fc.weight", (4, 12))], ["logits"], transB=1),
    ]
    return model(nodes, [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 2, 2])],
                 [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4])], inits)


# ---- TensorProto files --------------------------------------------------------------------------------------------
def tensor_protos(rng):
    arrays = {
        "float32": rng.standard_normal((2, 3)).astype(np.float32),
        "float64": rng.standard_normal((3,)).astype(np.float64),
        "int64": np.array([0, 9, 3], dtype=np.int64),
        "int32": np.array([[1, -2]], dtype=np.int32),
        "int8": np.array([-3, 4], dtype=np.int8),
        "uint8": np.array([0, 255], dtype=np.uint8),
        "bool": np.array([True, False]),
        "float16": rng.standard_normal((2, 2)).astype(np.float16),
        "scalar": np.array(1.5, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }
    for name, a in arrays.items():
        yield name + ".pb", numpy_helper.from_array(a, name).SerializeToString()
    typed = helper.make_tensor("typed", TensorProto.FLOAT, [2, 2], [1.0, 2.0, 3.0, 4.0])  # float_data, not raw
    yield "typed_float.pb", typed.SerializeToString()
    yield "typed_int64.pb", helper.make_tensor("labels", TensorProto.INT64, [3], [1, 0, 7]).SerializeToString()


# ---- datasets -------------------------------------------------------------------------------------------------------
def fashion_head(count):
    with gzip.open(os.path.join(FASHION, "t10k-images-idx3-ubyte.gz")) as f:
        header = f.read(16)
        _, _, rows, cols = struct.unpack(">IIII", header)
        pixels = f.read(count * rows * cols)
    with gzip.open(os.path.join(FASHION, "t10k-labels-idx1-ubyte.gz")) as f:
        f.read(8)
        labels = f.read(count)
    images = struct.pack(">IIII", 2051, count, rows, cols) + pixels
    return images, struct.pack(">II", 2049, count) + labels, pixels, labels


def idx_input(images, labels):
    return struct.pack("<I", len(images)) + images + labels


def cifar_records(pixels, labels, count):
    out = b""
    side = 28
    for i in range(count):
        img = np.frombuffer(pixels[i * side * side:(i + 1) * side * side], dtype=np.uint8).reshape(side, side)
        padded = np.zeros((32, 32), dtype=np.uint8)
        padded[2:30, 2:30] = img
        out += bytes([labels[i]]) + np.stack([padded, padded // 2, 255 - padded]).tobytes()
    return out


# ---- store protocol -----------------------------------------------------------------------------------------------
def frame(payload):
    return struct.pack("<I", len(payload)) + payload


def s(text):
    b = text.encode() if isinstance(text, str) else text
    return struct.pack("<I", len(b)) + b


SET, GET, ADD, CHECK, WAIT = 1, 2, 3, 4, 5


def records(sends):
    """sends: (client, bytes, ms) -> the target's records, each at most 255 bytes of data."""
    out = b""
    for client, data, ms in sends:
        chunks = [data[i:i + 255] for i in range(0, len(data), 255)] or [b""]
        for k, chunk in enumerate(chunks):
            out += bytes([client, len(chunk)]) + chunk + bytes([ms if k == len(chunks) - 1 else 0])
    return out


def store_sessions():
    # A rendezvous of two ranks (TcpStore::add on the counter, set of each address, wait for all, get).
    rendezvous = [
        (0, frame(bytes([ADD]) + s("rdzv/count") + struct.pack("<q", 1)), 0),
        (1, frame(bytes([ADD]) + s("rdzv/count") + struct.pack("<q", 1)), 1),
        (1, frame(bytes([WAIT]) + struct.pack("<q", 3000) + struct.pack("<I", 2) + s("rank/0") + s("rank/1")), 2),
        (0, frame(bytes([SET]) + s("rank/0") + s(b"127.0.0.1:29500")), 0),
        (1, frame(bytes([SET]) + s("rank/1") + s(b"127.0.0.1:29501")), 0),
        (0, frame(bytes([GET]) + s("rank/1")), 0),
        (2, frame(bytes([CHECK]) + struct.pack("<I", 2) + s("rank/0") + s("missing")), 5),
    ]
    yield "rendezvous", records(rendezvous)
    # A wait that times out, a get of a missing key, and a byte-at-a-time client.
    timeout = [(0, frame(bytes([WAIT]) + struct.pack("<q", 10) + struct.pack("<I", 1) + s("never")), 20),
               (1, frame(bytes([GET]) + s("nothing")), 0)]
    yield "wait_timeout", records(timeout)
    slow = frame(bytes([SET]) + s("k") + s(b"v")) + frame(bytes([GET]) + s("k"))
    yield "byte_at_a_time", records([(2, slow[i:i + 1], 0) for i in range(len(slow))])
    big = frame(bytes([SET]) + s("gloo/rank0") + s(bytes(range(256)) * 3))
    yield "large_value", records([(0, big, 0), (1, frame(bytes([GET]) + s("gloo/rank0")), 0)])
    yield "add_to_a_value", records([(0, frame(bytes([SET]) + s("k") + s(b"text")), 0),
                                     (0, frame(bytes([ADD]) + s("k") + struct.pack("<q", 2)), 0)])


def ps_header(kind, worker, frames, sequence=1, lr=0.5, model_version=0, flags=0):
    # magic, version, kind, worker, frames, step, modelVersion, sequence, lr, staleness, flags, durable
    return struct.pack("<IHHiIqqQdiIQ", 0x31535053, 1, kind, worker, frames, 0, model_version, sequence, lr, 0,
                       flags, 0)


def ps_frames(frames):
    return b"".join(struct.pack("<H", len(f)) + f for f in frames)


def ps_messages():
    layout = struct.pack("<II", 1, 1) + struct.pack("<IIq", 0, 0, 4) + struct.pack("<IIq", 0, 0, 2)
    values = struct.pack("<4f", 1, 2, 3, 4)
    buffers = struct.pack("<2f", 0, 0)
    yield "init.bin", ps_frames([ps_header(1, 0, 3), layout, values, buffers])
    yield "push.bin", ps_frames([ps_header(3, 1, 2), values, buffers])
    yield "pull.bin", ps_frames([ps_header(2, 3, 0)])
    yield "idle.bin", ps_frames([ps_header(8, 2, 0)])
    yield "stats.bin", ps_frames([ps_header(6, 0, 0)])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir")
    out = parser.parse_args().outdir
    rng = np.random.default_rng(0)

    write(out, "onnx_importer_fuzzer", "small_cnn.onnx", small_cnn(rng))
    write(out, "onnx_importer_fuzzer", "mlp.onnx", mlp(rng))
    write(out, "onnx_importer_fuzzer", "mlp_opset11.onnx", mlp(rng, opset=11))
    write(out, "onnx_importer_fuzzer", "residual_bn.onnx", residual_bn(rng))
    write(out, "onnx_importer_fuzzer", "opset20_head.onnx", opset20_head(rng))

    for name, data in tensor_protos(rng):
        write(out, "tensor_proto_fuzzer", name, data)

    images, labels, pixels, label_bytes = fashion_head(3)
    write(out, "idx_dataset_fuzzer", "fashion3.raw", idx_input(images, labels))
    gz_images = gzip.compress(images, mtime=0)
    write(out, "idx_dataset_fuzzer", "fashion3.gz", idx_input(gz_images, gzip.compress(labels, mtime=0)))
    one_images, one_labels, _, _ = fashion_head(1)
    write(out, "idx_dataset_fuzzer", "fashion1.raw", idx_input(one_images, one_labels))

    cifar = cifar_records(pixels, label_bytes, 2)
    write(out, "cifar10_dataset_fuzzer", "two_records.bin", cifar)
    write(out, "cifar10_dataset_fuzzer", "two_records.gz", gzip.compress(cifar, mtime=0))
    write(out, "cifar10_dataset_fuzzer", "one_record.bin", cifar[:3073])

    for name, data in store_sessions():
        write(out, "store_protocol_fuzzer", name, data)

    for name, data in ps_messages():
        write(out, "ps_message_fuzzer", name, data)


if __name__ == "__main__":
    main()
