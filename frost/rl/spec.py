"""`--env NAME`, parsed once: a jnp environment (frost.rl.envs, stepped inside the compiled
program) or `gym:ID`, a gymnasium environment stepped on the host. Importing this module loads
neither JAX nor gymnasium, so the CLI checks a name before either loads.

    env = EnvSpec.parse("gym:CartPole-v1")   # EnvSpec(name='gym:CartPole-v1')
    env.host, env.preset                     # True, 'gym'
    env.make()                               # a picklable factory of gymnasium envs
    EnvSpec.parse("catch").make()            # frost.rl.envs.Catch()
"""

import dataclasses
import functools

from frost.config import UsageError

JNP_ENVS = ("cartpole", "catch", "breakout")  # the keys of frost.rl.envs.ENVS


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    name: str

    @classmethod
    def parse(cls, name: str) -> "EnvSpec":
        """The spec of `name`, or UsageError naming what is allowed."""
        if name not in JNP_ENVS and not (name.startswith("gym:") and len(name) > 4):
            raise UsageError(f"--env {name}: choose {', '.join(JNP_ENVS)} or gym:ID")
        return cls(name)

    @property
    def host(self) -> bool:
        """Stepped on the host (gymnasium), not inside the compiled program."""
        return self.name.startswith("gym:")

    @property
    def preset(self) -> str:
        """The key of the hyper-parameter presets: the jnp env's name, or 'gym'."""
        return "gym" if self.host else self.name

    def make(self):
        """The jnp `Env`, or for a host env a picklable factory of gymnasium envs."""
        if self.host:
            import gymnasium

            return functools.partial(gymnasium.make, self.name[4:])
        from frost.rl import envs

        return envs.make(self.name)

    def signature(self) -> tuple[tuple, int]:
        """(observation shape, number of actions)."""
        if not self.host:
            env = self.make()
            return tuple(env.observation_shape), env.num_actions
        probe = self.make()()
        shape, actions = probe.observation_space.shape, int(probe.action_space.n)
        probe.close()
        return shape, actions
