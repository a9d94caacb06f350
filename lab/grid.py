r"""The paper's table as cells: every configuration it compares, on the same problems and budget.

One cell is one (row, seed) training run, or the fine-tuning contrast; each is a command of its own that writes
one JSON file into the grid's folder (cells/) and nothing else, so any engine that runs a list of commands runs
the grid, and a restart re-runs only the cells whose file is missing:

    python lab/grid.py --quick                        # every missing cell here (a process each), then the table
    python lab/grid.py --quick --cells | tr '\n' '\0' | xargs -0 -P 2 -I{} sh -c '{}'   # by xargs, a line whole
    python lab/grid.py --quick --cells | parallel -j 2                     # ... by GNU parallel
    python lab/grid.py --quick --table runs/grid-quick                    # the table of whatever cells are there

Every cell trains with one thread (the matrices are too small to split well over cores: lab/bench.py), so a
cell's figures are the same whichever engine ran it. The full grid: 20 rows x 2 seeds, about 3.6 h on 2 cores.
"""
import argparse
import concurrent.futures
import copy
import json
import math
import os
import random
import re
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # unseen.py's folder
import torch                                                   # noqa: E402
import torch.nn.functional as F                                # noqa: E402

import logic_data                                              # noqa: E402
from unseen import (Config, batches, cos_str, eval_sets, evaluate, evaluate_shapes,  # noqa: E402
                    hardware, held_out_mean, lock, make_optimizer, pyplot, rows_stats, run_name, savefig,
                    set_lr, shape_sets, train, train_step, watch_silence, whole, writable, acc_str)

# one setting for every row: the demo's task and training on derivations of depth 1-2, 4 layers of 4 heads,
# chains as drawn, the demo's earlier problem sizes (no idle problems), 3000 steps, the last weights; --quick: six
# rows, one seed, 1000 steps. Rows differ only in the paper's switches (grid_rows).
GRID = dict(n_symbols=5000, max_depth=2, n_layer=4, n_head=4, balance=False, max_facts=4, max_dead=3,
            max_side=2, idle=0.0, steps=3000, eval_every=500, eval_n=500, ema=0.0)
GRID_QUICK = dict(GRID, steps=1000, eval_n=300)
GRID_FORGET_EVERY = 100                          # resets every K steps: all through, or until halfway
GRID_EMB_LR = 0.1                                # ... with the names' rows at a tenth of the rate (--emb-lr)
GRID_POOLS = (250, 500, 1000, 2000)              # smaller training pools than GRID's: the diversity curve
GRID_FT = (1500, 50)                             # fine-tuning: most steps, evaluate every
GRID_FT_QUICK = (300, 50)                        # (--quick)
FINETUNE = 'fine-tuning contrast'                # the cell that fine-tunes the standard model (seed: the first)
CELL_MAX = 16 << 20                              # a cell file: far beyond what a cell writes

# -----------------------------------------------------------------------------
# the rows, and one cell's run


def grid_rows(base, quick=False, only=None):
    """(label, config) for every row of the table; `quick`: six of them; `only`: rows whose label holds it."""
    if only:
        return [(label, cfg) for label, cfg in grid_rows(base, quick) if only in label]
    c = lambda **kw: replace(base, **kw)
    forget, N = dict(forget_every=GRID_FORGET_EVERY, emb_lr=GRID_EMB_LR), base.steps // 2
    copy_attn, pointer = dict(copy_attn=True), dict(copy_attn=True, copy_form='pointer')
    rows = [c(), c(identity=False),                                  # what the identity terms buy
            c(**copy_attn), c(**pointer),                            # copy attention alone, both forms
            c(freeze_emb=True), c(freeze_emb=True, **copy_attn),     # frozen (un)embeddings
            c(freeze_unused=True),                                   # only the never-target rows frozen
            c(**forget), c(**forget, **copy_attn),                   # resets all through training
            c(**forget, forget_until=N),                             # temporary forgetting
            c(**forget, forget_until=N, **pointer),
            c(tie_emb=False)]
    if quick:   # the collapse, the paper's fixes, the practitioner's row
        rows = [c(), c(**copy_attn), c(freeze_emb=True), c(freeze_emb=True, **copy_attn),
                c(freeze_unused=True), c(**forget)]
        return [(run_name(r), r) for r in rows]
    pools = [(f'{run_name(r)}, {n} symbols', replace(r, n_symbols=n))       # diversity: fewer training names
             for n in GRID_POOLS for r in (c(), c(freeze_emb=True))]
    return [(run_name(r), r) for r in rows] + pools


def accuracy_keys():
    """What the grid keeps of a run's last evaluation: each scenario's exact match, and on T and F."""
    return [k for s in logic_data.SCENARIOS for k in (s, s + '_T', s + '_F')]


def cells(base, seeds, quick=False, only=None):
    """[(label, config)]: every row with every seed, then (if the standard row is in) the fine-tuning cell."""
    todo = [(label, replace(cfg, seed=seed)) for label, cfg in grid_rows(base, quick, only) for seed in seeds]
    if any(label == 'standard' for label, _ in todo):
        todo.append((FINETUNE, replace(base, seed=seeds[0])))
    return todo


def slug(label):
    """A row's name as one word, for a command line and a file name: 'copy-attn + freeze-emb' ->
    'copy-attn-freeze-emb' (no quotes to lose in xargs or a SLURM script)."""
    return re.sub(r'[^a-z0-9.]+', '-', label.lower()).strip('-')


def cell_file(out, label, seed):
    """Where a cell writes its result: out/cells/<the row's slug>-seed<seed>.json."""
    return os.path.join(out, 'cells', f'{slug(label)}-seed{seed}.json')


def run_cell(label, cfg, quick):
    """Train one row's model (or fine-tune the standard one) with one thread; returns the cell's result."""
    torch.set_num_threads(1)
    t = time.time()
    log = lambda line: print(f"[{label}, seed {cfg.seed}] {line.strip()}", flush=True)   # each minute at least
    if label == FINETUNE:
        model, vocab, _ = train(cfg, log=log)                   # the standard row's run of this seed, again
        steps, every = GRID_FT_QUICK if quick else GRID_FT
        ft = {}
        for rows in FT_STARTS:
            ft[rows] = finetune_small(model, vocab, cfg, rows, steps, every, log=log)
        return dict(row=label, seed=cfg.seed, config=asdict(cfg), wall=time.time() - t,
                    cos_unseen=rows_stats(model, vocab)['cos_unseen'], max_steps=steps, eval_every=every,
                    finetune={rows: dict(steps_to_90=s, history=h) for rows, (s, h) in ft.items()})
    model, vocab, history = train(cfg, log=log)
    log("testing the shapes it never trained on")
    last = history[-1]
    held = held_out_mean(evaluate_shapes(model, vocab, shape_sets(cfg, vocab), cfg.device))
    keys = [*accuracy_keys(), 'cos_unseen', 'norm_unseen', 'norm_train']     # the last evaluation's
    return dict(row=label, seed=cfg.seed, **{k: last[k] for k in keys}, held_none=held['none'],
                held_all=held['all'], wall=time.time() - t, config=asdict(cfg),
                curve=[[h['step'], h['all'], h['cos_unseen']] for h in history],   # for grid_curves
                **{k: last[k] for k in ('all_before_reset', 'cos_before_reset') if k in last})


def read_cell(path, cfg, label=None):
    """A cell's file: its result, or ValueError in one line where it is damaged, edited or of other settings:
    every key the table reads is there and well typed (its row the file's label, accuracies in [0, 1], a
    wall of seconds >= 0, finite figures, a curve of (step, accuracy), the fine-tuning's histories)."""
    try:
        with open(path, 'rb') as f:                 # read with a bound (a device file has no size)
            raw = f.read(CELL_MAX + 1)
        if len(raw) > CELL_MAX:
            raise ValueError('far larger than a cell writes')
        r = json.loads(raw.decode('utf-8-sig'))     # (a byte-order mark an editor added: read)
        if not isinstance(r, dict) or not isinstance(r.get('config'), dict):
            raise ValueError('not a cell of this grid')
    except (OSError, ValueError, RecursionError) as e:
        raise ValueError(f"{path}: unreadable ({e}); remove it and run the cell again") from None
    theirs, ours = r['config'], json.loads(json.dumps(asdict(cfg)))
    differ = sorted(k for k in {*theirs, *ours} if theirs.get(k) != ours.get(k) or type(theirs.get(k)) is not
                    type(ours.get(k)))      # (1 and 1.0, 1 and true: edited)
    if differ:
        k = differ[0]
        raise ValueError(f"{path}: written by other settings ({k} {theirs.get(k)!r}, this grid: {ours.get(k)!r}); "
                         "give the same settings, or another --out (the file is kept)")
    number = lambda v, low=-math.inf, high=math.inf: type(v) in (int, float) and low <= v <= high
    share = lambda v: number(v, 0, 1)
    points = lambda v, n: isinstance(v, list) and all(isinstance(p, list) and len(p) == n and number(p[0], 0)
                                                      and share(p[1]) and all(map(number, p[2:])) for p in v)
    fine = r.get('row') == FINETUNE
    wanted = {'wall': lambda v: number(v, 0)}
    if fine:
        wanted['finetune'] = lambda v: isinstance(v, dict) and v and all(
            isinstance(h, dict) and points(h.get('history'), 2) and h['history'] for h in v.values())
    else:
        wanted.update({k: share for k in [*accuracy_keys(), 'held_none', 'held_all']},
                      cos_unseen=lambda v: number(v, -1, 1), norm_unseen=lambda v: number(v, 0),
                      norm_train=lambda v: number(v, 0), curve=lambda v: points(v, 3))
    bad = next((k for k, ok in wanted.items() if not ok(r.get(k))), None)
    if not isinstance(r.get('row'), str) or (label is not None and r['row'] != label):
        bad = 'row'
    if bad:
        cell = f"the cell {label!r}" if label else 'a cell'
        raise ValueError(f"{path}: its {bad} is {str(r.get(bad))[:60]!r}, not what {cell} writes; remove it and "
                         "run the cell again")
    return r


# -----------------------------------------------------------------------------
# the fine-tuning contrast: the standard model fine-tuned on problems in its unseen names, from collapsed,
# fresh or copied rows (lab/real_model.py --finetune does it on a real checkpoint)

FT_STARTS = ('collapsed', 'fresh', 'copied')


@torch.no_grad()
def set_unseen_rows(model, vocab, rows):
    """The unseen symbols' (un)embedding rows at the start of fine-tuning (see `finetune_small`)."""
    unseen, seen = torch.tensor(vocab.unseen_ids), torch.tensor(vocab.train_ids)
    for w in model.embeddings():
        w.requires_grad_(True)     # fine-tuning trains everything, a frozen model's (un)embeddings too
        if rows == 'fresh':
            norm = w[seen].norm(dim=1).mean()
            w[unseen] = F.normalize(torch.randn(len(unseen), w.size(1)), dim=1).to(w) * norm
        elif rows == 'copied':
            pick = torch.randperm(len(seen))[:len(unseen)] if len(seen) >= len(unseen) else \
                torch.randint(len(seen), (len(unseen),))      # a pool smaller than the unseen one: repeats
            w[unseen] = w[seen[pick]]
        elif rows != 'collapsed':
            raise ValueError(f'unknown rows {rows!r}')
    return model


def finetune_small(model, vocab, cfg, rows, max_steps, eval_every, target=0.9, log=lambda line: None):
    """Fine-tune a trained model on problems in the unseen symbols, its unseen rows `collapsed` (as trained),
    `fresh` (random, of the training rows' norm) or `copied` (from training rows). Returns (steps until it
    solves `target` of the 'all' test problems or None, history [(step, accuracy)])."""
    torch.manual_seed(cfg.seed)
    model = set_unseen_rows(copy.deepcopy(model).train(), vocab, rows)
    ft = replace(cfg, freeze_emb=False, freeze_unused=False, forget_every=0, curriculum=0, steps=max_steps,
                 warmup=0)
    optimizer = make_optimizer(model, ft)
    test = {'all': eval_sets(cfg, vocab)['all']}
    data = batches(random.Random(cfg.seed + 1), ft, vocab, names=vocab.unseen_names)
    history = []
    for step in range(max_steps + 1):
        if step % eval_every == 0 or step == max_steps:
            history.append((step, evaluate(model, vocab, test, cfg.device)['all']))
            log(f"fine-tuning from {rows} rows: step {step}, all {history[-1][1]:.1%}")
            if history[-1][1] >= target:
                return step, history
            if step == max_steps:
                return None, history
        set_lr(optimizer, ft, step)
        train_step(model, optimizer, *next(data))


# -----------------------------------------------------------------------------
# the table: from whatever cells are there


def mean_range(xs, fmt):
    """'mean (min-max)' over seeds."""
    m = sum(xs) / len(xs)
    return fmt(m) if len(xs) == 1 else f"{fmt(m)} ({fmt(min(xs))}-{fmt(max(xs))})"


def grid_table(results, base):
    pct = lambda v: f"{100 * v:.1f}"
    avg = lambda rs, key: sum(r[key] for r in rs) / len(rs)
    mean = lambda rs, key: 100 * avg(rs, key)
    tf = lambda rs, s: f"{mean(rs, s + '_T'):.0f} / {mean(rs, s + '_F'):.0f}"
    lines = [f"| configuration ({base.n_symbols} training symbols unless named) | none | query | "
             "query T / F | all | all T / F | held-out shapes, training / unseen names | unseen-row cosine | "
             "row norm, unseen / training | wall (s) |", '|---' * 10 + '|']
    for label in dict.fromkeys(r['row'] for r in results):
        rs = [r for r in results if r['row'] == label]
        cells = [mean_range([r['none'] for r in rs], pct)]
        for s in ('query', 'all'):
            cells += [mean_range([r[s] for r in rs], pct), tf(rs, s)]
        cells += [f"{mean(rs, 'held_none'):.1f} / {mean(rs, 'held_all'):.1f}",
                  mean_range([r['cos_unseen'] for r in rs], cos_str),
                  f"{avg(rs, 'norm_unseen'):.2f} / {avg(rs, 'norm_train'):.2f}",
                  mean_range([r['wall'] for r in rs], lambda v: f"{v:.0f}")]
        lines.append(f"| {label} | " + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def grid_curves(results):
    """Every row's exact match with every name unseen at each evaluation, mean over seeds (%)."""
    labels = list(dict.fromkeys(r['row'] for r in results if r['curve']))
    steps = sorted({p[0] for r in results for p in r['curve']})
    lines = ['| configuration | ' + ' | '.join(f'step {s}' for s in steps) + ' |',
             '|---' * (len(steps) + 1) + '|']
    for label in labels:
        at = lambda s: [p[1] for r in results if r['row'] == label for p in r['curve'] if p[0] == s]
        lines.append(f'| {label} | ' + ' | '.join(f'{100 * sum(at(s)) / len(at(s)):.1f}' if at(s) else '-'
                                                 for s in steps) + ' |')
    return '\n'.join(lines)


def diversity_plot(results, path, title):
    """Exact match with every name unseen and the unseen rows' cosine against the training pool's size."""
    plt = pyplot()
    fig, (acc, cos) = plt.subplots(1, 2, figsize=(10, 4))
    for name in ('standard', 'freeze-emb'):
        runs = [r for r in results if r['row'].split(',')[0] == name]
        pools = sorted({r['config']['n_symbols'] for r in runs})
        mean = lambda key, n: sum(r[key] for r in runs if r['config']['n_symbols'] == n) / \
            sum(r['config']['n_symbols'] == n for r in runs)
        acc.plot(pools, [100 * mean('all', n) for n in pools], 'o-', label=name)
        cos.plot(pools, [mean('cos_unseen', n) for n in pools], 'o-', label=name)
    acc.set(ylabel='exact match, every name unseen (%)', ylim=(0, 100))
    cos.set(ylabel='unseen rows: mean pairwise cosine', ylim=(-0.05, 1.05))
    pools = sorted({r['config']['n_symbols'] for r in results})
    for ax in (acc, cos):    # the pool sizes themselves on a log axis, no minor ticks
        ax.set(xscale='log', xlabel='training names (pool size)', xticks=pools, xticklabels=pools)
        ax.minorticks_off()
    acc.legend()
    fig.suptitle(title)
    fig.tight_layout()
    savefig(fig, path)
    plt.close(fig)


def grid_problems(base):
    """What the grid trains on, in words: for its table, figure and first line."""
    kind = 'problems of every shape' if base.layout == 'shapes' else 'the one layout'
    return f'{kind}, depth 1-{base.max_depth}'


# the grid's rows in the paper's words, grouped by its story (a row of another grid keeps its flags' name)
STORY = [('the failure', [('standard', 'standard transformer'), ('untied', 'untied (un)embeddings'),
                          ('no-identity', 'without identity terms')]),
         ('copy attention alone', [('copy-attn', 'copy attention'), ('copy-pointer', 'copy attention, pointer form')]),
         ('the fix: frozen rows', [('freeze-emb', 'frozen (un)embeddings'),
                                   ('copy-attn + freeze-emb', 'copy attention + frozen'),
                                   ('freeze-unused', 'only the never-target rows frozen')]),
         ('resets', [('forget-every', 'rows reset every 100 steps'),
                     ('copy-attn + forget-every', 'copy attention + resets'),
                     ('forget-every + until', 'resets until halfway, then none'),
                     ('copy-pointer + forget-every + until', 'pointer copy + resets until halfway')]),
         ('diversity', [])]


def plain(label):
    """(group, the row's name in words) of a grid row's label."""
    if 'symbols' in label:
        model, n = label.split(', ')
        return 'diversity', f"{'frozen' if model == 'freeze-emb' else 'standard'}, {n.replace('symbols', 'names')}"
    key = ' + '.join(w for w in label.split(' + ') if not w.startswith(('emb-lr', 'forget-every', 'until')))
    key = ' + '.join(filter(None, [key, 'forget-every' * ('forget-every' in label), 'until' * ('until' in label)]))
    for group, rows in STORY:
        for flags, words in rows:
            if key == flags:
                return group, words
    return 'other rows', label


def grid_plot(results, path, title):
    """Exact match in each scenario, a bar a row (mean over seeds, whiskers min to max), the rows grouped by
    the paper's story and named in its words."""
    plt = pyplot()
    labels = list(dict.fromkeys(r['row'] for r in results))
    order = [g for g, _ in STORY] + ['other rows']
    labels.sort(key=lambda lab: order.index(plain(lab)[0]))           # stable: the grid's order in a group
    y, ticks, groups, last = [], [], [], None
    for lab in labels:
        group, words = plain(lab)
        if group != last:
            groups.append((len(y) + len(groups), group))
            last = group
        y.append(len(y) + len(groups))
        ticks.append(words)
    fig, ax = plt.subplots(figsize=(11, 0.42 * (len(labels) + len(groups)) + 1.5))
    colours = dict(none='tab:blue', query='tab:orange', all='tab:red')
    for k, s in enumerate(logic_data.SCENARIOS):
        vals = [[100 * r[s] for r in results if r['row'] == lab] for lab in labels]
        mean = [sum(v) / len(v) for v in vals]
        err = [[m - min(v) for m, v in zip(mean, vals)], [max(v) - m for m, v in zip(mean, vals)]]
        names = dict(none='training names', query='the query unseen', all='every name unseen')
        ax.barh([i + (k - 1) * 0.27 for i in y], mean, height=0.27, xerr=err, label=names[s], capsize=2,
                color=colours[s])
    for at, group in groups:
        ax.text(-1, at, group, fontweight='bold', ha='right', va='center', fontsize=10)
    ax.set_yticks(y, ticks)
    ax.set_ylim(y[-1] + 0.8, groups[0][0] - 0.8)        # top down, every group's name inside the frame
    ax.set(xlabel='exact match (%), mean over seeds, whiskers: min to max', xlim=(0, 100), title=title)
    ax.legend(loc='upper left', bbox_to_anchor=(1.01, 1))   # outside: bars reach 100
    fig.tight_layout()
    savefig(fig, path)
    plt.close(fig)


def finetune_table(ft):
    """The contrast's table and picture from the fine-tuning cell's result."""
    first = lambda h, level: next((f'{step}' for step, acc in h if acc >= level), f"> {ft['max_steps']}")
    return '\n'.join(
        ['| unseen rows at the start | steps to 50% | steps to 90% | accuracy when it stopped |',
         '|---' * 4 + '|'] + [f"| {k} | {first(v['history'], 0.5)} | {first(v['history'], 0.9)} | "
                              f"{100 * v['history'][-1][1]:.1f}% |" for k, v in ft['finetune'].items()])


def finetune_plot(ft, path):
    """Each start's curve with a marker at every evaluation: a start at 90% before a single step (fresh
    rows) is one marked point, said in words beside it."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for (rows, v), marker in zip(ft['finetune'].items(), 'osD^v'):
        curve = [(step, 100 * acc) for step, acc in v['history']]
        ax.plot(*zip(*curve), marker=marker, ms=4 if len(curve) > 1 else 9, label=f'{rows} rows')
        if len(curve) == 1:
            ax.annotate(f'{rows} rows: {curve[0][1]:.1f}% before a single step', curve[0], xytext=(12, -4),
                        textcoords='offset points', fontsize=9, va='top')
    ax.axhline(90, color='gray', lw=0.5, ls='--')
    ax.text(0, 91, '90%', color='gray', fontsize=8)
    ax.set(xlabel='fine-tuning step', ylabel='exact match, all names unseen (%)', ylim=(-2, 102),
           title='fine-tuning on problems in unseen symbols')
    ax.legend(title='unseen (un)embeddings start as')
    fig.tight_layout()
    savefig(fig, path)
    plt.close(fig)


def table(base, todo, out, seeds, tag='', log=print):
    """grid{tag}.md, .json, .png and diversity{tag}.png (and finetune{tag}.png) from the cells in `out`;
    returns the names of the missing cells."""
    found, missing = [], []
    for label, cfg in todo:
        path = cell_file(out, label, cfg.seed)
        if os.path.exists(path):
            found.append(read_cell(path, cfg, label))
        else:
            missing.append(f'{label} (seed {cfg.seed})')
    results = [r for r in found if r['row'] != FINETUNE]
    ft = next((r for r in found if r['row'] == FINETUNE), None)
    if not results:
        raise ValueError(f"{out}: no cell of this grid is there yet ({len(todo)} to run: --cells lists them)")
    problems = grid_problems(base)
    grid_plot(results, os.path.join(out, f'grid{tag}.png'), f'{len(seeds)} seed(s) per row, {base.steps} '
              f'steps, {problems},\n{base.n_symbols} training symbols unless named')
    if any(',' in r['row'] for r in results):
        diversity_plot(results, os.path.join(out, f'diversity{tag}.png'), f'diversity: {len(seeds)} seed(s) '
                       f'per point, {base.steps} steps, {problems}')
    ft_text = '(no fine-tuning contrast: its cell is missing)'
    if ft:
        finetune_plot(ft, os.path.join(out, f'finetune{tag}.png'))
        ft_text = (f"Fine-tuning contrast (standard, seed {ft['seed']}, its unseen rows at cosine "
                   f"{ft['cos_unseen']:.2f}, evaluated every {ft['eval_every']} steps):\n\n{finetune_table(ft)}")
    wall = sum(r['wall'] for r in found)
    text = (f"`python lab/grid.py{' --quick' if base.steps == GRID_QUICK['steps'] else ''}`: {len(seeds)} "
            f"seed(s) per row, mean (min-max); {base.steps} steps, {problems}, {base.device} in "
            f"{base.precision}, one thread a cell; the cells' wall together {wall / 60:.1f} min"
            + (f"; missing: {', '.join(missing)}" if missing else '') + "\n\n"
            f"{grid_table(results, base)}\n\nExact match with every name unseen at each evaluation (mean over "
            f"seeds, %):\n\n{grid_curves(results)}\n\n{ft_text}\n")
    with whole(os.path.join(out, f'grid{tag}.md')) as part, open(part, 'w') as f:
        f.write(text)
    with whole(os.path.join(out, f'grid{tag}.json')) as part, open(part, 'w') as f:
        json.dump(dict(results=results, finetune=ft, missing=missing), f, indent=1)
    log(text)
    return missing

# -----------------------------------------------------------------------------
# the command line: --cells, --cell, --table, or every missing cell here


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog='lab/grid.py', description="The paper's table as cells (see the top of "
                                'lab/grid.py): plain, it runs every missing cell here and builds the table.')
    p.add_argument('--quick', action='store_true', help='six rows, one seed, 1000 steps (15 min on 2 cores)')
    p.add_argument('--seeds', type=int, default=None, help='seeds per row (default 2, 1 with --quick)')
    p.add_argument('--rows', metavar='TEXT', help="only the rows whose name holds TEXT (to grid-rows-TEXT.md)")
    p.add_argument('--layout', choices=logic_data.LAYOUTS, default='shapes', help="the problems' layout")
    p.add_argument('--device', default='cpu', help='cpu or cuda (one thread a cell on a CPU)')
    p.add_argument('--precision', choices=('auto', 'fp32', 'bf16'), default='auto',
                   help="as unseen.py's --precision (auto: bf16 on a GPU that computes it natively, else fp32)")
    p.add_argument('--out', metavar='DIR', help='the grid folder (default: runs/grid or runs/grid-quick)')
    what = p.add_mutually_exclusive_group()
    what.add_argument('--cells', action='store_true', help="print the missing cells' commands, one a line "
                      '(for xargs -P, GNU parallel or a SLURM array), and nothing else')
    what.add_argument('--cell', metavar='ROW', help="run one cell (a row's name, or the one word --cells "
                      'prints for it) and write its file')
    what.add_argument('--table', metavar='DIR', help='build the table from the cells in DIR')
    p.add_argument('--seed', type=int, default=0, help='with --cell: the seed')
    p.add_argument('--workers', type=int, default=os.cpu_count() or 1, help='cells at a time (plain run)')
    args = p.parse_args(argv)
    if args.seeds is not None and not 1 <= args.seeds <= 100:
        p.error('--seeds must be 1 to 100')
    if args.rows is not None and not args.rows.strip():
        p.error("--rows '': give the text of the rows' names (e.g. --rows forget)")
    if args.seed != 0 and not args.cell:
        p.error('--seed goes with --cell (the grid: --seeds)')
    if not 0 <= args.seed < 2 ** 63:
        p.error(f'--seed {args.seed}: must be in [0, 2^63)')
    if args.device != 'cpu' and not (args.device.split(':')[0] == 'cuda' and torch.cuda.is_available()):
        p.error(f"--device {args.device}: choose cpu, or cuda on a machine that has it")
    if args.workers < 1:
        p.error('--workers must be at least 1')
    if args.table and args.out and args.out != args.table:
        p.error('--table DIR reads and writes DIR; leave out --out')
    for k in ('out', 'table', 'cell'):
        if getattr(args, k) is not None and not getattr(args, k).strip():
            p.error(f'--{k}: an empty name')
    return p, args


def command(args, out, label=None, seed=0):
    """The command line of a cell (label) or of this grid, with every setting it was given."""
    given = [('--quick', args.quick), (f'--seeds {args.seeds}', args.seeds), (f'--rows {shlex.quote(args.rows or "")}',
             args.rows is not None and label is None), (f'--layout {args.layout}', args.layout != 'shapes'),
             (f'--device {args.device}', args.device != 'cpu'),
             (f'--precision {args.precision}', args.precision != 'auto')]
    script = os.path.relpath(os.path.abspath(__file__))
    cell = [f'--cell {slug(label)}', f'--seed {seed}'] if label else []
    return ' '.join([sys.executable if label else 'python', script, *[f for f, on in given if on], *cell,
                     f'--out {shlex.quote(out)}'])


def run_missing(args, todo, out, log=print):
    """Every cell whose file is missing, `args.workers` at a time, each its own process (the very command
    --cells prints); a cell that fails stops the grid with its last line. Finished cells are never lost."""
    missing = [(label, cfg) for label, cfg in todo if not os.path.exists(cell_file(out, label, cfg.seed))]
    log(f"{len(todo) - len(missing)} of {len(todo)} cells already in {out}; running {len(missing)}, "
        f"{args.workers} at a time")
    running, t0 = [], time.time()

    def one(label, cfg):
        proc = subprocess.Popen(shlex.split(command(args, out, label, cfg.seed)), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        running.append(proc)
        text = proc.communicate()[0]
        if proc.returncode:
            raise RuntimeError(f"the cell {label!r} (seed {cfg.seed}) failed: "
                               f"{(text.strip().splitlines() or ['(no output)'])[-1]}")
        return label, cfg
    pool = concurrent.futures.ThreadPoolExecutor(args.workers)
    try:
        jobs = [pool.submit(one, label, cfg) for label, cfg in missing]
        for n, job in enumerate(concurrent.futures.as_completed(jobs), 1):
            label, cfg = job.result()
            r = read_cell(cell_file(out, label, cfg.seed), cfg, label)
            accs = '' if label == FINETUNE else ' | ' + ' '.join(f"{s} {acc_str(r, s)}"
                                                                  for s in logic_data.SCENARIOS)
            log(f"[{n:2d}/{len(missing)}] {label:<40} seed {cfg.seed}{accs} | {r['wall']:4.0f} s | "
                f"{(time.time() - t0) / 60:4.1f} min so far")
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in running:
            if proc.poll() is None:
                proc.kill()


def main(argv=None):
    p, args = parse_args(argv)
    quick = args.quick
    base = Config(**(GRID_QUICK if quick else GRID), layout=args.layout,
                  **hardware(argparse.Namespace(device=args.device, precision=args.precision)))
    seeds = list(range(args.seeds or (1 if quick else 2)))
    todo = cells(base, seeds, quick, args.rows)
    if not todo:
        p.error(f"--rows {args.rows!r}: no row of the grid{' --quick' if quick else ''} has that in its name")
    out = args.table or args.out or os.path.join('runs', 'grid-quick' if quick else 'grid')
    tag = '' if args.rows is None else f'-rows-{slug(args.rows)}'   # never the grid's, nor another --rows'
    try:
        if args.cells:
            for label, cfg in todo:
                if not os.path.exists(cell_file(out, label, cfg.seed)):
                    print(command(args, out, label, cfg.seed).replace(sys.executable, 'python', 1))
            return
        if args.cell:
            label, cfg = next(((label, cfg) for label, cfg in cells(base, [args.seed], quick)
                               if args.cell in (label, slug(label))), (None, None))
            if cfg is None:
                p.error(f"--cell {args.cell!r}: no such cell (--cells lists them)")
            path = cell_file(out, label, args.seed)
            if os.path.exists(path):
                read_cell(path, cfg, label)
                return print(f"{path}: already there (remove it to run the cell again)")
            writable(out)         # a folder that takes the cell's file, or one line why not (before the work)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            result = run_cell(label, cfg, quick)
            with whole(path) as part, open(part, 'w') as f:
                json.dump(result, f)
            return print(f"wrote {path} ({result['wall']:.0f} s)")
        if not args.table:
            writable(out)
            os.makedirs(os.path.join(out, 'cells'), exist_ok=True)
            lock(out)             # one plain grid a folder (a second one on it: refused in one line)
            print(f"grid: {len(todo)} cells ({len(seeds)} seed(s) a row), {base.steps} steps each, "
                  f"{grid_problems(base)}, {base.device} in {base.precision}; writing to {out}")
            run_missing(args, todo, out)
        missing = table(base, todo, out, seeds, tag)
        print(f"wrote {out}/grid{tag}.md, grid{tag}.json, grid{tag}.png" +
              (f"; {len(missing)} cells missing: python lab/grid.py ... --cells lists them" if missing else ''))
    except KeyboardInterrupt:
        sys.exit(f"error: interrupted; the finished cells are kept in {out}; the same command finishes the grid")
    except (ValueError, OSError, RuntimeError) as e:
        sys.exit(f"error: {e}")


if __name__ == '__main__':
    logic_data.stop_on_signals()      # kill, scancel or a closed terminal: as Ctrl-C (its cells end, one line)
    cell = any(a.split('=')[0] == '--cell' for a in sys.argv[1:])   # a cell as unseen.py's runs; the grid: a
    watch_silence(None if cell else 60, [('finetune_small', 'fine-tuning the standard model'),    # minute
                                         ('run_missing', 'running the cells (each writes its file when done)')])
    main()
