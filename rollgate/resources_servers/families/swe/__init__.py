"""The `swe/<project>` family: real projects from the package index, injected bugs, hidden tests.

projects.py pins the projects; sources.py fetches them into Rollgate's cache; mutations.py injects
bugs; pool.py validates them with the projects' own tests; tasks.py makes rows; env.py plays them
in a sandbox. Listing the family (`rollgate envs`) touches none of that.
"""

from __future__ import annotations

import functools
import importlib.util
import shutil

from rollgate.resources_servers.registry import EnvSpec

FAMILY = "swe"


def environments() -> list[EnvSpec]:
    from rollgate.resources_servers.families.swe.env import SweEnv
    from rollgate.resources_servers.families.swe.projects import PROJECTS
    from rollgate.resources_servers.families.swe.tasks import generate_tasks

    missing = [t for t in ("bwrap", "patch", "grep", "find") if shutil.which(t) is None]
    reason = f"needs {', '.join(missing)} on PATH (apt-get install bubblewrap patch)" if missing else None
    if reason is None and importlib.util.find_spec("pytest") is None:
        reason = "pytest is not installed: pip install 'rollgate[swe]'"
    return [
        EnvSpec(
            name=f"{FAMILY}/{name}",
            env_class=SweEnv,
            factory=functools.partial(SweEnv, name),
            family=FAMILY,
            available=reason is None,
            reason=reason,
            tasks=functools.partial(generate_tasks, name),
        )
        for name in PROJECTS
    ]
