"""`frost audit`: check optimizers against a tuned AdamW under one protocol
(frost/audit/protocol.py).

    frost audit [--workload gpt|image|all] [--optimizers adamw,lion,sophia,muon]
                [--optimizer MODULE:FUNC ...] [--data PATH] [--budget S] [--quick]
                [--seeds N|auto] [--max-seeds N] [--claim NAME=X ...]
                [--sizes WxD,...] [--tokens-per-param R] [--plan] [--mesh runs=N] [--out DIR]
                [--coordinator HOST:PORT --num-processes P --process-id I]
    frost audit --reproduce OUT [--sample N] [--mesh runs=N]

The options are generated from `AuditConfig` (frost.config).
No JAX is imported until the audit starts, so `frost --help` stays fast.
"""

import dataclasses
import re

from frost import config
from frost.config import Checked, UsageError, add_options, from_args, needs, option, optional, whole


def _names(text):
    from frost.optim.registry import NAMES  # the one optimizer table (imports JAX: not at parse)

    # an empty name ("adamw,,lion", "lion,") is refused with the unknown ones
    names = text.split(",")
    if any(name not in NAMES for name in names) or len(set(names)) < len(names):
        return f"must be distinct names from {', '.join(NAMES)}, separated by commas"


@dataclasses.dataclass(frozen=True)
class AuditConfig(Checked):
    workload: str = option(
        "all",
        "gpt (a GPT on KJV), image (an MLP on Fashion-MNIST), or all; each at two widths",
        choices=("gpt", "image", "all"),
    )
    optimizers: str = option(
        "adamw,lion,sophia,muon",
        "built-in optimizers to audit, comma-separated (AdamW, the "
        "reference, is always added): the names `frost train --optimizer` takes, and "
        "sgd-nesterov (= sgd)",
        _names,
    )
    optimizer: tuple[str, ...] = option(
        (),
        "a user optimizer MODULE:FUNCTION, make(learning_rate, **hyperparams) -> an "
        "optax-style GradientTransformation, or (it, eval_params(params, state)) (repeatable)",
    )
    claim: tuple[str, ...] = option(
        (),
        "NAME=SPEEDUP: a paper's claimed step speedup over AdamW, judged by the report's verdict "
        "table (repeatable, one per optimizer, e.g. --claim sophia=2 --claim lion=1.5)",
    )
    data: str | None = option(
        None,
        "a UTF-8 text file (with --workload gpt) or an image folder with train/ and "
        "optionally test/ (with --workload image); default KJV and Fashion-MNIST",
    )
    budget: int | None = option(
        None,
        "training steps of each tuning run (a multiple of 10; default: 300 for gpt, "
        "400 for image, about a third of that with --quick)",
        optional(whole(20)),
    )
    sizes: str | None = option(
        None, "GPTs in place of gpt-s, gpt-m: WIDTHxDEPTH,... (e.g. 64x2,128x4) or gpt2-small"
    )
    tokens_per_param: float | None = option(
        None,
        "tokens per parameter that set the GPTs' steps (with --sizes: 20)",
        optional(config.positive),
    )
    seeds: int | str = option(
        3,
        "fresh seeds the best configuration is rerun on, or auto: 3 more at a time until every "
        "claim (without --claim: every speedup against 1) is decided, up to --max-seeds",
        lambda x: None if x == "auto" else whole(3)(x) and "must be auto or a whole number >= 3",
    )
    max_seeds: int = option(10, "the most seeds --seeds auto reruns", whole(3))
    quick: bool = option(
        False,
        "a first look in minutes: the smaller width, one weight decay and key value, "
        "a third of the steps",
    )
    mesh: str | None = option(
        None,
        "runs=N: train N batches of vmapped runs at once, each on its own device (the same "
        "numbers as one device's)",
    )
    plan: bool = option(False, "print the runs, FLOPs, memory and time it would take; train none")
    out: str = option(
        "audit",
        "output folder: runs/*.json, results.json, report.md, PNG plots",
        config.output_folder,
    )
    reproduce: str | None = option(
        None,
        "OUT: rerun a seed-fixed sample of the audit in OUT; say whether each run matches",
    )
    sample: int = option(5, "runs --reproduce reruns", whole(1))

    def check(self):
        needs("matplotlib", "frost audit (its plots)", "'frost[plot]'")
        if self.reproduce is not None:  # OUT's config.json holds the other options
            for field in dataclasses.fields(self):
                given = getattr(self, field.name) != field.default
                # (the mesh changes no number: the devices at hand)
                if given and field.name not in ("reproduce", "sample", "data", "mesh"):
                    raise UsageError(
                        f"--reproduce: takes OUT's options from it; drop --{field.name}"
                    )
        if self.max_seeds != 10 and self.seeds != "auto":
            raise UsageError(f"--max-seeds {self.max_seeds}: caps --seeds auto; give --seeds auto")
        if self.budget is not None and self.budget % 10:
            raise UsageError(
                f"--budget {self.budget}: must be a multiple of 10 (steps run in chunks of 10)"
            )
        for name, value in (("sizes", self.sizes), ("tokens-per-param", self.tokens_per_param)):
            if value is not None and self.workload == "image":
                raise UsageError(f"--{name} {value}: sets the GPTs; give --workload gpt or all")
        if self.tokens_per_param is not None and self.budget is not None:
            raise UsageError("--tokens-per-param: sets the steps; drop --budget")
        if self.data is not None and self.workload == "all":
            raise UsageError(
                f"--data {self.data}: say which workload it is for: --workload gpt (a text file) "
                "or --workload image (an image folder)"
            )
        from frost.audit.workloads import ladder
        from frost.optim.registry import resolve

        ladder("gpt", self.sizes)  # UsageError for a bad size
        for name in self.optimizer:
            if ":" not in name:
                raise UsageError(
                    f"--optimizer {name!r}: give MODULE:FUNCTION (built-ins go in --optimizers)"
                )
            resolve(name)  # UsageError if it does not import
        claimed = {}  # {optimizer: its --claim}
        for claim in self.claim:
            name, _, value = claim.partition("=")
            if name not in self.names:
                raise UsageError(
                    f"--claim {claim!r}: give NAME=SPEEDUP for an audited optimizer "
                    f"({', '.join(self.names)})"
                )
            if not re.fullmatch(r"[0-9]*\.?[0-9]+", value) or float(value) == 0:
                raise UsageError(f"--claim {claim!r}: the speedup must be a number > 0")
            # one verdict per optimizer: the interval is the same, whatever the number claimed
            if name in claimed:
                raise UsageError(
                    f"--claim {claim!r}: {name} is claimed already (--claim {claimed[name]}); "
                    "give one claim per optimizer (the report's interval answers any other)"
                )
            claimed[name] = claim

    @property
    def claims(self) -> dict:
        """{optimizer: claimed step speedup over tuned AdamW}."""
        pairs = [claim.partition("=") for claim in self.claim]
        return {name: float(speedup) for name, _, speedup in pairs}

    @property
    def names(self) -> list[str]:
        listed = self.optimizers.split(",")
        adamw = [] if "adamw" in listed else ["adamw"]
        return adamw + listed + list(dict.fromkeys(self.optimizer))


def add_commands(sub) -> None:
    parser = sub.add_parser(
        "audit",
        help="audit optimizers against a tuned AdamW (equal tuning, fresh seeds, CIs)",
        description="Tune every optimizer on the same grid, rerun the best on fresh seeds, and "
        "write report.md, results.json, runs/*.json and plots to --out. A restarted "
        "audit skips the runs already on disk.",
    )
    add_options(parser, [AuditConfig, config.Launch])
    parser.set_defaults(run=_audit)


def _audit(args):
    cfg = from_args(AuditConfig, args, "`frost audit`", also=[config.Launch])
    launch = from_args(config.Launch, args, "`frost audit`", also=[AuditConfig])
    from frost import parallel
    from frost.audit import run

    parallel.initialize(launch.coordinator, launch.num_processes, launch.process_id)
    if cfg.reproduce is not None:
        return run.reproduce(cfg)
    if cfg.plan:
        return run.audit(cfg)  # prints the plan
    print(f"report: {run.audit(cfg)}")
