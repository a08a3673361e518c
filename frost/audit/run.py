"""The audit from start to report: plan the runs, train what is not on disk, write the report.

Per workload: (1) tune: every optimizer's grid on the tuning seed 0; (2) rerun each optimizer's
best trial on fresh seeds 1..N; tuned AdamW also at 1/2, 2 and 4 times the budget (the curve the
speedups are read from) and the paper baseline on the same seeds. Runs are trained N at a time
(vmapped; see engine.py), so the grid and the reruns of an optimizer share one compiled program.

Resumable: each run is `OUT/runs/<id>.json` as soon as its batch ends, the id naming the
workload, optimizer, budget, seed and hyper-parameters. A restarted audit trains only batches
with a run missing; the numbers are the same (a batch is deterministic on CPU), and so is the
report.

Many devices, many hosts: `--mesh runs=N` splits each batch over N devices (engine.runs_mesh);
with `--coordinator/--num-processes/--process-id` (JAX's multi-process runtime, as `frost
train`), process i trains the batches numbered i mod P into the shared --out, every process
waits for the others' run files after each step of the plan (a collective, so a process that
dies stops the rest), and process 0 writes the report. A restarted process trains only its
batches with a run missing.
"""

import dataclasses
import hashlib
import json
import math
import pathlib
import random
import re
import shutil
import time

import jax
from tqdm import tqdm

from frost import atomic, parallel
from frost.audit import engine, protocol, report, workloads
from frost.config import FrostError, UsageError, flag
from frost.optim.registry import resolve
from frost.train.job import claim

# AdamW's budgets for the speedup, in units of the budget
BUDGETS = (0.5, 1, 2, 4)
QUICK_BUDGETS = (0.5, 1, 2)
MIN_SEEDS = 3  # --seeds auto's first round and runs per batch
CHINCHILLA = 20  # training tokens per parameter (Hoffmann et al. 2022): --sizes' default
# --reproduce: the relative difference in final loss allowed on other versions or devices
TOLERANCE = 1e-3


def run_id(workload, data, name, run: engine.Run) -> str:
    """The run's file name: readable parts, then a hash of everything that determines its
    numbers: the hyper-parameters, the data's content, the protocol's version and, for a user's
    optimizer, its module's source. A run file of other data or code is never read."""
    key = {
        "hyperparams": run.hyperparams,
        "data": data.fingerprint,
        "protocol": protocol.VERSION,
        "source": resolve(name).digest,
    }
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    return f"{workload}-{re.sub(r'[^A-Za-z0-9.-]+', '-', name)}-{run.steps}-s{run.seed}-{digest}"


def command(cfg) -> str:
    """The command line that makes `cfg` (options at their defaults left out)."""
    parts = ["frost audit"]
    for f in dataclasses.fields(cfg):
        value, option = getattr(cfg, f.name), flag(f.name)
        if value != f.default:
            if isinstance(value, tuple):  # a repeatable option: --claim A --claim B
                parts += [f"{option} {v}" for v in value]
            else:
                parts.append(option if value is True else f"{option} {value}")
    return " ".join(parts)


class Audit:
    def __init__(self, cfg, check: set | None = None, records: dict | None = None):
        self.cfg, self.out = cfg, pathlib.Path(cfg.out)
        self.check = check  # run keys to retrain and compare (--reproduce); None: train the missing
        self.records = records  # {run key: its record in OUT's results.json} (--reproduce)
        self.checked = {}  # {run key: its result retrained}
        self.mesh = engine.runs_mesh(cfg.mesh)
        self.batch = 0  # batches planned so far: process i of P trains those numbered i mod P
        # runs per batch; the seeds rerun now (--seeds auto: 3 more a round; --plan: its most)
        self.k = MIN_SEEDS if cfg.seeds == "auto" else cfg.seeds
        self.seeds = cfg.max_seeds if cfg.seeds == "auto" and cfg.plan else self.k
        # AdamW's budgets, in units of the tuning budget
        self.budgets = QUICK_BUDGETS if cfg.quick else BUDGETS
        self.bar = None  # the progress bar over runs
        self.work = 0.0  # the plan's work (steps x cost)
        self.done = 0.0  # work so far, from disk or trained
        self.trained = 0.0  # work trained by this process
        self.start = time.perf_counter()

    def steps(self, wl, data) -> int:
        """A tuning run's steps: --budget; for a GPT, from --tokens-per-param (default with
        --sizes: CHINCHILLA); else the workload's, a third of them with --quick."""
        ratio = self.cfg.tokens_per_param or (CHINCHILLA if self.cfg.sizes else None)
        if self.cfg.budget or wl.kind != "gpt" or ratio is None:
            return self.cfg.budget or (round(wl.steps / 60) * 20 if self.cfg.quick else wl.steps)
        chunks = ratio * _params(wl, data) / (wl.batch * workloads.SEQ_LEN * engine.CHUNK)
        return max(round(chunks), 2) * engine.CHUNK

    def trials(self, wl, name) -> list[dict]:
        return protocol.grid(name, resolve(name).make, wl.lr, self.cfg.quick)

    def path(self, wl, data, name, run) -> pathlib.Path:
        return self.out / "runs" / f"{run_id(wl.name, data, name, run)}.json"

    def train(self, wl, data, name, runs, cost) -> list[dict]:
        """The results of `runs` (one optimizer): from disk, or trained N at a time and saved."""
        n, head = self.k, {"workload": wl.name, "optimizer": name}
        for group in engine.groups(wl, data, name, runs):
            for i in range(0, len(group.runs), n):
                batch = group.runs[i : i + n]
                # a full batch: one program per optimizer
                pad = n - len(batch) if len(group.runs) > n else 0
                work = sum(r.steps for r in batch) * cost
                paths = [self.path(wl, data, name, r) for r in batch]
                # each run's identity: workload, optimizer, hyperparams, seed, steps
                heads = [{**head, **r._asdict()} for r in batch]
                keys = [report.run_key(h) for h in heads]
                # --reproduce: the sample's runs in this batch, once (auto's rounds repeat it)
                wanted = (
                    set(keys) & self.check - set(self.checked) if self.check is not None else None
                )
                mine = self.batch % jax.process_count() == jax.process_index()
                self.batch += 1
                if wanted or (wanted is None and mine and not all(p.exists() for p in paths)):
                    padded = engine.Group(batch + batch[-1:] * pad, group.built)
                    results = engine.run_group(wl, data, name, padded, mesh=self.mesh)
                    for h, path, key, result in zip(heads, paths, keys, results):
                        if wanted is not None:  # --reproduce: compared, never written
                            self.checked[key] = result
                        elif not path.exists():  # a run already on disk keeps its record
                            atomic.write(path, json.dumps({**h, **result}))
                    self.trained += work
                self.tick(len(batch), work)
        parallel.on_first(lambda: None)  # every process's share on disk (a barrier)
        if self.check is None:
            return [json.loads(self.path(wl, data, name, r).read_text()) for r in runs]
        keys = [report.run_key({**head, **r._asdict()}) for r in runs]  # --reproduce: the records
        if missing := [k for k in keys if k not in self.records]:
            raise UsageError(f"--reproduce {self.out}: its results.json lacks run {missing[0]}")
        return [self.records[k] for k in keys]

    def tick(self, runs, work):
        """Advance the bar; the time left is the work left at the rate of the work trained so
        far."""
        self.done += work
        if self.trained:
            left = (time.perf_counter() - self.start) / self.trained * max(self.work - self.done, 0)
            self.bar.set_postfix_str(
                f"about {left / 60:.0f} min left" if left >= 60 else f"{left:.0f} s left"
            )
        self.bar.update(runs)

    def workload(self, wl, data, names):
        """Tune, rerun and measure one workload; returns its runs by role."""
        steps, seeds, cost = self.steps(wl, data), range(1, self.seeds + 1), _cost(wl, data)

        # each of `hyperparams` on each of `seeds`
        def train(name, hyperparams, seeds, budget=steps):
            return self.train(
                wl, data, name, [engine.Run(h, s, budget) for h in hyperparams for s in seeds], cost
            )

        trials = {n: self.trials(wl, n) for n in names}
        tuning = {n: train(n, trials[n], [0]) for n in names}
        best = {n: protocol.best_trial(runs) for n, runs in tuning.items()}
        finals = {n: train(n, [b["hyperparams"]], seeds) for n, b in best.items() if b is not None}
        budgets = []
        if best["adamw"]:
            budgets = [round(f * steps / engine.CHUNK) * engine.CHUNK for f in self.budgets]
        # tuned AdamW at each budget
        curve = {
            b: finals["adamw"]
            if b == steps
            else train("adamw", [best["adamw"]["hyperparams"]], seeds, b)
            for b in budgets
        }
        baseline = train("adamw", [protocol.BASELINE[wl.kind]], seeds)
        return {
            "params": _params(wl, data),
            "steps": steps,
            "trials": trials,
            "tuning": tuning,
            "best": best,
            "finals": finals,
            "curve": curve,
            "baseline": baseline,
        }

    def more(self, results) -> int:
        """--seeds auto: the seeds of the next round, 0 when none is due. One is due while a
        claim (without --claim, a speedup against 1) is inconclusive and --max-seeds is not
        reached: as many seeds as its power estimate asks for, in whole batches."""
        if self.cfg.seeds != "auto" or self.seeds >= self.cfg.max_seeds:
            return 0
        claims = self.cfg.claims or {n: 1.0 for n in self.cfg.names if n != "adamw"}
        want = []  # the undecided claims' power estimates
        for wl, res in results.values():
            rows = report.summarise({**res, "kind": wl.kind})
            for n, claimed in claims.items():
                s = rows.get(n, {}).get("interval")
                if s and protocol.verdict(s, claimed) == "inconclusive":
                    want.append(protocol.seeds_to_decide(s, claimed) or self.cfg.max_seeds)
        if not want:
            return 0
        more = max(math.ceil((max(want) - self.seeds) / self.k), 1) * self.k  # whole batches
        return min(self.seeds + more, self.cfg.max_seeds)

    def plan(self, variants, names) -> tuple[int, float]:
        """(runs, work) the audit will take, for the progress bar and its estimate of the time
        left."""
        runs = work = 0
        # the grids, then reruns: finals, AdamW's other budgets, the baseline
        for wl, data in variants:
            trials = sum(len(self.trials(wl, n)) for n in names)
            runs += trials + self.seeds * (len(names) + len(self.budgets))
            budget_units = trials + self.seeds * (len(names) + sum(self.budgets))
            work += _cost(wl, data) * self.steps(wl, data) * budget_units
        return runs, work


def _params(wl, data) -> int:
    model = jax.eval_shape(lambda k: wl.model(data, k), jax.random.key(0))
    return sum(x.size for x in jax.tree.leaves(model))


def _cost(wl, data) -> int:
    """Work per training step, for the time estimate: examples (tokens) per batch x parameters
    (a sixth of its FLOPs, Kaplan et al. 2020)."""
    return wl.batch * (workloads.SEQ_LEN if wl.kind == "gpt" else 1) * _params(wl, data)


def audit(cfg, progress: bool = True, check: set | None = None, records=None):
    """Run (or resume) the audit `cfg` describes; returns the path of report.md. With `check`
    (run keys of the finished audit in cfg.out, whose results.json `records` holds), retrain the
    batches holding them instead, write nothing, and return the Audit: `checked` holds their
    new results."""
    a = Audit(cfg, check, records)
    kinds = ("gpt", "image") if cfg.workload == "all" else (cfg.workload,)
    fresh = not a.out.exists()
    try:
        data = {k: workloads.load(k, cfg.data, workloads.CACHE, progress) for k in kinds}
        # the audit's identity: its options, with the data's content in place of its path
        a.prints = ",".join(f"{k}:{d.fingerprint}" for k, d in data.items())
        variants = [  # each kind's ladder, smallest first; its smallest alone with --quick
            (wl, data[kind])
            for kind in kinds
            for wl in workloads.ladder(kind, cfg.sizes)[: 1 if cfg.quick else None]
        ]
        if check is None and not cfg.plan:
            resume = (a.out / "config.json").exists()
            claim(a.out, cfg, resume, "--out", data=a.prints, reproduce=None, sample=None)
            (a.out / "runs").mkdir(exist_ok=True)
        for wl, d in variants:  # every optimizer traced once before any run trains
            for name in cfg.names:
                engine.probe(wl, d, name, a.trials(wl, name)[0])
    except UsageError:  # bad --data or --optimizer: leave no folder behind
        if fresh:
            shutil.rmtree(a.out, ignore_errors=True)
        raise
    if cfg.plan:
        return show_plan(a, variants)
    with tqdm(unit="run", desc="audit", disable=not progress, dynamic_ncols=True) as a.bar:
        while a.seeds:  # one round; --seeds auto: until its claims are decided
            total, a.work = a.plan(variants, cfg.names)
            a.bar.reset(total)
            a.done = 0.0
            results = {wl.name: (wl, a.workload(wl, d, cfg.names)) for wl, d in variants}
            a.seeds = a.more(results)
    if check is not None:
        return a
    if jax.process_count() > 1:
        print(f"process {jax.process_index()}: trained {a.trained / a.work:.0%} of the work")
    write = lambda: str(report.write(a.out, results, cfg, command(cfg), a.prints, a.k))  # noqa: E731
    return pathlib.Path(parallel.on_first(write))  # process 0 writes the report


def reproduce(cfg, progress: bool = True) -> None:
    """`frost audit --reproduce OUT`: retrain a seed-fixed random sample of `cfg.sample` of the
    runs in OUT's results.json, each in the batch it was trained in (so on the same versions and
    device kind the numbers are the same bit for bit), and compare them with their records.
    Prints the provenance fields that differ, then a line per run; raises FrostError (exit 1)
    when a run differs."""
    out = pathlib.Path(cfg.reproduce)
    try:
        saved = json.loads((out / "results.json").read_text())
        options = json.loads((out / "config.json").read_text())
        made, records = saved["provenance"], {report.run_key(r): r for r in saved["runs"]}
    except (OSError, KeyError, json.JSONDecodeError) as e:
        raise UsageError(f"--reproduce {out}: not a finished audit ({e!r})") from None
    sample = set(random.Random(0).sample(sorted(records), min(cfg.sample, len(records))))
    options.update(data=cfg.data, out=str(out), reproduce=None, sample=cfg.sample)
    lists = {k: tuple(v) for k, v in options.items() if isinstance(v, list)}  # JSON: tuples lists
    a = audit(type(cfg)(**{**options, **lists}), progress, sample, records)
    now = report.provenance(a.prints)
    changed = [k for k in now if made.get(k) != now[k]]
    exact = not set(changed) & {"jax", "jaxlib", "xla_flags", "devices", "host"}
    for k in changed:
        print(f"provenance {k}: {made.get(k)!r}, now {now[k]!r}")
    bad = 0
    for i in sorted(sample):
        was, new = records[i], a.checked.get(i)
        if new is None:  # its protocol or optimizer code changed: it is not in the plan
            verdict = "DIFFERS: not in the audit's plan on this code"
        elif (new["diverged"], new["final_loss"]) == (was["diverged"], was["final_loss"]):
            verdict = "matches bit for bit"
        elif (
            not exact
            and None not in (new["final_loss"], was["final_loss"])
            and math.isclose(new["final_loss"], was["final_loss"], rel_tol=TOLERANCE)
        ):
            verdict = f"matches within {TOLERANCE:g} (relative; other versions, devices or CPU)"
        else:
            verdict = f"DIFFERS: final loss {was['final_loss']!r}, now {new['final_loss']!r}"
        bad += verdict.startswith("DIFFERS")
        print("{} {} {} seed {}, {} steps: ".format(*(was[k] for k in report.KEY)) + verdict)
    if bad:
        raise FrostError(f"--reproduce {out}: {bad} of {len(sample)} runs do not reproduce")
    print(f"--reproduce {out}: all {len(sample)} runs reproduce")


def show_plan(a: Audit, variants) -> None:
    """`--plan`: per workload, its runs, steps and FLOPs (6 x parameters x tokens), the memory a
    run takes and how many fit together in half a device's memory, and the time on these devices:
    one chunk of K AdamW runs of the kind's built-in smallest workload (gpt-s, image-s) is timed,
    and scaled by FLOPs at AdamW's cost per step (an upper bound where larger models use a device
    better). Refuses a workload one run of which does not fit, before any training, unless a
    mesh can split it (FSDP)."""
    cfg, rate, seconds, flops = a.cfg, {}, 0.0, 0.0
    devices = (a.mesh.size if a.mesh else 1) * jax.process_count()
    print("| workload | parameters | steps | runs | FLOPs | memory/run | runs/device | time |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for wl, d in variants:
        runs, work = a.plan([(wl, d)], cfg.names)
        if wl.kind not in rate:  # seconds per unit of work (a step's examples x parameters)
            probe = workloads.WORKLOADS[f"{wl.kind}-s"]
            trial = [engine.Run(a.trials(probe, "adamw")[0], s, engine.CHUNK) for s in range(a.k)]
            (group,) = engine.groups(probe, d, "adamw", trial)
            timed = engine.run_group(probe, d, "adamw", group)[0]["seconds"]
            rate[wl.kind] = timed / (engine.CHUNK * _cost(probe, d))
        need = engine.footprint(wl, d, "adamw", a.trials(wl, "adamw")[0], a.k)
        fit = int(0.5 * engine.memory() // need)  # none: one at a time, split over the mesh
        if not fit and (a.mesh is None or a.mesh.size == 1):
            engine.refuse(wl, need)
        took = work * rate[wl.kind] / devices
        seconds, flops = seconds + took, flops + 6 * work
        print(
            f"| {wl.name} | {_params(wl, d) / 1e6:.3g}M | {a.steps(wl, d)} | {runs} | "
            f"{6 * work:.3g} | {need / 2**20:.0f} MiB | {fit or '1 (FSDP)'} | {took / 3600:.3g} h |"
        )
    kind = jax.devices()[0].device_kind
    print(f"total: {flops:.3g} FLOPs, about {seconds / 3600:.3g} h on {devices} x {kind}")
