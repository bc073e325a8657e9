"""
Mutation testing: how many generated breaks of the code the suite catches. Not part of CI (it takes
tens of minutes); run it from the repository root after installing mutmut (pip install mutmut==3.8.1):

    python tests/mutants.py --sample 200 --seed 1        # a random sample of 200 mutants, and its score
    python tests/mutants.py --changed main               # every mutant of the files changed since main
    python tests/mutants.py --names 'model.x_*'          # mutmut's names or globs, as `mutmut run` takes
    python tests/mutants.py --sample 200 --seed 1 --reuse --unkilled   # again, after tests were added

mutmut (setup.cfg, [mutmut]) copies the repository into mutants/, rewrites each function of the files
it mutates into its variants (an operator, a constant, a string, a call's argument changed), and for
each mutant runs, in a process of its own, the tests that call that function, stopping at the first
failure. The mutants are the tool's: this script only chooses which of them run, by the seed, and leaves
out two kinds, each by one rule:
- mutants recorded as equivalent in tests/mutants-equivalent.txt (a line `NAME  # why`): no input can
  tell them from the code. A recorded name whose change is no longer the one recorded is run again.
- mutants that change only the text of an error message: a string (or f-string, or None in its place)
  inside a `raise` statement or inside a call of an error (UserError, SystemExit, error_line, any *Error or *Exception, parser.error,
  sys.exit). The tests check that a bad input gives one clear line that names what is wrong, not each
  message's wording.

The score is killed / (killed + survived), in all and per file; timeouts count as killed (the break
made a test hang). Survivors are printed with their diffs: each gets a test of the behaviour it breaks,
or a line in tests/mutants-equivalent.txt with the reason.
"""

import argparse
import ast
import fnmatch
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EQUIVALENT = os.path.join(ROOT, 'tests', 'mutants-equivalent.txt')
ERROR_CALLS = {'UserError', 'SystemExit', 'error_line', 'error', 'exit'}  # (and any name ending Error/Exception)


def generate(reuse=False):
    """mutmut's generation step alone (the copy into mutants/ and the mutants of each file); returns
    {mutant name: the file it is in}. reuse: keep mutants/ as the last run left it (its copy, the
    results and mutmut's record of which tests call which function), for code that has not changed."""
    from mutmut.__main__ import copy_also_copy_files, copy_src_dir, create_mutants, setup_source_paths
    if not reuse:  # (mutmut keeps a copy it made before, and would not see code changed since)
        shutil.rmtree('mutants', ignore_errors=True)
    os.makedirs('mutants', exist_ok=True)
    copy_src_dir()
    copy_also_copy_files()
    setup_source_paths()
    create_mutants(os.cpu_count() or 2)
    names = {}
    for folder, _, files in os.walk('mutants'):
        for f in files:
            if f.endswith('.py.meta'):
                path = os.path.join(folder, f)
                source = os.path.relpath(path[:-len('.meta')], 'mutants')
                for name in json.load(open(path))['exit_code_by_key']:
                    names[name] = source
    return names


MODULES = {}


def functions_of(name, source):
    """The original function and the mutant, as source text, each under the function's own name."""
    import libcst as cst
    from mutmut.mutation.diff_apply import read_mutant_function, read_mutants_module, read_original_function
    if source not in MODULES:  # (a parse of a mutated file takes a second or more)
        MODULES[source] = read_mutants_module(source)
    module = MODULES[source]
    return tuple(re.sub(r'__mutmut_(orig|\d+)\b', '', cst.Module([f]).code.strip(), count=1)
                 for f in (read_original_function(module, name), read_mutant_function(module, name)))


def is_error_call(node):
    if isinstance(node, ast.Raise):
        return True
    if isinstance(node, ast.Call):
        f = node.func
        called = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ''
        return called in ERROR_CALLS or called.endswith(('Error', 'Exception'))
    return False


class BlankErrorText(ast.NodeTransformer):
    """Every message inside an error (a string, an f-string, or None in its place) made one blank."""
    depth = 0

    def generic_visit(self, node):
        inside = is_error_call(node)
        self.depth += inside
        node = super().generic_visit(node)
        self.depth -= inside
        return node

    def visit_JoinedStr(self, node):
        return ast.Constant('') if self.depth else node

    def visit_Constant(self, node):
        return ast.Constant('') if self.depth and (node.value is None or isinstance(node.value, str)) else node


def without_error_text(code):
    """The function's syntax tree with every message inside an error blanked."""
    return ast.dump(BlankErrorText().visit(ast.parse(code)))


def error_text_only(original, mutant):
    try:
        return without_error_text(original) == without_error_text(mutant)
    except SyntaxError:
        return False


def recorded_equivalents():
    """{name: (the mutant line recorded, why)} from tests/mutants-equivalent.txt. A record is two lines:
    `NAME  # why`, then the mutant's changed line, indented."""
    records, lines = {}, open(EQUIVALENT).read().splitlines() if os.path.exists(EQUIVALENT) else []
    for i, line in enumerate(lines):
        if line and not line.startswith((' ', '#')):
            name, _, why = line.partition('#')
            records[name.strip()] = (lines[i + 1].strip() if i + 1 < len(lines) else '', why.strip())
    return records


def changed_line(original, mutant):
    """The first line of the mutant that differs from the original (what an equivalence record names)."""
    for a, b in zip(original.splitlines(), mutant.splitlines()):
        if a != b:
            return b.strip()
    return ''


def choose(names, args):
    """The mutants to run, in a seeded order: the named ones, those of changed files, or a sample."""
    pool = sorted(names)
    if args.names:
        pool = [n for n in pool if any(fnmatch.fnmatch(n, g) for g in args.names)]
    if args.changed:
        diff = subprocess.run(['git', 'diff', '--name-only', args.changed], capture_output=True, text=True,
                              cwd=ROOT, check=True).stdout.split()
        pool = [n for n in pool if names[n] in diff]
    # each mutant ranked by a hash of (seed, name): a seed draws the same mutants while their names stand,
    # whatever else the code gains or loses (a shuffle of the list would draw anew at any change)
    pool.sort(key=lambda n: hashlib.sha256(f'{args.seed} {n}'.encode()).digest())
    equivalent, chosen, left_out = recorded_equivalents(), [], {'equivalent': 0, 'error text': 0}
    for name in pool:
        if args.sample and len(chosen) == args.sample:
            break
        original, mutant = functions_of(name, names[name])
        if name in equivalent and equivalent[name][0] == changed_line(original, mutant):
            left_out['equivalent'] += 1
        elif error_text_only(original, mutant):
            left_out['error text'] += 1
        else:
            chosen.append(name)
    return chosen, left_out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--sample', type=int, default=0, help='how many mutants to draw (0: all that match)')
    parser.add_argument('--seed', type=int, default=None, help='the draw\'s seed (default: a new one, printed)')
    parser.add_argument('--changed', metavar='REF', help='only the mutants of files that differ from this git ref')
    parser.add_argument('--names', nargs='*', default=[], help='only these mutants (names or globs)')
    parser.add_argument('--jobs', type=int, default=2, help='mutants run at once, one thread each')
    parser.add_argument('--reuse', action='store_true', help='keep mutants/ from the last run (only if no code changed)')
    parser.add_argument('--unkilled', action='store_true', help='with --reuse: run only the chosen mutants the last '
                        'run did not kill (when tests were only added since, and no code changed)')
    parser.add_argument('--out', default='mutants/score.json', help='where the results are written (JSON)')
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(10 ** 6)
    t0 = time.time()
    names = generate(args.reuse)
    chosen, left_out = choose(names, args)
    print(f'mutants: {len(names)} generated; seed {args.seed}; {len(chosen)} chosen; left out by rule: '
          f'{left_out["equivalent"]} recorded equivalent, {left_out["error text"]} error text only', flush=True)
    if not chosen:
        return
    if args.unkilled and not args.reuse:
        sys.exit('mutants.py: error: --unkilled reads the last run\'s results: add --reuse')
    to_run = [n for n in chosen if last_status(names, n) not in ('killed', 'timeout')] if args.unkilled else chosen
    print(f'running {len(to_run)} of them' + (' (the rest were killed by the last run)' if args.unkilled else ''))
    env = dict(os.environ, OMP_NUM_THREADS='1')
    run = subprocess.run([sys.executable, '-m', 'mutmut', 'run', '--max-children', str(args.jobs), *to_run], env=env)
    if run.returncode not in (0, 1):  # (mutmut's own failure, not a surviving mutant)
        sys.exit(f'mutants.py: error: mutmut run stopped with exit code {run.returncode}; see its output above')
    report(names, chosen, args, left_out, time.time() - t0)


def last_status(names, name):
    """What mutants/ holds of the mutant's last run: 'killed', 'survived', 'timeout', 'not checked', ..."""
    from mutmut.stats import status_by_exit_code
    with open(os.path.join('mutants', names[name] + '.meta')) as f:
        return status_by_exit_code[json.load(f)['exit_code_by_key'].get(name)]


def report(names, chosen, args, left_out, seconds):
    status = {n: last_status(names, n) for n in chosen}
    per_file = {}
    for n in chosen:
        s = status[n]
        row = per_file.setdefault(names[n], {'killed': 0, 'survived': 0, 'other': 0})
        row['killed' if s in ('killed', 'timeout') else 'survived' if s == 'survived' else 'other'] += 1
    print(f'\n| file | killed | survived | other | score |\n|---|---|---|---|---|')
    total = {'killed': 0, 'survived': 0, 'other': 0}
    for source, row in sorted(per_file.items()):
        for k in total:
            total[k] += row[k]
        print(f'| {source} | {row["killed"]} | {row["survived"]} | {row["other"]} | {score(row)} |')
    print(f'| all | {total["killed"]} | {total["survived"]} | {total["other"]} | {score(total)} |')
    for n in chosen:
        if status[n] not in ('killed', 'timeout'):
            original, mutant = functions_of(n, names[n])
            print(f'\n{status[n]}: {n} ({names[n]})\n    {changed_line(original, mutant)}')
    with open(args.out, 'w') as f:
        json.dump(dict(seed=args.seed, sample=args.sample, changed=args.changed, names=args.names,
                       generated=len(names), left_out=left_out, seconds=round(seconds), per_file=per_file,
                       total=total, status=status), f, indent=1)
    print(f'\n{len(chosen)} mutants in {seconds / 60:.0f} min; results in {args.out} (other: no test calls the '
          f'function, or a crash of the run itself)')


def score(row):
    decided = row['killed'] + row['survived']
    return f'{100 * row["killed"] / decided:.0f}%' if decided else '-'


if __name__ == '__main__':
    main()
