"""`rollgate envs`: every environment the installed entry points provide, with its family, tools,
whether it can run here and, if not, why (with the fix). Broken plugins are listed with their error."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from typing import Any


def add_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--json", action="store_true", help="a JSON list of {name, family, available, tools, roles, why_not, ...}"
    )
    p.add_argument("--available", action="store_true", help="only the environments that can run here")


def listing() -> list[dict[str, Any]]:
    from rollgate.resources_servers.registry import default_registry

    registry = default_registry()
    out: list[dict[str, Any]] = [
        {
            "name": spec.name,
            "family": spec.family,
            "available": spec.available,
            "tools": spec.tool_names(),
            "roles": list(getattr(spec.env_class, "roles", ()) or ()),  # a multi-role environment's (docs/roles.md)
            "why_not": spec.reason,
            "generates_tasks": spec.tasks is not None,
            "source": spec.source,
        }
        for spec in registry.specs().values()
    ]
    for b in registry.broken:
        out.append(
            {
                "name": b.entry_point.split(" = ")[0],
                "family": None,
                "available": False,
                "tools": [],
                "roles": [],
                "why_not": f"plugin failed to load: {b.error}",
                "generates_tasks": False,
                "source": b.entry_point,
                "broken": True,
                "distribution": b.distribution,
            }
        )
    return out


def run(args: argparse.Namespace) -> int:
    rows = listing()
    if args.available:
        rows = [r for r in rows if r["available"]]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    width = max([len(r["name"]) for r in rows] + [11])
    print(f"{'environment':<{width}}  {'family':<13} {'ok':<3} tools / why not")
    for r in rows:
        detail = ", ".join(r["tools"]) or "-" if r["available"] else r["why_not"]
        if r["available"] and r["roles"]:
            detail += f"  (roles: {', '.join(r['roles'])})"
        print(f"{r['name']:<{width}}  {r['family'] or '-':<13} {'yes' if r['available'] else 'no':<3} {detail}")
    ok = Counter(r["family"] or "single" for r in rows if r["available"])
    not_ok = sum(not r["available"] for r in rows)
    parts = ", ".join(f"{n} {family}" for family, n in sorted(ok.items()))
    print(f"{sum(ok.values())} available ({parts}); {not_ok} not available")
    return 0
