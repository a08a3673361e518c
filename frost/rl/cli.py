"""`frost rl ppo|dqn` and `frost rl eval`.

    frost rl ppo --env cartpole --seeds 5               # Anakin: 5 seeds in one compiled program
    frost rl dqn --env breakout --steps 500000
    frost rl ppo --env gym:CartPole-v1 --actors 2       # Sebulba: gymnasium envs in 2 actor processes
    frost rl eval runs/rl-ppo-cartpole                  # the checkpoint's policy, 100 episodes a seed

A run directory holds metrics.jsonl (one line per seed per report: step, return, losses,
steps/s), results.json (`{"seeds": [{"seed", "final_return", "steps", "seconds"}, ...]}`, the
final return being the mean greedy evaluation return over 100 episodes, `seconds` the wall time
of training, compilation included; Anakin's seeds train together, so they share it), returns.png
and checkpoint/ (frost.train.checkpoint: the policies of all seeds, stacked).
"""
import dataclasses
import functools
import io
import json
import pathlib
import time

from frost import atomic
from frost.config import Checked, UsageError, add_options, from_args, option, optional, whole

JNP_ENVS = ("cartpole", "catch", "breakout")


def _env(name):
    return None if name in JNP_ENVS or name.startswith("gym:") else f"choose {', '.join(JNP_ENVS)} or gym:ID"


@dataclasses.dataclass(frozen=True)
class RunConfig(Checked):
    algo: str = option("ppo", "algorithm", choices=("ppo", "dqn"), cli=False)
    env: str = option("cartpole", "jnp env (cartpole, catch, breakout) or gym:ID, a gymnasium env", _env)
    mode: str | None = option(None, "anakin: jnp envs inside the compiled program; sebulba: host envs in actor "
                              "processes (default: by --env)",
                              lambda m: None if m in (None, "anakin", "sebulba") else "choose anakin or sebulba")
    seeds: int = option(1, "seeds, numbered from --seed (anakin trains them in one program)", whole(1))
    seed: int = option(0, "first seed", whole(0))
    actors: int | None = option(None, "sebulba: actor processes (default 2)", optional(whole(1)))
    steps: int | None = option(None, "env steps per seed (default: the preset of algo and env)", optional(whole(1)))
    deterministic: bool = option(False, "sebulba: Cleanba's fixed order, losses independent of timing and actors")
    out: str | None = option(None, "run directory, new or empty (default runs/rl-ALGO-ENV)")

    def check(self):
        host = self.env.startswith("gym:")
        mode = self.mode or ("sebulba" if host else "anakin")
        object.__setattr__(self, "mode", mode)
        if mode == "anakin" and host:
            raise UsageError(f"--env {self.env}: a gymnasium env runs on the host; use --mode sebulba")
        if mode == "sebulba" and not host:
            raise UsageError(f"--mode sebulba steps host envs: use --env gym:ID (e.g. gym:CartPole-v1), not {self.env}")
        if mode == "sebulba" and self.algo != "ppo":
            raise UsageError("--mode sebulba: only ppo trains in sebulba mode; dqn runs in anakin mode")
        if self.actors is not None and mode != "sebulba":
            raise UsageError(f"--actors {self.actors}: actor processes exist only in --mode sebulba")
        if host:
            import gymnasium
            try:
                probe = gymnasium.make(self.env[4:])
            except gymnasium.error.Error as e:
                raise UsageError(f"--env {self.env}: gymnasium cannot make {self.env[4:]!r} ({e})") from None
            probe.close()
            if not isinstance(probe.action_space, gymnasium.spaces.Discrete):
                raise UsageError(f"--env {self.env}: PPO here needs discrete actions, not {probe.action_space}")
        out = pathlib.Path(self.out or f"runs/rl-{self.algo}-{self.env.replace(':', '-')}")
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise UsageError(f"--out {out}: holds another run (or is a file); choose a new or empty folder")
        object.__setattr__(self, "out", str(out))


def presets(algo: str, env: str, steps: int | None = None):
    """The hyper-parameters of `algo` on `env` (CleanRL's for PPO on CartPole), `steps` per seed."""
    from frost.rl import dqn, ppo
    table = {("ppo", "cartpole"): ppo.Config(), ("ppo", "catch"): ppo.Config(total_steps=100_000),
             ("ppo", "breakout"): ppo.Config(num_envs=64, total_steps=1_000_000, lr=5e-4, hidden=256),
             ("ppo", "gym"): ppo.Config(num_envs=8),
             ("dqn", "cartpole"): dqn.Config(total_steps=200_000, lr=2.5e-4, batch_size=128, learning_starts=10_000),
             ("dqn", "catch"): dqn.Config(total_steps=40_000),
             ("dqn", "breakout"): dqn.Config(total_steps=500_000, buffer_size=50_000, learning_starts=5_000,
                                             eps_fraction=0.2, target_every=1_000, hidden=128)}
    hp = table[(algo, "gym" if env.startswith("gym:") else env)]
    return dataclasses.replace(hp, total_steps=steps) if steps else hp


class Recorder:
    """Progress bar and metrics.jsonl (rewritten whole, atomically, at each report)."""

    def __init__(self, out: pathlib.Path, total: int, label: str):
        from tqdm import tqdm
        self.out, self.records, self.at, self.t0 = out, [], {}, time.perf_counter()  # at: {seed: its last step}
        self.bar = tqdm(total=total, desc=label, unit="step", unit_scale=True, dynamic_ncols=True)  # all seeds' steps

    def report(self, seeds, step: int, metrics: dict):
        """`seeds` are at env step `step`; `metrics` holds one value per seed."""
        self.at.update(dict.fromkeys(seeds, step))
        steps_done = sum(self.at.values())
        rate = steps_done / (time.perf_counter() - self.t0)
        for i, seed in enumerate(seeds):
            self.records.append({"seed": seed, "step": step, "steps_per_s": rate,
                                 **{k: float(v[i]) for k, v in metrics.items()}})
        atomic.write(self.out / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in self.records))
        self.bar.update(steps_done - self.bar.n)
        self.bar.set_postfix(ret=f"{sum(float(x) for x in metrics['return']) / len(seeds):.1f}", per_s=f"{rate:.0f}")


def _train(args) -> int:
    cfg = from_args(RunConfig, args, algo=args.algo)  # a user's mistake is answered before JAX loads
    import jax
    from frost.train.job import enable_compilation_cache
    enable_compilation_cache()  # a second run of the same agent skips compiling
    import jax.numpy as jnp
    import numpy as np

    from frost.rl import anakin, envs, ppo

    out, seeds = pathlib.Path(cfg.out), list(range(cfg.seed, cfg.seed + cfg.seeds))
    hp = presets(cfg.algo, cfg.env, cfg.steps)
    if cfg.mode == "sebulba" and hp.num_envs % (cfg.actors or 2):
        raise UsageError(f"--actors {cfg.actors}: must divide the {hp.num_envs} environments")
    out.mkdir(parents=True, exist_ok=True)
    per_update = hp.num_envs * hp.num_steps
    rec = Recorder(out, hp.updates * per_update * len(seeds), f"{cfg.algo} {cfg.env}")
    t0 = time.perf_counter()
    if cfg.mode == "anakin":
        env, algo = envs.make(cfg.env), _algo(cfg.algo)
        init, iteration = algo.anakin(env, hp)

        def on_chunk(runner, metrics, done):  # metrics (seeds, chunk): report the chunk's last
            rec.report(seeds, done * per_update, {k: np.asarray(v[:, -1]) for k, v in metrics.items()})
        runner = anakin.run(init, iteration, seeds, hp.updates, on_chunk)
        models, seconds = runner.model, [time.perf_counter() - t0] * len(seeds)
    else:
        trained, seconds = [], []
        for seed in seeds:
            s0 = time.perf_counter()
            trained.append(ppo.sebulba(_make_env(cfg.env), hp, seed, cfg.actors or 2, cfg.deterministic,
                                       on_update=lambda u, m: rec.report([seed], (u + 1) * per_update,
                                                                         {k: [v] for k, v in m.items()})))
            seconds.append(time.perf_counter() - s0)
        models = jax.tree.map(lambda *x: jnp.stack(x), *trained)
    rec.bar.close()
    final = evaluate(cfg.algo, cfg.env, models, seeds)
    from frost.train import checkpoint
    meta = {"algo": cfg.algo, "env": cfg.env, "seeds": seeds, "hidden": hp.hidden}
    checkpoint.save(out / "checkpoint", hp.updates * per_update, {"model": models}, meta=meta)
    results = {"seeds": [{"seed": s, "final_return": float(r), "steps": hp.updates * per_update, "seconds": t}
                         for s, r, t in zip(seeds, np.asarray(final), seconds)]}
    atomic.write(out / "results.json", json.dumps(results, indent=1))
    plot(out, rec.records)
    for row in results["seeds"]:
        print(f"seed {row['seed']}: evaluation return {row['final_return']:.1f} after {row['steps']} steps "
              f"in {row['seconds']:.1f} s")
    print(f"run dir {out}")
    return 0


def _algo(name):
    from frost.rl import dqn, ppo
    return {"ppo": ppo, "dqn": dqn}[name]


def _make_env(name: str):
    import gymnasium
    return functools.partial(gymnasium.make, name[4:])


def _network(algo: str, env: str, hidden: int):
    """The network builder (key) -> model of `algo` on `env` (a template for loading a checkpoint)."""
    from frost.rl import dqn, envs, ppo
    if env.startswith("gym:"):
        probe = _make_env(env)()
        shape, actions = probe.observation_space.shape, int(probe.action_space.n)
    else:
        shape, actions = envs.make(env).observation_shape, envs.make(env).num_actions
    build = ppo.ActorCritic if algo == "ppo" else dqn.q_network
    return lambda key: build(shape, actions, hidden, key=key)


def evaluate(algo: str, env: str, models, seeds):
    """Mean greedy return over 100 episodes of each seed's policy in `models` (stacked by seed)."""
    import jax
    import numpy as np

    from frost.rl import actors, anakin
    if env.startswith("gym:"):  # host envs: (model, obs (N, ...)) -> actions, one model of `models` at a time
        policy = anakin.jit(lambda model, obs: _algo(algo).greedy(model)(obs))
        return [actors.evaluate(_make_env(env), functools.partial(policy, jax.tree.map(lambda x: x[i], models)), seed=s)
                for i, s in enumerate(seeds)]
    keys = jax.vmap(lambda s: jax.random.fold_in(jax.random.key(s), 1 << 20))(np.asarray(seeds, np.uint32))
    return _evaluator(algo, env)(models, keys)


@functools.lru_cache
def _evaluator(algo: str, env: str):
    """(models, keys) -> the mean greedy return on jnp env `env` of each seed's model (compiled once)."""
    import jax

    from frost.rl import anakin, envs
    e, greedy = envs.make(env), _algo(algo).greedy
    return anakin.jit(jax.vmap(lambda m, k: anakin.evaluate(e, greedy(m), k)))


def plot(out: pathlib.Path, records):
    """returns.png: each seed's return against env steps, from the metrics records."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    for seed in sorted({r["seed"] for r in records}):
        rows = [r for r in records if r["seed"] == seed]
        ax.plot([r["step"] for r in rows], [r["return"] for r in rows], label=f"seed {seed}")
    ax.set(xlabel="env steps", ylabel="episode return", title=str(out))
    ax.grid(alpha=0.3)
    ax.legend()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    atomic.write(out / "returns.png", buf.getvalue())


def _eval(args) -> int:
    if not (pathlib.Path(args.run_dir) / "checkpoint").is_dir():
        raise UsageError(f"{args.run_dir}: no checkpoint/ here; is it a `frost rl` run directory?")
    import jax

    from frost.train import checkpoint
    path = checkpoint.latest(pathlib.Path(args.run_dir) / "checkpoint")
    if path is None:
        raise UsageError(f"{args.run_dir}: checkpoint/ holds no complete checkpoint (was the run interrupted?)")
    meta = checkpoint.read_manifest(path)["meta"]
    build = _network(meta["algo"], meta["env"], meta["hidden"])
    template = jax.eval_shape(jax.vmap(build), jax.random.split(jax.random.key(0), len(meta["seeds"])))
    tree, _ = checkpoint.load(path, {"model": template})
    for seed, ret in zip(meta["seeds"], evaluate(meta["algo"], meta["env"], tree["model"], meta["seeds"])):
        print(f"seed {seed}: mean return {float(ret):.1f} over 100 episodes ({meta['algo']}, {meta['env']})")
    return 0


def add_commands(subparsers) -> None:
    parser = subparsers.add_parser("rl", help="reinforcement learning: PPO and DQN, Anakin and Sebulba")
    parser.set_defaults(run=lambda args: parser.print_help())
    sub = parser.add_subparsers(metavar="ACTION")
    for algo in ("ppo", "dqn"):
        p = sub.add_parser(algo, help=f"train {algo.upper()}; writes metrics.jsonl, results.json, returns.png, "
                                      f"checkpoint/ in --out")
        add_options(p, [RunConfig])
        p.set_defaults(run=_train, algo=algo)
    e = sub.add_parser("eval", help="evaluate a run's checkpoint: mean return over 100 episodes per seed")
    e.add_argument("run_dir")
    e.set_defaults(run=_eval)
