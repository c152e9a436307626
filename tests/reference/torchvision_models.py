"""The torchvision models Strata's reference tests use, built the way the study exports them for training."""
import torch
import torchvision

# name -> (constructor, input height/width)
MODELS = {
    "vgg16": (lambda: torchvision.models.vgg16(num_classes=10), 224),
    "resnet18": (lambda: torchvision.models.resnet18(num_classes=10), 32),
    "resnet50": (lambda: torchvision.models.resnet50(num_classes=10), 32),
    "densenet121": (lambda: torchvision.models.densenet121(num_classes=10), 32),
    "efficientnet_v2_s": (lambda: torchvision.models.efficientnet_v2_s(num_classes=10, stochastic_depth_prob=0.0), 32),
    "convnext_tiny": (lambda: torchvision.models.convnext_tiny(num_classes=10, stochastic_depth_prob=0.0), 32),
}


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


def export(model: torch.nn.Module, example: torch.Tensor, path: str) -> None:
    """Exports for training as the study does: opset 17, training mode kept, no constant folding."""
    torch.onnx.export(model, example, path, opset_version=17, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, input_names=["input"], output_names=["logits"])
