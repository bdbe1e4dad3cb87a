"""torchvision's ResNets (BasicBlock, "V1.5" Bottleneck) written in plain PyTorch with
torchvision's parameter names, and random state dicts for them: the reference the ResNet tests
and the GPU benchmark compare lazyburn's models with (torchvision itself is not needed)."""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn as tnn

class TorchBasicBlock(tnn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = tnn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = tnn.BatchNorm2d(planes)
        self.relu = tnn.ReLU(inplace=True)
        self.conv2 = tnn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = tnn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class TorchBottleneck(tnn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = tnn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = tnn.BatchNorm2d(planes)
        self.conv2 = tnn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = tnn.BatchNorm2d(planes)
        self.conv3 = tnn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = tnn.BatchNorm2d(planes * 4)
        self.relu = tnn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + identity)


class TorchResNet(tnn.Module):
    def __init__(self, block, layers, num_classes=1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = tnn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = tnn.BatchNorm2d(64)
        self.relu = tnn.ReLU(inplace=True)
        self.maxpool = tnn.MaxPool2d(3, 2, 1)
        self.layer1 = self._stage(block, 64, layers[0], 1)
        self.layer2 = self._stage(block, 128, layers[1], 2)
        self.layer3 = self._stage(block, 256, layers[2], 2)
        self.layer4 = self._stage(block, 512, layers[3], 2)
        self.avgpool = tnn.AdaptiveAvgPool2d((1, 1))
        self.fc = tnn.Linear(512 * block.expansion, num_classes)

    def _stage(self, block, planes, blocks, stride):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = tnn.Sequential(
                tnn.Conv2d(self.inplanes, planes * block.expansion, 1, stride, bias=False),
                tnn.BatchNorm2d(planes * block.expansion))
        stage = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        stage += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return tnn.Sequential(*stage)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


TORCH_MODELS = {"resnet18": (TorchBasicBlock, (2, 2, 2, 2)),
                "resnet34": (TorchBasicBlock, (3, 4, 6, 3)),
                "resnet50": (TorchBottleneck, (3, 4, 6, 3))}


def random_state(model, seed: int) -> dict[str, np.ndarray]:
    """Fresh random values for ``model``'s state dict: He-scaled convolutions (so the
    activations stay of order one through the depth), batch norms with weights, biases and
    running statistics far from their initial 1 / 0 / 0 / 1, and a random batch count."""
    rng = np.random.default_rng(seed)
    state = {}
    for key, t in model.state_dict().items():
        shape = tuple(t.shape)
        if key.endswith("num_batches_tracked"):
            a = np.array(rng.integers(1, 1000), np.int64)
        elif key.endswith("running_var"):
            a = rng.uniform(0.5, 2.0, shape)
        elif key.endswith("running_mean") or (key.endswith("bias") and len(shape) == 1):
            a = rng.normal(0.0, 0.2, shape)
        elif len(shape) == 1:  # a batch norm's weight
            a = rng.uniform(0.5, 1.5, shape)
        else:  # a convolution or the classifier
            a = rng.normal(0.0, math.sqrt(2.0 / np.prod(shape[1:])), shape)
        state[key] = np.asarray(a, np.float32 if a.dtype.kind == "f" else a.dtype)
    return state
