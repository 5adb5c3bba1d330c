"""Count the bad inputs the regression tests try, by area and outcome (issue 10's closing note).

    .venv/bin/python -m tests.count_bad_inputs            # a table; --json for machine-readable output

Collects (never runs) every test in ``tests/**/test_*bad_inputs*.py``; each collected item — one
parametrized case or one plain test — is one bad input or fault injection. The area comes from the file,
the outcome from the test's name (a test named ``..._recomputes_...`` expects recomputation, a
``..._is_accepted`` one expects the input kept; every other expects a typed ``aumann.errors`` exception
naming the input). The hypothesis property test counts once here; it tries ``max_examples`` random files.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

AREAS = [  # (path fragment, area), first match wins
    ("tests/cli/", "CLI"),
    ("tests/data/bluesky/", "ingestion (Bluesky)"),
    ("tests/simulators/test_llm", "LLM backend"),
    ("tests/studies/", "resume, studies and reports"),
    ("tests/scenarios/", "configs and scenarios"),
    ("tests/attribution/", "Python API (attribution)"),
    ("tests/test_bad_inputs_ground", "ground floor (paths, files, checks, configs)"),
    ("tests/test_bad_inputs_probes", "second pass (paths, sizes, reports, metrics)"),
]

OUTCOMES = [  # (regex on the test function's name, outcome), first match wins
    (r"recompute|verified_on_resume|failed_checks_reach", "recomputed after a failed check, and reported"),
    (r"every_line_is_accounted", "counted exactly (property test, random garbage lines)"),
    (r"accept|keeps_ordinary|survives|still_jsonl|bom_does_not|detected_and_decoded|decode_with|first_occurrence"
     r"|raises_the_cap|plain_csv|strict_json|null_not|nan_without|upcast|not_hidden|caps_follow|"
     r"stored_without|honoured|becomes_the_bearer|never_token_counts|cut_off|not_cached|never_fails|"
     r"does_not_crash|plain_numbers|never_holds_nan|as_seed_accepts",
     "handled: kept, counted, redacted or written plainly"),
    (r".", "typed aumann.errors exception naming the input"),
]


def collect() -> list[str]:
    files = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("tests/**/test_*bad_inputs*.py"))
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if "::" in line]


def classify(node: str) -> tuple[str, str]:
    path, _, rest = node.partition("::")
    func = rest.split("[", 1)[0]
    area = next(a for frag, a in [*AREAS, ("", "other")] if frag in path)
    outcome = next(o for rx, o in OUTCOMES if re.search(rx, func))
    return area, outcome


def main() -> int:
    nodes = collect()
    by = Counter(classify(n) for n in nodes)
    areas = sorted({a for a, _ in by})
    outcomes = [o for _, o in OUTCOMES]
    if "--json" in sys.argv:
        print(json.dumps({"total": len(nodes), "by_area": {a: sum(v for (x, _), v in by.items() if x == a)
                                                           for a in areas},
                          "by_outcome": {o: sum(v for (_, y), v in by.items() if y == o) for o in outcomes},
                          "cells": [{"area": a, "outcome": o, "n": n} for (a, o), n in sorted(by.items())]},
                         indent=1))
        return 0
    print(f"{len(nodes)} bad inputs / fault injections in {len({n.split('::')[0] for n in nodes})} files\n")
    width = max(len(a) for a in areas)
    for a in areas:
        parts = ", ".join(f"{by[(a, o)]} {o.split(' ')[0].rstrip(':')}" for o in outcomes if by[(a, o)])
        print(f"{a:<{width}}  {sum(by[(a, o)] for o in outcomes):4d}   ({parts})")
    print()
    for o in outcomes:
        print(f"{sum(by[(a, o)] for a in areas):4d}  {o}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
