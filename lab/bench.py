"""What makes the training loop fast on this machine: the step as written and with each speed lever, in ms a
step, tokens/s, GFLOP/s and the share of this machine's own matmul rate at the model's shapes (nanoGPT's MFU;
the rate measured in the same process). The demo's configuration by default; every unseen.py model flag works:

    python lab/bench.py                     # the demo's model
    python lab/bench.py --layout template   # the class hour's live model
"""
import concurrent.futures
import contextlib
import multiprocessing as mp
import os
import random
import sys
import time
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # unseen.py's folder
import logic_data                                              # noqa: E402
from unseen import (batches, compile_blocks, config_from_args, keep_freed_memory, make_model,  # noqa: E402
                    make_optimizer, matmul_rate, parse_args, bf16_native, run_name, set_lr, step_flops,
                    train_step, watch_silence)
import torch                                                   # noqa: E402


@contextlib.contextmanager
def side_by_side(n):
    """n spawned worker processes (a standard pool); whatever stops the bench kills them on its way out."""
    pool = concurrent.futures.ProcessPoolExecutor(n, mp_context=mp.get_context('spawn'))
    try:
        yield pool
    except BaseException:
        for proc in list((getattr(pool, '_processes', None) or {}).values()):
            proc.kill()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def timed_steps(cfg, steps, group=True, threads=None):
    """(input tokens, FLOPs, seconds) of `steps` training steps of a fresh model, after 5 to warm up."""
    if threads:
        torch.set_num_threads(threads)
    keep_freed_memory()
    vocab = logic_data.Vocab(cfg.n_symbols)
    model = make_model(cfg)
    optimizer = make_optimizer(model, cfg)
    if cfg.compile:
        compile_blocks(model)
    data = batches(random.Random(cfg.seed), cfg, vocab, ahead=8 if group else 1)
    tokens = flops = 0
    for step in range(5 + steps):
        if step == 5:
            tokens, flops, t0 = 0, 0, time.time()
        set_lr(optimizer, cfg, step)
        x, y = next(data)
        tokens += (x != vocab.pad).sum().item()
        flops += step_flops(cfg, *x.shape, (y != -1).sum().item(), len(vocab))
        train_step(model, optimizer, x, y)
    return tokens, flops, time.time() - t0


def bench(cfg, steps=40, rounds=2, log=print):
    """The training loop at full problems, as written and with each speed lever: ms a step, tokens/s, GFLOP/s
    and the share of this machine's own matmul rate (nanoGPT's MFU), the best of `rounds`. The last row is
    what lab/grid.py does: one cell per core, one thread each."""
    n, b = os.cpu_count() or 1, cfg.batch_size
    variants = [('float32, as written', dict(precision='fp32', compile=False), {}),
                ('float32, attention and MLP compiled', dict(precision='fp32', compile=True), {})]
    if cfg.precision == 'bf16' or bf16_native(cfg.device):   # (emulated elsewhere: slow)
        variants += [('bfloat16 autocast, as written', dict(precision='bf16', compile=False), {}),
                     ('bfloat16 autocast, attention and MLP compiled', dict(precision='bf16', compile=True),
                      {})]
    variants.append((f'{cfg.precision}, {n} runs side by side, 1 thread each', dict(), dict(parallel=n)))
    variants = variants[:None if cfg.device == 'cpu' else -1]   # side by side: a CPU matter
    best = [None] * len(variants)
    for r in range(rounds):
        for i, (name, over, kw) in enumerate(variants):
            c = replace(cfg, curriculum=0, **over)   # every depth: the full problems
            if 'parallel' in kw:
                with side_by_side(n) as pool:
                    runs = list(pool.map(timed_steps, [replace(c, seed=k) for k in range(n)], [steps] * n,
                                         [True] * n, [1] * n))
                t = max(s for _, _, s in runs)
                tokens, flops = sum(r[0] for r in runs), sum(r[1] for r in runs)
                ms = 1000 * t / steps                         # a step of each, side by side
            else:
                tokens, flops, t = timed_steps(c, steps)
                ms = 1000 * t / steps
            rate = matmul_rate(c)
            row = (ms, tokens / t, flops / t / 1e9, flops / t / rate, rate / 1e9)   # (all cores' rate)
            best[i] = row if best[i] is None or row[1] > best[i][1] else best[i]
            log(f"round {r + 1}/{rounds}: {name:<45} {ms:6.0f} ms a step {tokens / t:9,.0f} tokens/s "
                f"{row[2]:6.1f} GFLOP/s {row[3]:4.0%} of matmul peak")
    lines = [f"| training loop ({run_name(cfg)}, {cfg.n_symbols} symbols, batch {b}, {cfg.device}) "
             "| ms a step | tokens/s | GFLOP/s | matmul peak (GFLOP/s) | share of peak |",
             '|---|---|---|---|---|---|']
    lines += [f"| {name} | {ms:.0f} | {tok:,.0f} | {gf:.1f} | {peak:.0f} | {share:.0%} |"
              for (name, _, _), (ms, tok, gf, share, peak) in zip(variants, best)]
    return '\n'.join(lines)


BENCH_FLAGS = ('unseen', 'steps', 'curriculum', 'eval_every', 'eval_n', 'out', 'ask', 'ckpt', 'problems',
               'compile')


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if any(a in ('-h', '--help') for a in argv):
        print(__doc__.strip() + "\n\nIt takes unseen.py's model and data flags (python unseen.py --help), not "
              + ', '.join('--' + k.replace('_', '-') for k in BENCH_FLAGS) + '.')
        return
    args, plain = parse_args(argv), parse_args([])      # (as parsed: an abbreviation too, --ck for --ckpt)
    wrong = [f"--{k.replace('_', '-')}" for k in BENCH_FLAGS if getattr(args, k) != getattr(plain, k)]
    if wrong:
        sys.exit(f"error: {wrong[0]}: the bench times a fixed number of steps at full problems, as written and "
                 "compiled, and writes nothing; give only model and data flags")
    cfg = config_from_args(args)
    try:
        print(f"training-loop throughput, {run_name(cfg)}, on {cfg.device}", flush=True)
        print(f"\n{bench(cfg)}")
    except KeyboardInterrupt:
        sys.exit('error: interrupted')


if __name__ == '__main__':
    watch_silence()        # the compiles: a line at least every 10 s (a minute in a file)
    main()
