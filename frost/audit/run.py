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
    for field in dataclasses.fields(cfg):
        value = getattr(cfg, field.name)
        option = flag(field.name)
        if value != field.default:
            if isinstance(value, tuple):  # a repeatable option: --claim A --claim B
                parts += [f"{option} {each}" for each in value]
            else:
                parts.append(option if value is True else f"{option} {value}")
    return " ".join(parts)


class Audit:
    def __init__(self, cfg, check: set | None = None, records: dict | None = None):
        self.cfg = cfg
        self.out = pathlib.Path(cfg.out)
        self.check = check  # run keys to retrain and compare (--reproduce); None: train the missing
        self.records = records  # {run key: its record in OUT's results.json} (--reproduce)
        self.checked = {}  # {run key: its result retrained}
        self.mesh = engine.runs_mesh(cfg.mesh)
        self.batch = 0  # batches planned so far: process i of P trains those numbered i mod P
        # runs per batch; the seeds rerun now (--seeds auto: 3 more a round; --plan: its most)
        self.per_batch = MIN_SEEDS if cfg.seeds == "auto" else cfg.seeds
        self.seeds = cfg.max_seeds if cfg.seeds == "auto" and cfg.plan else self.per_batch
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
        per_batch = self.per_batch
        head = {"workload": wl.name, "optimizer": name}
        for group in engine.groups(wl, data, name, runs):
            for i in range(0, len(group.runs), per_batch):
                batch = group.runs[i : i + per_batch]
                # a full batch: one program per optimizer
                pad = per_batch - len(batch) if len(group.runs) > per_batch else 0
                work = sum(run.steps for run in batch) * cost
                paths = [self.path(wl, data, name, run) for run in batch]
                # each run's identity: workload, optimizer, hyperparams, seed, steps
                heads = [{**head, **run._asdict()} for run in batch]
                keys = [report.run_key(identity) for identity in heads]
                # --reproduce: the sample's runs in this batch, once (auto's rounds repeat it)
                wanted = (
                    set(keys) & self.check - set(self.checked) if self.check is not None else None
                )
                mine = self.batch % jax.process_count() == jax.process_index()
                self.batch += 1
                if wanted or (wanted is None and mine and not all(p.exists() for p in paths)):
                    padded = engine.Group(batch + batch[-1:] * pad, group.built)
                    results = engine.run_group(wl, data, name, padded, mesh=self.mesh)
                    for identity, path, key, result in zip(heads, paths, keys, results):
                        if wanted is not None:  # --reproduce: compared, never written
                            self.checked[key] = result
                        elif not path.exists():  # a run already on disk keeps its record
                            atomic.write(path, json.dumps({**identity, **result}))
                    self.trained += work
                self.tick(len(batch), work)
        parallel.on_first(lambda: None)  # every process's share on disk (a barrier)
        if self.check is None:
            return [json.loads(self.path(wl, data, name, run).read_text()) for run in runs]
        # --reproduce: the records
        keys = [report.run_key({**head, **run._asdict()}) for run in runs]
        if missing := [key for key in keys if key not in self.records]:
            raise UsageError(f"--reproduce {self.out}: its results.json lacks run {missing[0]}")
        return [self.records[key] for key in keys]

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
        steps = self.steps(wl, data)
        seeds = range(1, self.seeds + 1)
        cost = _cost(wl, data)

        # each of `hyperparams` on each of `seeds`
        def train(name, hyperparams, seeds, budget=steps):
            runs = [engine.Run(hp, seed, budget) for hp in hyperparams for seed in seeds]
            return self.train(wl, data, name, runs, cost)

        trials = {name: self.trials(wl, name) for name in names}
        tuning = {name: train(name, trials[name], [0]) for name in names}
        best = {name: protocol.best_trial(runs) for name, runs in tuning.items()}
        finals = {
            name: train(name, [trial["hyperparams"]], seeds)
            for name, trial in best.items()
            if trial is not None
        }
        budgets = []
        if best["adamw"]:
            budgets = [
                round(fraction * steps / engine.CHUNK) * engine.CHUNK for fraction in self.budgets
            ]
        # tuned AdamW at each budget (its reruns at the tuning budget)
        curve = {}
        for budget in budgets:
            if budget == steps:
                curve[budget] = finals["adamw"]
            else:
                curve[budget] = train("adamw", [best["adamw"]["hyperparams"]], seeds, budget)
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
        claims = self.cfg.claims or {name: 1.0 for name in self.cfg.names if name != "adamw"}
        want = []  # the undecided claims' power estimates
        for wl, res in results.values():
            rows = report.summarise({**res, "kind": wl.kind})
            for name, claimed in claims.items():
                interval = rows.get(name, {}).get("interval")
                if interval and protocol.verdict(interval, claimed) == "inconclusive":
                    want.append(protocol.seeds_to_decide(interval, claimed) or self.cfg.max_seeds)
        if not want:
            return 0
        batches = max(math.ceil((max(want) - self.seeds) / self.per_batch), 1)
        more = batches * self.per_batch  # whole batches
        return min(self.seeds + more, self.cfg.max_seeds)

    def plan(self, variants, names) -> tuple[int, float]:
        """(runs, work) the audit will take, for the progress bar and its estimate of the time
        left."""
        runs = 0
        work = 0
        # the grids, then reruns: finals, AdamW's other budgets, the baseline
        for wl, data in variants:
            trials = sum(len(self.trials(wl, name)) for name in names)
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
    job = Audit(cfg, check, records)
    kinds = ("gpt", "image") if cfg.workload == "all" else (cfg.workload,)
    fresh = not job.out.exists()
    try:
        datasets = {
            kind: workloads.load(kind, cfg.data, workloads.CACHE, progress) for kind in kinds
        }
        # the audit's identity: its options, with the data's content in place of its path
        job.prints = ",".join(f"{kind}:{data.fingerprint}" for kind, data in datasets.items())
        variants = [  # each kind's ladder, smallest first; its smallest alone with --quick
            (wl, datasets[kind])
            for kind in kinds
            for wl in workloads.ladder(kind, cfg.sizes)[: 1 if cfg.quick else None]
        ]
        if check is None and not cfg.plan:
            resume = (job.out / "config.json").exists()
            claim(job.out, cfg, resume, "--out", data=job.prints, reproduce=None, sample=None)
            (job.out / "runs").mkdir(exist_ok=True)
        for wl, data in variants:  # every optimizer traced once before any run trains
            for name in cfg.names:
                engine.probe(wl, data, name, job.trials(wl, name)[0])
    except UsageError:  # bad --data or --optimizer: leave no folder behind
        if fresh:
            shutil.rmtree(job.out, ignore_errors=True)
        raise
    if cfg.plan:
        return show_plan(job, variants)
    with tqdm(unit="run", desc="audit", disable=not progress, dynamic_ncols=True) as job.bar:
        while job.seeds:  # one round; --seeds auto: until its claims are decided
            total, job.work = job.plan(variants, cfg.names)
            job.bar.reset(total)
            job.done = 0.0
            results = {wl.name: (wl, job.workload(wl, data, cfg.names)) for wl, data in variants}
            job.seeds = job.more(results)
    if check is not None:
        return job
    if jax.process_count() > 1:
        print(f"process {jax.process_index()}: trained {job.trained / job.work:.0%} of the work")

    def write():  # process 0 writes the report
        return str(report.write(job.out, results, cfg, command(cfg), job.prints, job.per_batch))

    return pathlib.Path(parallel.on_first(write))


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
        made = saved["provenance"]
        records = {report.run_key(record): record for record in saved["runs"]}
    except (OSError, KeyError, json.JSONDecodeError) as e:
        raise UsageError(f"--reproduce {out}: not a finished audit ({e!r})") from None
    sample = set(random.Random(0).sample(sorted(records), min(cfg.sample, len(records))))
    options.update(data=cfg.data, out=str(out), reproduce=None, sample=cfg.sample)
    lists = {k: tuple(v) for k, v in options.items() if isinstance(v, list)}  # JSON: tuples lists
    job = audit(type(cfg)(**{**options, **lists}), progress, sample, records)
    now = report.provenance(job.prints)
    changed = [k for k in now if made.get(k) != now[k]]
    exact = not set(changed) & {"jax", "jaxlib", "xla_flags", "devices", "host"}
    for k in changed:
        print(f"provenance {k}: {made.get(k)!r}, now {now[k]!r}")
    bad = 0
    for key in sorted(sample):
        was, new = records[key], job.checked.get(key)
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


def show_plan(job: Audit, variants) -> None:
    """`--plan`: per workload, its runs, steps and FLOPs (6 x parameters x tokens), the memory a
    run takes and how many fit together in half a device's memory, and the time on these devices:
    one chunk of K AdamW runs of the kind's built-in smallest workload (gpt-s, image-s) is timed,
    and scaled by FLOPs at AdamW's cost per step (an upper bound where larger models use a device
    better). Refuses a workload one run of which does not fit, before any training, unless a
    mesh can split it (FSDP)."""
    cfg = job.cfg
    rate = {}  # {kind: seconds per unit of work}
    seconds = 0.0
    flops = 0.0
    devices = (job.mesh.size if job.mesh else 1) * jax.process_count()
    print("| workload | parameters | steps | runs | FLOPs | memory/run | runs/device | time |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for wl, data in variants:
        runs, work = job.plan([(wl, data)], cfg.names)
        if wl.kind not in rate:  # seconds per unit of work (a step's examples x parameters)
            probe = workloads.WORKLOADS[f"{wl.kind}-s"]
            trial = [
                engine.Run(job.trials(probe, "adamw")[0], seed, engine.CHUNK)
                for seed in range(job.per_batch)
            ]
            (group,) = engine.groups(probe, data, "adamw", trial)
            timed = engine.run_group(probe, data, "adamw", group)[0]["seconds"]
            rate[wl.kind] = timed / (engine.CHUNK * _cost(probe, data))
        need = engine.footprint(wl, data, "adamw", job.trials(wl, "adamw")[0], job.per_batch)
        fit = int(0.5 * engine.memory() // need)  # none: one at a time, split over the mesh
        if not fit and (job.mesh is None or job.mesh.size == 1):
            engine.refuse(wl, need)
        took = work * rate[wl.kind] / devices
        seconds += took
        flops += 6 * work
        print(
            f"| {wl.name} | {_params(wl, data) / 1e6:.3g}M | {job.steps(wl, data)} | {runs} | "
            f"{6 * work:.3g} | {need / 2**20:.0f} MiB | {fit or '1 (FSDP)'} | {took / 3600:.3g} h |"
        )
    kind = jax.devices()[0].device_kind
    print(f"total: {flops:.3g} FLOPs, about {seconds / 3600:.3g} h on {devices} x {kind}")
