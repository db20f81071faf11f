"""The estimators moved to rollgate.core.stats (the gateway's evaluation jobs use them too, and
the gateway sits below this package); this name is kept so existing imports keep working."""

from rollgate.core.stats import (
    CONFIDENCE,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    Estimate,
    PairedResult,
    bootstrap_mean,
    majority_at_k,
    paired_bootstrap,
    pass_at_k,
)

__all__ = [
    "CONFIDENCE",
    "DEFAULT_RESAMPLES",
    "DEFAULT_SEED",
    "Estimate",
    "PairedResult",
    "bootstrap_mean",
    "majority_at_k",
    "paired_bootstrap",
    "pass_at_k",
]
