#!/usr/bin/env python3
"""Exports the study's models (../shared/design/STUDY.md) as training-mode ONNX files for `strata train` and
`strata compare`: torchvision definitions with 10 classes, stochastic depth off (its Bernoulli op does not export in
training mode), exported as the study did (opset 17, TrainingMode.TRAINING, no constant folding).

  /usr/bin/python3 scripts/export_study_models.py --out models/ vgg16 resnet50 --channels 1 --size 28

--channels 1 --size 28 makes MNIST/Fashion-MNIST models (the first convolution takes one channel); the default is
CIFAR-10's 3x32x32. At 32x32 or less VGG16's 7x7 adaptive pooling does not export: it is dropped and the first
classifier layer takes the 512 features left (as bench/fsdp_experiment1.py does).
"""
import argparse
import os

import torch
import torchvision


def vgg16(size):
    if size < 32:
        raise SystemExit(f"vgg16 needs inputs of at least 32x32 (its five poolings leave nothing of {size}x{size})")
    model = torchvision.models.vgg16(num_classes=10)
    if size < 224:
        features = size // 32
        model.avgpool = torch.nn.Identity()
        model.classifier[0] = torch.nn.Linear(512 * features * features, 4096)
    return model


MODELS = {
    "vgg16": vgg16,
    "resnet18": lambda size: torchvision.models.resnet18(num_classes=10),
    "resnet50": lambda size: torchvision.models.resnet50(num_classes=10),
    "densenet121": lambda size: torchvision.models.densenet121(num_classes=10),
    "efficientnet_v2_s": lambda size: torchvision.models.efficientnet_v2_s(num_classes=10, stochastic_depth_prob=0.0),
    "convnext_tiny": lambda size: torchvision.models.convnext_tiny(num_classes=10, stochastic_depth_prob=0.0),
    "convnext_large": lambda size: torchvision.models.convnext_large(num_classes=10, stochastic_depth_prob=0.0),
}


def one_channel(model):
    """Replaces the first convolution by one that takes a single channel (same output, kernel, stride)."""
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Conv2d) and module.in_channels == 3:
            parent = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
            setattr(parent, name.rsplit(".", 1)[-1],
                    torch.nn.Conv2d(1, module.out_channels, module.kernel_size, module.stride, module.padding,
                                    bias=module.bias is not None))
            return model
    raise SystemExit("no 3-channel convolution found")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", choices=sorted(MODELS))
    parser.add_argument("--out", required=True)
    parser.add_argument("--channels", type=int, default=3, choices=[1, 3])
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--batch", type=int, default=2, help="the batch of the export (Strata specialises it)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name in args.models:
        torch.manual_seed(0)
        model = MODELS[name](args.size)
        if args.channels == 1:
            model = one_channel(model)
        path = os.path.join(args.out, f"{name}.onnx")
        options = dict(opset_version=17, do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING,
                       input_names=["input"], output_names=["logits"], dynamic_axes={"input": {0: "batch"}})
        if tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 5):
            options["dynamo"] = False  # the TorchScript exporter, as Strata's tests use
        torch.onnx.export(model.train(), torch.randn(args.batch, args.channels, args.size, args.size), path, **options)
        print(f"{path}: {sum(p.numel() for p in model.parameters())} parameters")


if __name__ == "__main__":
    main()
