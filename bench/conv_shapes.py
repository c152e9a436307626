"""Lists an ONNX model's 2-D convolution shapes for bench/conv_layouts.cpp, one line per distinct shape:
count N,C,H,W K,C/group,R,S strideH,strideW padTop,padLeft,padBottom,padRight group

    /usr/bin/python3 bench/conv_shapes.py model.onnx > shapes.txt
"""
import collections
import sys

import onnx
from onnx import shape_inference


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: conv_shapes.py MODEL.onnx")
    graph = shape_inference.infer_shapes(onnx.load(sys.argv[1])).graph
    dims = {i.name: list(i.dims) for i in graph.initializer}
    for info in list(graph.value_info) + list(graph.input) + list(graph.output):
        dims.setdefault(info.name, [d.dim_value for d in info.type.tensor_type.shape.dim])
    counts = collections.Counter()
    for node in graph.node:
        if node.op_type != "Conv":
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        x, w = dims.get(node.input[0]), dims.get(node.input[1])
        if not x or not w or len(x) != 4 or 0 in x or attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            sys.exit(f"node {node.name}: needs a 4-D input of known shape and explicit pads")
        if attrs.get("dilations", [1, 1]) != [1, 1]:
            sys.exit(f"node {node.name}: dilated convolutions are not covered")
        key = (tuple(x), tuple(w), tuple(attrs.get("strides", [1, 1])), tuple(attrs.get("pads", [0, 0, 0, 0])),
               attrs.get("group", 1))
        counts[key] += 1
    for (x, w, strides, pads, group), count in counts.items():
        print(count, ",".join(map(str, x)), ",".join(map(str, w)), ",".join(map(str, strides)),
              ",".join(map(str, pads)), group)


if __name__ == "__main__":
    main()
