"""
Mutation testing: how many generated breaks of the code the suite catches. Not part of CI (it takes
tens of minutes); run it from the repository root after installing mutmut (pip install mutmut==3.8.1):

    python tests/mutants.py --sample 200 --seed 1        # a random sample of 200 mutants, and its score
    python tests/mutants.py --changed main               # every mutant of the files changed since main
    python tests/mutants.py --names 'model.x_*'          # mutmut's names or globs, as `mutmut run` takes
    python tests/mutants.py --sample 200 --seed 1 --reuse --unkilled   # again, after tests were added

mutmut (pyproject.toml, [tool.mutmut]) copies the repository into mutants/, rewrites each function of the files
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

Operators: mutmut's own (a number, a string, True/False, an assignment to None, an arithmetic or
boolean operator swapped, a comparison's boundary flipped (< and <=, > and >=), a call's argument dropped
or made None, a ternary forced down one arm) and five of ours on top (OPERATORS below), the breaks a
reader aims at that mutmut cannot make:
- delete statement: each simple statement of a function replaced by `pass` (a feature deleted outright);
- drop with: each `with` block without `as` run without its context (autocast, no_grad, a lock dropped);
- drop if body: each `if`'s body replaced by `pass` (a branch that is never taken);
- swap name: each device or dtype name ('cpu', 'cuda', 'float32', torch.bfloat16, ...) swapped for another
  of its kind;
- swap setting: each string naming a train.py setting or a model field swapped for the next such name.
The report counts the generated mutants and the sampled ones per operator.

Code that runs only on a CUDA device (a CUDA graph's fixed addresses and its output's clone, and the compile
options whose effect a CPU cannot show) is marked `# pragma: no mutate` where it stands, with why: mutmut makes
no mutants of it, since no test on a CPU can tell them from the code (each was recorded equivalent, one by one,
before). tests/test_decoder.py's CUDA tests run it on a GPU. The report prints how many lines are so marked.

The score is killed / chosen, in all and per file: every chosen mutant that no test killed counts
against it, those that no test reaches (mutmut's "no tests": a promise no test calls, the first hole to
fill) included, and each is listed. Timeouts (the break made a test hang) and crashes of the test process
count as killed. Survivors are printed with their diffs: each gets a test of the behaviour it breaks,
or a line in tests/mutants-equivalent.txt with the reason.
"""

import argparse
import ast
import collections
import fnmatch
import hashlib
import json
import os
import pathlib
import random
import re
import shutil
import subprocess
import sys
import time

try:
    import libcst as cst  # (mutmut's own dependency, installed with it; --help needs neither)
except ImportError:
    cst = None

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EQUIVALENT = os.path.join(ROOT, 'tests', 'mutants-equivalent.txt')
ERROR_CALLS = {'UserError', 'SystemExit', 'error_line', 'error', 'exit'}  # (and any name ending Error/Exception)


# ---------------------------------------------------------------------------------------------------------------
# Our operators, on top of mutmut's: each takes a libcst node and yields its mutants, as mutmut's own do.
DEVICES = ['cpu', 'cuda', 'mps']                      # each name is swapped for the next of its kind
DTYPES = ['float32', 'bfloat16', 'float16', 'float64']


def setting_names():
    """train.py's settings (its module-level lowercase names) and the model's fields (the dataclasses of
    model.py and beyond/additions.py): the names a `swap setting` mutant trades for one another."""
    names = set()
    for path in ('train.py', 'model.py', 'beyond/additions.py'):
        tree = ast.parse(open(os.path.join(ROOT, path)).read())
        if path == 'train.py':
            names |= {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
                      if isinstance(t, ast.Name) and t.id.islower() and not t.id.startswith('_')}
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.decorator_list):
            names |= {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    return sorted(names)


def is_pass(statements):
    return all(isinstance(s, cst.SimpleStatementLine) and all(isinstance(x, cst.Pass) for x in s.body)
               for s in statements)


def delete_statement(node):
    """`delete statement`: a function's simple statement line replaced by `pass` (not a docstring, not a pass)."""
    if all(isinstance(x, cst.Pass) for x in node.body):
        return
    if len(node.body) == 1 and isinstance(node.body[0], cst.Expr) and isinstance(
            node.body[0].value, (cst.SimpleString, cst.ConcatenatedString)):
        return
    yield node.with_changes(body=[cst.Pass()])


def drop_with(node):
    """`drop with`: a `with` block without `as` run without its context (its body under `if True:`)."""
    if node.asynchronous is None and not any(item.asname for item in node.items):
        yield cst.If(test=cst.Name('True'), body=node.body, leading_lines=node.leading_lines)


def drop_if_body(node):
    """`drop if body`: an `if`'s (or elif's) body replaced by `pass`. A body of one simple statement line is
    left to `delete statement` (the same mutant)."""
    body = node.body
    if isinstance(body, cst.SimpleStatementSuite):
        if not all(isinstance(x, cst.Pass) for x in body.body):
            yield node.with_changes(body=body.with_changes(body=[cst.Pass()]))
    elif not is_pass(body.body) and not (len(body.body) == 1 and isinstance(body.body[0], cst.SimpleStatementLine)):
        yield node.with_changes(body=body.with_changes(body=[cst.SimpleStatementLine([cst.Pass()])]))


def swapped(value, names):
    return names[(names.index(value) + 1) % len(names)] if value in names else None


def swapped_string(node, *kinds):
    """A plain string naming one of kinds' names, swapped for the next name of its kind."""
    if node.prefix == '':
        new = next((swapped(node.evaluated_value, names) for names in kinds if node.evaluated_value in names), None)
        if new:
            yield node.with_changes(value=f'{node.quote}{new}{node.quote}')


def swap_name(node):
    """`swap name`: a device or dtype name in a plain string swapped for the next of its kind."""
    yield from swapped_string(node, DEVICES, DTYPES)


def swap_dtype_attribute(node):
    """`swap name`: torch.float32 and its kind, as attributes, swapped for the next of their kind."""
    new = swapped(node.attr.value, DTYPES)
    if new and isinstance(node.value, cst.Name) and node.value.value == 'torch':
        yield node.with_changes(attr=cst.Name(new))


SETTINGS = []  # (filled by install_operators: setting_names())


def swap_setting(node):
    """`swap setting`: a plain string naming a setting or a model field swapped for the next such name."""
    yield from swapped_string(node, SETTINGS)


# (its label, the libcst node it mutates, the operator)
OPERATORS = [('delete statement', 'SimpleStatementLine', delete_statement), ('drop with', 'With', drop_with),
             ('drop if body', 'If', drop_if_body), ('swap name', 'SimpleString', swap_name),
             ('swap name', 'Attribute', swap_dtype_attribute), ('swap setting', 'SimpleString', swap_setting)]
# each operator by what it makes (mutmut's operator_swap_op is `boundary flip` on <, <=, >, >=)
MUTMUT_LABELS = {'operator_number': 'number', 'operator_string': 'string', 'operator_name': 'True/False',
                 'operator_assignment': 'assignment to None', 'operator_augmented_assignment': 'augmented to plain',
                 'operator_remove_unary_ops': 'unary removed', 'operator_dict_arguments': 'dict keyword',
                 'operator_arg_removal': 'drop argument', 'operator_lambda': 'lambda',
                 'operator_symmetric_string_methods_swap': 'string method',
                 'operator_unsymmetrical_string_methods_swap': 'string method', 'operator_keywords': 'keyword',
                 'operator_swap_op': 'operator swap', 'operator_match': 'match case', 'operator_if_exp': 'ternary arm'}
MUTMUT_LABELS.update({op.__name__: label for label, _, op in OPERATORS})  # (and ours)
BOUNDARIES = ('LessThan', 'LessThanEqual', 'GreaterThan', 'GreaterThanEqual')


def install_operators():
    """Ours appended to mutmut's list (its generation reads the list; its worker processes fork from here)."""
    from mutmut.mutation import mutators
    if not SETTINGS:
        SETTINGS.extend(setting_names())
    if not any(op is delete_statement for _, op in mutators.mutation_operators):
        mutators.mutation_operators.extend((getattr(cst, kind), op) for _, kind, op in OPERATORS)


def label_of(operator, node):
    name = operator.__name__
    if name == 'operator_swap_op' and type(getattr(node, 'operator', None)).__name__ in BOUNDARIES:
        return 'boundary flip'
    return MUTMUT_LABELS.get(name, name)


def operators_of(sources):
    """{mutant name: the operator that made it}: each file's mutations made again in this process, in
    mutmut's order, with every operator tagged, and named as mutmut names them (the function's mutants
    numbered from 1 in the order they were made)."""
    from mutmut.mutation import file_mutation, mutators
    from mutmut.mutation.trampoline_templates import mangle_function_name
    from mutmut.utils.format_utils import get_mutant_name
    install_operators()
    tags, saved = {}, list(mutators.mutation_operators)

    def tagged(operator):
        def run(node):
            for mutant in operator(node):
                tags[id(mutant)] = label_of(operator, node)
                yield mutant
        return run
    mutators.mutation_operators[:] = [(kind, tagged(op)) for kind, op in saved]
    try:
        names = {}
        for source in sorted(set(sources)):
            module, mutations, _, _ = file_mutation.create_mutations(source, open(source).read())
            owner = {}
            for statement in module.body:
                if isinstance(statement, cst.FunctionDef):
                    owner[statement] = mangle_function_name(name=statement.name.value, class_name=None)
                elif isinstance(statement, cst.ClassDef) and isinstance(statement.body, cst.IndentedBlock):
                    for method in statement.body.body:
                        if isinstance(method, cst.FunctionDef):
                            owner[method] = mangle_function_name(name=method.name.value, class_name=statement.name.value)
            for function, group in file_mutation.group_by_top_level_node(mutations).items():
                if function in owner:
                    for i, mutation in enumerate(group):
                        key = get_mutant_name(pathlib.Path(source), f'{owner[function]}__mutmut_{i + 1}')
                        names[key] = tags[id(mutation.mutated_node)]
        return names
    finally:
        mutators.mutation_operators[:] = saved


def no_mutate_lines():
    """{file: its line numbers that mutmut leaves alone by a `# pragma: no mutate` comment}, read as mutmut reads them."""
    from mutmut.configuration import config
    from mutmut.mutation.pragma_handling import PragmaVisitor
    marked = {}
    for path in config().only_mutate:
        files = [path] if path.endswith('.py') else sorted(str(p) for p in pathlib.Path(path).rglob('*.py'))
        for f in files:
            visitor = PragmaVisitor(f)
            cst.MetadataWrapper(cst.parse_module(open(f).read())).visit(visitor)
            if visitor.no_mutate_lines:
                marked[f] = sorted(visitor.no_mutate_lines)
    return marked


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
    install_operators()
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


def stale_records(names):
    """The records of tests/mutants-equivalent.txt whose mutant no longer makes the line recorded (the code changed,
    or its mutants were numbered anew): run again, and each to be renumbered or dropped."""
    return sorted(name for name, (line, _) in recorded_equivalents().items()
                  if name not in names or changed_line(*functions_of(name, names[name])) != line)


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
    operators = operators_of(names.values())
    chosen, left_out = choose(names, args)
    print(f'mutants: {len(names)} generated; seed {args.seed}; {len(chosen)} chosen; left out by rule: '
          f'{left_out["equivalent"]} recorded equivalent, {left_out["error text"]} error text only', flush=True)
    marked = no_mutate_lines()
    print('lines marked no mutate: ' + (', '.join(f'{f} {len(v)}' for f, v in marked.items()) or 'none'))
    generated = collections.Counter(operators.get(n, '?') for n in names)
    print('generated per operator: ' + ', '.join(f'{op} {k}' for op, k in generated.most_common()))
    stale = stale_records(names)
    if stale:
        print(f'{len(stale)} records of {os.path.relpath(EQUIVALENT)} no longer name the change recorded (where still '
              f'generated, their mutants run again; renumber or drop each): ' + ', '.join(stale))
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
    report(names, operators, generated, chosen, args, left_out, time.time() - t0)


def last_status(names, name):
    """What mutants/ holds of the mutant's last run: 'killed', 'survived', 'timeout', 'not checked', ..."""
    from mutmut.stats import status_by_exit_code
    with open(os.path.join('mutants', names[name] + '.meta')) as f:
        return status_by_exit_code[json.load(f)['exit_code_by_key'].get(name)]


KILLED = ('killed', 'timeout', 'segfault')  # a test failed, hung, or its process crashed


def report(names, operators, generated, chosen, args, left_out, seconds):
    """The score per file and per operator: killed over chosen, so a mutant that no test reaches (mutmut's
    'no tests') or that the run did not check counts against it as a survivor does. The record written (--out) is
    what the tables are printed from (tables), so that a page embeds what a record renders to."""
    status = {n: last_status(names, n) for n in chosen}
    rows = {}
    for n in chosen:
        for table, key in (('file', names[n]), ('operator', operators.get(n, '?'))):
            row = rows.setdefault(table, {}).setdefault(key, {'killed': 0, 'survived': 0, 'no tests': 0, 'other': 0})
            s = status[n]
            row['killed' if s in KILLED else s if s in ('survived', 'no tests') else 'other'] += 1
    total = {'killed': 0, 'survived': 0, 'no tests': 0, 'other': 0}
    for row in rows.get('file', {}).values():
        for k in total:
            total[k] += row[k]
    for op in generated:  # (every operator has its row, sampled or not)
        rows.setdefault('operator', {}).setdefault(op, {'killed': 0, 'survived': 0, 'no tests': 0, 'other': 0})
    record = dict(seed=args.seed, sample=args.sample, changed=args.changed, names=args.names, generated=len(names),
                  generated_per_operator=generated, left_out=left_out, seconds=round(seconds),
                  per_file=rows.get('file', {}), per_operator=rows.get('operator', {}), total=total, status=status,
                  operator={n: operators.get(n, '?') for n in chosen})
    print('\n' + tables(record))
    for n in chosen:
        if status[n] not in KILLED:
            original, mutant = functions_of(n, names[n])
            print(f'\n{status[n]}: {n} ({names[n]}, {operators.get(n, "?")})\n    {changed_line(original, mutant)}')
    with open(args.out, 'w') as f:
        json.dump(record, f, indent=1)
    print(f'\n{len(chosen)} mutants in {seconds / 60:.0f} min; results in {args.out} (score: killed / sampled; '
          f'no tests: no test calls the function; other: not checked, skipped or suspicious)')


def tables(record):
    """A record's two tables (markdown, a blank line between them), as the pages embed them: per file (sampled,
    killed, survived, no tests, other, score), then per operator with the count generated, each closed by its total."""
    out = []
    for table, rows in (('file', record['per_file']), ('operator', record['per_operator'])):
        generated = table == 'operator'
        out += ['', f'| {table} |{" generated |" if generated else ""} sampled | killed | survived | no tests | other | '
                    'score |', '|---|' + '---|' * (6 + generated)]
        for key, row in sorted(rows.items()) + [('all', record['total'])]:
            made = record['generated'] if key == 'all' else record['generated_per_operator'].get(key, 0)
            out.append(f'| {key} |{f" {made:,} |" if generated else ""} {sum(row.values()):,} | {row["killed"]:,} | '
                       f'{row["survived"]} | {row["no tests"]} | {row["other"]} | {score(row)} |')
    return '\n'.join(out[1:])


def score(row):
    n = sum(row.values())
    return f'{100 * row["killed"] / n:.1f}%' if n else '-'


if __name__ == '__main__':
    main()
