"""Text as it is generated: token ids to text deltas, and the part of that text that may be shown
as the message's `output_text` deltas before the generation ends.

Tool calls (`<tool_call>...</tool_call>` in the default format) and reasoning (`<think>...</think>`) become their own
output items only once the whole text is known, so the gate lets through only what the final
message text is certain to start with: the text before the first tag, without leading
whitespace, holding back trailing whitespace (the message is stripped) and anything that may be
the start of a tag. Everything after the first tag is sent when the response is complete."""

from __future__ import annotations

from tokenizers.decoders import DecodeStream

from rollgate.model_server.output import TAGS


class IncrementalDetokenizer:
    """Decodes one token at a time. A byte-level tokenizer can split one character over several
    tokens, so text is released only once it no longer ends in a partial character; the deltas
    add up to the decoding of all the ids.

    A fast (Rust) tokenizer streams through `tokenizers`' DecodeStream, which keeps the decoding
    state itself; other tokenizers decode a short window twice per token."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        rust = getattr(tokenizer, "backend_tokenizer", None)
        self._stream = DecodeStream(skip_special_tokens=False) if rust is not None else None
        self._rust = rust
        self._prefix = 0  # decode from here: a few tokens of context keep word boundaries exact
        self._read = 0  # text of ids before this has been released

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def push(self, token_id: int) -> str:
        self.ids.append(token_id)
        if self._stream is not None:
            return self._stream.step(self._rust, token_id) or ""
        before = self._decode(self.ids[self._prefix : self._read])
        now = self._decode(self.ids[self._prefix :])
        if len(now) <= len(before) or now.endswith("\ufffd"):
            return ""
        self._prefix, self._read = self._read, len(self.ids)
        return now[len(before) :]


class PlainTextGate:
    """Passes through the leading plain text of a generation, as it arrives (see the module doc)."""

    def __init__(self, tags: tuple[str, ...] = TAGS) -> None:
        self.tags = tags  # where structured output starts (output.OutputParser.tags)
        self.pending = ""  # received, not yet released
        self.sent = ""  # released so far
        self.closed = False  # a tag has started: nothing more is released

    def feed(self, text: str) -> str:
        if self.closed:
            return ""
        self.pending += text
        found = [i for i in (self.pending.find(t) for t in self.tags) if i >= 0]
        if found:
            self.closed = True
            cut = min(found)
        else:
            cut = _partial_tag_start(self.pending, self.tags)
        head = self.pending[:cut]
        if not self.sent:  # the message text is stripped: leading whitespace never shows
            stripped = head.lstrip()
            self.pending = self.pending[len(head) - len(stripped) :]
            head = stripped
        out = head.rstrip()
        self.pending = self.pending[len(out) :]
        self.sent += out
        return out


def _partial_tag_start(text: str, tags: tuple[str, ...]) -> int:
    """Where a proper prefix of a tag that ends the text starts (len(text) when none does)."""
    longest = max((len(t) for t in tags), default=0)
    for j in range(max(0, len(text) - longest + 1), len(text)):
        tail = text[j:]
        if any(t.startswith(tail) for t in tags):
            return j
    return len(text)
