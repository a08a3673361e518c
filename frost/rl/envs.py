"""Environments in jax.numpy, so that a whole agent (acting, stepping, learning) compiles into one
program (the Anakin design, Hessel et al. 2021, arXiv 2104.06272; gymnax, Lange 2022): CartPole
(Barto, Sutton & Anderson 1983) and bsuite's Catch (Osband et al. 2020) here, and MinAtar's five
games (Young & Tian 2019) in frost.rl.minatar, all made by `make`.

```python
env = make("cartpole")                 # or "catch"; "breakout", "asterix", "freeway", "seaquest",
                                       # "space_invaders" (sticky=0.1, MinAtar's sticky actions)
obs, state = env.reset(key)            # obs: env.observation_shape, float32
obs, state, reward, done, info = env.step(key, state, action)
```

Everything is a pure function of its arguments, so `jax.vmap(env.step)` steps a batch of
environments and `lax.scan` runs them for many steps. `step` resets by itself: when an episode
ends (`done = terminated | truncated`, both also in `info`), the returned `obs` and `state` are
those of a fresh episode drawn with `key`, and `reward` is the last reward of the old one.
Each environment here is a state NamedTuple and three functions: `init(key) -> state`,
`transition(state, action) -> (state, reward, terminated, truncated)`, `observe(state)`. Their
transitions are deterministic, so `step`'s key is the reset's alone: splitting it every step
would cost about a third of CartPole's step. MinAtar's games draw randomness every step (sticky
actions, spawns) and build their own `step` (frost.rl.minatar.Game).
"""

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from frost.tree import PyTree, where

i32, f32 = jnp.int32, jnp.float32


class Env:
    """An environment as pure functions: a subclass defines `init(key) -> state`,
    `transition(state, action) -> (state, reward, terminated, truncated)` and `observe(state) ->
    obs`, and the class attributes below; `reset` and `step` are built from them (MinAtar's games,
    frost.rl.minatar.Game, build their own `step`, which draws from the key every step). One
    environment, unbatched: `jax.vmap` steps many.

    Attributes:
        observation_shape: the shape of an observation (float32).
        num_actions: the discrete actions, 0 .. num_actions - 1.
        eval_steps: how long an evaluation episode may last.
    """

    observation_shape: tuple
    num_actions: int
    eval_steps: int  # how long an evaluation episode may last

    def reset(self, key: jax.Array) -> tuple[jax.Array, PyTree]:
        """A new episode.

        Arguments:
            key: a PRNG key (`jax.random.key`), for the start state.

        Returns:
            (obs, state): the first observation, `observation_shape` float32, and the state.
        """
        state = self.init(key)
        return self.observe(state), state

    def step(
        self, key: jax.Array, state: PyTree, action: jax.Array
    ) -> tuple[jax.Array, PyTree, jax.Array, jax.Array, dict]:
        """One step, resetting by itself: where the episode ends, the returned observation and
        state are those of a new episode drawn with `key`, and the reward is the old one's last.

        Arguments:
            key: a PRNG key (`jax.random.key`), used only for the reset.
            state: the environment's state (its state NamedTuple).
            action: () int32, the action.

        Returns:
            (obs, state, reward, done, info): the next observation (`observation_shape`
            float32) and state, the reward () float32, done () bool (terminated or truncated),
            and info {"terminated": () bool, "truncated": () bool}, as gymnasium's step.
        """
        state, reward, terminated, truncated = self.transition(state, action)
        done = terminated | truncated
        state = where(done, self.init(key), state)
        info = {"terminated": terminated, "truncated": truncated}
        return self.observe(state), state, reward.astype(f32), done, info


class CartPoleState(NamedTuple):
    """CartPole's state, each field a () array.

    Attributes:
        x: the cart's position (float32).
        x_dot: its velocity.
        theta: the pole's angle from upright, in radians.
        theta_dot: its angular velocity.
        t: () int32, the steps taken in this episode.
    """

    x: jax.Array
    x_dot: jax.Array
    theta: jax.Array
    theta_dot: jax.Array
    t: jax.Array  # steps taken in this episode


class CartPole(Env):
    """gymnasium's CartPole-v1 (Barto, Sutton & Anderson 1983, "Neuronlike adaptive elements that
    can solve difficult learning control problems"): the same constants and explicit Euler step;
    push left (0) or right (1); reward 1 every step; terminated when |x| > 2.4 or |theta| > 12
    degrees, truncated after 500 steps; the state starts uniform in (-0.05, 0.05). The
    observation is (x, x_dot, theta, theta_dot), (4,) float32. (gymnasium integrates in float64,
    this in float32.)"""

    observation_shape = (4,)
    num_actions = 2
    eval_steps = 500
    # gymnasium's constants
    gravity = 9.8
    masscart = 1.0
    masspole = 0.1
    length = 0.5  # half the pole's length
    force_mag = 10.0
    tau = 0.02  # seconds between steps
    x_threshold = 2.4
    theta_threshold = 12 * 2 * math.pi / 360
    max_steps = 500

    def init(self, key):
        # x, x_dot, theta, theta_dot
        return CartPoleState(*jax.random.uniform(key, (4,), f32, -0.05, 0.05), i32(0))

    def transition(self, state, action):
        total_mass = self.masspole + self.masscart
        polemass_length = self.masspole * self.length
        force = jnp.where(action == 1, self.force_mag, -self.force_mag)
        cos = jnp.cos(state.theta)
        sin = jnp.sin(state.theta)
        temp = (force + polemass_length * state.theta_dot**2 * sin) / total_mass
        theta_acc = (self.gravity * sin - cos * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * cos**2 / total_mass)
        )
        x_acc = temp - polemass_length * theta_acc * cos / total_mass
        new = CartPoleState(
            state.x + self.tau * state.x_dot,
            state.x_dot + self.tau * x_acc,
            state.theta + self.tau * state.theta_dot,
            state.theta_dot + self.tau * theta_acc,
            state.t + 1,
        )
        terminated = (jnp.abs(new.x) > self.x_threshold) | (
            jnp.abs(new.theta) > self.theta_threshold
        )
        return new, jnp.ones((), f32), terminated, new.t >= self.max_steps

    def observe(self, state):
        return jnp.stack([state.x, state.x_dot, state.theta, state.theta_dot])  # (4,)


class CatchState(NamedTuple):
    """Catch's state, each field a () int32 array.

    Attributes:
        ball_x: the ball's column.
        ball_y: the ball's row, 0 at the top.
        paddle_x: the paddle's column (it moves on the bottom row).
    """

    ball_x: jax.Array
    ball_y: jax.Array
    paddle_x: jax.Array


class Catch(Env):
    """bsuite's Catch (Osband et al. 2020, "Behaviour Suite for Reinforcement Learning"): a ball
    falls one row a step down a random column of a 10 x 5 board; the paddle on the bottom row moves
    left (0), stays (1) or moves right (2); when the ball reaches the bottom row the episode ends
    with reward +1 if the paddle is under it, else -1. The observation is the board, 1 at the ball
    and at the paddle."""

    observation_shape = (10, 5)
    num_actions = 3
    eval_steps = 9
    rows = 10
    columns = 5

    def init(self, key):
        return CatchState(
            jax.random.randint(key, (), 0, self.columns, i32), i32(0), i32(self.columns // 2)
        )

    def transition(self, state, action):
        paddle = jnp.clip(state.paddle_x + action - 1, 0, self.columns - 1)
        y = state.ball_y + 1
        done = y == self.rows - 1
        reward = jnp.where(done, jnp.where(paddle == state.ball_x, 1.0, -1.0), 0.0)
        return CatchState(state.ball_x, y, paddle), reward, done, jnp.zeros((), bool)

    def observe(self, state):
        board = jnp.zeros((self.rows, self.columns), f32)  # (10, 5)
        board = board.at[state.ball_y, state.ball_x].set(1.0)
        return board.at[self.rows - 1, state.paddle_x].set(1.0)


ENVS = {"cartpole": CartPole, "catch": Catch}
# MinAtar's games, frost.rl.minatar.GAMES's keys (imported when made: frost.rl.minatar imports Env
# from here)
MINATAR = ("breakout", "asterix", "freeway", "seaquest", "space_invaders")


def make(name: str, sticky: float | None = None) -> Env:
    """The environment called `name`.

    Arguments:
        name: "cartpole" or "catch" (the keys of ENVS), or one of MinAtar's games: "breakout",
            "asterix", "freeway", "seaquest" or "space_invaders" (MINATAR; frost.rl.minatar).
        sticky: MinAtar's games: the probability that a step repeats the previous action
            (MinAtar's sticky actions); None for MinAtar's default, 0.1; 0 for none. CartPole
            and Catch have none.

    Returns:
        A new `Env` of that kind.

    Raises:
        ValueError: `name` is not one of them, or `sticky` is given for CartPole or Catch.
    """
    if name in ENVS:
        if sticky:
            raise ValueError(f"sticky={sticky}: {name} has no sticky actions (MinAtar's games do)")
        return ENVS[name]()
    if name in MINATAR:
        from frost.rl import minatar

        return minatar.GAMES[name](0.1 if sticky is None else sticky)
    raise ValueError(
        f"unknown environment {name!r}; the jnp environments are {', '.join([*ENVS, *MINATAR])}"
    )


def __getattr__(name: str):
    """`envs.Breakout` and `envs.BreakoutState`, which moved to frost.rl.minatar (PEP 562: looked
    up when first asked for, as frost.rl.minatar imports this module)."""
    if name in ("Breakout", "BreakoutState"):
        from frost.rl import minatar

        return getattr(minatar, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
