"""How fast the collapse comes back between resets of the names' rows (unseen.py --forget-every), with the
optimiser people use. The grid's model (lab/grid.py) is trained with resets every 100 steps, its unseen rows'
cosine recorded at every step, with AdamW on the (un)embeddings (the grid's), AdamW at a tenth of the rate, and
plain SGD: AdamW lines them up within tens of steps (its normalised step turns their tiny, shared gradient into
a full-size one), SGD does not move them (10 minutes on one core):

    python lab/between_resets.py
"""
import argparse
import os
import random
import sys
import time

sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)),
                os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]   # lab/ and unseen.py's folder
import torch                                                   # noqa: E402

import grid                                                    # noqa: E402
import logic_data as L                                         # noqa: E402
import unseen                                                  # noqa: E402


# -----------------------------------------------------------------------------
# Part 4: how fast the collapse comes back between resets, with the optimiser people use. The lemma says the
# never-target rows contract under GD with weight decay, slowly where their probability is tiny. AdamW
# divides each coordinate's step by its own running size, so the same tiny, shared gradient becomes a step
# of the full rate, in the same direction for every unseen row: they line up within tens of steps.

RESET_VARIANTS = {   # how the (un)embeddings are trained; everything else is the grid's
    'AdamW at the full rate': None,
    'AdamW, a tenth of the rate on the (un)embeddings': 'tenth',
    'SGD on the (un)embeddings (rate 1, decay per step as AdamW)': 'sgd',
}


def embedding_optimizer(opt, model, cfg, how):
    """unseen.make_optimizer's `opt`, with the (un)embedding matrix moved to a group of its own: AdamW at a
    tenth of the rate, or plain SGD (no momentum) whose weight decay shrinks the rows by as much per step."""
    if how is None:
        return opt
    adamw, rest = opt.optimizers[0], opt.optimizers[1:]
    emb = model.lm_head.weight
    adamw.param_groups[0]['params'] = [p for p in adamw.param_groups[0]['params'] if p is not emb]
    if how == 'tenth':
        adamw.add_param_group(dict(params=[emb], lr=cfg.lr / 10, base_lr=cfg.lr / 10,
                                   weight_decay=cfg.weight_decay))
        return unseen.Optimizers(adamw, *rest)
    sgd = torch.optim.SGD([emb], lr=1.0, weight_decay=cfg.lr * cfg.weight_decay)
    sgd.param_groups[0]['base_lr'] = 1.0
    return unseen.Optimizers(adamw, *rest, sgd)


def train_steps(model, opt, data, cfg, vocab, steps, cos=None):
    """The steps `steps` (a range) of unseen.train's loop, the resets of the names' rows included, without
    its evaluations; with a list `cos`, the unseen rows' mean pairwise cosine before each step goes there."""
    for step in steps:
        if unseen.forgets_at(cfg, step):
            unseen.forget_embeddings(model, opt, vocab.name_ids)
        if cos is not None:
            cos.append(unseen.rows_stats(model, vocab)['cos_unseen'])
        unseen.set_lr(opt, cfg, step)
        unseen.train_step(model, opt, *next(data))


def reset_curves(cfg, start, steps, log=print):
    """{way of training the (un)embeddings: the unseen rows' mean pairwise cosine at each step} for each of
    RESET_VARIANTS: one model trained `start` steps at the full rate with resets of the names' rows every
    cfg.forget_every steps, then `steps` more each way from that same point."""
    vocab = L.Vocab(cfg.n_symbols)
    model = unseen.make_model(cfg)
    opt = unseen.make_optimizer(model, cfg)
    train_steps(model, opt, unseen.batches(random.Random(cfg.seed), cfg, vocab), cfg, vocab, range(start))
    weights, states = model.state_dict(), [o.state_dict() for o in opt.optimizers]
    curves = {}
    for name, how in RESET_VARIANTS.items():
        model = unseen.make_model(cfg, weights)
        base = unseen.make_optimizer(model, cfg)
        for o, state in zip(base.optimizers, states):
            o.load_state_dict(state)
        opt = embedding_optimizer(base, model, cfg, how)
        data = unseen.batches(random.Random(cfg.seed + 1), cfg, vocab)
        cos = curves[name] = []
        train_steps(model, opt, data, cfg, vocab, range(start, start + steps + 1), cos)
        k = cfg.forget_every
        at = lambda phase: [c for i, c in enumerate(cos) if (start + i) % k == phase]
        mean = lambda xs: f"{sum(xs) / len(xs):.2f}" if xs else 'not recorded'   # never a mean of nothing
        log(f"  {name:<62} unseen-row cosine 10 steps after a reset {mean(at(10))}, just before the "
            f"next {mean(at(k - 1))}")
    return curves


def between_resets(args):
    """Part 4 on the grid's model (its standard row with --forget-every at the full rate, float32): from step
    args.reset_start for args.reset_steps steps, and the plot (the resets marked)."""
    cfg = unseen.Config(**grid.GRID, forget_every=grid.GRID_FORGET_EVERY, precision='fp32')
    print(f"between resets: the grid's model ({cfg.n_layer} layers, {cfg.steps}-step schedule), the names' "
          f"rows reset every {cfg.forget_every} steps; {args.reset_start} steps at the full rate, then "
          f"{args.reset_steps} more for each way of training the (un)embeddings ...", flush=True)
    t0 = time.time()
    curves = reset_curves(cfg, args.reset_start, args.reset_steps, log=lambda line: print(line, flush=True))
    print(f"({time.time() - t0:.0f} s)")
    plot_between_resets(curves, cfg, args, os.path.join(args.out, 'between_resets.png'))
    return curves


def plot_between_resets(curves, cfg, args, path):
    plt = unseen.pyplot()
    fig, ax = plt.subplots(figsize=(9, 4))
    steps = range(args.reset_start, args.reset_start + args.reset_steps + 1)
    for name, cos in curves.items():
        ax.plot(steps, cos, label=name)
    for s in steps:
        if unseen.forgets_at(cfg, s):
            ax.axvline(s, color='grey', lw=0.5, ls=':')
    ax.set(xlabel='training step (dotted: a reset of the names\' rows)', ylim=(-0.05, 1.05),
           ylabel='unseen rows: mean pairwise cosine',
           title=f"between resets: the grid's model, from step {args.reset_start}")
    ax.legend(loc='center right', fontsize=8)
    fig.tight_layout()
    note = unseen.replacing(path)
    unseen.savefig(fig, path)
    plt.close(fig)
    print(f"plot: {path}{note}")


def main(argv=None):
    p = argparse.ArgumentParser(prog='lab/between_resets.py', description="The unseen rows' cosine at every "
                                "step between resets of the names' rows: AdamW, a tenth of its rate, and SGD "
                                '(see the top of lab/between_resets.py).')
    p.add_argument('--reset-start', type=int, default=1000, help='the steps trained first')
    p.add_argument('--reset-steps', type=int, default=300, help='the steps recorded, at least one interval '
                   f'between resets ({grid.GRID_FORGET_EVERY})')
    p.add_argument('--out', default='runs/theory', help='where the plot goes')
    args = p.parse_args(argv)
    most, k = grid.GRID['steps'], grid.GRID_FORGET_EVERY
    if args.reset_start < 0 or args.reset_steps < k or args.reset_start + args.reset_steps > most:
        p.error(f'--reset-start {args.reset_start} --reset-steps {args.reset_steps}: the start must be '
                f'>= 0, the steps at least one interval between resets ({k}), and both together at most the '
                f"grid's schedule ({most} steps)")
    if not args.out.strip():
        p.error('--out: an empty path')
    with unseen.written_or_gone(args.out):
        between_resets(args)


if __name__ == '__main__':
    L.stop_on_signals()
    unseen.watch_silence()       # a line at least every 10 s (a minute in a file)
    try:
        main()
    except KeyboardInterrupt:
        sys.exit('error: interrupted')
