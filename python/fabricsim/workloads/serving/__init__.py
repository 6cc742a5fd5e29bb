from . import prefill_decode as _prefill_decode
from .prefill_decode import *  # noqa: F401,F403
from .prefill_decode import __all__  # noqa: F401

__doc__ = _prefill_decode.__doc__
