"""The array API's linear algebra extension, as users see it: ``lazyburn.linalg`` (found by
``hasattr(xp, "linalg")`` on the namespace). A namespace over ``lazyburn.frontend.linalg`` and
``lazyburn.frontend.movement``, where the functions are defined.

Contractions, norms, diagonals, traces, cross products and non-negative matrix powers are
recorded as the engine's own ops and fuse like any other. The decompositions (``cholesky``,
``det``, ``eigh``, ``eigvalsh``, ``inv``, ``qr``, ``slogdet``, ``solve``, ``svd``,
``svdvals``) are library calls of the device (LAPACK through ``numpy.linalg`` on the host,
``torch.linalg`` on CUDA), shown as such by ``lb.explain``; ``matrix_rank``, ``pinv``,
``matrix_norm`` with ``ord`` 2, -2 or 'nuc' and ``matrix_power`` with a negative exponent are
built on them. A matrix the library cannot decompose raises ``LinAlgError`` at sync.
"""
from .errors import LinAlgError
from .frontend.linalg import (cholesky, cross, det, diagonal, eigh, eigvalsh, inv, matmul,
                              matrix_norm, matrix_power, matrix_rank, outer, pinv, qr, slogdet,
                              solve, svd, svdvals, tensordot, trace, vecdot, vector_norm)
from .frontend.movement import matrix_transpose

__all__ = ["LinAlgError", "cholesky", "cross", "det", "diagonal", "eigh", "eigvalsh", "inv",
           "matmul", "matrix_norm", "matrix_power", "matrix_rank", "matrix_transpose", "outer",
           "pinv", "qr", "slogdet", "solve", "svd", "svdvals", "tensordot", "trace", "vecdot",
           "vector_norm"]
