"""Issue 57's probes (docs/experiments.md): unseen.py with one change, chosen by environment variables. A lab
tool, not the project: run from the repository's root as `CHAIN=known python lab/chain_probes.py
--unseen all --freeze-emb --steps 3000 --eval-every 500 --seed 0`.
  CHAIN=heads    today's chain of thought (the derived atoms, then T/F)
  CHAIN=known    the facts restated first, then the derived atoms: what is known is one stretch after ':'
  CHAIN=rules    each fired rule whole ('p1 p2 -> h .'), then T/F (the issue's measured lead)
  CHAIN=pause    each derived atom followed by '.' (a pause: one more position, six more layers, a step)
  CHAIN=passes   forward chaining in passes down the list: each rule that fires is taken where it stands
                 (the next atom comes from a rule after the last one fired), '.' ends a pass that derived
                 something; the same closure, so the same answer
  CHAIN=agenda   forward chaining from an agenda: first the heads of the rules whose premises are all facts,
                 '.', then each derived atom a in turn as 'a -> h1 h2 .', h1 h2 the new heads of the rules
                 (in listed order) that have a as a premise and every premise known before a's turn: each
                 step looks at the few rules of one atom. The same closure, so the same answer
  JITTER=N       learned positions: each training problem read from an even row 0..N (tests: row --shift)
  BALANCE=full   training problems kept by their chain's length, so that every length 0..6 is about as common
  BALANCE=mild   ... so that lengths 0..5 are about as common (6 stays rarer)
  PREFIX=one     the prompt and the chain so far read both ways (a prefix LM, re-read at every step): the
                 rules' tokens see the atoms derived after them. Training: each problem cut at a random target
                 position, read both ways up to it, loss there only; tests: a forward pass per target position
  PREFIX=after   ... loss at the cut and at every target after it (causal there)
  PREFIX=all     ... each problem cut at every target position (one copy per cut; loss at the cut): the same
                 targets a step as the causal model, about five times the compute
  MARK=1         with PREFIX: a learned vector added to the cut's token (it need not find the last one itself)
  LOSSW=step     each chain atom's loss weighed by its step (1, 2, 3, ...), the answer and <eos> by 1: the
                 late steps, where the chain fades, weigh more in the gradient
  LOSSW=sq       ... by its step squared (1, 4, 9, ...)
  LOGN=L         attention logits scaled by log(n) / log(L) at the n-th position (n keys to choose from), so
                 that a head stays as sharp in a long problem as at length L (Chiang & Cholak 2022)
  RULELESS=Q     a share Q of the training problems drawn without their rules (half of those then ask one of
                 their facts), re-solved: the shape of a student's first problem, 'a . ? a', which the
                 generator never draws (an RNG of its own: the other problems as the run draws them)
The notebook's rows ran when four heads and chains as drawn were the defaults: to re-run one today, add
`--n-head 4 --no-balance` (unseen.py's --balance is the generator's own balanced mix, logic_data.balanced).
"""
import itertools
import math
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # unseen.py's folder
import torch                                                 # noqa: E402

import logic_data  # noqa: E402
import unseen  # noqa: E402

CHAIN = os.environ.get('CHAIN', 'heads')
JITTER = int(os.environ.get('JITTER', '0'))
BALANCE = os.environ.get('BALANCE', '')
LOGN = float(os.environ.get('LOGN', '0'))
PREFIX = os.environ.get('PREFIX', '')
MARK = os.environ.get('MARK', '')
LOSSW = os.environ.get('LOSSW', '')
RULELESS = float(os.environ.get('RULELESS', '0'))
cut = None      # PREFIX: (B,) the last position each sequence reads both ways; None: the whole sequence
# chain lengths 0..6 in the demo's training problems (all stages): 18.1 22.0 19.9 17.9 14.4 6.2 1.5 %
KEEP = dict(full=[.08, .07, .075, .085, .1, .24, 1.0], mild=[.25, .25, .3, .35, .45, 1.0, 1.0]).get(BALANCE)
tokens, most, softmax = logic_data.problem_tokens, logic_data.GenConfig.max_tokens, unseen.causal_softmax


def problem_tokens(p):
    prompt, target = tokens(p)
    if CHAIN == 'known':
        target = list(p.facts) + target
    elif CHAIN == 'rules':
        known, steps = set(p.facts), []
        for h in p.chain:
            ps = next(ps for ps, g in p.rules if g == h and all(a in known for a in ps))
            steps += ps + ['->', h, '.']
            known.add(h)
        target = steps + target[-1:]
    elif CHAIN == 'pause':
        target = [t for h in p.chain for t in (h, '.')] + target[-1:]
    elif CHAIN == 'passes':
        target = in_passes(p) + target[-1:]
    elif CHAIN == 'agenda':
        target = from_agenda(p) + target[-1:]
    return prompt, target


def in_passes(p):
    """The chain of CHAIN=passes: pass after pass down the rule list, each rule that fires taken at once;
    it stops when the query is known, or after a pass that derives nothing."""
    known, chain = set(p.facts), []
    while p.query not in known:
        fired = [known.add(h) or h for ps, h in p.rules if h not in known and all(a in known for a in ps)]
        if not fired:
            break
        chain += fired[:fired.index(p.query) + 1] if p.query in fired else fired + ['.']
    assert (p.query in known) == p.answer
    return chain


def from_agenda(p):
    """The chain of CHAIN=agenda (its docstring at the top); it stops once the query is known."""
    known, agenda, out = set(p.facts), [], []

    def fire(ready):           # the rules `ready` picks whose premises were known before, in listed order
        before = set(known)
        for ps, h in p.rules:
            if ready(ps) and h not in known and all(a in before for a in ps):
                known.add(h)
                agenda.append(h)
                out.append(h)
                if h == p.query:
                    return True
        out.append('.')
        return False

    if p.query in known or fire(lambda ps: True):
        return out
    for a in agenda:           # grows while it is read
        out += [a, '->']
        if fire(lambda ps: a in ps):
            return out
    assert not p.answer
    return out


def max_tokens(self):
    extra = dict(heads=0, known=self.limits()['facts'], pause=self.limits()['chain'],
                 passes=self.limits()['chain'], agenda=3 * self.limits()['chain'] + 1,
                 rules=self.limits()['chain'] * (self.max_premises + 2))[CHAIN]
    return most(self) + extra + JITTER


def train_step(model, optimizer, x, y):
    first_row = 2 * torch.randint(0, JITTER // 2 + 1, (x.size(0), 1), device=x.device)
    return descend(optimizer, model(x, y, first_row)[1])


def descend(optimizer, loss):
    """One optimiser step on `loss`; its value."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.item()


def batches(rng, cfg, vocab, ahead=8, names=None):
    """unseen.batches, each problem kept with probability KEEP[its chain's length] (BALANCE), a share
    RULELESS of them without their rules."""
    names, side = names or vocab.train_names, random.Random(cfg.seed + 999)
    for step in itertools.count(0, ahead):
        gen = cfg.gen_config(step)
        seqs = []
        while len(seqs) < ahead * cfg.batch_size:
            p = logic_data.generate(rng, gen, names)
            if KEEP and rng.random() >= KEEP[min(len(p.chain), 6)]:
                continue
            if RULELESS and side.random() < RULELESS:
                query = side.choice(p.facts) if side.random() < 0.5 else p.query
                p = logic_data.Problem(p.facts, [], query, *logic_data.forward_chain(p.facts, [], query))
            seqs.append(vocab.encode(p))
        seqs.sort(key=lambda s: len(s[0]))
        chunks = [seqs[i:i + cfg.batch_size] for i in range(0, len(seqs), cfg.batch_size)]
        rng.shuffle(chunks)
        for chunk in chunks:
            yield unseen.pad_batch(chunk, vocab.pad, cfg.device)


def log_n_softmax(att):
    """unseen.causal_softmax with each query row's logits times log(n) / log(LOGN), n = its keys (at least
    a tenth: the first rows keep some contrast)."""
    n = torch.arange(1, att.size(-1) + 1, device=att.device, dtype=att.dtype)
    return softmax(att * (n.log() / math.log(LOGN)).clamp(min=0.1).unsqueeze(-1))


def prefix_softmax(att):
    """causal_softmax, except that positions i, j <= cut (of their sequence) see each other."""
    T = att.size(-1)
    if cut is None:
        return torch.softmax(att, dim=-1, dtype=torch.float32)
    pos = torch.arange(T, device=att.device)
    inside = pos.view(1, T) <= cut.view(-1, 1)                                  # (B, T)
    sees = (pos.view(T, 1) >= pos.view(1, T)) | (inside.unsqueeze(2) & inside.unsqueeze(1))   # (B, T, T)
    return torch.softmax(att.masked_fill(~sees.unsqueeze(1), float('-inf')), dim=-1, dtype=torch.float32)


def nth_target(y, n):
    """(B,) the position of each row's n-th target (-1 where it has fewer)."""
    m = y != -1
    hit = m & (m.long().cumsum(1) == n + 1)
    return torch.where(hit.any(1), hit.float().argmax(1), torch.full_like(y[:, 0], -1))


def prefix_train_step(model, optimizer, x, y):
    """unseen.train_step with PREFIX's cuts: one random target position a problem (one, after) or every one,
    a copy of the problem each (all); the loss at the cut (and, after, at every target past it)."""
    global cut
    first_row = unseen.first_rows(model, x)
    if PREFIX == 'all':
        rows, cut = (y != -1).nonzero(as_tuple=True)                              # a copy per target
        x, y = x[rows], y[rows]
        first_row = first_row[rows] if first_row is not None else None
    else:
        cut = torch.multinomial((y != -1).float(), 1).squeeze(1)                 # (B,) a target position
    pos = torch.arange(y.size(1), device=y.device).view(1, -1)
    keep = pos >= cut.view(-1, 1) if PREFIX == 'after' else pos == cut.view(-1, 1)
    _, loss = model(x, y.masked_fill(~keep, -1), first_row)
    cut = None
    return descend(optimizer, loss)


@torch.no_grad()
def prefix_target_preds(model, x, y):
    """unseen.target_preds, one forward pass per target position (cut there)."""
    global cut
    pred, chunk = torch.full_like(y, -1), unseen.eval_chunk(model.cfg, x.size(1))
    for i in range(0, len(x), chunk):
        xs, ys = x[i:i + chunk], y[i:i + chunk]
        for n in range(int((ys != -1).sum(1).max())):
            where = nth_target(ys, n)
            rows = (where >= 0).nonzero().squeeze(1)
            cut = where[rows]
            yn = torch.full_like(ys[rows], -1)
            yn[torch.arange(len(rows)), cut] = ys[rows, cut]
            logits, _ = model(xs[rows], yn)
            pred[i + rows, cut] = logits.argmax(-1)
            cut = None
    return pred


def weighted_train_step(model, optimizer, x, y):
    """unseen.train_step with LOSSW's weights: the k-th target of a problem weighs k (sq: k * k), its last two
    (the answer and <eos>) 1."""
    logits, _ = model(x, y, unseen.first_rows(model, x))
    m = y != -1
    k = m.long().cumsum(1)                                                        # 1, 2, ... on the targets
    last2 = k > (m.sum(1, keepdim=True) - 2)                                      # the answer and <eos>
    w = torch.where(last2, torch.ones_like(k), k ** (2 if LOSSW == 'sq' else 1))[m].float()
    ce = torch.nn.functional.cross_entropy(logits, y[m], reduction='none')
    return descend(optimizer, (w * ce).sum() / w.sum())


def marked_model(cfg, weights=None):
    """unseen.make_model, plus MARK's learned vector, added to the token embedding at the cut."""
    model = make_model(cfg, weights)
    model.cut_mark = torch.nn.Parameter(torch.zeros(cfg.n_embd, device=cfg.device))

    def add_mark(module, inputs, out):
        B, T, _ = out.shape
        at = cut if cut is not None else torch.full((B,), T - 1, device=out.device)
        return out + (torch.arange(T, device=out.device).view(1, T, 1) == at.view(B, 1, 1)) * model.cut_mark
    model.transformer.wte.register_forward_hook(add_mark)
    return model


make_model = unseen.make_model
unseen.PROBE.update({k: v for k, v in dict(CHAIN=CHAIN, JITTER=JITTER, BALANCE=BALANCE, LOGN=LOGN, PREFIX=PREFIX,
                                          MARK=MARK, LOSSW=LOSSW, RULELESS=RULELESS).items()
                     if v != dict(CHAIN='heads').get(k, '' if isinstance(v, str) else 0)})
logic_data.problem_tokens = problem_tokens
logic_data.GenConfig.max_tokens = max_tokens
if KEEP or RULELESS:
    unseen.batches = batches
if JITTER:
    unseen.train_step = train_step
if LOGN:
    unseen.causal_softmax = log_n_softmax
if PREFIX:
    unseen.causal_softmax, unseen.train_step, unseen.target_preds = \
        prefix_softmax, prefix_train_step, prefix_target_preds
if LOSSW:
    unseen.train_step = weighted_train_step
if PREFIX and MARK:
    unseen.make_model = marked_model
if CHAIN != 'heads':
    unseen.mistakes = lambda *a, **k: None      # its kinds read the heads' format
if __name__ == '__main__':
    print(f'probe: CHAIN={CHAIN} JITTER={JITTER} BALANCE={BALANCE} LOGN={LOGN} PREFIX={PREFIX} MARK={MARK} '
          f'LOSSW={LOSSW} RULELESS={RULELESS}', flush=True)
    if any(a in ('-h', '--help') for a in sys.argv[1:]):
        print(__doc__.strip() + "\n\nThe rest of the command line is unseen.py's:\n")
    unseen.watch_silence()       # a line at least every 10 s (a minute in a file), as unseen.py's runs
    unseen.main(sys.argv[1:])
