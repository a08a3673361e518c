"""Environments in jax.numpy, so that a whole agent (acting, stepping, learning) compiles into one
program (the Anakin design, Hessel et al. 2021, arXiv 2104.06272; gymnax, Lange 2022).

    env = make("cartpole")                                   # or "catch", "breakout"
    obs, state = env.reset(key)                              # obs: env.observation_shape, float32
    obs, state, reward, done, info = env.step(key, state, action)

Everything is a pure function of its arguments, so `jax.vmap(env.step)` steps a batch of
environments and `lax.scan` runs them for many steps. `step` resets by itself: when an episode
ends (`done = terminated | truncated`, both also in `info`), the returned `obs` and `state` are
those of a fresh episode drawn with `key`, and `reward` is the last reward of the old one.
Each environment is a state NamedTuple and three functions: `init(key) -> state`,
`transition(state, action) -> (state, reward, terminated, truncated)`, `observe(state)`. The
transitions here are deterministic (MinAtar's sticky actions are off), so `step`'s key is the
reset's alone: splitting it every step would cost about a third of CartPole's step.
"""

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from frost.tree import where

i32, f32 = jnp.int32, jnp.float32


class Env:
    observation_shape: tuple
    num_actions: int
    eval_steps: int  # how long an evaluation episode may last

    def reset(self, key):
        state = self.init(key)
        return self.observe(state), state

    def step(self, key, state, action):
        state, reward, terminated, truncated = self.transition(state, action)
        done = terminated | truncated
        state = where(done, self.init(key), state)
        info = {"terminated": terminated, "truncated": truncated}
        return self.observe(state), state, reward.astype(f32), done, info


class CartPoleState(NamedTuple):
    x: jax.Array
    x_dot: jax.Array
    theta: jax.Array
    theta_dot: jax.Array
    t: jax.Array  # steps taken in this episode


class CartPole(Env):
    """gymnasium's CartPole-v1 (Barto, Sutton & Anderson 1983): the same constants and explicit
    Euler step; push left (0) or right (1); reward 1 every step; terminated when |x| > 2.4 or
    |theta| > 12 degrees, truncated after 500 steps; the state starts uniform in (-0.05, 0.05).
    (gymnasium integrates in float64, this in float32.)"""

    observation_shape, num_actions, eval_steps = (4,), 2, 500
    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    x_threshold, theta_threshold, max_steps = 2.4, 12 * 2 * math.pi / 360, 500

    def init(self, key):
        # x, x_dot, theta, theta_dot
        return CartPoleState(*jax.random.uniform(key, (4,), f32, -0.05, 0.05), i32(0))

    def transition(self, s, action):
        total, pole_ml = self.masspole + self.masscart, self.masspole * self.length
        force = jnp.where(action == 1, self.force_mag, -self.force_mag)
        cos, sin = jnp.cos(s.theta), jnp.sin(s.theta)
        temp = (force + pole_ml * s.theta_dot**2 * sin) / total
        theta_acc = (self.gravity * sin - cos * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * cos**2 / total)
        )
        x_acc = temp - pole_ml * theta_acc * cos / total
        new = CartPoleState(
            s.x + self.tau * s.x_dot,
            s.x_dot + self.tau * x_acc,
            s.theta + self.tau * s.theta_dot,
            s.theta_dot + self.tau * theta_acc,
            s.t + 1,
        )
        terminated = (jnp.abs(new.x) > self.x_threshold) | (
            jnp.abs(new.theta) > self.theta_threshold
        )
        return new, jnp.ones((), f32), terminated, new.t >= self.max_steps

    def observe(self, s):
        return jnp.stack([s.x, s.x_dot, s.theta, s.theta_dot])  # (4,)


class CatchState(NamedTuple):
    ball_x: jax.Array
    ball_y: jax.Array
    paddle_x: jax.Array


class Catch(Env):
    """bsuite's Catch (Osband et al. 2020, "Behaviour Suite for Reinforcement Learning"): a ball
    falls one row a step down a random column of a 10 x 5 board; the paddle on the bottom row moves
    left (0), stays (1) or moves right (2); when the ball reaches the bottom row the episode ends
    with reward +1 if the paddle is under it, else -1. The observation is the board, 1 at the ball
    and at the paddle."""

    observation_shape, num_actions, eval_steps = (10, 5), 3, 9
    rows, columns = 10, 5

    def init(self, key):
        return CatchState(
            jax.random.randint(key, (), 0, self.columns, i32), i32(0), i32(self.columns // 2)
        )

    def transition(self, s, action):
        paddle = jnp.clip(s.paddle_x + action - 1, 0, self.columns - 1)
        y = s.ball_y + 1
        done = y == self.rows - 1
        reward = jnp.where(done, jnp.where(paddle == s.ball_x, 1.0, -1.0), 0.0)
        return CatchState(s.ball_x, y, paddle), reward, done, jnp.zeros((), bool)

    def observe(self, s):
        board = jnp.zeros((self.rows, self.columns), f32)  # (10, 5)
        return board.at[s.ball_y, s.ball_x].set(1.0).at[self.rows - 1, s.paddle_x].set(1.0)


class BreakoutState(NamedTuple):
    ball_x: jax.Array
    ball_y: jax.Array
    ball_dir: jax.Array  # 0 up-left, 1 up-right, 2 down-right, 3 down-left
    last_x: jax.Array
    last_y: jax.Array
    paddle: jax.Array
    bricks: jax.Array  # (10, 10) bool
    strike: jax.Array  # the ball hit a brick on the previous step


class Breakout(Env):
    """MinAtar's Breakout (Young & Tian 2019, "MinAtar: An Atari-Inspired Testbed"), step for step
    as `minatar.environments.breakout` with sticky actions off and its minimal action set: no-op
    (0), left (1), right (2). A ball moves diagonally on a 10 x 10 grid under three rows of
    bricks (+1 each, refilled when all are gone); the episode ends when the paddle misses it.
    Observation (10, 10, 4) NHWC, channels paddle, ball, trail (the ball's last cell), brick.
    MinAtar has no time limit; evaluation stops at 1000 steps."""

    observation_shape, num_actions, eval_steps = (10, 10, 4), 3, 1000
    # the new direction per old one: off a side wall, off the top (or a brick, or the paddle's
    # centre), off the paddle's edge
    FLIP_X = (1, 0, 3, 2)
    FLIP_Y = (3, 2, 1, 0)
    PADDLE_EDGE = (2, 3, 0, 1)

    def init(self, key):
        # start at (0, 3) going down-right or (9, 3) down-left
        right = jax.random.randint(key, (), 0, 2, i32)
        x, y = 9 * right, i32(3)
        return BreakoutState(x, y, 2 + right, x, y, i32(4), self.wall(), jnp.zeros((), bool))

    def wall(self):  # a new episode's bricks, and the refill when all are gone: rows 1 to 3
        return jnp.zeros((10, 10), bool).at[1:4].set(True)

    def transition(self, s, action):
        flip_x, flip_y, edge = jnp.array([self.FLIP_X, self.FLIP_Y, self.PADDLE_EDGE], i32)
        paddle = jnp.clip(s.paddle + jnp.where(action == 1, -1, jnp.where(action == 2, 1, 0)), 0, 9)
        x = s.ball_x + jnp.array([-1, 1, 1, -1], i32)[s.ball_dir]
        y = s.ball_y + jnp.array([-1, -1, 1, 1], i32)[s.ball_dir]
        d = jnp.where((x < 0) | (x > 9), flip_x[s.ball_dir], s.ball_dir)  # side wall
        x, top, y = jnp.clip(x, 0, 9), y < 0, jnp.maximum(y, 0)
        brick = ~top & s.bricks[y, x]
        gain = brick & ~s.strike  # a brick breaks only if the last step broke none
        bottom = ~top & ~brick & (y == 9)
        bricks = s.bricks.at[y, x].set(s.bricks[y, x] & ~gain)
        bricks = jnp.where(bottom & ~bricks.any(), self.wall(), bricks)
        centre = bottom & (s.ball_x == paddle)  # straight back up
        side = bottom & ~centre & (x == paddle)  # off the paddle's edge
        d = jnp.where(top | gain | centre, flip_y[d], jnp.where(side, edge[d], d))
        y = jnp.where(gain | centre | side, s.ball_y, y)
        new = BreakoutState(x, y, d, s.ball_x, s.ball_y, paddle, bricks, brick)
        return new, gain.astype(f32), bottom & ~centre & ~side, jnp.zeros((), bool)

    def observe(self, s):
        obs = jnp.zeros((10, 10, 4), f32)  # channels paddle, ball, trail, brick
        obs = obs.at[9, s.paddle, 0].set(1.0).at[s.ball_y, s.ball_x, 1].set(1.0)
        return obs.at[s.last_y, s.last_x, 2].set(1.0).at[:, :, 3].set(s.bricks.astype(f32))


ENVS = {"cartpole": CartPole, "catch": Catch, "breakout": Breakout}


def make(name: str) -> Env:
    if name not in ENVS:
        raise ValueError(
            f"unknown environment {name!r}; the jnp environments are {', '.join(ENVS)}"
        )
    return ENVS[name]()
