"""frost.optim: optax-compatible gradient transformations and named optimizers.

base.py: the protocol (GradientTransformation, chain, apply_updates, masks, hyper-parameters,
and the type aliases ScalarOrSchedule, Schedule, MaskOrFn); transforms.py: small steps;
optimizers.py: named optimizers as chains; schedules.py; scaling.py: fp16 dynamic loss scaling,
an optimizer wrapper; registry.py: optimizers by name, for the CLI and the audit.
"""

from frost.optim import scaling, schedules
from frost.optim.base import (
    HYPERPARAMS,
    EmptyState,
    GradientTransformation,
    MaskedNode,
    MaskedState,
    MaskOrFn,
    PartitionState,
    ScalarOrSchedule,
    Schedule,
    apply_updates,
    call_update,
    chain,
    decay_mask,
    find_states,
    get_hyperparams,
    hyperparam,
    identity,
    map_states,
    masked,
    partition,
    set_hyperparams,
)
from frost.optim.optimizers import adam, adamw, lion, muon, sgd, sophia
from frost.optim.schedules import (
    constant,
    cosine_decay,
    linear,
    one_cycle,
    warmup_cosine,
    warmup_stable_decay,
)
from frost.optim.transforms import (
    AccumulateState,
    AdamState,
    EmaState,
    LearningRateState,
    LionState,
    MuonState,
    ScheduleState,
    SophiaState,
    TraceState,
    WeightDecayState,
    accumulate,
    add_decayed_weights,
    all_finite,
    apply_every,
    clip,
    clip_by_global_norm,
    ema_params,
    gauss_newton_bartlett,
    global_norm,
    hutchinson,
    newton_schulz,
    scale,
    scale_by_adam,
    scale_by_learning_rate,
    scale_by_lion,
    scale_by_muon,
    scale_by_sophia,
    trace,
    update_hessian,
)

__all__ = [name for name in dir() if not name.startswith("_")]
