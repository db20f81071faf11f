"""The network and filesystem cases of the sandbox security suite, written against the provider
interface only, so they run on the local provider (test_security.py) and against a deployed sandbox
service through the remote provider (the docker tier, tests/deploy/test_docker_stack.py)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import threading

from rollgate.sandbox.base import SandboxProvider


async def still_serving(provider: SandboxProvider) -> None:
    other = await provider.create()
    try:
        r = await other.exec(code="print(6 * 7)")
        assert r.ok and r.stdout == "42\n", r
    finally:
        await other.destroy()


async def no_network_to(provider: SandboxProvider, ports: list[int]) -> None:
    """Code in the sandbox reaches none of `ports` on 127.0.0.1, which are reachable from here."""
    sandbox = await provider.create()
    try:
        for port in ports:
            with socket.create_connection(("127.0.0.1", port), timeout=2):
                pass  # reachable from outside the sandbox: a failure inside is the sandbox's
            code = (
                f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
                "s.sendall(b'leak')\nprint('connected')"
            )
            r = await sandbox.exec(code=code)
            assert r.exit_code != 0 and "connected" not in r.stdout, (port, r)
            assert "Error" in r.stderr, r.stderr
        # nor any other address (TEST-NET-1, routed nowhere): the sandbox has no route at all
        r = await sandbox.exec(
            code="import socket\nsocket.create_connection(('192.0.2.1', 53), timeout=2)\nprint('out')"
        )
        assert "out" not in r.stdout and r.exit_code != 0, r
    finally:
        await sandbox.destroy()
    await still_serving(provider)


async def no_network_even_to_loopback(provider: SandboxProvider) -> None:
    """A listener of ours on 127.0.0.1 sees only our own connection, never the sandbox's."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(5)
    accepted: list[socket.socket] = []

    def accept_all() -> None:
        with contextlib.suppress(OSError):
            while True:
                accepted.append(server.accept()[0])

    thread = threading.Thread(target=accept_all, daemon=True)
    thread.start()
    try:
        await no_network_to(provider, [server.getsockname()[1]])
    finally:
        server.close()
        thread.join(6)
        for conn in accepted:
            conn.close()
    assert len(accepted) == 1  # only our own reachability check ever arrived


async def sessions_cannot_read_each_other(provider: SandboxProvider) -> None:
    """One sandbox's files are invisible to another (its work dir path is known to the attacker)."""
    a, b = await provider.create(), await provider.create()
    try:
        await a.write_file("secret.txt", "the answer of session a")
        assert (await a.exec(code="print(open('secret.txt').read())")).stdout.startswith("the answer")
        target = os.path.join(a.workdir, "secret.txt")  # type: ignore[attr-defined]
        code = (
            "import os, sys\nfor p in sys.argv[1:]:\n    try:\n        print(open(p).read())\n"
            "    except OSError as e:\n        print('denied', type(e).__name__)\n"
            "try:\n    print(os.listdir(os.path.dirname(sys.argv[1])))\nexcept OSError as e:\n"
            "    print('denied', type(e).__name__)\n"
        )
        await b.write_file("probe.py", code)
        r = await b.exec(["python3", "probe.py", target])
        assert "the answer" not in r.stdout and r.stdout.count("denied") == 2, r
    finally:
        await a.destroy()
        await b.destroy()
    await still_serving(provider)


async def service_secrets_stay_hidden(provider: SandboxProvider, secret: str, paths: list[str]) -> None:
    """Neither the environment nor the files of the service (`paths`, which hold `secret`) reach the code."""
    sandbox = await provider.create()
    try:
        code = (
            "import os, sys\nout = [repr(dict(os.environ))]\n"
            f"for p in {[*paths, '/proc/1/environ', '/proc/self/environ']!r}:\n"
            "    try:\n        out.append(open(p, 'rb').read().decode(errors='replace'))\n"
            "    except OSError as e:\n        out.append('denied ' + type(e).__name__)\n"
            "print('\\n'.join(out))\n"
        )
        r = await sandbox.exec(code=code)
        assert r.exit_code == 0, r
        assert secret not in r.stdout and secret not in r.stderr
        assert r.stdout.count("denied") >= len(paths), r.stdout[-2000:]
    finally:
        await sandbox.destroy()
    await still_serving(provider)


async def escapes_are_refused(provider: SandboxProvider, absent_paths: list[str]) -> None:
    """The escapes of tests/sandbox/test_escapes.py that need no host access, each with its specific
    refusal: Rollgate is not importable, `absent_paths` (its files, the home dir, task data) do not
    exist, user namespaces and mounts are refused by the filter, and the run has no_new_privs."""
    sandbox = await provider.create()
    try:
        code = (
            "import ctypes, json, os\nlibc = ctypes.CDLL(None, use_errno=True)\nout = {}\n"
            "try:\n    import rollgate\n    out['import'] = 'imported'\n"
            "except ModuleNotFoundError as e:\n    out['import'] = e.name\n"
            f"for p in {absent_paths!r}:\n"
            "    try:\n        os.stat(p)\n        out[p] = 'exists'\n"
            "    except OSError as e:\n        out[p] = e.errno\n"
            "out['unshare'] = (libc.unshare(0x10000000), ctypes.get_errno())\n"
            "out['mount'] = (libc.mount(b'none', b'/tmp', b'tmpfs', 0, None), ctypes.get_errno())\n"
            "st = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines())\n"
            "out['nnp'] = st['NoNewPrivs'].strip()\nout['seccomp'] = st['Seccomp'].strip()\n"
            "print(json.dumps(out))\n"
        )
        r = await sandbox.exec(code=code)
        assert r.exit_code == 0, r
        out = json.loads(r.stdout.strip().splitlines()[-1])
        r2 = await sandbox.exec(["unshare", "-Urn", "id"])
    finally:
        await sandbox.destroy()
    assert out["import"] == "rollgate", out
    assert {p: out[p] for p in absent_paths} == {p: errno.ENOENT for p in absent_paths}, out
    assert out["unshare"] == [-1, errno.EPERM] and out["mount"] == [-1, errno.EPERM], out
    assert out["nnp"] == "1" and out["seccomp"] == "2", out
    assert r2.exit_code == 1 and "unshare failed: Operation not permitted" in r2.stderr, r2
