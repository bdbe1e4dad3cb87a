"""The front end: the Tensor type and everything that records nodes into the lazy graph
(creation, element-wise ops, reductions, movement and indexing, linear algebra, the functional
nn helpers, random draws, dtype inspection), reverse-mode autodiff (``autograd``: backward
records vector-Jacobian products into the same lazy graph), recording scopes and sync
(``capture``), replay (``jit``) and sharing memory with PyTorch (``interop``).

Every public op goes through ``record``: operands made explicit (scalars, promotion,
broadcasting), checks raised at the user's line, one node recorded. Nothing here computes;
``capture.sync`` hands pending nodes to ``lazyburn.runtime.realize``.
"""
