"""Which weights a phase updates (`SFTPhase.trainable`, `GRPOPhase.trainable`):

- "all": every weight;
- "norms": only the normalization layers' scales;
- "final_norm": only the last one's (the scale of the hidden state the output layer reads);
- "top:N": the last N decoder layers and the final norm (embeddings and the output layer, which a
  pretrained model often ties to them, stay frozen);
- "final_norm_scale": one number, the final norm's overall scale, which multiplies every logit:
  a learned inverse sampling temperature. It can only sharpen or flatten the policy (greedy
  decoding is unchanged by it), which is the one direction of the final norm's GRPO gradient that
  small batches agree on (benchmarks/bench_grpo_snr.py); a diagnostic of what a phase's gain is,
  not a way to teach anything. It trains as a scalar multiplying the norm's output and is folded
  into the norm's scales when the phase ends (Restriction.release), so checkpoints are plain.

On a CPU budget the restriction is what makes a step affordable: no gradient flows below the lowest
trainable layer, so the backward pass covers N layers instead of all of them (SmolLM2-135M: 30),
and the optimizer keeps state for those weights only. It is also what a batch can estimate: at a
CPU budget's batch sizes the policy-gradient estimate is noise in almost every direction of a
full model (benchmarks/bench_grpo_snr.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

NAMED = ("all", "norms", "final_norm", "final_norm_scale")
SCALE = "rollgate_logit_scale"  # the scalar parameter "final_norm_scale" adds to the final norm


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
    if which == "final_norm_scale":
        scale = getattr(_norms(model, which)[-1], SCALE, None)
        return [scale] if scale is not None else []
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


@dataclass
class Restriction:
    """What restrict_trainable changed: the weights it froze and what it added, undone by release()."""

    frozen: list[Any] = field(default_factory=list)
    undo: list[Callable[[], None]] = field(default_factory=list)

    def release(self) -> None:
        """Thaw the frozen weights; fold an added scale into the weights it multiplies."""
        for fn in reversed(self.undo):
            fn()
        self.undo.clear()
        for p in self.frozen:
            p.requires_grad_(True)
        self.frozen.clear()


def _add_scale(model: Any) -> Callable[[], None]:
    """A scalar parameter (1.0) multiplying the final norm's output; the undo folds it into the
    norm's scales and removes it."""
    import torch

    norm = _norms(model, "final_norm_scale")[-1]
    weight = norm.weight
    norm.register_parameter(SCALE, torch.nn.Parameter(torch.ones((), dtype=weight.dtype, device=weight.device)))
    handle = norm.register_forward_hook(lambda module, args, out: out * getattr(module, SCALE))

    def fold() -> None:
        handle.remove()
        with torch.no_grad():
            weight.mul_(getattr(norm, SCALE))
        delattr(norm, SCALE)

    return fold


def restrict_trainable(model: Any, which: str) -> Restriction:
    """Freeze every weight a phase must leave alone under `which` (and add the scale
    "final_norm_scale" trains); the caller calls release() when the phase ends."""
    if which == "all":
        return Restriction()
    restriction = Restriction()
    if which == "final_norm_scale":
        restriction.undo.append(_add_scale(model))
    keep = {id(p) for p in trainable_parameters(model, which)}
    restriction.frozen = [p for p in model.parameters() if p.requires_grad and id(p) not in keep]
    for p in restriction.frozen:
        p.requires_grad_(False)
    return restriction


def plain_state_dict(model: Any) -> dict[str, Any]:
    """`model.state_dict()` as a checkpoint holds it: an added scale ("final_norm_scale", while its
    phase runs) folded into the scales it multiplies, not a key of its own."""
    state = model.state_dict()
    for name, module in model.named_modules():
        scale = module._parameters.get(SCALE)
        if scale is not None:
            prefix = f"{name}." if name else ""
            state[prefix + "weight"] = state[prefix + "weight"] * scale.detach()
            del state[prefix + SCALE]
    return state
