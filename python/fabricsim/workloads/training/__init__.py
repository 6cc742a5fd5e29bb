from . import step as _step
from .step import *  # noqa: F401,F403
from .step import (HBM_EFFICIENCY, LOGIT_BYTES, MAIN_GRAD_COPY_BYTES, OPTIMIZER_STATE_BYTES, WEIGHT_BYTES, _Builder,  # noqa: F401
                   _CAT_INDEX, __all__)

__doc__ = _step.__doc__
