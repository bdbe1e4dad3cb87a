"""lazyburn: a lazy tensor engine with a fusion compiler.

Every op records a node in a lazy graph; ``lazyburn.graph.sync()`` (or reading a value) cuts the
pending graph into fusion groups and runs each as one generated kernel on the tensor's device.

    import lazyburn as lb
    x = lb.tensor([[1.0, 2.0], [3.0, 4.0]])
    y = (x * 2 + 1).softmax(axis=-1)   # recorded, not computed
    print(y.numpy())                    # computed here
"""
from __future__ import annotations

__version__ = "0.1.0"

from . import errors, graph, random, runtime
from .creation import (arange, asarray, empty, empty_like, eye, full, full_like, linspace, ones,
                       ones_like, tensor, zeros, zeros_like)
from .elementwise import FUNCTIONS as _EW
from .elementwise import astype, where
from .errors import (DeviceError, DTypeError, KernelCompileError, OutOfMemoryError,
                     ShapeError)
from .functional import (clip, dropout, embedding, gelu, layer_norm, linear, log_softmax, relu,
                         silu, softmax, softplus)
from .graph.dtypes import (bfloat16, bool_, float16, float32, float64, int8, int16, int32,
                           int64, uint8)
from .graph.dtypes import dtype as dtype
from .graph.graph import Graph
from .linalg import matmul
from .movement import (broadcast_to, concat, expand_dims, flatten, flip, index_select,
                       matrix_transpose, pad, permute_dims, repeat, reshape, squeeze, stack,
                       take, take_along_axis, tile, transpose)
from .random import Generator, default_rng, manual_seed
from .reduction import (all, any, argmax, argmin, logsumexp, max, mean, min, prod, std, sum,
                        var)
from .fusion.explain import explain
from .lazytensor import Tensor
from .replay import jit
from .runtime import set_default_device
from .runtime.dump import dump

globals().update(_EW)
bool = bool_  # noqa: A001 - the array API spells it ``bool``

graph.graph.set_realizer(runtime.realize)


def default_device() -> str:
    """The device used when an op is given none (see ``lazyburn.runtime``)."""
    return runtime.default_device()


def result_type(*arrays_and_dtypes):
    """The dtype of an operation on ``arrays_and_dtypes`` (Tensors, dtypes, dtype names and weak
    Python scalars), by the promotion rules of ``lazyburn.graph.dtypes`` (array API).

    Raises DTypeError when only Python scalars are given."""
    from .graph import dtypes as _dt
    from .record import is_scalar, py_scalar

    strong = [a.dtype if isinstance(a, Tensor) else _dt.dtype(a)
              for a in arrays_and_dtypes if not is_scalar(a)]
    if not strong:
        raise DTypeError("result_type: needs at least one tensor or dtype")
    d = strong[0]
    for other in strong[1:]:
        d = _dt.promote(d, other)
    for a in arrays_and_dtypes:
        if is_scalar(a):
            d = _dt.promote(d, _dt.scalar_dtype(py_scalar(a), d))
    return d


def unsqueeze(x, axis):
    """PyTorch's name for ``expand_dims``."""
    return expand_dims(x, axis)


def sync(*tensors) -> None:
    """Same as ``lazyburn.graph.sync``."""
    graph.sync(*tensors)

