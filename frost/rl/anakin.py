"""The Anakin driver (Hessel et al. 2021, "Podracer architectures for scalable reinforcement
learning", arXiv 2104.06272): an agent whose environments are jnp functions trains as one compiled
program; seeds are a `vmap` axis, sharded over the devices with frost.parallel.

    init(key) -> runner                          # one seed's whole training state (a PyTree)
    iteration(runner, _) -> (runner, metrics)    # act, step the envs, learn: one lax.scan body
    runner = run(init, iteration, seeds=[0, 1, 2, 3, 4], iterations=244, on_chunk=log)

`run` compiles `chunk` iterations of every seed into one call and makes as many calls as needed,
so the host sees progress (metrics, a progress bar) between calls while the device never waits
for it within one. Every leaf of the runner and of the metrics has the seed axis first.
"""

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from frost import nn, optim, parallel
from frost.parallel import jit


@dataclasses.dataclass(frozen=True)
class AgentConfig:
    """The hyper-parameters every agent has (frost.rl.dqn's and frost.rl.ppo's `Config` add their
    own; these defaults are DQN's). An iteration of `run` steps each env `num_steps` times."""

    num_envs: int = 8
    total_steps: int = 50_000  # env steps per seed
    lr: float = 5e-4
    gamma: float = 0.99
    hidden: int = 64  # the width of the networks' hidden layers
    num_steps = 1  # not a field here (DQN steps each env once an iteration); PPO's field T

    @property
    def updates(self) -> int:  # iterations of `run`
        return max(self.total_steps // (self.num_envs * self.num_steps), 1)


@jax.custom_batching.sequential_vmap
def _qr(a):
    """jnp.linalg.qr of one matrix, and of a batch (under vmap) one matrix at a time.

    jaxlib 0.10's CPU LAPACK kernels split a batch over XLA's intra-op thread pool and block the
    pool thread that runs them until the pieces are done. A program that runs as many batched
    factorisations at once as the pool has threads (one per core) deadlocks: every thread waits
    for pieces queued behind it. Seeds vmapped over `init` batch every layer's QR, and MuZero's
    five networks make fifteen, so `frost rl muzero --seeds 2` hung on 2 cores (seen with jaxlib
    0.10.2). Looped, each QR is one matrix; the numbers are the same.
    """
    return jnp.linalg.qr(a)


def orthogonal(a, scale: float) -> jax.Array:
    """The orthogonal matrix of a's QR decomposition, signs fixed, times `scale` (Saxe et al. 2014;
    jax.nn.initializers.orthogonal given a's normal draws)."""
    wide = a.shape[0] < a.shape[1]
    q, r = _qr(a.T if wide else a)
    q = q * jnp.sign(jnp.diagonal(r))[None, :]
    return scale * (q.T if wide else q)


def mlp(obs_shape, n_out: int, hidden: int, activation, out_scale: float, *, key) -> nn.Sequential:
    """obs (N, *obs_shape) -> (N, n_out): flatten, two hidden layers, a linear head; orthogonal
    weights (gain sqrt 2, the head's `out_scale`) and zero biases, as CleanRL's and PureJaxRL's
    networks. All weights come from one normal draw: XLA's CPU compiler spends 0.3-1 s on each
    distinct random shape in a program (one ActorCritic: 4.4 s compiling with a draw per layer, 1.4
    s)."""
    sizes = [(math.prod(obs_shape), hidden), (hidden, hidden), (hidden, n_out)]
    draws = jax.random.normal(key, (sum(fan_in * fan_out for fan_in, fan_out in sizes),))
    layers = []
    start = 0  # the layer's first draw
    for i, (fan_in, fan_out) in enumerate(sizes):
        normal = draws[start : start + fan_in * fan_out].reshape(fan_in, fan_out)
        weight = orthogonal(normal, out_scale if i == 2 else math.sqrt(2))
        linear = nn.Linear(fan_in, fan_out, key=key).replace(weight=weight, bias=jnp.zeros(fan_out))
        layers += [linear, activation]
        start += fan_in * fan_out
    return nn.Sequential(nn.Flatten(), *layers[:-1])


def episode_metrics(reward, done, runner) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Track returns across rollouts of reward, done (T, B): the runner's `running` (B,) sums of
    this episode so far, `last_return` () the mean return of the latest episodes to finish.
    Returns (running, last_return, finished episodes)."""

    def step(carry, step_data):
        running, total, count = carry
        reward, done = step_data  # (B,) each
        running = running + reward
        ended = jnp.where(done, running, 0.0).sum()  # the returns of the episodes ending here
        return (jnp.where(done, 0.0, running), total + ended, count + done.sum()), None

    (running, total, count), _ = lax.scan(
        step, (runner.running, jnp.zeros(()), jnp.zeros((), jnp.int32)), (reward, done)
    )
    mean = total / jnp.maximum(count, 1).astype(jnp.float32)
    return running, jnp.where(count > 0, mean, runner.last_return), count


def start(env, network, cfg: AgentConfig, key) -> tuple:
    """An agent's start on `env`: (model, obs, env_state, key), `network(obs_shape, num_actions,
    cfg.hidden, key=)` built from one key, `cfg.num_envs` envs reset from another, and the key
    left for the runner to carry."""
    k_model, k_env, key = jax.random.split(key, 3)
    model = network(env.observation_shape, env.num_actions, cfg.hidden, key=k_model)
    obs, state = jax.vmap(env.reset)(jax.random.split(k_env, cfg.num_envs))
    return model, obs, state, key


def gradient_step(opt, loss, model, opt_state, *args) -> tuple:
    """One step of optimizer `opt` on `loss(model, *args) -> (loss, metrics)`: ((model, opt_state),
    metrics), the model and state after the step."""
    grads, metrics = jax.grad(loss, has_aux=True)(model, *args)
    updates, opt_state = opt.update(grads, opt_state, model)
    return (optim.apply_updates(model, updates), opt_state), metrics


def step_envs(env, key, state, action) -> tuple:
    """Step a batch of environments, each with its own key split from `key`: (obs, state, reward,
    done), each with the batch axis first (`env.step`'s info is dropped)."""
    return jax.vmap(env.step)(jax.random.split(key, action.shape[0]), state, action)[:4]


def chunk_size(iterations: int, calls: int = 20) -> int:
    """The iterations `run` compiles into one call: the largest divisor of `iterations` that is
    at most iterations / calls (at least 1), so that about `calls` calls of one compiled program
    make the run, e.g. chunk_size(244) = 4 (61 calls), chunk_size(240) = 12 (20 calls)."""
    most = max(iterations // calls, 1)
    return max(size for size in range(1, most + 1) if iterations % size == 0)


def run(init, iteration, seeds, iterations: int, on_chunk=None, chunk: int | None = None) -> Any:
    """Train one runner per seed for `iterations` iterations, `chunk` of them a call (default
    `chunk_size(iterations)`); `on_chunk(runner, metrics, done)` after each call, with metrics
    (seeds, chunk, ...) and `done` iterations so far."""
    chunk = chunk or chunk_size(iterations)
    devices = jax.devices()[: math.gcd(len(seeds), jax.device_count())]
    # the seed axis split over them
    seeded = parallel.batch_sharding(parallel.make_mesh(devices=devices))
    keys = jax.device_put(jax.vmap(jax.random.key)(jnp.asarray(seeds, jnp.uint32)), seeded)
    runner = jit(jax.vmap(init), out_shardings=seeded)(keys)
    step = parallel.scan_chunks(
        lambda runners, _: jax.vmap(iteration, in_axes=(0, None))(runners, None), chunk
    )
    for done in range(chunk, iterations + 1, chunk):
        runner, metrics = step(runner, None)
        if on_chunk is not None:  # metrics (seeds, chunk, ...)
            on_chunk(runner, jax.tree.map(lambda m: jnp.swapaxes(m, 0, 1), metrics), done)
    return runner


def evaluate(env, policy, key, episodes: int = 100) -> tuple[jax.Array, jax.Array]:
    """The return of the first episode of each of `episodes` environments under `policy(obs (N,
    ...)) -> actions (N,)`, each with its own randomness (reset, sticky actions), cut at
    `env.eval_steps` steps: (returns (episodes,), cut (episodes,) bool, still running at the
    cut)."""
    reset_key, run_key = jax.random.split(key)
    obs, state = jax.vmap(env.reset)(jax.random.split(reset_key, episodes))

    def body(carry, key):
        obs, state, total, alive = carry
        obs, state, reward, done = step_envs(env, key, state, policy(obs))
        return (obs, state, total + jnp.where(alive, reward, 0.0), alive & ~done), None

    carry = (obs, state, jnp.zeros(episodes), jnp.ones(episodes, bool))
    (_, _, total, alive), _ = lax.scan(body, carry, jax.random.split(run_key, env.eval_steps))
    return total, alive
