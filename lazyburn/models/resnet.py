"""ResNet image classifiers (He et al., "Deep Residual Learning for Image Recognition", 2016)
with torchvision's architecture and parameter names, so a torchvision state dict loads by name.

    from lazyburn.models import resnet
    model = resnet.resnet50(device="opencl:0")          # random weights, eval mode
    model.load_safetensors("resnet50.safetensors")      # torchvision's state dict, as saved
    logits = model(images)                              # (N, 3, H, W) float32 -> (N, 1000)

``resnet18`` and ``resnet34`` stack BasicBlocks (two 3x3 convolutions), ``resnet50`` stacks
Bottlenecks (1x1, 3x3, 1x1, the stride on the 3x3 as torchvision's "ResNet V1.5"). Every
convolution is bias-free and followed by a batch norm; parameter names are torchvision's
(``conv1``, ``bn1``, ``layer1.0.conv1``, ``layer2.0.downsample.0`` / ``.1``, ``fc``), batch
norms carrying ``running_mean``, ``running_var`` and ``num_batches_tracked``.

Models start in eval mode: each batch norm normalizes with its running statistics, a
per-channel scale and shift. At the end of a block it fuses on write into the convolution's
kernel with the residual add and the ReLU; between two convolutions it is computed today by
the kernel that writes the next convolution's window operand (``lazyburn.explain`` shows the
groups). A torchvision state dict saved with
``safetensors.torch.save_file(model.state_dict(), path)`` loads with ``load_safetensors``;
the checks are ``Module.load_state_dict``'s (every name, shape and dtype kind, all problems
reported at once as a ``lazyburn.nn.WeightsError``).

The weights are initialized as torchvision's: convolutions from Kaiming normal (fan_out,
ReLU gain), batch norms with weight 1 and bias 0, the classifier ``torch.nn.Linear``'s
default. ImageNet preprocessing (``preprocess``) is torchvision's: resize the shorter side to
256 (bilinear), center crop 224, scale to [0, 1], normalize by ``IMAGENET_MEAN`` and
``IMAGENET_STD``.
"""
from __future__ import annotations

import math

import numpy as np

from ..frontend import functional as F
from ..frontend.creation import tensor
from ..frontend.random import default_generator
from ..frontend.tensor import Tensor
from ..ir import dtypes as dt
from ..nn import (AdaptiveAvgPool2d, BatchNorm2d, Conv2d, Linear, MaxPool2d, Module,
                  Sequential)
from ..runtime import canonical

#: per-channel (R, G, B) mean and standard deviation of ImageNet, on [0, 1] pixel values
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _conv(in_channels, out_channels, kernel_size, stride, padding, dtype, device, generator):
    """A bias-free convolution with Kaiming-normal weights (fan_out, ReLU gain), as
    torchvision's ResNet initializes them."""
    conv = Conv2d(in_channels, out_channels, kernel_size, stride, padding, bias=False,
                  dtype=dtype, device=device, generator=generator)
    std = math.sqrt(2.0 / (out_channels * kernel_size * kernel_size))
    conv.weight = generator.normal(conv.weight.shape, 0.0, std, dtype, device)
    return conv


class BasicBlock(Module):
    """Two 3x3 convolutions with batch norms and a residual connection:
    ``relu(bn2(conv2(relu(bn1(conv1(x))))) + identity)``, where ``identity`` is ``x`` or
    ``downsample(x)`` (a strided 1x1 convolution and batch norm) when the shape changes.
    (N, inplanes, H, W) -> (N, planes, H / stride, W / stride)."""

    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample=None,
                 dtype="float32", device=None, generator=None):
        g = generator or default_generator()
        self.conv1 = _conv(inplanes, planes, 3, stride, 1, dtype, device, g)
        self.bn1 = BatchNorm2d(planes, dtype=dtype, device=device)
        self.conv2 = _conv(planes, planes, 3, 1, 1, dtype, device, g)
        self.bn2 = BatchNorm2d(planes, dtype=dtype, device=device)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x if self.downsample is None else self.downsample(x)
        return F.relu(out + identity)


class Bottleneck(Module):
    """A 1x1 reduction, a 3x3 convolution (carrying the stride, as torchvision's V1.5) and a
    1x1 expansion by ``expansion`` (4), each with a batch norm, and a residual connection as
    BasicBlock's. (N, inplanes, H, W) -> (N, planes * 4, H / stride, W / stride)."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample=None,
                 dtype="float32", device=None, generator=None):
        g = generator or default_generator()
        self.conv1 = _conv(inplanes, planes, 1, 1, 0, dtype, device, g)
        self.bn1 = BatchNorm2d(planes, dtype=dtype, device=device)
        self.conv2 = _conv(planes, planes, 3, stride, 1, dtype, device, g)
        self.bn2 = BatchNorm2d(planes, dtype=dtype, device=device)
        self.conv3 = _conv(planes, planes * self.expansion, 1, 1, 0, dtype, device, g)
        self.bn3 = BatchNorm2d(planes * self.expansion, dtype=dtype, device=device)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = x if self.downsample is None else self.downsample(x)
        return F.relu(out + identity)


class ResNet(Module):
    """A ResNet: a 7x7 stride-2 stem (``conv1``, ``bn1``, ReLU, 3x3 stride-2 max pool), four
    stages ``layer1``..``layer4`` of ``block`` (``layers`` blocks each, 64, 128, 256, 512
    planes, stride 2 from ``layer2`` on), a global average pool and ``fc``.

    Input (N, 3, H, W) of ``dtype`` (H, W at least 32 for the five halvings; 224 for
    ImageNet) -> logits (N, num_classes). Starts in eval mode (running batch-norm statistics);
    ``train()`` switches to batch statistics.
    """

    def __init__(self, block, layers, num_classes: int = 1000, dtype="float32", device=None,
                 generator=None):
        self.dtype = dt.dtype(dtype)
        self.device = canonical(device)
        self.num_classes = num_classes
        g = generator or default_generator()
        self.inplanes = 64
        self.conv1 = _conv(3, 64, 7, 2, 3, dtype, self.device, g)
        self.bn1 = BatchNorm2d(64, dtype=dtype, device=self.device)
        self.maxpool = MaxPool2d(3, 2, 1)
        self.layer1 = self._stage(block, 64, layers[0], 1, g)
        self.layer2 = self._stage(block, 128, layers[1], 2, g)
        self.layer3 = self._stage(block, 256, layers[2], 2, g)
        self.layer4 = self._stage(block, 512, layers[3], 2, g)
        self.avgpool = AdaptiveAvgPool2d(1)
        self.fc = Linear(512 * block.expansion, num_classes, dtype=dtype, device=self.device,
                         generator=g)
        self.eval()

    def _stage(self, block, planes: int, blocks: int, stride: int, g) -> Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = Sequential(
                _conv(self.inplanes, planes * block.expansion, 1, stride, 0, self.dtype,
                      self.device, g),
                BatchNorm2d(planes * block.expansion, dtype=self.dtype, device=self.device))
        stage = [block(self.inplanes, planes, stride, downsample, self.dtype, self.device, g)]
        self.inplanes = planes * block.expansion
        stage += [block(self.inplanes, planes, 1, None, self.dtype, self.device, g)
                  for _ in range(1, blocks)]
        return Sequential(*stage)

    def features(self, x):
        """The globally pooled features before ``fc``: (N, 3, H, W) -> (N, 512 * expansion)."""
        if not isinstance(x, Tensor):
            x = tensor(np.asarray(x), dtype=self.dtype, device=self.device)
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.maxpool(x)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.avgpool(x).reshape(x.shape[0], -1)

    def forward(self, x):
        """Logits: (N, 3, H, W) Tensor or array -> (N, num_classes) Tensor, recorded lazily.
        Raises ShapeError for an input that is not 4-D with 3 channels."""
        return self.fc(self.features(x))

    def to(self, device) -> "ResNet":
        """Move the parameters and buffers to ``device``; later inputs run there. Returns
        self."""
        super().to(device)
        self.device = canonical(device)
        return self

    def extra_repr(self) -> str:
        return f"num_classes={self.num_classes}, dtype={self.dtype}, device={self.device!r}"


def resnet18(num_classes: int = 1000, dtype="float32", device=None, generator=None) -> ResNet:
    """ResNet-18: BasicBlocks [2, 2, 2, 2], 11.7 M parameters (1000 classes)."""
    return ResNet(BasicBlock, (2, 2, 2, 2), num_classes, dtype, device, generator)


def resnet34(num_classes: int = 1000, dtype="float32", device=None, generator=None) -> ResNet:
    """ResNet-34: BasicBlocks [3, 4, 6, 3], 21.8 M parameters (1000 classes)."""
    return ResNet(BasicBlock, (3, 4, 6, 3), num_classes, dtype, device, generator)


def resnet50(num_classes: int = 1000, dtype="float32", device=None, generator=None) -> ResNet:
    """ResNet-50: Bottlenecks [3, 4, 6, 3], 25.6 M parameters (1000 classes)."""
    return ResNet(Bottleneck, (3, 4, 6, 3), num_classes, dtype, device, generator)


#: the constructors by name, for the command line
MODELS = {"resnet18": resnet18, "resnet34": resnet34, "resnet50": resnet50}


def preprocess(image, size: int = 224, resize: int = 256, device=None,
               dtype="float32") -> Tensor:
    """torchvision's ImageNet evaluation transform of one image, recorded lazily: the shorter
    side resized to ``resize`` (bilinear, half-pixel centers, no antialiasing), a centered
    ``size`` x ``size`` crop, pixels scaled to [0, 1] and normalized by ``IMAGENET_MEAN`` and
    ``IMAGENET_STD``.

    ``image``: (H, W, 3) uint8 RGB array (as image files decode). Returns (1, 3, size, size)
    of ``dtype`` on ``device``. Raises ValueError for an image that is not (H, W, 3) or
    smaller than the crop after resizing.

    torchvision resizes PIL images with antialiasing; this bilinear resize has none, so a
    large photograph downscaled here is a little sharper than torchvision's (the classes
    rarely change).
    """
    a = np.asarray(image)
    if a.ndim != 3 or a.shape[2] != 3:
        raise ValueError(f"preprocess: expected an (H, W, 3) RGB image, got shape {a.shape}")
    h, w = a.shape[:2]
    # torchvision: the shorter side becomes `resize`, the other int(resize * long / short)
    if h <= w:
        out_h, out_w = resize, int(resize * w / h)
    else:
        out_h, out_w = int(resize * h / w), resize
    if min(out_h, out_w) < size:
        raise ValueError(f"preprocess: a {size}x{size} crop does not fit the resized "
                         f"{out_h}x{out_w} image")
    x = tensor(a, device=device).astype(dtype).permute(2, 0, 1).reshape(1, 3, h, w)
    x = F.interpolate(x / 255.0, size=(out_h, out_w), mode="bilinear", align_corners=False)
    top = int(round((out_h - size) / 2.0))
    left = int(round((out_w - size) / 2.0))
    x = x[:, :, top:top + size, left:left + size]
    mean = tensor(np.asarray(IMAGENET_MEAN, np.float32).reshape(1, 3, 1, 1), dtype=dtype,
                  device=device)
    std = tensor(np.asarray(IMAGENET_STD, np.float32).reshape(1, 3, 1, 1), dtype=dtype,
                 device=device)
    return (x - mean) / std
