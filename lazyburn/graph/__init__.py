"""Graph capture: nodes, the op table, dtypes, liveness, structural keys and sync.

This package imports nothing else of lazyburn's but its errors: fusion, codegen and runtime
build on it.
"""
from . import dtypes, ops
from .graph import Graph, current_graph, default_graph, structural_key, sync, topo_order
from .node import Node


def key(*tensors):
    """Structural key of the pending graph of ``tensors`` (or of every live pending tensor)."""
    return current_graph().key(*tensors)


def to_networkx(*tensors):
    """The pending graph of ``tensors`` (or of every live pending tensor) as a
    ``networkx.DiGraph``; vertices carry ``op``, ``shape``, ``dtype``, ``origin``, ``output``."""
    return current_graph().to_networkx(*tensors)


def to_dot(*tensors) -> str:
    """The pending graph of ``tensors`` as Graphviz DOT text."""
    return current_graph().to_dot(*tensors)


__all__ = ["Graph", "Node", "current_graph", "default_graph", "dtypes", "key", "ops",
           "structural_key", "sync", "to_dot", "to_networkx", "topo_order"]
