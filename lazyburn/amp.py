"""Automatic mixed precision, as users see it: ``lazyburn.amp.autocast`` and
``lazyburn.amp.GradScaler`` (also at the top level, ``lb.autocast``, ``lb.GradScaler``), with
``torch.amp``'s names and semantics; defined in ``lazyburn.frontend.amp``, whose docstring lists
the ops autocast runs in the lower precision and in float32."""
from .frontend.amp import GradScaler, autocast, get_autocast_dtype, is_autocast_enabled

__all__ = ["GradScaler", "autocast", "get_autocast_dtype", "is_autocast_enabled"]
