"""lazyburn: a lazy tensor engine with a fusion compiler.

Every op records a node in a lazy graph; ``lazyburn.graph.sync()`` (or reading a value) cuts the
pending graph into fusion groups and runs each as one generated kernel on the tensor's device.

    import lazyburn as lb
    x = lb.tensor([[1.0, 2.0], [3.0, 4.0]])
    y = (x * 2 + 1).softmax(axis=-1)   # recorded, not computed
    print(y.numpy())                    # computed here

This module only names the public API; the layers below are described in ARCHITECTURE.md.
"""
from __future__ import annotations

from . import amp, errors, fft, graph, linalg, optim, runtime
from .errors import (AutogradError, DeviceError, DTypeError, IndexingError,
                     KernelCompileError, LinAlgError, OutOfMemoryError, ShapeError)
from .frontend import autograd, random
from .frontend.amp import GradScaler, autocast
from .frontend.autograd import enable_grad, is_grad_enabled, no_grad
from .frontend.capture import Graph, sync
from .frontend.creation import (arange, asarray, empty, empty_like, eye, full, full_like,
                                linspace, ones, ones_like, tensor, zeros, zeros_like)
from .frontend.elementwise import FUNCTIONS as _EW
from .frontend.elementwise import astype, result_type, where
from .frontend.explain import explain
from .frontend.interop import from_dlpack, from_torch, to_torch
from .frontend.functional import (batch_norm, binary_cross_entropy_with_logits, clip,
                                  cross_entropy, dropout, embedding, gelu, group_norm,
                                  interpolate, l1_loss, layer_norm, linear, log_softmax,
                                  mse_loss, nll_loss, relu, rms_norm, silu, softmax, softplus)
from .frontend.linalg import matmul
from .frontend.conv import (adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_max_pool2d,
                            avg_pool1d, avg_pool2d, conv1d, conv2d, conv_transpose1d,
                            conv_transpose2d, max_pool1d, max_pool2d)
from .frontend.movement import (broadcast_to, concat, expand_dims, flatten, flip, index_select,
                                matrix_transpose, pad, permute_dims, reshape, squeeze,
                                stack, take, take_along_axis, tile, transpose, unsqueeze)
from .frontend.random import Generator, default_rng, manual_seed
from .frontend.reduction import (all, any, argmax, argmin, logsumexp, max, mean, min, prod, std,
                                 sum, var)
from .frontend.replay import jit
from .frontend.searching import (nonzero, repeat, searchsorted, unique_all, unique_counts,
                                 unique_inverse, unique_values)
from .frontend.sorting import argsort, sort
from .frontend.tensor import Tensor
# the array API's inspection, creation, manipulation and contraction functions
from .frontend.creation import meshgrid, tril, triu
from .frontend.elementwise import (complex, conj, hypot, imag, logaddexp, positive, real,
                                    reciprocal, trunc)
from .frontend.inspection import (__array_namespace_info__, can_cast, e, finfo, iinfo, inf,
                                  isdtype, nan, newaxis, pi)
from .frontend.linalg import tensordot, vecdot
from .frontend.movement import broadcast_arrays, moveaxis, roll, to_device, unstack
from .frontend.reduction import (count_nonzero, cumprod, cumsum, cumulative_prod,
                                 cumulative_sum, diff)
from .ir.dtypes import (bfloat16, bool_, complex64, complex128, float16, float32, float64, int8,
                        int16, int32, int64, uint8, uint16, uint32, uint64)
from .ir.dtypes import dtype as dtype
from .runtime import default_device, set_default_device
from .runtime.dump import dump
from .version import __version__

globals().update(_EW)
bool = bool_  # noqa: A001 - the array API spells it ``bool``
__array_api_version__ = "2024.12"
