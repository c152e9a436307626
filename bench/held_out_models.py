"""Torchvision classifiers the project was not tuned on (issue 18's held-out set), shared by bench/kernel_paths.py
and bench/cpu_peers.py: each model's constructor and the square image size it is run at."""
import torchvision

HELD_OUT = {
    "mobilenet_v3_small": (lambda: torchvision.models.mobilenet_v3_small(num_classes=10), 64),
    "mobilenet_v2": (lambda: torchvision.models.mobilenet_v2(num_classes=10), 64),
    "shufflenet_v2_x1_0": (lambda: torchvision.models.shufflenet_v2_x1_0(num_classes=10), 64),
    "regnet_y_400mf": (lambda: torchvision.models.regnet_y_400mf(num_classes=10), 64),
    "mnasnet0_5": (lambda: torchvision.models.mnasnet0_5(num_classes=10), 64),
    "squeezenet1_1": (lambda: torchvision.models.squeezenet1_1(num_classes=10), 64),
    "resnext50_32x4d": (lambda: torchvision.models.resnext50_32x4d(num_classes=10), 32),
}


def held_out_cases(batch_of):
    """{name: (constructor, input shape)}, the batch given by batch_of(image size)."""
    return {name: (build, (batch_of(size), 3, size, size)) for name, (build, size) in HELD_OUT.items()}
