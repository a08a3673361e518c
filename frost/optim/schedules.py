"""Learning-rate schedules: functions step -> value, jittable (the step may be a traced int).

Pass one as `learning_rate=` to any optimizer; scale_by_learning_rate evaluates it at its step
count. Names and conventions follow optax where optax has the schedule (decay lengths count
from the start of the decay; `warmup_cosine`'s decay_steps includes the warmup, as optax's).

    warmup_cosine(3e-4, warmup_steps=100, decay_steps=1000)(0)   -> 0.0
                                                           (100) -> 3e-4
                                                          (1000) -> 0.0
"""

import jax.numpy as jnp

from frost.optim.base import Schedule  # step -> value


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
    """The same value at every step (optax.constant_schedule).

    Arguments:
        value: the learning rate (or other hyper-parameter).

    Returns:
        A schedule: step -> () float32 `value`.
    """
    return lambda step: jnp.full((), value, jnp.float32)


def linear(init_value: float, end_value: float, steps: int, begin: int = 0) -> Schedule:
    """init_value until `begin`, then linearly to end_value over `steps` steps, and end_value after
    (optax.linear_schedule, whose `transition_steps` and `transition_begin` these are).

    Arguments:
        init_value: the value up to step `begin`.
        end_value: the value from step `begin + steps` on.
        steps: the length of the ramp.
        begin: the step the ramp starts at.

    Returns:
        A schedule: step -> () float32.
    """
    return lambda step: init_value + (end_value - init_value) * _ramp(step, begin, steps)


def cosine_decay(init_value: float, decay_steps: int, alpha: float = 0.0) -> Schedule:
    """Half a cosine from init_value to alpha·init_value over decay_steps, then constant
    (Loshchilov & Hutter 2017, "SGDR: Stochastic Gradient Descent with Warm Restarts";
    optax.cosine_decay_schedule).

    Arguments:
        init_value: the value at step 0.
        decay_steps: the steps to the end of the decay.
        alpha: the final value as a fraction of init_value.

    Returns:
        A schedule: step -> () float32.
    """
    return lambda step: init_value * ((1 - alpha) * _cos(_ramp(step, 0, decay_steps)) + alpha)


def warmup_cosine(
    peak_value: float,
    warmup_steps: int,
    decay_steps: int,
    init_value: float = 0.0,
    end_value: float = 0.0,
) -> Schedule:
    """Linear warmup init_value -> peak_value, then cosine to end_value at step decay_steps
    (optax.warmup_cosine_decay_schedule).

    Arguments:
        peak_value: the value at the end of the warmup.
        warmup_steps: the warmup's length.
        decay_steps: the step the decay ends at, counted from 0 (the warmup included, as optax).
        init_value: the value at step 0.
        end_value: the value from step decay_steps on.

    Returns:
        A schedule: step -> () float32.
    """
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
    """The one-cycle schedule (Smith & Topin 2017, "Super-Convergence: Very Fast Training of Neural
    Networks Using Large Learning Rates"; optax.cosine_onecycle_schedule, torch OneCycleLR): cosine
    up from peak/div_factor to peak over pct_start of the run, then cosine down to
    peak/(div_factor·final_div_factor).

    Arguments:
        total_steps: the run's length.
        peak_value: the highest value, reached at step int(pct_start·total_steps).
        pct_start: the fraction of the run spent rising.
        div_factor: peak_value / the value at step 0.
        final_div_factor: the value at step 0 / the final value.

    Returns:
        A schedule: step -> () float32.
    """
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
    """Warmup-stable-decay (Hu et al. 2024, "MiniCPM: Unveiling the Potential of Small Language
    Models with Scalable Training Strategies"): linear warmup to peak_value, hold it for
    stable_steps, then decay linearly to end_value over decay_steps, and stay there.

    ```python
    warmup_stable_decay(1.0, 2, 3, 2)  # steps 0..8 -> 0, .5, 1, 1, 1, 1, .5, 0, 0
    ```

    Arguments:
        peak_value: the value held after the warmup.
        warmup_steps: the warmup's length.
        stable_steps: the steps at peak_value after the warmup.
        decay_steps: the decay's length.
        init_value: the value at step 0.
        end_value: the value after the decay.

    Returns:
        A schedule: step -> () float32.
    """
    return _switch(
        warmup_steps,
        linear(init_value, peak_value, warmup_steps),
        linear(peak_value, end_value, decay_steps, warmup_steps + stable_steps),
    )
