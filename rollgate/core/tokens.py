"""One trajectory as trainer-ready token sequences: the shared core of every trainer adapter.

With token-in/token-out, model call k+1's prompt is model call k's prompt + generation followed by
the spliced environment tokens (templated tool outputs, the next turn header). So an episode is
one sequence: turn 0's prompt, then alternating model generations and environment splices. Only
the generations are the policy's actions; the splices are context the policy must not be trained
to produce, which is what the mask records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rollgate.core.errors import ProtocolError
from rollgate.core.schemas import Trajectory, Turn


class ContiguityError(ProtocolError):
    """A turn's prompt does not start with every token that came before it: the episode cannot be
    trained as one sequence (history was re-tokenized, truncated or edited between calls)."""

    def __init__(self, turn: int, message: str):
        super().__init__(message, component="trainer", field=f"turns[{turn}].prompt_token_ids")
        self.turn = turn


class SegmentedError(ProtocolError):
    """A segmented trajectory (`Trajectory.segmented`: a black-box harness rewrote its history
    between model calls) has no one token sequence: it is refused, never trained as one."""

    def __init__(self, traj: Trajectory):
        super().__init__(
            f"trajectory {traj.trajectory_id} is segmented: its {len(traj.turns)} model calls do not form one "
            "growing token sequence (its harness rewrote the history between calls), so it cannot be trained "
            "as one sequence; train each turn as a sample of its own, or leave segmented trajectories out",
            component="trainer",
            field="segmented",
        )


@dataclass(frozen=True)
class Segment:
    """One model call seen incrementally: the prompt tokens new since the previous call (for turn 0
    the whole prompt), then what the model generated."""

    new_prompt_ids: list[int]
    generation_ids: list[int]
    logprobs: list[float]


@dataclass
class TokenSequence:
    """prompt_ids (turn 0's prompt) + completion_ids (every later token), with one log-prob and one
    mask entry per completion token: env_mask is 1 on model tokens and 0 on spliced tokens, whose
    log-prob is 0.0 (the model never sampled them)."""

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)

    def truncated(self, max_completion_tokens: int | None) -> TokenSequence:
        """Cut the completion to at most `max_completion_tokens`, the three lists together."""
        if max_completion_tokens is None or len(self.completion_ids) <= max_completion_tokens:
            return self
        n = max(0, max_completion_tokens)
        return TokenSequence(self.prompt_ids, self.completion_ids[:n], self.logprobs[:n], self.env_mask[:n])

    @property
    def model_token_count(self) -> int:
        return sum(self.env_mask)


def segments(turns: Sequence[Turn]) -> list[Segment]:
    """Split an episode into per-call segments, checking token-in/token-out contiguity."""
    out: list[Segment] = []
    seen: list[int] = []
    for k, turn in enumerate(turns):
        prompt = turn.prompt_token_ids
        if prompt[: len(seen)] != seen:
            where = next(
                # The two differ in length here: compare their common prefix only.
                (i for i, (a, b) in enumerate(zip(prompt, seen, strict=False)) if a != b),
                min(len(prompt), len(seen)),
            )
            raise ContiguityError(
                k,
                f"turn {k}'s prompt does not extend the previous turns: it has {len(prompt)} tokens, "
                f"the history has {len(seen)}, first difference at position {where}",
            )
        out.append(
            Segment(
                list(prompt[len(seen) :]),
                list(turn.generation_token_ids),
                [float(x) for x in turn.generation_log_probs],
            )
        )
        seen = list(prompt) + list(turn.generation_token_ids)
    return out


def flatten(turns: Sequence[Turn]) -> TokenSequence:
    """The whole episode as prompt_ids + completion_ids with aligned logprobs and env_mask."""
    segs = segments(turns)
    if not segs:
        raise ValueError("a trajectory without turns has no token sequence")
    seq = TokenSequence(prompt_ids=segs[0].new_prompt_ids)
    for k, seg in enumerate(segs):
        if k > 0:
            seq.completion_ids += seg.new_prompt_ids
            seq.logprobs += [0.0] * len(seg.new_prompt_ids)
            seq.env_mask += [0] * len(seg.new_prompt_ids)
        seq.completion_ids += seg.generation_ids
        seq.logprobs += seg.logprobs
        seq.env_mask += [1] * len(seg.generation_ids)
    return seq


def trainable_sequence(
    traj: Trajectory, *, filler_token_id: int, max_completion_tokens: int | None = None
) -> TokenSequence:
    """The sequence a trainer should see. A failed episode (error outcome, or one with no turns)
    becomes a fully masked placeholder, so it can never train as if its reward were 0."""
    if not traj.ok or not traj.turns:
        try:
            seq = flatten(traj.turns).truncated(max_completion_tokens)
        except (ValueError, ContiguityError):
            # Nothing of a failed episode is trained on: a broken or empty token record is fine here.
            seq = TokenSequence(prompt_ids=[filler_token_id])
        if not seq.completion_ids:
            # Trainers index the last completion token (EOS checks): never hand them an empty one.
            seq = TokenSequence(seq.prompt_ids, [filler_token_id], [0.0], [0])
        return TokenSequence(seq.prompt_ids, seq.completion_ids, seq.logprobs, [0] * len(seq.completion_ids))
    if traj.segmented:
        raise SegmentedError(traj)
    return flatten(traj.turns).truncated(max_completion_tokens)


def common_prefix(seqs: Sequence[Sequence[int]]) -> int:
    """Length of the longest token prefix all sequences share."""
    first = seqs[0]
    n = min(len(s) for s in seqs)
    for i in range(n):
        t = first[i]
        if any(s[i] != t for s in seqs):
            return i
    return n
