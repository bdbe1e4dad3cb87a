"""The pending graph, as users see it: ``lazyburn.graph.sync()``, recording scopes
(``with lazyburn.graph.Graph():``), structural keys and export.

A namespace over ``lazyburn.frontend.capture`` (where recording scopes and sync live) and the IR
modules ``dtypes`` and ``ops`` of ``lazyburn.ir``.
"""
from .frontend.capture import (Graph, current_graph, default_graph, key, sync, to_dot,
                               to_networkx)
from .ir import Node, dtypes, ops, structural_key, topo_order

__all__ = ["Graph", "Node", "current_graph", "default_graph", "dtypes", "key", "ops",
           "structural_key", "sync", "to_dot", "to_networkx", "topo_order"]
