"""Settings every Python test shares.

Hypothesis (6.131 and later) mixes literals it finds in "local" modules into about 2.5% of its
draws. fabricsim is local in an editable install (``pip install -e .``) and not in a wheel
install (``pip install .``, what CI runs), so the same derandomized property test drew other
examples in a checkout than in CI, and its draws moved whenever the package gained or lost a
constant (the reach guards in hostile.py then failed on changes that had nothing to do with
them). With the pool emptied, draws depend on the test code alone, in either install.
"""

try:  # an internal of Hypothesis: absent in versions before the feature, nothing to undo there
    from hypothesis.internal.conjecture import providers as _providers
    from hypothesis.internal.constants_ast import Constants as _Constants
except ImportError:  # pragma: no cover
    pass
else:
    if hasattr(_providers, "_get_local_constants"):
        _providers._get_local_constants = lambda: _Constants()
