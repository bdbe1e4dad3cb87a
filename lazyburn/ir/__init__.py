"""The graph IR: nodes, the op table, dtypes, shapes, and algorithms on graphs of nodes
(topological order, structural keys, export).

The lowest layer: it imports nothing of lazyburn's but its errors. The front end records into
it; fusion, codegen and runtime read it.
"""
from . import dtypes, ops
from .graph import structural_key, topo_order
from .node import Node

__all__ = ["Node", "dtypes", "ops", "structural_key", "topo_order"]
