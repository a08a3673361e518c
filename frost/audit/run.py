"""The audit from start to report: plan the runs, train what is not on disk, write the report.

Per workload: (1) tune: every optimizer's grid on the tuning seed 0; (2) rerun each optimizer's
best trial on fresh seeds 1..N; tuned AdamW also at 1/2, 2 and 4 times the budget (the curve the
speedups are read from) and the paper baseline on the same seeds. Runs are trained N at a time
(vmapped; see engine.py), so the grid and the reruns of an optimizer share one compiled program.

Resumable: each run is `OUT/runs/<id>.json` as soon as its batch ends, the id naming the
workload, optimizer, budget, seed and hyper-parameters. A restarted audit trains only batches
with a run missing; the numbers are the same (a batch is deterministic on CPU), and so is the
report. A run file that is not that run's record (cut short, not JSON, a field missing or of
the wrong kind) is named on stderr and its run trained again: a run file is a cache of a
deterministic computation.

Many devices, many hosts: `--mesh runs=N` trains N batches at once, each on its own device with
the program one device would compile (engine.run_groups), so the numbers do not depend on N;
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
import sys
import time
from typing import NamedTuple

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


MISSING = "missing"  # Audit.saved's answer for a run not trained yet
# a run file's fields besides the run's identity, and what each holds (report.py reads them)
RESULT = {
    "final_loss": "a number, or null when the run diverged",
    "diverged": "true or false",
    "diverged_step": "a whole number, or null",
    "seconds": "a number",
    "curve": "a list of [step, loss] pairs",
}


class Batch(NamedTuple):
    """Runs trained together in one vmapped program, and where their records go."""

    name: str  # the optimizer
    group: engine.Group  # the runs, padded to a full batch with copies of the last
    heads: list  # each run's identity (report.KEY's fields), the padding left out
    paths: list  # each run's file
    keys: list  # each run's report.run_key
    work: float  # steps x cost, for the estimate of the time left


def _not_a_record(record, identity: dict) -> str | None:
    """What keeps `record` (a run file's JSON) from being the record of the run `identity`
    names; None when it is one."""
    if not isinstance(record, dict):
        return f"a JSON {type(record).__name__}, not an object"
    for key, value in identity.items():
        if key not in record:
            return f"no {key!r}"
        if record[key] != value:
            return f"the record of another run ({key} {record[key]!r}, not {value!r})"
    for key, holds in RESULT.items():
        if key not in record:
            return f"no {key!r}"
        if not _holds(key, record[key]):
            return f"{key} {record[key]!r}: expected {holds}"
    if (record["final_loss"] is None) != record["diverged"]:
        return f"final_loss {record['final_loss']!r} with diverged {record['diverged']!r}"
    return None


def _holds(field: str, value) -> bool:
    """Whether `value` is what a run file's `field` holds (RESULT says what)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if field == "final_loss":
        return value is None or number
    if field == "diverged":
        return isinstance(value, bool)
    if field == "diverged_step":
        return value is None or isinstance(value, int) and not isinstance(value, bool)
    if field == "seconds":
        return number
    return isinstance(value, list) and all(  # the curve
        isinstance(point, list) and len(point) == 2 for point in value
    )


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
        # --reproduce: {run key: (its run file, its record there, why there is none)}
        self.files = {}
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

    def train(self, wl, data, requests: dict, cost) -> dict:
        """The results of `requests`, {label: (optimizer, runs)}, as {label: their records}: from
        disk, or trained `per_batch` at a time and saved; with a mesh, as many batches at once
        as it has devices, each on its own."""
        todo = []  # the batches to train
        for name, runs in requests.values():
            head = {"workload": wl.name, "optimizer": name}
            for group in engine.groups(wl, data, name, runs):
                for i in range(0, len(group.runs), self.per_batch):
                    batch = self.batch_of(wl, data, name, group, i, head, cost)
                    mine = self.batch % jax.process_count() == jax.process_index()
                    self.batch += 1
                    if self.due(batch, mine):
                        todo.append(batch)
                    else:
                        self.tick(len(batch.heads), batch.work)
        at_once = self.mesh.size if self.mesh else 1
        for start in range(0, len(todo), at_once):
            lot = todo[start : start + at_once]
            jobs = [(batch.name, batch.group) for batch in lot]
            for batch, results in zip(lot, engine.run_groups(wl, data, jobs, self.mesh)):
                for identity, path, key, result in zip(
                    batch.heads, batch.paths, batch.keys, results
                ):
                    if self.check is not None:  # --reproduce: compared, never written
                        self.checked[key] = result
                    elif self.saved(path, identity)[1]:  # a run already on disk keeps its record
                        atomic.write(path, json.dumps({**identity, **result}))
                self.trained += batch.work
                self.tick(len(batch.heads), batch.work)
        parallel.on_first(lambda: None)  # every process's share on disk (a barrier)
        return {label: self.records_of(wl, data, *request) for label, request in requests.items()}

    def batch_of(self, wl, data, name, group, i, head, cost) -> Batch:
        """The batch of `group`'s runs from the i-th on, padded to a full batch when the group
        has more (then every batch of the group is one program)."""
        batch_runs = group.runs[i : i + self.per_batch]
        pad = self.per_batch - len(batch_runs) if len(group.runs) > self.per_batch else 0
        # each run's identity: workload, optimizer, hyperparams, seed, steps
        heads = [{**head, **run._asdict()} for run in batch_runs]
        return Batch(
            name=name,
            group=engine.Group(batch_runs + batch_runs[-1:] * pad, group.built),
            heads=heads,
            paths=[self.path(wl, data, name, run) for run in batch_runs],
            keys=[report.run_key(identity) for identity in heads],
            work=sum(run.steps for run in batch_runs) * cost,
        )

    def records_of(self, wl, data, name, runs) -> list[dict]:
        """The records of `runs` (of optimizer `name`), trained: their run files, or with
        --reproduce, their records in OUT's results.json."""
        heads = [{"workload": wl.name, "optimizer": name, **run._asdict()} for run in runs]
        if self.check is not None:
            keys = [report.run_key(identity) for identity in heads]
            if missing := [key for key in keys if key not in self.records]:
                raise UsageError(f"--reproduce {self.out}: its results.json lacks run {missing[0]}")
            return [self.records[key] for key in keys]
        records = []
        for run, identity in zip(runs, heads):
            path = self.path(wl, data, name, run)
            record, problem = self.saved(path, identity)
            if problem:  # (another process's share not on disk: it stopped)
                raise FrostError(f"{path}: {problem}")
            records.append(record)
        return records

    def due(self, batch, mine: bool) -> bool:
        """Whether this process trains `batch` now. A plain audit: when it is `mine` and one of its
        runs has no record on disk (a run file that is not a record is named on stderr, and its
        run retrained). --reproduce: when it holds a sampled run not checked yet (each round of
        --seeds auto repeats a batch); the sampled runs' files are read, for `reproduce`."""
        if self.check is not None:
            wanted = set(batch.keys) & self.check - set(self.checked)
            for identity, path, key in zip(batch.heads, batch.paths, batch.keys):
                if key in wanted:
                    self.files[key] = (path, *self.saved(path, identity))
            return bool(wanted)
        if not mine:
            return False
        problems = [
            self.saved(path, identity)[1] for path, identity in zip(batch.paths, batch.heads)
        ]
        for path, problem in zip(batch.paths, problems):
            if problem and problem != MISSING:
                tqdm.write(f"{path}: {problem}; training its run again", file=sys.stderr)
        return any(problems)

    def saved(self, path: pathlib.Path, identity: dict) -> tuple[dict | None, str | None]:
        """(the run's record in its run file, None), or (None, why there is none): MISSING, not
        JSON, or not the record of the run `identity` names (what is wrong with it). A file that
        cannot be read is refused: training could not replace it."""
        try:
            text = path.read_bytes()
        except FileNotFoundError:
            return None, MISSING
        except OSError as e:
            raise UsageError(
                f"{path}: cannot read it ({e.strerror}); remove it and rerun"
            ) from None
        try:
            record = json.loads(text)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            return None, f"not a run record: not JSON ({e})"
        problem = _not_a_record(record, identity)
        return (None, f"not a run record: {problem}") if problem else (record, None)

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

        def runs(hyperparams, seeds, budget=steps):  # each of `hyperparams` on each of `seeds`
            return [engine.Run(hp, seed, budget) for hp in hyperparams for seed in seeds]

        # two rounds, each trained at once (with a mesh, its batches side by side): every grid and
        # the paper baseline; then the best trials' reruns and tuned AdamW's other budgets
        trials = {name: self.trials(wl, name) for name in names}
        first = {("tuning", name): (name, runs(trials[name], [0])) for name in names}
        first["baseline"] = ("adamw", runs([protocol.BASELINE[wl.kind]], seeds))
        done = self.train(wl, data, first, cost)
        tuning = {name: done["tuning", name] for name in names}
        best = {name: protocol.best_trial(grid) for name, grid in tuning.items()}
        second = {
            ("finals", name): (name, runs([trial["hyperparams"]], seeds))
            for name, trial in best.items()
            if trial is not None
        }
        budgets = []
        if best["adamw"]:
            budgets = [
                round(fraction * steps / engine.CHUNK) * engine.CHUNK for fraction in self.budgets
            ]
        for budget in budgets:  # tuned AdamW at each budget (its reruns at the tuning budget)
            if budget != steps:
                tuned = [best["adamw"]["hyperparams"]]
                second["curve", budget] = ("adamw", runs(tuned, seeds, budget))
        done.update(self.train(wl, data, second, cost))
        finals = {name: done["finals", name] for name, trial in best.items() if trial is not None}
        curve = {
            budget: finals["adamw"] if budget == steps else done["curve", budget]
            for budget in budgets
        }
        baseline = done["baseline"]
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
        # a size that cannot fit, by arithmetic: refused before anything compiles or is written
        devices = job.mesh.size if job.mesh else 1
        for wl, data in variants:
            params, need = engine.least(wl, data, job.trials(wl, "adamw")[0])
            engine.refuse_by_arithmetic(wl, params, need, devices)
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
    device kind the numbers are the same bit for bit, on any number of devices: `--mesh` is this
    command's own), and compare them with their records; check each sampled run's file in
    OUT/runs too, unless OUT has no runs/ (a record of that run, agreeing with results.json).
    Prints the provenance fields that differ, then a line per run; raises FrostError (exit 1)
    when a run differs or its file is missing, broken or disagrees."""
    out = pathlib.Path(cfg.reproduce)
    try:
        saved = json.loads((out / "results.json").read_text())
        options = json.loads((out / "config.json").read_text())
        made = saved["provenance"]
        records = {report.run_key(record): record for record in saved["runs"]}
    except (OSError, KeyError, json.JSONDecodeError) as e:
        raise UsageError(f"--reproduce {out}: not a finished audit ({e!r})") from None
    sample = set(random.Random(0).sample(sorted(records), min(cfg.sample, len(records))))
    options.update(data=cfg.data, out=str(out), reproduce=None, sample=cfg.sample, mesh=cfg.mesh)
    lists = {k: tuple(v) for k, v in options.items() if isinstance(v, list)}  # JSON: tuples lists
    job = audit(type(cfg)(**{**options, **lists}), progress, sample, records)
    now = report.provenance(job.prints)
    changed = [k for k in now if made.get(k) != now[k]]
    exact = not set(changed) & {"jax", "jaxlib", "xla_flags", "devices", "host"}
    for k in changed:
        print(f"provenance {k}: {made.get(k)!r}, now {now[k]!r}")
    bad = 0
    broken = 0  # run files missing, not a record, or disagreeing with results.json
    kept = (out / "runs").is_dir()  # (an audit published without its run files: results.json)
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
        if key in job.files and kept:  # (a run not in the plan has no file to read)
            path, record, problem = job.files[key]
            problem = problem or _disagreement(record, was)
            if problem:
                verdict += f"; its run file {path}: {problem}"
                broken += 1
        print("{} {} {} seed {}, {} steps: ".format(*(was[k] for k in report.KEY)) + verdict)
    failed = []
    if bad:
        failed.append(f"{bad} of {len(sample)} runs do not reproduce")
    if broken:
        failed.append(
            f"{broken} of {len(sample)} run files are missing, not a run's record, or disagree "
            "with results.json"
        )
    if failed:
        raise FrostError(f"--reproduce {out}: " + "; ".join(failed))
    files = "their run files agree" if kept else f"{out / 'runs'} is not there to check"
    print(f"--reproduce {out}: all {len(sample)} runs reproduce; {files}")


def _disagreement(record: dict, was: dict) -> str | None:
    """How a run file's `record` disagrees with `was`, the run's record in results.json (the
    same but for the curve); None when it does not."""
    for key, value in was.items():
        if record.get(key) != value:
            return f"disagrees with results.json ({key} {record.get(key)!r} here, {value!r} there)"
    return None


def show_plan(job: Audit, variants) -> None:
    """`--plan`: per workload, its runs, steps and FLOPs (6 x parameters x tokens), the memory a
    run needs at the least by arithmetic (engine.least: weights, gradients, AdamW's state) and
    the memory it takes (compiled), how many fit together in half a device's memory, and the
    time on these devices: one chunk of K AdamW runs of the kind's built-in smallest workload
    (gpt-s, image-s) is timed, and scaled by FLOPs at AdamW's cost per step (an upper bound where
    larger models use a device better). Refuses a workload one run of which does not fit, before
    any training, unless a mesh can split it (FSDP); `audit` has refused, before anything
    compiled, those that cannot fit by arithmetic."""
    cfg = job.cfg
    rate = {}  # {kind: seconds per unit of work}
    seconds = 0.0
    flops = 0.0
    devices = (job.mesh.size if job.mesh else 1) * jax.process_count()
    print(
        "| workload | parameters | weights+gradients+state | steps | runs | FLOPs | memory/run | "
        "runs/device | time |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for wl, data in variants:
        runs, work = job.plan([(wl, data)], cfg.names)
        params, least = engine.least(wl, data, job.trials(wl, "adamw")[0])
        arithmetic = f"{params / 1e6:.3g}M x {least / params:.3g} B = {least / 2**20:.0f} MiB"
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
            f"| {wl.name} | {params / 1e6:.3g}M | {arithmetic} | "
            f"{job.steps(wl, data)} | {runs} | {6 * work:.3g} | {need / 2**20:.0f} MiB | "
            f"{fit or '1 (FSDP)'} | {took / 3600:.3g} h |"
        )
    kind = jax.devices()[0].device_kind
    print(f"total: {flops:.3g} FLOPs, about {seconds / 3600:.3g} h on {devices} x {kind}")
    print(
        "weights+gradients+state: the least memory of a run, by arithmetic: parameters x bytes "
        "per parameter of the weights, their gradients and AdamW's state (4 + 4 + 8 in float32); "
        "memory/run: the compiled program's, activations included"
    )
