"""Learning-rate schedules: functions step -> value, jittable (the step may be a traced int).

Pass one as `learning_rate=` to any optimizer; scale_by_learning_rate evaluates it at its step
count. Names and conventions follow optax where optax has the schedule (decay lengths count
from the start of the decay; `warmup_cosine`'s decay_steps includes the warmup, as optax's).

    warmup_cosine(3e-4, warmup_steps=100, decay_steps=1000)(0)   -> 0.0
                                                           (100) -> 3e-4
                                                          (1000) -> 0.0
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp

Schedule = Callable[[jax.Array | int], jax.Array]  # step -> value


def _ramp(step, begin, steps):
    """0 before `begin`, rising linearly to 1 at `begin + steps`, 1 after."""
    return jnp.clip((jnp.asarray(step, jnp.float32) - begin) / max(steps, 1), 0.0, 1.0)


def _cos(frac):
    """Half a cosine from 1 (frac = 0) to 0 (frac = 1)."""
    return 0.5 * (1 + jnp.cos(jnp.pi * frac))


def _cosine(init_value: float, end_value: float, steps: int, begin: int = 0):
    """init_value until `begin`, then half a cosine to end_value over `steps` steps (`linear`'s
    shape)."""
    return lambda step: end_value + (init_value - end_value) * _cos(_ramp(step, begin, steps))


def _switch(boundary: int, before, after):
    """The schedule `before` for steps < boundary, `after` from there on."""
    return lambda step: jnp.where(jnp.asarray(step) < boundary, before(step), after(step))


def constant(value: float) -> Schedule:
    return lambda step: jnp.full((), value, jnp.float32)


def linear(init_value: float, end_value: float, steps: int, begin: int = 0) -> Schedule:
    """init_value until `begin`, then linearly to end_value over `steps` steps
    (optax.linear_schedule)."""
    return lambda step: init_value + (end_value - init_value) * _ramp(step, begin, steps)


def cosine_decay(init_value: float, decay_steps: int, alpha: float = 0.0) -> Schedule:
    """Cosine from init_value to alpha * init_value over decay_steps (Loshchilov & Hutter 2017;
    optax.cosine_decay_schedule)."""
    return lambda step: init_value * ((1 - alpha) * _cos(_ramp(step, 0, decay_steps)) + alpha)


def warmup_cosine(
    peak_value: float,
    warmup_steps: int,
    decay_steps: int,
    init_value: float = 0.0,
    end_value: float = 0.0,
) -> Schedule:
    """Linear warmup init_value -> peak_value, then cosine to end_value at step decay_steps
    (optax.warmup_cosine_decay_schedule)."""
    return _switch(
        warmup_steps,
        linear(init_value, peak_value, warmup_steps),
        _cosine(peak_value, end_value, decay_steps - warmup_steps, warmup_steps),
    )


def one_cycle(
    total_steps: int,
    peak_value: float,
    pct_start: float = 0.3,
    div_factor: float = 25.0,
    final_div_factor: float = 1e4,
) -> Schedule:
    """Smith & Topin 2017: cosine up from peak/div_factor to peak over pct_start of the run, then
    cosine down to peak/(div_factor·final_div_factor) (optax.cosine_onecycle_schedule, torch
    OneCycleLR)."""
    init = peak_value / div_factor
    end = peak_value / (div_factor * final_div_factor)
    up = int(pct_start * total_steps)
    return _switch(
        up, _cosine(init, peak_value, up), _cosine(peak_value, end, total_steps - up, up)
    )


def warmup_stable_decay(
    peak_value: float,
    warmup_steps: int,
    stable_steps: int,
    decay_steps: int,
    init_value: float = 0.0,
    end_value: float = 0.0,
) -> Schedule:
    """Warmup-stable-decay (Hu et al. 2024, MiniCPM): linear warmup to peak_value, hold it for
    stable_steps, then decay linearly to end_value over decay_steps, and stay there.

        warmup_stable_decay(1.0, 2, 3, 2)(0..8) -> 0, .5, 1, 1, 1, 1, .5, 0, 0
    """
    return _switch(
        warmup_steps,
        linear(init_value, peak_value, warmup_steps),
        linear(peak_value, end_value, decay_steps, warmup_steps + stable_steps),
    )
