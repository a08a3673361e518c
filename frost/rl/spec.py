"""`--env NAME` (and `--sticky P`), parsed once: a jnp environment (frost.rl.envs and
frost.rl.minatar, stepped inside the compiled program) or `gym:ID`, a gymnasium environment
stepped on the host. Importing this module loads neither JAX nor gymnasium, so the CLI checks a
name before either loads.

    env = EnvSpec.parse("gym:CartPole-v1")   # EnvSpec(name='gym:CartPole-v1', sticky=None)
    env.host, env.preset                     # True, 'gym'
    env.make()                               # a picklable factory of gymnasium envs
    EnvSpec.parse("catch").make()            # frost.rl.envs.Catch()
    EnvSpec.parse("seaquest")                # EnvSpec(name='seaquest', sticky=0.1)
    EnvSpec.parse("breakout", sticky=0)      # MinAtar's Breakout without sticky actions
"""

import dataclasses
import functools

from frost.config import UsageError

# frost.rl.envs.MINATAR, MinAtar's games
MINATAR = ("breakout", "asterix", "freeway", "seaquest", "space_invaders")
JNP_ENVS = ("cartpole", "catch", *MINATAR)  # frost.rl.envs.ENVS's keys, then MINATAR
STICKY = 0.1  # MinAtar's sticky_action_prob, frost.rl.envs.make's default


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    name: str
    sticky: float | None = None  # MinAtar's games: the sticky-action probability; else None

    @classmethod
    def parse(cls, name: str, sticky: float | None = None) -> "EnvSpec":
        """The spec of `name` with `sticky` (None: STICKY for MinAtar's games), or UsageError
        naming what is allowed."""
        if name not in JNP_ENVS and not (name.startswith("gym:") and len(name) > 4):
            raise UsageError(f"--env {name}: choose {', '.join(JNP_ENVS)} or gym:ID")
        if name not in MINATAR:
            if sticky is not None:
                raise UsageError(
                    f"--sticky {sticky}: only MinAtar's games ({', '.join(MINATAR)}) have "
                    "sticky actions"
                )
            return cls(name)
        sticky = STICKY if sticky is None else float(sticky)
        if not 0 <= sticky < 1:
            raise UsageError(f"--sticky {sticky}: must be >= 0 and < 1")
        return cls(name, sticky)

    @property
    def host(self) -> bool:
        """Stepped on the host (gymnasium), not inside the compiled program."""
        return self.name.startswith("gym:")

    @property
    def preset(self) -> str:
        """The key of the hyper-parameter presets: 'gym', 'minatar' (one for MinAtar's games) or
        the jnp env's name."""
        if self.host:
            return "gym"
        return "minatar" if self.name in MINATAR else self.name

    def make(self):
        """The jnp `Env`, or for a host env a picklable factory of gymnasium envs."""
        if self.host:
            import gymnasium

            return functools.partial(gymnasium.make, self.name[4:])
        from frost.rl import envs

        return envs.make(self.name, self.sticky)

    def signature(self) -> tuple[tuple, int]:
        """(observation shape, number of actions)."""
        if not self.host:
            env = self.make()
            return tuple(env.observation_shape), env.num_actions
        probe = self.make()()
        shape, actions = probe.observation_space.shape, int(probe.action_space.n)
        probe.close()
        return shape, actions
