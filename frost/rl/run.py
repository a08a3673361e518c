"""The `frost rl` job: train an agent on its preset (frost.rl.cli parses the options), evaluate it,
and write the run directory.

A run directory holds metrics.jsonl (one line per seed per report: step, return (online: the
mean return of the episodes training finished lately), losses, steps/s), results.json, returns.png
(each seed's online return, and their IQM with its 95% interval when there are several seeds) and
checkpoint/ (frost.train.checkpoint: the policies of all seeds, stacked). results.json is

    {"seeds": [{"seed", "final_return", "online_return", "episodes", "cut", "steps", "seconds"}],
     "summary": {"iqm", "iqm_low", "iqm_high", "mean", "mean_low", "mean_high", "seeds",
                 "episodes"}}

`final_return` is the mean greedy return over `episodes` (100) evaluation episodes, each with its
own randomness (starts, MinAtar's sticky actions and spawns), `cut` how many of them were still
running at the env's evaluation limit, `online_return` the seed's last online return, `seconds`
the wall time of training, compilation included (Anakin's seeds train together, so they share
it). The summary aggregates the seeds' final returns as Agarwal et al. (2021) recommend:
interquartile mean and mean, each with a 95% stratified-bootstrap interval (frost.stats, checked
against rliable).
"""

import dataclasses
import functools
import json
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from frost import atomic, checkpoint, stats
from frost.config import UsageError
from frost.rl import actors, anakin, dqn, muzero, ppo
from frost.rl.spec import MINATAR, EnvSpec
from frost.train import metrics, plot
from frost.train.job import claimed

# each with its Config, network(obs_shape, actions, hidden, key), anakin(env, cfg), greedy(model)
ALGOS = {"ppo": ppo, "dqn": dqn, "muzero": muzero}
EPISODES = 100  # evaluation episodes per seed, each with its own randomness


def presets(algo: str, env: EnvSpec, steps: int | None = None):
    """The hyper-parameters of `algo` on `env` (CleanRL's for PPO on CartPole), `steps` per seed."""
    table = {
        ("ppo", "cartpole"): ppo.Config(),
        ("ppo", "catch"): ppo.Config(total_steps=100_000),
        ("ppo", "minatar"): ppo.Config(num_envs=64, total_steps=1_000_000, lr=5e-4, hidden=256),
        ("ppo", "gym"): ppo.Config(num_envs=8),
        ("dqn", "cartpole"): dqn.Config(
            total_steps=200_000, lr=2.5e-4, batch_size=128, learning_starts=10_000
        ),
        ("dqn", "catch"): dqn.Config(total_steps=40_000),
        ("dqn", "minatar"): dqn.Config(
            total_steps=500_000,
            buffer_size=50_000,
            learning_starts=5_000,
            eps_fraction=0.2,
            target_every=1_000,
            hidden=128,
        ),
        ("muzero", "catch"): muzero.Config(total_steps=64_000),
        ("muzero", "cartpole"): muzero.Config(total_steps=100_000),
        ("muzero", "minatar"): muzero.Config(total_steps=500_000, hidden=128),
    }
    hp = table[(algo, env.preset)]
    return dataclasses.replace(hp, total_steps=steps) if steps else hp


class Recorder(metrics.Log):
    """Progress bar and metrics.jsonl (frost.train.metrics.Log: one line appended per seed per
    report); the records are kept for returns.png."""

    def __init__(self, out: pathlib.Path, total: int, label: str):
        super().__init__(out, step=0)
        self.records = []
        self.at = {}  # {seed: its last step}
        self.t0 = time.perf_counter()
        # all seeds' steps
        self.bar = tqdm(total=total, desc=label, unit="step", unit_scale=True, dynamic_ncols=True)
        self.callback(self.bar.close)

    def report(self, seeds, step: int, metrics: dict):
        """`seeds` are at env step `step`; `metrics` holds one value per seed."""
        self.at.update(dict.fromkeys(seeds, step))
        steps_done = sum(self.at.values())
        rate = steps_done / (time.perf_counter() - self.t0)
        for i, seed in enumerate(seeds):
            record = {"seed": seed, "step": step, "steps_per_s": rate}
            record.update({k: float(v[i]) for k, v in metrics.items()})
            self.records.append(record)
            self.write(record)
        self.bar.update(steps_done - self.bar.n)
        self.bar.set_postfix(
            ret=f"{sum(float(x) for x in metrics['return']) / len(seeds):.1f}", per_s=f"{rate:.0f}"
        )


def train(cfg) -> int:
    """Train, evaluate and save the run `cfg` (a frost.rl.cli.RunConfig) describes."""
    out = pathlib.Path(cfg.out)
    seeds = list(range(cfg.seed, cfg.seed + cfg.seeds))
    env = EnvSpec.parse(cfg.env, cfg.sticky)
    hp = presets(cfg.algo, env, cfg.steps)
    if cfg.mode == "sebulba" and hp.num_envs % (cfg.actors or 2):
        raise UsageError(f"--actors {cfg.actors}: must divide the {hp.num_envs} environments")
    per_update = hp.num_envs * hp.num_steps  # env steps an iteration takes, never rounded
    if cfg.steps and cfg.steps % per_update:
        raise UsageError(
            f"--steps {cfg.steps}: must be a multiple of {per_update} ({cfg.algo} on {cfg.env} "
            f"runs {hp.num_envs} envs for {hp.num_steps} steps an iteration), e.g. "
            f"{max(cfg.steps // per_update, 1) * per_update}"
        )
    with claimed(out, cfg, work="checkpoint"):  # removed again if it fails before the checkpoint
        return _run(cfg, out, env, hp, seeds, per_update)


def _run(cfg, out, env, hp, seeds, per_update: int) -> int:
    # its clock starts now
    rec = Recorder(out, hp.updates * per_update * len(seeds), f"{cfg.algo} {cfg.env}")
    if cfg.mode == "anakin":
        init, iteration = ALGOS[cfg.algo].anakin(env.make(), hp)

        def on_chunk(runner, metrics, done):  # metrics (seeds, chunk): report the chunk's last
            rec.report(
                seeds, done * per_update, {k: np.asarray(v[:, -1]) for k, v in metrics.items()}
            )

        runner = anakin.run(init, iteration, seeds, hp.updates, on_chunk)
        models = runner.model
        seconds = [time.perf_counter() - rec.t0] * len(seeds)  # shared: one program
    else:
        trained = []
        seconds = []
        n_actors = cfg.actors or 2

        def report(seed, u, update_metrics):  # one seed's update u
            values = {k: [v] for k, v in update_metrics.items()}
            rec.report([seed], (u + 1) * per_update, values)

        for seed in seeds:
            started = time.perf_counter()
            on_update = functools.partial(report, seed)
            trained.append(
                ppo.sebulba(env.make(), hp, seed, n_actors, cfg.deterministic, on_update=on_update)
            )
            seconds.append(time.perf_counter() - started)
        models = jax.tree.map(lambda *x: jnp.stack(x), *trained)
    rec.close()
    steps = hp.updates * per_update  # env steps per seed
    meta = {
        "algo": cfg.algo,
        "env": cfg.env,
        "sticky": env.sticky,
        "seeds": seeds,
        "hidden": hp.hidden,
    }
    checkpoint.save(out / "checkpoint", steps, {"model": models}, meta=meta)
    # after the checkpoint: it cannot lose the run
    returns, cut = evaluate(cfg.algo, env, models, seeds)  # (seeds, EPISODES) each
    online = {r["seed"]: r["return"] for r in rec.records}  # each seed's last report
    rows = [
        {
            "seed": seed,
            "final_return": float(returns[i].mean()),
            "online_return": online[seed],
            "episodes": EPISODES,
            "cut": int(cut[i].sum()),
            "steps": steps,
            "seconds": seconds[i],
        }
        for i, seed in enumerate(seeds)
    ]
    summary = stats.summary([row["final_return"] for row in rows], episodes=EPISODES)
    results = {"seeds": rows, "summary": summary}
    atomic.write(out / "results.json", json.dumps(results, indent=1))
    plot.returns(rec.records, out / "returns.png", str(out))
    for row in rows:
        print(
            f"seed {row['seed']}: evaluation return {row['final_return']:.1f} over {EPISODES} "
            f"episodes (online {row['online_return']:.1f}) after {row['steps']} steps in "
            f"{row['seconds']:.1f} s"
        )
    print(summary_line(summary, cfg.algo, cfg.env, env.sticky))
    print(f"run dir {out}")
    return 0


def summary_line(summary: dict, algo: str, env: str, sticky: float | None) -> str:
    """results.json's summary as one line: the IQM and the mean with their 95% intervals."""
    setting = f"{algo}, {env}" + ("" if sticky is None else f", sticky {sticky:g}")
    return (
        f"IQM {summary['iqm']:.2f} [{summary['iqm_low']:.2f}, {summary['iqm_high']:.2f}], mean "
        f"{summary['mean']:.2f} [{summary['mean_low']:.2f}, {summary['mean_high']:.2f}] over "
        f"{summary['seeds']} seeds x {summary['episodes']} episodes (95% stratified bootstrap; "
        f"{setting})"
    )


def evaluate(algo: str, env: EnvSpec, models, seeds) -> tuple[np.ndarray, np.ndarray]:
    """The greedy return of each seed's policy in `models` (stacked by seed) on EPISODES
    episodes, each with its own randomness: (returns (seeds, EPISODES), cut (seeds, EPISODES)
    bool, the episodes still running when evaluation stopped at the env's step limit)."""
    # host envs: (model, obs (N, ...)) -> actions, one model of `models` at a time
    if env.host:
        policy = anakin.jit(lambda model, obs: ALGOS[algo].greedy(model)(obs))

        def seed_policy(i):  # obs -> actions of the i-th seed's model
            return functools.partial(policy, jax.tree.map(lambda x: x[i], models))

        pairs = [
            actors.evaluate(env.make(), seed_policy(i), EPISODES, seed=seed)
            for i, seed in enumerate(seeds)
        ]
        return np.stack([r for r, _ in pairs]), np.stack([c for _, c in pairs])
    keys = jax.vmap(lambda seed: jax.random.fold_in(jax.random.key(seed), 1 << 20))(
        np.asarray(seeds, np.uint32)
    )
    returns, cut = _evaluator(algo, env)(models, keys)
    return np.asarray(returns), np.asarray(cut)


@functools.lru_cache
def _evaluator(algo: str, env: EnvSpec):
    """(models, keys) -> each seed's (returns (EPISODES,), cut (EPISODES,)) on jnp env `env`
    (compiled once)."""
    jnp_env = env.make()
    greedy = ALGOS[algo].greedy
    return anakin.jit(
        jax.vmap(lambda model, key: anakin.evaluate(jnp_env, greedy(model), key, EPISODES))
    )


def evaluate_run(run_dir) -> int:
    """`frost rl eval RUN_DIR`: the mean return of each seed's saved policy, printed."""
    path = checkpoint.latest(pathlib.Path(run_dir) / "checkpoint")
    if path is None:
        raise UsageError(
            f"{run_dir}: checkpoint/ holds no complete checkpoint (was the run interrupted?)"
        )
    meta = checkpoint.read_manifest(path)["meta"]
    if not {"algo", "env", "seeds", "hidden"} <= set(meta) or meta["algo"] not in ALGOS:
        raise UsageError(
            f"{path}: not a `frost rl` checkpoint (its manifest names no algo and env)"
        )
    # runs from before sticky actions came have none
    sticky = meta.get("sticky", 0.0 if meta["env"] in MINATAR else None)
    env = EnvSpec.parse(meta["env"], sticky)
    # the stacked models' shapes, to load the checkpoint into
    shape, actions = env.signature()
    network = functools.partial(ALGOS[meta["algo"]].network, shape, actions, meta["hidden"])
    keys = jax.random.split(jax.random.key(0), len(meta["seeds"]))
    template = jax.eval_shape(jax.vmap(lambda key: network(key=key)), keys)
    tree, _ = checkpoint.load(path, {"model": template})
    returns, _ = evaluate(meta["algo"], env, tree["model"], meta["seeds"])
    for seed, seed_returns in zip(meta["seeds"], returns):
        print(
            f"seed {seed}: mean return {seed_returns.mean():.1f} over {EPISODES} episodes "
            f"({meta['algo']}, {meta['env']})"
        )
    summary = stats.summary(returns.mean(1), episodes=EPISODES)
    print(summary_line(summary, meta["algo"], meta["env"], env.sticky))
    return 0
