"""`frost train MODEL`, `frost sample RUN_DIR`, `frost plot RUN_DIR`.

The options of `train` and `sample` are generated from the job configs (frost.train.configs),
so the help, the README and the jobs share one list; an option that does not apply to the
chosen model (`--vocab-size` for a ResNet) is refused.
"""

from frost.config import Launch, UsageError, add_options, from_args, output_file
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
    add_options(p, [Launch])
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
    command = f"`frost train {args.model}`"
    cfg = from_args(JOBS[args.model], args, command, also=[Launch], model=args.model)
    launch = from_args(Launch, args, command, also=[JOBS[args.model]])
    from frost import parallel
    from frost.train import image, job, lm

    parallel.initialize(launch.coordinator, launch.num_processes, launch.process_id)
    result = job.run(image.ImageJob() if isinstance(cfg, ImageConfig) else lm.LMJob(), cfg)
    after = f"after {result['steps']} steps in {result['seconds'] / 60:.1f} min"
    if "test_accuracy" in result:
        print(f"test accuracy {100 * result['test_accuracy']:.2f}% {after}; run dir {cfg.run_dir}")
    if "val_loss" in result:
        print(
            f"validation loss {result['val_loss']:.4f} {after} "
            f"({result['tokens_per_s']:.0f} tokens/s); "
            f"run dir {cfg.run_dir}; sample:\n{result['sample']}"
        )


def _sample(args):
    from frost.train.lm import sample

    print(sample(from_args(SampleConfig, args, run_dir=args.run_dir)))


def _plot(args):
    if args.output is not None:  # checked as a config's output_file is, before any work
        problem = output_file(args.output)
        if problem:
            raise UsageError(f"--output {args.output!r}: {problem}")
    from frost.train.plot import plot

    print(plot(args.run_dir, args.output))
