"""The package's layers: every import points down (or within a layer) and no import cycle exists.

Read from the sources (``ast``), function-level imports included, so a lazy
import cannot hide an arrow that points up.
"""

import ast
import os
import subprocess
import sys

import pytest

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kerasdist")

# The package's layers, lowest first: a module may import modules of its own layer or of a lower one.
# A layer is the base (the modules at the top of kerasdist/) or a folder; docs/reference/architecture.md
# says what each holds.
LAYERS = ["base", "state", "engines", "cluster", "measure", "experiments", "course", "doctor", "interfaces"]
INTERFACES = {"cli", "__main__"}


def layer_of(module):
    """The layer of a module named relative to kerasdist ("" for the package, "state.files", "cli")."""
    if module in INTERFACES:
        return "interfaces"
    folder = module.partition(".")[0]
    return folder if folder in LAYERS else "base"


def module_files():
    """``{module name relative to kerasdist ("" for the package): path}``."""
    found = {}
    for root, _, names in os.walk(PACKAGE):
        for name in names:
            if name.endswith(".py"):
                relative = os.path.relpath(os.path.join(root, name), PACKAGE)[:-3].replace(os.sep, ".")
                found[relative.removesuffix("__init__").rstrip(".")] = os.path.join(root, name)
    return found


def _target(dotted, modules):
    """The module of the package ``dotted`` (``kerasdist.x.y``) names, or None outside the package."""
    if dotted != "kerasdist" and not dotted.startswith("kerasdist."):
        return None
    name = dotted.removeprefix("kerasdist").lstrip(".")
    return name if name in modules else _target(dotted.rpartition(".")[0], modules)


def import_graph():
    """``{module: set of package modules it imports}``, from every import statement in its source."""
    modules = module_files()
    graph = {}
    for module, path in modules.items():
        with open(path, encoding="utf-8") as stream:
            tree = ast.parse(stream.read())
        targets = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets.update(_target(alias.name, modules) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    targets.add(_target(f"{node.module}.{alias.name}", modules))
        graph[module] = targets - {None, module}
    return graph


def _name(module):
    return module or "kerasdist"


def test_the_top_level_holds_the_base_and_the_folders_only():
    # Every folder is a layer, and the base stays small: at most ten modules beside __init__ and __main__.
    folders = {module.partition(".")[0] for module in module_files() if "." in module}
    base = sorted(module for module in module_files() if layer_of(module) == "base" and module)
    assert folders <= set(LAYERS)
    assert len(base) <= 10, base


def test_every_folder_says_what_it_holds():
    for folder in LAYERS:
        path = os.path.join(PACKAGE, folder, "__init__.py")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as stream:
                assert ast.get_docstring(ast.parse(stream.read())), f"{folder}/__init__.py has no docstring"


def test_imports_point_down_or_within_a_layer():
    upward = [f"{_name(module)} -> {_name(target)}"
              for module, targets in import_graph().items() for target in targets
              if LAYERS.index(layer_of(target)) > LAYERS.index(layer_of(module))]
    assert upward == []


def test_there_is_no_import_cycle():
    graph = import_graph()
    state, cycles = {}, []

    def visit(module, path):
        state[module] = "open"
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                cycles.append(" -> ".join(map(_name, path[path.index(target):] + [target])))
            elif target not in state:
                visit(target, path + [target])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


@pytest.mark.parametrize("first", ["kerasdist", "kerasdist.cli", "kerasdist.cluster"])
def test_importing_kerasdist_loads_no_tensorflow_and_makes_its_start_quiet(first):
    code = (f"import sys, {first}\n"
            "assert 'tensorflow' not in sys.modules, 'TensorFlow loaded at import'\n"
            "import tensorflow\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0"))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


@pytest.mark.parametrize("first", ["kerasdist", "kerasdist.engines.backends", "kerasdist.engines.jax_engine", "kerasdist.cli"])
def test_importing_kerasdist_or_its_jax_engine_loads_neither_backend(first):
    # The backend is chosen when Keras loads: importing kerasdist must leave that choice open.
    code = (f"import sys, {first}\n"
            "loaded = [name for name in ('keras', 'jax', 'tensorflow') if name in sys.modules]\n"
            "assert not loaded, f'loaded at import: {loaded}'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
