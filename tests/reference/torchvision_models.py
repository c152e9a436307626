"""The torchvision models Strata's reference tests use, built the way the study exports them for training."""
import os

import numpy as np
import onnx
import torch
import torchvision
from onnx import numpy_helper


class SegmentationLogits(torch.nn.Module):
    """torchvision's segmentation models return {"out": logits}; training and the export take the tensor. Parameter
    names gain the prefix "net.", as the exported initializers do."""

    def __init__(self, net: torch.nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net(x)["out"]


class HardsigmoidAsExported(torch.nn.Module):
    """Note [Hardsigmoid's slope in the file]: PyTorch's Hardsigmoid is clamp(x / 6 + 1/2, 0, 1), exported as ONNX
    HardSigmoid with alpha = 1/6 in a float attribute, which holds 0.16666667163..., not 1/6. Strata computes what
    the file states, so in float64 the two differ by the attribute's rounding (MobileNetV3's outputs by 7e-9, its
    gradients by 5e-8, against 1e-14 once the reference uses the file's slope). The reference therefore uses it."""

    SLOPE = float(np.float32(1.0 / 6.0))

    def forward(self, x):
        return torch.clamp(x * self.SLOPE + 0.5, 0.0, 1.0)


def as_exported(module: torch.nn.Module) -> torch.nn.Module:
    """The model computing what its ONNX export states (Note [Hardsigmoid's slope in the file]); parameters and
    their names are unchanged."""
    for name, child in module.named_children():
        if isinstance(child, torch.nn.Hardsigmoid):
            setattr(module, name, HardsigmoidAsExported())
        else:
            as_exported(child)
    return module


def _segmentation(constructor):
    # No pretrained backbone (weights_backbone=None: nothing is downloaded), no auxiliary head (a second output).
    return lambda: SegmentationLogits(constructor(weights=None, weights_backbone=None, num_classes=10))


_segmentation_models = torchvision.models.segmentation
# name -> (constructor, input height/width). The segmentation models' logits are [N, 10, H, W], labels [N, H, W].
MODELS = {
    "vgg16": (lambda: torchvision.models.vgg16(num_classes=10), 224),
    "resnet18": (lambda: torchvision.models.resnet18(num_classes=10), 32),
    "resnet50": (lambda: torchvision.models.resnet50(num_classes=10), 32),
    "densenet121": (lambda: torchvision.models.densenet121(num_classes=10), 32),
    "efficientnet_v2_s": (lambda: torchvision.models.efficientnet_v2_s(num_classes=10, stochastic_depth_prob=0.0), 32),
    "convnext_tiny": (lambda: torchvision.models.convnext_tiny(num_classes=10, stochastic_depth_prob=0.0), 32),
    # Dilated ResNet-50 (output stride 8) with an FCN head, bilinear Resize back to the input.
    "fcn_resnet50": (_segmentation(_segmentation_models.fcn_resnet50), 32),
    # MobileNetV3 (hard-swish, squeeze-and-excitation), ASPP with its pooled branch resized up.
    "deeplabv3_mobilenet_v3_large": (_segmentation(_segmentation_models.deeplabv3_mobilenet_v3_large), 64),
    # MobileNetV3 with the lite R-ASPP head (a sigmoid-gated pooled branch, two resizes).
    "lraspp_mobilenet_v3_large": (_segmentation(_segmentation_models.lraspp_mobilenet_v3_large), 64),
}
SEGMENTATION = {"fcn_resnet50", "deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large"}


def build(name: str, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    constructor, _ = MODELS[name]
    model = constructor()
    for module in model.modules():  # dropout p=0: outputs and gradients are deterministic
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    model.train()
    return model


def input_size(name: str) -> int:
    return MODELS[name][1]


def export(model: torch.nn.Module, example: torch.Tensor, path: str, inference: bool = False) -> None:
    """Exports for training as the study does: opset 17, training mode kept, no constant folding. With `inference`
    the model is exported as it stands (eval mode: batch norms on their running statistics) and still unfolded
    (PRESERVE skips the exporter's own folding of each batch norm into its convolution, which EVAL applies)."""
    mode = torch.onnx.TrainingMode.PRESERVE if inference else torch.onnx.TrainingMode.TRAINING
    kwargs = dict(opset_version=17, training=mode, do_constant_folding=False,
                  input_names=["input"], output_names=["logits"])
    try:  # PyTorch >= 2.9 exports through dynamo by default: newer IR, training mode not kept
        torch.onnx.export(model, example, path, dynamo=False, **kwargs)
    except TypeError:  # PyTorch < 2.5 (Debian's 1.13) has no dynamo argument
        torch.onnx.export(model, example, path, **kwargs)


def exported_case(name: str, batch: int, work: str, double: bool = False):
    """The model, a seeded batch (x, labels) and the model exported for training to WORK/model.onnx, with the model
    left in the state the file holds (export traces it) and computing what the file states (as_exported). Returns
    (model, x, labels, model_path)."""
    model = build(name)
    size = input_size(name)
    x = torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(1))
    label_shape = (batch, size, size) if name in SEGMENTATION else (batch,)  # a class per pixel, or per image
    labels = torch.randint(0, 10, label_shape, generator=torch.Generator().manual_seed(2))
    if double:
        model = model.double()
        x = x.double()
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model_path = os.path.join(work, "model.onnx")
    export(model, x, model_path)
    model.load_state_dict(state)
    return as_exported(model), x, labels, model_path


def load_tensor(path: str) -> np.ndarray:
    return numpy_helper.to_array(onnx.load_tensor(path))


def safe_name(name: str) -> str:
    """An initializer name as `strata step` writes it into a file name."""
    return name.replace("/", "_").replace(":", "_").replace("\\", "_")


def write_batch(work: str, x: torch.Tensor, labels: torch.Tensor):
    """Writes the batch as the TensorProto files `strata step` reads; returns (x.pb, y.pb)."""
    paths = (os.path.join(work, "x.pb"), os.path.join(work, "y.pb"))
    with open(paths[0], "wb") as f:
        f.write(numpy_helper.from_array(x.cpu().numpy(), "input").SerializeToString())
    with open(paths[1], "wb") as f:
        f.write(numpy_helper.from_array(labels.cpu().numpy().astype(np.int64), "labels").SerializeToString())
    return paths
