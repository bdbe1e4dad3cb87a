"""Optimizers, as users see them: ``lazyburn.optim.SGD``, ``Adam``, ``AdamW`` (PyTorch's names
and update formulas), defined in ``lazyburn.frontend.optim``; and the learning-rate schedules
of ``lazyburn.optim.lr_scheduler``."""
from ..frontend.optim import SGD, Adam, AdamW, Optimizer
from . import lr_scheduler

__all__ = ["Adam", "AdamW", "Optimizer", "SGD", "lr_scheduler"]
