"""``aumann run SCENARIO``: simulate, attribute, run the faithfulness study and the ablations, report.

Examples::

    aumann run midscale-social                        # 10 runs, 1000 permutations, offline policy
    aumann run social-llm --runs 3 --seed 7 --out runs/social
    aumann run docs/examples/wolf_sheep.py:scenario --runs 2        # a Scenario in a file
    aumann run my_package.scenarios:scenario          # a Scenario (or a factory returning one) in a module
    aumann run --list                                 # built-in, registered and installed scenarios
    aumann run social-llm --backend openai --model gpt-4o-mini --base-url http://127.0.0.1:8000/v1
    aumann run midscale-social --agents 50 --runs 2 --permutations 200 --resimulation-reference   # ~1 min
    aumann run social-llm --backend openai --model M --base-url URL1 --base-url URL2 --concurrency 64 --rpm 3000
    aumann run econagent --backend openai --model gpt-4o-mini --dry-run      # requests, tokens, cost, time
    aumann run social-llm --workers 2                                         # independent runs in parallel
    aumann run megascale-social --agents 1000000 --backend openai --model M --cache c.sqlite --cache-mode record
    aumann run megascale-social --agents 1000000 --backend openai --model M --cache c.sqlite --cache-mode replay

Installed packages add names through the entry-point group ``aumann.scenarios``.

A failing optional stage (smoothing gaps, an ablation, a scenario's analysis) is recorded — in the run
record, the manifest and the report: "ablation zero-baseline skipped: IndicatorError: …" — and the
study goes on; ``--strict`` stops at the first failure instead.

The run directory (layout: :mod:`aumann.studies.rundir`) holds ``faithfulness.csv`` (+ ``.md``; one row per
registered row: rows include ``action_aumann_shapley`` for scenarios with a step map, ``llm_judge`` and,
with ``--resimulation-reference``, ``sampled_shapley_resimulation``), ``faithfulness_extended.csv``,
``action_attribution.csv``, the ablation tables, ``runs/run-NNN.{json,npz}`` (one per finished run,
written atomically), ``panels/``, ``attributions/``, PNG plots, ``report.html`` (one self-contained page:
who drove it, when, how sure, cost), ``report.md`` (its plain-text twin) and ``manifest.json``.
Re-running the same command with the same ``--out`` resumes: finished runs are read back, not recomputed.
Another config (another size, seed or setting) into the same ``--out`` computes its runs afresh and removes the
runs the earlier config left there (records, arrays, panels, attributions, timings; each checked to be the file
aumann wrote, a file of yours is refused and kept), so the folder never holds runs of two configs: give another
``--out`` to keep them.

The OpenAI-compatible backend reads ``OPENAI_API_KEY`` (or ``AUMANN_LLM_API_KEY``) and, unless
``--base-url``/``--model`` are given, ``AUMANN_LLM_BASE_URL``/``OPENAI_BASE_URL`` and
``AUMANN_LLM_MODEL`` from the environment — here, at the edge, and nowhere else. Responses are cached
in ``<out>/llm-cache.sqlite``; the key never reaches logs, caches or the manifest. What the LLM
cost (calls, tokens, cache hits, latency, dollars) is kept in ``<out>/llm-usage.json`` across
resumed invocations and reported in ``manifest.json`` (``llm_usage``), ``report.md`` and live in
the progress bar; ``--max-calls`` / ``--max-cost`` stop a run cleanly with the spend recorded.
``--cache PATH`` and ``--cache-mode record|replay|off`` choose the response cache; ``--cache-mode replay``
serves a recorded cache only (a miss is an error, nothing is sent), so a recorded run re-runs
bit-identically offline.
"""

from __future__ import annotations

import argparse
import re
import time
import warnings
from pathlib import Path
from typing import Any

from aumann.cli import executor_options, llm_options
from aumann.cli.args import integer, number, path, seed
from aumann.cli.terminal import terminal_text
from aumann.cli.unused_flags import unused_run_flags
from aumann.errors import ConfigError, ModelFinishedWarning

#: the cap of study.permutations (aumann.scenarios.base.StudyConfig's ``le``; the parser does not import the
#: scenarios, so tests/cli/test_bad_inputs_cli.py checks that the two agree): the flag's message names this cap,
#: not the int64 bound every integer flag has
MAX_PERMUTATIONS = 10_000_000
#: the bounds of a scenario's sizes (aumann.scenarios.base's _MIN_SIZES and MAX_SIZES, which every scenario config
#: keeps; checked to agree by the same test): the flags' messages name these, not 1 and the int64 bound
SIZE_BOUNDS = {"runs": (1, 100_000), "agents": (2, 10_000_000), "steps": (2, 1_000_000)}


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("run", help="run a scenario, attribute it and measure deletion faithfulness",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenario", nargs="?", default=None,
                   help="a scenario name (social-llm, midscale-social, econagent, or an installed one), or where one "
                        "lives: package.module:attribute or path/to/file.py:attribute")
    p.add_argument("--list", action="store_true", help="list the scenarios that can be run by name, and exit")
    p.add_argument("--runs", type=integer(*SIZE_BOUNDS["runs"]), default=None,
                   help="independent runs (default: the config's)")
    p.add_argument("--seed", type=seed, default=None, help="root seed (default: the config's)")
    p.add_argument("--config", type=path, default=None,
                   help="a TOML file laid over the scenario's packaged defaults (only the keys it sets change; an "
                        "integer key takes a TOML integer, 1000, where 1e3 is a TOML float and refused)")
    p.add_argument("--set", dest="assignments", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config key (repeatable; dotted for tables: --set study.permutations=200, "
                        "--set agents=200); values are TOML literals or plain strings; an integer key takes an "
                        "integer as the integer flags do: decimal digits (1_000 too) or float notation that writes "
                        "one exactly (1e3), not \"1000\", 1.5 or 0x10")
    p.add_argument("--agents", type=integer(*SIZE_BOUNDS["agents"]), default=None,
                   help="number of agents N (shortcut for --set agents=N)")
    p.add_argument("--steps", type=integer(*SIZE_BOUNDS["steps"]), default=None,
                   help="number of steps T (shortcut for --set steps=T)")
    p.add_argument("--step-timeout", type=number(minimum=0.001, maximum=1e6), default=None, metavar="SECONDS",
                   help="stop the run with a typed error when one step of the model takes longer than this "
                        "(= --set step_timeout=SECONDS; default: no limit; see docs/hardening.md)")
    p.add_argument("--backend", choices=llm_options.backend_choices(), default="offline",
                   help=llm_options.backend_help())
    p.add_argument("--permutations", type=integer(minimum=2, maximum=MAX_PERMUTATIONS), default=None,
                   help="sampled-Shapley permutations (= --set study.permutations=P; default: the config's, 1000 in "
                        f"the built-in scenarios but 500 in megascale-social; at most {MAX_PERMUTATIONS:,})")
    p.add_argument("--reference-game", choices=("masking", "resimulation"), default=None,
                   help="reference game for sampled Shapley (default: masking)")
    p.add_argument("--reference-estimator", choices=("sampled_shapley_cv", "sampled_shapley"), default=None,
                   help="the row the others' τ / top-10 Jaccard and the noise ceiling are measured against: "
                        "sampled_shapley_cv (default; the Aumann–Shapley control variate) or sampled_shapley (plain "
                        "sampling) = --set study.reference_estimator=...; the re-simulation game always uses plain (so "
                        "sampled_shapley_cv with it is refused)")
    p.add_argument("--resimulation-reference", action="store_true",
                   help="also run sampled Shapley on the re-simulation game (row sampled_shapley_resimulation; "
                        "permutations·(N−1)+2 forks per run, twice for its noise ceiling) = --set "
                        "study.resimulation_reference=true")
    p.add_argument("--judge", choices=("auto", "heuristic", "llm", "off"), default=None,
                   help="the llm_judge row: auto (the LLM backend when there is one, else the heuristic stand-in), "
                        "heuristic, llm or off (= --set study.judge=...)")
    p.add_argument("--no-ablations", action="store_true", help="skip the path / f / baseline ablations")
    p.add_argument("--strict", action="store_true",
                   help="stop at the first failing stage (default: a failing optional stage — smoothing gaps, an "
                        "ablation, a scenario's analysis — is recorded in the run record, manifest and report, and "
                        "the study goes on) = --set study.strict=true")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots and the report's figures")
    p.add_argument("--static", action="store_true",
                   help="static PNG figures in report.html even when the aumann[report] extra (Bokeh) is installed")
    p.add_argument("--out", type=path, default=None, help="run directory (default runs/<scenario>-seed<S>)")
    llm_options.add_arguments(p)
    executor_options.add_arguments(p)
    p.set_defaults(func=run)


def _scenario_llm_usage(result: Any) -> dict[str, Any]:
    """The scenario's own account of its runs' LLM decisions when it keeps one (decisions split into the
    factual runs and the forks; summed over runs, latency quantiles the worst run's), else ``{}``."""
    accounts = [a for a in ((r.get("analysis") or {}).get("llm_usage") for r in result.records) if a]
    if accounts:
        total: dict[str, Any] = {}
        for a in accounts:
            for k, v in a.items():
                if k.startswith("latency"):
                    total[k] = max(total.get(k, 0.0), v)
                elif isinstance(v, int | float):
                    total[k] = total.get(k, 0) + v
        return total
    return {}


def run(args: argparse.Namespace) -> int:
    from aumann.cli.command import command_line, refuse_if_busy

    if args.out is not None and not args.list and not args.dry_run:
        # an --out another live command writes stops now, before the imports below (torch, the scenarios: seconds)
        refuse_if_busy(args.out, "run", fallback=[args.scenario] if args.scenario else [])
    from aumann import scenarios
    from aumann.cli.llm_usage import ProgressLines, UsageColumn, dry_run, record_usage
    from aumann.io import (
        OUTPUTS_COMPLETE,
        ensure_output_dir,
        journal_outputs,
        lock_output_dir,
        recorded_outputs,
        safe_component,
    )
    from aumann.manifest import write_manifest
    from aumann.progress import Bar, StageTimer, rich_console
    from aumann.simulators.executors import describe_executor
    from aumann.simulators.llm.registry import offline_policy_decides
    from aumann.studies.faithfulness import config_digest, run_study, study_stages
    from aumann.studies.finished_warning import finished_prefix
    from aumann.studies.report import check_report_files, headline_markdown, write_outputs
    from aumann.studies.rows import reference_row
    from aumann.studies.rundir import (
        RunDir,
        failure_text,
        model_finished,
        model_finished_text,
        other_config_text,
        zero_delta_v,
        zero_delta_v_text,
    )

    console = rich_console(stderr=True)
    if args.list:
        for name, description in scenarios.describe():
            print(f"{terminal_text(name)}\t{terminal_text(description)}")
        return 0
    if args.scenario is None:
        raise ConfigError("aumann run needs a scenario: a name (see aumann run --list) or "
                          "package.module:attribute / path/to/file.py:attribute")
    llm_options.check_arguments(args)
    sc = scenarios.get(args.scenario)
    study: dict[str, Any] = {}
    if args.permutations is not None:
        study["permutations"] = args.permutations
    if args.reference_game is not None:
        study["reference_game"] = args.reference_game
    if args.reference_estimator is not None:
        study["reference_estimator"] = args.reference_estimator
    if args.no_ablations:
        study["ablations"] = False
    if args.resimulation_reference:
        study["resimulation_reference"] = True
    if args.judge is not None:
        study["judge"] = args.judge
    if args.strict:
        study["strict"] = True
    config = sc.load_config(args.config, runs=args.runs, seed=args.seed, agents=args.agents, steps=args.steps,
                            study=study or None, assignments=[*args.assignments, *llm_options.llm_assignments(args)],
                            step_timeout=args.step_timeout)
    if args.reference_estimator == "sampled_shapley_cv" and config.study.reference_game != "masking":
        # the reference on the re-simulation game is plain sampled Shapley (reference_row): the flag went unread
        raise ConfigError("--reference-estimator sampled_shapley_cv picks the reference on the masking game; on "
                          f"reference_game = {config.study.reference_game!r} the reference is plain sampled Shapley "
                          "(the control-variate row there is a step-map estimate): leave --reference-estimator out, "
                          "or use --reference-game masking")
    sc.check_size(config)  # a panel past this machine's memory: refused now, not after building the model
    out = args.out or Path("runs") / safe_component(f"{sc.name}-seed{config.seed}", "run directory name")
    executor_options.require_extra(args, config)  # the Ray extra missing: said before --out is made
    if not args.dry_run:  # a dry run writes nothing; a real one checks --out before the simulation, not after it
        ensure_output_dir(out, "--out" if args.out else "the run directory")
        # one writer per folder: another command writing there (a run started twice) stops now, not mid-way
        lock_output_dir(out, command=command_line("run", fallback=[args.scenario]))
        check_report_files(out, plots=not args.no_plots)  # a file of your own with an output's name: now, not after
    backend, label = llm_options.build_backend(args, out, sc, config)
    if args.dry_run and offline_policy_decides(backend, label):  # as --backend offline --dry-run is refused
        raise ConfigError(f"--dry-run estimates an LLM run, and --backend {args.backend} builds no LLM backend (its "
                          "factory returned None): the scenario's offline policy decides, and the run would send 0 "
                          "requests; pass --backend openai --model NAME (or --backend local) as for the real run, or "
                          "leave --dry-run out")
    # what nothing in this run reads (LLM request settings where the offline policy decides -- known once the backend
    # is built: a registered factory may return None --, --assumed-latency without --dry-run): said and recorded in
    # the manifest, after the config loaded (a bad --set or file is its error)
    unused = unused_run_flags(args, offline=offline_policy_decides(backend, label))
    executor = executor_options.executor_from(args, config, scenario_spec=args.scenario, out=out)

    # the manifest and both reports show the command, shell-quoted (it runs again by copy and paste): URL
    # credentials, secret-named JSON members and NAME=value words (a key in --ray-runtime-env's env_vars) and every
    # key a backend registered are taken out of each word before the words are quoted
    command = command_line("run", fallback=[args.scenario])
    if args.dry_run:
        return dry_run(sc, config, out, backend, label, executor, args, console)
    found = RunDir(out).finished_records()
    other: list[Any] = []  # the runs of another config here, which the study removes
    if found:  # what is true: runs of this config are read back; records of another config are not, and go
        digest = config_digest(sc, config, label, offline=offline_policy_decides(backend, label))
        same = RunDir(out).same_config_runs(config.runs, digest)
        other = RunDir(out).other_config_runs(digest)  # a file of yours among theirs: refused now, before the work
        where = terminal_text(out, rich=True)
        if same:
            console.print(f"[bold]resuming[/bold] in {where}: {len(same)} of {config.runs} run(s) were finished with "
                          f"this config (digest {digest}); they are read back once their checksums verify, not "
                          "recomputed")
        else:
            console.print(f"[bold]not resuming[/bold]: none of the {len(found)} run record(s) in {where} is a run of "
                          f"this config (digest {digest}: another scenario, seed, size or setting); every run is "
                          "computed afresh")
        if other:
            console.print(f"[bold yellow]removing[/bold yellow]: {terminal_text(other_config_text(other), rich=True)}")
    stages = study_stages(sc, config)
    seeds = {"root": config.seed, "runs": config.runs, "spawn": "SeedSequence(root).spawn(runs)"}
    timer = StageTimer()
    t0 = time.perf_counter()
    def stopped_manifest(extra: dict[str, Any]) -> None:
        # the manifest of a run stopped by its LLM budget replaces the earlier run's: what that one recorded writing
        # goes to the journal first, so its tables, figures and pages stay known as aumann's (and nothing else does)
        # (in one append: each was a line appended and flushed to the disk on its own, the journal's own records
        # too, so every stop appended the whole journal to itself again)
        recorded = recorded_outputs(out, command="aumann run").digests
        journal_outputs(out, ((name, digest) for name, digests in recorded.items() for digest in sorted(digests)))
        write_manifest(out, command, config.model_dump(mode="json", exclude={"execution"}), seeds=seeds,
                       extra={OUTPUTS_COMPLETE: True, **extra, **({"unused_flags": unused} if unused else {})})

    with record_usage(out, backend, write_manifest=stopped_manifest) as account:
        account.forget_runs(s.run for s in other)  # their decisions are not this config's (what they spent stays)
        columns = [UsageColumn(backend)] if backend is not None else []
        name = terminal_text(sc.name)  # a scenario's name from a user registry entry: shown, not obeyed
        lines = ProgressLines(f"{name}: {config.runs} run(s)", backend)
        with Bar(config.runs * len(stages), f"{terminal_text(sc.name, rich=True)}: {config.runs} run(s)",
                 transient=False, columns=columns) as bar, lines:
            done_stages = [0]

            def progress(r: int, msg: str) -> None:
                if msg in ("done", "resumed", "done (worker)"):
                    timer.stop()
                else:
                    timer.start(msg)
                step = len(stages) if msg in ("resumed", "done (worker)") else 1
                bar.advance(step)
                done_stages[0] += step
                bar.describe(terminal_text(f"{sc.name} run {r + 1}/{config.runs}: {msg}", rich=True))
                lines.update(f"run {r + 1}/{config.runs}: {msg}", done_stages[0], config.runs * len(stages))

            try:
                # a model stepped on after running = False: said below, per run, in the command's words (--steps),
                # not by the study's ModelFinishedWarning (only that one: a scenario's own simulate() still says its)
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message=re.escape(finished_prefix(sc.name)),
                                            category=ModelFinishedWarning)
                    # the runs of another config found above: removed without hashing their files a second time
                    result = run_study(sc, config, out_dir=out, backend=backend, backend_label=label,
                                       progress=progress, executor=executor, other_config=other)
            finally:
                execution = describe_executor(executor)
                if executor is not None:
                    executor.close()
        usage = account.finish(result)
    timer.stop()
    for name, secs in result.stage_seconds.items():  # runs computed on workers: their stages' times came back
        timer.add(name, secs)
    seconds = time.perf_counter() - t0
    if result.failed_checks:
        console.print(f"[bold red]resume:[/bold red] {len(result.failed_checks)} finished run(s) failed verification "
                      "and were recomputed: " + terminal_text("; ".join(f"{f['file']}: {f['reason']}"
                                                                         for f in result.failed_checks), rich=True))
    extra: dict[str, Any] = {"backend": label.split("@")[0], "stage_seconds": timer.seconds_in(stages), **usage,
                             "policy": "; ".join(sorted({str((r.get("analysis") or {}).get("policy")
                                                             or r.get("policy") or "offline policy")
                                                         for r in result.records})),
                             "recomputed_after_failed_check": len(result.failed_checks),
                             "execution": execution,
                             "failed_checks": result.failed_checks, **({"unused_flags": unused} if unused else {})}
    scenario_usage = _scenario_llm_usage(result)
    if scenario_usage:  # a scenario that keeps its own account (archetype decisions) reports it
        extra["llm_usage"] = {**extra.get("llm_usage", {}), **scenario_usage}
    if backend is not None and getattr(backend, "cache", None) is not None:
        extra["llm_cache"] = {"path": str(backend.cache.path), "mode": backend.cache.mode}
    reliability = llm_options.reliability(extra.get("llm_usage"), config, result, run_counts=account.saved_runs)
    if reliability is not None:  # with what an abstention does in this scenario, for the reports
        extra["llm_reliability"] = {**reliability, "abstention": sc.abstention_description}
    files = write_outputs(result, out, command=command, seconds=seconds, description=sc.description,
                          baseline=sc.baseline_description, plots=not args.no_plots,
                          config=config.model_dump(mode="json", exclude={"execution"}), seeds=seeds, extra=extra,
                          interactive=False if args.static else None)
    for f in result.stage_failures():
        console.print(f"[bold yellow]run {f['run']}:[/bold yellow] {terminal_text(failure_text(f), rich=True)}")
    console.print(headline_markdown(files["tables"]["faithfulness"], reference=reference_row(config)))
    for d in zero_delta_v(result.records):  # the table above is empty for these runs: say why, and what to change
        console.print(f"[bold yellow]Δv = 0:[/bold yellow] {terminal_text(zero_delta_v_text(d), rich=True)}")
    for d in model_finished(result.records):
        console.print(f"[bold yellow]model finished:[/bold yellow] {terminal_text(model_finished_text(d), rich=True)}")
    if reliability is not None and reliability["unreliable"]:
        console.print(f"[bold red]UNRELIABLE:[/bold red] {reliability['invalid_rate']:.1%} of the LLM decisions "
                      f"({reliability['invalid_decisions']:,} of {reliability['decisions_asked']:,}) had no usable "
                      f"reply "
                      f"(threshold llm.max_invalid_rate = {reliability['max_invalid_rate']:.0%}); see report.md and "
                      f"`aumann llm show {terminal_text(out, rich=True)} --invalid`")
    console.print(f"{terminal_text(sc.name, rich=True)}: {result.computed} run(s) computed, {result.resumed} resumed, "
                  f"{seconds:.1f} s; "
                  f"results in {terminal_text(out, rich=True)} (report.html, report.md, faithfulness.csv)")
    return 0


__all__ = ["register", "run"]
