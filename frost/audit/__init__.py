"""frost.audit: check an optimizer's claim against a tuned AdamW, in one command (`frost audit`).

workloads.py (a GPT on KJV, an MLP on Fashion-MNIST, two widths each), protocol.py (the grid,
fresh seeds and confidence intervals, divergence, speedup as Wen et al. 2025 define it),
engine.py (runs that differ only in hyper-parameters or seed, vmapped in one compiled program),
run.py (the plan, resumable from OUT/runs/*.json), report.py (report.md, results.json, plots),
cli.py (`frost audit ...`).
"""
