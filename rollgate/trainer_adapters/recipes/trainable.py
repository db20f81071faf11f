"""Which weights a phase updates (`SFTPhase.trainable`, `GRPOPhase.trainable`):

- "all": every weight;
- "norms": only the normalization layers' scales;
- "final_norm": only the last one's (the scale of the hidden state the output layer reads);
- "top:N": the last N decoder layers and the final norm (embeddings and the output layer, which a
  pretrained model often ties to them, stay frozen).

On a CPU budget the restriction is what makes a step affordable: no gradient flows below the lowest
trainable layer, so the backward pass covers N layers instead of all of them (SmolLM2-135M: 30),
and the optimizer keeps state for those weights only. It is also what a batch can estimate: at a
CPU budget's batch sizes the policy-gradient estimate is noise in almost every direction of a
full model (benchmarks/bench_grpo_snr.py)."""

from __future__ import annotations

from typing import Any

NAMED = ("all", "norms", "final_norm")


def check_trainable(value: str, field: str) -> str:
    """`value` if it names a set of weights, else ValueError naming the field and what is accepted."""
    if value in NAMED:
        return value
    if value.startswith("top:"):
        n = value[4:]
        if n.isdigit() and int(n) >= 1:
            return value
    raise ValueError(f"{field} must be one of {', '.join(NAMED)} or top:N (N >= 1 decoder layers), got {value!r}")


def is_norm(module: Any) -> bool:
    """A normalization layer (RMSNorm, LayerNorm, in torch or a model's own code)."""
    return type(module).__name__.endswith(("RMSNorm", "LayerNorm"))


def _norms(model: Any, which: str) -> list[Any]:
    norms = [m for m in model.modules() if is_norm(m)]
    if not norms:
        raise ValueError(f"trainable {which!r}: {type(model).__name__} has no normalization layers")
    return norms


def _decoder_layers(model: Any, which: str) -> list[Any]:
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        raise ValueError(f"trainable {which!r}: {type(model).__name__} has no model.layers to count from the top")
    return list(layers)


def trainable_parameters(model: Any, which: str) -> list[Any]:
    """The parameters `which` names (see the module docstring)."""
    check_trainable(which, "trainable")
    if which == "all":
        return [p for p in model.parameters()]
    if which in ("norms", "final_norm"):
        norms = _norms(model, which)
        chosen = norms if which == "norms" else norms[-1:]
        return [p for m in chosen for p in m.parameters(recurse=False)]
    n = int(which[4:])
    layers = _decoder_layers(model, which)
    if n > len(layers):
        raise ValueError(f"trainable {which!r}: the model has only {len(layers)} decoder layers")
    final = _norms(model, which)[-1:]
    return [p for m in layers[-n:] for p in m.parameters()] + [p for m in final for p in m.parameters(recurse=False)]


def restrict_trainable(model: Any, which: str) -> list[Any]:
    """Freeze every weight a phase must leave alone under `which`; the frozen parameters, for the
    caller to thaw when the phase ends."""
    if which == "all":
        return []
    keep = {id(p) for p in trainable_parameters(model, which)}
    frozen = [p for p in model.parameters() if p.requires_grad and id(p) not in keep]
    for p in frozen:
        p.requires_grad_(False)
    return frozen
