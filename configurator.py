"""
The command line of every script but eval_depth.py: config files and --key=value
overrides, as in nanoGPT, plus --help, which lists the script's settings with their comments.

    python train.py config/raw_perloop.py config/cpu.py --learning_rate=1e-3
    python train.py --help

A config file is plain Python assignments, applied in order; it can read the settings
before it (out_dir = out_dir + '-129m'). What it binds for its own use is not a setting: a
name that starts with an underscore (_width = 512), a function it defines (def _f or def f)
and a module it imports are its own, seen by the rest of the file and dropped after it; every
other name it binds must be a setting. A value on the command line is a Python literal,
or else taken as a string (--dataset=wikitext-2); `--key value` (with a space) works too.
Unlike nanoGPT's, an unknown key or a value of the wrong type is one clear error that
names the key and the script, and an int is accepted where a float is expected
(--learning_rate=1).

The settings are a script's commented globals between its first two `# ---` lines; --help
reads them, and their comments, from the script's source, so each comment exists once. A
config can name its model (train.py's model_class = 'module.Class'): the fields of that class's
config are then settings too, with --help's lines from their comments.
"""

import ast
import dataclasses
import difflib
import inspect
import io
import os
import pathlib
import sys
import tokenize
import types
from contextlib import contextmanager


class UserError(Exception):
    """Something the user can fix (a setting, a path, a missing file or package). Every script
    raises this one class and prints it as one line, never as a traceback (one_line_errors)."""


ROOT = os.path.dirname(os.path.abspath(__file__))  # the repository root, where the scripts run from


def command(path):
    """How a script is run: `python train.py` at the top, `python -m pkg.name` for a script in a
    folder below it (run from the root, so that it imports the top level)."""
    rel = os.path.relpath(os.path.abspath(path), ROOT)
    if rel.startswith(os.pardir) or os.sep not in rel:  # (a script outside the repo: by its name)
        return f"python {os.path.basename(path)}"
    return f"python -m {rel[:-3].replace(os.sep, '.')}"


def error_line(script, e):
    return f"{script}: error: {e}"


@contextmanager
def one_line_errors(script):
    """Around a script's main: a UserError becomes `<script>: error: <message>` on stderr, exit status 1."""
    try:
        yield
    except UserError as e:
        sys.exit(error_line(script, e))


def known(settings, key, where, script):
    if key not in settings:
        near = difflib.get_close_matches(key, settings, n=1)
        hint = f"did you mean '{near[0]}'? " if near else ''
        more = " (a config's model_class brings its model's own: beyond/'s have more)" if 'model_class' in settings else ''
        raise UserError(f"unknown setting '{key}' ({where}); {hint}`{script} --help` lists the settings{more}")


def check(settings, key, value, where, script):
    known(settings, key, where, script)
    default = settings[key]
    if default is None:  # a setting that is unset by default takes any value; its script checks it
        return value
    if type(default) is float and type(value) is int:
        return float(value)
    if type(value) is not type(default):
        kind = type(default).__name__
        raise UserError(f"setting '{key}' takes {'an' if kind[0] in 'aeiou' else 'a'} {kind} (like {default!r}), "
                          f"got {value!r} ({where})")
    return value


def check_ranges(config, ranges):
    """Each setting named in ranges against its rule: '>= x', '> x', '[a, b)' (a <= value < b), or a
    tuple of the values it may take. One line naming the setting and the rule, the first that fails."""
    for key, rule in ranges.items():
        value = config[key]
        if isinstance(rule, tuple):
            ok, said = value in rule, f"one of {', '.join(map(str, rule))}"
        elif rule.startswith('['):
            low, high = (float(v) for v in rule.strip('[)').split(','))
            ok, said = low <= value < high, f"in {rule}"
        else:
            op, bound = rule.split()
            ok, said = (value >= float(bound)) if op == '>=' else (value > float(bound)), rule
        if not ok:
            raise UserError(f"setting '{key}' must be {said}; got {value!r}")


def model_settings(name, scripts, where):
    """What a config naming its model class brings (model_class = 'module.Class'): the fields that the class's
    config classes declare and those in scripts (the sources of the settings so far) do not, each at its default;
    and those config classes, for --help. A class that cannot be imported (beyond/ deleted) is one line."""
    from model import named_class  # (a script with a model_class setting trains a model)
    try:
        config_class = named_class(name).config_class
    except ValueError as e:
        raise UserError(f"{e} ({where})")
    new = [c for c in reversed(config_class.__mro__) if dataclasses.is_dataclass(c) and c not in scripts]
    declared = {k for c in new for k in vars(c).get('__annotations__', {})}
    return {f.name: f.default for f in dataclasses.fields(config_class) if f.name in declared}, new


def configure(settings, argv, scripts=None):
    """settings: name -> default. argv: config files and --key=value (or --key value), in order.
    scripts: the source files (or config classes) whose settings these are, the script being run first
    (for --help and the error messages); default: the running script, sys.argv[0].
    Returns a new dict; raises UserError with a one-line message. --help or -h anywhere
    prints the settings with their comments and exits, as argparse does (after the config
    files and settings before it: a config naming its model lists that model's fields)."""
    scripts = list(scripts or [sys.argv[0]])
    script = command(scripts[0])
    settings = dict(settings)

    def model_named(value, where):  # model_class set: its config's fields join the settings
        if 'model_class' in settings and isinstance(value, str) and value != settings['model_class']:
            more, configs = model_settings(value, scripts, where)
            settings.update({k: v for k, v in more.items() if k not in settings})
            scripts.extend(configs)

    argv = list(argv)
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg in ('--help', '-h'):
            print(help_text(settings, scripts))
            sys.exit(0)
        if arg.startswith('--'):
            key, eq, text = arg[2:].partition('=')
            if not eq:  # --key value
                known(settings, key, f"--{key}", script)  # an unknown key is named before its value
                if i == len(argv) or argv[i].startswith('--'):
                    raise UserError(f"--{key} has no value: write --{key}=VALUE (or --{key} VALUE)")
                text = argv[i]
                i += 1
            try:
                value = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                value = text  # a bare word is a string
            value = check(settings, key, value, f"--{key}", script)
            if key == 'model_class':
                model_named(value, f"--{key}")
            settings[key] = value
        elif arg.startswith('-') and len(arg) > 1:
            raise UserError(f"unknown option '{arg}': settings are --key=value (`{script} --help`)")
        else:
            try:
                source = pathlib.Path(arg).read_text()
            except OSError as e:
                raise UserError(f"cannot read config file {arg}: {e.strerror}")
            namespace = dict(settings)  # one namespace, as a module has: its functions see its own names
            try:
                exec(compile(source, arg, 'exec'), namespace)
            except Exception as e:
                raise UserError(f"config file {arg} failed: {type(e).__name__}: {e}")
            model_named(namespace.get('model_class'), f"in {arg}")
            for key, value in namespace.items():  # (the settings it left as they were, too: checked again)
                if not key.startswith('_') and not isinstance(value, (types.ModuleType, types.FunctionType)):
                    settings[key] = check(settings, key, value, f"in {arg}", script)
    return settings


# -----------------------------------------------------------------------------
# --help: the settings block of each script's source, as written

def settings_block(path):
    """The settings of a script (the lines between the first two `# ---` lines of its file) or of a
    dataclass (a model's config, its fields), in order, as (name or None, value text, comment): a
    setting `name = value  # comment` or a field `name: type = value  # comment`, or a comment line of
    its own: a heading, or, indented past the settings and under one, that setting's comment going on."""
    try:
        source = inspect.getsource(path) if isinstance(path, type) else pathlib.Path(path).read_text()
    except OSError:
        return []
    lines = source.splitlines()
    if isinstance(path, type):  # the class's body, a field at indent 4
        first, last, indent = 1, len(lines), 4
    else:  # the block between the marks, a setting at indent 0
        marks = [i for i, line in enumerate(lines) if line.startswith('# ---')][:2]
        if len(marks) < 2:
            return []
        first, last, indent = marks[0] + 1, marks[1], 0
    comments = {tok.start[0]: (tok.start[1], tok.string.lstrip('#').strip())  # (tokenize knows a '#' in a string)
                for tok in tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.COMMENT}
    rows = []
    for i in range(first, last):
        line, (column, comment) = lines[i], comments.get(i + 1, (0, ''))
        if line.strip().startswith('#'):
            if rows and rows[-1][0] and column > indent and lines[i - 1].strip():
                rows[-1] = (*rows[-1][:2], f"{rows[-1][2]} {comment}")
            else:
                rows.append((None, '', comment))
            continue
        try:  # (a setting is one line, at the settings' indent)
            node = ast.parse(line.strip()).body[0] if line[:indent + 1].strip().isalpha() else None
        except SyntaxError:
            node = None
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else getattr(node, 'target', None)
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(target, ast.Name) and node.value is not None:
            rows.append((target.id, ast.get_source_segment(line.strip(), node.value), comment))
    return rows


def source_name(path):
    """How --help heads a script's settings (its path from the root), or a config class's (file: class)."""
    if isinstance(path, type):
        return f"{os.path.basename(inspect.getsourcefile(path))}: {path.__name__}"
    return os.path.relpath(os.path.abspath(path), ROOT)


def help_text(settings, scripts):
    """usage, the script's one-line summary, and every setting with its default and comment."""
    out = [f"usage: {command(scripts[0])} [config.py ...] [--key=value ...]"]
    try:
        summary = ast.get_docstring(ast.parse(pathlib.Path(scripts[0]).read_text())) or ''
        out += ['', summary.strip().split('\n\n')[0]]
    except (OSError, SyntaxError):
        pass
    out += ['', "Settings, with their defaults; config files and --key=value override them, in order:"]
    shown = set()
    for path in scripts:
        rows = [r for r in settings_block(path) if r[0] is None or r[0] in settings]
        if len(scripts) > 1:
            out += ['', f"[{source_name(path)}]"]
        width = max([len(f"--{n}={v}") for n, v, _ in rows if n] + [0]) + 2
        for name, value, comment in rows:
            if name is None:
                out.append(f"# {comment}")
            elif name not in shown:
                shown.add(name)
                out.append(f"  {f'--{name}={value}':<{width}}{comment}".rstrip())
    rest = [k for k in settings if k not in shown]
    if rest:  # settings no source block names (none in this repo's scripts)
        out += [''] + [f"  --{k}={settings[k]!r}" for k in rest]
    return '\n'.join(out)
