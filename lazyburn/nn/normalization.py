"""Normalization and resampling layers: BatchNorm1d, BatchNorm2d, GroupNorm, RMSNorm, and the
shape layers Flatten, Unflatten and Upsample.

Parameters and buffers follow ``torch.nn``'s names, layouts and initializations (``weight``,
``bias``, ``running_mean``, ``running_var``, ``num_batches_tracked``), so state dicts saved
from PyTorch load by name. Every forward records lazy ops only; a batch norm's running
statistics are updated lazily in training mode (the buffers take the new values as pending
tensors, computed with the next sync).
"""
from __future__ import annotations

from ..errors import ShapeError
from ..frontend import functional as F
from ..frontend.creation import ones, tensor, zeros
from ..frontend.inspection import __array_namespace_info__
from ..frontend.movement import flatten
from ..frontend.record import Origin
from ..ir.shapes import normalize_axis, prod
from .module import Module


def _counter_dtype(device) -> str:
    """int64 as PyTorch's ``num_batches_tracked``, int32 on a device without 64-bit
    integers (WebGPU)."""
    return "int64" if "int64" in __array_namespace_info__().dtypes(device=device) else "int32"


class _BatchNorm(Module):
    """Batch normalization over the channel dimension (dimension 1) of its input; the ranks it
    accepts are its subclass's ``ranks``.

    Parameters (when ``affine``): ``weight`` (ones) and ``bias`` (zeros), each
    (num_features,). Buffers (when ``track_running_stats``): ``running_mean`` (zeros),
    ``running_var`` (ones), ``num_batches_tracked`` (0). In training mode the batch's
    statistics normalize and the running statistics are updated with ``momentum`` (a
    cumulative average when ``momentum`` is None, which reads the batch count: a sync); in
    eval mode the running statistics normalize (the batch's when not tracked).
    Raises ShapeError for an input of the wrong rank or channel count."""

    ranks: tuple = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, dtype="float32",
                 device=None):
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.weight = ones((num_features,), dtype, device) if affine else None
        self.bias = zeros((num_features,), dtype, device) if affine else None
        if track_running_stats:
            self.register_buffer("running_mean", zeros((num_features,), dtype, device))
            self.register_buffer("running_var", ones((num_features,), dtype, device))
            self.register_buffer("num_batches_tracked",
                                 tensor(0, dtype=_counter_dtype(device), device=device))
        else:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(name, None)

    def forward(self, x):
        if x.ndim not in self.ranks:
            want = " or ".join(f"{r}-D" for r in self.ranks)
            raise ShapeError(f"{type(self).__name__}: expected a {want} input, got shape "
                             f"{x.shape}", Origin(1))
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            count = self.num_batches_tracked + 1
            F.assign(self.num_batches_tracked, count)  # in place, as PyTorch's add_(1)
            if self.momentum is None:
                factor = 1.0 / float(count)
        tracked = not self.training or self.track_running_stats
        return F.batch_norm(x, self.running_mean if tracked else None,
                            self.running_var if tracked else None, self.weight, self.bias,
                            self.training or self.running_mean is None, factor, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch normalization (Ioffe & Szegedy, 2015) of an input (N, C) or (N, C, L), as
    ``torch.nn.BatchNorm1d``; see ``lazyburn.batch_norm`` for the formula."""

    ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalization (Ioffe & Szegedy, 2015) of an input (N, C, H, W), as
    ``torch.nn.BatchNorm2d``; see ``lazyburn.batch_norm`` for the formula."""

    ranks = (4,)


class GroupNorm(Module):
    """Group normalization (Wu & He, 2018) of an input (N, C, *), as ``torch.nn.GroupNorm``.

    Parameters (when ``affine``): ``weight`` (ones) and ``bias`` (zeros), each (num_channels,).
    Raises ShapeError when ``num_channels`` is not divisible by ``num_groups``."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True, dtype="float32", device=None):
        if num_groups < 1 or num_channels % num_groups:
            raise ShapeError(f"GroupNorm: {num_channels} channels cannot be split into "
                             f"{num_groups} groups", Origin(1))
        self.num_groups, self.num_channels, self.eps, self.affine = (num_groups, num_channels,
                                                                     eps, affine)
        self.weight = ones((num_channels,), dtype, device) if affine else None
        self.bias = zeros((num_channels,), dtype, device) if affine else None

    def forward(self, x):
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


class RMSNorm(Module):
    """Root-mean-square normalization (Zhang & Sennrich, 2019) over the trailing
    ``normalized_shape``, as ``torch.nn.RMSNorm``; ``eps`` None is the computing dtype's
    machine epsilon. Parameter (when ``elementwise_affine``): ``weight`` (ones) of
    ``normalized_shape``. Raises ShapeError when the trailing dimensions do not match."""

    def __init__(self, normalized_shape, eps: float | None = None,
                 elementwise_affine: bool = True, dtype="float32", device=None):
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape, self.eps = tuple(normalized_shape), eps
        self.weight = ones(self.normalized_shape, dtype, device) if elementwise_affine else None

    def forward(self, x):
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"


class Flatten(Module):
    """Dimensions ``start_dim`` to ``end_dim`` merged into one (a view), as
    ``torch.nn.Flatten``: (N, C, H, W) -> (N, C*H*W) by default."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return flatten(x, self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Dimension ``dim`` split into ``unflattened_size`` (a view), as ``torch.nn.Unflatten``:
    (N, 64) -> (N, 1, 8, 8) for ``Unflatten(1, (1, 8, 8))``; one size may be -1.

    Raises ShapeError when ``dim`` is out of range or the sizes (at most one -1) do not
    multiply to the dimension's size."""

    def __init__(self, dim: int, unflattened_size):
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, x):
        origin = Origin(1)
        d = normalize_axis("Unflatten", self.dim, x.shape, origin)
        n, sizes = x.shape[d], self.unflattened_size
        known = prod(s for s in sizes if s != -1)
        if sizes.count(-1) == 1 and known and n % known == 0:
            sizes = tuple(n // known if s == -1 else s for s in sizes)
        if prod(sizes) != n or min(sizes, default=0) < 0:
            raise ShapeError(f"Unflatten: sizes {self.unflattened_size} do not split dimension "
                             f"{d} of size {n} (shape {x.shape})", origin)
        return x.reshape(x.shape[:d] + sizes + x.shape[d + 1:])

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


class Upsample(Module):
    """``lazyburn.interpolate(x, size, scale_factor, mode, align_corners,
    recompute_scale_factor)`` as a module, as ``torch.nn.Upsample``."""

    def __init__(self, size=None, scale_factor=None, mode: str = "nearest",
                 align_corners=None, recompute_scale_factor=None):
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, x):
        return F.interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners,
                             self.recompute_scale_factor)

    def extra_repr(self) -> str:
        what = f"size={self.size}" if self.size is not None else \
            f"scale_factor={self.scale_factor}"
        return f"{what}, mode={self.mode!r}"
