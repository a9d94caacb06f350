"""
unseen: why transformers fail to reason with symbols they never saw in training, and what fixes it.

A small reproduction of "To See the Unseen" (Lazic, Fowl, Gyorgy, Szepesvari, arXiv 2604.21632).
A decoder-only transformer learns to solve Horn-clause problems (logic_data.py) step by step. It is
trained on variable names x0..x{n-1} and tested on problems written in names u0..u99 that never occurred
in training, and on problem shapes it never trained on. The demo (2 CPU cores: 23-28 min):

    python unseen.py --unseen all --freeze-emb

Why the standard model fails (the paper's "unembedding collapse", Lemma 4.1, theory_demo.py): the output
rows of tokens never a training target all get the same update. Softmax pushes their logits down; weight
decay contracts their differences under GD or SGD (the lemma), AdamW's normalised step moves them alike even
without it. They end near one shared vector; with tied embeddings the unseen names look alike as inputs too.

Deliberate deviations from nanoGPT's model: identity terms in every head (Boix-Adsera et al.), copy attention
(the paper's), tied or untied embeddings, the paper's switches (freeze, forget), Muon, an average of weights.

Read it top to bottom to main() as the paper's argument: config, the model, the switches, optimisation, data,
evaluation, training, the verdict. After main(): speed and bookkeeping (one section a first reading skips),
the outputs, --ckpt / --ask / --problems, the command line. The lab (the paper's grid, the bench): lab/.
"""

import argparse
import atexit
import collections
import contextlib
import copy
import ctypes
import glob
import hashlib
import io
import itertools
import json
import logging
import math
import os
import random
import signal
import sys
import tempfile
import threading
import time
import types
from dataclasses import dataclass, asdict, field, fields, replace

try:            # Ctrl-C while torch loads (a second or two) gets the one line everything else gets
    import torch
    import torch.nn as nn
    from torch.nn import functional as F
except KeyboardInterrupt:
    sys.exit('error: interrupted')

import logic_data

# -----------------------------------------------------------------------------
# config


def arg(default, help=None, **flag):
    """A Config field and its flag's help (and metavar): one text per flag, --help prints it."""
    return field(default=default, metadata=dict(help=help, **flag))


@dataclass
class Config:
    """A run's settings: each field with a help text is a flag (n_symbols: --n-symbols). None: by layout."""
    # data (logic_data.py)
    n_symbols: int = arg(5000, "training symbol pool: the paper's diversity knob")
    max_depth: int = arg(4, 'longest planted derivation (training: depths 1..max_depth)')
    max_premises: int = arg(None, "premises per rule, 1 to 3 (1: no conjunctions; 2: 'a b -> c')")
    curriculum: int = arg(None, 'training problems start at depth 1, one depth more every N steps (0: every '
                          'depth at once)', metavar='N')
    broken: float = arg(0.5, 'share of the unprovable training problems whose planted path breaks at a '
                        'random step (the chain stops early or never starts)')
    layout: str = arg('shapes', 'shapes: problems of many shapes; template: one layout (2 facts, the path, 2 '
                      'dead rules)', choices=logic_data.LAYOUTS)
    shape_curriculum: bool = arg(True, 'with --curriculum: small shapes first, every shape from the last '
                                 'stage')
    balance: bool = arg(None, 'training chains of every length about equally often; --no-balance: as drawn')
    max_facts: int = arg(logic_data.SHAPE_LIMITS['facts'][1], 'the most facts a problem has (layout shapes)')
    max_dead: int = arg(3, 'the most dead rules (never firing) a training problem has (layout shapes; the '
                        'tests 0-3)')
    max_side: int = arg(6, 'the most side rules (firing, not needed) a training problem has (layout shapes; '
                        "the tests 0-2; 6: chains as long as the tests' 4 steps beyond)")
    idle: float = arg(0.03, 'the share of training problems in which no rule fires: facts alone or beside '
                      "rules that never fire, the query a fact or nothing reaches it ('a . ? a'; layout "
                      'shapes; the tests have none)')
    # model
    n_layer: int = arg(None, 'transformer blocks')
    n_head: int = arg(None, 'attention heads')
    n_embd: int = arg(64, 'model width')
    copy_attn: bool = arg(False, 'add copy attention (it copies raw input tokens: CopyAttention)')
    copy_form: str = arg('residual', "residual: add the attended raw embeddings to the residual stream; "
                         "pointer: add copy logits for the attended tokens' ids",
                         choices=('residual', 'pointer'))
    identity: bool = arg(True, "Boix-Adsera et al.'s identity terms (a_h I, b_h I) in every attention head")
    tie_emb: bool = arg(True, 'the unembedding is the input embedding (GPT-2); --no-tie-emb: two matrices, '
                        'equal at first')
    shift: int = arg(None, 'training reads each problem from row 0 or row N of the position table, the tests '
                     'from row N (keep N even)', metavar='N')
    # the paper's switches on the (un)embeddings
    freeze_emb: bool = arg(False, 'orthogonal (un)embeddings, never updated')
    freeze_unused: bool = arg(False, 'freeze only the rows of tokens never a training target')
    forget_every: int = arg(0, "re-draw the names' (un)embedding rows and their AdamW state every K steps, "
                            'and on the last step (0: never)', metavar='K')
    forget_until: int = arg(0, 'no resets after step N (0: never stop)', metavar='N')
    # optimisation
    steps: int = arg(None, 'training steps')
    batch_size: int = arg(None, 'problems a step')
    optimizer: str = arg(None, "muon: Muon on the blocks' matrices, AdamW on the rest; adamw: AdamW on "
                         'everything', choices=('muon', 'adamw'))
    lr: float = arg(None, "AdamW's rate")
    emb_lr: float = arg(1.0, "the names' rows' AdamW rate, as a share of --lr (lab/between_resets.py)")
    muon_lr: float = arg(6e-3, "Muon's rate, with --optimizer muon (the schedule scales both)")
    weight_decay: float = arg(0.1, 'AdamW decay on every matrix, the (un)embeddings included')
    warmup: int = arg(100, 'steps of the linear warmup')
    decay: float = arg(None, 'the share of the steps, at the end, over which the rate decays to --lr-floor')
    lr_floor: float = arg(0.1, 'the rate at the end, as a share of the full rate')
    ema: float = arg(None, 'evaluate and save a moving average of the weights with this decay, updated '
                     'after every step (0: the last weights)')
    # evaluation and logging
    eval_every: int = arg(500, 'evaluate (a log line) every this many steps')
    eval_n: int = arg(500, 'test problems per scenario')
    seed: int = arg(0, 'the seed of the model, the training problems and the tests')
    device: str = 'cpu'        # the command line's --device auto picks one (pick_device)
    precision: str = arg('fp32', choices=('fp32', 'bf16'))   # bf16: products in bfloat16 (pick_precision)
    compile: bool = False      # attention and MLP through torch.compile (compile_blocks; --compile auto)

    def __post_init__(self):   # the defaults by layout: for the command line and code alike
        for k, v in LAYOUT_DEFAULTS.get(self.layout, {}).items():   # (an unknown one: config_error)
            if getattr(self, k) is None:
                setattr(self, k, v)

    def gen_config(self, step=None):
        """The generator's settings: of the test problems, or (with `step`) of the training problems then.
        Training only: the curriculum's stage, broken paths, the balanced mix, idle problems and the extra
        side and dead rules; the tests have every depth, 0-3 dead rules and 0-2 side rules."""
        shapes = self.layout == 'shapes'
        gen = logic_data.GenConfig(max_depth=self.max_depth, max_premises=self.max_premises,
                                   layout=self.layout, max_facts=self.max_facts,
                                   held_out=logic_data.HELD_OUT if shapes else ())
        if step is None:
            return replace(gen, broken=0.0)
        stage = self.depth_at(step)
        caps = logic_data.curriculum_caps(stage, self.max_facts, self.max_dead, self.max_side) \
            if stage < self.max_depth and self.shape_curriculum and shapes else None   # small shapes first
        return replace(gen, max_depth=stage, shape_caps=caps, broken=self.broken, balance=self.balance,
                       idle=self.idle if shapes else 0.0, max_dead=self.max_dead, max_side=self.max_side)

    def depth_at(self, step):
        """The curriculum: the deepest derivation in the training problems at `step`."""
        return min(self.max_depth, 1 + step // self.curriculum) if self.curriculum else self.max_depth

    def longest_problems(self):
        """The generator of the longest problems the model reads: chains 4 steps longer than training's."""
        deepest = self.max_depth + logic_data.BEYOND[-1] * (self.layout == 'shapes')
        return logic_data.GenConfig(max_depth=deepest, max_premises=self.max_premises, layout=self.layout,
                                    max_facts=self.max_facts)

    def block_size(self):
        """Longest sequence the model reads (the learned position table's size)."""
        return self.longest_problems().max_tokens()


# what each layout needs: problems of every shape take six layers of eight heads, more and larger batches,
# Muon, rules of two premises, --balance, --shift 2 and --ema; the one layout none of it.
LAYOUT_DEFAULTS = {
    'shapes': dict(steps=4500, batch_size=128, n_layer=6, shift=2, optimizer='muon', lr=1e-2, decay=0.4,
                   n_head=8, curriculum=250, balance=True, max_premises=logic_data.PREMISES['shapes'],
                   ema=0.99),
    'template': dict(steps=4000, batch_size=64, n_layer=3, shift=0, optimizer='adamw', lr=2e-3, decay=0.25,
                     n_head=4, curriculum=500, balance=False, max_premises=logic_data.PREMISES['template'],
                     ema=0.0)}

# -----------------------------------------------------------------------------
# the model: nanoGPT, with identity terms and copy attention


def causal_softmax(att):
    """Softmax over the keys at or before each query, in float32. The mask is added (-inf after the query),
    one pass that the backward pass skips: masked_fill is a copy and a fill, and its gradient another."""
    T = att.size(-1)
    mask = torch.full((T, T), float('-inf'), device=att.device).triu(1)               # (T, T)
    return F.softmax(att + mask, dim=-1)                          # (bfloat16 scores: float32 sums)


class CausalSelfAttention(nn.Module):
    """nanoGPT's attention plus (cfg.identity) Boix-Adsera et al.'s identity terms: head h scores with
    W_Q W_K^T + a_h I and outputs through W_V W_O + b_h I. At a = 1 every head starts out attending to the
    tokens equal to the current one, which textbook attention learns only slowly here; b starts at 0."""

    def __init__(self, cfg):
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.identity = cfg.identity
        if cfg.identity:
            self.id_a = nn.Parameter(torch.ones(cfg.n_head))    # + a_h <x_s, x_t> / sqrt(C), a = 1 at first
            self.id_b = nn.Parameter(torch.zeros(cfg.n_head))   # + b_h att_h @ x, b = 0 at first
        self.attend = attend           # compile_blocks may swap in a compiled copy (same function)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = [t.view(B, T, self.n_head, -1).transpose(1, 2) for t in (q, k, v)]      # (B, nh, T, hs)
        if self.identity:
            y, z = self.attend(q, k, v, x, self.id_a, self.id_b)   # (B, nh, T, hs), (B, T, C)
        elif q.dtype == torch.bfloat16 and q.device.type == 'cpu':   # the fused kernel is slow in CPU bf16
            y, z = attend(q, k, v, x, None, None)
        else:
            y, z = F.scaled_dot_product_attention(q, k, v, is_causal=True), 0
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)) + z


def attend(q, k, v, x, a, b):
    """Attention with the identity terms (a, b: None without them): softmax(q k^T / sqrt(hs) + a_h x x^T /
    sqrt(C)) = att; returns att @ v and sum_h b_h att_h @ x. Scales go on the small tensors, never on the
    (B, nh, T, T) scores: on a CPU the passes over the scores are most of a step."""
    hs, C = q.size(-1), x.size(-1)
    att = (q / math.sqrt(hs)) @ k.transpose(-2, -1)                                     # (B, nh, T, T)
    if a is not None:
        att = att + a.view(-1, 1, 1) * ((x / math.sqrt(C)) @ x.transpose(1, 2)).unsqueeze(1)
    att = causal_softmax(att)                                                           # (B, nh, T, T)
    y = att.to(v.dtype) @ v                                                             # (B, nh, T, hs)
    return y, 0 if b is None else (b.view(-1, 1, 1) * att).sum(1).to(x.dtype) @ x       # (B, T, C)


class CopyAttention(nn.Module):
    """The paper's copy attention: one head whose queries and keys come from the hidden states and whose
    values are the raw input tokens, with a learned strength beta (the paper's exact form is not known):
      residual  adds beta * att @ X W_E to the residual stream: it writes an unseen token only through its
                (collapsed) unembedding row
      pointer   adds beta * att @ onehot(idx) to the logits: it writes the attended token's id directly"""

    def __init__(self, cfg):
        super().__init__()
        self.form = cfg.copy_form
        self.ln = nn.LayerNorm(cfg.n_embd)
        self.c_qk = nn.Linear(cfg.n_embd, 2 * cfg.n_embd)
        self.beta = nn.Parameter(torch.full((1,), 1.0 if cfg.copy_form == 'residual' else 5.0))

    def attention(self, x):
        B, T, C = x.size()
        q, k = self.c_qk(self.ln(x)).split(C, dim=2)                         # (B, T, C) each
        att = causal_softmax((q @ k.transpose(1, 2)) / math.sqrt(C))         # (B, T, T)
        self.last_att = att.detach()                                         # for --ask: where it copies from
        return att


class MLP(nn.Module):

    def __init__(self, cfg):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):

    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):

    def __init__(self, cfg, vocab_size):
        super().__init__()
        self.cfg = cfg
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, cfg.n_embd),
            wpe=nn.Embedding(cfg.block_size() + cfg.shift, cfg.n_embd),        # cfg.shift rows more
            h=nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)]),
            ln_f=nn.LayerNorm(cfg.n_embd),
        ))
        self.copy_attn = CopyAttention(cfg) if cfg.copy_attn else None
        self.lm_head = nn.Linear(cfg.n_embd, vocab_size, bias=False)
        if cfg.tie_emb:
            self.transformer.wte.weight = self.lm_head.weight   # weight tying: one matrix, both sides
        self.apply(self._init_weights)
        init_embeddings(self)

    def _init_weights(self, module):
        # std 1/sqrt(width), not GPT-2's 0.02: at width 64 that leaves the scores near zero (a long plateau)
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=1 / math.sqrt(module.weight.size(-1)))
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def embeddings(self):
        """The (un)embedding matrices the paper's switches act on: one if tied, two if not."""
        return list({id(p): p for p in (self.transformer.wte.weight, self.lm_head.weight)}.values())

    def forward(self, idx, targets=None, first_row=None):
        """Logits (B, T, V); with targets (-1 on the prompt), the logits (N, V) at the N target positions and
        the loss. Positions: rows first_row, first_row + 1, ... of the table ((B, 1) or cfg.shift)."""
        with torch.autocast(idx.device.type, dtype=torch.bfloat16, enabled=self.cfg.precision == 'bf16'):
            B, T = idx.size()
            first = self.cfg.shift if first_row is None else first_row
            tok_emb = self.transformer.wte(idx)                                      # (B, T, C)
            x = tok_emb + self.transformer.wpe(first + torch.arange(T, device=idx.device))   # (T,) or (B, T)
            for block in self.transformer.h:
                x = block(x)
            pointer = self.copy_attn is not None and self.copy_attn.form == 'pointer'
            if self.copy_attn is not None:
                att = self.copy_attn.attention(x)                                    # (B, T, T)
                if not pointer:                                                      # copy raw embeddings
                    x = x + self.copy_attn.beta * (att.to(tok_emb.dtype) @ tok_emb)
            x = self.transformer.ln_f(x)
            mask = torch.ones(B, T, dtype=torch.bool, device=idx.device) if targets is None else targets != -1
            logits = self.lm_head(x[mask]).float()                                   # (N, V)
            if pointer:   # write the attended context tokens' ids straight into the logits: beta att @ onehot
                context = idx.unsqueeze(1).expand(B, T, T)[mask]                     # (N, T): the ids seen
                copied = torch.zeros_like(logits).scatter_add_(1, context, self.copy_attn.beta * att[mask])
                logits = logits + copied                                             # (N, V)
            if targets is None:
                return logits.view(B, T, -1), None                                   # (B, T, V)
            return logits, F.cross_entropy(logits, targets[mask])


def make_model(cfg, weights=None):
    """The model as training starts it (cfg.seed), or holding `weights`; frozen rows with --freeze-emb."""
    torch.manual_seed(cfg.seed)
    model = GPT(cfg, len(logic_data.Vocab(cfg.n_symbols))).to(cfg.device)
    if weights is not None:
        model.load_state_dict(weights)
    if cfg.freeze_emb:
        freeze_embeddings(model)
    return model

# -----------------------------------------------------------------------------
# the paper's switches on the (un)embeddings: orthogonal init, freezing, forgetting (its rows' slower rate)


@torch.no_grad()
def init_embeddings(model, rows=slice(None)):
    """Orthogonal (un)embeddings (`rows`: only these). With V > C tokens the columns are orthonormal: a
    tight frame, the rows spread as evenly as C dimensions allow, of mean norm 1 (untied: both matrices)."""
    w = torch.empty_like(model.lm_head.weight)
    V, C = w.shape
    nn.init.orthogonal_(w, gain=math.sqrt(max(V / C, 1.0)))
    for m in model.embeddings():
        m[rows] = w[rows]


def freeze_embeddings(model):
    """--freeze-emb: the (un)embeddings keep their orthogonal init; no gradient ever reaches them."""
    for w in model.embeddings():
        w.requires_grad_(False)


@torch.no_grad()
def forget_embeddings(model, optimizer, rows, averaged=None):
    """Active forgetting (Chen et al. 2023) of the names' rows: a fresh orthogonal draw, their AdamW state
    zeroed, their average (--ema) restarted. The signs' rows keep theirs (re-drawn, the model would have to
    learn to read the problem again)."""
    init_embeddings(model, rows)
    for avg, w in zip(averaged.embeddings() if averaged is not None else [], model.embeddings()):
        avg[rows] = w[rows]
    for w in model.embeddings():
        for k, v in optimizer.state.get(w, {}).items():   # exp_avg, exp_avg_sq (their rows); step is shared
            if k != 'step':
                v[rows] = 0


def forgets_at(cfg, step):
    """A reset after `step`? Every forget_every up to forget_until; on the last step if resets never stop."""
    through = cfg.forget_until == 0 or cfg.forget_until >= cfg.steps      # resets all through training
    return (cfg.forget_every > 0 and step > 0 and (step <= cfg.forget_until or through)
            and (step % cfg.forget_every == 0 or (through and step == cfg.steps)))


def hold_unused_rows(model, vocab):
    """--freeze-unused: only rows never a training target (unseen names, <pad>, signs) keep their init."""
    rows = torch.tensor(vocab.never_target_ids, device=model.lm_head.weight.device)
    kept = [(w, w[rows].clone()) for w in model.embeddings()]

    @torch.no_grad()
    def hold():
        for w, rows_at_init in kept:
            w[rows] = rows_at_init
    return hold


def slow_name_rows(adamw, model, rows, share):
    """--emb-lr: the names' rows move `share` times as far as AdamW moves them (AdamW at `share` times the
    rate, weight decay included). Resets need it: at the full rate AdamW lines re-drawn rows up at once."""
    rows, before = torch.tensor(rows, device=model.lm_head.weight.device), []

    @torch.no_grad()
    def remember(*_):
        before[:] = [w[rows].clone() for w in model.embeddings()]

    @torch.no_grad()
    def shorten(*_):
        for w, old in zip(model.embeddings(), before):
            w[rows] = old + share * (w[rows] - old)
    adamw.register_step_pre_hook(remember)
    adamw.register_step_post_hook(shorten)

# -----------------------------------------------------------------------------
# optimisation: AdamW (and Muon on the blocks' matrices), warm-up, then a stable rate and a decay


class Muon(torch.optim.Optimizer):
    """Muon (Jordan et al. 2024) as torch.optim.Muon computes it, but on all matrices of one shape at once
    and in float32 (torch's: one at a time in bfloat16, which a CPU without AVX512-BF16 emulates: 110 ms
    a step of the demo, not 6)."""

    def __init__(self, params, lr, weight_decay, momentum=0.95):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum))

    @staticmethod
    def orthogonalise(g):
        """(n, A, B) -> about U V^T of each matrix's SVD U S V^T: torch.optim.Muon's Newton-Schulz."""
        x = g.mT if g.size(-2) > g.size(-1) else g
        x = x / x.norm(dim=(-2, -1), keepdim=True).clamp(min=1e-7)
        for _ in range(5):
            a = x @ x.mT
            x = torch.baddbmm(x, torch.baddbmm(a, a, a, beta=-4.7750, alpha=2.0315), x, beta=3.4445)
        return x.mT if g.size(-2) > g.size(-1) else x

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            by_shape = {}
            for p in group['params']:
                if p.grad is not None:
                    by_shape.setdefault(p.shape, []).append(p)
            for shape, ps in by_shape.items():
                bufs = [self.state[p].setdefault('momentum_buffer', torch.zeros_like(p)) for p in ps]
                grads = [p.grad for p in ps]
                torch._foreach_lerp_(bufs, grads, 1 - group['momentum'])
                update = torch.stack(grads).lerp_(torch.stack(bufs), group['momentum'])   # Nesterov
                update = self.orthogonalise(update.float()) * (0.2 * math.sqrt(max(shape)))  # AdamW's RMS
                torch._foreach_mul_(ps, 1 - group['lr'] * group['weight_decay'])
                torch._foreach_add_(ps, list(update.to(ps[0].dtype).unbind()), alpha=-group['lr'])


class Optimizers:
    """AdamW and Muon stepped as one optimizer (the training loop and the resets see one object)."""

    def __init__(self, *optimizers):
        self.optimizers = optimizers
        self.param_groups = [g for o in optimizers for g in o.param_groups]
        self.state = collections.ChainMap(*[o.state for o in optimizers])    # each one's, as it fills

    def zero_grad(self, set_to_none=True):
        for o in self.optimizers:
            o.zero_grad(set_to_none=set_to_none)

    def step(self):
        for o in self.optimizers:
            o.step()


def make_optimizer(model, cfg):
    """AdamW with weight decay on every matrix, the (un)embeddings included (the paper's mechanism); with
    --optimizer muon, Muon on the blocks' matrices (it leaves the early plateau far sooner). Each group's
    full rate is kept in 'base_lr' for the schedule."""
    params = [p for p in model.parameters() if p.requires_grad]
    muon = cfg.optimizer == 'muon'
    blocks = {id(p) for p in model.transformer.h.parameters() if p.dim() == 2} if muon else {}
    matrices = [p for p in params if id(p) in blocks]                  # (C, C), (3C, C), (4C, C), (C, 4C)
    decay = [p for p in params if p.dim() >= 2 and id(p) not in blocks]    # (un)embeddings, position table
    no_decay = [p for p in params if p.dim() < 2]                           # biases, gains, a_h, b_h, beta
    groups = [dict(params=decay), dict(params=no_decay, weight_decay=0.0)]
    adamw = torch.optim.AdamW([g for g in groups if g['params']], lr=cfg.lr, betas=(0.9, 0.99),
                              weight_decay=cfg.weight_decay, fused=cfg.device in ('cpu', 'cuda'))
    if cfg.emb_lr != 1 and not cfg.freeze_emb:
        slow_name_rows(adamw, model, logic_data.Vocab(cfg.n_symbols).name_ids, cfg.emb_lr)
    optimizer = adamw if not matrices else Optimizers(
        adamw, Muon(matrices, lr=cfg.muon_lr, weight_decay=cfg.weight_decay))
    for group in optimizer.param_groups:
        group['base_lr'] = group['lr']
    return optimizer


def decay_start(cfg):
    """The step at which the full rate starts to decay (never inside the warmup)."""
    return max(cfg.warmup, cfg.steps * (1 - cfg.decay))


def lr_factor(cfg, step):
    """The schedule's share of the full rate at `step`: a linear warmup, the full rate, and over the last
    cfg.decay of the steps a linear decay to cfg.lr_floor."""
    if step < cfg.warmup:
        return (step + 1) / cfg.warmup
    s = decay_start(cfg)
    return 1 - (1 - cfg.lr_floor) * min(1.0, max(0.0, step - s) / (cfg.steps - s))


def set_lr(optimizer, cfg, step):
    """Every parameter group (AdamW's, Muon's) at the schedule's share of its full rate for `step`."""
    for group in optimizer.param_groups:
        group['lr'] = group['base_lr'] * lr_factor(cfg, step)

# -----------------------------------------------------------------------------
# data


def make_batch(problems, vocab, device='cpu'):
    """Encode and pad to the longest in the batch. Targets are -1 on the prompt: the loss covers only
    the chain, the answer and <eos>.
        x:  x4 .  x4 -> x2 .  ?  x2 :  x2 T
        y:  -1 -1 -1 -1 -1 -1 -1 -1 x2 T  <eos>"""
    return pad_batch([vocab.encode(p) for p in problems], vocab.pad, device)


def pad_batch(seqs, pad, device='cpu'):
    """(x, y) from encoded problems, (token ids, length of the prompt) each: make_batch's second half."""
    T = max(len(ids) for ids, _ in seqs) - 1
    x = [ids[:-1] + [pad] * (T + 1 - len(ids)) for ids, _ in seqs]
    y = [[-1] * (n - 1) + ids[n:] + [-1] * (T + 1 - len(ids)) for ids, n in seqs]
    return torch.tensor(x, device=device), torch.tensor(y, device=device)


def batches(rng, cfg, vocab, ahead=8, names=None):
    """Endless training batches in the training names (or `names`), drawn `ahead` batches at a time and
    grouped by length, so that a batch pads only to its own longest problem."""
    names = names or vocab.train_names
    for step in itertools.count(0, ahead):
        gen = cfg.gen_config(step)       # the curriculum: the problems allowed grow with the step
        seqs = [vocab.encode(logic_data.generate(rng, gen, names)) for _ in range(ahead * cfg.batch_size)]
        seqs.sort(key=lambda s: len(s[0]))
        chunks = [seqs[i:i + cfg.batch_size] for i in range(0, len(seqs), cfg.batch_size)]
        rng.shuffle(chunks)
        for chunk in chunks:
            yield pad_batch(chunk, vocab.pad, cfg.device)


def eval_sets(cfg, vocab):
    """Fixed test problems for each scenario, drawn with their own seed ('query', 'all': unseen names)."""
    rng = random.Random(cfg.seed + 12345)
    return {s: logic_data.make_problems(rng, cfg.gen_config(), vocab, cfg.eval_n, s)
            for s in logic_data.SCENARIOS}


def shape_sets(cfg, vocab):
    """The test sets of shapes training never drew (logic_data.shape_sets), with their own seed."""
    return logic_data.shape_sets(random.Random(cfg.seed + 54321), cfg.gen_config(), vocab,
                                 max(1, cfg.eval_n // 2), cfg.block_size())


# -----------------------------------------------------------------------------
# evaluation: exact match under greedy decoding, and the collapse metric


@torch.no_grad()
def target_preds(model, x, y, chunk=None):
    """(B, T): teacher-forced, the argmax given the correct prefix at each target position (-1 elsewhere)."""
    pred, chunk = torch.full_like(y, -1), chunk or eval_chunk(model.cfg, x.size(1))
    for i in range(0, len(x), chunk):
        logits, _ = model(x[i:i + chunk], y[i:i + chunk])   # (N, V): at the N target positions only (fast)
        pred[i:i + chunk][y[i:i + chunk] != -1] = logits.argmax(-1)
    return pred


def exact_match(model, x, y, chunk=None):
    """Per problem: is the whole chain + answer + <eos> right under greedy decoding? Teacher-forced: greedy
    decoding reproduces the target iff every argmax given the correct prefix is the target (induction)."""
    return (target_preds(model, x, y, chunk) == y).all(dim=1)


def evaluate(model, vocab, sets, device='cpu', predictions=None):
    """Exact match on each test set s, and as s_T on its provable problems, s_F on the unprovable ones (no
    name to write), s_named where the chain is not empty; `predictions`: filled with (problems, y, pred)."""
    model.eval()
    acc = {}
    for s, problems in sets.items():
        x, y = make_batch(problems, vocab, device)
        pred = target_preds(model, x, y)
        ok = (pred == y).all(dim=1)
        if predictions is not None:
            predictions[s] = (problems, y, pred)
        for key, want in ((s, None), (f'{s}_T', True), (f'{s}_F', False), (f'{s}_named', 'chain')):
            sel = [i for i, p in enumerate(problems)
                   if want is None or (bool(p.chain) if want == 'chain' else p.answer == want)]
            acc[key] = ok[sel].float().mean().item() if sel else float('nan')
    model.train()
    return acc


def evaluate_shapes(model, vocab, sets, device='cpu'):
    """Exact match on each of `shape_sets` (and 'held-out shapes, mean' over the held-out families)."""
    acc = {name: evaluate(model, vocab, pair, device) for name, pair in sets.items()}
    held = [name for name in sets if logic_data.is_held_out(name)]     # the families training never drew
    mean = {s: sum(acc[h][s] for h in held) / len(held) for s in ('none', 'all')}
    return {**{h: acc[h] for h in held}, **({'held-out shapes, mean': mean} if len(held) > 1 else {}), **acc}


@torch.no_grad()
def mean_pairwise_cosine(w):
    """The collapse metric: mean cosine over all pairs of distinct rows of w (a tensor or numpy array)."""
    u = F.normalize(torch.as_tensor(w).float(), dim=1)
    n = u.size(0)
    return (u.sum(0).square().sum().item() - n) / (n * (n - 1))    # sum_ij <u_i, u_j> = |sum_i u_i|^2


@torch.no_grad()
def rows_stats(model, vocab):
    """The unseen rows of the unembedding against the training rows: mean pairwise cosine (the collapse)
    and mean norm (shrunk rows lose every logit before their cosine shows a collapse)."""
    w = model.lm_head.weight
    norm = w.float().norm(dim=1)
    return dict(cos_unseen=mean_pairwise_cosine(w[vocab.unseen_ids]),
                cos_train=mean_pairwise_cosine(w[vocab.train_ids]),
                norm_unseen=norm[vocab.unseen_ids].mean().item(),
                norm_train=norm[vocab.train_ids].mean().item())

# -----------------------------------------------------------------------------
# training


def first_rows(model, x):
    """Each training problem's first row of the position table, (B, 1): row 0 or cfg.shift at random."""
    shift = model.cfg.shift
    return shift * (1 - torch.randint(0, 2, (x.size(0), 1), device=x.device)) if shift else None


def train_step(model, optimizer, x, y):
    """One optimiser step on one batch; returns the loss."""
    _, loss = model(x, y, first_rows(model, x))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.item()


@torch.no_grad()
def average_weights(averaged, model, decay):
    """--ema: p_avg += (1 - decay) (p - p_avg) after every step; at 0.99 about the last hundred steps."""
    if averaged is model:      # --ema 0: the last weights
        return
    for avg, p in zip(averaged.parameters(), model.parameters()):
        avg.lerp_(p, 1 - decay)


def train(cfg, log=print, predictions=None):
    """Train one model; returns (model, vocab, history: a dict per evaluation, each a log line)."""
    vocab, model = logic_data.Vocab(cfg.n_symbols), make_model(cfg)
    optimizer = make_optimizer(model, cfg)
    averaged = copy.deepcopy(model) if cfg.ema else model     # the model evaluated and saved (Config.ema)
    if cfg.compile:                          # the same functions, their passes fused: faster, half the memory
        compile_blocks(model, log)
    meter = Meter(model, vocab, log)         # ms a step, the share of the matmul rate, the clock (after main)
    data, sets = batches(random.Random(cfg.seed), cfg, vocab), eval_sets(cfg, vocab)
    hold = hold_unused_rows(model, vocab) if cfg.freeze_unused else lambda: None
    history, losses = [], []
    for step in range(cfg.steps + 1):
        evaluating, before = step % cfg.eval_every == 0 or step == cfg.steps, {}
        if forgets_at(cfg, step):   # the reset first: a resetting run evaluates and saves a model just reset
            if evaluating:          # (its log line says what the rows were just before)
                before = dict(all_before_reset=evaluate(averaged, vocab, {'all': sets['all']},
                                                        cfg.device)['all'],
                              cos_before_reset=rows_stats(averaged, vocab)['cos_unseen'])
            forget_embeddings(model, optimizer, vocab.name_ids, averaged)
        if evaluating:
            t = meter.evaluation_starts()
            acc = evaluate(averaged, vocab, sets, cfg.device, predictions)
            loss = sum(losses) / len(losses) if losses else float('nan')      # step 0: nothing trained yet
            history.append(dict(step=step, loss=loss, **acc, **rows_stats(averaged, vocab), **before,
                                **meter.read(step, t)))
            log(progress_line(history[-1], cfg.steps))
            losses = []
        if step == cfg.steps:
            return averaged, vocab, history
        set_lr(optimizer, cfg, step)
        meter.step_starts()
        x, y = next(data)
        losses.append(train_step(model, optimizer, x, y))
        hold()
        average_weights(averaged, model, cfg.ema)
        if not math.isfinite(losses[-1]):   # diverged: no checkpoint, no verdict on garbage
            raise FloatingPointError(f"the loss became {losses[-1]} at step {step + 1} (try a smaller --lr)")
        meter.stepped(step, x, y)


# -----------------------------------------------------------------------------
# the verdict, and main


def verdict(cfg, history, headline, shapes=None, predictions=None):
    """The run's end in words: the last evaluation's table, whether the model solves the `headline`
    scenario and why, the shapes and lengths it never trained on, its unseen rows, which model is judged."""
    last = history[-1]
    lines = ['', f"{'scenario':<10}{'exact match':>12}",
             *[f"{s + (' *' if s == headline else ''):<10}{last[s]:>12.1%}" for s in logic_data.SCENARIOS],
             rows_str(last), '', *([shapes_str(cfg, shapes), ''] if shapes else []),
             *([lengths_str(cfg, predictions, shapes), ''] if shapes and predictions else [])]
    acc = round(last[headline], 3)                               # as printed: 89.96% is 90.0%, solved
    what = {'none': 'problems in training symbols', 'query': 'problems whose query is an unseen symbol',
            'all': 'problems written entirely in unseen symbols'}[headline]
    lines.append(f"verdict: the model solves {acc:.1%} of {what}." if acc >= 0.9 else
                 f"verdict: the model solves only {acc:.1%} of {what}." if acc >= 0.5 else
                 f"verdict: the model fails on {what} ({acc:.1%} exact match).")
    if headline != 'none':
        learned, alike = last['none'] >= 0.9, acc >= last['none'] - 0.05     # within 5 points: as well
        carries = acc >= 0.9 or alike
        why = ("it learned the task, and that carries over to the unseen names." if learned and carries
               else "it learned the task, so what fails is the unseen names." if learned
               else "about as much as in unseen ones: what it lacks is the task, not the names." if alike
               else "it has not learned the task well, so not all of the failure is about the unseen names.")
        lines.append(f"         in training symbols it solves {last['none']:.1%}: {why}")
        named = last.get(headline + '_named', last[headline])
        if last[headline] - named > 0.005:
            lines.append(f"         (on the problems whose chain writes a name: {named:.1%}; the others ask "
                         "about a fact: T, with no name to write.)")
        lines += shapes_note(cfg, shapes) if shapes else []      # shapes and lengths it never trained on
    if not cfg.freeze_emb and last['cos_unseen'] > 0.5:          # the collapse (theory_demo.py)
        lines.append(f"         its unseen unembeddings collapsed (mean cosine {last['cos_unseen']:.2f}): it "
                     "cannot tell unseen symbols apart.")
    elif not cfg.freeze_emb and last['norm_unseen'] < 0.5 * last['norm_train']:
        lines.append(f"         its unseen unembeddings shrank (mean norm {last['norm_unseen']:.2f}, "
                     f"training rows {last['norm_train']:.2f}): their logits lose to the training names'.")
    lines += reset_note(cfg, last.get('step', cfg.steps))       # which model a resetting run is judged by
    lines.append(f"         ({run_name(cfg)}: {attention_summary(cfg)})")
    return '\n'.join(lines)


def main(argv=None):
    args = parse_args(argv)
    if args.ckpt:     # a trained model: one problem (--ask), a file of them (--problems), or its test sets
        return evaluate_checkpoint(args)
    cfg = config_from_args(args)
    out, created = output_folder(args.out, cfg)      # (a lock in it: one run a folder)
    t0, predictions = time.time(), {}
    try:
        print(plan(cfg, out))                        # (a reader gone already: stopped says so too)
        model, vocab, history = train(cfg, predictions=predictions)
    except (FloatingPointError, KeyboardInterrupt, OSError) as e:   # one line; no empty run folder
        stopped(e, out, created)
    wall, ckpt = time.time() - t0, os.path.join(out, 'ckpt.pt')
    try:                                             # at once: what was trained is kept, come what may
        save_checkpoint(ckpt, model, cfg, history)   # (a signal waits until the file is whole)
        shapes = evaluate_shapes(model, vocab, shape_sets(cfg, vocab), cfg.device)
    except KeyboardInterrupt as e:
        stopped(e, out, created, saved=ckpt)
    save_checkpoint(ckpt, model, cfg, history, shapes)
    plot(history, os.path.join(out, 'training.png'), f'{run_name(cfg)}, verdict on --unseen {args.unseen}')
    plot_rows(model, cfg, vocab, os.path.join(out, 'ckpt_rows.png'))
    print(verdict(cfg, history, args.unseen, shapes, predictions))
    print(f"trained in {duration(wall)}{peak_memory()}")
    mistakes(model, vocab, args.unseen, predictions)
    print(f"\nwrote {out}/ckpt.pt, {out}/training.png and {out}/ckpt_rows.png; try:\n"
          f"  python unseen.py --ckpt {out}/ckpt.pt --ask '{try_problem(cfg)}'")


# =============================================================================
# AFTER THE PATH: what main() calls around the paper's argument. First reading: stop here.
# =============================================================================

# -----------------------------------------------------------------------------
# speed and bookkeeping: train's Meter (the clock, the share of the matmul rate, the progress line),
# torch.compile, the watchdog that names a silent phase, the heap, evaluation in chunks, a lab probe's mark
class Meter:
    """What train's log line says beside the paper's figures: ms a step, the share of this machine's own
    matmul rate (nanoGPT's MFU), the minutes left; between log lines a progress line at least every 10 s on a
    terminal (each minute in a file or pipe). It only measures: the clock prices the steps to come by a
    forward pass over each curriculum stage's batches, timed before step 0 (stage_costs: a longer problem
    costs more than its tokens, the attention grows with their square), scaled by the pace of the last
    steps, so a machine that gets busy or idle moves it as it goes."""

    def __init__(self, model, vocab, log=print):
        self.cfg, self.vocab, self.log = model.cfg, vocab, log
        self.t0, self.rate = time.time(), matmul_rate(model.cfg)
        self.costs = stage_costs(model, vocab)              # a forward pass's seconds at each depth
        self.recent = collections.deque(maxlen=100)         # (seconds, its stage's cost) of the last steps
        self.evals = []                                     # seconds each evaluation took
        self.seconds, self.flops, self.shown, self.started = [], [], time.time(), time.time()
        self.tty = log is print and sys.stdout.isatty()

    def step_starts(self):
        self.started = time.time()

    def stepped(self, step, x, y):
        """A training step on batch (x, y) just ended (step_starts: when it began)."""
        seconds = time.time() - self.started
        self.seconds.append(seconds)
        self.flops.append(step_flops(self.cfg, *x.shape, (y != -1).sum().item(), len(self.vocab)))
        self.recent.append((seconds, self.costs[self.cfg.depth_at(step)]))
        if time.time() - self.shown >= (8 if self.tty else 48) and (step + 1) % self.cfg.eval_every:
            ms = 1000 * sum(self.seconds) / len(self.seconds)        # since the last log line
            line = (f"  step {step + 1:5d} of {self.cfg.steps} | {ms:5.0f} ms/step | "
                    f"{self.left(step + 1):4.1f} min left")
            if self.tty:
                PENDING.add('progress')            # (first: a signal may come as soon as it shows)
                print('\r' + line, end='', flush=True)
            else:
                self.log(line)
            self.shown = time.time()

    def left(self, step):
        """Minutes left at `step` (time_left at the last steps' pace and the evaluations' so far)."""
        seconds, cost = map(sum, zip(*self.recent)) if self.recent else (0.0, 1.0)
        return time_left(self.cfg, step, self.costs, seconds / max(1e-9, cost), self.evals) / 60

    def evaluation_starts(self):
        if PENDING:
            print('\r' + ' ' * 60 + '\r', end='', flush=True)     # the progress line gives way
            PENDING.clear()
        release_freed_memory()
        return time.time()

    def read(self, step, evaluation_started):
        """The log line's speed figures at `step` (an evaluation just ended); the counts then restart."""
        self.evals.append(time.time() - evaluation_started)
        seconds, flops = sum(self.seconds), sum(self.flops)
        figures = dict(ms_per_step=1000 * seconds / max(1, len(self.seconds)),
                       share=flops / max(1e-9, seconds) / self.rate, elapsed=time.time() - self.t0,
                       left=60 * self.left(step))
        self.seconds, self.flops, self.shown = [], [], time.time()
        return figures


PENDING = set()   # a progress line in place on a terminal, not yet ended (a line that stops the run ends it)


def progress_line(h, steps):
    """The line a run prints at each evaluation, from its entry in the history: the loss, the time a step,
    each scenario's exact match (on its provable T and unprovable F problems), the rows' cosine."""
    left = f"{h['left'] / 60:4.1f} min left" if h['step'] else ''
    loss = f"{h['loss']:.4f}" if h['step'] else '   -  '     # step 0: nothing trained yet
    ms = f"{h['ms_per_step']:5.1f} ms/step" if h['step'] else '    - ms/step'
    ms += f", {h['share']:3.0%} of matmul peak" if h['step'] and 'share' in h else ''
    reset = (f" | just reset (before: all {h['all_before_reset']:.1%}, cos unseen "
             f"{cos_str(h['cos_before_reset'])})" if 'all_before_reset' in h else '')
    return (f"step {h['step']:5d} | loss {loss} | {ms} | exact match "
            + ' '.join(f"{s} {acc_str(h, s)}" for s in logic_data.SCENARIOS) + " | "
            f"cos unseen {cos_str(h['cos_unseen']):>5} train {cos_str(h['cos_train']):>5}{reset} | {left}")


def held_out_mean(shapes):
    """What evaluate_shapes says of the held-out shapes: the mean over their families, or the one set."""
    held = (v for k, v in shapes.items() if logic_data.is_held_out(k))
    return shapes.get('held-out shapes, mean') or next(held)


def compile_blocks(model, log=print):
    """--compile: training's attention and MLP through torch.compile (the same functions, their passes
    fused, less kept for the backward pass: the demo's peak memory 1.3 GB, not 2.7). Tried at once on a
    small batch, so that a machine that cannot compile (no C++ compiler) says so in one line and trains as
    written. Evaluation: as written."""
    t, cfg = time.time(), model.cfg
    log("compiling the attention and the MLP (torch.compile; --compile off: as written) ...")
    fast, mlp = torch.compile(attend, dynamic=True), torch.compile(MLP.forward, dynamic=True)
    B, T, C, nh = 2, 8, cfg.n_embd, cfg.n_head
    try:
        with torch.random.fork_rng(devices=[]), \
                torch.autocast(cfg.device, dtype=torch.bfloat16, enabled=cfg.precision == 'bf16'):
            x, *qkv = [torch.randn(*shape, device=cfg.device, requires_grad=True)
                       for shape in [(B, T, C)] + [(B, nh, T, C // nh)] * 3]
            y, z = fast(*qkv, x, nn.Parameter(torch.ones(nh)), nn.Parameter(torch.ones(nh)))
            w = mlp(copy.deepcopy(model.transformer.h[0].mlp), x)
        (y.float().sum() + z.float().sum() + w.float().sum()).backward()
    except Exception as e:   # no compiler, an unsupported device or version: run as written
        log(f"note: torch.compile is not available here ({type(e).__name__}: "
            f"{(str(e).strip().splitlines() or [''])[0][:120]}); training as written (slower, more memory)")
        return False
    training = lambda compiled, plain: lambda *args: (compiled if torch.is_grad_enabled() else plain)(*args)
    for block in model.transformer.h:
        block.attn.attend = training(fast, attend)
        block.mlp.forward = types.MethodType(training(mlp, MLP.forward), block.mlp)
    log(f"compiled in {time.time() - t:.0f} s")
    return True


# watch_silence's words for what the run is doing, by the function it is in (the first found)
PHASES = [('compile_blocks', 'compiling the attention and the MLP'), ('save_checkpoint', 'saving the model'),
          ('evaluate_shapes', 'testing the shapes it never trained on'),
          ('shape_sets', 'drawing those shapes'), ('eval_sets', 'drawing the test problems'),
          ('evaluate', 'evaluating'), ('plot', 'drawing the pictures'), ('plot_rows', 'drawing the pictures'),
          ('mistakes', 'finding the mistakes'), ('train', 'training'), ('train_step', 'training')]


class Watched:
    """Standard output, noting when it was last written to (watch_silence reads it)."""

    def __init__(self, stream):
        self.stream, self.last = stream, time.time()

    def write(self, text):
        if text.strip():                  # (a progress line cleared with blanks says nothing)
            self.last = time.time()
        return self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def watch_silence(every=None, phases=()):
    """Never silent: after nearly `every` seconds without a line (10 on a terminal, 60 in a file or pipe), a
    line says what the run is doing, read from where its main thread is (`phases`, then PHASES), and for how
    long."""
    out = sys.stdout = Watched(sys.stdout)
    phases = [*phases, *PHASES]
    every = every or (10 if out.isatty() else 60)

    def watch():
        said = 0.0
        while True:
            time.sleep(0.25)
            frame, names = sys._current_frames().get(threading.main_thread().ident), set()
            while frame:
                names.add(frame.f_code.co_name)
                frame = frame.f_back
            if time.time() - max(out.last, said) >= every - 0.5 and names:
                if PENDING:                     # a progress line in place: ended first
                    PENDING.clear()
                    out.stream.write('\n')
                phase = next((what for name, what in phases if name in names), 'working')
                out.stream.write(f"  ... {phase} ({time.time() - out.last:.0f} s since the last line)\n")
                out.stream.flush()
                said = time.time()
    threading.Thread(target=watch, daemon=True).start()


def keep_freed_memory():
    """glibc's malloc hands freed blocks over a threshold back to the system, and a step's scores (tens of
    MB) spent a fifth of it in page faults taking them again: blocks up to 32 MB stay in the heap."""
    with contextlib.suppress(OSError, AttributeError):   # not glibc (macOS, Windows, musl): theirs keep them
        libc = ctypes.CDLL('libc.so.6')
        libc.mallopt(-3, 32 << 20)           # M_MMAP_THRESHOLD
        libc.mallopt(-1, 2 ** 31 - 1)        # M_TRIM_THRESHOLD


def release_freed_memory():
    """What the heap holds free goes back to the system (glibc's malloc_trim), before each evaluation."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL('libc.so.6').malloc_trim(0)


def step_flops(cfg, B, T, targets, vocab_size):
    """FLOPs of a training step's matrix products as torch's FlopCounterMode counts them (nanoGPT's
    estimate_mfu): per layer and token the linear maps 24 C^2, the attention 4 T C (twice with the identity
    terms), the backward twice the forward; the unembedding at the targets; Muon's Newton-Schulz steps."""
    C, L, V = cfg.n_embd, cfg.n_layer, vocab_size
    layer = 24 * C * C * B * T + 4 * (1 + cfg.identity) * B * T * T * C
    head = 2 * targets * C * V * (2 + (not cfg.freeze_emb))        # a frozen matrix gets no gradient
    shapes = [(C, 3 * C), (C, C), (C, 4 * C), (C, 4 * C)] if cfg.optimizer == 'muon' else []
    muon = L * sum(5 * (4 * m * m * n + 2 * m ** 3) for m, n in shapes)   # 5 steps on each (m <= n) matrix
    return 3 * L * layer + head + muon

RATES = {}   # matmul_rate's figures, by device, precision and width: measured once a process (0.3 s)


def matmul_rate(cfg, seconds=0.3):
    """This machine's own rate (FLOP/s) for the MLP's first product (128 x 70 tokens, C -> 4C) in the run's
    precision and threads (torch.utils.benchmark): the honest peak on a CPU, against which the log line and
    lab/bench.py give a step's share."""
    key = (cfg.device, cfg.precision, cfg.n_embd)
    if key not in RATES:
        from torch.utils import benchmark
        dtype = torch.bfloat16 if cfg.precision == 'bf16' else torch.float32
        a = torch.ones(128 * 70, cfg.n_embd, dtype=dtype, device=cfg.device)   # (no draw from the run's RNG)
        b = torch.ones(cfg.n_embd, 4 * cfg.n_embd, dtype=dtype, device=cfg.device) / cfg.n_embd
        timer = benchmark.Timer('a @ b', globals=dict(a=a, b=b), num_threads=torch.get_num_threads())
        product = timer.blocked_autorange(min_run_time=seconds).median      # seconds a product takes
        RATES[key] = 2 * a.size(0) * a.size(1) * b.size(1) / product
    return RATES[key]


@torch.no_grad()
def stage_costs(model, vocab, ahead=4):
    """Seconds of a forward pass over a training batch at each curriculum depth: `ahead` batches drawn and
    grouped by length as training draws them, with a generator of their own (the run draws what it would
    draw without the clock), after one pass to warm up. What the clock prices a step of the stage by."""
    cfg, rng, costs = model.cfg, random.Random(model.cfg.seed + 777), {}
    for d in range(1, cfg.max_depth + 1):
        gen = cfg.gen_config((d - 1) * cfg.curriculum)
        seqs = sorted((vocab.encode(logic_data.generate(rng, gen, vocab.train_names))
                       for _ in range(ahead * cfg.batch_size)), key=lambda s: len(s[0]))
        xs = [pad_batch(seqs[i:i + cfg.batch_size], vocab.pad, cfg.device)[0]
              for i in range(0, len(seqs), cfg.batch_size)]
        model(xs[0])                                    # (the first pass of a length allocates)
        t = time.time()
        for x in xs:
            model(x)
        costs[d] = (time.time() - t) / len(xs)
    return costs


def time_left(cfg, step, costs, pace, evals):
    """Seconds left at `step`: the steps to come at `pace` times their stage's cost (`costs`), the
    evaluations to come (the held-out shapes' after training as FINAL_EVALS of them) at the mean of `evals`,
    the seconds those so far took."""
    to_come = sum(costs[cfg.depth_at(s)] for s in range(step, cfg.steps)) * pace
    evals_to_come = len(range(step + cfg.eval_every, cfg.steps, cfg.eval_every)) + 1 + FINAL_EVALS[cfg.layout]
    return to_come + (sum(evals) / len(evals) * evals_to_come if evals and step < cfg.steps else 0.0)

FINAL_EVALS = dict(shapes=3, template=1)   # the held-out shapes' evaluation after training, in evaluations
EVAL_SCORES = 1 << 23   # evaluation: at most this many attention scores (32 MB) a forward pass (eval_chunk)


def eval_chunk(cfg, T):
    """Problems of T tokens per forward pass in evaluation: one tensor of scores within EVAL_SCORES."""
    return max(1, EVAL_SCORES // (cfg.n_head * T * T))

PROBE = {}   # lab/chain_probes.py's changes to this file's functions (its variables): in its checkpoints

# -----------------------------------------------------------------------------
# outputs: the plan, the report tables, the mistakes, the plots, the checkpoint, the output folder


def peak_memory():
    """', peak memory 1.2 GB': the most this process held in RAM (where the system tells: not Windows)."""
    try:
        import resource
    except ImportError:
        return ''
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss      # KB on Linux, bytes on macOS
    return f", peak memory {peak / (1e9 if sys.platform == 'darwin' else 1e6):.1f} GB"


def duration(seconds):
    """'14 min 0 s' for 839.6 seconds (rounded first: not '13 min 60 s')."""
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes} min {seconds} s"

# the closing line's problem: a conjunction that waits (u75 u29 -> u13), one that never fires (u13 u40 -> u2)
TRY_PROBLEM = 'u92 . u29 . u75 u29 -> u13 . u40 -> u3 . u92 -> u75 . u13 u40 -> u2 . ? u3'


def try_problem(cfg):
    """The closing line's problem: TRY_PROBLEM, or a provable one of the model's own kind."""
    if cfg.layout == 'shapes' and cfg.max_premises >= 2:
        return TRY_PROBLEM
    rng, vocab = random.Random(0), logic_data.Vocab(cfg.n_symbols)
    draw = lambda: logic_data.make_problems(rng, cfg.gen_config(), vocab, 1, 'all')[0]
    p = next(p for p in iter(draw, None) if p.answer and len(p.chain) >= 2)
    return logic_data.to_text(p).partition(' :')[0]


def count_params(cfg):
    """The parameters of a configuration's model (the plan's count, the write check's size)."""
    return sum(p.numel() for p in make_model(replace(cfg, device='cpu')).parameters())


def plan(cfg, out):
    """What a run is about to do, in the words of its first lines."""
    c, shapes, tests = cfg, cfg.layout == 'shapes', {k: hi for k, (_, hi) in logic_data.SHAPE_LIMITS.items()}
    lines = [f"model: {run_name(c)} ({count_params(c) / 1e3:.0f}k parameters); {c.steps} steps on {c.device} "
             f"in {c.precision}, {c.n_symbols} training symbols, 100 unseen; writing to {out}"]
    if c.curriculum and c.max_depth > 1:
        most, full = c.gen_config(0).shape_caps, (c.max_depth - 1) * c.curriculum
        small = f" (at most {most[0]} facts, {most[1]} side and {most[2]} dead rules)" if most else ''
        reach = (f"every depth 1-{c.max_depth}{' and shape' * bool(small)} from step {full}" if full < c.steps
                 else f"this {c.steps}-step run ends at depth {c.depth_at(c.steps - 1)}")
        lines.append(f"a curriculum: training problems of depth 1{small} at first, one depth more every "
                     f"{c.curriculum} steps, {reach} (the tests have every depth from the start)")
    floor = {0: 'zero', 0.1: 'a tenth'}.get(c.lr_floor, f'{c.lr_floor:g} of it')
    decay = f"which this {c.steps}-step run ends inside" if c.steps <= c.warmup else \
        f"the full rate until step {round(decay_start(c))}, then linearly down to {floor}"
    rates = f"Muon {c.muon_lr:g} on the blocks' matrices, AdamW {c.lr:g} on the rest" \
        if c.optimizer == 'muon' else f"AdamW {c.lr:g}"
    slow = (f" (the names' rows {c.lr * c.emb_lr:g}: --emb-lr {c.emb_lr:g})"
            if c.emb_lr != 1 and not c.freeze_emb else '')
    lines.append(f"{rates}{slow}: a {c.warmup}-step warmup, {decay}")
    if c.ema:
        lines.append(f"evaluated and saved: a moving average of the weights, decay {c.ema:g} (about the last "
                     f"{1 / (1 - c.ema):.0f} steps; --ema 0: the last weights)")
    if c.ema and c.steps < 3 / (1 - c.ema):    # the initial weights still weigh more than e^-3 of the average
        lines.append(f"note: this {c.steps}-step run is short for that average: the model saved is "
                     f"{c.ema ** c.steps:.0%} its initial weights (a smaller --ema, or more --steps)")
    if c.forget_every:
        until = f" until step {c.forget_until}" if c.forget_until and c.forget_until < c.steps else \
            ", the last on the final step: the model evaluated and saved is one just reset"
        lines.append(f"the names' (un)embedding rows re-drawn every {c.forget_every} steps{until} "
                     "(--forget-every; the signs' rows keep training)")
    if c.balance:
        lines.append("training chains of every length about equally often (--balance; the tests as drawn)")
    count = lambda k, n: f"0-{n} {k} rules" + (f" (the tests 0-{tests[k]}: --max-{k})" * (n != tests[k]))
    if shapes:
        lines.append(f"problems of 1-{c.max_facts} facts (--max-facts), {count('side', c.max_side)} and "
                     f"{count('dead', c.max_dead)}")
    if shapes and c.idle:
        lines.append(f"{c.idle:.0%} of them idle: no rule fires, the query a fact or nothing reaches it "
                     "('a . ? a'; --idle; the tests have none)")
    if c.shift:
        lines.append(f"each training problem starts at row 0 or row {c.shift} of the position table at "
                     f"random, the tests at row {c.shift} (--shift)")
    lines.append(attention_summary(c) + (" (a = 1, b = 0 at the start; --no-identity: the textbook attention)"
                                         if c.identity else ''))
    return '\n       '.join(lines)


def run_name(cfg):
    """The switches of a run, e.g. 'copy-attn + freeze-emb' ('standard' if none)."""
    on = [('no-identity', not cfg.identity), ('copy-attn', cfg.copy_attn and cfg.copy_form == 'residual'),
          ('copy-pointer', cfg.copy_attn and cfg.copy_form == 'pointer'), ('freeze-emb', cfg.freeze_emb),
          ('freeze-unused', cfg.freeze_unused), ('untied', not cfg.tie_emb),
          (f'forget-every {cfg.forget_every}', cfg.forget_every),
          (f'until {cfg.forget_until}', cfg.forget_every and cfg.forget_until),
          (f'emb-lr {cfg.emb_lr:g}', cfg.emb_lr != 1 and not cfg.freeze_emb)]
    return ' + '.join(name for name, flag in on if flag) or 'standard'


def attention_summary(cfg):
    """What the run's attention has, in words: 'identity terms on, copy attention off'."""
    return (f"identity terms {'on' if cfg.identity else 'off'}, "
            f"copy attention {cfg.copy_form + ' form' if cfg.copy_attn else 'off'}")


def rows_str(r):
    """'unseen-row cosine 0.98 (training rows 0.01), mean norm 0.49 (training rows 0.88)'."""
    return (f"unseen-row cosine {cos_str(r['cos_unseen'])} (training rows {cos_str(r['cos_train'])}), "
            f"mean norm {r['norm_unseen']:.2f} (training rows {r['norm_train']:.2f})")


def acc_str(acc, s):
    """' 98.2% (T  97 F  99)': a scenario's exact match, then on its provable and unprovable problems."""
    return f"{acc[s]:6.1%} (T {100 * acc[s + '_T']:3.0f} F {100 * acc[s + '_F']:3.0f})"


def cos_str(v):
    """A cosine with 2 decimals; tiny negative values print as 0.00, not -0.00."""
    return f"{v:.2f}" if round(v, 2) != 0 else "0.00"


def shapes_note(cfg, shapes):
    """The verdict's lines on the shapes and the chain lengths the model never trained on."""
    held, longer = held_out_mean(shapes), longer_sets(cfg, shapes)
    lines = [f"         on shapes it never trained on it solves {held['none']:.1%} in training symbols, "
             f"{held['all']:.1%} in unseen ones."]
    each = lambda s: ' / '.join(f"{shapes[n][s]:.1%}" for n in longer.values())
    steps = ' / '.join(str(cfg.max_depth + d - cfg.depth_at(cfg.steps - 1)) for d in longer)
    return lines + ([f"         on chains {steps} steps longer than any in training: {each('none')} in "
                     f"training symbols, {each('all')} in unseen."] if longer else [])


def reset_note(cfg, step):
    """The verdict's line on which model a resetting run is judged by (--ckpt: the one saved at the end)."""
    last = max((s for s in range(1, step + 1) if forgets_at(cfg, s)), default=None)   # the last reset
    if last is None:
        return []
    if last == step:
        return ["         (evaluated just after a reset of the names' rows, as saved)"]
    return [f"         (evaluated {step - last} steps after the last reset, at step {last}: the names' rows "
            "have trained since)"]


def shapes_str(cfg, acc):
    """The shape sets but the longer chains (lengths_str has those)."""
    lines = ['problems of shapes never trained on: exact match in training names / unseen names']
    lines += [f"  {name:<56}{a['none']:7.1%} / {a['all']:6.1%}" for name, a in acc.items()
              if name not in longer_sets(cfg, acc).values()]
    return '\n'.join(lines)


def longer_sets(cfg, shapes):
    """{steps beyond training: the name of its set in `shapes`} (evaluate_shapes; none for a template run)."""
    names = {d: logic_data.longer_name(d, cfg.max_depth) for d in logic_data.BEYOND}
    return {d: name for d, name in names.items() if name in shapes}


def by_depth(problems, ok):
    """Exact match per depth of the planted derivation (the chain's length): {depth: (accuracy, n)}."""
    depths = collections.defaultdict(list)
    for p, right in zip(problems, ok.tolist()):
        depths[p.how['depth']].append(right)
    return {d: (sum(r) / len(r), len(r)) for d, r in sorted(depths.items())}


def lengths_str(cfg, predictions, shapes):
    """Exact match by chain length: each depth of the test problems, then the longer chains' shape sets."""
    ok = {s: (predictions[s][1] == predictions[s][2]).all(dim=1) for s in ('none', 'all')}
    depth = {s: by_depth(predictions[s][0], ok[s]) for s in ('none', 'all')}
    lines = ['exact match by chain length (depth of the derivation): in training names / unseen names']
    pct = lambda s, d, w: f"{depth[s][d][0]:{w}.1%}" if d in depth[s] else f"{'-':>{w}}"  # small --eval-n
    trained = cfg.depth_at(cfg.steps - 1)  # a short run's curriculum may end before --max-depth
    label = lambda d: f'depth {d}' + (f' ({d - trained} beyond training)' if d > trained else '')
    lines += [f"  {label(d):<28}{pct('none', d, 7)} / {pct('all', d, 6)}   "
              f"({depth['none'].get(d, (0, 0))[1]} / {depth['all'].get(d, (0, 0))[1]} problems)"
              for d in sorted(set(depth['none']) | set(depth['all']))]
    lines += [f"  {label(cfg.max_depth + d):<28}{shapes[name]['none']:7.1%} / {shapes[name]['all']:6.1%}"
              for d, name in longer_sets(cfg, shapes).items()]
    return '\n'.join(lines)


def marked(vocab, tokens):
    """Tokens as text, unseen names marked *."""
    return ' '.join(t + '*' if vocab.is_unseen(t) else t for t in tokens.split())


def show(vocab, p, out):
    """Print a problem, the model's chain and the solver's, unseen names marked *; True if they agree."""
    want = ' '.join(logic_data.problem_tokens(p)[1])
    print(f"problem: {marked(vocab, ' '.join(logic_data.problem_tokens(p)[0][:-1]))}")
    print(f"model:   {marked(vocab, out)}")
    print(f"solver:  {marked(vocab, want)}")
    print(f"{'correct' if out == want else 'WRONG'}   (* = unseen in training)")
    return out == want


def accuracy_by_position(problems, y, pred):
    """Teacher-forced accuracy at each target position (chain step k, the answer, <eos>), and at each chain
    step the share of problems where the model stops there instead (writes T or F)."""
    answers = [logic_data.SPECIALS.index(a) for a in 'TF']
    counts, stops = {}, {}
    for i, p in enumerate(problems):
        for k, t in enumerate((y[i] != -1).nonzero().flatten().tolist()):
            key = f'step {k + 1}' if k < len(p.chain) else 'answer' if k == len(p.chain) else '<eos>'
            counts.setdefault(key, []).append(pred[i, t].item() == y[i, t].item())
            if k < len(p.chain):
                stops.setdefault(key, []).append(pred[i, t].item() in answers)
    order = [f'step {k}' for k in range(1, max(len(p.chain) for p in problems) + 1)] + ['answer', '<eos>']
    mean = lambda d: {k: sum(d[k]) / len(d[k]) for k in order if k in d}
    return mean(counts), mean(stops)


def mistake_counts(problems, y, pred, vocab):
    """{kind: {chain position: count}} over the problems the model gets wrong (`evaluate`'s predictions)."""
    counts = collections.defaultdict(collections.Counter)
    for i, p in enumerate(problems):
        words = lambda ids: vocab.decode(ids[y[i] != -1].tolist()).split()
        found = logic_data.first_mistake(p, words(y[i]), words(pred[i]))
        if found:
            counts[found[1]][found[0]] += 1
    return {k: dict(counts[k]) for k in logic_data.MISTAKE_KINDS if k in counts}


def mistakes(model, vocab, scenario, predictions, n=3):
    """Where the model goes wrong on a test scenario: accuracy per position, the kinds of first mistakes, and
    its first n wrong problems under greedy decoding."""
    problems, y, pred = predictions[scenario]
    right, stops = accuracy_by_position(problems, y, pred)
    print(f"\nteacher-forced accuracy per target position ({scenario}): " +
          ' | '.join(f"{k} {v:.1%}" for k, v in right.items()))
    print("  ... and how often it stops at a chain step instead (writes T or F): " +
          ' | '.join(f"{k} {v:.1%}" for k, v in stops.items()))
    wrong = [p for p, ok in zip(problems, (pred == y).all(dim=1)) if not ok]
    kinds = mistake_counts(problems, y, pred, vocab)
    if kinds:
        print("  the first wrong token of each mistake: " + ' | '.join(
            f"{kind} {sum(at.values())} (at step {', '.join(map(str, sorted(at)))})"
            for kind, at in kinds.items()))
    print(f"first {min(n, len(wrong))} of {len(wrong)} mistakes on '{scenario}' (greedy decoding):"
          if wrong else f"no mistakes on the {len(problems)} '{scenario}' problems")
    model.eval()
    for p in wrong[:n]:
        ids, n_prompt = vocab.encode(p)
        show(vocab, p, vocab.decode(generate(model, vocab, ids[:n_prompt])))


def pyplot():
    """matplotlib without a screen, imported when a figure is drawn (its font-cache notice not shown)."""
    import matplotlib
    matplotlib.use('Agg')
    logging.getLogger('matplotlib.font_manager').setLevel(logging.ERROR)
    import matplotlib.pyplot as plt
    return plt


LOOKS = [dict(lw=6, alpha=0.35), dict(lw=2.5, ls='--'), dict(lw=1.2, marker='o', ms=4)]   # seen where equal
COLOURS = dict(none='tab:blue', query='tab:orange', all='tab:red')   # as lab/grid.py's grid.png


def plot(history, path, title):
    """training.png: each scenario's exact match and the rows' cosines at every evaluation; lines that
    coincide (a frozen model's three scenarios) stay visible, thick and pale under thin and marked."""
    plt = pyplot()
    steps = [h['step'] for h in history]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.4))
    names = dict(none='none (training names)', query='query (unseen query)', all='all (every name unseen)')
    for s, look in zip(logic_data.SCENARIOS, LOOKS):
        a.plot(steps, [100 * h[s] for h in history], label=names[s], color=COLOURS[s], **look)
    a.set(xlabel='step', ylabel='exact match (%)', ylim=(-2, 102), title='accuracy per test scenario')
    a.legend(loc='upper center', bbox_to_anchor=(0.5, -0.16), ncol=3, fontsize=8)   # below: off the lines
    b.plot(steps, [h['cos_unseen'] for h in history], label='unseen tokens', color='tab:red', **LOOKS[0])
    b.plot(steps, [h['cos_train'] for h in history], label='training tokens', color='tab:blue', **LOOKS[2])
    b.set(xlabel='step', ylabel='mean pairwise cosine', ylim=(-0.1, 1.05), title='unembedding collapse')
    b.legend(loc='upper center', bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    savefig(fig, path)
    plt.close(fig)


@torch.no_grad()
def principal_plane(w):
    """(V, 2): the rows of w as unit vectors, centred, on their first two principal components."""
    x = F.normalize(w.detach().float().cpu(), dim=1)
    x = x - x.mean(0)
    return x @ torch.linalg.svd(x, full_matrices=False).Vh[:2].T


def plot_rows(model, cfg, vocab, path):
    """The collapse as a picture: the unembedding rows on their first two principal components, at the
    start of training (rebuilt from the seed) and at the end; frozen rows (--freeze-emb) in one panel, for
    the start and the end are the same rows."""
    initial, frozen = make_model(replace(cfg, device='cpu')).lm_head.weight, cfg.freeze_emb
    plt = pyplot()
    fig, axes = plt.subplots(1, 1 if frozen else 2, figsize=(6 if frozen else 10, 4.6), squeeze=False)
    pick = torch.randperm(len(vocab.train_ids), generator=torch.Generator().manual_seed(0))[:1000]
    train_ids = torch.tensor(vocab.train_ids)[pick]                 # 1000 of the training rows: enough to see
    panels = ((axes[0, 0], model.lm_head.weight if frozen else initial,
               'start and end of training' if frozen else 'start of training'),) + \
        (() if frozen else ((axes[0, 1], model.lm_head.weight, 'end of training'),))
    for ax, w, when in panels:
        xy = principal_plane(w)                                         # (V, 2)
        ax.scatter(*xy[train_ids].T, s=4, alpha=0.4, label='training names (1000 of them)')
        ax.scatter(*xy[vocab.unseen_ids].T, s=12, color='tab:red', label='unseen names (100)', zorder=3)
        cos = mean_pairwise_cosine(w[vocab.unseen_ids])
        ax.set(title=f'{when}: unseen-row cosine {cos_str(cos)}', xlabel='PC 1', ylabel='PC 2')
        if cos > 0.9:       # the collapse: a hundred rows on one spot, said on the picture
            ax.annotate(f'all {len(vocab.unseen_ids)} unseen rows here:\ncollapsed to one (cosine '
                        f'{cos_str(cos)})', xy[vocab.unseen_ids].mean(0).tolist(), xytext=(0.45, 0.85),
                        textcoords='axes fraction',
                        color='tab:red', fontsize=9, arrowprops=dict(arrowstyle='->', color='tab:red'))
    axes[0, 0].legend(loc='lower left', fontsize=8)
    fig.suptitle(f'{run_name(cfg)}: unembedding rows, first two principal components' + (
        '\nfrozen at their orthogonal start: no gradient ever moves them' if frozen else ''))
    fig.tight_layout()
    savefig(fig, path)
    plt.close(fig)


def save_checkpoint(path, model, cfg, history, shapes=None):
    """The trained model, whole or not at all; where `path` cannot be written, in the system's temporary
    folder, the run stopping with one line that says why (the system's reason) and where (or that it is lost).
    torch.save writes to memory first: a failed write then says the system's reason, not torch's internals.
    The heap's freed memory goes back to the system first: the shapes' tests after it peak 0.4 GB lower."""
    release_freed_memory()
    weights, buffer = model.state_dict(), io.BytesIO()
    torch.save({'model': weights, 'config': asdict(cfg), 'history': history, 'shapes': shapes,
                'digest': digest(weights, asdict(cfg)), **({'probe': PROBE} if PROBE else {})}, buffer)
    why = lambda e: e.strerror or e
    try:
        with signals_held():                  # Ctrl-C or kill now: after the file is whole
            write_bytes(path, buffer.getvalue())
    except OSError as e:
        spare = os.path.join(tempfile.gettempdir(), f"unseen-{time.strftime('%Y%m%d-%H%M%S')}-ckpt.pt")
        try:
            write_bytes(spare, buffer.getvalue())
        except OSError as e2:
            sys.exit(f"error: cannot write {path} ({why(e)}) nor {spare} ({why(e2)}): the trained model is "
                     "lost")
        sys.exit(f"error: cannot write {path} ({why(e)}); the trained model is saved instead in {spare}")


@contextlib.contextmanager
def signals_held():
    """Ctrl-C, kill (SIGTERM) and a closed terminal (SIGHUP) wait while the body runs, then stop the run as
    they would have (KeyboardInterrupt): a checkpoint being written is written whole first."""
    got, names = [], [n for n in ('SIGINT', 'SIGTERM', 'SIGHUP') if hasattr(signal, n)]
    before = {n: signal.signal(getattr(signal, n), lambda number, frame: got.append(number)) for n in names}
    try:
        yield
    finally:
        for n, handler in before.items():
            signal.signal(getattr(signal, n), handler)
        if got:
            raise KeyboardInterrupt


def write_bytes(path, data):
    """`data` in `path`, whole (flushed to the disk) or not at all (OSError)."""
    with whole(path, exit=False) as part, open(part, 'wb') as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def digest(weights, config):
    """SHA-256 of a state_dict's names and bytes and of the config stored with them: it finds one flipped
    byte, and weights put under another run's config."""
    h = hashlib.sha256(json.dumps(config, sort_keys=True).encode())
    for k in sorted(weights):
        h.update(k.encode())
        h.update(weights[k].detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def replacing(path):
    """What a run says of an output that a run before it left in --out: it replaces it, aloud."""
    return ' (it replaces the one an earlier run left there)' if os.path.exists(path) else ''


def savefig(fig, path):
    """A figure as a PNG file, whole or not at all."""
    with whole(path) as part:
        fig.savefig(part, dpi=100, format='png')


@contextlib.contextmanager
def whole(path, exit=True):
    """Write `path` whole or not at all (the body writes `path`.part, renamed once complete); a failed write
    stops the run with one line naming the file and the system's reason (exit=False: the OSError)."""
    part = f'{path}.part'
    try:
        yield part
        os.replace(part, path)
    except OSError as e:
        if not exit:
            raise
        sys.exit(f"error: cannot write {path} ({e.strerror or e}); nothing was left half-written")
    finally:
        if os.path.exists(part):
            os.remove(part)


def output_folder(out, cfg):
    """The run's folder, made and checked now for what the run will write, not after the run; a finished
    run's folder is refused. Returns (folder, whether this call created it)."""
    stamp = time.strftime('%Y%m%d-%H%M%S_')
    out = out or os.path.join('runs', stamp + run_name(cfg).replace(' + ', '_').replace(' ', ''))
    size = 4 * count_params(cfg) + (2 << 20)                  # float32 weights, and the pictures
    created = not os.path.isdir(out)
    taken = [f for f in ('ckpt.pt', 'training.png', 'ckpt_rows.png') if os.path.isdir(os.path.join(out, f))]
    if taken:
        sys.exit(f"error: --out {out}: {taken[0]} there is a folder; the run would save nothing")
    if os.path.exists(os.path.join(out, 'ckpt.pt')):
        sys.exit(f"error: --out {out} holds a finished run (ckpt.pt); give another folder, or remove it "
                 "first")
    writable(out, size=size)
    lock(out)
    return out, created


def lock(out):
    """One run a folder: an exclusive lock on out/.lock (flock), released by the system when this process
    ends, however it ends; a second run on the folder while the first lives is refused (Windows, where there
    is no flock: not checked)."""
    try:
        import fcntl
    except ImportError:
        return
    unlock(out)                               # (this process's earlier run there: main() called again)
    f = open(os.path.realpath(os.path.join(out, '.lock')), 'a+')     # (writable has just written there)
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        holder = f.read(40).strip()
        f.close()
        sys.exit(f"error: --out {out}: another run{f' (process {holder})' if holder.isdigit() else ''} is "
                 "writing there; give another folder")
    f.truncate(0)
    f.write(str(os.getpid()))
    f.flush()
    HELD[f.name] = f
    atexit.register(unlock, out)


HELD = {}   # the folders' locks this process holds: {path of .lock: its open file}


def unlock(out):
    f = HELD.pop(os.path.realpath(os.path.join(out, '.lock')), None)
    if f:
        with contextlib.suppress(OSError):
            os.remove(f.name)
        f.close()


def stopped(e, out, created, saved=None):
    """A run stopped (a signal, a loss gone nan, its output closed): one line, no empty run folder left."""
    unlock(out)
    if saved:
        raise Stopped(f"error: interrupted after training; the trained model is saved in {saved} (without "
                      "the tests of shapes it never trained on: --ckpt runs them)")
    if created and not os.listdir(out):
        os.rmdir(out)
    if isinstance(e, OSError):   # its output closed (`| head`) or on a full disk: a run nobody reads stops
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        e = 'the output was closed (a pipe such as | head ended)' if isinstance(e, BrokenPipeError) else \
            f'cannot write the output ({e.strerror or e})'
    raise Stopped(f"error: {str(e) or 'interrupted'}; nothing was saved")


class Stopped(SystemExit):
    """A run stopped by a signal (or its output gone): its one line said, it ends at once (end_now)."""


def end_now(line):
    """The line, then gone: this process's children (torch.compile's workers) killed, and no wait at exit for
    a compile in flight (Python would join its threads first: minutes on a busy laptop)."""
    if PENDING:                                     # a progress line in place on the terminal: end it first
        print(flush=True)
    print(line, file=sys.stderr, flush=True)
    for stat in glob.glob('/proc/[0-9]*/stat'):     # (Linux; elsewhere the children end with their pipes)
        with contextlib.suppress(OSError, ValueError, IndexError):
            if int(open(stat).read().rsplit(')', 1)[1].split()[1]) == os.getpid():
                os.kill(int(stat.split('/')[2]), signal.SIGKILL)
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    os._exit(1)


def writable(folder, flag='--out', size=1 << 20):
    """Make `folder` and prove now that it takes `size` real bytes (flushed: an empty file passes on a full
    disk); else one line of error naming it, and a folder it made is not left behind."""
    made = not os.path.exists(folder)
    if not made and not os.path.isdir(folder):
        sys.exit(f"error: {flag} {folder} is not a folder; give a folder")
    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder) as f:    # (gone when closed, however this ends)
            f.write(bytes(size))
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        if made and os.path.isdir(folder):
            os.rmdir(folder)
        sys.exit(f"error: {flag} {folder}: cannot write there ({e.strerror or e})")


@contextlib.contextmanager
def written_or_gone(folder, flag='--out'):
    """`writable(folder)`, and the folder removed again if the body wrote nothing in a folder it made."""
    made = not os.path.exists(folder)
    writable(folder, flag)
    try:
        yield folder
    finally:
        if made and os.path.isdir(folder) and not os.listdir(folder):
            os.rmdir(folder)

# -----------------------------------------------------------------------------
# --ckpt (a trained model on its test sets), --ask (one problem, step by step), --problems (a file)


@torch.no_grad()
def generate(model, vocab, prompt_ids, trace=None):
    """Greedy decoding until <eos>; `trace` gets (logits, the copy layer's attention or None) a step."""
    idx = torch.tensor([prompt_ids], device=next(model.parameters()).device)
    for _ in range(model.cfg.block_size() - len(prompt_ids)):   # no further than the position table
        logits, _ = model(idx)
        if trace is not None:
            copy_att = model.copy_attn.last_att[0, -1] if model.copy_attn is not None else None
            trace.append((logits[0, -1], copy_att))
        nxt = logits[0, -1].argmax()
        if nxt.item() == vocab.eos:
            break
        idx = torch.cat([idx, nxt.view(1, 1)], dim=1)
    return idx[0, len(prompt_ids):].tolist()


def in_own_names(vocab, p):
    """A user's problem in names this model has: each name new to it (a student's 'rain') written as a
    distinct unseen name (the paper's unseen symbols). Returns (problem, {new name: unseen name}, {unseen
    name: the user's as typed})."""
    mine = vocab.new_names(p)
    typed = {b: a for a, b in (p.how or {}).get('normalised', {}).items()}     # as typed: ำ, not ํา
    return p.rename(mine), mine, {u: typed.get(a, a) for a, u in mine.items()}


def ask(model, vocab, cfg, text):
    """Print the model's chain and answer for a problem in the text form, and for each token it writes
    the top three candidates with their logits and, with copy attention, the context position it copies
    from, then where the solver's token stands (its rank among all tokens and its logit: a collapsed
    model's right unseen name far down the list is the collapse, on screen). ValueError on bad input."""
    if logic_data.fewest_tokens(text) > cfg.block_size():   # before the solver runs on it
        raise ValueError(f"problem too long: over {cfg.block_size()} tokens, this model reads at most "
                         f"{cfg.block_size()}")
    if logic_data.normalised(text):                        # look-alikes on screen are one name: said first
        print(logic_data.read_as(text))
    typed = logic_data.parse(text)
    p, mine, back = in_own_names(vocab, typed)
    if mine:
        print("names new to this model, written as unseen ones: " +
              ', '.join(f'{a} -> {u}' for a, u in mine.items()))
    ids, n_prompt = vocab.encode(p)
    if len(ids) > cfg.block_size():
        raise ValueError(f"problem too long: {len(ids)} tokens, this model reads at most {cfg.block_size()}")
    beyond, deeper, alike = notes(cfg, typed)
    for note in (beyond and f"{beyond}; the model never trained on a problem like it", deeper, alike):
        if note:
            print(f"note: {note}")
    trace = []
    out = generate(model, vocab, ids[:n_prompt], trace)
    ok = show(vocab, p, vocab.decode(out))
    if mine:
        print("in your names: " + ' '.join(back.get(t, t) for t in vocab.decode(out).split()))
    context = ids[:n_prompt] + out
    print("\nstep by step (logits of the top three candidates; the solver's token: its rank and logit, given "
          "what the model wrote so far):")
    want = ids[n_prompt:]                                  # the solver's chain, answer and <eos>
    wrong = next((k for k, t in enumerate(out) if k >= len(want) or t != want[k]), None)   # its first mistake
    for k, (logits, att) in enumerate(trace):
        top = logits.float().topk(3)
        names = [marked(vocab, vocab.itos[i]) for i in top.indices.tolist()]
        cells = ' | '.join(f"{n:>8} {v:6.2f}" for n, v in zip(names, top.values.tolist()))
        line = f"  {names[0]:<8} {cells}"
        if att is not None:
            j = att.argmax().item()
            line += f"   <- copy from position {j} '{marked(vocab, vocab.itos[context[j]])}' ({att[j]:.2f})"
        if k < len(want):
            rank = (logits.float() > logits.float()[want[k]]).sum().item() + 1
            line += (f"   solver's {marked(vocab, vocab.itos[want[k]])}: rank {rank:,} "
                     f"({logits.float()[want[k]].item():.2f})"
                     + (' after its own mistake' if wrong is not None and k > wrong else ''))
        print(line)
    return ok


def notes(cfg, p):
    """What --ask and --problems say of a problem beside the model's answer (each a note or None): where it
    lies beyond what training drew, a derivation deeper than training's, names that look alike."""
    gen = cfg.gen_config(cfg.steps - 1)
    return logic_data.beyond_training(gen, p), logic_data.depth_note(gen, p), logic_data.lookalike_note(p)


def load_checkpoint(path, device='cpu'):
    """(model, vocab, cfg) of a checkpoint: its config passes the command line's checks, its weights are the
    ones that config makes (strict), finite, trained, and match the digest; else a ValueError in one line."""
    try:
        ck = torch.load(path, map_location=device)
    except Exception as e:   # not a file torch can read
        raise ValueError(f"{path} is not a checkpoint written by this unseen.py ({type(e).__name__})") from e
    if not (isinstance(ck, dict) and isinstance(ck.get('config'), dict) and isinstance(ck.get('model'), dict)
            and 'digest' in ck):
        raise ValueError(f"{path} is not a checkpoint written by this unseen.py (no model, config, digest)")
    probe = ck.get('probe', {})
    if probe != PROBE:   # a lab probe's model reads its own chain format (lab/chain_probes.py)
        how = ' '.join(f'{k}={v}' for k, v in probe.items()) if isinstance(probe, dict) else repr(probe)
        raise ValueError(f"{path}: its model reads the chain as {how or 'unseen.py writes it'}; load it with "
                         + (f"{how} python lab/chain_probes.py" if how else "python unseen.py")
                         + f" --ckpt {path}")
    unknown = sorted(set(ck['config']) - {f.name for f in fields(Config)})
    cfg = None if unknown else Config(**{**ck['config'], 'device': device})
    error = f"{unknown[0]}: a field this unseen.py does not know" if unknown else config_error(cfg)
    if error:
        raise ValueError(f"{path}: its stored configuration is not one this unseen.py trains ({error})")
    model = make_model(cfg)
    try:            # strict: every tensor its config makes, of its shape, and nothing else
        model.load_state_dict(ck['model'])
    except RuntimeError as e:   # torch's first reason, on one line
        why = str(e).split('\n\t')[1].strip().rstrip('.') if '\n\t' in str(e) else str(e)
        raise ValueError(f"{path}: its weights do not fit its stored configuration ({why[:200]}): "
                         "edited?") from None
    weights = model.state_dict()
    bad = next((k for k, v in weights.items() if v.is_floating_point() and not v.isfinite().all()), None)
    flat = next((k for k, v in weights.items() if v.dim() == 2 and v.numel() > 1
                 and bool((v == v.flatten()[0]).all())), None)    # no training leaves a matrix all one value
    if bad or flat:
        raise ValueError(f"{path}: its weights {bad} hold nan or inf (a diverged or damaged run)" if bad else
                         f"{path}: its weights {flat} are all one value: not a trained model (edited?)")
    if digest(weights, ck['config']) != ck['digest']:
        raise ValueError(f"{path}: its weights or config do not match the digest saved with them (a damaged "
                         "or edited file)")
    model.eval()
    return model, logic_data.Vocab(cfg.n_symbols), cfg


def solve_problems(model, vocab, cfg, numbered, path, n_show=20):
    """--problems: exact match of a model on a user's own problems ([(line number, problem)], as
    logic_data.read_problems reads them), then every mistake (the first n_show, and how many more) with its
    line number, in the user's own names: the problem, the model's chain and the solver's."""
    said, problems, back = collections.defaultdict(list), [], {}
    for line, typed in numbered:
        try:
            p, mine, back[line] = in_own_names(vocab, typed)
            ids, _ = vocab.encode(p)
        except ValueError as e:
            raise ValueError(f'{path}, line {line}: {e}')
        if len(ids) > cfg.block_size():
            raise ValueError(f'{path}, line {line}: too long: {len(ids)} tokens, this model reads at '
                             f'most {cfg.block_size()}')
        problems.append(p)
        words = typed.how and typed.how.get('normalised')
        for what, note in [('read', words and ', '.join(f'{a} -> {b}' for a, b in words.items())),
                           ('new', mine and ', '.join(f'{a} -> {u}' for a, u in mine.items())),
                           *zip(('beyond', 'deeper', 'alike'), notes(cfg, typed))]:
            if note:
                said[what].append((line, note))
    for what, text in (('read', 'read as Unicode normalises them (NFKC: look-alikes are one name; '),
                       ('new', 'use names new to this model, written as unseen ones ('),
                       ('beyond', 'lie beyond what the model trained on ('),
                       ('deeper', "are deeper than training's planted paths ("),
                       ('alike', 'hold two names that look alike but are two names to the model (')):
        if said[what]:
            line, note = said[what][0]
            print(f"note: {len(said[what])} of {len(problems)} problems {text}line {line}: {note})")
    ok = torch.cat([exact_match(model, *make_batch(problems[i:i + 256], vocab, cfg.device))
                    for i in range(0, len(problems), 256)]).tolist()
    split = lambda answer: [r for r, p in zip(ok, problems) if p.answer == answer]
    t, f = split(True), split(False)
    print(f"{path}: {sum(ok)} of {len(ok)} problems solved ({sum(ok) / len(ok):.1%}; "
          f"provable {sum(t)} of {len(t)}, unprovable {sum(f)} of {len(f)})")
    wrong = [(line, p) for (line, _), p, r in zip(numbered, problems, ok) if not r]
    for line, p in wrong[:n_show]:
        ids, n_prompt = vocab.encode(p)
        theirs = lambda tokens: ' '.join(back[line].get(t, t) for t in tokens)
        print(f"\nline {line}: {theirs(logic_data.problem_tokens(p)[0][:-1])}\n  model:  "
              f"{theirs(vocab.decode(generate(model, vocab, ids[:n_prompt])).split())}\n  solver: "
              f"{theirs(logic_data.problem_tokens(p)[1])}")
    if len(wrong) > n_show:
        lines = ', '.join(str(line) for line, _ in wrong[n_show:])
        print(f"\n... and {len(wrong) - n_show} more mistakes (lines {lines})")
    return sum(ok) / len(ok)


def evaluate_checkpoint(args):
    """--ckpt PATH: a trained model on its own test sets in seconds (the three scenarios, the shapes it never
    trained on, the verdict, the mistakes and the rows picture), --ask: one problem through it, --problems: a
    file."""
    try:
        model, vocab, cfg = load_checkpoint(args.ckpt, pick_device(args.device))
        if args.ask is not None:
            ask(model, vocab, cfg, args.ask)
            return
        if args.problems is not None:
            solve_problems(model, vocab, cfg, logic_data.read_problems(args.problems, cfg.block_size()),
                           args.problems)
            return
    except ValueError as e:
        sys.exit(f'error: {e}')
    out = args.out or 'runs'          # never next to the checkpoint: that may be the README's assets/
    rows = os.path.join(out, os.path.splitext(os.path.basename(args.ckpt))[0] + '_rows.png')
    if os.path.isdir(rows):
        sys.exit(f"error: --out {out}: {os.path.basename(rows)} there is a folder; the rows picture goes "
                 "there")
    with written_or_gone(out):
        predictions, t0 = {}, time.time()
        acc = evaluate(model, vocab, eval_sets(cfg, vocab), cfg.device, predictions)
        print(f"{args.ckpt}: {run_name(cfg)}, exact match on its {cfg.eval_n} test problems per scenario:")
        for s in logic_data.SCENARIOS:
            print(f"  {s:<6}{acc_str(acc, s)}")
        print('  on the problems whose chain writes a name (not a query that is a fact): ' +
              ' / '.join(f"{s} {acc[s + '_named']:.1%}" for s in logic_data.SCENARIOS))
        shapes = evaluate_shapes(model, vocab, shape_sets(cfg, vocab), cfg.device)
        print(verdict(cfg, [{**acc, **rows_stats(model, vocab)}], args.unseen, shapes, predictions))
        mistakes(model, vocab, args.unseen, predictions)
        plot_rows(model, cfg, vocab, rows)
        print(f"\nwrote {rows} (evaluated in {duration(time.time() - t0)})")

# -----------------------------------------------------------------------------
# the command line: its flags, and the checks every configuration passes (a stored one too)


def pick_device(name):
    """auto: CUDA if there is one, else the CPU (not mps: this model's many small kernels pay in latency)."""
    if name != 'auto':
        return name
    return 'cuda' if torch.cuda.is_available() else 'cpu'


def bf16_native(device):
    """Does the hardware compute bfloat16 products natively: a GPU that has them, a CPU with AVX512-BF16 or
    AMX (elsewhere they are emulated, slowly)?"""
    if device.startswith('cuda'):
        return torch.cuda.is_bf16_supported()
    return device == 'cpu' and any(getattr(torch.cpu, f, lambda: False)()
                                   for f in ('_is_avx512_bf16_supported', '_is_amx_tile_supported'))


def pick_precision(name, device):
    """auto: bfloat16 on a GPU that computes it natively, else float32; on a CPU even where bfloat16 is
    native: there its products go through oneDNN, which keeps a kernel for each shape of product (problems of
    every length make hundreds): the demo as typed held 7.9 GB in bfloat16, 1.3 in float32, and took 24 min
    53 s against 23 min 12 s (Intel Xeon with AMX; docs/experiments.md)."""
    if name != 'auto':
        return name
    return 'bf16' if device.startswith('cuda') and bf16_native(device) else 'fp32'


def hardware(args):
    """--device and --precision, 'auto' resolved on this machine (a Config holds only what it runs on)."""
    device = pick_device(args.device)
    return dict(device=device, precision=pick_precision(args.precision, device))


def config_from_args(args):
    names = {f.name for f in fields(Config)} - {'compile'}
    cfg = Config(**{**{k: v for k, v in vars(args).items() if k in names}, **hardware(args)})
    # --compile auto: where the compile (20-30 s on a CPU, less once cached) pays: 1000 steps or more
    return replace(cfg, compile=args.compile == 'on' or (args.compile == 'auto' and cfg.steps >= 1000
                                                         and cfg.device != 'mps'))


def parse_args(argv=None):
    """The command line: a flag for each Config field with a help text, the run's own flags, then the checks
    (check_args, config_error)."""
    p = argparse.ArgumentParser(prog='unseen.py', description='Train a transformer on Horn-clause logic and '
                                'test it on unseen symbols.',
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument('--unseen', choices=logic_data.SCENARIOS, default='all', help='test scenario the verdict '
                   'reports')
    for f in fields(Config):
        meta = dict(f.metadata)
        text = meta.pop('help', None)
        if text is None:                      # --device, --precision, --compile: below
            continue
        if f.name in LAYOUT_DEFAULTS['shapes']:   # None: the layout's
            text = '%(default)s: by --layout, ' + ', '.join(f'{layout} {v[f.name]}' for layout, v in
                                                            LAYOUT_DEFAULTS.items()) + ': ' + text
        flag = '--' + f.name.replace('_', '-')
        if f.type is bool:
            p.add_argument(flag, default=f.default, help=text, action='store_true' if f.default is False else
                           argparse.BooleanOptionalAction)
        else:
            p.add_argument(flag, type=None if f.type is str else f.type, default=f.default, help=text, **meta)
    p.add_argument('--device', default='auto', help='auto, cpu, cuda or mps')
    p.add_argument('--precision', choices=('auto', 'fp32', 'bf16'), default='auto', help='bf16: matrix '
                   'products in bfloat16 (autocast); auto: bf16 on a GPU that computes it natively, fp32 on '
                   'a CPU (bf16 there holds several times the memory)')
    p.add_argument('--compile', choices=('auto', 'on', 'off'), default='auto', help='the attention and the '
                   'MLP through torch.compile (the same functions, half the memory; a 20-30 s compile '
                   'first); auto: in runs of 1000 steps or more')
    p.add_argument('--out', default=None, help='output folder; %(default)s: runs/<time>_<switches>')
    one = p.add_mutually_exclusive_group()        # one problem, or a file of them
    one.add_argument('--ask', metavar='TEXT', help="solve one problem, e.g. 'u1 . u1 -> u2 . ? u2', with "
                     '--ckpt (a name holds letters with their marks, digits and _, in any script, read as '
                     'Unicode normalises it (NFKC): look-alikes on screen are one name; names that differ by '
                     'optional marks or by script are two, with a note; premises are separated by spaces)')
    one.add_argument('--problems', metavar='FILE', help='with --ckpt: solve every problem in FILE (one a '
                     'line: the text form, or JSON lines from logic_data.py --jsonl)')
    p.add_argument('--ckpt', metavar='PATH', help='a checkpoint of a training run: evaluate it on its test '
                   'sets, or solve one problem with --ask, or a file with --problems')
    args = p.parse_args(argv)
    check_args(p, args)
    return args


def check_args(p, args):
    """What the command line's modes allow (--ckpt, --ask, --problems, --device, --out), then the
    configuration it builds (config_error: a stored one passes the same): each a one-line argparse error."""
    flag = lambda k: '--' + k.replace('_', '-')
    given = lambda names: [flag(k) for k in names if getattr(args, k) != p.get_default(k)]
    on_ckpt = given(k for k in vars(args) if k not in ('ckpt', 'ask', 'problems', 'unseen', 'device', 'out'))
    on_answer = given(('unseen', 'out'))
    mps = getattr(torch.backends, 'mps', None) and torch.backends.mps.is_available()
    empty = [flag(k) for k in ('ckpt', 'out', 'problems') if getattr(args, k) is not None
             and not getattr(args, k).strip()]
    problems = [
        (empty, f"{' '.join(empty)}: an empty path (give a file or folder name)"),
        (args.ask is not None and not args.ckpt,
         '--ask needs --ckpt PATH (a checkpoint written by a training run)'),
        (args.problems is not None and not args.ckpt,
         '--problems needs --ckpt PATH (a checkpoint written by a training run)'),
        (args.ckpt and on_ckpt, '--ckpt evaluates a trained model on its own test problems; it cannot '
         f"take {' '.join(on_ckpt)} (only --unseen, --device, --out, --ask or --problems)"),
        (args.ckpt and not os.path.isfile(args.ckpt), f'--ckpt {args.ckpt}: ' + (
            'a folder; give the checkpoint file in it (ckpt.pt)' if os.path.isdir(args.ckpt or '')
            else 'no such file')),
        ((args.ask or args.problems) and on_answer, f"--{'ask' if args.ask else 'problems'} prints what the "
         f"model writes and saves nothing; it cannot take {' '.join(on_answer)} (--ckpt alone: its tests)"),
        (args.device not in ('auto', 'cpu', 'cuda', 'mps') and not args.device.startswith('cuda:'),
         f"--device {args.device}: choose auto, cpu, cuda or mps"),
        (args.device.startswith('cuda') and not torch.cuda.is_available(),
         f"--device {args.device}: no CUDA device on this machine (try --device auto)"),
        (args.device == 'mps' and not mps, "--device mps: no Apple GPU on this machine (try --device auto)"),
        (args.out and os.path.exists(args.out) and not os.path.isdir(args.out),
         f"--out {args.out} is not a folder; give a folder")]
    for bad, message in problems:
        if bad and message:
            p.error(message)
    if not args.ckpt:
        error = config_error(config_from_args(args))
        if error:
            p.error(error)


def config_error(c):
    """The first thing wrong with a configuration, the command line's or a stored one (a checkpoint's), in one
    line naming the flag: a value of the wrong type, switches that contradict each other, a value out of its
    range, a model or an evaluation too large for this demo."""
    flag, d = (lambda k: '--' + k.replace('_', '-')), Config()
    for f in fields(Config):      # (the command line parsed its own; a stored config can hold anything)
        v, choices = getattr(c, f.name), f.metadata.get('choices')
        ok = (v in choices if choices else type(v) is bool if f.type is bool else type(v) is int
              if f.type is int else type(v) in (int, float) and math.isfinite(v) if f.type is float
              else isinstance(v, str))
        if not ok:
            should = ' or '.join(choices) if choices else {bool: 'true or false', int: 'a whole number',
                                                           float: 'a finite number'}.get(f.type, 'a word')
            return f"{flag(f.name)} {v!r}: must be {should}"
    if c.layout not in LAYOUT_DEFAULTS:
        return f"--layout {c.layout}: choose from {', '.join(logic_data.LAYOUTS)}"
    open_low = ('lr', 'emb_lr', 'muon_lr', 'decay')   # zero trains nothing
    ranges = (('lr', 0, 1), ('emb_lr', 0, 100), ('muon_lr', 0, 1), ('weight_decay', 0, 10),
              ('decay', 0, 1), ('lr_floor', 0, 1), ('broken', 0, 1), ('idle', 0, 1), ('ema', 0, 1))
    highs = (('n_symbols', 100_000), ('n_embd', 2048), ('n_layer', 48), ('batch_size', 4096),
             ('eval_n', 20_000), ('steps', 10_000_000), ('shift', 1000), ('warmup', 10_000_000))
    problems = [
        (c.freeze_emb and c.forget_every,
         '--freeze-emb and --forget-every contradict each other: frozen embeddings are never reset'),
        (c.freeze_unused and (c.freeze_emb or c.forget_every),
         '--freeze-unused freezes some rows; it cannot go with '
         + ('--freeze-emb' if c.freeze_emb else '--forget-every') + ' (which acts on all of them)'),
        (c.copy_form != d.copy_form and not c.copy_attn, '--copy-form goes with --copy-attn'),
        *[(getattr(c, k) != getattr(d, k) and c.layout == 'template',
           f'{flag(k)} goes with --layout shapes (the one layout {why})')
          for k, why in (('broken', 'has no broken paths'), ('max_facts', 'always has 2 facts'),
                         ('max_dead', 'always has 2 dead rules'), ('max_side', 'has no side rules'),
                         ('idle', 'always has its path'))],
        (c.muon_lr != d.muon_lr and c.optimizer != 'muon',
         '--muon-lr goes with --optimizer muon (the default on problems of every shape)'),
        (c.forget_until and not c.forget_every, '--forget-until needs --forget-every K'),
        (c.emb_lr != d.emb_lr and c.freeze_emb, '--emb-lr has nothing to train with --freeze-emb'),
        (c.forget_every > 0 and 0 < c.forget_until < c.forget_every,
         f'--forget-until {c.forget_until} comes before the first reset (step {c.forget_every}): nothing '
         'would be reset; drop --forget-until or make it at least --forget-every'),
        *[(getattr(c, k) < 1, f'{flag(k)} must be >= 1')
          for k in ('steps', 'batch_size', 'eval_every', 'eval_n', 'n_layer', 'n_head', 'n_embd')],
        *[(getattr(c, k) < 0, f'{flag(k)} must be >= 0')
          for k in ('forget_every', 'forget_until', 'curriculum', 'warmup', 'shift')],
        (c.shift % 2, f'--shift {c.shift}: must be even (its help: keep N even)'),
        (c.ema == 1, '--ema 1: the average would never leave the initial weights (0: the last ones)'),
        (not 0 <= c.seed < 2 ** 63, f'--seed {c.seed}: must be in [0, 2^63)'),
        (c.n_head >= 1 and c.n_embd % c.n_head,
         f'--n-embd {c.n_embd} must be divisible by --n-head {c.n_head}'),
        (True, logic_data.size_error(c.n_symbols, c.max_depth, c.max_premises, c.max_facts, c.max_dead,
                                     c.max_side)),
        *[(not low <= getattr(c, k) <= high or (getattr(c, k) == 0 and k in open_low),
           f"{flag(k)} {getattr(c, k)}: must be a number in {'(' if k in open_low else '['}{low}, {high}]")
          for k, low, high in ranges],
        *[(getattr(c, k) > high, f"{flag(k)} {getattr(c, k)}: at most {high} (this is a small-model demo)")
          for k, high in highs]]
    bad = next((m for bad, m in problems if bad and m), None)
    if bad:
        return bad
    # the caps above hold one by one; these hold what they are for: the model's size, and the memory of one
    # evaluation (a scenario's test problems, eval_chunk at a time: attention scores, logits)
    longest = c.longest_problems()
    T, targets, heads = longest.max_tokens(), longest.limits()['chain'] + 2, c.n_head  # chain, answer, <eos>
    V, C, B, L = len(logic_data.Vocab(c.n_symbols)), c.n_embd, c.batch_size, c.n_layer
    params = L * 12 * C * C + V * C
    if params > 200e6:
        return (f'--n-layer {L} --n-embd {C}: {params / 1e6:.0f}M parameters, at most 200M (this is a '
                'small-model demo)')
    memory = min(c.eval_n, eval_chunk(c, T)) * (T * (heads * T + 4 * C) + targets * V) * 4
    if memory > 8e9:
        return (f'--eval-n {c.eval_n} with problems of up to {T} tokens: one evaluation would hold '
                f'{memory / 1e9:.0f} GB; use a smaller --eval-n')
    # a training step keeps every layer's activations for the backward pass: per token and layer the
    # attention scores and probabilities (2 n_head T) and about 16 C more (q, k, v, the MLP's 4C twice, ...),
    # the logits and their gradient at the target positions, and per parameter its gradient and two moments
    memory = (B * (T * L * (2 * heads * T + 16 * C) + 2 * targets * V) + 4 * params) * 4
    if memory > 12e9:
        return (f'--batch-size {B} --n-layer {L} --n-embd {C} with problems of up to {T} tokens: one '
                f'training step would hold about {memory / 1e9:.0f} GB; use a smaller --batch-size or model')
    return None

if __name__ == '__main__':
    if sys.stdout is None:        # started with its output closed (`>&-`): nothing it printed would be seen
        sys.exit('error: no standard output (it is closed); give the run somewhere to print')
    sys.stdout.reconfigure(line_buffering=True)   # each progress line shows at once, in a pipe or a file too
    keep_freed_memory()                           # the heap keeps what a step frees (fewer page faults)
    watch_silence()                               # a line at least every 10 s (a minute in a file)
    logic_data.stop_on_signals()
    try:
        main()
    except Stopped as e:      # a signal: its one line, and gone now, not after a compile in flight ends
        end_now(e.code)
    except KeyboardInterrupt:  # outside training (it says what it kept): --ckpt, start-up
        sys.exit('error: interrupted')
    except OSError as e:       # `| head` (the reader has gone: quietly), a full disk (> /dev/full): one line
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        if not isinstance(e, BrokenPipeError):
            sys.exit(f'error: cannot write the output ({e.strerror or e})')
