"""The array API's linear algebra extension, as users see it: ``lazyburn.linalg`` (found by
``hasattr(xp, "linalg")`` on the namespace). A namespace over ``lazyburn.frontend.linalg`` and
``lazyburn.frontend.movement``, where the functions are defined.

Contractions, norms, diagonals, traces, cross products and non-negative matrix powers are
recorded as the engine's own ops and fuse like any other. The decompositions (``cholesky``,
``det``, ``eigh``, ``eigvalsh``, ``inv``, ``matrix_rank``, ``pinv``, ``qr``, ``slogdet``,
``solve``, ``svd``, ``svdvals``), ``matrix_norm`` with ``ord`` 2, -2 or 'nuc', and
``matrix_power`` with a negative exponent raise NotImplementedError.
"""
from .frontend.linalg import (cholesky, cross, det, diagonal, eigh, eigvalsh, inv, matmul,
                              matrix_norm, matrix_power, matrix_rank, outer, pinv, qr, slogdet,
                              solve, svd, svdvals, tensordot, trace, vecdot, vector_norm)
from .frontend.movement import matrix_transpose

__all__ = ["cholesky", "cross", "det", "diagonal", "eigh", "eigvalsh", "inv", "matmul",
           "matrix_norm", "matrix_power", "matrix_rank", "matrix_transpose", "outer", "pinv",
           "qr", "slogdet", "solve", "svd", "svdvals", "tensordot", "trace", "vecdot",
           "vector_norm"]
