"""`frost train MODEL`, `frost sample RUN_DIR`, `frost plot RUN_DIR`.

The options of `train` and `sample` are generated from the job configs (frost.train.configs),
so the help, the README and the jobs share one list; an option that does not apply to the
chosen model (`--vocab-size` for a ResNet) is refused.
"""

from frost.config import add_options, from_args
from frost.train.configs import JOBS, ImageConfig, LMConfig, SampleConfig


def add_commands(sub) -> None:
    p = sub.add_parser(
        "train",
        help="train a model on real data",
        description="Train a ResNet on images or a GPT "
        "on text: progress bar, metrics.jsonl, checkpoints and result.json in --out.",
    )
    p.add_argument("model", choices=tuple(JOBS))
    add_options(p, [ImageConfig, LMConfig], labels=["resnets", "gpt"])
    p.add_argument(
        "--resume", action="store_true", help="continue the run in --out from its latest checkpoint"
    )
    p.add_argument(
        "--coordinator",
        help="HOST:PORT of process 0, for multi-process training (or FROST_COORDINATOR)",
    )
    p.add_argument("--num-processes", type=int, help="number of processes (or FROST_NUM_PROCESSES)")
    p.add_argument("--process-id", type=int, help="this process's index (or FROST_PROCESS_ID)")
    p.set_defaults(run=_train)

    p = sub.add_parser(
        "sample", help="generate text from a trained GPT run (or a Hugging Face GPT-2 folder)"
    )
    p.add_argument("run_dir", nargs="?")
    add_options(p, [SampleConfig])
    p.set_defaults(run=_sample)

    p = sub.add_parser("plot", help="plot loss/accuracy curves of a run to PNG")
    p.add_argument("run_dir")
    p.add_argument("-o", "--output", default=None, help="PNG path (default RUN_DIR/curves.png)")
    p.set_defaults(run=_plot)


def _train(args):
    cfg = from_args(JOBS[args.model], args, f"`frost train {args.model}`", model=args.model)
    from frost import parallel
    from frost.train import image, job, lm

    parallel.initialize(args.coordinator, args.num_processes, args.process_id)
    result = job.run(
        image.ImageJob() if isinstance(cfg, ImageConfig) else lm.LMJob(), cfg, resume=args.resume
    )
    after = f"after {result['steps']} steps in {result['seconds'] / 60:.1f} min"
    if "test_accuracy" in result:
        print(f"test accuracy {100 * result['test_accuracy']:.2f}% {after}; run dir {cfg.run_dir}")
    if "validation_loss" in result:
        print(
            f"validation loss {result['validation_loss']:.4f} {after} "
            f"({result['tokens_per_s']:.0f} tokens/s); "
            f"run dir {cfg.run_dir}; sample:\n{result['sample']}"
        )


def _sample(args):
    from frost.train.lm import sample

    print(sample(from_args(SampleConfig, args, run_dir=args.run_dir)))


def _plot(args):
    from frost.train.plot import plot

    print(plot(args.run_dir, args.output))
