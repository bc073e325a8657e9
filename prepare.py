"""
Turns text into the token bins that train.py and eval_depth.py read.

    python prepare.py                              # WikiText-103 via `datasets`, GPT-2 BPE -> data/wikitext-103/
    python prepare.py --dataset wikitext-2         # small, for quick runs             -> data/wikitext-2/
    python prepare.py --text_dir DIR               # offline: DIR/wiki.train.raw etc.  -> data/<DIR's name>/
    python prepare.py --train_file A --val_file B --out_dir data/x   # any two (or three) text files
    python prepare.py --dataset wikitext-2 --tokenizer bytes          # 256 byte symbols -> data/wikitext-2-bytes/

Writes {train,val,test}.bin (token ids, nanoGPT-style flat arrays, dtype in meta.json) and
meta.json. What the model sees: each split's lines, in order, concatenated exactly as the
source gives them (the files' bytes; the dataset's `text` rows), each line tokenized on
its own. No separator or end-of-text token is added, in any split: WikiText marks its
articles with " = Title = " heading lines, and those stay as they are.

A bin is written under a temporary name and renamed into place only when complete, and
meta.json, written last, marks the folder complete: no meta.json, no usable data.
"""

import argparse
import hashlib
import itertools
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from configurator import UserError, error_line
from data import bin_dtype, get_tokenizer, load_meta

DATASETS = {  # --dataset name -> (hub dataset, config)
    'wikitext-103': ('Salesforce/wikitext', 'wikitext-103-raw-v1'),
    'wikitext-2': ('Salesforce/wikitext', 'wikitext-2-raw-v1'),
}
TEXT_FILES = {  # split -> file names accepted in --text_dir, in order of preference
    'train': ['wiki.train.raw', 'wiki.train.tokens', 'train.txt'],
    'val': ['wiki.valid.raw', 'wiki.valid.tokens', 'valid.txt', 'val.txt'],
    'test': ['wiki.test.raw', 'wiki.test.tokens', 'test.txt'],
}
HF_SPLITS = {'train': 'train', 'val': 'validation', 'test': 'test'}
LINES_PER_CHUNK = 4096


# -----------------------------------------------------------------------------
# sources: each split is (description, rows or None for a file, a generator of (lines, progress units))

def file_source(path):
    try:
        size = os.path.getsize(path)
        with open(path, 'rb') as f:
            f.read(1)
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror}")
    if size == 0:
        raise UserError(f"{path} is empty")

    def chunks():
        # binary lines keep line ends exactly as in the file; yields (lines, bytes read)
        with open(path, 'rb') as f:
            start = 0
            while raw := list(itertools.islice(f, LINES_PER_CHUNK)):
                lines = []
                for i, line in enumerate(raw):
                    try:
                        lines.append(line.decode('utf-8'))
                    except UnicodeDecodeError as e:
                        raise UserError(f"{path} is not UTF-8 text (line {start + i + 1}: {e.reason})")
                yield lines, sum(map(len, raw))
                start += len(raw)
    return path, None, chunks


def text_dir_sources(text_dir):
    if not os.path.isdir(text_dir):
        raise UserError(f"--text_dir {text_dir} is not a folder")
    sources = {}
    for split, names in TEXT_FILES.items():
        found = [n for n in names if os.path.isfile(os.path.join(text_dir, n))]
        if found:
            sources[split] = file_source(os.path.join(text_dir, found[0]))
        elif split != 'test':
            raise UserError(f"no {split} split in {text_dir}: expected one of {', '.join(names)} "
                               "(or name the files with --train_file/--val_file)")
    return sources


def hf_sources(dataset):
    import datasets
    datasets.logging.set_verbosity_error()
    try:
        if os.path.isdir(dataset):  # a DatasetDict saved with save_to_disk
            ds, source = datasets.load_from_disk(dataset), dataset
        elif dataset in DATASETS:
            path, config = DATASETS[dataset]
            ds, source = datasets.load_dataset(path, config), f"{path} ({config})"
        else:
            raise UserError(f"unknown --dataset {dataset!r}: use {', '.join(DATASETS)}, "
                               "or a folder saved with DatasetDict.save_to_disk")
    except UserError:
        raise
    except Exception as e:
        raise UserError(f"could not load {dataset} through `datasets` ({type(e).__name__}; no network?): "
                           "use --text_dir with the raw WikiText files instead")
    sources = {}
    for split, hf_split in HF_SPLITS.items():
        if hf_split not in ds:
            if split == 'test':
                continue
            raise UserError(f"{source} has no '{hf_split}' split (it has: {', '.join(ds)})")
        d = ds[hf_split]
        if 'text' not in d.column_names:
            raise UserError(f"{source} split '{hf_split}' has no 'text' column")

        def chunks(d=d):
            for rows in d.iter(batch_size=LINES_PER_CHUNK):
                yield rows['text'], len(rows['text'])
        sources[split] = (f"{source} [{hf_split}]", len(d), chunks)
    return source, sources


# -----------------------------------------------------------------------------
# writing

def is_complete(out_dir):
    """meta.json present, and every bin it lists has exactly the size it records."""
    try:
        meta = load_meta(out_dir)
        itemsize = np.dtype(meta['dtype']).itemsize
        return all(os.path.getsize(os.path.join(out_dir, f'{s}.bin')) == n * itemsize
                   for s, n in meta['tokens'].items())
    except (OSError, ValueError, KeyError, TypeError):
        return False


def write_bin(path, tokenizer, dtype, source, desc, num_threads):
    """Tokenizes a source into path + '.tmp' and returns (token count, sha256). The caller
    renames it into place. Chunks are tokenized in threads (tiktoken releases the GIL) and
    appended in order, so memory holds a few chunks, never the whole split."""
    from tqdm import tqdm
    label, total_rows, chunks = source
    size = os.path.getsize(label) if total_rows is None else None
    n, sha, tmp = 0, hashlib.sha256(), path + '.tmp'
    with tqdm(total=total_rows or size, unit='row' if total_rows else 'B', unit_scale=True, desc=desc) as bar:
        try:
            with open(tmp, 'wb') as f, ThreadPoolExecutor(num_threads) as pool:
                pending = []
                for chunk in itertools.chain(chunks(), [None]):
                    if chunk is not None:
                        lines, done = chunk
                        pending.append((pool.submit(tokenizer.encode_lines, lines), done))
                    while pending and (chunk is None or len(pending) > 2 * num_threads):
                        future, done = pending.pop(0)
                        ids = future.result().astype(dtype)
                        f.write(ids)
                        sha.update(ids)
                        n += len(ids)
                        bar.update(done)
                f.flush()
                os.fsync(f.fileno())
            if n == 0:
                raise UserError(f"{label} holds no text")
        except BaseException:
            if os.path.exists(tmp):
                os.remove(tmp)
            raise
    return n, sha.hexdigest()


def prepare(sources, tokenizer, out_dir, meta_base, force, num_threads):
    meta_path = os.path.join(out_dir, 'meta.json')
    if is_complete(out_dir) and not force:
        old = load_meta(out_dir)
        if (old['tokenizer'], old['source']) != (tokenizer.name, meta_base['source']):
            raise UserError(f"{out_dir} already holds {old['tokenizer']} tokens of {old['source']}: "
                               "use --force to replace them, or another --out_dir")
        print(f"{out_dir} is already complete ({old['tokenizer']}, "
              + ', '.join(f"{s}: {n:,} tokens" for s, n in old['tokens'].items())
              + "); nothing to do (--force rewrites it)")
        return old
    os.makedirs(out_dir, exist_ok=True)
    if os.path.exists(meta_path):
        os.remove(meta_path)  # the folder is incomplete from here until the new meta.json lands
    dtype = bin_dtype(tokenizer.n_vocab)
    tokens, hashes, seconds = {}, {}, {}
    for split, source in sources.items():
        t0 = time.time()
        path = os.path.join(out_dir, f'{split}.bin')
        tokens[split], hashes[split] = write_bin(path, tokenizer, dtype, source, split, num_threads)
        seconds[split] = time.time() - t0
        os.replace(path + '.tmp', path)
        print(f"{split}: {tokens[split]:,} tokens from {source[0]} in {seconds[split]:.1f}s "
              f"({tokens[split] / seconds[split]:,.0f} tokens/s)")
    for stale in {'train', 'val', 'test'} - set(sources):  # a test.bin from an earlier run
        if os.path.exists(os.path.join(out_dir, f'{stale}.bin')):
            os.remove(os.path.join(out_dir, f'{stale}.bin'))
    meta = dict(meta_base, tokenizer=tokenizer.name, vocab_size=tokenizer.n_vocab, dtype=np.dtype(dtype).name,
                tokens=tokens, sha256=hashes,
                text="each split's lines in order, concatenated as given, each line tokenized on its own; "
                     "no separator or end-of-text token added")
    with open(meta_path + '.tmp', 'w') as f:
        json.dump(meta, f, indent=2)
    os.replace(meta_path + '.tmp', meta_path)
    total = sum(tokens.values()) / sum(seconds.values())
    print(f"wrote {out_dir} ({np.dtype(dtype).name}, vocab {tokenizer.n_vocab}); {total:,.0f} tokens/s overall")
    return meta


# -----------------------------------------------------------------------------

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])  # (one line: the docstring's first paragraph)
    p.add_argument('--dataset', default='wikitext-103',
                   help=f"{' | '.join(DATASETS)} (through `datasets`), or a folder saved with save_to_disk")
    p.add_argument('--text_dir', help='offline input: a folder with train/valid(/test) text files '
                                      '(wiki.*.raw, wiki.*.tokens or train/valid/test.txt)')
    p.add_argument('--train_file', help='offline input: the train text file (with --val_file and --out_dir)')
    p.add_argument('--val_file', help='offline input: the validation text file')
    p.add_argument('--test_file', help='offline input: the test text file (optional)')
    p.add_argument('--tokenizer', default='gpt2', help="a tiktoken encoding name, or 'bytes' (256 symbols)")
    p.add_argument('--out_dir', help='default: data/<name>, with -<tokenizer> appended unless gpt2')
    p.add_argument('--force', action='store_true', help='rewrite complete output')
    p.add_argument('--num_threads', type=int, default=os.cpu_count() or 1, help='tokenizer threads')
    args = p.parse_args(argv)

    try:
        try:
            tokenizer = get_tokenizer(args.tokenizer)
        except ValueError as e:
            raise UserError(str(e))
        files = {s: getattr(args, f'{s}_file') for s in ('train', 'val', 'test')}
        if any(files.values()):
            if args.text_dir or not (files['train'] and files['val'] and args.out_dir):
                raise UserError("--train_file and --val_file go together, with --out_dir and without --text_dir")
            sources = {s: file_source(f) for s, f in files.items() if f}
            name, meta_base = None, {'dataset': 'files', 'config': None,
                                     'source': {s: os.path.abspath(f) for s, f in files.items() if f}}
        elif args.text_dir:
            sources = text_dir_sources(args.text_dir)
            name = os.path.basename(os.path.normpath(args.text_dir))
            meta_base = {'dataset': name, 'config': None,
                         'source': {s: os.path.abspath(src[0]) for s, src in sources.items()}}
        else:
            source, sources = hf_sources(args.dataset)
            name = os.path.basename(os.path.normpath(args.dataset))
            meta_base = {'dataset': args.dataset, 'config': DATASETS.get(args.dataset, (None, None))[1],
                         'source': source}
        out_dir = args.out_dir or os.path.join('data', name if args.tokenizer == 'gpt2' else f'{name}-{args.tokenizer}')
        prepare(sources, tokenizer, out_dir, meta_base, args.force, max(1, args.num_threads))
    except UserError as e:
        sys.exit(error_line('prepare.py', e))
    except KeyboardInterrupt:
        sys.exit("prepare.py: interrupted; no complete output was left behind (run again to finish)")


if __name__ == '__main__':
    main()
