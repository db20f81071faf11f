"""A byte-level pushdown automaton over JSON documents that match a compiled JSON schema.

The automaton answers one question fast: after these bytes, which next byte keeps the text a
prefix of some complete document that matches the schema? Constrained decoding (see
structured_tokens) walks the tokenizer's tokens through it.

Schemas compile (structured.py) to a small graph of nodes: objects, arrays, strings, numbers,
literal sets (enum, const, booleans, null) and unions (anyOf, type lists). A parse position is a
stack of frames, plain tuples so it hashes; a state is the set of stacks still possible (unions
and numbers that may end or go on make it nondeterministic). States are interned to integers and
transitions are filled in lazily, 256 per state, so a byte seen once from a state costs a list
lookup ever after.

Every prefix the automaton accepts can be completed: a comma is allowed only while an unused
property or array slot remains, a closing brace only once the required properties are present,
and so on. To keep a model from stalling, whitespace runs are at most MAX_WS bytes, there is no
whitespace after the document, and numbers have at most MAX_INT_DIGITS / MAX_FRAC_DIGITS /
MAX_EXP_DIGITS digits in their parts."""

from __future__ import annotations

from array import array

MAX_WS = 4
MAX_INT_DIGITS = 16
MAX_FRAC_DIGITS = 16
MAX_EXP_DIGITS = 2
UNKNOWN, DEAD = -2, -1

_WS = frozenset(b" \t\n\r")
_DIGITS = frozenset(b"0123456789")
_HEX = frozenset(b"0123456789abcdefABCDEF")
_ESCAPES = frozenset(b'"\\/bfnrt')
_QUOTE, _BACKSLASH, _COLON, _COMMA = 0x22, 0x5C, 0x3A, 0x2C
_LBRACE, _RBRACE, _LBRACK, _RBRACK = 0x7B, 0x7D, 0x5B, 0x5D
_MINUS, _PLUS, _ZERO, _DOT = 0x2D, 0x2B, 0x30, 0x2E


def _utf8_leads() -> dict[int, tuple[int, int, int]]:
    """Lead byte -> (continuation bytes, range of the next byte): only well-formed UTF-8 (no
    overlong forms, no surrogates, nothing above U+10FFFF)."""
    leads: dict[int, tuple[int, int, int]] = {}
    for b in range(0xC2, 0xE0):
        leads[b] = (1, 0x80, 0xBF)
    for b in range(0xE0, 0xF0):
        leads[b] = (2, 0xA0 if b == 0xE0 else 0x80, 0x9F if b == 0xED else 0xBF)
    for b in range(0xF0, 0xF5):
        leads[b] = (3, 0x90 if b == 0xF0 else 0x80, 0x8F if b == 0xF4 else 0xBF)
    return leads


_UTF8_LEADS = _utf8_leads()


class Node:
    """A compiled schema node; identity is equality (nodes may form cycles through $ref)."""

    __slots__ = ()


class Obj(Node):
    """`props`: the encoded key (JSON string body plus its closing quote) -> value node, or None
    for free keys whose values all match `values`."""

    __slots__ = ("props", "required", "values")

    def __init__(self, props: dict[bytes, Node] | None, required: frozenset[bytes], values: Node | None = None):
        self.props, self.required, self.values = props, required, values


class Arr(Node):
    __slots__ = ("item", "lo", "hi")

    def __init__(self, item: Node, lo: int = 0, hi: int | None = None):
        self.item, self.lo, self.hi = item, lo, hi


class Str(Node):
    """Lengths count characters (an escape sequence is one)."""

    __slots__ = ("lo", "hi")

    def __init__(self, lo: int = 0, hi: int | None = None):
        self.lo, self.hi = lo, hi


class Num(Node):
    __slots__ = ("integer",)

    def __init__(self, integer: bool):
        self.integer = integer


class Lit(Node):
    """A finite set of serialized JSON values (enum, const, true/false, null)."""

    __slots__ = ("values", "complete")

    def __init__(self, values: tuple[bytes, ...]):
        self.values, self.complete = values, frozenset(values)


class Union(Node):
    __slots__ = ("options",)

    def __init__(self, options: list[Node]):
        self.options = options


class Ref(Node):
    __slots__ = ("target",)

    def __init__(self, target: Node | None = None):
        self.target = target


def any_value() -> Node:
    """Any JSON value (json_object mode, `{}` schemas, free object values)."""
    node = Union([])
    node.options = [Obj(None, frozenset(), node), Arr(node), Str(), Num(False), Lit((b"true", b"false", b"null"))]
    return node


_KEY = Str()  # the key of a free object

# Frames (tuples, so stacks hash):
#   (ROOT, node, phase, ws)            phase 0: before the value, 1: after it
#   (OBJ, node, phase, seen, key, ws)  0 after '{', 1 in a declared key, 2 before ':', 3 after ':',
#                                      4 after a value, 5 after ','
#   (ARR, node, phase, count, ws)      0 after '[', 1 after a value, 2 after ','
#   (STR, node, count, utf8, escape)   utf8: 0 or (bytes left, lo, hi); escape: 0, 1 after '\', 10+k: k hex left
#   (NUM, node, phase, digits)         see _num
#   (LIT, node, prefix)
ROOT, OBJ, ARR, STR, NUM, LIT = range(6)
_NUM_DONE = frozenset((1, 2, 4, 7))


def start(node: Node, b: int) -> list[tuple]:
    """The frames a value of `node` starts with on byte b (an empty tuple: the value is complete)."""
    kind = type(node)
    if kind is Union:
        return [f for option in node.options for f in start(option, b)]  # type: ignore[attr-defined]
    if kind is Ref:
        return start(node.target, b)  # type: ignore[attr-defined,arg-type]
    if kind is Obj:
        return [((OBJ, node, 0, frozenset(), b"", 0),)] if b == _LBRACE else []
    if kind is Arr:
        return [((ARR, node, 0, 0, 0),)] if b == _LBRACK else []
    if kind is Str:
        return [((STR, node, 0, 0, 0),)] if b == _QUOTE else []
    if kind is Num:
        if b == _MINUS:
            return [((NUM, node, 0, 0),)]
        if b == _ZERO:
            return [((NUM, node, 1, 1),)]
        return [((NUM, node, 2, 1),)] if b in _DIGITS else []
    return _lit(node, bytes((b,)))  # type: ignore[arg-type]


def _lit(node: Lit, prefix: bytes) -> list[tuple]:
    longer = [v for v in node.values if v.startswith(prefix)]
    if not longer:
        return []
    if longer == [prefix]:
        return [()]  # complete and nothing extends it: the value ends here
    return [((LIT, node, prefix),)]


def done(frame: tuple) -> bool:
    """May the value of this frame end here?"""
    kind = frame[0]
    if kind == NUM:
        return frame[2] in _NUM_DONE
    if kind == LIT:
        return frame[2] in frame[1].complete
    return kind == ROOT and frame[2] == 1


def step(frame: tuple, b: int) -> list[tuple]:
    """What the top frame becomes on byte b: tuples of frames replacing it (empty: it closed)."""
    kind = frame[0]
    if kind == STR:
        return _str(frame, b)
    if kind == OBJ:
        return _obj(frame, b)
    if kind == ARR:
        return _arr(frame, b)
    if kind == NUM:
        return _num(frame, b)
    if kind == LIT:
        return _lit(frame[1], frame[2] + bytes((b,)))
    _, node, phase, ws = frame
    if phase == 1:
        return []  # nothing after the document
    if b in _WS:
        return [((ROOT, node, 0, ws + 1),)] if ws < MAX_WS else []
    return [((ROOT, node, 1, 0), *child) for child in start(node, b)]


def _str(frame: tuple, b: int) -> list[tuple]:
    _, node, count, utf8, esc = frame
    grown = count + 1 if node.hi is not None else min(count + 1, node.lo)  # beyond lo, counts are alike
    if esc == 1:
        if b in _ESCAPES:
            return [((STR, node, grown, 0, 0),)]
        return [((STR, node, count, 0, 14),)] if b == 0x75 else []  # \u: four hex digits
    if esc:
        if b not in _HEX:
            return []
        return [((STR, node, grown, 0, 0),)] if esc == 11 else [((STR, node, count, 0, esc - 1),)]
    if utf8:
        left, lo, hi = utf8
        if not lo <= b <= hi:
            return []
        return [((STR, node, grown, 0, 0),)] if left == 1 else [((STR, node, count, (left - 1, 0x80, 0xBF), 0),)]
    if b == _QUOTE:
        return [()] if count >= node.lo else []
    if node.hi is not None and count >= node.hi:
        return []
    if b == _BACKSLASH:
        return [((STR, node, count, 0, 1),)]
    if b < 0x20:
        return []  # control characters must be escaped
    if b < 0x80:
        return [((STR, node, grown, 0, 0),)]
    lead = _UTF8_LEADS.get(b)
    return [((STR, node, count, lead, 0),)] if lead else []


def _obj(frame: tuple, b: int) -> list[tuple]:
    _, node, phase, seen, key, ws = frame
    props = node.props
    if phase == 1:  # typing a declared key
        typed = key + bytes((b,))
        if not any(k.startswith(typed) for k in props if k not in seen):
            return []
        return [((OBJ, node, 2 if typed in props else 1, seen, typed, 0),)]
    if b in _WS and phase != 1:
        return [((OBJ, node, phase, seen, key, ws + 1),)] if ws < MAX_WS else []
    if phase == 3:
        if props is None:
            parent, child = (OBJ, node, 4, seen, b"", 0), node.values
        else:
            parent, child = (OBJ, node, 4, seen | {key}, b"", 0), props[key]
        return [(parent, *frames) for frames in start(child, b)]
    if phase == 2:
        return [((OBJ, node, 3, seen, key, 0),)] if b == _COLON else []
    if (phase in (0, 5)) and b == _QUOTE:
        if props is None:
            return [((OBJ, node, 2, seen, b"", 0), (STR, _KEY, 0, 0, 0))]
        return [((OBJ, node, 1, seen, b"", 0),)] if len(seen) < len(props) else []
    if phase == 4 and b == _COMMA and (props is None or len(seen) < len(props)):
        return [((OBJ, node, 5, seen, b"", 0),)]
    if phase in (0, 4) and b == _RBRACE and node.required <= seen:
        return [()]
    return []


def _arr(frame: tuple, b: int) -> list[tuple]:
    _, node, phase, count, ws = frame
    if b in _WS:
        return [((ARR, node, phase, count, ws + 1),)] if ws < MAX_WS else []
    if b == _RBRACK:
        return [()] if (phase == 0 and node.lo == 0) or (phase == 1 and count >= node.lo) else []
    if phase == 1:
        ok = b == _COMMA and (node.hi is None or count < node.hi)
        return [((ARR, node, 2, count, 0),)] if ok else []
    if node.hi is not None and count >= node.hi:
        return []
    grown = count + 1 if node.hi is not None else min(count + 1, node.lo)
    return [((ARR, node, 1, grown, 0), *frames) for frames in start(node.item, b)]


def _num(frame: tuple, b: int) -> list[tuple]:
    # phases: 0 after '-', 1 integer part '0', 2 integer digits, 3 after '.', 4 fraction digits,
    # 5 after 'e', 6 after the exponent's sign, 7 exponent digits
    _, node, phase, digits = frame
    digit = b in _DIGITS
    nxt: tuple[int, int] | None = None
    if phase == 0 and digit:
        nxt = (1, 1) if b == _ZERO else (2, 1)
    elif phase in (1, 2) and not node.integer and b == _DOT:
        nxt = (3, 0)
    elif phase in (1, 2, 4) and not node.integer and b in (0x65, 0x45):
        nxt = (5, 0)
    elif phase == 2 and digit and digits < MAX_INT_DIGITS:
        nxt = (2, digits + 1)
    elif phase == 3 and digit:
        nxt = (4, 1)
    elif phase == 4 and digit and digits < MAX_FRAC_DIGITS:
        nxt = (4, digits + 1)
    elif phase == 5 and b in (_PLUS, _MINUS):
        nxt = (6, 0)
    elif phase in (5, 6) and digit:
        nxt = (7, 1)
    elif phase == 7 and digit and digits < MAX_EXP_DIGITS:
        nxt = (7, digits + 1)
    return [((NUM, node, *nxt),)] if nxt else []


def advance(stack: tuple, b: int) -> list[tuple]:
    """The stacks after byte b: the top frame takes it, or, where its value may end, the frame below."""
    top, rest = stack[-1], stack[:-1]
    out = [rest + frames for frames in step(top, b)]
    if rest and done(top):
        out.extend(advance(rest, b))
    return out


def accepting(stack: tuple) -> bool:
    return all(done(frame) for frame in stack)


class Automaton:
    """States interned to ints, with lazily filled transition rows. One per compiled schema; it
    only grows, and is used by one thread at a time (the engine's)."""

    def __init__(self, root: Node):
        self._ids: dict[frozenset, int] = {}
        self.states: list[frozenset] = []
        self.rows: list[array] = []
        self.accepting: list[bool] = []
        self.start = self._intern(frozenset({((ROOT, root, 0, 0),)}))

    def _intern(self, state: frozenset) -> int:
        sid = self._ids.get(state)
        if sid is None:
            sid = self._ids[state] = len(self.states)
            self.states.append(state)
            self.rows.append(array("i", [UNKNOWN]) * 256)
            self.accepting.append(any(accepting(s) for s in state))
        return sid

    def next(self, sid: int, b: int) -> int:
        """The state after byte b, or DEAD."""
        row = self.rows[sid]
        t = row[b]
        if t == UNKNOWN:
            stacks = frozenset(s for stack in self.states[sid] for s in advance(stack, b))
            t = row[b] = self._intern(stacks) if stacks else DEAD
        return t

    def feed(self, sid: int, data: bytes) -> int:
        for b in data:
            if sid < 0:
                return DEAD
            sid = self.next(sid, b)
        return sid

    def is_prefix(self, data: bytes) -> bool:
        """Can `data` be extended to a matching document (or is it one)?"""
        return self.feed(self.start, data) >= 0

    def matches(self, data: bytes) -> bool:
        sid = self.feed(self.start, data)
        return sid >= 0 and self.accepting[sid]
