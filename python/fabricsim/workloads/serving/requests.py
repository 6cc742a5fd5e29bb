"""Request arrivals for a serving workload: token counts drawn from a distribution
(:class:`TokenCounts`), Poisson arrivals or a trace (:class:`Requests`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._checks import U64, integer, integers, positive, quantities, room_for
from ...exceptions import InvalidArgumentError
from ...units import duration_s

__all__ = ["TokenCounts", "DEFAULT_PROMPT_TOKENS", "DEFAULT_OUTPUT_TOKENS", "Requests", "poisson_requests",
           "trace_requests"]


@dataclass(frozen=True)
class TokenCounts:
    """A distribution of token counts per request.

    ``kind``: "lognormal" (arithmetic mean ``mean``, log-space spread ``sigma``), "fixed"
    (every request ``mean`` tokens) or "uniform" (integers in ``[low, high]``). Samples are
    rounded to whole tokens and clipped to ``[low, high]`` (``high=None``: no upper bound),
    which moves a lognormal's mean slightly.

    Example::

        import numpy as np
        from fabricsim import serving
        serving.TokenCounts("fixed", mean=512).sample(np.random.default_rng(0), 3).tolist()   # [512, 512, 512]
    """

    kind: str = "lognormal"
    mean: float = 1024.0
    sigma: float = 1.0
    low: int = 1
    high: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or self.kind not in ("lognormal", "fixed", "uniform"):
            raise InvalidArgumentError(f"TokenCounts kind must be 'lognormal', 'fixed' or 'uniform', got {self.kind!r}")
        positive("TokenCounts mean", self.mean, zero=self.kind == "fixed")
        positive("TokenCounts sigma", self.sigma, zero=True)
        integer("TokenCounts low (tokens, >= 0)", self.low, (0, 2**62))
        if self.high is not None:
            integer("TokenCounts high (tokens)", self.high, (self.low, 2**62))
        elif self.kind == "uniform":
            raise InvalidArgumentError("TokenCounts kind 'uniform' needs high (the largest count), got None")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` token counts (int64) drawn with ``rng``.

        Example::

            import numpy as np
            from fabricsim import serving
            serving.TokenCounts("uniform", low=1, high=4).sample(np.random.default_rng(0), 2).shape   # (2,)
        """
        n = integer("n (token counts to draw)", n, U64)
        room_for(f"{n:,} token counts", n, _BYTES_PER_REQUEST / 2)
        if not isinstance(rng, np.random.Generator):
            raise InvalidArgumentError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        hi = np.inf if self.high is None else self.high
        if self.kind == "fixed":
            x = np.full(n, float(self.mean))
        elif self.kind == "uniform":
            assert self.high is not None
            return rng.integers(self.low, self.high + 1, size=n, dtype=np.int64)
        else:
            mu = math.log(self.mean) - self.sigma**2 / 2  # so that the arithmetic mean is ``mean``
            x = rng.lognormal(mu, self.sigma, size=n)
        counts: np.ndarray = np.clip(np.rint(x), self.low, hi).astype(np.int64)
        return counts


#: Prompt lengths when none are given: lognormal, mean 1,024 tokens, sigma 1.0, 1 to 32,768.
#: [assumed] a long-tailed chat/RAG mix; give a trace or another TokenCounts for a workload.
DEFAULT_PROMPT_TOKENS = TokenCounts("lognormal", mean=1024.0, sigma=1.0, low=1, high=32768)


#: Output lengths when none are given: lognormal, mean 256 tokens, sigma 1.0, 1 to 8,192.
#: [assumed] chat answers; give a trace or another TokenCounts for a workload.
DEFAULT_OUTPUT_TOKENS = TokenCounts("lognormal", mean=256.0, sigma=1.0, low=1, high=8192)


@dataclass(frozen=True, eq=False)
class Requests:
    """Requests to serve: ``arrival_s`` (seconds, non-decreasing), ``prompt_tokens`` (>= 1)
    and ``output_tokens`` (>= 0, the tokens the decode pool makes) per request; request ``i``
    is row ``i``. Build with :func:`poisson_requests` or :func:`trace_requests`.

    Example::

        from fabricsim import serving
        r = serving.trace_requests([0.0, 0.5], [100, 200], [10, 20])
        r.n_requests, r.horizon_s   # (2, 0.5)
    """

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray

    @property
    def n_requests(self) -> int:
        """How many requests."""
        return int(self.arrival_s.shape[0])

    @property
    def horizon_s(self) -> float:
        """The last arrival (0 for none)."""
        return float(self.arrival_s[-1]) if self.n_requests else 0.0

    def __repr__(self) -> str:
        return f"Requests(n_requests={self.n_requests}, horizon_s={self.horizon_s:.6g})"


# Memory per request while its arrival and token counts are drawn: the arrival and its sorted
# copy, and for each count its draw, rounding, clipping and int64 array (8 bytes each).
_BYTES_PER_REQUEST = 80.0


def poisson_requests(
    rate_per_s: float,
    horizon_s: float,
    *,
    seed: int = 0,
    prompt_tokens: TokenCounts = DEFAULT_PROMPT_TOKENS,
    output_tokens: TokenCounts = DEFAULT_OUTPUT_TOKENS,
) -> Requests:
    """Poisson arrivals at ``rate_per_s`` over ``[0, horizon_s)``, with token counts drawn
    from ``prompt_tokens`` and ``output_tokens`` (see :data:`DEFAULT_PROMPT_TOKENS` and
    :data:`DEFAULT_OUTPUT_TOKENS` for the assumed defaults). One ``numpy.random.Generator``
    seeded with ``seed`` draws everything: the same seed gives identical requests. The
    count is Poisson(rate x horizon) and, given it, the arrival times are uniform, sorted.

    Example::

        from fabricsim import serving
        r = serving.poisson_requests(100.0, 2.0, seed=3)
        r.n_requests   # 176: drawn from Poisson(100 x 2), the same for the same seed
    """
    rate = positive("rate_per_s (requests per second)", rate_per_s)
    horizon = positive("horizon_s (seconds)", horizon_s)
    for name, dist in (("prompt_tokens", prompt_tokens), ("output_tokens", output_tokens)):
        if not isinstance(dist, TokenCounts):
            raise InvalidArgumentError(f"{name} must be a fabricsim.serving.TokenCounts, got {type(dist).__name__}")
    if prompt_tokens.low < 1:
        raise InvalidArgumentError(f"prompt_tokens low must be >= 1 (a prompt has a token), got {prompt_tokens.low}")
    rng = np.random.default_rng(integer("seed", seed, U64))
    # Before the draw: the requests expected (six standard deviations above, which a draw passes
    # with odds of about 1e-9) must fit in memory.
    expected = rate * horizon
    room_for(f"poisson_requests({rate:g}, {horizon:g}): about {expected:.3g} requests", expected + 6.0 * math.sqrt(expected),
             _BYTES_PER_REQUEST)
    n = int(rng.poisson(expected))
    arrivals = np.sort(rng.uniform(0.0, horizon, size=n))
    return Requests(arrivals, prompt_tokens.sample(rng, n), output_tokens.sample(rng, n))


def trace_requests(arrival_s: Any, prompt_tokens: Any, output_tokens: Any) -> Requests:
    """Requests from a trace: one arrival time (seconds, finite, >= 0, non-decreasing), prompt
    token count (>= 1) and output token count (>= 0) per request, as sequences or arrays of
    one length.

    Example::

        from fabricsim import serving
        serving.trace_requests([0.0, 0.1, 0.1], [512, 64, 2048], [128, 1, 0]).n_requests   # 3
    """
    a = quantities("arrival_s", arrival_s, None, duration_s)
    bad = np.flatnonzero(~np.isfinite(a) | (a < 0))
    if bad.size:
        raise InvalidArgumentError(f"arrival_s[{bad[0]}] must be a finite time >= 0 s, got {a[bad[0]].item()!r}")
    down = np.flatnonzero(np.diff(a) < 0)
    if down.size:
        raise InvalidArgumentError(
            f"arrival_s must be non-decreasing (sorted by arrival), got arrival_s[{down[0] + 1}]={a[down[0] + 1].item()!r} "
            f"before arrival_s[{down[0]}]={a[down[0]].item()!r}")
    p = integers("prompt_tokens", prompt_tokens)
    o = integers("output_tokens", output_tokens)
    for name, arr, low in (("prompt_tokens", p, 1), ("output_tokens", o, 0)):
        if arr.shape[0] != a.shape[0]:
            raise InvalidArgumentError(f"{name} has {arr.shape[0]} counts for {a.shape[0]} arrivals: give one per request")
        under = np.flatnonzero(arr < low)
        if under.size:
            raise InvalidArgumentError(f"{name}[{under[0]}] must be a token count >= {low}, got {int(arr[under[0]])}")
    return Requests(a.copy(), p.copy(), o.copy())
