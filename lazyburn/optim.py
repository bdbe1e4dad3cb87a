"""Optimizers, as users see them: ``lazyburn.optim.SGD``, ``Adam``, ``AdamW`` (PyTorch's names
and update formulas). A namespace over ``lazyburn.frontend.optim``, where they are defined."""
from .frontend.optim import SGD, Adam, AdamW, Optimizer

__all__ = ["Adam", "AdamW", "Optimizer", "SGD"]
