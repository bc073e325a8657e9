"""
Each module's promises against the tests that name them: where the holes are. Generated, not kept by hand;
run it from the repository root (no torch needed, it only reads the files):

    python tests/promises.py              # a table per module, then every promise no test names
    python tests/promises.py --all        # every promise with the tests that name it

A promise is what the code says it does, in the places a reader reads it:
- a setting of train.py (its module-level settings block), with its comment;
- a field of the model's config (model.py's LoopedGPTConfig, beyond/additions.py's FieldGPTConfig), with its comment;
- a public function, class or method with a docstring (its first sentence);
- a README command (a line of a code block that runs python or bash).
A test names a promise when its body (or a fixture or helper of its file or of conftest.py it uses,
followed to any depth) refers to the name: a setting or field as an identifier, a keyword or a string
(`'--bptt=2'`, `'bptt'`, `bptt=2`); a function or method by its name; a README command by every script,
module and config file it runs. Naming is not holding: a test that names a function may not check what
its docstring says. A promise that no test names is a hole for certain: nothing reads it.
"""

import argparse
import ast
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULES = ['model.py', 'linear_ce.py', 'runtime.py', 'data.py', 'report.py', 'prepare.py', 'configurator.py',
           'train.py', 'depth.py', 'eval_depth.py', 'sample.py']
WORD = re.compile(r'[A-Za-z_][A-Za-z0-9_]*')


def sources():
    """The modules whose promises are listed: the top level's, then beyond/'s."""
    beyond = sorted(f'beyond/{f}' for f in os.listdir(os.path.join(ROOT, 'beyond'))
                    if f.endswith('.py') and f != '__init__.py')
    return [m for m in MODULES if os.path.exists(os.path.join(ROOT, m))] + beyond


def first_sentence(doc):
    text = ' '.join(doc.split())
    m = re.match(r'(.+?[.:;])(\s|$)', text)
    return (m.group(1) if m else text)[:140]


def comment_of(lines, lineno):
    line = lines[lineno - 1]
    return line.split('#', 1)[1].strip() if '#' in line else ''


def promises_of(path):
    """[(kind, name, text)] of one module."""
    text = open(os.path.join(ROOT, path)).read()
    tree, lines, out = ast.parse(text), text.splitlines(), []
    if path == 'train.py':
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                name = node.targets[0].id
                if name.islower() and not name.startswith('_') and isinstance(node.value, ast.Constant):
                    out.append(('setting', name, comment_of(lines, node.lineno)))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.decorator_list and any(
                isinstance(d, ast.Name) and d.id == 'dataclass' for d in node.decorator_list):
            for field in node.body:
                if isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name):
                    out.append(('field', field.target.id, comment_of(lines, field.lineno)))
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith('_'):
            if ast.get_docstring(node):
                out.append(('function' if isinstance(node, ast.FunctionDef) else 'class', node.name,
                            first_sentence(ast.get_docstring(node))))
            if isinstance(node, ast.ClassDef):
                for method in node.body:
                    if isinstance(method, ast.FunctionDef) and not method.name.startswith('_') and ast.get_docstring(method):
                        out.append(('method', f'{node.name}.{method.name}', first_sentence(ast.get_docstring(method))))
    return out


def readme_commands():
    """[('command', the line, the scripts, modules and configs it runs)] from README.md's code blocks."""
    out = []
    for line in open(os.path.join(ROOT, 'README.md')).read().splitlines():
        if line.startswith('    ') and re.match(r'\s+(python|bash)\b', line):
            command = line.split('#', 1)[0].strip()
            parts = [p for p in command.split() if p.endswith(('.py', '.sh')) or p.startswith('beyond.')]
            if parts:
                out.append(('command', command, parts))
    return out


def names_in(node):
    """Identifiers, attribute names, keywords and the words of string constants under a node."""
    found = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            found.add(n.id)
        elif isinstance(n, ast.Attribute):
            found.add(n.attr)
        elif isinstance(n, ast.keyword) and n.arg:
            found.add(n.arg)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            found.update(WORD.findall(n.value))
            found.add(n.value)
        elif isinstance(n, ast.arg):
            found.add(n.arg)
    return found


def tests_and_their_names():
    """{'file::test': every name it refers to, through the fixtures and helpers it uses (to any depth)}."""
    files = ['test_model.py'] + sorted(f'tests/{f}' for f in os.listdir(os.path.join(ROOT, 'tests'))
                                       if f.startswith('test_') and f.endswith('.py'))
    conftest = ast.parse(open(os.path.join(ROOT, 'tests', 'conftest.py')).read())
    shared = {n.name: n for n in conftest.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    out = {}
    for path in files:
        tree = ast.parse(open(os.path.join(ROOT, path)).read())
        local = dict(shared, **{n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))})
        constants = {t.id: n for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith('test_'):
                seen, todo, names = set(), [node], set()
                while todo:
                    n = todo.pop()
                    found = names_in(n)
                    names |= found
                    for name in found:
                        target = local.get(name) or constants.get(name)
                        if target is not None and name not in seen:
                            seen.add(name)
                            todo.append(target)
                out[f'{path}::{node.name}'] = names
    return out


def holders(promise, tests):
    kind, name, extra = promise
    if kind == 'command':
        wanted = [os.path.basename(p)[:-3] if p.endswith('.py') else p.split('.')[-1] if p.startswith('beyond.')
                  else os.path.basename(p) for p in extra]
        return [t for t, names in tests.items() if all(any(w in n for n in names) for w in wanted)]
    key = name.split('.')[-1]
    return [t for t, names in tests.items() if key in names]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--all', action='store_true', help='list every promise with the tests that name it')
    args = parser.parse_args(argv)
    tests = tests_and_their_names()
    rows, holes = [], []
    table = {path: promises_of(path) for path in sources()}
    table['README.md'] = readme_commands()
    print('| module | promises | named by a test | holes |\n|---|---|---|---|')
    total = [0, 0]
    for path, promises in table.items():
        held = 0
        for p in promises:
            by = holders(p, tests)
            held += bool(by)
            if not by:
                holes.append((path, p))
            if args.all:
                rows.append((path, p, by))
        total[0] += len(promises)
        total[1] += held
        print(f'| {path} | {len(promises)} | {held} | {len(promises) - held} |')
    print(f'| all | {total[0]} | {total[1]} | {total[0] - total[1]} |')
    print(f'\n{len(tests)} tests read. Promises no test names:')
    for path, (kind, name, text) in holes:
        shown = text if isinstance(text, str) else ' '.join(text)
        print(f'- {path}: {kind} `{name}`' + (f': {shown}' if kind != 'command' else ''))
    if args.all:
        print('\nEvery promise and the tests that name it:')
        for path, (kind, name, text), by in rows:
            print(f'- {path}: {kind} `{name}`: {len(by)} tests' + (f' ({", ".join(t.split("::")[1] for t in by[:3])}'
                                                                  f'{", ..." if len(by) > 3 else ""})' if by else ''))


if __name__ == '__main__':
    sys.exit(main())
