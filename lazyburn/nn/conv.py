"""Convolution and pooling layers with ``torch.nn``'s names, parameters and initialization:
Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d, MaxPool1d, MaxPool2d, AvgPool1d, AvgPool2d,
AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveMaxPool2d.

Each forward records the ``lazyburn`` function of the same name (``frontend/conv.py``)."""
from __future__ import annotations

import math

from ..frontend import conv as C
from ..frontend.random import default_generator
from .module import Module


def _tuple(value, n: int) -> tuple:
    return (value,) * n if isinstance(value, int) else tuple(value)


class _ConvNd(Module):
    """Weight and bias drawn from U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in =
    weight.shape[1] * prod(kernel_size): ``torch.nn``'s default (Kaiming uniform with
    a = sqrt(5))."""

    transposed = False
    dims = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 output_padding=0, dtype="float32", device=None, generator=None):
        if padding_mode != "zeros":
            raise ValueError(f"{type(self).__name__}: only padding_mode='zeros' is supported, "
                             f"got {padding_mode!r}")
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise ValueError(f"{type(self).__name__}: in_channels ({in_channels}) and "
                             f"out_channels ({out_channels}) must be divisible by groups "
                             f"({groups})")
        n = self.dims
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _tuple(kernel_size, n)
        self.stride, self.dilation = _tuple(stride, n), _tuple(dilation, n)
        self.padding = padding if isinstance(padding, str) else _tuple(padding, n)
        self.output_padding = _tuple(output_padding, n)
        self.groups = groups
        shape = ((in_channels, out_channels // groups) if self.transposed else
                 (out_channels, in_channels // groups)) + self.kernel_size
        bound = 1.0 / math.sqrt(shape[1] * math.prod(self.kernel_size))
        g = generator or default_generator()
        self.weight = g.uniform(shape, -bound, bound, dtype, device)
        self.bias = g.uniform((out_channels,), -bound, bound, dtype, device) if bias else None

    def extra_repr(self) -> str:
        text = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}")
        if self.padding != (0,) * self.dims:
            text += f", padding={self.padding}"
        if self.dilation != (1,) * self.dims:
            text += f", dilation={self.dilation}"
        if self.groups != 1:
            text += f", groups={self.groups}"
        return text + ("" if self.bias is not None else ", bias=False")


class Conv1d(_ConvNd):
    """``lb.conv1d`` with a learned weight (out_channels, in_channels / groups, k) and bias:
    (N, C_in, L) -> (N, C_out, L_out)."""

    dims = 1

    def forward(self, x):
        return C.conv1d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)


class Conv2d(_ConvNd):
    """``lb.conv2d`` with a learned weight (out_channels, in_channels / groups, kH, kW) and
    bias: (N, C_in, H, W) -> (N, C_out, H_out, W_out)."""

    def forward(self, x):
        return C.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)


class ConvTranspose1d(_ConvNd):
    """``lb.conv_transpose1d`` with a learned weight (in_channels, out_channels / groups, k)."""

    dims = 1
    transposed = True

    def forward(self, x):
        return C.conv_transpose1d(x, self.weight, self.bias, self.stride, self.padding,
                                  self.output_padding, self.groups, self.dilation)


class ConvTranspose2d(_ConvNd):
    """``lb.conv_transpose2d`` with a learned weight (in_channels, out_channels / groups, kH,
    kW): (N, C_in, H, W) -> (N, C_out, H_out, W_out)."""

    transposed = True

    def forward(self, x):
        return C.conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding,
                                  self.output_padding, self.groups, self.dilation)


class _Pool(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False, **options):
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode = ceil_mode
        self.options = options

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride or self.kernel_size}, "
                f"padding={self.padding}, ceil_mode={self.ceil_mode}")


class MaxPool1d(_Pool):
    """``lb.max_pool1d`` (kernel_size, stride=None, padding=0, dilation=1,
    return_indices=False, ceil_mode=False)."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1,
                 return_indices: bool = False, ceil_mode: bool = False):
        super().__init__(kernel_size, stride, padding, ceil_mode, dilation=dilation,
                         return_indices=return_indices)

    def forward(self, x):
        return C.max_pool1d(x, self.kernel_size, self.stride, self.padding,
                            ceil_mode=self.ceil_mode, **self.options)


class MaxPool2d(MaxPool1d):
    """``lb.max_pool2d`` (kernel_size, stride=None, padding=0, dilation=1,
    return_indices=False, ceil_mode=False)."""

    def forward(self, x):
        return C.max_pool2d(x, self.kernel_size, self.stride, self.padding,
                            ceil_mode=self.ceil_mode, **self.options)


class AvgPool1d(_Pool):
    """``lb.avg_pool1d`` (kernel_size, stride=None, padding=0, ceil_mode=False,
    count_include_pad=True)."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True):
        super().__init__(kernel_size, stride, padding, ceil_mode,
                         count_include_pad=count_include_pad)

    def forward(self, x):
        return C.avg_pool1d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            **self.options)


class AvgPool2d(_Pool):
    """``lb.avg_pool2d`` (kernel_size, stride=None, padding=0, ceil_mode=False,
    count_include_pad=True, divisor_override=None)."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override=None):
        super().__init__(kernel_size, stride, padding, ceil_mode,
                         count_include_pad=count_include_pad, divisor_override=divisor_override)

    def forward(self, x):
        return C.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            **self.options)


class _AdaptivePool(Module):
    function = staticmethod(C.adaptive_avg_pool2d)

    def __init__(self, output_size):
        self.output_size = output_size

    def forward(self, x):
        return self.function(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_AdaptivePool):
    """``lb.adaptive_avg_pool1d(x, output_size)``."""

    function = staticmethod(C.adaptive_avg_pool1d)


class AdaptiveAvgPool2d(_AdaptivePool):
    """``lb.adaptive_avg_pool2d(x, output_size)``; ``AdaptiveAvgPool2d(1)`` is a global
    average pool."""


class AdaptiveMaxPool2d(_AdaptivePool):
    """``lb.adaptive_max_pool2d(x, output_size)``."""

    function = staticmethod(C.adaptive_max_pool2d)
