"""
Lemma 4.1 of "To See the Unseen" (arXiv 2604.21632), numerically; then the same collapse in a real model.

Part 1 (default, a few seconds): a softmax classifier z_k = u_k . h on LayerNorm features h (||h|| <= r),
trained with weight decay lambda:  u <- (1 - eta*lambda) u - eta * grad.  Some classes never occur as a
label. The gradient of such a row k is E[p_k(h) h], nearly the same for every unseen k, so for two unseen
classes i, j (p_i, p_j <= p on the training features) the lemma bounds one step by

    ||u_i' - u_j'|| <= (|1 - eta*lambda| + eta * r^2 * p) * ||u_i - u_j||

(|p_i - p_j| <= max(p_i, p_j) |z_i - z_j| and |z_i - z_j| <= r ||u_i - u_j||): a contraction once
r^2 p < lambda. The unseen rows shrink together onto one shared vector (their cosine goes to 1) while the
seen rows stay apart; without weight decay nothing pulls their differences in. The constants are our
reconstruction of the lemma (the paper's proof is not available here).

    python theory_demo.py                                  # GD and SGD, with and without decay, plot
    python theory_demo.py --optimizers adamw               # AdamW: no proof in the paper; see what it does

The same collapse in a real model (a pretrained checkpoint's never-trained tokens, and what they cost when
fine-tuning), and between resets of the names' rows: lab/real_model.py and lab/between_resets.py.
It imports unseen.py for what both share (matplotlib for the plots, the collapse metric, the write check);
unseen.py imports nothing from here.
"""

import argparse
import os
import sys
import time

try:            # Ctrl-C while torch loads (a second or two) gets the one line everything else gets
    import numpy as np

    import logic_data as L
    import unseen   # pyplot, savefig, mean_pairwise_cosine, written_or_gone, replacing
except KeyboardInterrupt:
    sys.exit('error: interrupted')

# -----------------------------------------------------------------------------
# Part 1: the lemma


def layernorm(x):
    """LayerNorm without gain or bias: every feature vector has mean 0 and norm sqrt(width)."""
    x = x - x.mean(axis=1, keepdims=True)
    return x / np.sqrt((x ** 2).mean(axis=1, keepdims=True) + 1e-12)


def make_data(rng, n, width, n_seen, r=1.0, spread=5.0):
    """n LayerNorm features with gain r / sqrt(width), so that ||h|| = r; labels drawn from the first
    n_seen classes only (the rest are never seen). Classes are clusters around random means."""
    means = rng.normal(size=(n_seen, width)) * spread
    y = rng.integers(0, n_seen, size=n)
    return layernorm(means[y] + rng.normal(size=(n, width))) * r / np.sqrt(width), y


def softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def grad(U, H, y):
    """Gradient of the mean cross-entropy wrt U (K x width). Row k: E[(p_k(h) - 1[y=k]) h]."""
    P = softmax(H @ U.T)                   # (n, K)
    P[np.arange(len(y)), y] -= 1.0
    return P.T @ H / len(y)


def unit_rows(E):
    """Each row scaled to length 1 (an all-zero row stays zero)."""
    return E / np.maximum(np.linalg.norm(E, axis=1, keepdims=True), 1e-12)


def pairwise_cosines(E):
    """The cosine of every distinct pair of rows: their distribution, for a histogram (the collapse metric,
    their mean, is unseen.mean_pairwise_cosine)."""
    unit = unit_rows(E)
    i, j = np.triu_indices(len(E), k=1)
    return (unit @ unit.T)[i, j]


def pairwise(rows):
    """(mean pairwise distance, mean pairwise cosine) over the distinct pairs of rows."""
    if len(rows) < 2:
        return np.nan, np.nan
    i, j = np.triu_indices(len(rows), k=1)
    return np.linalg.norm(rows[i] - rows[j], axis=1).mean(), unseen.mean_pairwise_cosine(rows)


def contraction_bound(eta, lam, r, p):
    """The lemma's factor: |1 - eta*lambda| + eta * r^2 * p."""
    return abs(1 - eta * lam) + eta * r ** 2 * p


def train(H, y, K, n_unseen, optimizer='gd', eta=1.0, lam=0.05, steps=2000, batch=32, seed=0, U=None):
    """Train U (from U, or a random start) with the last n_unseen classes never a label; return the
    per-step track of the collapse and of the bound."""
    rng = np.random.default_rng(seed)
    U = rng.normal(size=(K, H.shape[1])) if U is None else np.array(U, dtype=float)
    seen, never = np.arange(K - n_unseen), np.arange(K - n_unseen, K)   # label or never one
    iu, ju = np.triu_indices(n_unseen, k=1)
    m, v = np.zeros_like(U), np.zeros_like(U)          # AdamW moments
    track = {k: [] for k in
             ('dist_unseen', 'cos_unseen', 'dist_seen', 'cos_seen', 'p', 'r', 'ratio', 'bound')}
    for t in range(steps):
        idx = np.arange(len(y)) if optimizer == 'gd' else rng.choice(len(y), batch, replace=False)
        Hb, yb = H[idx], y[idx]
        # p and r on the features this step sees: the lemma's hypotheses
        p = softmax(Hb @ U.T)[:, never].max()
        r = np.linalg.norm(Hb, axis=1).max()
        for name, rows in (('unseen', U[never]), ('seen', U[seen])):
            d, c = pairwise(rows)
            track['dist_' + name].append(d)
            track['cos_' + name].append(c)
        track['p'].append(p)
        track['r'].append(r)
        before = np.linalg.norm(U[never][iu] - U[never][ju], axis=1)
        g = grad(U, Hb, yb)
        if optimizer == 'adamw':                         # decoupled decay, Adam step (no proof for this)
            m = 0.9 * m + 0.1 * g
            v = 0.999 * v + 0.001 * g ** 2
            m_hat, v_hat = m / (1 - 0.9 ** (t + 1)), v / (1 - 0.999 ** (t + 1))
            U = (1 - eta * lam) * U - eta * m_hat / (np.sqrt(v_hat) + 1e-8)
        else:                                            # the lemma's update
            U = (1 - eta * lam) * U - eta * g
        after = np.linalg.norm(U[never][iu] - U[never][ju], axis=1)
        # the worst pair this step; nan once the rows agree to float precision (nothing left to measure)
        measurable = before.min() > 1e-9 * track['dist_unseen'][0]
        track['ratio'].append((after / before).max() if measurable else np.nan)
        track['bound'].append(contraction_bound(eta, lam, r, p))
    return {k: np.array(v) for k, v in track.items()}


def report(name, tr, claimed=True):
    """Print how the collapse went and how the bound held; returns the steps where it failed. Not
    `claimed` (AdamW, which the lemma is not about): the bound is printed for comparison only."""
    measured = ~np.isnan(tr['ratio'])
    held = tr['ratio'][measured] <= tr['bound'][measured] + 1e-12
    contracting = tr['bound'] < 1
    print(f"{name:<22} unseen rows: cos {tr['cos_unseen'][0]:5.2f} -> {tr['cos_unseen'][-1]:5.2f}, "
          f"dist {tr['dist_unseen'][0]:6.2f} -> {tr['dist_unseen'][-1]:6.3f} | seen rows: cos "
          f"{tr['cos_seen'][-1]:5.2f}, dist {tr['dist_seen'][-1]:6.2f} | "
          f"p {tr['p'][-1]:.1e}, r {tr['r'][-1]:.2f}")
    slack = (tr['bound'] - tr['ratio'])[measured][held]
    print(f"{'':<22} bound held on {held.sum()}/{measured.sum()} measured steps (median slack bound - ratio "
          f"{np.median(slack) if held.any() else float('nan'):.1e}); a contraction (bound < 1) on "
          f"{contracting.sum()} steps, from step {np.argmax(contracting) if contracting.any() else '-'}")
    failed = np.flatnonzero(measured)[~held]
    steps = f"{failed[:10].tolist()}{' ...' if len(failed) > 10 else ''}"
    if len(failed) and claimed:
        print(f"{'':<22} bound FAILED on steps {steps}")
    elif len(failed):
        print(f"{'':<22} (for comparison only: the lemma is about GD and SGD, and AdamW's normalised step is "
              f"not bound by it; above it on steps {steps})")
    return failed


def plot_lemma(runs, path):
    """One column per weight decay: the rows' mean pairwise cosine (top) and distance (bottom, log), unseen
    rows red, seen rows blue; GD a thick pale line, SGD a thin dark one over it, so both show where they
    agree; distances below float precision drawn at its floor; the lemma's bound on the unseen rows'
    distance (the per-step factor |1 - eta lambda| + eta r^2 p, multiplied from the start) drawn for GD."""
    plt = unseen.pyplot()
    lams = sorted({lam for _, lam in runs}, reverse=True)
    fig, axes = plt.subplots(2, len(lams), figsize=(6 * len(lams), 7.5), squeeze=False)
    style = dict(gd=dict(lw=5, alpha=0.35), sgd=dict(lw=1.2), adamw=dict(lw=1.2, ls='-.'))
    floor = 1e-12                                       # relative to the start: float precision, near enough
    for col, lam in enumerate(lams):
        top, bottom = axes[0, col], axes[1, col]
        for (opt, l), tr in runs.items():
            if l != lam:
                continue
            for rows, colour in (('unseen', 'tab:red'), ('seen', 'tab:blue')):
                kw = dict(color=colour, label=f'{opt.upper()}: {rows} rows', **style[opt])
                top.plot(tr['cos_' + rows], **kw)
                d = tr['dist_' + rows]
                bottom.semilogy(np.maximum(d, floor * d[0]), **kw)
            if opt == 'gd':
                bound = tr['dist_unseen'][0] * np.cumprod(np.concatenate([[1.0], tr['bound'][:-1]]))
                bottom.semilogy(np.maximum(bound, floor * bound[0]), 'k:', lw=1.5,
                                label="the lemma's bound on the unseen rows (GD)")
        top.set(title=f'weight decay lambda = {lam:g}', ylabel='mean pairwise cosine', ylim=(-0.3, 1.05))
        most = max(max(tr['dist_unseen'].max(), tr['dist_seen'].max()) for tr in runs.values())
        least = floor * min(tr['dist_unseen'][0] for tr in runs.values())
        bottom.axhline(least, color='grey', lw=0.8, ls='--')
        bottom.text(len(tr['cos_unseen']) - 1, least * 3, 'float precision', color='grey', ha='right',
                    fontsize=9)
        bottom.set(xlabel='step', ylabel='mean pairwise distance (log)', ylim=(least / 10, most * 100))
    handles, labels = axes[1, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc='lower center', ncol=3, fontsize=10)
    fig.suptitle('Lemma 4.1: never-seen classes collapse under weight decay\n'
                 '(red: never a label; blue: labels)')
    fig.tight_layout(rect=(0, 0.09, 1, 1))
    unseen.savefig(fig, path)
    plt.close(fig)


def lemma_verdict(runs, failed):
    """The lemma's verdict on the GD/SGD runs {(optimizer, lambda): trace}, and AdamW's in a clause of its
    own: the lemma is about GD's shrinking, AdamW collapses the rows by another route (its normalised step
    moves every never-target row by about the same vector, decay or not)."""
    lines = []
    gd = {k: tr for k, tr in runs.items() if k[0] != 'adamw'}
    if gd:
        decayed = [tr for (o, lam), tr in gd.items() if lam > 0]
        plain = [tr for (o, lam), tr in gd.items() if lam == 0]
        collapsed = all(tr['cos_unseen'][-1] > 0.9 and tr['cos_seen'][-1] < 0.5 for tr in decayed)
        kept = all(tr['cos_unseen'][-1] < 0.9 for tr in plain)
        names = ' and '.join(o.upper() for o in dict.fromkeys(o for o, _ in gd))
        lines.append(f"verdict: under {names}, with weight decay the unseen rows "
                     f"{'collapse' if collapsed else 'do NOT all collapse'} "
                     f"(cosine -> {min(tr['cos_unseen'][-1] for tr in decayed):.2f}) while the seen rows "
                     f"stay apart; without it they {'do not' if kept else 'DO'} collapse. "
                     + ('The bound held on every GD/SGD step.' if not failed
                        else f'The bound failed on {failed} GD/SGD steps.'))
    adam = {lam: tr for (o, lam), tr in runs.items() if o == 'adamw'}
    if adam:
        lines.append('AdamW, not the lemma\'s optimizer (its step is normalised per coordinate, so every '
                     'never-target row moves alike): the unseen rows\' cosine ends at '
                     + ' and '.join(f"{tr['cos_unseen'][-1]:.2f} {'with' if lam else 'without'} weight decay"
                                    for lam, tr in sorted(adam.items(), reverse=True)))
    return '\n'.join(lines)


def lemma(args):
    rng = np.random.default_rng(args.seed)
    H, y = make_data(rng, args.n, args.width, args.classes - args.unseen, args.r)
    print(f"{args.classes} classes ({args.unseen} never seen), {args.n} LayerNorm features of width "
          f"{args.width} (r = {np.linalg.norm(H, axis=1).max():.2f}), eta {args.eta}, {args.steps} steps")
    runs, failed = {}, 0
    t0 = time.time()
    for opt in args.optimizers:
        for lam in (args.lam, 0.0):
            tr = train(H, y, args.classes, args.unseen, opt, args.eta, lam, args.steps, args.batch, args.seed)
            runs[opt, lam] = tr
            bad = report(f'{opt}, lambda={lam:g}', tr, claimed=opt != 'adamw')
            failed += len(bad) if opt != 'adamw' else 0
    path = os.path.join(args.out, 'lemma.png')
    os.makedirs(args.out, exist_ok=True)
    note = unseen.replacing(path)
    plot_lemma(runs, path)
    print('\n' + lemma_verdict(runs, failed))
    print(f"plot: {path}{note}  ({time.time() - t0:.0f} s)")

# -----------------------------------------------------------------------------
# the command line


def main(argv=None):
    p = argparse.ArgumentParser(prog='theory_demo.py', description='Lemma 4.1 numerically: the unseen rows '
                                'of a softmax classifier collapse under weight decay.',
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument('--optimizers', default='gd,sgd', help='comma-separated: gd, sgd, adamw')
    p.add_argument('--eta', type=float, default=1.0, help='step size')
    p.add_argument('--lam', type=float, default=0.05,
                   help='weight decay lambda (a run with 0 is always added)')
    p.add_argument('--r', type=float, default=1.0, help='feature norm (LayerNorm gain r / sqrt(width))')
    p.add_argument('--classes', type=int, default=20, help='number of classes K')
    p.add_argument('--unseen', type=int, default=5, help='classes that never occur as a label')
    p.add_argument('--width', type=int, default=16, help='feature width')
    p.add_argument('--n', type=int, default=512, help='training features')
    p.add_argument('--batch', type=int, default=32, help='SGD / AdamW minibatch')
    p.add_argument('--steps', type=int, default=2000)
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--out', default='runs/theory', help='where the plot goes')
    args = p.parse_args(argv)
    args.optimizers = args.optimizers.split(',')
    bad = [o for o in args.optimizers if o not in ('gd', 'sgd', 'adamw')]
    if bad:
        p.error(f"--optimizers: unknown '{bad[0]}' (choose from gd, sgd, adamw)")
    if not 2 <= args.unseen < args.classes:
        p.error('--unseen must be at least 2 and less than --classes')
    if min(args.width, args.n, args.batch, args.steps) < 2 or args.batch > args.n:
        p.error('--width, --n, --batch and --steps must be >= 2, and --batch <= --n')
    if not all(0 < v <= 1e3 for v in (args.eta, args.lam, args.r)):   # nan and inf fail this too
        p.error(f'--eta, --lam and --r must be numbers in (0, 1000], got {args.eta}, {args.lam}, {args.r} '
                '(the run without weight decay is always added)')
    if args.eta * args.lam >= 2:
        p.error(f'--eta {args.eta} x --lam {args.lam} must be < 2: beyond it weight decay alone blows '
                'the rows up (|1 - eta lambda| >= 1), whatever the lemma says')
    if max(args.classes, args.n) * args.width > 10 ** 7:
        p.error('--classes x --width and --n x --width must be at most 10^7 (the matrices of one run)')
    if not 0 <= args.seed < 2 ** 63:
        p.error(f'--seed {args.seed}: must be in [0, 2^63)')
    if max(args.classes, args.width, args.n, args.steps) > 10 ** 6:
        p.error('--classes, --width, --n and --steps must be at most 10^6')
    if not args.out.strip():
        p.error('--out: an empty path (give a folder name)')
    with unseen.written_or_gone(args.out):   # found now, not after the work; never left empty
        lemma(args)


if __name__ == '__main__':
    if sys.stdout is None:        # started with its output closed (`>&-`): its verdict would reach no one
        sys.exit('error: no standard output (it is closed); give the demo somewhere to print')
    L.stop_on_signals()
    try:
        main()
    except BrokenPipeError:   # `| head`: the reader has gone; stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except KeyboardInterrupt:
        sys.exit('error: interrupted')
    except OSError as e:      # the output on a full disk (> /dev/full)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(f'error: cannot write the output ({e.strerror or e})')
