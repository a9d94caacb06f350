"""
Horn-clause problems with a forward-chaining chain of thought.

One problem, in the text form this project uses everywhere (prompt, then ':', then the target):

    x4 . x9 . x4 x9 -> x2 . u7 -> x5 . x2 -> x7 . ? x7 : x2 x7 T

    facts    'x4 .'            one atom, '.'
    rules    'x4 x9 -> x2 .'   premises, '->', head, '.'
    query    '? x7'
    target   'x2 x7 T'         the derived atoms in forward-chaining order, then T or F
                               (the model also writes <eos> after the answer)

Variables are single tokens. Training draws names from a pool of `n_symbols` training symbols
(x0, x1, ...: the diversity knob); a separate pool of 100 unseen symbols (u0 .. u99) never appears in
a training batch. The test scenarios rename variables after a problem is sampled:
    none   every name from the training pool (control)
    query  the query variable, everywhere it occurs, renamed to one unseen symbol
    all    every variable renamed to a distinct unseen symbol

How a problem is made: first the structure is sampled (a planted derivation of the chosen depth,
distractor rules that can never fire, a query that is provable or not), then `forward_chain` labels
it. The solver is the single source of truth for the chain and the answer.

Forward chaining, the deterministic rule: known = facts; repeat { if the query is known, stop: T;
the first rule in listed order whose premises are all known and whose head is not known yet fires,
its head is appended to the chain; if none fires, stop: F }. (A query that is itself a fact gives an
empty chain and T; the generator never makes one.)

Run `python logic_data.py --n 5 --scenario all` to print a few, `--jsonl` for machine-readable output.
"""

import argparse
import json
import os
import random
import sys
from dataclasses import dataclass

# -----------------------------------------------------------------------------
# vocabulary layout: special tokens, then the training pool, then the unseen pool

SPECIALS = ['<pad>', '<eos>', '->', '.', '?', ':', 'T', 'F']
N_UNSEEN = 100
SCENARIOS = ('none', 'query', 'all')


class Vocab:
    """Token ids: SPECIALS, then x0..x{n_symbols-1} (training pool), then u0..u{n_unseen-1} (unseen)."""

    def __init__(self, n_symbols, n_unseen=N_UNSEEN):
        self.n_symbols, self.n_unseen = n_symbols, n_unseen
        self.train_names = [f'x{i}' for i in range(n_symbols)]
        self.unseen_names = [f'u{i}' for i in range(n_unseen)]
        self.itos = SPECIALS + self.train_names + self.unseen_names
        self.stoi = {s: i for i, s in enumerate(self.itos)}
        self.pad, self.eos = self.stoi['<pad>'], self.stoi['<eos>']
        n0 = len(SPECIALS)
        self.train_ids = list(range(n0, n0 + n_symbols))
        self.unseen_ids = list(range(n0 + n_symbols, n0 + n_symbols + n_unseen))

    def __len__(self):
        return len(self.itos)

    def is_unseen(self, name):
        return name in self.stoi and self.stoi[name] >= self.unseen_ids[0]

    def encode(self, problem):
        """Problem -> (token ids of prompt + target + <eos>, length of the prompt including ':')."""
        prompt, target = problem_tokens(problem)
        unknown = [t for t in prompt + target if t not in self.stoi]
        if unknown:
            raise ValueError(f"unknown name '{unknown[0]}' (this model knows x0..x{self.n_symbols - 1} "
                             f"and u0..u{self.n_unseen - 1})")
        ids = [self.stoi[t] for t in prompt + target] + [self.eos]
        return ids, len(prompt)

    def decode(self, ids):
        return ' '.join(self.itos[i] for i in ids)

# -----------------------------------------------------------------------------
# the problem, its solver, its text form


@dataclass
class Problem:
    facts: list       # ['x4', 'x9']
    rules: list       # [(['x4', 'x9'], 'x2'), ...]  (premises, head)
    query: str
    chain: list       # derived atoms, in forward-chaining order
    answer: bool

    def names(self):
        """Every variable name, in order of first appearance in the text."""
        seen = list(self.facts)
        for premises, head in self.rules:
            seen += premises + [head]
        seen += [self.query] + self.chain
        return list(dict.fromkeys(seen))

    def rename(self, mapping):
        m = lambda a: mapping.get(a, a)
        return Problem([m(a) for a in self.facts], [([m(p) for p in ps], m(h)) for ps, h in self.rules],
                       m(self.query), [m(a) for a in self.chain], self.answer)

    def to_dict(self):
        return dict(facts=self.facts, rules=[[ps, h] for ps, h in self.rules], query=self.query,
                    chain=self.chain, answer=self.answer, text=to_text(self))


def forward_chain(facts, rules, query):
    """The solver: (chain, answer) under the deterministic rule in the module docstring."""
    known, chain = set(facts), []
    while query not in known:
        for premises, head in rules:
            if head not in known and all(p in known for p in premises):
                known.add(head)
                chain.append(head)
                break
        else:
            return chain, False
    return chain, True


def problem_tokens(p):
    """The text form as two token lists: prompt (ending in ':') and target (chain, answer)."""
    prompt = []   # facts first: a rule's premises can then be checked against the facts before it
    for a in p.facts:
        prompt += [a, '.']
    for premises, head in p.rules:
        prompt += premises + ['->', head, '.']
    prompt += ['?', p.query, ':']
    return prompt, p.chain + ['T' if p.answer else 'F']


def to_text(p):
    prompt, target = problem_tokens(p)
    return ' '.join(prompt + target)


def parse(text):
    """Text form -> Problem, labelled by the solver. The part after ':' is optional; if given, it must
    be the solver's chain and answer. Raises ValueError with a one-line reason on malformed text."""
    if text.count(':') > 1:
        raise ValueError("more than one ':' (the solution comes after a single ':')")
    problem, _, solution = text.partition(':')
    if problem.count('?') != 1:
        raise ValueError("expected exactly one query '? name' at the end of the problem")
    statements, _, query = problem.partition('?')
    query = query.split()
    if len(query) != 1:
        raise ValueError(f"the query must be one name, got '{' '.join(query)}'")
    facts, rules = [], []
    parts = statements.split('.')
    if parts[-1].strip():
        raise ValueError(f"statement '{parts[-1].strip()}' must end with '.'")
    for s in parts[:-1]:
        toks = s.split()
        if not toks:
            raise ValueError("empty statement between two '.'")
        if '->' in toks:
            if toks.count('->') > 1 or toks[-2:-1] != ['->'] or len(toks) < 3:
                raise ValueError(f"rule '{s.strip()}' must read 'premise [premise ...] -> head'")
            rules.append((toks[:-2], toks[-1]))
        elif len(toks) == 1:
            facts.append(toks[0])
        else:
            raise ValueError(f"statement '{s.strip()}' is neither a fact ('a .') nor a rule ('a b -> c .')")
    for tok in sum([ps + [h] for ps, h in rules], facts + query):
        if tok in SPECIALS:
            raise ValueError(f"'{tok}' is a special token, not a variable name")
    chain, answer = forward_chain(facts, rules, query[0])
    p = Problem(facts, rules, query[0], chain, answer)
    if solution.strip() and solution.split() != problem_tokens(p)[1]:
        raise ValueError(f"the given solution '{solution.strip()}' is not the forward-chaining one "
                         f"'{' '.join(problem_tokens(p)[1])}'")
    return p

# -----------------------------------------------------------------------------
# the generator


@dataclass
class GenConfig:
    min_depth: int = 1        # length of the planted derivation (= length of the chain)
    max_depth: int = 4
    max_premises: int = 2     # rules have 1..max_premises premises (at most 3)
    n_extra_facts: int = 1    # facts beyond the one the derivation starts from
    n_distractors: int = 2    # rules that can never fire (each has a premise that is never derivable)

    def max_names(self):
        """The most distinct variables one problem can use (facts, derived atoms, 2 dead, distractor
        heads)."""
        return 1 + self.n_extra_facts + self.max_depth + 2 + max(self.n_distractors - 1, 0)

    def max_tokens(self):
        """The longest token sequence a problem can make: rules, facts, query, chain, answer, <eos>."""
        rule = self.max_premises + 3                                   # premises -> head .
        prompt = (self.max_depth + self.n_distractors) * rule + 2 * (1 + self.n_extra_facts) + 3
        return prompt + self.max_depth + 2


def size_error(n_symbols, max_depth, max_premises):
    """Why these problem sizes cannot work (a message naming the flag), or None. Both CLIs use it."""
    if not 1 <= max_premises <= 3:
        return '--max-premises must be 1, 2 or 3'
    if max_depth < 1:
        return '--max-depth must be >= 1'
    need = GenConfig(max_depth=max_depth).max_names()
    if need > N_UNSEEN:
        return (f'--max-depth {max_depth} needs {need} distinct names per problem; '
                f'the unseen pool has {N_UNSEEN}')
    if n_symbols < need:
        return (f'--n-symbols must be >= {need}: a problem of depth {max_depth} uses up to {need} '
                'distinct names')
    return None


def sample_structure(rng, cfg, depth, provable):
    """A problem over abstract atoms 0, 1, 2, ...: its facts, rules and query (not yet labelled)."""
    n = 0
    def new():
        nonlocal n
        n += 1
        return n - 1
    facts = [new() for _ in range(1 + cfg.n_extra_facts)]
    known, rules, last = list(facts), [], facts[0]
    for _ in range(depth):   # planted derivation: each rule needs the atom derived just before it
        others = [a for a in known if a != last]
        k = min(rng.randint(1, cfg.max_premises) - 1, len(others))
        head = new()
        rules.append(([last] + rng.sample(others, k), head))
        known.append(head)
        last = head
    dead = [new() for _ in range(2)]   # never facts, never heads of a rule that fires
    for i in range(max(cfg.n_distractors, 1)):
        k = rng.randint(1, cfg.max_premises) - 1
        premises = [dead[1] if i == 0 else rng.choice(dead)] + rng.sample(known, min(k, len(known)))
        rng.shuffle(premises)
        # the first distractor derives dead[0] (the false query), so a false query also stands as a head
        head = dead[0] if i == 0 else rng.choice([d for d in dead if d not in premises] + [new()])
        rules.append((premises, head))
    query = last if provable else dead[0]
    rng.shuffle(rules)
    rng.shuffle(facts)
    return facts, rules, query, n


def generate(rng, cfg, names, depth=None, provable=None):
    """One labelled Problem with variables drawn (distinct) from `names`. Depth and answer are drawn
    uniformly unless given, so true/false is balanced within each depth."""
    depth = depth or rng.randint(cfg.min_depth, cfg.max_depth)
    provable = rng.random() < 0.5 if provable is None else provable
    facts, rules, query, n = sample_structure(rng, cfg, depth, provable)
    name = rng.sample(names, n)
    facts, query = [name[a] for a in facts], name[query]
    rules = [([name[a] for a in ps], name[h]) for ps, h in rules]
    chain, answer = forward_chain(facts, rules, query)
    return Problem(facts, rules, query, chain, answer)


def apply_scenario(rng, problem, scenario, vocab):
    """Rename a training-pool problem for a test scenario (see the module docstring)."""
    if scenario == 'none':
        return problem
    if scenario == 'query':
        return problem.rename({problem.query: rng.choice(vocab.unseen_names)})
    if scenario == 'all':
        names = problem.names()
        return problem.rename(dict(zip(names, rng.sample(vocab.unseen_names, len(names)))))
    raise ValueError(f"unknown scenario '{scenario}' (choose from {', '.join(SCENARIOS)})")


def make_problems(rng, cfg, vocab, n, scenario='none'):
    return [apply_scenario(rng, generate(rng, cfg, vocab.train_names), scenario, vocab) for _ in range(n)]

# -----------------------------------------------------------------------------


def main(argv=None):
    d = GenConfig()
    parser = argparse.ArgumentParser(description='Print Horn-clause problems with their forward-chaining '
                                     'chain (by default, of the kind the demo trains on).')
    parser.add_argument('--n', type=int, default=5, help='number of problems')
    parser.add_argument('--scenario', choices=SCENARIOS, default='none', help='which names are unseen')
    parser.add_argument('--n-symbols', type=int, default=5000, help='size of the training symbol pool')
    parser.add_argument('--max-depth', type=int, default=d.max_depth, help='longest planted derivation')
    parser.add_argument('--max-premises', type=int, default=1, help='premises per rule, 1 to 3')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--jsonl', action='store_true', help='one JSON object per line')
    args = parser.parse_args(argv)
    if not 0 <= args.n <= 10 ** 9:
        parser.error('--n must be between 0 and 10^9')
    if args.n_symbols > 10 ** 6:
        parser.error('--n-symbols must be at most 10^6')
    error = size_error(args.n_symbols, args.max_depth, args.max_premises)
    if error:
        parser.error(error)
    vocab = Vocab(args.n_symbols)
    cfg = GenConfig(max_depth=args.max_depth, max_premises=args.max_premises)
    rng = random.Random(args.seed)
    try:
        for _ in range(args.n):      # one at a time: the first line comes at once, memory stays constant
            p = make_problems(rng, cfg, vocab, 1, args.scenario)[0]
            if args.jsonl:
                print(json.dumps(p.to_dict()), flush=True)
            else:
                unseen = [a for a in p.names() if vocab.is_unseen(a)]
                print(to_text(p) + (f"    (unseen: {' '.join(unseen)})" if unseen else ''), flush=True)
    except BrokenPipeError:          # `| head`: the reader has gone; stop quietly
        sys.stderr.close()
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == '__main__':
    main()
