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

How a problem is made: first the structure is sampled, then `forward_chain` labels it; the solver is the
single source of truth for the chain and the answer. Rules have 1 to `max_premises` premises (2 by
default: 'a b -> c', a conjunction, is a Horn clause in full; 1 is reachability in a graph). The
structure (the default, layout 'shapes'):
    a planted path     a fact, then 1..max_depth rules, each needing the atom derived just before it
                       (and, in a conjunction, a fact or an earlier atom too: listed before that premise
                       is derived, the rule waits for it)
    facts              1-6 (max_facts; the path starts from one of them, the others may be premises
                       anywhere or unused)
    side rules         0-2 (max_side: up to 6 for training) rules that fire but are not needed (their heads
                       join the chain wherever forward chaining reaches them), or whose head is already
                       known when they could fire
    dead rules         0-3 (max_dead: 3 in the demo's training, at most 7) rules with a premise never
                       derivable: they never fire (a conjunction among them may have every other premise
                       known: one premise short)
    the query          provable: the path's end, a fact, an atom on the path or a side rule's head;
                       unprovable: a dead rule's premise or head, a name in no rule, or (training
                       only, --broken) a name on a path that breaks where a rule needs a name nothing
                       derives
All rules are shuffled, so side and dead rules stand before, between and after the path's. Training also
draws a share of idle problems (`idle`; the demo: 3%), in which no rule fires: facts alone or beside rules
that never fire, the query a fact (T, an empty chain: 'a . ? a') or a name nothing reaches (F). True and
false are balanced within each depth; `balance` (the demo's training problems) keeps each problem with a
chance by its chain's length, so that every length is about as common (`balanced`). A shape family is
(facts, side rules, dead rules); HELD_OUT lists the families the demo never trains on, to test it on
shapes it never saw. `arbitrary` draws problems with no planted structure at all. Layout 'template' is the
one layout of earlier versions (always 2 facts, the path, 2 dead rules): a model trained on it learns the
layout, not forward chaining.

Forward chaining, the deterministic rule: known = facts; repeat { if the query is known, stop: T;
the first rule in listed order whose premises are all known and whose head is not known yet fires,
its head is appended to the chain; if none fires, stop: F }. (A query that is itself a fact gives an
empty chain and T.)

Run `python logic_data.py --n 5 --scenario all` to print a few, `--jsonl` for machine-readable output;
`read_problems` reads a file of them back (one per line), `beyond_training` says where a problem lies
outside what a generator draws, `shape_sets` draws the test sets of shapes it never draws.
"""

import argparse
import itertools
import json
import os
import random
import re
import unicodedata
import signal
import sys
from dataclasses import dataclass, field, replace

# -----------------------------------------------------------------------------
# vocabulary layout: special tokens, then the training pool, then the unseen pool

SPECIALS = ['<pad>', '<eos>', '->', '.', '?', ':', 'T', 'F']
ANSWER_TOKENS = ('T', 'F', '<eos>')    # the targets that are not names (problem_tokens)
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
        self.name_ids = self.train_ids + self.unseen_ids      # the symbols: what --forget-every re-draws
        # what training ever asks the model to write: a chain's names, the answer, <eos>. Every other row of
        # the unembedding is never a target: the unseen names, <pad>, and the signs only prompts hold
        writes = {self.stoi[t] for t in ANSWER_TOKENS} | set(self.train_ids)
        self.never_target_ids = [i for i in range(len(self.itos)) if i not in writes]

    def __len__(self):
        return len(self.itos)

    def is_unseen(self, name):
        return name in self.stoi and self.stoi[name] >= self.unseen_ids[0]

    def encode(self, problem):
        """Problem -> (token ids of prompt + target + <eos>, length of the prompt including ':')."""
        prompt, target = problem_tokens(problem)
        unknown = [t for t in prompt + target if t not in self.stoi]
        if unknown:
            raise ValueError(f"unknown name {ascii(unknown[0])} (this model knows x0..x{self.n_symbols - 1} "
                             f"and u0..u{self.n_unseen - 1})")
        ids = [self.stoi[t] for t in prompt + target] + [self.eos]
        return ids, len(prompt)

    def decode(self, ids):
        return ' '.join(self.itos[i] for i in ids)

    def new_names(self, p):
        """{name: unseen name} for a problem's names this vocabulary lacks (a student's own 'rain', 'snow'):
        names a model never saw are the paper's unseen symbols, so each takes a distinct unseen name the
        problem does not use. ValueError if there are more of them than such unseen names."""
        new = [a for a in p.names() if a not in self.stoi]
        odd = next((a for a in new if not a.replace('\u200c', '').replace('\u200d', '').isprintable()),
                   None)                                             # an escape code, an invisible space
        if odd:
            raise ValueError(f"the name {ascii(odd)} holds characters that do not print")
        free = [u for u in self.unseen_names if u not in p.names()]
        if len(new) > len(free):
            raise ValueError(f"{len(new)} names new to this model, more than the {len(free)} unseen names it "
                             "could write them as")
        return dict(zip(new, free))

# -----------------------------------------------------------------------------
# the problem, its solver, its text form


@dataclass
class Problem:
    facts: list       # ['x4', 'x9']
    rules: list       # [(['x4', 'x9'], 'x2'), ...]  (premises, head)
    query: str
    chain: list       # derived atoms, in forward-chaining order
    answer: bool
    how: dict = field(default=None, compare=False, repr=False)  # how the generator made it (shape, depth,
                        # query kind), for tests; parsed: None, or the words NFKC changed {'normalised': ...}

    def names(self):
        """Every variable name, in order of first appearance in the text."""
        return list(dict.fromkeys([*self.facts, *[a for ps, h in self.rules for a in ps + [h]], self.query,
                                   *self.chain]))

    def rename(self, mapping):
        m = lambda a: mapping.get(a, a)
        return Problem([m(a) for a in self.facts], [([m(p) for p in ps], m(h)) for ps, h in self.rules],
                       m(self.query), [m(a) for a in self.chain], self.answer, self.how)

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


MISTAKE_KINDS = ('stopped early (T or F for an atom)', 'an atom already known',
                 'a rule that fires, but not the first listed', 'a rule whose premises are not all known',
                 'a name no rule derives', 'went on past the known query', 'the wrong answer', 'no <eos>')


def first_mistake(p, target, pred):
    """(chain position from 1, kind from MISTAKE_KINDS) of the first target token the model gets wrong given
    the right prefix (`target`, `pred`: token strings), or None: where one step of forward chaining broke.
    An atom written where the chain has ended is judged as a step too (why no rule should have fired)."""
    k = next((i for i, (t, q) in enumerate(zip(target, pred)) if t != q), None)
    if k is None:
        return None
    known, token = set(p.facts) | set(p.chain[:k]), pred[k]
    if k > len(p.chain):
        return k + 1, MISTAKE_KINDS[7]
    answer = token in ANSWER_TOKENS
    if k == len(p.chain) and answer:
        return k + 1, MISTAKE_KINDS[6]
    fire = [h for ps, h in p.rules if h not in known and all(a in known for a in ps)]
    if answer:
        kind = 0                                  # stopped early
    elif token in known:
        kind = 1                                  # an atom already known
    elif token in fire:
        kind = 2 if k < len(p.chain) else 5       # a rule that fires, not the first; or past the query
    elif token in {h for _, h in p.rules}:
        kind = 3                                  # a rule whose premises are not all known
    else:
        kind = 4                                  # a name no rule derives
    return k + 1, MISTAKE_KINDS[kind]


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


UNSEEN_NOTE = re.compile(r'\s+\(unseen:[^()]*\)\s*$')


JOINERS = '\u200c\u200d'   # zero-width non-joiner and joiner: inside a name (Persian, Indic), never alone
ARROW = re.compile(r'->|[-=<>\u2190-\u21ff\u27f5-\u27ff]')   # '->' or a piece of another arrow (=>, -->, →)


def name_char(c):
    """A character of a name: a letter, a digit, a combining mark (a vowel sign, an accent typed apart),
    '_' and its kin (Unicode L, N, M, Pc), or a joiner: what every script people write names in needs."""
    return unicodedata.category(c)[0] in 'LNM' or unicodedata.category(c) == 'Pc' or c in JOINERS


# default-ignorable code points (Unicode's DerivedCoreProperties): characters that never show
IGNORABLE = re.compile('[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e'
                       '\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8\U0001bca0-\U0001bca3'
                       '\U0001d173-\U0001d17a\U000e0000-\U000e0fff]')
JOINING = ('ARABIC', 'SYRIAC', 'NKO', 'MONGOLIAN', 'MANDAIC', 'HANIFI', 'PSALTER', 'MANICHAEAN', 'ADLAM')


def invisible(name):
    """The first character of `name` that never shows where no script needs it, or None (UAX #31's rule):
    every default-ignorable one but a joiner inside a name after a virama (Indic), or a non-joiner after a
    letter of a joining script (Persian). 'ra\u200din' and 'rain' print alike: refused, not two names."""
    for i, c in enumerate(name):
        prev = name[i - 1] if i else ''
        needed = c in JOINERS and 0 < i < len(name) - 1 and (unicodedata.combining(prev) == 9 or (
            c == JOINERS[0] and unicodedata.name(prev, '').startswith(JOINING)))
        if IGNORABLE.match(c) and not needed:
            return c
    return None


def name_error(name):
    """Refuse a name that holds anything else, in one line that shows the fix: a connective or an arrow typed
    inside a name would otherwise make one new name of 'a,b' or 'rain→snow'; a mark or a joiner that begins
    a name (or a joiner that ends it) belongs to no letter."""
    alone = name[0] if unicodedata.category(name[0])[0] == 'M' or name[0] in JOINERS else \
        name[-1] if name[-1] in JOINERS else None
    hidden = None if alone else invisible(name)
    if hidden:
        what = unicodedata.name(hidden, 'U+%04X' % ord(hidden)).lower()
        raise ValueError(f"the name {ascii(name)} holds characters that do not print ({what}, "
                         f"{ascii(hidden)}, where no script needs one): delete it")
    if all(map(name_char, name)) and not alone:
        return
    if alone:
        raise ValueError(f"'{name}' is not a name: it {'begins' if alone == name[0] else 'ends'} with "
                         f"{unicodedata.name(alone, ascii(alone)).lower()} ({ascii(alone)}), which belongs "
                         "inside a name, after a letter")
    c = next(ch for ch in name if not name_char(ch))
    if not name.replace(JOINERS[0], '').replace(JOINERS[1], '').isprintable():   # an escape code, a space
        raise ValueError(f"the name {ascii(name)} holds characters that do not print")
    fix = ("a rule's arrow is '->' between its premises and its head: 'a b -> c'" if ARROW.match(c) else
           "premises are separated by spaces: 'a b -> c'" if c in ',;+&|' or c.isspace() else
           "a name holds letters (with their marks), digits and '_', in any script")
    raise ValueError(f"'{name}' is not a name: it holds '{c}' ({fix})")


def normalised(text):
    """{word as typed: as read} for each word of `text` that NFKC normalisation changes: full-width letters
    and digits (a CJK keyboard), ligatures, accents and Hangul typed decomposed (as macOS files hold them).
    parse reads the normalised text, so look-alikes on screen are one name."""
    return {w: unicodedata.normalize('NFKC', w) for w in dict.fromkeys(text.split())
            if unicodedata.normalize('NFKC', w) != w}


def bare(name):
    """A name without its optional marks (vowel points, accents, a tatweel): vowelled and bare Arabic
    are one."""
    return ''.join(c for c in unicodedata.normalize('NFD', name) if unicodedata.category(c) != 'Mn'
                   and c != '\u0640')


def scripts(name):
    """The scripts of a name's letters, Japanese's three (and Korean's two) counted as one."""
    return {{'HIRAGANA': 'CJK', 'KATAKANA': 'CJK', 'KATAKANA-HIRAGANA': 'CJK', 'HANGUL': 'CJK'}.get(w, w)
            for w in (unicodedata.name(c, '?').split()[0] for c in name if c.isalpha())}


def lookalike_note(p):
    """Two names of a problem that differ only by optional marks, or a name that mixes scripts (Cyrillic 'а'
    in Latin 'rаin'), are two names to the model, as typed: said in a note, or None."""
    names = sorted(p.names())
    twins = {}
    for n in names:
        twins.setdefault(bare(n), []).append(n)
    pair = next((v for v in twins.values() if len(v) > 1), None)
    if pair:
        return f"{pair[0]} and {pair[1]} differ only by marks: to the model they are two names"
    mixed = next((n for n in names if len(scripts(n)) > 1), None)
    kinds = ', '.join(sorted(scripts(mixed or ''))).lower()
    return mixed and f"{mixed} mixes scripts ({kinds}): a look-alike of a name is another name to the model"


def parse(text):
    """Text form -> Problem, labelled by the solver. The part after ':' is optional; if given, it must
    be the solver's chain and answer. Raises ValueError with a one-line reason on malformed text."""
    typed = normalised(text)                                            # look-alikes on screen: one name
    text = UNSEEN_NOTE.sub('', unicodedata.normalize('NFKC', text))
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
        toks = s.replace('->', ' -> ').split()     # 'rain->snow' is a rule, as 'rain . snow' is two facts
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
    if '->' in query[0]:                  # (another character: name_error below, specials first)
        raise ValueError(f"the query '{query[0]}' holds an arrow: a query is one name, as in '? c'")
    for tok in sum([ps + [h] for ps, h in rules], facts + query):
        if tok in SPECIALS:
            raise ValueError(f"'{tok}' is a special token, not a variable name")
        name_error(tok)
    chain, answer = forward_chain(facts, rules, query[0])
    p = Problem(facts, rules, query[0], chain, answer, dict(normalised=typed) if typed else None)
    if solution.strip() and solution.split() != problem_tokens(p)[1]:
        raise ValueError(f"the given solution '{solution.strip()}' is not the forward-chaining one "
                         f"'{' '.join(problem_tokens(p)[1])}'")
    return p


def read_problems(path, max_tokens=None, max_problems=100_000):
    """[(line number, problem)] from a file, one a line: the text form (with its solution, checked, and the
    '(unseen: ...)' note this program prints) or a JSON line with a 'text' field (--jsonl); blank lines, '#'
    lines and a byte-order mark skipped; sizes checked as it is read. ValueError naming the file and each bad
    line (the first five, and how many; reading stops at the 100th)."""
    longest = 40 * (max_tokens or 1000)          # characters: far more than a problem of that many tokens
    problems, bad = [], []
    try:
        with open(path, 'rb') as f:
            for i in itertools.count(1):
                raw = f.readline(longest + 1)
                if not raw:
                    break
                if len(raw) > longest and not raw.endswith(b'\n'):
                    raise ValueError(f'{path}, line {i}: longer than {longest:,} characters: not a problem '
                                     'this model can read')
                if b'\x00' in raw:             # UTF-16 without its byte-order mark: every other byte zero
                    raise ValueError(f'{path}: it holds zero bytes (UTF-16 text?); save it as UTF-8')
                if b'\r' in raw.rstrip(b'\r\n'):  # old Mac line ends: the whole file would be one line
                    raise ValueError(f'{path}, line {i}: its lines end in a bare CR; save it with LF or CRLF '
                                     'line ends')
                try:
                    line = raw.decode('utf-8-sig' if i == 1 else 'utf-8').strip()
                except UnicodeDecodeError:
                    raise ValueError(f'{path}, line {i}: not UTF-8 text')
                if not line or line.startswith('#'):
                    continue
                if len(problems) == max_problems:
                    raise ValueError(f'{path}: more than {max_problems:,} problems; split the file')
                try:
                    problems.append((i, parse_line(line, max_tokens)))
                except (ValueError, RecursionError) as e:
                    bad.append(f'line {i}: {e}')
                    if len(bad) == 100:
                        break
    except OSError as e:
        raise ValueError(f"{path}: cannot read it ({e.strerror or e})")
    if len(bad) == 1:
        raise ValueError(f'{path}, {bad[0]}')
    if bad:
        raise ValueError(f"{path}: {len(bad)}{' or more' * (len(bad) == 100)} lines are not problems: "
                         + '; '.join(bad[:5]) + ('; ...' if len(bad) > 5 else ''))
    if not problems:
        raise ValueError(f'{path}: no problems in it (one per line)')
    return problems


def fewest_tokens(text):
    """The fewest tokens a problem in this text makes (its own, ':', the solution written or at least an
    answer, <eos>), counted before parsing it: a huge text is refused before the solver runs on it."""
    problem, _, solution = UNSEEN_NOTE.sub('', text).partition(':')
    spaced = problem.replace('.', ' . ').replace('->', ' -> ')          # as parse reads them
    return len(spaced.split()) + 1 + max(1, len(solution.split())) + 1


def parse_line(line, max_tokens=None):
    """One line of a problems file: the text form or a JSON line, no longer than max_tokens tokens."""
    if line.startswith('{'):
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            raise ValueError('not valid JSON')
        if not isinstance(obj, dict) or not isinstance(obj.get('text'), str):
            raise ValueError("a JSON line needs a 'text' field (as logic_data.py --jsonl writes)")
        line = obj['text']
    n = fewest_tokens(line)
    if max_tokens and n > max_tokens:
        raise ValueError(f"too long: {n} tokens or more, this model reads at most {max_tokens}")
    try:
        return parse(line)
    except ValueError as e:   # what it read, where that is not what was typed ('⒈' is read '1.')
        raise ValueError(f"{e} ({read_as(line)})" if normalised(line) else str(e)) from None


def read_as(text):
    """'read as Unicode normalises it (NFKC): ⒈ -> 1.': what parse reads of the words it changes."""
    return 'read as Unicode normalises it (NFKC): ' + ', '.join(f'{a} -> {b}' for a, b in
                                                                 normalised(text).items())

# -----------------------------------------------------------------------------
# the generator: many shapes (the default), or the one layout of earlier versions ('template')

SHAPE_LIMITS = dict(facts=(1, 6), side=(0, 2), dead=(0, 3))   # per problem, inclusive
# Training may draw more dead rules than the tests (max_dead, at most 7: as many rules as the tests 4 steps
# beyond have): models fail on more rules than training ever had. (Facts were 1-4 once: --max-facts 4.)
# shape families (facts, side rules, dead rules) never drawn for training: the test of shapes never seen.
# (1, 0, 0) is the smallest problem, 'u1 . u1 -> u2 . ? u2'; the other two are a middle and a wide one.
HELD_OUT = ((1, 0, 0), (2, 1, 2), (4, 2, 0))
# the tests of length: chains this many steps longer than any in training (layout 'shapes')
BEYOND = (1, 2, 4)
LAYOUTS = ('shapes', 'template')
PREMISES = dict(shapes=2, template=1)   # each layout's most premises per rule, as the models are trained


def curriculum_caps(depth, max_facts=SHAPE_LIMITS['facts'][1], max_dead=SHAPE_LIMITS['dead'][1],
                    max_side=SHAPE_LIMITS['side'][1]):
    """The most (facts, side, dead) rules of a curriculum stage whose derivations reach `depth`: depth + 1,
    depth - 1 and depth, within the limits (small shapes first, with short derivations)."""
    return min(max_facts, depth + 1), min(max_side, depth - 1), min(max_dead, depth)


def is_held_out(name):
    """Is the test set `name` (of shape_sets) one of shapes training never drew: a held-out family, or
    every shape for a model of the one layout?"""
    return name.startswith(('held-out', 'every shape'))


@dataclass
class GenConfig:
    min_depth: int = 1        # length of the planted derivation (the path from a fact to its end)
    max_depth: int = 4
    max_premises: int = 2     # rules have 1..max_premises premises (at most 3): 'a b -> c' is a conjunction
    layout: str = 'shapes'    # 'shapes': facts, side and dead rules, queries of every kind (below);
                              # 'template': always 2 facts, the path and 2 dead rules (one layout)
    held_out: tuple = ()      # shape families (facts, side, dead) never drawn: HELD_OUT for training
    shape_caps: tuple = None  # the most (facts, side, dead) rules to draw (None: SHAPE_LIMITS' highs)
    shape: tuple = None       # draw only this family (the held-out test sets)
    broken: float = 0.5       # unprovable problems whose planted path breaks (sample_structure)
    balance: bool = False     # chains of every length about equally often (balanced; layout 'shapes')
    max_facts: int = SHAPE_LIMITS['facts'][1]   # the most facts a problem has (layout 'shapes')
    max_dead: int = SHAPE_LIMITS['dead'][1]     # the most dead rules (layout 'shapes')
    max_side: int = SHAPE_LIMITS['side'][1]     # the most side rules (layout 'shapes')
    idle: float = 0.0         # the share of problems in which no rule fires (idle; the tests: none)

    def max_names(self):
        """The most distinct variables one problem can use (facts, path, side heads, dead atoms and
        dead-rule heads, a query in no rule)."""
        if self.layout == 'template':
            return 2 + self.max_depth + 3
        return self.max_facts + self.max_depth + self.max_side + 2 + self.max_dead + 1

    def shape_limits(self):
        """SHAPE_LIMITS as this generator draws them: at most max_facts, max_side and max_dead."""
        return dict(facts=(1, self.max_facts), side=(0, self.max_side), dead=(0, self.max_dead))

    def limits(self):
        """The most facts, rules and chain steps a problem of this generator has."""
        if self.layout == 'template':
            n_facts, n_side, n_dead = 2, 0, 2
        else:
            n_facts, n_side, n_dead = (hi for _, hi in self.shape_limits().values())
        return dict(facts=n_facts, rules=self.max_depth + n_side + n_dead, chain=self.max_depth + n_side)

    def max_tokens(self):
        """The longest token sequence a problem can make: facts, rules, query, chain, answer, <eos>."""
        rule = self.max_premises + 3                                   # premises -> head .
        most = self.limits()
        prompt = most['rules'] * rule + 2 * most['facts'] + 3
        return prompt + most['chain'] + 2


def size_error(n_symbols, max_depth, max_premises, max_facts=SHAPE_LIMITS['facts'][1],
               max_dead=SHAPE_LIMITS['dead'][1], max_side=SHAPE_LIMITS['side'][1]):
    """Why these problem sizes cannot work (a message naming the flag), or None. Both CLIs use it."""
    if not 1 <= max_premises <= 3:
        return '--max-premises must be 1, 2 or 3'
    if max_depth < 1:
        return '--max-depth must be >= 1'
    if not 1 <= max_facts <= 10:
        return f'--max-facts {max_facts}: must be 1 to 10'
    if not 0 <= max_dead <= 3 + BEYOND[-1]:
        return f'--max-dead {max_dead}: must be 0 to {3 + BEYOND[-1]} (no more rules than the longest tests)'
    side = SHAPE_LIMITS['side'][1] + BEYOND[-1]                     # the tests' longest chains: 4 more steps
    if not 0 <= max_side <= side:
        return f'--max-side {max_side}: must be 0 to {side} (no longer chains than the longest tests)'
    if max_side + max_dead > side + SHAPE_LIMITS['dead'][1]:
        return (f'--max-side {max_side} and --max-dead {max_dead}: at most {side + SHAPE_LIMITS["dead"][1]} '
                'side and dead rules together (no more rules than the longest tests)')
    need = GenConfig(max_depth=max_depth + BEYOND[-1], max_facts=max_facts).max_names()   # longer chains
    if need > N_UNSEEN:
        return (f'--max-depth {max_depth} needs {need} distinct names per problem; '
                f'the unseen pool has {N_UNSEEN}')
    if n_symbols < need:
        return (f'--n-symbols must be >= {need}: a test problem (depth up to {max_depth + BEYOND[-1]}, '
                f'{BEYOND[-1]} steps beyond --max-depth) uses up to {need} distinct names')
    return None


def draw_shape(rng, cfg):
    """(facts, side rules, dead rules), uniform over the families not held out."""
    if cfg.shape:
        return cfg.shape
    limits = cfg.shape_limits().values()
    highs = cfg.shape_caps or [hi for _, hi in limits]
    while True:
        shape = tuple(rng.randint(lo, hi) for (lo, _), hi in zip(limits, highs))
        if shape not in cfg.held_out:
            return shape


def sample_structure(rng, cfg, depth, provable):
    """A problem over abstract atoms 0, 1, 2, ...: its facts, rules and query (not yet labelled), the number
    of atoms, and how it was made: the planted path of `depth` rules, then the side and dead rules of a shape
    (facts, side, dead), all shuffled, and a query of its kind, as the module docstring describes them."""
    if cfg.layout == 'template':
        return sample_template(rng, cfg, depth, provable)
    n_facts, n_side, n_dead = draw_shape(rng, cfg)
    new = itertools.count().__next__      # a fresh atom: 0, 1, 2, ...
    premises = lambda pool: rng.sample(pool, min(rng.randint(1, cfg.max_premises), len(pool)))
    facts = [new() for _ in range(n_facts)]
    level = {a: 0 for a in facts}         # the path step after which an atom is surely known (facts: 0)
    rules, last, path = [], rng.choice(facts), []
    # unprovable: a share of the paths break at a random step (that rule needs a name nothing derives), so the
    # chain stops early or never starts, and the query is a name the path would have reached
    gap = rng.randrange(depth) if not provable and cfg.broken and rng.random() < cfg.broken else None
    for i in range(1, depth + 1):         # the planted path
        others = [a for a in level if a != last]
        head = new()
        first = new() if i - 1 == gap else last     # the break: a premise in no fact and no rule's head
        rules.append(([first] + rng.sample(others, min(rng.randint(1, cfg.max_premises) - 1, len(others))),
                      head))
        level[head] = i
        path.append(head)
        last = head
    side = []
    for _ in range(n_side):
        ps = premises(list(level))
        top = max(level[p] for p in ps)
        known = [a for a in facts + path if (level[a] < top or a in facts) and a not in ps]
        if known and rng.random() < 0.3:  # a head known before its last premise: the rule never fires
            rules.append((ps, rng.choice(known)))
        else:
            head = new()
            rules.append((ps, head))
            level[head] = top
            side.append(head)
    dead = [new() for _ in range(min(n_dead, 2))]  # never facts, never derived
    for i in range(n_dead):
        ps = [rng.choice(dead)] + rng.sample(list(level), min(rng.randint(1, cfg.max_premises) - 1,
                                                               len(level)))
        rng.shuffle(ps)
        heads = [a for a in dead if a not in ps]
        head = rng.choice(heads) if heads and rng.random() < 0.5 else new()
        rules.append((ps, head))
        dead.append(head)
    if provable:
        kind = rng.choice(['end'] * 3 + ['fact'] + ['path'] * bool(path[:-1]) + ['side'] * 2 * bool(side))
        query = dict(end=last, fact=rng.choice(facts), path=rng.choice(path[:-1] or path),
                     side=rng.choice(side or path))[kind]
    elif gap is not None:
        kind, query = 'broken', rng.choice(path[gap:])
    else:
        kind = 'dead' if dead and rng.random() < 0.75 else 'absent'
        query = rng.choice(dead) if kind == 'dead' else new()
    rng.shuffle(rules)
    rng.shuffle(facts)
    return facts, rules, query, new(), dict(shape=(n_facts, n_side, n_dead), depth=depth, kind=kind)


def sample_template(rng, cfg, depth, provable):
    """The one layout of earlier versions: 2 facts, the path, 2 dead rules; the query is the path's end
    or the head of a dead rule. A model trained on it learns the layout, not forward chaining."""
    new = itertools.count().__next__
    facts = [new() for _ in range(2)]
    known, rules, last = list(facts), [], facts[0]
    for _ in range(depth):   # planted derivation: each rule needs the atom derived just before it
        others = [a for a in known if a != last]
        k = min(rng.randint(1, cfg.max_premises) - 1, len(others))
        head = new()
        rules.append(([last] + rng.sample(others, k), head))
        known.append(head)
        last = head
    dead = [new() for _ in range(2)]   # never facts, never heads of a rule that fires
    for i in range(2):
        k = rng.randint(1, cfg.max_premises) - 1
        premises = [dead[1] if i == 0 else rng.choice(dead)] + rng.sample(known, min(k, len(known)))
        rng.shuffle(premises)
        # the first distractor derives dead[0] (the false query), so a false query also stands as a head
        head = dead[0] if i == 0 else rng.choice([d for d in dead if d not in premises] + [new()])
        rules.append((premises, head))
    query = last if provable else dead[0]
    rng.shuffle(rules)
    rng.shuffle(facts)
    return facts, rules, query, new(), dict(shape=(2, 0, 2), depth=depth, kind='end' if provable else 'dead')


def generate(rng, cfg, names, depth=None, provable=None):
    """One labelled Problem with variables drawn (distinct) from `names`. Depth and answer are drawn
    uniformly unless given, so true/false is balanced within each depth (with cfg.balance: `balanced`);
    a share cfg.idle of them (a depth not given) are `idle`."""
    if cfg.idle and depth is None and rng.random() < cfg.idle:
        return idle(rng, cfg, names, provable)
    if cfg.balance and depth is None:
        return balanced(rng, cfg, names, provable)
    depth = depth or rng.randint(cfg.min_depth, cfg.max_depth)
    provable = rng.random() < 0.5 if provable is None else provable
    facts, rules, query, n, how = sample_structure(rng, cfg, depth, provable)
    name = rng.sample(names, n)
    facts, query = [name[a] for a in facts], name[query]
    rules = [([name[a] for a in ps], name[h]) for ps, h in rules]
    chain, answer = forward_chain(facts, rules, query)
    assert answer == provable, 'the structure and the solver disagree'
    return Problem(facts, rules, query, chain, answer, how)


def balanced(rng, cfg, names, provable=None):
    """A problem of a mix in which every chain length is about as common, true and false alike: drawn as
    usual, each kept with a probability by its length (keep_rates). Drawn by depth and shape, chains of 4, 5
    and 6 atoms are 14, 6 and 2% of the problems, and a model is about as sure of a step as it is used to
    reaching it; balanced, with training's 6 side rules, each length 0..7 is a ninth."""
    plain = replace(cfg, balance=False, idle=0.0)
    provable = rng.random() < 0.5 if provable is None else provable
    keep = keep_rates(plain, provable)
    while True:
        p = generate(rng, plain, names, provable=provable)
        if rng.random() < keep[min(len(p.chain), len(keep) - 1)]:
            return p


def idle(rng, cfg, names, provable=None):
    """A problem in which no rule fires (forward chaining's first check alone: is the query known?): a drawn
    problem's facts and (two times in three) some of its rules that cannot fire from them; the query a fact
    (T, an empty chain: 'a . ? a') or a name nothing reaches (F). Without these a model trained on planted
    paths answers F to a student's first problem, a fact asked."""
    provable = rng.random() < 0.5 if provable is None else provable
    p = generate(rng, replace(cfg, idle=0.0, balance=False), names)
    dead = [(ps, h) for ps, h in p.rules if h in p.facts or not set(ps) <= set(p.facts)]
    rules = rng.sample(dead, rng.randint(1, len(dead))) if dead and rng.random() >= 1 / 3 else []
    atoms = [a for ps, h in rules for a in ps + [h] if a not in p.facts]
    if provable:
        query, kind = rng.choice(p.facts), 'idle: a fact'
    elif atoms and rng.random() < 0.75:
        query, kind = rng.choice(atoms), 'idle: a dead atom'
    else:
        query, kind = next(a for a in iter(lambda: rng.choice(names), None) if a not in p.names()), \
            'idle: a name in no rule'
    chain, answer = forward_chain(p.facts, rules, query)
    assert chain == [] and answer == provable, 'a rule fired in an idle problem'
    return Problem(p.facts, rules, query, chain, answer, dict(p.how, depth=0, kind=kind, rules=len(rules)))


_KEEP = {}


def keep_rates(cfg, provable, n=4000):
    """balanced's chance of keeping a problem by its chain's length (the last: that length or more),
    the rarest length always kept: measured once per generator and answer on n problems of its own."""
    key = (repr(cfg), provable)
    if key not in _KEEP:
        highs = cfg.shape_caps or [hi for _, hi in cfg.shape_limits().values()]   # (the side rules' is read)
        side = 0 if cfg.layout == 'template' else highs[1]
        # one past the deepest path (a side rule fired); side rules past the tests' two add as many more
        top = cfg.max_depth + max(side > 0, side - SHAPE_LIMITS['side'][1])      # --max-side 6: lengths 0-8
        rng, names = random.Random(0), [f'v{i}' for i in range(cfg.max_names())]
        counts = [0] * (top + 1)
        for _ in range(n):
            counts[min(len(generate(rng, cfg, names, provable=provable).chain), top)] += 1
        rarest = min(c for c in counts if c)                     # (a length never drawn: never asked for)
        _KEEP[key] = [rarest / c if c else 0.0 for c in counts]
    return _KEEP[key]


def arbitrary(rng, cfg, names, provable=None):
    """A random Horn problem with no planted structure: 1 to cfg.max_facts facts and 1 to (the most rules a
    problem of every shape at `cfg`'s depth has, 0-3 dead ones) rules over 3-10 atoms, premises and heads
    drawn at random, a random query; labelled by the solver. Drawn again until its answer is `provable` (T/F
    balanced) and its chain is no longer than such a problem's can be."""
    provable = rng.random() < 0.5 if provable is None else provable
    # the limits of every shape (its dead rules as the tests draw them), whatever cfg's layout
    most = GenConfig(max_depth=cfg.max_depth, max_facts=cfg.max_facts).limits()
    while True:
        atoms = rng.sample(names, rng.randint(3, 10))
        facts = rng.sample(atoms, rng.randint(1, min(cfg.max_facts, len(atoms) - 1)))
        rules = []
        for _ in range(rng.randint(1, most['rules'])):
            ps = rng.sample(atoms, rng.randint(1, min(cfg.max_premises, len(atoms) - 1)))
            rules.append((ps, rng.choice([a for a in atoms if a not in ps])))
        query = rng.choice(atoms)
        chain, answer = forward_chain(facts, rules, query)
        if answer == provable and len(chain) <= most['chain']:
            return Problem(facts, rules, query, chain, answer)


def derivation_depth(p):
    """The most rules applied one after another behind any atom the chain derives (0: none derived). The
    rule that fired an atom is the first listed one with that head whose premises were known then."""
    depth = {a: 0 for a in p.facts}
    for atom in p.chain:
        premises = next(ps for ps, h in p.rules if h == atom and all(a in depth for a in ps))
        depth[atom] = 1 + max((depth[a] for a in premises), default=0)
    return max(depth.values(), default=0)


def depth_note(cfg, p):
    """A derivation deeper than the planted paths of a generator of `cfg`, as the chain-length tests count
    'steps beyond training', in words, or None. Side rules take a few of its own problems that deep too
    (under 2% one step, far fewer two), so this is rare in training, not absent."""
    depth = derivation_depth(p)
    if depth <= cfg.max_depth:
        return None
    return (f"its derivation is {depth} rules deep, {depth - cfg.max_depth} beyond the planted paths of "
            f"training (at most {cfg.max_depth}): few or no training problems were this deep")


def beyond_training(cfg, p):
    """Where a problem lies outside what a generator of `cfg` draws (more facts, rules, premises or chain
    steps, no fact, another layout; without idle problems: no rule, or none firing with the query a fact),
    in words, or None."""
    most = cfg.limits()
    have = dict(facts=len(p.facts), rules=len(p.rules), chain=len(p.chain))
    over = [f"{have[k]} {'chain steps' if k == 'chain' else k} (training: at most {most[k]})"
            for k in most if have[k] > most[k]]
    over += [f'no {k} (training: at least 1)' for k in ('facts', 'rules')[:1 + (not cfg.idle)] if not have[k]]
    fires = any(set(ps) <= set(p.facts) for ps, _ in p.rules)
    if not cfg.idle and p.rules and not fires and p.query in p.facts:
        over.append('no rule that fires, its query a fact (training: a planted path fires whenever the query '
                    'is known)')                   # (a model trained without idle problems: --idle 0)
    if cfg.layout == 'template' and (len(p.facts) != 2 or len(p.rules) < 3):
        over.append('a shape outside the one layout (2 facts, the path, 2 dead rules)')
    premises = max((len(ps) for ps, _ in p.rules), default=0)
    if premises > cfg.max_premises:
        over.append(f'a rule with {premises} premises (training: at most {cfg.max_premises})')
    return 'this problem has ' + ', '.join(over) if over else None


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


def longer_name(d, max_depth):
    """The name of shape_sets' test set of chains d steps longer than training's longest."""
    return f'chains {d} step{"s" * (d > 1)} longer (depth {max_depth + d})'


def shape_sets(rng, cfg, vocab, n, max_tokens):
    """Test sets of n problems each whose shape a generator of `cfg` never draws, in training names ('none')
    and in unseen names ('all'): the held-out shape families, the other layout, arbitrary Horn problems and
    (layout 'shapes') chains BEYOND training's longest; at most `max_tokens` tokens each. A model that learned
    forward chaining solves them; one that learned a layout does not."""
    draw = {}
    if cfg.layout == 'shapes':
        for f in HELD_OUT:
            draw[f"held-out shape: {f[0]} fact{'s' * (f[0] > 1)}, {f[1]} side, {f[2]} dead rules"] = \
                replace(cfg, shape=f, held_out=())
        draw['the template layout (2 facts, the path, 2 dead rules)'] = replace(cfg, layout='template')
    else:
        draw[f'every shape (the default layout; those of <= {max_tokens} tokens)'] = \
            replace(cfg, layout='shapes', held_out=())
    for d in BEYOND if cfg.layout == 'shapes' else ():     # (a template model reads no longer ones)
        draw[longer_name(d, cfg.max_depth)] = \
            replace(cfg, min_depth=cfg.max_depth + d, max_depth=cfg.max_depth + d)

    def fitting(sample):   # a template model's position table is shorter than many shapes: those that fit
        ps = []
        while len(ps) < n:
            p = sample()
            if len(vocab.encode(p)[0]) <= max_tokens:
                ps.append(p)
        return ps
    sets = {name: fitting(lambda: generate(rng, gen, vocab.train_names)) for name, gen in draw.items()}
    sets['arbitrary Horn problems'] = fitting(lambda: arbitrary(rng, cfg, vocab.train_names))
    return {name: {s: [apply_scenario(rng, p, s, vocab) for p in ps] for s in ('none', 'all')}
            for name, ps in sets.items()}

# -----------------------------------------------------------------------------


def main(argv=None):
    d = GenConfig()
    p = argparse.ArgumentParser(prog='logic_data.py', description='Print Horn-clause problems with their '
                                'forward-chaining chain (by default, of the kind the demo trains on).')
    p.add_argument('--n', type=int, default=5, help='number of problems')
    p.add_argument('--scenario', choices=SCENARIOS, default='none', help='which names are unseen')
    p.add_argument('--n-symbols', type=int, default=5000, help='size of the training symbol pool')
    p.add_argument('--max-depth', type=int, default=d.max_depth, help='longest planted derivation')
    p.add_argument('--max-premises', type=int, help="premises per rule, 1 to 3 (default: by --layout, as the "
                   "demo's models are trained: " + ', '.join(f'{k} {v}' for k, v in PREMISES.items()) +
                   "; 2: a rule may be a conjunction, 'a b -> c'; 1: every rule has one premise)")
    for k, what, more in (('facts', 'facts', '4: as in earlier versions'),
                          ('dead', 'dead rules', "as the demo's training; up to 7: for longer rule lists"),
                          ('side', 'side rules', "up to 6: the demo's training, chains as long as the tests' "
                                                 'four steps beyond')):
        p.add_argument(f'--max-{k}', type=int, default=getattr(d, f'max_{k}'),
                       help=f"the most {what} a problem has (layout shapes; the tests' %(default)s; {more})")
    p.add_argument('--layout', choices=LAYOUTS, default=d.layout, help="shapes: problems of many shapes (the "
                   "tests' kind; the demo trains on these with more side rules, less the held-out families); "
                   'template: the one layout of earlier versions')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--jsonl', action='store_true', help='one JSON object per line')
    args = p.parse_args(argv)
    args.max_premises = args.max_premises if args.max_premises is not None else PREMISES[args.layout]
    counts = [f'--max-{k}' for k in ('facts', 'dead', 'side')
              if args.layout == 'template' and getattr(args, f'max_{k}') != getattr(d, f'max_{k}')]
    error = (f"{' and '.join(counts)} go{'es' * (len(counts) == 1)} with --layout shapes (the template "
             'layout is always 2 facts, the path and 2 dead rules)' if counts else
             '--n must be between 0 and 10^9' if not 0 <= args.n <= 10 ** 9 else
             f'--seed {args.seed}: must be in [0, 2^63)' if not 0 <= args.seed < 2 ** 63 else  # -5 draws 5's
             '--n-symbols must be at most 10^6' if args.n_symbols > 10 ** 6 else
             size_error(args.n_symbols, args.max_depth, args.max_premises, args.max_facts, args.max_dead,
                        args.max_side))
    if error:
        p.error(error)
    vocab, rng = Vocab(args.n_symbols), random.Random(args.seed)
    cfg = GenConfig(max_depth=args.max_depth, max_premises=args.max_premises, layout=args.layout,
                    max_facts=args.max_facts, max_dead=args.max_dead, max_side=args.max_side)
    try:
        for _ in range(args.n):      # one at a time: the first line comes at once, memory stays constant
            q = make_problems(rng, cfg, vocab, 1, args.scenario)[0]
            unseen = [a for a in q.names() if vocab.is_unseen(a)]
            print(json.dumps(q.to_dict()) if args.jsonl else
                  to_text(q) + (f"    (unseen: {' '.join(unseen)})" if unseen else ''), flush=True)
    except BrokenPipeError:          # `| head`: the reader has gone; stop quietly
        sys.stderr.close()
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except OSError as e:             # a full disk, /dev/full
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(f"error: cannot write the problems ({e.strerror})")


def stop_on_signals():
    """For the three programs: kill (SIGTERM) and a closed terminal (SIGHUP) stop them as Ctrl-C does,
    with one line and nothing half-written left behind."""
    for name in ('SIGTERM', 'SIGHUP'):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.default_int_handler)


if __name__ == '__main__':
    if sys.stdout is None:        # started with its output closed (`>&-`): the problems would go nowhere
        sys.exit('error: no standard output (it is closed); nothing to write the problems to')
    stop_on_signals()
    try:
        main()
    except KeyboardInterrupt:
        sys.exit('error: interrupted')
