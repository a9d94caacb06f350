"""The seed probes (docs/experiments.md, "One story on every seed"): unseen.py's command line as typed, trained
once, judged with its last weights and with moving averages of them. A lab tool, not the project: run from the
repository's root as

    OMP_NUM_THREADS=1 python lab/seed_probes.py runs.jsonl --unseen all --freeze-emb --seed 0

It appends one JSON line per set of weights to runs.jsonl: the last weights ('last') and, for each decay in
EMA (default 0.99,0.995), an exponential moving average of the weights kept from step 0 (p_avg <- p_avg +
(1 - decay) (p - p_avg) after every optimiser step). Each line has the three scenarios, the held-out shapes
and arbitrary problems in both kinds of names, exact match by depth in unseen names (1-4, then 1 / 2 / 4
beyond training), the unseen-row cosine and, for the last weights, the run's curve (step, all). The run
itself keeps the last weights (--ema 0): the averages here are the probe's.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # unseen.py's folder
import torch                                                 # noqa: E402

import unseen as U  # noqa: E402

DECAYS = [float(d) for d in os.environ.get('EMA', '0.99,0.995').split(',') if d]


def main(out, argv):
    cfg = U.replace(U.config_from_args(U.parse_args(argv)), ema=0.0)   # its own averages, of the last weights
    averages = {}                                     # id(model): {decay: [tensors]}; the run's model only
    step = U.train_step

    def tracked(model, optimizer, x, y):
        loss = step(model, optimizer, x, y)
        params = [p.detach() for p in model.parameters()]
        avg = averages.setdefault(id(model), {d: [p.clone() for p in params] for d in DECAYS})
        for d, a in avg.items():
            torch._foreach_lerp_(a, params, 1 - d)
        return loss

    U.train_step = tracked
    t0 = time.time()
    model, vocab, history = U.train(cfg)
    wall = time.time() - t0
    last = [p.detach().clone() for p in model.parameters()]
    for name, weights in [('last', last)] + [(f'ema {d}', averages[id(model)][d]) for d in DECAYS]:
        with torch.no_grad():
            for p, w in zip(model.parameters(), weights):
                p.copy_(w)
        predictions = {}
        acc = U.evaluate(model, vocab, U.eval_sets(cfg, vocab), cfg.device, predictions)
        shapes = U.evaluate_shapes(model, vocab, U.shape_sets(cfg, vocab), cfg.device)
        ok = (predictions['all'][1] == predictions['all'][2]).all(dim=1)
        depth = {d: a for d, (a, n) in U.by_depth(predictions['all'][0], ok).items()}
        beyond = {d: shapes[n]['all'] for d, n in U.longer_sets(cfg, shapes).items()}
        row = dict(argv=' '.join(argv), seed=cfg.seed, weights=name, wall=round(wall), threads=torch.get_num_threads(),
                   **{s: acc[s] for s in ('none', 'query', 'all')},
                   held_none=U.held_out_mean(shapes)['none'], held_all=U.held_out_mean(shapes)['all'],
                   arb_none=shapes['arbitrary Horn problems']['none'],
                   arb_all=shapes['arbitrary Horn problems']['all'],
                   depth=depth, beyond=beyond, cos_unseen=U.rows_stats(model, vocab)['cos_unseen'],
                   curve=[(h['step'], round(h['all'], 4)) for h in history] if name == 'last' else None)
        with open(out, 'a') as f:
            f.write(json.dumps(row) + '\n')
        print(name, {k: row[k] for k in ('none', 'query', 'all', 'held_all', 'arb_all')}, depth, beyond, flush=True)


if __name__ == '__main__':
    if len(sys.argv) < 2 or sys.argv[1] in ('-h', '--help') or sys.argv[1].startswith('-'):
        print(__doc__.strip() + "\n\nusage: python lab/seed_probes.py RUNS.jsonl [unseen.py's training flags]")
        sys.exit(0 if sys.argv[1:2] in (['-h'], ['--help']) else 'error: give the file to append to first')
    U.watch_silence()            # a line at least every 10 s (a minute in a file), as unseen.py's runs
    main(sys.argv[1], sys.argv[2:])
