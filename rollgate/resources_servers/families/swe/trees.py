"""Moving a task's file trees into and out of a sandbox: write a tree, turn one tree into another
(only the files that differ), and read back what the model changed."""

from __future__ import annotations

import hashlib

from rollgate.core.errors import BadRequest, NotFound
from rollgate.resources_servers.families.swe.checkout import Files
from rollgate.sandbox import Sandbox, SandboxError

MAX_CHANGED_FILES = 200


async def write_tree(box: Sandbox, files: Files) -> None:
    """Every file of `files`, in one transfer where the sandbox has one (a container: one tar)."""
    bulk = getattr(box, "write_files", None)
    if bulk is not None:
        await bulk(files)
        return
    for path, data in files.items():
        await box.write_file(path, data)


async def morph(box: Sandbox, have: Files, want: Files) -> int:
    """Turn the sandbox's tree from `have` into `want`: write the files that differ, remove the
    ones `want` lacks. Returns the number of files touched."""
    changed = {p: d for p, d in want.items() if have.get(p) != d}
    gone = sorted(set(have) - set(want))
    if changed:
        await write_tree(box, changed)
    if gone:
        r = await box.exec(["rm", "-f", "--", *gone])
        if not r.ok:
            raise SandboxError(f"cannot remove {len(gone)} files of the checkout: {r.stderr.strip()[:300]}")
    return len(changed) + len(gone)


async def changes(box: Sandbox, vis: Files) -> tuple[dict[str, bytes | None], str | None]:
    """The model's changes against the tree it was given ({path: new bytes, or None if deleted}),
    or the reason they cannot be judged. One run hashes every file; only those that differ from
    `vis` are read back (a container sandbox pays a round trip per read)."""
    find = ["find", ".", "-type", "f", "-not", "-path", "*/__pycache__/*"]
    r = await box.exec([*find, "-exec", "sha256sum", "-z", "{}", "+"])
    if r.exit_code != 0 or r.stdout_truncated:
        return {}, "the repository's files could not be listed"
    listed: dict[str, str] = {}
    for entry in filter(None, r.stdout.split("\0")):
        digest, sep, path = entry.partition("  ")
        if not sep or len(digest) != 64:
            return {}, "the repository's files could not be listed"
        listed[path.removeprefix("./")] = digest
    out: dict[str, bytes | None] = {}
    for path in sorted(p for p, d in listed.items() if p not in vis or hashlib.sha256(vis[p]).hexdigest() != d):
        try:
            data = await box.read_file(path, max_bytes=(1 << 20) + 1)
        except (BadRequest, NotFound, SandboxError):
            return {}, f"{path!r} could not be read"
        if len(data) > 1 << 20:
            return {}, f"{path!r} is larger than 1 MiB"
        if vis.get(path) != data:
            out[path] = data
        if len(out) > MAX_CHANGED_FILES:
            return {}, f"more than {MAX_CHANGED_FILES} files changed"
    for path in set(vis) - set(listed):
        out[path] = None
    return out, None
