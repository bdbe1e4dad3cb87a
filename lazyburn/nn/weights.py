"""Reading weights files: safetensors through the ``safetensors`` package's NumPy API."""
from __future__ import annotations

import os

import numpy as np

from ..errors import LazyburnError


class WeightsError(LazyburnError, ValueError):
    """Parameters that cannot be loaded: missing, unexpected, or of the wrong shape or dtype, or
    a weights file that cannot be read.

    Attributes: ``missing`` (names the module needs and the source lacks), ``unexpected`` (names
    the source has and the module does not), ``mismatched`` (``(name, expected, found)``
    triples of shape/dtype descriptions). Each is empty when not the cause.
    """

    def __init__(self, message: str, missing=(), unexpected=(), mismatched=()):
        self.missing = list(missing)
        self.unexpected = list(unexpected)
        self.mismatched = list(mismatched)
        super().__init__(message)


def read_safetensors(path) -> dict[str, np.ndarray]:
    """Every tensor of the safetensors file at ``path`` as a NumPy array, by name.

    Raises FileNotFoundError when ``path`` is not a file, ImportError when the ``safetensors``
    package is missing, WeightsError when the file is not valid safetensors (the message names
    the file).
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"weights file not found: {path}")
    try:
        from safetensors import SafetensorError
        from safetensors.numpy import load_file
    except ImportError as e:
        raise ImportError("reading safetensors needs the 'safetensors' package "
                          "(pip install 'lazyburn[models]')") from e
    try:
        return load_file(path)
    except (SafetensorError, OSError, ValueError, TypeError) as e:
        raise WeightsError(f"cannot read safetensors file {path}: {e}") from e
