"""Chakra execution traces, both ways: :func:`load` runs the per-rank traces of a job (captured
from PyTorch and converted by Chakra, or generated for ASTRA-sim) on any fabric, and
:func:`write` writes a scenario or a training step as such traces, for ASTRA-sim to run the
same workload (docs/interop.md has the side-by-side workflow).

The format (MLCommons Chakra's ``et_def.proto``) is declared in :mod:`.schema` and read with the
``protobuf`` package, an optional extra: ``pip install 'fabricsim[chakra]'``.
"""

from .astra import astra_sim_network
from .reader import ChakraTrace, load
from .writer import ChakraWritten, write

__all__ = ["load", "write", "astra_sim_network", "ChakraTrace", "ChakraWritten"]
