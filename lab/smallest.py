"""The smallest problems (docs/experiments.md, "The smallest problems in the task"): a checkpoint's exact match
on problems in which no rule fires, the first a student types. A lab tool: run from the repository's root as

    python lab/smallest.py assets/headline.pt assets/standard.pt

For each shape, 100 problems in unseen names (every name u0..u99 once in each place: the k-th problem's
letters are u{k}, u{k+1}, ...) and 100 in training names (x0, x50, x100, ...), then the ten whose first name
is u0..u9 (a student's first name is always u0: --ask writes new names as unseen ones in order), then the
problems as a student types them, each through --ask's renaming. A one-step problem is the control.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # unseen.py's folder
import logic_data as L  # noqa: E402
import unseen as U  # noqa: E402

SHAPES = {   # letters A, B, ... stand for distinct names
    'a fact asked alone': 'A . ? A',
    'a fact asked beside another fact': 'A . B . ? A',
    'a fact asked beside a rule that never fires': 'A . B -> C . ? A',
    'a fact asked beside two rules that never fire': 'A . B -> C . D C -> E . ? A',
    'a query nothing reaches (F)': 'A . B -> C . ? C',
    'a query in no rule (F)': 'A . B . ? C',
    'one step (the control)': 'A . A -> B . ? B'}
TYPED = ['a . ? a', 'rain . ? rain', 'x1 . x2 . ? x1', 'p . q -> r . ? p', 'cat . dog -> bone . ? cat',
         'a . b . c . ? b', 'sun . cloud rain -> wet . ? sun', 'a . ? b', 'rain . ? snow', 'a . b -> c . ? c']


def fill(shape, name):
    """The shape's text with its i-th letter written name(i)."""
    letters = sorted({t for t in shape.split() if t.isalpha() and t.isupper()})
    return ' '.join(name(letters.index(t)) if t in letters else t for t in shape.split())


def solved(model, vocab, texts):
    problems = [L.parse(t) for t in texts]
    problems = [p.rename(vocab.new_names(p)) for p in problems]     # a student's own names, as --ask does
    return U.exact_match(model, *U.make_batch(problems, vocab)).tolist()


def main(argv=None):
    ap = argparse.ArgumentParser(prog='lab/smallest.py', description=__doc__.split('\n\n')[0])
    ap.add_argument('ckpt', nargs='+', help='checkpoints written by unseen.py')
    args = ap.parse_args(argv)
    for path in args.ckpt:
        try:
            model, vocab, cfg = U.load_checkpoint(path)
        except ValueError as e:
            ap.error(str(e))
        print(f'{path} (trained with {cfg.idle:.0%} idle problems)\n')
        print('| problem | shape | unseen names | training names | first name u0..u9 |')
        print('|---|---|---|---|---|')
        for what, shape in SHAPES.items():
            unseen = solved(model, vocab, [fill(shape, lambda i: f'u{(k + i) % 100}') for k in range(100)])
            train = solved(model, vocab, [fill(shape, lambda i: f'x{(50 * k + i) % cfg.n_symbols}')
                                          for k in range(100)])
            print(f'| {what} | `{shape}` | {sum(unseen)}% | {sum(train)}% | {sum(unseen[:10])} of 10 |')
        ok = solved(model, vocab, TYPED)
        print(f"\nas a student types them: {sum(ok)} of {len(ok)} right"
              + ''.join(f"; wrong: `{t}`" for t, good in zip(TYPED, ok) if not good) + '\n')


if __name__ == '__main__':
    main()
