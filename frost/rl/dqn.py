"""DQN (Mnih et al. 2015, "Human-level control through deep reinforcement learning") with double-Q
targets (van Hasselt et al. 2016, arXiv 1509.06461), Anakin style as PureJaxRL's dqn.py: the
replay buffer is a ring of device arrays inside the runner, and one iteration steps B vmapped
environments epsilon-greedily, writes their B transitions, and takes one gradient step on a
uniformly sampled minibatch (once the buffer holds `learning_starts` transitions); every
`target_every` env steps the target network becomes a copy of the online one.
"""

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from frost import nn, optim
from frost.rl.anakin import AgentConfig, episode_metrics, gradient_step, mlp, start, step_envs
from frost.tree import where


@dataclasses.dataclass(frozen=True)
class Config(AgentConfig):
    """AgentConfig's num_envs, total_steps, lr, gamma and hidden, and DQN's own."""

    buffer_size: int = 10_000
    batch_size: int = 64
    eps_start: float = 1.0
    eps_end: float = 0.05
    eps_fraction: float = 0.5  # of total_steps, to fall from eps_start to eps_end
    target_every: int = 500  # env steps
    learning_starts: int = 1_000
    double: bool = True


def network(obs_shape, num_actions: int, hidden: int, *, key) -> nn.Sequential:
    return mlp(obs_shape, num_actions, hidden, nn.ReLU(), 1.0, key=key)


def greedy(model) -> Callable[[jax.Array], jax.Array]:
    return lambda obs: jnp.argmax(model(obs), -1).astype(jnp.int32)


def targets(
    q_next_online, q_next_target, reward, done, gamma: float, double: bool = True
) -> jax.Array:
    """TD targets (N,): r + gamma (1 - d) Q_target(s', a'), with a' = argmax Q_online(s', .)
    (double Q-learning) or argmax Q_target(s', .) (DQN)."""
    best = jnp.argmax(q_next_online if double else q_next_target, -1)
    q_next = jnp.take_along_axis(q_next_target, best[:, None], 1)[:, 0]
    return reward + gamma * (1.0 - done.astype(jnp.float32)) * q_next


class Transition(NamedTuple):
    """One env step (PureJaxRL's `Transition`); the replay buffer is one with a leading axis."""

    obs: jax.Array  # (*obs_shape,) float32
    action: jax.Array  # () int32
    reward: jax.Array  # () float32
    done: jax.Array  # () bool: the episode ended here; next_obs is then the next one's first
    next_obs: jax.Array  # (*obs_shape,) float32


def loss(model, target, batch: Transition, cfg: Config) -> tuple[jax.Array, dict]:
    """Half the squared error between Q(s, a) and the (constant) TD target, over a minibatch, as
    CleanRL's and PureJaxRL's DQN. (Huber's loss, Mnih et al.'s for clipped Atari rewards, grows
    only linearly: on CartPole, returns up to 100, the rare terminal targets then barely pull and Q
    diverged, to 1e5 in 100k steps.)"""
    q = model(batch.obs)  # (N, A)
    q_taken = jnp.take_along_axis(q, batch.action[:, None], 1)[:, 0]
    q_next_online = model(batch.next_obs)  # (N, A): the learning network's, for double Q
    q_next_target = target(batch.next_obs)  # (N, A): the target network's
    y = targets(q_next_online, q_next_target, batch.reward, batch.done, cfg.gamma, cfg.double)
    mse = 0.5 * ((q_taken - jax.lax.stop_gradient(y)) ** 2).mean()
    return mse, {"loss": mse, "q": q_taken.mean()}


# linear from eps_start to eps_end over eps_fraction of the steps, then flat
def epsilon(step, cfg: Config) -> jax.Array:
    return optim.linear(cfg.eps_start, cfg.eps_end, cfg.eps_fraction * cfg.total_steps)(step)


class Runner(NamedTuple):
    model: nn.Sequential
    target: nn.Sequential
    opt_state: tuple
    buffer: Transition  # (buffer_size, ...) each, a ring
    obs: jax.Array  # (B, *obs_shape)
    env_state: tuple
    running: jax.Array
    last_return: jax.Array
    key: jax.Array
    t: jax.Array  # iterations done


def anakin(env, cfg: Config) -> tuple[Callable, Callable]:
    """(init, iteration) for frost.rl.anakin.run; `cfg.updates` iterations make the run."""
    opt = optim.adam(cfg.lr)
    B = cfg.num_envs
    cap = cfg.buffer_size

    def init(key):
        model, obs, state, key = start(env, network, cfg, key)
        row = Transition(obs[0], jnp.int32(0), jnp.float32(0), jnp.bool_(False), obs[0])
        buffer = jax.tree.map(lambda x: jnp.zeros((cap, *x.shape), x.dtype), row)
        return Runner(
            model=model,
            target=model,
            opt_state=opt.init(model),
            buffer=buffer,
            obs=obs,
            env_state=state,
            running=jnp.zeros(B),
            last_return=jnp.zeros(()),
            key=key,
            t=jnp.zeros((), jnp.int32),
        )

    def iteration(r: Runner, _):
        key, k_explore, k_random, k_env, k_batch = jax.random.split(r.key, 5)
        explore = jax.random.uniform(k_explore, (B,)) < epsilon(r.t * B, cfg)
        random = jax.random.randint(k_random, (B,), 0, env.num_actions, jnp.int32)
        action = jnp.where(explore, random, greedy(r.model)(r.obs))
        obs, state, reward, done = step_envs(env, k_env, r.env_state, action)
        rows = (r.t * B + jnp.arange(B)) % cap  # the ring's next B rows
        new = Transition(r.obs, action, reward, done, obs)  # (B, ...) each
        buffer = jax.tree.map(lambda ring, x: ring.at[rows].set(x), r.buffer, new)
        steps = (r.t + 1) * B
        picks = jax.random.randint(k_batch, (cfg.batch_size,), 0, jnp.minimum(steps, cap))
        batch = jax.tree.map(lambda ring: ring[picks], buffer)
        stepped, metrics = gradient_step(opt, loss, r.model, r.opt_state, r.target, batch, cfg)
        learn = steps >= cfg.learning_starts
        model, opt_state = where(learn, stepped, (r.model, r.opt_state))
        # a copy every target_every env steps
        target = where(steps % cfg.target_every < B, model, r.target)
        running, last, episodes = episode_metrics(reward[None], done[None], r)
        r = Runner(
            model=model,
            target=target,
            opt_state=opt_state,
            buffer=buffer,
            obs=obs,
            env_state=state,
            running=running,
            last_return=last,
            key=key,
            t=r.t + 1,
        )
        return r, dict(
            metrics, **{"return": last, "episodes": episodes, "epsilon": epsilon(r.t * B, cfg)}
        )

    return init, iteration
