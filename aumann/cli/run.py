"""``aumann run SCENARIO``: simulate, attribute, run the faithfulness study and the ablations, report.

Examples::

    aumann run midscale-social                        # 10 runs, 1000 permutations, offline policy
    aumann run social-llm --runs 3 --seed 7 --out runs/social
    aumann run social-llm --backend openai --model gpt-4o-mini --base-url http://127.0.0.1:8000/v1
    aumann run social-llm --backend openai --model M --base-url URL1 --base-url URL2 --concurrency 64 --rpm 3000
    aumann run econagent --backend openai --model gpt-4o-mini --dry-run      # requests, tokens, cost, time
    aumann run social-llm --workers 2                                         # independent runs in parallel

The run directory holds ``faithfulness.csv`` (+ ``.md``), ``faithfulness_extended.csv``, the
ablation tables, ``runs/run-NNN.{json,npz}`` (one per finished run, written atomically),
``panels/``, PNG plots, ``report.md`` and ``manifest.json``. Re-running the same command with the
same ``--out`` resumes: finished runs are read back, not recomputed.

The OpenAI-compatible backend reads ``OPENAI_API_KEY`` (or ``AUMANN_LLM_API_KEY``) and, unless
``--base-url``/``--model`` are given, ``AUMANN_LLM_BASE_URL``/``OPENAI_BASE_URL`` and
``AUMANN_LLM_MODEL`` from the environment — here, at the edge, and nowhere else. Responses are cached
in ``<out>/llm-cache.sqlite``; the key never reaches logs, caches or the manifest. What the LLM
cost (calls, tokens, cache hits, latency, dollars) is kept in ``<out>/llm-usage.json`` across
resumed invocations and reported in ``manifest.json`` (``llm_usage``), ``report.md`` and live in
the progress bar; ``--max-calls`` / ``--max-cost`` stop a run cleanly with the spend recorded.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from aumann.cli import llm_options


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("run", help="run a scenario, attribute it and measure deletion faithfulness",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenario", help="registered scenario name (e.g. social-llm, midscale-social, econagent)")
    p.add_argument("--runs", type=int, default=None, help="independent runs (default: the config's)")
    p.add_argument("--seed", type=int, default=None, help="root seed (default: the config's)")
    p.add_argument("--config", type=Path, default=None, help="a TOML config (default configs/<scenario>.toml)")
    p.add_argument("--backend", choices=("offline", "openai"), default="offline",
                   help="decision backend: the scenario's offline policy (default) or an OpenAI-compatible server")
    p.add_argument("--permutations", type=int, default=None, help="sampled-Shapley permutations (default 1000)")
    p.add_argument("--reference-game", choices=("masking", "resimulation"), default=None,
                   help="reference game for sampled Shapley (default: masking)")
    p.add_argument("--no-ablations", action="store_true", help="skip the path / f / baseline ablations")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--out", type=Path, default=None, help="run directory (default runs/<scenario>-seed<S>)")
    llm_options.add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from aumann import scenarios
    from aumann.cli.llm_usage import UsageColumn, dry_run, record_usage
    from aumann.manifest import redact_command, write_manifest
    from aumann.scenarios.report import headline_markdown, write_outputs
    from aumann.scenarios.study import config_digest, run_study

    console = Console(stderr=True)
    llm_options.check_arguments(args)
    sc = scenarios.get(args.scenario)
    study: dict[str, Any] = {}
    if args.permutations is not None:
        study["permutations"] = args.permutations
    if args.reference_game is not None:
        study["reference_game"] = args.reference_game
    if args.no_ablations:
        study["ablations"] = False
    config = sc.load_config(args.config, runs=args.runs, seed=args.seed, study=study or None)
    out = args.out or Path("runs") / f"{sc.name}-seed{config.seed}"
    backend, label = llm_options.build_backend(args, out, sc)
    executor = llm_options.executor_from(args)
    command = redact_command("aumann run " + " ".join(sys.argv[2:] if sys.argv[1:2] == ["run"] else [args.scenario]))
    if args.dry_run:
        return dry_run(sc, config, out, backend, label, executor, args, console)
    done = sorted((out / "runs").glob("run-*.json")) if (out / "runs").is_dir() else []
    if done:
        console.print(f"[bold]resuming[/bold] in {out}: {len(done)} finished run file(s) found; runs with the same "
                      f"config (digest {config_digest(sc, config, label)}) are read back, not recomputed")
    stages = ("simulate", "attribute (all steps)", "sampled Shapley (reference)", "deletion forks",
              "ablations", "done")
    seeds = {"root": config.seed, "runs": config.runs, "spawn": "SeedSequence(root).spawn(runs)"}
    t0 = time.perf_counter()
    with record_usage(out, backend, write_manifest=lambda extra: write_manifest(
            out, command, config.model_dump(mode="json"), seeds=seeds, extra=extra)) as account:
        columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
        if backend is not None:
            columns.append(UsageColumn(backend))
        with Progress(*columns, console=console, transient=False) as bar:
            task = bar.add_task(f"{sc.name}: {config.runs} run(s)", total=config.runs * len(stages))

            def progress(r: int, msg: str) -> None:
                if msg in ("resumed", "done (worker)"):
                    bar.advance(task, len(stages))
                else:
                    bar.advance(task, 1)
                bar.update(task, description=f"{sc.name} run {r + 1}/{config.runs}: {msg}")

            try:
                result = run_study(sc, config, out_dir=out, backend=backend, backend_label=label,
                                   progress=progress, executor=executor)
            finally:
                if executor is not None:
                    executor.close()
        usage = account.finish(result)
    seconds = time.perf_counter() - t0
    files = write_outputs(result, out, command=command, seconds=seconds, description=sc.description,
                          baseline=sc.baseline_description, plots=not args.no_plots, llm_usage=usage)
    extra = {"seconds": seconds, "resumed_runs": result.resumed, "computed_runs": result.computed,
             "backend": label.split("@")[0], "scenario": sc.name, **usage}
    write_manifest(out, command, config.model_dump(mode="json"), seeds=seeds, extra=extra)
    console.print(headline_markdown(files["tables"]["faithfulness"]))
    console.print(f"{sc.name}: {result.computed} run(s) computed, {result.resumed} resumed, {seconds:.1f} s; "
                  f"results in {out} (report.md, faithfulness.csv)")
    return 0


__all__ = ["register", "run"]
