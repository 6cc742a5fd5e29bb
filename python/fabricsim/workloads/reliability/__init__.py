from . import simulate as _simulate
from .simulate import *  # noqa: F401,F403
from .simulate import __all__  # noqa: F401

__doc__ = _simulate.__doc__
