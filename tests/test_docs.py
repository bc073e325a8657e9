"""The pages quote what the studies printed, and their commands run as written.

A page (README.md, docs/*.md) embeds a study's printed output between `<!-- printed by CMD: FILE -->` and
`<!-- end -->`: the lines between are a run of FILE's whole lines, byte for byte (FILE is what CMD prints into
under assets/). Every number of a page's prose is a number of its section's printed blocks or of the assets/ text
files the section links, as shown (the source's number rounded to the prose number's last digit), or a setting (the
numbers of the page's commands and the config files they name, or SETTINGS' words: K=4, seed 1, 32-bit); a table
with numbers outside a block fails. A copy of a page with one digit changed must fail, for 80% of its prose numbers
or more: the rule has to see a wrong number.

The command checks take every command line of the pages (code blocks, and inline `python ...` spans of the prose)
and check it with the script's own command line: configurator's settings or the argparse parser that the script's
--help reaches, run in this process (the scripts are imported, torch with them; nothing is trained, read or
downloaded): its script or module exists, its config files exist and load, and each --flag is a setting of the
script, with a value of its type. A study's `bash assets/<study>/run.sh` sets every variable that the script's own
usage line sets. The README's quick-start output is its stored logs' lines, and the README stays a front page
(under 15,000 characters). No network, no data, a few seconds.
"""
import argparse
import contextlib
import importlib.util
import io
import itertools
import json
import os
import re
import runpy
import shlex
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from mutants import score, tables

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / 'assets'
DOCS = ['README.md'] + sorted(f'docs/{p.name}' for p in (ROOT / 'docs').glob('*.md'))

# ---------------------------------------------------------------------------------------------
# numbers as shown

NUM = re.compile(r'(?<![\w.])([+\-−]?)(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(?:e([+\-−]?\d+))?')


class Shown:
    """A number as a page shows it: its value and the unit of its last digit."""

    def __init__(self, m):
        sign, whole, frac, exp = m.group(1), m.group(2), m.group(3) or '', m.group(4)
        self.text = m.group(0)
        value = float(whole.replace(',', '') + ('.' + frac if frac else ''))
        e = int(exp.replace('−', '-')) if exp else 0
        self.value = (-value if sign in '-−' and sign else value) * 10.0 ** e
        self.unit = 10.0 ** (e - len(frac))

    def matches(self, v):
        return abs(self.value - v) <= 0.5 * self.unit * (1 + 1e-9)


def shown(cell):
    return [Shown(m) for m in NUM.finditer(cell)]


# ---------------------------------------------------------------------------------------------
# the quick start's quoted output: assets/quickstart's logs of the README's quick-start commands

QUICKSTART = ASSETS / 'quickstart' / 'logs'


def quickstart_quotes():
    """The README's quick start: its indented output lines (not commands), as (log file, line)."""
    text = (ROOT / 'README.md').read_text()
    section = text.split('\n## Quick start\n', 1)[1].split('\n## ', 1)[0]
    out = []
    for line in section.splitlines():
        if not line.startswith('    ') or line.strip().startswith(('python ', '#')):
            continue
        line = line.strip()
        m = re.fullmatch(r'(\w+):\s+(eval \d+: .*)', line)   # "norm_perloop: eval 300: ..." from that run's log
        out.append((f'{m.group(1)}-cpu.log', m.group(2)) if m else ('eval_depth.log', line))
    return out


def test_quickstart_quote_is_the_stored_log():
    quotes = quickstart_quotes()
    assert len(quotes) >= 4
    for name, line in quotes:
        pattern = re.compile('.*'.join(re.escape(part.strip()) for part in line.split('...')))   # '...': elided
        log = (QUICKSTART / name).read_text().splitlines()
        assert any(pattern.fullmatch(l.strip()) for l in log), f'README quick start: {line!r} is not in {name}'


def test_quickstart_sample_line_is_the_stored_log():
    """The quick start's `tokens=100 ... mean_loops=4.000`: sample.py's timing line (stderr)."""
    section = (ROOT / 'README.md').read_text().split('\n## Quick start\n', 1)[1].split('\n## ', 1)[0]
    quoted = [q for q in re.findall(r'`([^`]*)`', section.replace('\n', ' ')) if q.startswith('tokens=')]
    assert quoted
    log = (QUICKSTART / 'sample.stderr.log').read_text().splitlines()
    for q in quoted:
        pattern = re.compile('.*'.join(re.escape(part.strip()) for part in q.split('...')))
        assert any(pattern.fullmatch(l) for l in log), f'README quick start: `{q}` is not in sample.stderr.log'


# ---------------------------------------------------------------------------------------------

def test_a_changed_digit_fails():
    """The rule catches a one-digit change: 12.84 shown for 12.838 passes, 12.85 does not."""
    assert shown('12.84 ± 0.20')[0].matches(12.838) and not shown('12.85')[0].matches(12.838)
    assert shown('1,172')[0].matches(1171.6) and not shown('1,173')[0].matches(1171.6)
    assert shown('1.3e-17')[0].matches(1.27e-17) and not shown('1.4e-17')[0].matches(1.27e-17)
    assert [s.value for s in shown('−0.32 / +7.72 / 3,911 / 2.6e+03')] == [-0.32, 7.72, 3911, 2600]


# ---------------------------------------------------------------------------------------------
# every command line a reader copies: its script, its config files and every --flag, checked by
# the script's own command line (its configure() or argparse parser, found by running it with
# --help in this process: no subprocess, no data, no work)

COMMAND = re.compile(r'(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:python|torchrun|bash)\s')


def shell_lines(page):
    """(line number, text) of every shell line on a page: a code block's lines (fenced, or indented
    four spaces), each with its `\\` continuations, and each inline `code` span of the prose that
    starts as a command does."""
    lines = (ROOT / page).read_text().splitlines()
    out, prose, fence, i = [], [], False, 0
    while i < len(lines):
        line, start = lines[i], i + 1
        if line.strip().startswith('```'):
            fence = not fence
        elif fence or line.startswith('    '):
            text = line.strip()
            while text.endswith('\\') and i + 1 < len(lines):
                i += 1
                text = text[:-1] + ' ' + lines[i].strip()
            out.append((start, text, True))
        else:
            prose.append((start, line))
        i += 1
    para = []
    for n, line in prose + [(None, '')]:   # inline spans may wrap: a paragraph's lines joined
        if line.strip():
            para.append((n, line))
            continue
        text = ' '.join(l for _, l in para)
        for m in re.finditer(r'`([^`]+)`', text):
            if COMMAND.match(m.group(1)) and '<' not in m.group(1):   # (python -m beyond.<name>: a pattern)
                out.append((para[0][0], m.group(1), False))
        para = []
    return sorted(out)


def shell_words(text):
    """A shell line's simple commands as word lists (comments dropped, split at ; && || |)."""
    lex = shlex.shlex(text, posix=True, punctuation_chars=';&|')
    lex.whitespace_split, lex.commenters = True, '#'
    cmds, cur = [], []
    for w in lex:
        if set(w) <= set(';&|'):
            cmds.append(cur)
            cur = []
        elif not cur and w in ('do', 'then', 'done', 'fi'):
            continue
        else:
            cur.append(w)
    return [c for c in cmds + [cur] if c]


def page_commands(page):
    """(line, words, env, shell variables) of every command a page gives: words without the
    NAME=value prefix (env) and with `[...]` (optional) unbracketed; the variables are what the
    block's `for VAR in ...` loops and assignments set before the command."""
    out, shell_vars = [], {}
    for n, text, block in shell_lines(page):
        for words in shell_words(text):
            if words[0] == 'for' and len(words) > 3 and words[2] == 'in':
                shell_vars[words[1]] = words[3:]
                continue
            env = {}
            while words and re.fullmatch(r'[A-Za-z_]\w*=.*', words[0]):
                k, v = words.pop(0).split('=', 1)
                env[k] = v
            if not words:
                shell_vars.update({k: [v] for k, v in env.items()})
                continue
            if words[0] in ('python', 'torchrun', 'bash'):
                out.append((n, [w.strip('[]') if w.startswith('[') or w.endswith(']') else w for w in words],
                            env, dict(shell_vars)))
    return out


def expansions(word, shell_vars):
    """Every value of a word with the page's shell variables put in ($c, ${c}); a variable the page
    does not set is left as it is."""
    names = [n for n in dict.fromkeys(re.findall(r'\$\{?(\w+)\}?', word)) if n in shell_vars]
    out = []
    for values in itertools.product(*(shell_vars[n] for n in names)):
        w = word
        for name, value in zip(names, values):
            w = re.sub(r'\$\{' + name + r'\}|\$' + name + r'\b', value, w)
        out.append(w)
    return out


class Captured(BaseException):
    """What a script's --help reached first: configurator's settings, or its argparse parser."""

    def __init__(self, settings=None, parser=None, scripts=None):
        self.settings, self.parser, self.scripts = settings, parser, scripts


@lru_cache(maxsize=None)
def command_line(script, module):
    """The command line a script takes, as its own code declares it: ('settings', ({name: default}, the
    sources of the settings: its files and its model's config classes)) for configurator's scripts,
    ('argparse', parser) for the others; its --help run in this process stops at the first of the two."""
    import configurator   # (imported here: the table checks above need no script)
    saved = (sys.argv, configurator.help_text, argparse.ArgumentParser.parse_args, os.getcwd(), list(sys.path))

    def settings_seen(settings, scripts):
        raise Captured(settings=dict(settings), scripts=list(scripts))

    def parser_seen(parser, *args, **kwargs):
        raise Captured(parser=parser)

    configurator.help_text, argparse.ArgumentParser.parse_args = settings_seen, parser_seen
    sys.argv, sys.path[:0] = [str(ROOT / script), '--help'], [str(ROOT)]
    os.chdir(ROOT)
    imported = sys.modules.pop(module, None) if module else None   # (runpy runs a fresh copy as __main__)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            if module:
                runpy.run_module(module, run_name='__main__', alter_sys=True)
            else:
                runpy.run_path(str(ROOT / script), run_name='__main__')
    except Captured as c:
        return ('settings', (c.settings, c.scripts)) if c.settings is not None else ('argparse', c.parser)
    finally:
        sys.argv, configurator.help_text, argparse.ArgumentParser.parse_args, cwd, sys.path[:] = saved
        os.chdir(cwd)
        if imported is not None:
            sys.modules[module] = imported
    raise AssertionError(f'{script} --help reached neither configurator nor argparse')


def unset_var(word):
    """A positional word with a variable the page does not set: a config file, the first file it can
    be (config/$c.py: config/alpha_perloop.py); anything else as it is."""
    if '$' in word and word.endswith('.py'):
        found = sorted(ROOT.glob(re.sub(r'\$\{?\w+\}?', '*', word)))
        return str(found[0].relative_to(ROOT)) if found else word
    return word


def bash_needs(script):
    """The variables a study's run.sh must be given: those its own usage line (in its header) sets."""
    for line in (ROOT / script).read_text().splitlines():
        m = re.match(r'#\s+((?:[A-Z_][A-Z0-9_]*=\S+\s+)*)bash ' + re.escape(script) + r'\s*$', line)
        if m:
            return {w.split('=', 1)[0] for w in m.group(1).split()}
    return set()


def check_command(words, env, shell_vars):
    """The problems of one command line, as strings (none: it runs as written)."""
    if words[0] == 'bash':
        script = words[1]
        if not (ROOT / script).is_file():
            return [f'{script} does not exist']
        source = (ROOT / script).read_text() + (ASSETS / 'study.sh').read_text()
        # a script that runs another study's script (assets/parity/new-seeds') passes the variables on to it
        source += ''.join((ROOT / other).read_text() for other in re.findall(r'^[^#]*\bbash (assets/\S+\.sh)', source, re.M))
        problems = [f'{script} needs {v}=' for v in sorted(bash_needs(script) - set(env))]
        return problems + [f'{script} reads no {v}' for v in env if not re.search(r'\$\{?' + v + r'\b', source)]
    if words[0] == 'torchrun':
        first = next(i for i, w in enumerate(words) if i and not w.startswith('--'))   # torchrun's own flags first
        words = ['python'] + words[first:]
    if words[1] == '-m':
        module, args = words[2], words[3:]
        script = module.replace('.', '/') + '.py'
        if not (ROOT / script).is_file():
            return [] if importlib.util.find_spec(module) else [f'no module {module}']   # (pytest)
    else:
        module, script, args = None, words[1], words[2:]
        if not (ROOT / script).is_file():
            return [f'{script} does not exist']
    problems = []
    for w in args:   # the repo's files a command names
        for part in re.split(r'[,=]', w):
            if re.match(r'(config|assets)/', part) and not re.search(r'[*{}]|\.\.\.', part):
                if not any(list(ROOT.glob(re.sub(r'\$\{?\w+\}?', '*', p))) if '$' in p else (ROOT / p).exists()
                           for p in expansions(part, shell_vars)):
                    problems.append(f'{part} does not exist')
    kind, spec = command_line(script, module)
    variants = [list(v) for v in itertools.product(*(expansions(w, shell_vars) for w in args))]
    for argv in variants[:64]:
        argv = [re.sub(r'\$\{?\w+\}?', '1', w) if w.startswith('--') else unset_var(w) for w in argv]
        err = io.StringIO()
        try:
            if kind == 'settings':
                import configurator
                cwd = os.getcwd()
                os.chdir(ROOT)
                try:
                    settings, scripts = spec
                    configurator.configure(settings, argv, scripts)
                finally:
                    os.chdir(cwd)
            else:
                with contextlib.redirect_stderr(err):
                    spec.parse_args(argv)
        except SystemExit:
            problems.append(err.getvalue().strip().splitlines()[-1])
            break
        except Exception as e:   # configurator's UserError
            problems.append(str(e))
            break
    return problems


def doc_commands():
    return [(f'{page}:{n}', words, env, shell_vars) for page in DOCS
            for n, words, env, shell_vars in page_commands(page)]


def test_commands_are_found():
    """The extraction sees the pages' commands, inline, continued and inside loops alike."""
    found = {(where.split(':')[0], ' '.join(words[:3])) for where, words, _, _ in doc_commands()}
    assert ('README.md', 'python train.py config/norm_perloop.py') in found
    assert ('README.md', 'python -m beyond.bench') in found                 # inline, in the prose
    assert ('docs/depth.md', 'bash assets/depth/run.sh') in found           # with its WT103=
    assert ('docs/early-exit.md', 'python -m beyond.exit_train') in found     # inside a for loop, continued
    assert len(found) >= 40


def test_command_check_catches_what_breaks():
    """A flag the script lacks, a flag without its value, a missing config file, a bash study
    without the variable its usage line sets: each is a problem."""
    assert any('unknown setting' in p for p in check_command(['python', 'train.py', '--no_such=1'], {}, {}))
    assert any('no value' in p for p in check_command(['python', '-m', 'beyond.bench', '--anchor'], {}, {}))
    assert check_command(['python', 'train.py', 'config/no_such.py'], {}, {})
    assert check_command(['python', 'eval_depth.py', 'RUN', '--no_such', '1'], {}, {})
    assert check_command(['python', 'eval_depth.py', 'RUN', '--max_loops', 'many'], {}, {})
    assert check_command(['bash', 'assets/depth/run.sh'], {}, {}) == ['assets/depth/run.sh needs WT103=']
    assert not check_command(['python', 'train.py', 'config/$c.py', '--seed=$s'], {}, {'c': ['raw_perloop'], 's': ['1']})


@pytest.mark.parametrize('page', DOCS)
def test_every_command_runs_as_written(page):
    """Every command line of the page names a script or module that exists, config files that exist,
    and only settings (with their values) that the script takes."""
    broken = [f'{where}: {" ".join(words)}\n    {p}' for where, words, env, shell_vars in doc_commands()
              if where.startswith(page + ':') for p in check_command(words, env, shell_vars)]
    assert not broken, 'commands that do not run as written:\n' + '\n'.join(broken)


# ---------------------------------------------------------------------------------------------
# printed blocks and prose numbers. A page embeds what a study printed between
#     <!-- printed by <the command that prints it>: <assets/ file it printed into> -->   and   <!-- end -->
# and the lines between are whole lines of that file, in a row, byte for byte. A page's prose (outside code, tables,
# printed blocks and figures) is cut into sections, heading to heading; every number of a section's prose is a number
# of its sources, as shown (the source's number rounded to the prose number's last shown digit), or a setting:
# its sources are the files its printed blocks name, the assets/ text files it links, and the page's own commands.

NUMBER = r'([+\-−]?[\d,]*\d(?:\.\d+)?(?:e[+\-−]?\d+)?)'   # what a `#` of a fragment stands for

# the words that make a number a setting wherever it stands: `#` the number
SETTINGS = {
    r'\bK ?[=≤<>] ?#(?:(?:\.\.|–|-| to )\d+\b(?!\.\d))?': 'a depth K (where a K is a result, a fragment holds it)',
    r'\bloops? #(?:(?:\.\.|–|-| to | and )#)?': 'a loop',
    r'\b[Ss]eeds? #(?:, #)*(?:,? and #|[–-]#)?': 'a seed',
    r'\b# seeds\b': 'how many seeds',
    r'Lemma #': "the paper's lemma",
    r'#-bit|\b# bits\b': 'a string length',
    r'et al\.,? #|arXiv #': 'a citation',
    r'\b# iterations\b|\biterations? #': 'a training length, or a point of it',
    r'\b#-epoch\b|\b# epochs\b': 'a training length',
    r'#-core\b|\b# cores\b': 'the machine',
    r'WikiText-#|GPT-#': 'a dataset, a tokenizer',
    r'\b(?:44|129)M\b': "the paper's model shapes, by name",
    r'loop-#': 'a loop',
    r'\b1 − cos': 'the measure 1 − cos',
    r'k\+#': 'an index',
    r'AVX-#': 'an instruction set',
    r'[\w/-]*-#\w*\.(?:log|md|json|png)\b': 'a file name',
    r'[Ww]ithin \+#%(?:(?: or | / )\+#%)?': 'a calibration target (--calibrate)',
    r"[Tt]he paper(?:'s| has) ~?#(?:–#)?": "the paper's own number, cited (not a result of this repository)",
    r'#(?: and #)? at init\b': "an initial value of the code (not a result)",
    r'& \w+,? #|torch #(?: or #)?|CI: #': 'a citation, a version',
    r'≥#% of #-bit strings by K=#': "a bar of the parity task (beyond.tasks.BARS)",
}

BLOCK = re.compile(r'<!-- printed by (.+): (assets/\S+) -->')
END = '<!-- end -->'
TEXT_FILES = ('.md', '.txt', '.log', '.jsonl', '.seconds')


def page_lines(page, text=None):
    """(line, kind) of a page: kind 'code' (fenced, or indented four spaces), 'block' (a printed block, its markers
    included), 'table', 'figure', 'comment' or 'prose'."""
    out, fence, block = [], False, False
    for line in (text if text is not None else (ROOT / page).read_text()).splitlines():
        s = line.strip()
        if block or BLOCK.fullmatch(s):
            out.append((line, 'block'))
            block = s != END
        elif s.startswith('```') or fence:
            out.append((line, 'code'))
            fence = fence != s.startswith('```')
        elif line.startswith('    '):
            out.append((line, 'code'))
        elif s.startswith('|'):
            out.append((line, 'table'))
        elif s.startswith('!['):
            out.append((line, 'figure'))
        elif s.startswith('<!--'):
            out.append((line, 'comment'))
        else:
            out.append((line, 'prose'))
    return out


def printed_blocks(page, text=None):
    """(line number, command, file, lines) of every printed block of a page."""
    lines, out, i = (text if text is not None else (ROOT / page).read_text()).splitlines(), [], 0
    while i < len(lines):
        m = BLOCK.fullmatch(lines[i].strip())
        if m:
            j = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == END), None)
            assert j is not None, f'{page}:{i + 1}: a printed block without {END}'
            body = lines[i + 1:j]
            while body and not body[0].strip():
                body = body[1:]
            while body and not body[-1].strip():
                body = body[:-1]
            if len(body) > 1 and body[0].startswith('```') and body[-1] == '```':   # shown as preformatted text
                body = body[1:-1]
            out.append((i + 1, m.group(1), m.group(2), body))
            i = j
        i += 1
    return out


def block_problem(page, n, command, rel, body):
    """What is wrong with a printed block, or None: its file exists, its command names a script of the repo, and its
    lines are a run of the file's whole lines."""
    path = ROOT / rel
    if not path.is_file():
        return f'{page}:{n}: {rel} does not exist'
    if not body:
        return f'{page}:{n}: an empty block'
    retired = re.search(r'git show ([0-9a-f]{7,40}:\S+?)\)?$', command)   # a script retired to git, by its commit
    shallow = subprocess.run(['git', 'rev-parse', '--is-shallow-repository'], cwd=ROOT, capture_output=True, text=True)
    if retired and shallow.stdout.strip() == 'false' and subprocess.run(   # (a shallow clone has not the history)
            ['git', 'cat-file', '-e', retired.group(1)], cwd=ROOT, capture_output=True).returncode:
        return f'{page}:{n}: git has no {retired.group(1)}'
    script = re.search(r'-m (\S+)|(\S+\.(?:py|sh))\b', command)
    if retired:
        pass
    elif not script or not ((ROOT / str(script.group(2))).is_file() or (ROOT / f'{script.group(1)}'.replace('.', '/')).with_suffix('.py').is_file()):
        return f'{page}:{n}: "{command}" names no script of the repository'
    lines = path.read_text().splitlines()
    if not any(lines[i:i + len(body)] == body for i in range(len(lines) - len(body) + 1)):
        return f'{page}:{n}: these {len(body)} lines are not a run of lines of {rel}'
    return None


def sections(page, text=None):
    """[(heading, prose, the numbers of its sources)] of a page: its prose cut at its headings, each section's lines
    joined, with the numbers (absolute values, sorted) of its printed blocks, as the page shows them, and of the
    assets/ text files its prose links. (Each section is read once: a page's copies with one number changed share
    all sections but one.)"""
    chunks = [[]]
    for line, kind in page_lines(page, text):
        if kind == 'prose' and line.startswith('#') and chunks[-1]:
            chunks.append([])
        chunks[-1].append((line, kind))
    return [s for s in (section(page, tuple(c)) for c in chunks) if s[1]]


@lru_cache(maxsize=None)
def section(page, lines):
    """sections' (heading, prose, values) of one section's (line, kind) lines, its heading first if it has one."""
    head, prose, values = '', [], []
    base = (ROOT / page).parent
    for line, kind in lines:
        if kind == 'block' and not (BLOCK.fullmatch(line.strip()) or line.strip() == END):
            values += line_values(line)
        if kind != 'prose':
            continue
        if line.startswith('#'):
            head, prose = line.strip('# '), [line.lstrip('#')]
            continue
        prose.append(line)
        for target in re.findall(r'\]\(([^)#\s]+)', line):
            path = (base / target).resolve()
            if path.is_file() and path.suffix in TEXT_FILES and ASSETS in path.parents:
                values += file_values(str(path.relative_to(ROOT)))
    return head, ' '.join(' '.join(prose).split()), tuple(sorted(values))


@lru_cache(maxsize=None)
def line_values(line):
    """The numbers of a line as shown there (their absolute values): a page's copies share all lines but one."""
    return [abs(s.value) for s in shown(line)]


@lru_cache(maxsize=None)
def file_values(rel):
    """The numbers of a text file as shown there (their absolute values)."""
    return [abs(s.value) for s in shown((ROOT / rel).read_text())]


@lru_cache(maxsize=None)
def command_values(page):
    """The numbers of a page's commands (its code) and of the config files they name: the settings it runs with."""
    code = '\n'.join(line for line, kind in page_lines(page) if kind == 'code')
    configs = {c for c in re.findall(r'config/\w+\.py', code) if (ROOT / c).is_file()}
    return sorted(abs(s.value) for text in [code] + [(ROOT / c).read_text() for c in configs] for s in shown(text))


def in_values(s, values):
    import bisect
    lo = bisect.bisect_left(values, abs(s.value) - 0.5 * s.unit * (1 + 1e-9))
    return lo < len(values) and values[lo] <= abs(s.value) + 0.5 * s.unit * (1 + 1e-9)


def unsourced_numbers(page, text=None):
    """Every number of a page's prose that is neither a number of its section's sources nor a setting, in context."""
    return [n for head, prose_, values in sections(page, text) for n in section_unsourced(page, head, prose_, values)]


@lru_cache(maxsize=None)
def section_unsourced(page, head, prose_, values):
    """unsourced_numbers of one section (a page's copy with one number changed differs in one section: the others are
    read once)."""
    out = []
    skip = [m.span() for m in re.finditer(r'`[^`]*`|\]\([^)]*\)', prose_)]
    for pattern in SETTINGS:
        skip += [m.span() for m in re.finditer(pattern.replace('#', NUMBER), prose_)]
    for m in NUM.finditer(prose_):
        a, b = m.span()
        if not any(s <= a and b <= e for s, e in skip) and not (
                in_values(Shown(m), command_values(page)) or in_values(Shown(m), values)):
            out.append(f'{page}, section "{head}": {prose_[max(0, a - 50):a]}[{prose_[a:b]}]{prose_[b:b + 30]}')
    return out


@pytest.mark.parametrize('page', DOCS)
def test_printed_blocks_are_what_the_studies_printed(page):
    problems = [p for block in printed_blocks(page) if (p := block_problem(page, *block))]
    assert not problems, '\n'.join(problems)


@pytest.mark.parametrize('page', DOCS)
def test_every_table_with_numbers_is_printed(page):
    """A converted page shows measured numbers in a table only inside a printed block."""
    loose = [line for line, kind in page_lines(page) if kind == 'table' and re.search(r'\d', line)
             and not re.fullmatch(r'\|(\s*:?-{3,}:?\s*\|)+', line.strip())]
    assert not loose, f'{page}: table rows with numbers outside a printed block:\n' + '\n'.join(loose)


@pytest.mark.parametrize('page', DOCS)
def test_every_prose_number_is_in_its_sources(page):
    missing = unsourced_numbers(page)
    assert not missing, ('numbers of the prose that no source of their section prints (embed or link the file that '
                         'prints them, or make its study print them):\n' + '\n'.join(missing))


def changed_copies(page):
    """(number, copy of the page): each number of two digits or more of its prose (outside `code` and settings), its
    last digit moved by 5."""
    lines = (ROOT / page).read_text().splitlines()
    for i, (line, kind) in enumerate(page_lines(page)):
        if kind != 'prose':
            continue
        code = [m.span() for m in re.finditer(r'`[^`]*`|\]\([^)]*\)', line)] + [
            m.span() for pattern in SETTINGS for m in re.finditer(pattern.replace('#', NUMBER), line)]
        for m in NUM.finditer(line):
            j = m.end() - 1 if 'e' not in m.group(0) else m.start() + m.group(0).index('e') - 1
            if (len(re.sub(r'\D|^0*|e.*', '', m.group(0))) >= 2 and not any(a <= m.start() < b for a, b in code)
                    and not in_values(Shown(m), command_values(page))):   # (a setting: a changed one is another)
                changed = line[:j] + str((int(line[j]) + 5) % 10) + line[j + 1:]
                yield m.group(0), '\n'.join(lines[:i] + [changed] + lines[i + 1:])


@pytest.mark.parametrize('page', DOCS)
def test_a_changed_number_is_found(page):
    """A copy of the page with one digit changed fails: a printed block's, or (nearly always) a prose number's; a
    changed prose number passes only where the changed value is also a number of its section's sources."""
    text = (ROOT / page).read_text()
    n, command, rel, body = printed_blocks(page)[0]
    row = next(l for l in body if re.search(r'\d\.\d', l))
    i = re.search(r'\d\.\d', row).end() - 1
    assert block_problem(page, *printed_blocks(page, text.replace(row, row[:i] + str((int(row[i]) + 5) % 10) + row[i + 1:], 1))[0])
    copies = list(changed_copies(page))
    caught = [number for number, copy in copies if len(unsourced_numbers(page, copy)) > len(unsourced_numbers(page))]
    assert copies and len(caught) >= 0.8 * len(copies), f'{page}: only {len(caught)} of {len(copies)} changed numbers found'


def test_every_study_a_page_names_exists():
    missing = [f'{page}: {m}' for page in DOCS for m in re.findall(r'assets/([\w.-]+)/', (ROOT / page).read_text())
               if not (ASSETS / m).is_dir()]
    assert not missing, '\n'.join(missing)


def test_readme_is_a_front_page():
    assert len((ROOT / 'README.md').read_text()) < 15_000


def suite_draws(text):
    """{seed: (its section of docs/suite/README.md, its record)} for each draw of the mutation tool whose record is
    stored (docs/suite/seed-N.json; a rerun's seed-N-after.json is told in prose, not tabled)."""
    draws = {}
    for path in sorted((ROOT / 'docs' / 'suite').glob('seed-*.json')):
        if path.stem.endswith('-after'):
            continue
        record = json.loads(path.read_text())
        m = re.search(rf"^## Generated breaks, seed {record['seed']}\b.*$", text, re.M)
        assert m, f"docs/suite/README.md has no section for {path.name}"
        end = text.find('\n## ', m.end())
        draws[record['seed']] = (text[m.end():end if end >= 0 else len(text)], record)
    return draws


def suite_problems(text):
    """Where a draw's section does not embed its record: its two tables as tests/mutants.py renders them, and its
    headline '**K of N killed (P%)**'."""
    problems = []
    for seed, (body, record) in suite_draws(text).items():
        problems += [f'seed {seed}: its {name} table is not the record\'s' for name, table
                     in zip(('file', 'operator'), tables(record).split('\n\n')) if table not in body]
        t = record['total']
        if f"**{t['killed']} of {sum(t.values())} killed ({score(t)})" not in body:
            problems.append(f'seed {seed}: its headline is not the record\'s total')
    return problems


def test_the_suite_pages_draws_are_their_records_tables_and_totals():
    """docs/suite/README.md embeds each draw's record as the tool prints it (tests/mutants.py renders the tables from
    the record it writes); a count changed in a table, or in a headline, is found."""
    text = (ROOT / 'docs' / 'suite' / 'README.md').read_text()
    assert len(suite_draws(text)) >= 8 and suite_problems(text) == []
    body, record = suite_draws(text)[1919]
    row = next(line for line in body.splitlines() if line.startswith('| eval_depth.py |'))
    at = text.index(body)
    for old, new, found in ((row, row.replace('| 52 |', '| 51 |', 1), "seed 1919: its file table is not the record's"),
                            ('**304 of 320', '**305 of 320', "seed 1919: its headline is not the record's total")):
        assert suite_problems(text[:at] + body.replace(old, new, 1) + text[at + len(body):]) == [found]
