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

Part 2: the collapse in a pretrained model. Reserved, never-trained tokens ([unusedN] in BERT vocabularies,
<unusedN> in Gemma) should have embeddings far more alike than ordinary tokens. And if the lemma is right,
every never-trained token sits in one cluster whatever its name: find_cluster finds it without names.

    python theory_demo.py --checkpoint DIR     # DIR holds model.safetensors + vocab.txt/tokenizer.json

Part 3: what the collapse costs. The paper fine-tuned Gemma 3 1B on logic problems written in its unused
tokens and in ordinary ones: ~5000 steps to 90% against ~500. Here a BERT-family checkpoint (its encoder
in plain torch, run left to right with a causal mask, logits through its tied word embeddings) is
fine-tuned on this project's problems written in ordinary words, in its reserved [unusedN] tokens, in
never-trained pieces the cluster finder found (not reserved), and in the reserved tokens with their rows
re-drawn apart (the control: were the collapse alone the cause, this one would learn as fast as ordinary
words; measured, it does not: 74% at step 900, the README's table).

    python theory_demo.py --finetune DIR --quick   # ordinary against reserved names, 100 steps each (5 min)
    python theory_demo.py --finetune DIR           # every set until 90% or 600 steps (under an hour)

The same in miniature, on this project's own model: `unseen.py --grid` fine-tunes its standard model (unseen
rows collapsed) on problems in unseen names from collapsed, fresh and copied rows (unseen.finetune_contrast).

Part 4: how fast the collapse comes back between resets of the names' rows (unseen.py --forget-every), with
the optimiser people use. The grid's model is trained with resets every 100 steps, its unseen rows' cosine
recorded at every step, with AdamW on the (un)embeddings (the grid's), AdamW at a tenth of the rate, and
plain SGD: AdamW lines them up within tens of steps (its normalised step turns their tiny, shared gradient
into a full-size one), SGD does not move them (10 minutes on one core):

    python theory_demo.py --between-resets

Read it as the four demos, in this order: Part 1, the lemma; Part 2, the real checkpoint's reserved tokens
and the cluster finder, then the file readers they use; Part 3, the fine-tuning; Part 4, between resets;
then the command line.
It imports unseen.py for what both share (matplotlib for the plots, the collapse metric, the write check,
and for Part 3 the padding and exact match); unseen.py imports nothing from here.
"""

import argparse
import glob
import json
import os
import random
import re
import struct
import sys
import time
import unicodedata

try:            # Ctrl-C while torch loads (a second or two) gets the one line everything else gets
    import numpy as np
    import torch
    import torch.nn as nn
    from torch.nn import functional as F

    import logic_data as L
    import unseen   # pyplot, savefig, mean_pairwise_cosine, writable; for Part 3 pad_batch and exact_match
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
    plt = unseen.pyplot()
    lams = sorted({lam for _, lam in runs}, reverse=True)
    fig, axes = plt.subplots(2, len(lams), figsize=(5.5 * len(lams), 7), squeeze=False)
    for col, lam in enumerate(lams):
        for (opt, l), tr in runs.items():
            if l != lam:
                continue
            line, = axes[0, col].plot(tr['cos_unseen'], label=f'{opt}: unseen rows')
            axes[0, col].plot(tr['cos_seen'], '--', color=line.get_color(), label=f'{opt}: seen rows')
            axes[1, col].semilogy(tr['dist_unseen'], color=line.get_color(), label=f'{opt}: unseen rows')
            axes[1, col].semilogy(tr['dist_seen'], '--', color=line.get_color(), label=f'{opt}: seen rows')
        axes[0, col].set(title=f'weight decay lambda = {lam:g}', ylabel='mean pairwise cosine',
                         ylim=(-0.3, 1.05))
        axes[1, col].set(xlabel='step', ylabel='mean pairwise distance')
        axes[0, col].legend(fontsize=8)
    fig.suptitle('Lemma 4.1: never-seen classes collapse under weight decay')
    fig.tight_layout()
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
    note = replacing(path)
    plot_lemma(runs, path)
    print('\n' + lemma_verdict(runs, failed))
    print(f"plot: {path}{note}  ({time.time() - t0:.0f} s)")

# -----------------------------------------------------------------------------
# Part 2: a pretrained checkpoint's embeddings: the reserved tokens, and the cluster of never-trained
# tokens found without their names (the files are read by the readers after this part)


def find_cluster(W, tight=0.8, sample=8192, seed=0):
    """The largest tight cluster of rows of W, found without any token's name. Rows are centred (the mean
    row says nothing about which token a row belongs to) and scaled to length 1. The seed is the row with
    the most neighbours at cosine > tight (counted against a random sample of rows, so that a large
    vocabulary costs vocab x sample products, not vocab^2); the centre is the mean of the rows within
    `tight` of it, recomputed until the members stop changing.
    Returns (every row's cosine to the centre, member mask), or None when no two rows are that close."""
    U = unit_rows(W - W.mean(axis=0)).astype(np.float32)
    rng = np.random.default_rng(seed)
    cols = U[rng.choice(len(U), min(sample, len(U)), replace=False)]
    counts = np.concatenate([(U[s:s + 4096] @ cols.T > tight).sum(axis=1) for s in range(0, len(U), 4096)])
    centre, members = U[counts.argmax()], None
    for _ in range(50):
        close = U @ centre
        if members is not None and np.array_equal(close > tight, members):
            break
        members = close > tight
        centre = unit_rows(U[members].mean(axis=0, keepdims=True))[0]
    return (close, members) if members.sum() >= 2 else None


def unreachable_piece(token):
    """A WordPiece token BERT's tokenizer can never produce: '##' + one character it always splits off on
    its own (ASCII or Unicode punctuation, or a CJK ideograph), so the piece never occurs in training."""
    if len(token) != 3 or not token.startswith('##'):
        return False
    o = ord(token[2])
    cjk = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
           (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))
    return (33 <= o <= 47 or 58 <= o <= 64 or 91 <= o <= 96 or 123 <= o <= 126
            or unicodedata.category(token[2]).startswith('P') or any(a <= o <= b for a, b in cjk))


def token_text(token):
    """A token as a quoted one-line string: spaces, tabs and newlines visible."""
    return json.dumps(token, ensure_ascii=False)


def open_checkpoint(ckpt):
    """(name of the embedding matrix, the matrix, the vocabulary checked against it) of a folder."""
    if not os.path.isdir(ckpt):
        raise FileNotFoundError(f"checkpoint folder {ckpt} does not exist")
    name, E = load_embeddings(ckpt)
    return name, E, load_vocab(ckpt, E)


def inspect_checkpoint(args):
    ckpt = args.checkpoint
    name, E, vocab = open_checkpoint(ckpt)
    untied = load_unembedding(ckpt, E)
    print(f"{ckpt}: {name} {E.shape[0]} x {E.shape[1]}"
          + (f", untied: {untied[0]}" if untied else " (tied: the same rows are the unembedding)"))
    os.makedirs(args.out, exist_ok=True)
    unused = sorted(i for t, i in vocab.items() if UNUSED.match(t) and i < len(E))
    pairs = reserved_tokens(E, unused, vocab, args.seed) if unused else None
    if not unused:
        print("  no reserved [unusedN] / <unusedN> tokens in the vocabulary: only the cluster finder below")
    W = untied[1] if untied else E
    found = find_cluster(W, args.tight)
    plot_unused(pairs, found, unused, args, os.path.join(args.out, 'unused_tokens.png'))
    if found is None:
        print(f"  no two rows of the {'unembedding' if untied else 'embedding'} have a centred cosine above "
              f"{args.tight}: no collapsed cluster")
        return
    report_cluster(found, unused, vocab, E if untied else None, args)


def reserved_tokens(E, unused, vocab, seed):
    """Part 2 as the paper does it: the reserved tokens' rows against as many random ordinary rows.
    Returns (their pairwise cosines, the ordinary ones', how many of each) for the plot, or None."""
    special = re.compile(r'^(\[.*\]|<.*>)$')
    ordinary = [i for t, i in vocab.items() if not special.match(t) and i < len(E)]
    if not ordinary:
        print("  no ordinary tokens in the vocabulary to compare the reserved ones with")
        return None
    rng = np.random.default_rng(seed)
    sample = rng.choice(ordinary, size=min(len(unused), len(ordinary)), replace=False)
    zero = [i for i in unused if not np.any(E[i])]
    if zero:   # a zero row has no direction: as collapsed as rows can be, but no cosine to report
        print(f"  {len(zero)} of the {len(unused)} unused tokens have all-zero rows "
              "(no direction, no cosine)")
        unused = [i for i in unused if np.any(E[i])]
    if len(unused) < 2:
        print(f"  {len(unused)} unused token(s) with a nonzero row: too few for a pairwise cosine")
        return None
    cos_unused, cos_ordinary = pairwise_cosines(E[unused]), pairwise_cosines(E[sample])
    for n, rows in ((f'{len(unused)} unused tokens:         ', E[unused]),
                    (f'{len(sample)} random ordinary tokens:', E[sample])):
        print(f"  {n} mean pairwise cosine {unseen.mean_pairwise_cosine(rows):.3f}")
    return cos_unused, cos_ordinary, len(unused), len(sample)


def report_cluster(found, unused, vocab, E_in, args):
    """Print what the cluster finder found and write every token's rank to files in args.out."""
    close, members = found
    name_of = {i: t for t, i in vocab.items()}
    order = np.argsort(-close, kind='stable')
    is_unused = np.zeros(len(close), bool)
    is_unused[unused] = True
    n = int(members.sum())
    print(f"\nnever-trained tokens, found without their names: the largest cluster of centred rows\n"
          f"(the rows within cosine {args.tight} of its centre)")
    print(f"  {n} tokens ({100 * n / len(close):.2f}% of {len(close)}) are in it", end='')
    if unused:
        inside = int((members & is_unused).sum())
        print(f"; {inside} of them are reserved tokens ({inside} of the {len(unused)} reserved tokens in "
              f"the vocabulary)")
    else:
        print()
    ordinary = [i for i in order[:n] if not is_unused[i]]
    print(f"  {len(ordinary)} other tokens in it, the closest to the centre first:")
    for i in ordinary[:args.show]:
        print(f"    {i:>7}  {token_text(name_of.get(i, f'<id {i}>')):<24} cosine {close[i]:.3f}")
    if len(ordinary) > args.show:
        print(f"    ... and {len(ordinary) - args.show} more")
    unreachable = [i for t, i in vocab.items() if i < len(close) and unreachable_piece(t)]
    if unreachable:
        inside = int(members[unreachable].sum())
        print(f"  a check that needs no names: {inside} of the {len(unreachable)} WordPiece tokens '##' + a "
              f"punctuation mark or CJK ideograph are in it\n"
              "    (BERT's tokenizer splits those characters off before WordPiece: "
              "no text ever becomes them)")
    if E_in is not None:   # Magikarp's indicator for untied models: a never-used input row gets no gradient
        norms = np.linalg.norm(E_in, axis=1)
        print(f"  input-row norm (untied): median {np.median(norms[members]):.3g} in the cluster, "
              f"{np.median(norms[~members]):.3g} outside it")
    ranking = os.path.join(args.out, 'token_ranking.tsv')
    others = os.path.join(args.out, 'cluster_other_tokens.txt')
    note = replacing(ranking)
    with unseen.whole(ranking) as part, open(part, 'w', encoding='utf-8') as f:
        f.write('rank\tid\ttoken\tcosine_to_cluster\tin_cluster\treserved\n')
        for rank, i in enumerate(order):
            f.write(f"{rank}\t{i}\t{token_text(name_of.get(i, f'<id {i}>'))}\t{close[i]:.4f}\t"
                    f"{int(members[i])}\t{int(is_unused[i])}\n")
    with unseen.whole(others) as part, open(part, 'w', encoding='utf-8') as f:
        f.writelines(f"{i}\t{token_text(name_of.get(i, f'<id {i}>'))}\t{close[i]:.4f}\n" for i in ordinary)
    print(f"  every token ranked by its cosine to the centre: {ranking}\n"
          f"  the other tokens in the cluster: {others}{note}")


def plot_unused(pairs, found, unused, args, path):
    """Left: pairwise cosines of the reserved tokens against ordinary ones. Right: every token's cosine
    to the cluster's centre, reserved tokens in their own colour."""
    plt = unseen.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4))
    if pairs is not None:
        cos_unused, cos_ordinary, n_unused, n_ordinary = pairs
        bins = np.linspace(-0.5, 1, 76)
        axes[0].hist(cos_ordinary, bins=bins, alpha=0.6, density=True,
                     label=f'{n_ordinary} ordinary tokens (mean {cos_ordinary.mean():.2f})')
        axes[0].hist(cos_unused, bins=bins, alpha=0.6, density=True,
                     label=f'{n_unused} unused tokens (mean {cos_unused.mean():.2f})')
        axes[0].legend()
    axes[0].set(xlabel='pairwise cosine similarity of input embeddings', ylabel='density',
                title='reserved tokens' if pairs is not None else 'no reserved tokens to compare')
    if found is not None:
        close, members = found
        reserved = np.zeros(len(close), bool)
        reserved[unused] = True
        bins = np.linspace(-0.5, 1, 61)
        axes[1].hist([close[~reserved], close[reserved]], bins=bins, stacked=True, log=True,
                     label=['other tokens', 'reserved tokens'])
        axes[1].axvline(args.tight, color='k', ls='--', lw=1, label=f'cluster: cosine > {args.tight} '
                        f'({members.sum()} tokens)')
        axes[1].legend()
    axes[1].set(xlabel="cosine to the cluster's centre (centred rows)", ylabel='tokens',
                title='the cluster, found without names' if found is not None else 'no cluster found')
    where = '/'.join(os.path.normpath(args.checkpoint).split(os.sep)[-2:])
    fig.suptitle(f"{where}: never-trained tokens collapse")
    fig.tight_layout()
    note = replacing(path)
    unseen.savefig(fig, path)
    plt.close(fig)
    print(f"plot: {path}{note}")

# -----------------------------------------------------------------------------
# Part 2's readers: safetensors and vocabulary files, read with numpy and checked (a damaged or hostile
# file is one line of error, never a traceback or a silent wrong answer)

SAFETENSORS_DTYPES = {'F32': np.float32, 'F16': np.float16, 'BF16': np.uint16, 'F64': np.float64}

EMBEDDING_NAMES = ('word_embeddings.weight', 'embed_tokens.weight', 'wte.weight', 'tok_embeddings.weight',
                   'shared.weight')

UNEMBEDDING_NAMES = ('lm_head.weight', 'embed_out.weight')   # (and a bare 'output.weight')

UNUSED = re.compile(r'^(\[unused\d+\]|<unused\d+>)$')


def safetensors_header(path):
    """The JSON header of a .safetensors file: {name: {dtype, shape, data_offsets}} (and __metadata__), and
    where the data start. Checked against the file: a damaged or foreign file gets a ValueError naming it."""
    if not os.path.isfile(path):   # a FIFO or a device would block or never end
        raise ValueError(f"{path}: not a regular file")
    size = os.path.getsize(path)
    with open(path, 'rb') as f:
        if size < 8:
            raise ValueError(f"{path}: {size} bytes, shorter than a safetensors header")
        n = struct.unpack('<Q', f.read(8))[0]
        if n > size - 8:
            raise ValueError(f"{path}: its header claims {n} bytes but the file has only {size - 8} after it")
        if n > FILE_MAX:
            raise ValueError(f"{path}: its header claims {n:,} bytes, more than a header holds (at most "
                             f"{FILE_MAX:,})")
        try:
            header = json.loads(f.read(n), object_pairs_hook=unique_keys)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            raise ValueError(f"{path}: the header is not JSON") from None
        except KeyError as e:
            raise ValueError(f"{path}: the header names tensor {e.args[0]} twice") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: the header is not a JSON object of tensors")
    return header, 8 + n


def unique_keys(pairs):
    """json object_pairs_hook: a dict, or KeyError naming a key given twice (json would keep the last)."""
    d = dict(pairs)
    if len(d) < len(pairs):
        raise KeyError(next(k for i, (k, _) in enumerate(pairs) if k in dict(pairs[:i])))
    return d


def read_tensor(path, name):
    """One tensor of a .safetensors file as float32: a u64 header size, a JSON header, raw little-endian
    arrays. bfloat16 is the upper half of a float32, so it widens by a 16-bit shift."""
    header, start = safetensors_header(path)
    info = header.get(name)
    if not (isinstance(info, dict) and {'dtype', 'shape', 'data_offsets'} <= set(info)):
        raise ValueError(f"{path}: no well-formed entry for tensor {name}")
    if info['dtype'] not in SAFETENSORS_DTYPES:
        raise ValueError(f"{path}: {name} has dtype {info['dtype']}; "
                         f"can read {', '.join(SAFETENSORS_DTYPES)}")
    shape, offsets = info['shape'], info['data_offsets']
    if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)   # (not a bool)
            and isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)):
        raise ValueError(f"{path}: {name} has a malformed shape or data_offsets")
    begin, end = offsets
    itemsize = np.dtype(SAFETENSORS_DTYPES[info['dtype']]).itemsize
    fits = 0 <= begin <= end and start + end <= os.path.getsize(path)
    if not fits or end - begin != int(np.prod(shape)) * itemsize:
        raise ValueError(f"{path}: {name}'s data_offsets {offsets} do not fit its shape {shape} and the file")
    with open(path, 'rb') as f:
        f.seek(start + begin)
        dtype = np.dtype(SAFETENSORS_DTYPES[info['dtype']]).newbyteorder('<')
        raw = np.frombuffer(f.read(end - begin), dtype=dtype)
    if info['dtype'] == 'BF16':
        raw = (raw.astype(np.uint32) << 16).view(np.float32)
    return raw.astype(np.float32).reshape(shape)


FILE_MAX = 64 << 20   # a config, a vocabulary or a safetensors header: far more than any real one holds


def capped(path, what):
    """A file to read whole: a regular file of at most FILE_MAX bytes, else a ValueError naming it."""
    if not os.path.isfile(path):
        raise ValueError(f"{path}: not a regular file ({what})")
    if os.path.getsize(path) > FILE_MAX:
        raise ValueError(f"{path}: {os.path.getsize(path):,} bytes, more than {what} can hold "
                         f"(at most {FILE_MAX:,})")


def read_json(path, what):
    capped(path, what)
    try:
        with open(path, encoding='utf-8') as f:
            return json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise ValueError(f"{path}: not a JSON file ({what})") from None


def tensor_files(ckpt):
    """{tensor name: file} for model.safetensors, or for sharded files listed in the index JSON (which must
    name files inside the checkpoint folder)."""
    index = os.path.join(ckpt, 'model.safetensors.index.json')
    if os.path.isfile(index):
        data = read_json(index, 'the shard index')
        weight_map = data.get('weight_map') if isinstance(data, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise ValueError(f"{index}: no 'weight_map' of tensor names to shard files")
        files = {}
        for name, fn in weight_map.items():
            # the name must stay in the folder; the file may be a link out of it (a Hugging Face cache
            # snapshot links every file into ../../blobs)
            if os.path.isabs(fn) or os.path.normpath(fn).split(os.sep)[0] == '..':
                raise ValueError(f"{index}: shard '{fn}' lies outside {ckpt}; refusing to read it")
            files[name] = os.path.join(ckpt, fn)
        return files
    files = sorted(glob.glob(os.path.join(ckpt, '*.safetensors')))
    if not files:
        raise FileNotFoundError(f"no model.safetensors (or model.safetensors.index.json) in {ckpt}")
    return {name: fn for fn in files for name in safetensors_header(fn)[0] if name != '__metadata__'}


def load_embeddings(ckpt):
    """The token-embedding matrix (vocab x width), found by its usual names."""
    files = tensor_files(ckpt)
    names = sorted((n for n in files if n.endswith(EMBEDDING_NAMES)), key=len)
    if not names:
        raise ValueError(f"no token-embedding matrix in {ckpt}: "
                         f"looked for a tensor named *{', *'.join(EMBEDDING_NAMES)}")
    E = read_tensor(files[names[0]], names[0])
    if E.ndim != 2 or 0 in E.shape:
        raise ValueError(f"{files[names[0]]}: {names[0]} has shape {list(E.shape)}, not a matrix of "
                         "token rows")
    if not np.isfinite(E).all():
        raise ValueError(f"{files[names[0]]}: {names[0]} holds nan or inf")
    if np.allclose(E, E[0]):
        raise ValueError(f"{files[names[0]]}: every row of {names[0]} is the same vector: no cosine "
                         "tells its tokens apart")
    return names[0], E


def load_unembedding(ckpt, E):
    """(name, matrix) of an untied model's unembedding (the output rows, of E's shape), or None when the
    model is tied (no such tensor, or one equal to E)."""
    files = tensor_files(ckpt)
    for name in sorted(files, key=len):
        if name.endswith(UNEMBEDDING_NAMES) or name == 'output.weight':
            shape = safetensors_header(files[name])[0][name].get('shape')
            if shape == list(E.shape):
                W = read_tensor(files[name], name)
                return None if np.array_equal(W, E) else (name, W)
    return None


def load_vocab(ckpt, E):
    """{token: id} from vocab.txt (one token a line) or tokenizer.json (model.vocab and added_tokens),
    checked against the embedding matrix E it names the rows of."""
    vocab, path = read_vocab(ckpt)
    ids = list(vocab.values())
    if any(i < 0 for i in ids) or len(set(ids)) < len(ids):
        raise ValueError(f"{path}: ids must be distinct and >= 0 (one row each)")
    if max(ids, default=-1) >= len(E):
        raise ValueError(f"{path}: {len(vocab)} tokens, ids up to {max(ids)}, but the embedding matrix has "
                         f"{len(E)} rows: they do not belong together")
    return vocab


def read_vocab(ckpt):
    """(vocabulary, the file it came from), unchecked."""
    if os.path.isfile(os.path.join(ckpt, 'vocab.txt')):
        try:
            path = os.path.join(ckpt, 'vocab.txt')
            capped(path, 'a vocabulary')
            with open(path, encoding='utf-8') as f:
                lines = [line.rstrip('\n') for line in f]
        except UnicodeDecodeError:
            raise ValueError(f"{path}: not UTF-8 text (one token a line)") from None
        vocab = {t: i for i, t in enumerate(lines)}
        if len(vocab) < len(lines):
            raise ValueError(f"{path}: a token on two lines (one token, one row)")
        return vocab, path
    if os.path.isfile(os.path.join(ckpt, 'tokenizer.json')):
        path = os.path.join(ckpt, 'tokenizer.json')
        tok = read_json(path, 'a tokenizer')
        model = tok.get('model') if isinstance(tok, dict) else None
        vocab = model.get('vocab') if isinstance(model, dict) else None
        if isinstance(vocab, list):              # Unigram: [[piece, score], ...]
            if not all(isinstance(v, list) and v and isinstance(v[0], str) for v in vocab):
                raise ValueError(f"{path}: model.vocab is a list but not of [piece, score] pairs")
            vocab = {v[0]: i for i, v in enumerate(vocab)}
        if not isinstance(vocab, dict) or not all(type(i) is int for i in vocab.values()):
            raise ValueError(f"{path}: no model.vocab mapping tokens to ids")
        vocab = dict(vocab)
        added = tok.get('added_tokens', [])
        if not isinstance(added, list) or not all(isinstance(t, dict) and isinstance(t.get('content'), str)
                                                  and type(t.get('id')) is int for t in added):
            raise ValueError(f"{path}: added_tokens is not a list of {{content, id}} objects")
        vocab.update({t['content']: t['id'] for t in added})
        return vocab, path
    raise FileNotFoundError(f"no vocab.txt or tokenizer.json in {ckpt}")

# -----------------------------------------------------------------------------
# Part 3: what the collapse costs. Fine-tune the pretrained model on the project's problems, written once in
# ordinary word pieces and once in never-trained tokens, and count the steps each needs (the paper: Gemma 3
# 1B needed ~5000 steps to 90% with its unused tokens, ~500 with ordinary ones)

# the problem's special tokens as BERT word pieces (each a single piece of its vocabulary)
FT_SPECIALS = {'<pad>': '[PAD]', '<eos>': '[SEP]', '->': 'then', '.': '.', '?': '?', ':': ':',
               'T': 'true', 'F': 'false'}

BERT_MAX_PARAMS = 400e6   # --finetune: the largest encoder it builds (AdamW keeps 4 copies in memory)
FT_CHUNK = 128     # --finetune: problems per forward pass (a larger batch is summed from pieces)
QUICK_STEPS = 100   # --quick: the ordinary and the reserved names only, this many steps each
# the flags of each part, refused with another part (where they would change nothing)
PART_FLAGS = {'the lemma': ('optimizers', 'eta', 'lam', 'r', 'classes', 'unseen', 'width', 'n', 'batch',
                            'steps'),
              '--checkpoint': ('tight', 'show'),
              '--finetune': ('quick', 'ft_steps', 'ft_eval', 'ft_batch', 'ft_lr', 'ft_test', 'control',
                             'max_depth', 'layout'),
              '--between-resets': ('reset_start', 'reset_steps')}

PAPER_GEMMA = 'Gemma 3 1B (the paper): ~500 steps to 90% with ordinary tokens, ~5000 with its unused tokens'


class BertSelf(nn.Module):
    """One attention sublayer's heads, under the checkpoint's names (query, key, value)."""

    def __init__(self, C, n_head):
        super().__init__()
        self.n_head = n_head
        self.query, self.key, self.value = nn.Linear(C, C), nn.Linear(C, C), nn.Linear(C, C)

    def forward(self, x, causal):
        B, T, C = x.size()
        q, k, v = [m(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for m in (self.query, self.key, self.value)]                    # (B, nh, T, hs)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)               # (B, nh, T, hs)
        return y.transpose(1, 2).reshape(B, T, C)                                   # (B, T, C)


class BertOut(nn.Module):
    """BERT's post-LayerNorm residual: LayerNorm(x + dense(h)) (GPT's is pre-LayerNorm)."""

    def __init__(self, n_in, C, eps):
        super().__init__()
        self.dense, self.LayerNorm = nn.Linear(n_in, C), nn.LayerNorm(C, eps=eps)

    def forward(self, h, x):
        return self.LayerNorm(x + self.dense(h))


class BertLayer(nn.Module):

    def __init__(self, C, n_head, eps):
        super().__init__()
        self.attention = nn.Module()
        self.attention.self, self.attention.output = BertSelf(C, n_head), BertOut(C, C, eps)
        self.intermediate = nn.Module()
        self.intermediate.dense = nn.Linear(C, 4 * C)
        self.output = BertOut(4 * C, C, eps)

    def forward(self, x, causal):
        x = self.attention.output(self.attention.self(x, causal), x)
        return self.output(F.gelu(self.intermediate.dense(x)), x)


class Bert(nn.Module):
    """A BERT encoder in plain torch, its parameters named as in the checkpoint, so that its weights load
    as they are. Fine-tuned here as a left-to-right language model: a causal mask, and logits through the
    word-embedding matrix (tied, as BERT's masked-LM head is). No dropout."""

    def __init__(self, vocab_size, C, n_head, n_layer, n_pos, eps=1e-12):
        super().__init__()
        self.embeddings = nn.Module()
        e = self.embeddings
        e.word_embeddings, e.position_embeddings = nn.Embedding(vocab_size, C), nn.Embedding(n_pos, C)
        e.token_type_embeddings, e.LayerNorm = nn.Embedding(2, C), nn.LayerNorm(C, eps=eps)
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList([BertLayer(C, n_head, eps) for _ in range(n_layer)])

    def hidden(self, idx, causal=True):
        B, T = idx.size()
        e = self.embeddings
        x = e.word_embeddings(idx) + e.position_embeddings(torch.arange(T, device=idx.device)) \
            + e.token_type_embeddings.weight[0]                                      # (B, T, C)
        x = e.LayerNorm(x)
        for layer in self.encoder.layer:
            x = layer(x, causal)
        return x                                                                     # (B, T, C)

    def forward(self, idx, targets):
        """(logits at the target positions (N, V), loss): the prompt and the padding carry no loss."""
        mask = targets != -1
        logits = self.hidden(idx)[mask] @ self.embeddings.word_embeddings.weight.T   # (N, V)
        return logits, F.cross_entropy(logits, targets[mask])


def load_bert(ckpt, longest=0):
    """A `Bert` with the weights of a BERT-family checkpoint folder (config.json, safetensors), checked to
    read sequences of `longest` tokens."""
    path = os.path.join(ckpt, 'config.json')
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no config.json in {ckpt} (a BERT-family checkpoint folder has one)")
    c = read_json(path, 'the model configuration')
    keys = ('vocab_size', 'hidden_size', 'num_attention_heads', 'num_hidden_layers',
            'max_position_embeddings')
    if not isinstance(c, dict) or not all(type(c.get(k)) is int and c[k] > 0 for k in keys):   # (not a bool)
        raise ValueError(f"{path}: not a BERT configuration (needs positive integers {', '.join(keys)})")
    eps = c.get('layer_norm_eps', 1e-12)
    if type(eps) not in (int, float) or not 0 < eps <= 0.1:      # nan, inf, a string: every arm would read 0%
        raise ValueError(f"{path}: layer_norm_eps {eps!r} is not a number in (0, 0.1]")
    if c.get('hidden_act', 'gelu') != 'gelu' or c['hidden_size'] % c['num_attention_heads'] \
            or c.get('intermediate_size', 4 * c['hidden_size']) != 4 * c['hidden_size']:
        raise ValueError(f"{path}: a BERT variant this reader does not implement (gelu, intermediate "
                         f"4 x hidden, hidden divisible by the heads)")
    V, C, L, P = (c[k] for k in ('vocab_size', 'hidden_size', 'num_hidden_layers', 'max_position_embeddings'))
    params = L * 12 * C * C + (V + P) * C
    if params > BERT_MAX_PARAMS:        # checked before anything is allocated
        raise ValueError(f"{path}: a model of about {params / 1e6:,.0f}M parameters; this demo fine-tunes "
                         f"encoders of at most {BERT_MAX_PARAMS / 1e6:.0f}M (MiniLM has 22M, BERT-base 110M)")
    if longest > P:
        raise ValueError(f"{path}: max_position_embeddings {P}, but these problems take up to {longest} "
                         "tokens (try a smaller --max-depth)")
    model = Bert(V, C, c['num_attention_heads'], L, P, eps)
    want = model.state_dict()
    found = {}
    for name, fn in tensor_files(ckpt).items():
        short = name.removeprefix('bert.')            # BertForMaskedLM and friends prefix the encoder
        if short in want:
            found[short] = torch.from_numpy(read_tensor(fn, name))
            if found[short].shape != want[short].shape:
                raise ValueError(f"{fn}: {name} is {list(found[short].shape)}, the configuration in "
                                 f"{path} makes it {list(want[short].shape)}")
            if not torch.isfinite(found[short]).all():
                raise ValueError(f"{fn}: {name} holds nan or inf")
    missing = sorted(set(want) - set(found))
    if missing:
        raise ValueError(f"{ckpt}: no tensor {missing[0]} (and {len(missing) - 1} more): "
                         "not a BERT checkpoint")
    model.load_state_dict(found)
    return model


def name_sets(vocab, E, n=100):
    """The variables' names, n single word pieces each: {set: [token, ...]}.
      ordinary       whole words of the vocabulary, the first n of 3-8 lowercase letters after its specials
      reserved       [unusedN] / <unusedN>: rows that never received a gradient
      never-trained  unreachable '##' pieces in the collapsed cluster: not reserved, never produced by the
                     tokenizer (unreachable_piece)
    Sets that the vocabulary cannot fill are left out."""
    words = [t for t, i in sorted(vocab.items(), key=lambda kv: kv[1]) if re.fullmatch('[a-z]{3,8}', t)
             and t not in FT_SPECIALS.values()]
    reserved = sorted((i, t) for t, i in vocab.items() if UNUSED.match(t))
    sets = {'ordinary': words[:n], 'reserved': [t for _, t in reserved[:n]]}
    found = find_cluster(E)
    if found is not None:
        sets['never-trained'] = [t for t, i in sorted(vocab.items(), key=lambda kv: kv[1])
                                 if found[1][i] and unreachable_piece(t)][:n]
    return {k: v for k, v in sets.items() if len(v) == n}


def redraw_rows(E, ids, ordinary_ids, seed=0, how='orthogonal'):
    """The control: the rows `ids` re-drawn apart, changing E in place. 'orthogonal': as far from each
    other as ordinary rows are, the ordinary rows' mean plus directions at their typical distance from it,
    orthogonal when the width has room for them (random, nearly orthogonal, when not). 'copies': each a
    copy of a different ordinary row (random; with more ids than ordinary rows, some repeat)."""
    g = torch.Generator().manual_seed(seed)
    if how == 'copies':
        pick = torch.randperm(len(ordinary_ids), generator=g).repeat(len(ids) // len(ordinary_ids) + 1)
        E[ids] = E[torch.tensor(ordinary_ids)[pick[:len(ids)]]]
        return
    mean = E[ordinary_ids].mean(0)
    spread = (E[ordinary_ids] - mean).norm(dim=1).median()
    D = torch.randn(len(ids), E.size(1), generator=g)                           # (n, C)
    if len(ids) <= E.size(1):
        D = torch.linalg.qr(D.T)[0].T                                           # orthonormal rows
    E[ids] = mean + spread * D / D.norm(dim=1, keepdim=True)


class Encoder:
    """The project's problems as BERT token ids: variable i of a problem written with the i-th name of a set,
    the specials as FT_SPECIALS, [CLS] first and [SEP] as the end of the answer."""

    def __init__(self, vocab, names):
        self.vocab, self.names = vocab, names
        self.itos = {i: t for t, i in vocab.items()}
        self.cls = vocab['[CLS]']

    def encode(self, p):
        """(ids, prompt length): [CLS], the prompt up to ':', the chain, true/false, [SEP]."""
        prompt, target = L.problem_tokens(p)
        words = [FT_SPECIALS.get(t) or self.names[int(t[1:])] for t in prompt + target + ['<eos>']]
        return [self.cls] + [self.vocab[w] for w in words], len(prompt) + 1

    def decode(self, ids):
        return ' '.join(self.itos[i] for i in ids)


def batch(encoder, problems, pad):
    """(x, y) as in unseen.make_batch (the same padding): y is x shifted by one, -1 on the prompt."""
    return unseen.pad_batch([encoder.encode(p) for p in problems], pad)


def problems_in_slots(rng, gen, n):
    """n problems over the abstract names a0, a1, ... (slot i becomes the i-th name of a set)."""
    return [L.generate(rng, gen, [f'a{i}' for i in range(100)]) for _ in range(n)]


def finetune_arm(ckpt, vocab, names, control, args, log, clock):
    """Fine-tune a fresh copy of the checkpoint on problems written in `names`; stop at 90% or args.ft_steps.
    Returns the curve [(step, accuracy)]."""
    gen = L.GenConfig(max_depth=args.max_depth, max_premises=1, layout=args.layout)
    torch.manual_seed(args.seed)
    model = load_bert(ckpt, gen.max_tokens() + 1)         # + [CLS]
    E = model.embeddings.word_embeddings.weight
    if control:
        with torch.no_grad():
            redraw_rows(E, [vocab[t] for t in names], [vocab[t] for t in control], args.seed, args.control)
    enc, pad = Encoder(vocab, names), vocab['[PAD]']
    rng = random.Random(args.seed)   # the same problems, in the same order, for every set of names
    test = batch(enc, problems_in_slots(rng, gen, args.ft_test), pad)
    opt = torch.optim.AdamW(model.parameters(), lr=args.ft_lr, weight_decay=0.01)
    curve = []
    for step in range(args.ft_steps + 1):
        if step % args.ft_eval == 0:
            model.eval()
            curve.append((step, accuracy(model, *test)))
            model.train()
            log(f"  step {step:5d} | exact match {100 * curve[-1][1]:5.1f}% | {clock(step)}")
            if curve[-1][1] >= 0.9 or step == args.ft_steps:
                break
        opt.zero_grad(set_to_none=True)
        backward(model, *batch(enc, problems_in_slots(rng, gen, args.ft_batch), pad))
        opt.step()
    return curve


def accuracy(model, x, y):
    """Exact match (greedy, unseen.exact_match) on the problems (x, y), FT_CHUNK at a time."""
    return unseen.exact_match(model, x, y, FT_CHUNK).float().mean().item()


def backward(model, x, y):
    """The gradient of the loss on the batch (x, y), summed from pieces of FT_CHUNK problems (each weighted by
    its share of the targets): the memory of a piece, the gradient of the whole batch."""
    targets = (y != -1).sum()
    for i in range(0, len(x), FT_CHUNK):
        _, loss = model(x[i:i + FT_CHUNK], y[i:i + FT_CHUNK])
        (loss * (y[i:i + FT_CHUNK] != -1).sum() / targets).backward()


def steps_to(curve, level):
    return next((s for s, a in curve if a >= level), None)


def finetune(args):
    """Part 3: fine-tune on each set of names; steps to 50% and 90%, and the curves."""
    ckpt = args.finetune
    _, E, vocab = open_checkpoint(ckpt)
    missing = [w for w in ('[CLS]', '[PAD]', *FT_SPECIALS.values()) if w not in vocab]
    if missing:
        raise ValueError(f"{ckpt}: the vocabulary has no single piece '{missing[0]}' (a BERT WordPiece "
                         "vocabulary has)")
    sets = name_sets(vocab, E)
    if 'ordinary' not in sets or len(sets) < 2:
        raise ValueError(f"{ckpt}: the vocabulary has no 100 ordinary words and 100 reserved or "
                         "never-trained pieces to compare")
    arms = [(k, v, None) for k, v in sets.items() if not args.quick or k in ('ordinary', 'reserved')]
    if 'reserved' in sets and not args.quick:
        label = 'rows re-drawn apart' if args.control == 'orthogonal' else 'rows copied from ordinary words'
        arms.append((f'reserved, {label}', sets['reserved'], sets['ordinary']))
    print(f"fine-tuning {ckpt} on problems of depth 1-{args.max_depth} ({args.layout} layout), batch "
          f"{args.ft_batch}, AdamW lr {args.ft_lr}, until 90% exact match on {args.ft_test} problems or "
          f"step {args.ft_steps}; {torch.get_num_threads()} threads, float32")
    for k, v, control in arms:
        if control:
            continue
        cos = unseen.mean_pairwise_cosine(E[[vocab[t] for t in v]])
        print(f"  {k:14s} {' '.join(v[:6])} ... (mean pairwise cosine of the rows {cos:.2f})")
    start, curves, before = time.time(), {}, 0      # before: the steps the earlier sets took
    for a, (k, names, control) in enumerate(arms):
        print(f"{k}:")
        t0 = time.time()

        def clock(step):   # the ETA assumes this set and the rest run to the last step (at 90% one stops)
            done, left = before + step, (len(arms) - a) * args.ft_steps - step
            eta = f"{(time.time() - start) / done * left / 60:.0f} min at most" if done else '-'
            return f"{time.time() - t0:5.0f} s | ETA {eta}"
        curves[k] = finetune_arm(ckpt, vocab, names, control, args, print, clock)
        before += curves[k][-1][0]
    print(f"\nsteps to 50% and 90% (batch {args.ft_batch}), trained in {(time.time() - start) / 60:.1f} min:")
    for k, curve in curves.items():
        s = [steps_to(curve, lv) for lv in (0.5, 0.9)]
        print(f"  {k:30s} " + '   '.join(f"{lv}: {x if x is not None else f'not by step {curve[-1][0]}'}"
                                          for lv, x in zip(('50%', '90%'), s))
              + f"   (last {100 * curve[-1][1]:.1f}%)")
    print(f"  {PAPER_GEMMA}")
    os.makedirs(args.out, exist_ok=True)
    plot_finetune(curves, args, os.path.join(args.out, 'finetune_real.png'))


def plot_finetune(curves, args, path):
    plt = unseen.pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for k, curve in curves.items():
        ax.plot(*zip(*[(s, 100 * a) for s, a in curve]), marker='.', label=k)
    ax.axhline(90, color='k', ls=':', lw=1)
    where = '/'.join(os.path.normpath(args.finetune).split(os.sep)[-2:])
    ax.set(xlabel=f'fine-tuning step (batch {args.ft_batch})', ylabel='exact match, %', ylim=(-2, 102),
           title=f"{where}: the same problems, four sets of names")
    ax.legend()
    fig.tight_layout()
    note = replacing(path)
    unseen.savefig(fig, path)
    plt.close(fig)
    print(f"plot: {path}{note}")

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
    cfg = unseen.Config(**unseen.GRID, forget_every=unseen.GRID_FORGET_EVERY, precision='fp32')
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
    note = replacing(path)
    unseen.savefig(fig, path)
    plt.close(fig)
    print(f"plot: {path}{note}")

# -----------------------------------------------------------------------------
# the command line


def replacing(path):
    """What a run says of an output that a run before it left in --out: it replaces it, aloud."""
    return ' (it replaces the one an earlier run left there)' if os.path.exists(path) else ''


def main(argv=None):
    p = argparse.ArgumentParser(prog='theory_demo.py', description='Lemma 4.1 numerically, and unused-token '
                                'collapse in a real checkpoint.',
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
    p.add_argument('--checkpoint', metavar='DIR', help='inspect a Hugging Face style checkpoint instead')
    p.add_argument('--tight', type=float, default=0.8,
                   help='--checkpoint: the cluster holds the centred rows within this cosine of its centre')
    p.add_argument('--show', type=int, default=12,
                   help='--checkpoint: how many other cluster tokens to print')
    p.add_argument('--finetune', metavar='DIR', help='fine-tune this BERT-family checkpoint on problems '
                   'written in ordinary, reserved and never-trained tokens (Part 3)')
    p.add_argument('--quick', action='store_true', help=f'--finetune: ordinary and reserved names only, '
                   f'{QUICK_STEPS} steps each: the gap after the same number of steps (5 minutes)')
    p.add_argument('--ft-steps', type=int, default=600, help='--finetune: the most steps a set of names gets')
    p.add_argument('--ft-eval', type=int, default=50, help='--finetune: evaluate every this many steps')
    p.add_argument('--ft-batch', type=int, default=32, help='--finetune: problems per step')
    p.add_argument('--ft-lr', type=float, default=1e-4, help='--finetune: AdamW learning rate')
    p.add_argument('--ft-test', type=int, default=200, help='--finetune: held-out test problems')
    p.add_argument('--control', choices=('orthogonal', 'copies'), default='orthogonal',
                   help='--finetune: the reserved rows re-drawn before fine-tuning as orthogonal '
                   "directions at the ordinary rows' distance, or as copies of ordinary rows")
    p.add_argument('--max-depth', type=int, default=2, help='--finetune: longest derivation (2: short '
                   'sequences, cheap steps; the names are what is compared)')
    p.add_argument('--layout', choices=L.LAYOUTS, default='template',
                   help="--finetune: the problems' layout (logic_data.py)")
    p.add_argument('--between-resets', action='store_true', help="Part 4: the unseen rows' cosine at every "
                   "step between resets of the names' rows, AdamW against a tenth of its rate and SGD")
    p.add_argument('--reset-start', type=int, default=None, help='--between-resets: the steps trained first '
                   '(default 1000)')
    p.add_argument('--reset-steps', type=int, default=None, help='--between-resets: the steps recorded, at '
                   f'least one interval between resets ({unseen.GRID_FORGET_EVERY}; default 300)')
    p.add_argument('--out', default='runs/theory', help='where the plot (and the token lists) go')
    args = p.parse_args(argv)
    changed = {k for k, v in vars(args).items() if v != p.get_default(k)}   # as typed
    given = lambda keys: [k for k in keys if k in changed]
    if args.quick and given(('ft_steps', 'ft_eval')):
        p.error(f"--quick sets --ft-steps {QUICK_STEPS} and --ft-eval 25; give --quick or those, not both")
    if args.quick:
        args.ft_steps, args.ft_eval = QUICK_STEPS, 25
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
    if not 0 < args.tight < 1 or args.show < 0:
        p.error(f'--tight must be in (0, 1) and --show >= 0, got {args.tight} and {args.show}')
    if not 0 <= args.seed < 2 ** 63:
        p.error(f'--seed {args.seed}: must be in [0, 2^63)')
    if max(args.classes, args.width, args.n, args.steps) > 10 ** 6:
        p.error('--classes, --width, --n and --steps must be at most 10^6')
    if min(args.ft_steps, args.ft_eval, args.ft_batch, args.ft_test) < 1 or not 0 < args.ft_lr < 1:
        p.error('--ft-steps, --ft-eval, --ft-batch and --ft-test must be >= 1, --ft-lr in (0, 1)')
    if args.ft_steps > 100_000 or args.ft_batch > 1024 or args.ft_test > 10_000:
        p.error('--ft-steps at most 100000, --ft-batch at most 1024, --ft-test at most 10000 '
                '(a fine-tuning demo on a CPU)')
    paths = (('--checkpoint', args.checkpoint), ('--finetune', args.finetune), ('--out', args.out))
    empty = [f for f, v in paths if v is not None and not v.strip()]
    if empty:
        p.error(f"{' '.join(empty)}: an empty path (give a folder name)")
    if not 1 <= args.max_depth <= 6:
        p.error('--max-depth must be 1 to 6')
    if args.checkpoint and args.finetune:
        p.error('--checkpoint and --finetune: one at a time')
    if args.between_resets and (args.checkpoint or args.finetune):
        p.error(f"--between-resets and {'--checkpoint' if args.checkpoint else '--finetune'}: one at a time")
    part = ('--checkpoint' if args.checkpoint else '--finetune' if args.finetune else
            '--between-resets' if args.between_resets else 'the lemma')
    for owner, keys in PART_FLAGS.items():   # a flag of another part would be silently ignored
        other = given(keys) if owner != part else []
        if other:
            p.error(f"--{other[0].replace('_', '-')} goes with {owner}" + (' (without --checkpoint, '
                    '--finetune or --between-resets)' if owner == 'the lemma' else ''))
    if part == '--between-resets' and given(('seed',)):
        p.error("--seed goes with the lemma, --checkpoint or --finetune (--between-resets: the grid's "
                'seed 0)')
    args.reset_start = 1000 if args.reset_start is None else args.reset_start
    args.reset_steps = 300 if args.reset_steps is None else args.reset_steps
    most, k = unseen.GRID['steps'], unseen.GRID_FORGET_EVERY
    if args.reset_start < 0 or args.reset_steps < k or args.reset_start + args.reset_steps > most:
        p.error(f'--reset-start {args.reset_start} --reset-steps {args.reset_steps}: the start must be '
                f'>= 0, the steps at least one interval between resets ({k}), and both together at most the '
                f"grid's schedule ({most} steps)")
    with unseen.written_or_gone(args.out):   # found now, not after the work; never left empty
        if args.checkpoint or args.finetune:
            try:
                inspect_checkpoint(args) if args.checkpoint else finetune(args)
            except BrokenPipeError:
                raise
            except (OSError, ValueError, KeyError) as e:
                sys.exit(f"error: {e}")
        elif args.between_resets:
            between_resets(args)
        else:
            lemma(args)


if __name__ == '__main__':
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
