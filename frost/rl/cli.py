"""`frost rl ppo|dqn|muzero` and `frost rl eval`: the options, checked before JAX loads (so a
mistake is answered at once); the job is frost.rl.run.

    frost rl ppo --env cartpole --seeds 5           # Anakin: 5 seeds in one compiled program
    frost rl dqn --env breakout --steps 500000      # MinAtar's sticky actions, 0.1 (--sticky)
    frost rl muzero --env catch                     # Gumbel MuZero's search in the program
    frost rl ppo --env gym:CartPole-v1 --actors 2   # Sebulba: gymnasium envs in 2 actor processes
    frost rl eval runs/rl-ppo-cartpole              # the checkpoint's policy, 100 episodes a seed
"""

import dataclasses
import pathlib

from frost.config import (
    Checked,
    UsageError,
    add_options,
    from_args,
    needs,
    option,
    optional,
    output_folder,
    whole,
)
from frost.rl.spec import JNP_ENVS, EnvSpec


def _env(name):
    try:
        EnvSpec.parse(name)
    except UsageError:
        return f"choose {', '.join(JNP_ENVS)} or gym:ID"


@dataclasses.dataclass(frozen=True)
class RunConfig(Checked):
    algo: str = option("ppo", "algorithm", choices=("ppo", "dqn", "muzero"), cli=False)
    env: str = option(
        "cartpole",
        "jnp env (cartpole, catch; MinAtar's breakout, asterix, freeway, seaquest, "
        "space_invaders) or gym:ID, a gymnasium env",
        _env,
    )
    sticky: float | None = option(
        None,
        "MinAtar's games: the probability that a step repeats the previous action (MinAtar's "
        "sticky actions, in training and evaluation; default 0.1, 0 for none)",
    )
    mode: str | None = option(
        None,
        "anakin: jnp envs inside the compiled program; sebulba: host envs in actor "
        "processes (default: by --env)",
        lambda mode: None if mode in (None, "anakin", "sebulba") else "choose anakin or sebulba",
    )
    seeds: int = option(
        1, "seeds, numbered from --seed (anakin trains them in one program)", whole(1)
    )
    seed: int = option(0, "first seed", whole(0))
    actors: int | None = option(None, "sebulba: actor processes (default 2)", optional(whole(1)))
    steps: int | None = option(
        None, "env steps per seed (default: the preset of algo and env)", optional(whole(1))
    )
    deterministic: bool = option(
        False, "sebulba: Cleanba's fixed order, losses independent of timing and actors"
    )
    out: str | None = option(
        None, "run directory, new or empty (default runs/rl-ALGO-ENV)", optional(output_folder)
    )

    def check(self):
        host = EnvSpec.parse(self.env, self.sticky).host
        mode = self.mode or ("sebulba" if host else "anakin")
        object.__setattr__(self, "mode", mode)
        if mode == "anakin" and host:
            raise UsageError(
                f"--env {self.env}: a gymnasium env runs on the host; use --mode sebulba"
            )
        if mode == "sebulba" and not host:
            raise UsageError(
                "--mode sebulba steps host envs: use --env gym:ID (e.g. gym:CartPole-v1), not "
                f"{self.env}"
            )
        if mode == "sebulba" and self.algo != "ppo":
            raise UsageError(
                f"--mode sebulba: only ppo trains in sebulba mode; {self.algo} runs in anakin mode"
            )
        if self.actors is not None and mode != "sebulba":
            raise UsageError(
                f"--actors {self.actors}: actor processes exist only in --mode sebulba"
            )
        needs("matplotlib", "frost rl (returns.png)", "'frost[plot]'")
        if host:
            needs("gymnasium", f"--env {self.env}", "gymnasium")
            import gymnasium

            try:
                probe = gymnasium.make(self.env[4:])
            except gymnasium.error.Error as e:
                raise UsageError(
                    f"--env {self.env}: gymnasium cannot make {self.env[4:]!r} ({e})"
                ) from None
            probe.close()
            if not isinstance(probe.action_space, gymnasium.spaces.Discrete):
                raise UsageError(
                    f"--env {self.env}: PPO here needs discrete actions, not {probe.action_space}"
                )
            if not isinstance(probe.observation_space, gymnasium.spaces.Box):  # Blackjack's Tuple
                raise UsageError(
                    f"--env {self.env}: PPO here needs array observations (a Box space), not "
                    f"{probe.observation_space}"
                )
        # the run directory is claimed by frost.train.job.claim, as frost train's is
        out = self.out or f"runs/rl-{self.algo}-{self.env.replace(':', '-')}"
        object.__setattr__(self, "out", out)


def _train(args):
    # a user's mistake is answered before JAX loads
    cfg = from_args(RunConfig, args, algo=args.algo)
    from frost.rl import run

    return run.train(cfg)


def _eval(args):
    if not (pathlib.Path(args.run_dir) / "checkpoint").is_dir():
        raise UsageError(f"{args.run_dir}: no checkpoint/ here; is it a `frost rl` run directory?")
    from frost.rl import run

    return run.evaluate_run(args.run_dir)


def add_commands(subparsers) -> None:
    parser = subparsers.add_parser(
        "rl", help="reinforcement learning: PPO, DQN and MuZero, Anakin and Sebulba"
    )
    parser.set_defaults(run=lambda args: parser.print_help())
    sub = parser.add_subparsers(metavar="ACTION")
    for algo in ("ppo", "dqn", "muzero"):
        train = sub.add_parser(
            algo,
            help=f"train {algo.upper()}; writes metrics.jsonl, results.json, returns.png, "
            f"checkpoint/ in --out",
        )
        add_options(train, [RunConfig])
        train.set_defaults(run=_train, algo=algo)
    evaluate = sub.add_parser(
        "eval", help="evaluate a run's checkpoint: mean return over 100 episodes per seed"
    )
    evaluate.add_argument("run_dir")
    evaluate.set_defaults(run=_eval)
