"""Count the bad inputs the regression and fuzz tests try, by area and outcome (issues 10 and 22's closing notes).

    .venv/bin/python -m tests.count_bad_inputs            # tables by area and by issue-22 class
    .venv/bin/python -m tests.count_bad_inputs --json     # the same, machine-readable

Collects (never runs) every test in ``tests/**/test_*bad_inputs*.py`` and ``tests/fuzz/test_fuzz_*.py``; each
collected item — one parametrized case or one plain test — is one bad input or fault injection (a fuzz item is
one target that tries its examples, :data:`tests.fuzz.harness.CI_EXAMPLES` or fewer in CI, as many as
``--fuzz SECONDS`` allows otherwise). The area comes from the file, the outcome from the test's name: a test named
``..._recomputes_...`` expects recomputation, ``..._is_accepted``-like names expect the input kept, counted or
written safely, ``test_open_...`` is a known, still-open case (an ``xfail(strict=True)`` test), every other
expects a typed ``aumann.errors`` exception naming the input.

Issue 22's classes: the files ``tests/hardening/test_bad_inputs_<class>.py`` (one per class) and the fuzz
targets, mapped to the class of what they read.
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
    ("tests/hardening/", "issue 22 (classes)"),
    ("tests/fuzz/", "issue 22 fuzz targets"),
    ("tests/cli/", "CLI"),
    ("tests/data/bluesky/", "ingestion (Bluesky)"),
    ("tests/simulators/test_llm", "LLM backend"),
    ("tests/studies/", "resume, studies and reports"),
    ("tests/scenarios/", "configs and scenarios"),
    ("tests/attribution/", "Python API (attribution)"),
    ("tests/test_bad_inputs_ground", "ground floor (paths, files, checks, configs)"),
    ("tests/test_bad_inputs_probes", "second pass (paths, sizes, reports, metrics)"),
]

CLASSES = [  # issue 22: (path fragment, class), first match wins
    ("hardening/test_bad_inputs_parsing", "1 unbounded parsing"),
    ("hardening/test_bad_inputs_numbers", "2 numbers from outside"),
    ("hardening/test_bad_inputs_user_code", "3 user code at the boundary"),
    ("hardening/test_bad_inputs_interop", "4 interop"),
    ("hardening/test_bad_inputs_filesystem", "5 the filesystem"),
    ("hardening/test_bad_inputs_outputs", "6 output others open"),
    ("fuzz/test_fuzz_npz", "1 unbounded parsing"),
    ("fuzz/test_fuzz_json_toml", "1 unbounded parsing"),
    ("fuzz/test_fuzz_jetstream", "1 unbounded parsing"),
    ("fuzz/test_fuzz_traces", "1 unbounded parsing"),
    ("fuzz/test_fuzz_cli_numbers", "2 numbers from outside"),
    ("fuzz/test_fuzz_run_dirs", "5 the filesystem"),
    ("fuzz/test_fuzz_interop", "4 interop"),
]

OUTCOMES = [  # (regex on the test function's name, outcome), first match wins
    (r"^test_open_", "still open (known; an xfail(strict=True) test)"),
    (r"^test_fuzz_", "fuzz target: typed error or correct result, never a traceback, hang or unbounded memory"),
    (r"recompute|verified_on_resume|failed_checks_reach|exits_0_and_says_so", "recomputed after a failed check, and "
                                                                               "reported"),
    (r"every_line_is_accounted", "counted exactly (property test, random garbage lines)"),
    (r"accept|keeps_ordinary|survives|still_jsonl|bom_does_not|detected_and_decoded|decode_with|first_occurrence"
     r"|raises_the_cap|plain_csv|strict_json|null_not|nan_without|upcast|not_hidden|caps_follow|"
     r"stored_without|honoured|becomes_the_bearer|never_token_counts|cut_off|not_cached|never_fails|"
     r"does_not_crash|plain_numbers|never_holds_nan|as_seed_accepts|round_trip|never_changed|leaves_plain|"
     r"same_panel|not_part_of|are_followed|replaces_a_planted|works_outside|drawn_as_plain_text|no_watchdog|"
     r"are_ignored|label_not_a_feature|pass_unchanged|iso_text|neutralise|apostrophe|markdown_escapes|"
     r"shows_control|writes_hostile|not_echoed_raw|plain_file_names|header_cells|alarm_survives|their_check|"
     r"escapes_rich|leaves_no_earlier|leaves_no_table",
     "handled: kept, counted, redacted, neutralised or written plainly"),
    (r".", "typed aumann.errors exception naming the input"),
]
SHORT = {"recomputed after a failed check, and reported": "handled",
         "counted exactly (property test, random garbage lines)": "handled",
         "handled: kept, counted, redacted, neutralised or written plainly": "handled",
         "typed aumann.errors exception naming the input": "typed",
         "still open (known; an xfail(strict=True) test)": "still open",
         "fuzz target: typed error or correct result, never a traceback, hang or unbounded memory": "fuzz"}


def collect() -> list[str]:
    files = sorted(str(p.relative_to(ROOT)) for p in [*ROOT.glob("tests/**/test_*bad_inputs*.py"),
                                                       *ROOT.glob("tests/fuzz/test_fuzz_*.py")])
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if "::" in line]


def _func(node: str) -> str:
    return node.partition("::")[2].split("[", 1)[0]


def classify(node: str) -> tuple[str, str]:
    path = node.partition("::")[0]
    area = next(a for frag, a in [*AREAS, ("", "other")] if frag in path)
    outcome = next(o for rx, o in OUTCOMES if re.search(rx, _func(node)))
    return area, outcome


def issue22_class(node: str) -> str | None:
    path = node.partition("::")[0]
    return next((c for frag, c in CLASSES if frag in path), None)


def by_class(nodes: list[str]) -> dict[str, Counter]:
    out: dict[str, Counter] = {}
    for n in nodes:
        c = issue22_class(n)
        if c is None:
            continue
        kind = SHORT[classify(n)[1]]
        out.setdefault(c, Counter())[kind] += 1
    return dict(sorted(out.items()))


def main() -> int:
    nodes = collect()
    by = Counter(classify(n) for n in nodes)
    areas = sorted({a for a, _ in by})
    outcomes = [o for _, o in OUTCOMES]
    classes = by_class(nodes)
    if "--json" in sys.argv:
        print(json.dumps({"total": len(nodes), "by_area": {a: sum(v for (x, _), v in by.items() if x == a)
                                                           for a in areas},
                          "by_outcome": {o: sum(v for (_, y), v in by.items() if y == o) for o in outcomes},
                          "cells": [{"area": a, "outcome": o, "n": n} for (a, o), n in sorted(by.items())],
                          "issue22_classes": {c: {"tried": sum(k.values()), "typed": k["typed"],
                                                  "handled": k["handled"], "still_open": k["still open"],
                                                  "fuzz_targets": k["fuzz"]} for c, k in classes.items()}},
                         indent=1))
        return 0
    print(f"{len(nodes)} bad inputs / fault injections / fuzz targets in {len({n.split('::')[0] for n in nodes})} "
          "files\n")
    width = max(len(a) for a in areas)
    for a in areas:
        short = Counter()
        for o in outcomes:
            short[SHORT[o]] += by[(a, o)]
        parts = ", ".join(f"{n} {k}" for k, n in short.items() if n)
        print(f"{a:<{width}}  {sum(by[(a, o)] for o in outcomes):4d}   ({parts})")
    print()
    for o in outcomes:
        print(f"{sum(by[(a, o)] for a in areas):4d}  {o}")
    print("\nissue 22, by class (regression cases + fuzz targets):\n")
    print(f"{'class':<30} {'tried':>6} {'typed':>6} {'handled':>8} {'open':>5} {'fuzz targets':>13}")
    total = Counter()
    for c, k in classes.items():
        total.update(k)
        print(f"{c:<30} {sum(k.values()):>6} {k['typed']:>6} {k['handled']:>8} {k['still open']:>5} {k['fuzz']:>13}")
    print(f"{'total':<30} {sum(total.values()):>6} {total['typed']:>6} {total['handled']:>8} "
          f"{total['still open']:>5} {total['fuzz']:>13}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
