"""The import paths of modules that moved into the sub-packages, kept for one release.

The documented modules stay attributes of the package, as before (``fs.training``,
``fs.catalog``, ``fs.cost_model``, ...). Importing one by its old path (``import
fabricsim.nccl_model``, ``from fabricsim.training import Model``) still works: the first such
import warns (``DeprecationWarning``, naming the new path) and gives the module at its new
path, the same module object; so does the package's old attribute of a module that was not
documented (``fs.validation``, ``fs.scenario_file``). These old paths go in the next release.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Sequence

#: Old import path -> the module's path now.
MOVED: dict[str, str] = {
    "fabricsim.catalog": "fabricsim.fabrics.catalog",
    "fabricsim.describe": "fabricsim.fabrics.describe",
    "fabricsim.power": "fabricsim.fabrics.power",
    "fabricsim.nccl_conventions": "fabricsim.collectives.conventions",
    "fabricsim.cost_model": "fabricsim.collectives.cost.model",
    "fabricsim.nccl_model": "fabricsim.collectives.cost.nccl",
    "fabricsim.nccl_logs": "fabricsim.collectives.nccl_logs",
    "fabricsim.calibration": "fabricsim.collectives.calibration",
    "fabricsim.training": "fabricsim.workloads.training",
    "fabricsim.serving": "fabricsim.workloads.serving",
    "fabricsim.reliability": "fabricsim.workloads.reliability",
    "fabricsim.jobs": "fabricsim.workloads.jobs",
    "fabricsim.scenario_file": "fabricsim.studies.scenario_file",
    "fabricsim.plot": "fabricsim.studies.plot",
    "fabricsim.trace": "fabricsim.studies.trace",
    "fabricsim.nccl_sweep": "fabricsim.studies.nccl_tests",
    "fabricsim.validation": "fabricsim.studies.validation",
}


#: Old paths kept as they were, without a warning: the package's attribute ``sweep`` is the
#: function, so its module is reached by this path alone (importing it from a path not yet
#: loaded would bind the package's attribute to the module).
ALIASES: dict[str, str] = {"fabricsim.sweep": "fabricsim.studies.sweep"}


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old paths of :data:`MOVED`: loading one warns and puts the module at its new
    path in its place (the import system then hands out the module in ``sys.modules``)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None  # a plain module, replaced in exec_module

    def exec_module(self, module: types.ModuleType) -> None:
        new = MOVED[module.__name__]
        warnings.warn(f"{module.__name__} moved to {new}: import it from there (the old path goes in the next "
                      "release)", DeprecationWarning, stacklevel=2)
        sys.modules[module.__name__] = importlib.import_module(new)


_FINDER = _OldPaths()


def old_attribute(name: str) -> types.ModuleType:
    """The package's attribute ``name`` where it is the old name of a moved module
    (``fs.validation``, ``fs.scenario_file``): the module, with a DeprecationWarning."""
    new = MOVED.get(f"fabricsim.{name}")
    if new is None:
        raise AttributeError(f"module 'fabricsim' has no attribute {name!r}")
    warnings.warn(f"fabricsim.{name} moved to {new}: import it from there (the old name goes in the next release)",
                  DeprecationWarning, stacklevel=3)
    module = importlib.import_module(new)
    setattr(sys.modules["fabricsim"], name, module)  # warned once, as an import is
    return module


def install() -> None:
    """Makes the old paths of :data:`MOVED` and :data:`ALIASES` importable (at ``import
    fabricsim``, once the package's modules are loaded)."""
    for old, new in ALIASES.items():
        sys.modules.setdefault(old, sys.modules[new])
    if not any(isinstance(f, _OldPaths) for f in sys.meta_path):
        sys.meta_path.insert(0, _FINDER)
