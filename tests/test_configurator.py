"""
configurator.py, the settings of the configurator scripts (train.py, sample.py, python -m beyond.sample ...):
a config file's own names, every setting's type, --key=value and --key value, the errors in one line (an
unknown setting names the script's --help) and the --help the settings block makes.

    python -m pytest -q tests/test_configurator.py
"""

import math
import os

import pytest

import configurator
import train
from configurator import UserError, configure
from conftest import HERE, settings


# -----------------------------------------------------------------------------
# the command line and config files: each setting's type, --key=value and --key value, and every error one line
# naming what is wrong (through train.py's settings, and configure itself)

@pytest.mark.parametrize('argv,needles', [
    (['--learning_rat=1e-3'], ["'learning_rat'", "did you mean 'learning_rate'", 'python train.py --help']),
    (['--batch_size=big'], ["'batch_size'", 'an int']),
    (['--max_iters=1.5'], ["'max_iters'"]),
    (['--readout=rms'], ["'readout'", 'raw']),
    (['config/nope.py'], ['cannot read config file config/nope.py: No such file or directory']),
    (['--out_dir'], ['--out_dir=VALUE']),
    (['--out_dir', '--n_loops=2'], ['--out_dir=VALUE']),
    (['-o'], ["'-o'", '--help']),
])
def test_config_errors_name_what_is_wrong(argv, needles):
    with pytest.raises(UserError) as e:
        settings(*argv)
    for needle in needles:
        assert needle in str(e.value), str(e.value)


def test_a_bad_config_file_is_named(tmp_path):
    bad = tmp_path / 'bad.py'
    bad.write_text("n_layers = 4\n")
    with pytest.raises(UserError, match="'n_layers'.*bad.py"):
        settings(str(bad))


def test_key_space_value_and_int_for_float_work():
    c = settings('--out_dir', 'somewhere', '--learning_rate=1', '--n_loops', '3', '--dataset', 'wikitext-2')
    assert c['out_dir'] == 'somewhere' and c['n_loops'] == 3 and c['dataset'] == 'wikitext-2'
    assert c['learning_rate'] == 1.0 and type(c['learning_rate']) is float


def test_configurator_types():
    s = dict(lr=3e-4, n=4, flag=False, name='a')
    assert configure(s, ['--lr=1']) == dict(s, lr=1.0)
    assert type(configure(s, ['--lr=1'])['lr']) is float
    assert configure(s, ['--name=wikitext-2', '--flag=True'])['name'] == 'wikitext-2'
    assert configure(s, ['--n', '5', '--flag', 'True']) == dict(s, n=5, flag=True)
    for bad in (['--n=True'], ['--n=2.0'], ['--flag=1'], ['--lr=fast'], ['--nope=1'], ['--n'], ['--n', '--lr=1']):
        with pytest.raises(UserError):
            configure(s, bad)


def test_an_unknown_setting_names_the_script_it_was_given_to():
    with pytest.raises(UserError, match='`python sample.py --help`'):
        configure(dict(n=1), ['--m=1'], [os.path.join(HERE, 'sample.py')])


# -----------------------------------------------------------------------------
# every setting's type, from train.py's --help: a value of another type refused in one line

def help_settings(capsys):
    """name -> default of every setting train.py's --help lists."""
    with pytest.raises(SystemExit):
        train.main(['--help'])
    import ast
    out = {}
    for line in capsys.readouterr().out.splitlines():
        if line.startswith('  --'):
            name, _, value = line.split()[0][2:].partition('=')
            out[name] = ast.literal_eval(value)
    return out


WRONG = {float: [True, "'fast'"], int: [True, 2.5, "'many'"], bool: [1, 0.0, "'yes'"], str: [True, 3]}


def test_every_setting_refuses_a_value_of_another_type_in_one_line(capsys, tmp_path):
    defaults = help_settings(capsys)
    assert {'learning_rate', 'n_loops', 'random_depth', 'readout'} <= set(defaults)
    for name, default in defaults.items():
        for bad in WRONG[type(default)]:
            with pytest.raises(UserError) as e:
                train.main([f'--{name}={bad}'])
            assert f"'{name}'" in str(e.value) and '\n' not in str(e.value), (name, bad)
    with pytest.raises(UserError, match="'learning_rate' takes a float"):
        train.main(['--learning_rate=True'])
    config = tmp_path / 'bad.py'
    config.write_text('learning_rate = True\n')
    with pytest.raises(UserError, match="'learning_rate' takes a float.*bad.py"):
        train.main([str(config)])
    assert configure(dict(lr=3e-4), ['--lr=2'])['lr'] == 2.0  # an int is still a float's


# -----------------------------------------------------------------------------
# a config file's own names (configurator.py's docstring): _private names, functions and modules are the file's,
# seen by the rest of the file (its functions included) and dropped after it; every other name is a setting

def test_a_config_files_helpers_are_its_own_and_seen_by_its_functions(tmp_path):
    cfg = tmp_path / 'wide.py'
    cfg.write_text("import math\n"
                   "_width = 64\n"
                   "def _heads(width):\n"
                   "    return width // _per_head\n"          # a helper reading another of the file's names
                   "_per_head = 32\n"
                   "def lr_for(width):\n"                     # a public function: the file's too
                   "    return 1e-3 * math.sqrt(512 / width)\n"
                   "n_embd = _width\n"
                   "n_head = _heads(_width)\n"
                   "n_loops = sum(_per_head // 32 for _ in range(3))\n"  # a generator reads the file's names
                   "learning_rate = lr_for(n_embd)\n")
    c = train.setup([str(cfg)])
    assert (c['n_embd'], c['n_head'], c['n_loops']) == (64, 2, 3)
    assert c['learning_rate'] == pytest.approx(1e-3 * math.sqrt(8))
    assert not {'math', '_width', '_heads', '_per_head', 'lr_for'} & set(c)
    # a public name that is not a setting is refused, named with its file
    (tmp_path / 'typo.py').write_text("_ok = 1\nwidth = 64\n")
    with pytest.raises(UserError, match=r"unknown setting 'width' \(in .*typo.py\)"):
        train.setup([str(tmp_path / 'typo.py')])
    # the next file sees the settings the first made, not its helpers
    (tmp_path / 'next.py').write_text("n_layer = n_loops\nn_head = _width\n")
    with pytest.raises(UserError, match="NameError: name '_width' is not defined"):
        train.setup([str(cfg), str(tmp_path / 'next.py')])
    (tmp_path / 'next.py').write_text("n_layer = n_loops\n")
    assert train.setup([str(cfg), str(tmp_path / 'next.py')])['n_layer'] == 3


# -----------------------------------------------------------------------------
# --help, from the script's docstring and its settings block; and an unknown setting's pointer to it

def test_configurators_help_lists_a_setting_no_source_block_names_after_a_blank_line(tmp_path):
    script = tmp_path / 'toy.py'
    script.write_text('"""\nA toy script.\n\n    python toy.py\n"""\n\n# ---\nsteps = 3  # iterations\n# ---\n')
    assert configurator.help_text({'steps': 3, 'extra': 'x'}, [str(script)]).splitlines() == [
        'usage: python toy.py [config.py ...] [--key=value ...]', '', 'A toy script.', '',
        'Settings, with their defaults; config files and --key=value override them, in order:',
        '  --steps=3  iterations', '', "  --extra='x'"]


def test_help_and_h_each_print_the_help_and_exit_0_wherever_they_stand(tmp_path, capsys):
    # as argparse's: -h is --help, after a config file or a setting too; it exits 0 before anything is applied
    script = tmp_path / 'toy.py'
    script.write_text('"""\nA toy script.\n"""\n\n# ---\nsteps = 3  # iterations\n# ---\n')
    want = configurator.help_text({'steps': 3}, [str(script)]) + '\n'
    for argv in (['--help'], ['-h'], ['--steps=4', '-h'], ['-h', '--no_such=1']):
        with pytest.raises(SystemExit) as e:
            configure({'steps': 3}, argv, [str(script)])
        assert e.value.code == 0 and capsys.readouterr().out == want, argv


def test_configurators_help_heads_each_sources_settings_where_there_are_two(tmp_path):
    """help_text: one source, no header (above); two (a script and a model's config, say), each one's settings under
    its path from the root, a setting both name shown once, under the first."""
    script, more = tmp_path / 'toy.py', tmp_path / 'more.py'
    script.write_text('"""\nA toy script.\n"""\n\n# ---\nsteps = 3  # iterations\n# ---\n')
    more.write_text('# ---\nwidth = 8  # the width\nsteps = 5  # named again\n# ---\n')
    name = lambda path: os.path.relpath(path, configurator.ROOT)  # noqa: E731
    assert configurator.help_text({'steps': 3, 'width': 8}, [str(script), str(more)]).splitlines() == [
        'usage: python toy.py [config.py ...] [--key=value ...]', '', 'A toy script.', '',
        'Settings, with their defaults; config files and --key=value override them, in order:',
        '', f'[{name(script)}]', '  --steps=3  iterations', '', f'[{name(more)}]', '  --width=8  the width']


def test_configurators_help_keeps_the_blocks_headings_in_place_and_lists_only_the_scripts_settings(tmp_path):
    # a comment line of its own in the block is a heading, shown where it stands; a setting of the block that is not
    # one of the script's settings (here 'old') is not listed
    script = tmp_path / 'toy.py'
    script.write_text('"""\nA toy script.\n"""\n\n# ---\n# I/O\nsteps = 3  # iterations\nold = 1  # gone\n'
                      '# the model\nwidth = 8  # the width\n# ---\n')
    assert configurator.help_text({'steps': 3, 'width': 8}, [str(script)]).splitlines() == [
        'usage: python toy.py [config.py ...] [--key=value ...]', '', 'A toy script.', '',
        'Settings, with their defaults; config files and --key=value override them, in order:',
        '# I/O', '  --steps=3  iterations', '# the model', '  --width=8  the width']


def test_configurators_help_passes_over_a_block_line_that_sets_no_one_setting(tmp_path):
    # in a settings block only `name = value` and `name: type = value` are settings; a declaration without
    # a value, a tuple or a chain of assignments, an attribute's assignment are passed over, not a crash
    script = tmp_path / 'toy.py'
    script.write_text('"""\nA toy script.\n"""\n\n# ---\nsteps = 3  # iterations\nwidth: int  # declared only\n'
                      'lo, hi = 0, 1  # a pair\na = b = 2  # a chain\nsteps.real = 4  # an attribute\n'
                      'rate: float = 0.5  # the rate\n# ---\n')
    assert configurator.help_text({'steps': 3, 'rate': 0.5}, [str(script)]).splitlines() == [
        'usage: python toy.py [config.py ...] [--key=value ...]', '', 'A toy script.', '',
        'Settings, with their defaults; config files and --key=value override them, in order:',
        '  --steps=3   iterations', '  --rate=0.5  the rate']


def test_configurators_help_continues_a_comment_on_the_row_of_the_setting_above_it(tmp_path):
    # a comment line indented past the settings, under one, goes on with that setting's comment: the third
    # setting's here, not another's
    script = tmp_path / 'toy.py'
    script.write_text('"""\nA toy script.\n"""\n\n# ---\na = 1  # first\nb = 2  # second\nc = 3  # third,\n'
                      '       # going on\n# ---\n')
    assert configurator.help_text({'a': 1, 'b': 2, 'c': 3}, [str(script)]).splitlines() == [
        'usage: python toy.py [config.py ...] [--key=value ...]', '', 'A toy script.', '',
        'Settings, with their defaults; config files and --key=value override them, in order:',
        '  --a=1  first', '  --b=2  second', '  --c=3  third, going on']


def test_an_unknown_setting_names_the_scripts_help_from_a_config_file_as_from_the_command_line(tmp_path):
    script = tmp_path / 'toy.py'
    script.write_text('"""\nA toy script.\n"""\n\n# ---\nsteps = 3  # iterations\n# ---\n')
    (tmp_path / 'typo.py').write_text('stepz = 4\n')
    for argv, where in (([str(tmp_path / 'typo.py')], f"in {tmp_path / 'typo.py'}"), (['--stepz=4'], '--stepz'),
                        (['--stepz', '4'], '--stepz')):
        with pytest.raises(configurator.UserError) as e:
            configurator.configure({'steps': 3}, argv, [str(script)])
        assert f"unknown setting 'stepz' ({where}); did you mean 'steps'?" in str(e.value), argv  # (and where it was)
        assert '`python toy.py --help` lists the settings' in str(e.value), argv


def test_an_indented_comment_goes_on_its_setting_only_when_no_blank_line_parts_them(tmp_path):
    """settings_block: a comment line indented past the settings, under one, is that setting's comment going on;
    after a blank line it is a comment of its own."""
    path = tmp_path / 'script.py'
    path.write_text('# ---\n'
                    'x = 1                         # the x\n'
                    '                              # goes on\n'
                    '\n'
                    '                              # a note after a blank line\n'
                    'y = 2                         # the y\n'
                    '# ---\n')
    assert configurator.settings_block(str(path)) == [('x', '1', 'the x goes on'), (None, '', 'a note after a blank line'),
                                                      ('y', '2', 'the y')]


@pytest.mark.parametrize('rule,inside,outside', [('>= 1', [1, 2.5], [0.999, 0]), ('> 0', [1e-9, 3], [0, -1]),
                                                 ('[0, 1)', [0, 0.5, 0.999], [1, 1.5, -1e-9]),
                                                 (('a', 'b'), ['a', 'b'], ['c', 'A'])])
def test_a_range_rule_takes_its_bounds_as_written_and_refuses_the_first_value_past_them(rule, inside, outside):
    """check_ranges: '>= x', '> x', '[a, b)' (a <= value < b) or a tuple of the values a setting may take; one line
    naming the setting and the rule."""
    for value in inside:
        configurator.check_ranges(dict(s=value), dict(s=rule))
    for value in outside:
        with pytest.raises(UserError) as e:
            configurator.check_ranges(dict(s=value), dict(s=rule))
        assert "setting 's' must be" in str(e.value) and '\n' not in str(e.value)


def test_a_script_is_named_by_its_place_in_the_repository_whatever_the_working_directory(tmp_path, monkeypatch):
    """configurator.command: `python train.py` at the top, `python -m beyond.name` below it, by the script's place in
    the repository (not the folder it is run from); a script outside it by its name."""
    monkeypatch.chdir(tmp_path)
    assert configurator.command(os.path.join(HERE, 'train.py')) == 'python train.py'
    assert configurator.command(os.path.join(HERE, 'beyond', 'tasks.py')) == 'python -m beyond.tasks'
    assert configurator.command(str(tmp_path / 'mine.py')) == 'python mine.py'
    # --help heads a script's settings by its path from the root, also from another folder (and a class by its file)
    assert configurator.source_name(os.path.join(HERE, 'beyond', 'tasks.py')) == os.path.join('beyond', 'tasks.py')
    assert configurator.source_name(configurator.UserError) == 'configurator.py: UserError'


def test_naming_the_model_already_named_brings_no_fields(tmp_path):
    """configure: a config naming its model (model_class) adds that model's config fields to the settings, when it
    names another model than the one the settings have; naming the same one (or a config file that leaves
    model_class as it is) changes nothing: the settings stay the script's own, with no model field added."""
    own = {'model_class': 'model.LoopedGPT', 'steps': 3}
    (tmp_path / 'same.py').write_text("model_class = 'model.LoopedGPT'\nsteps = 4\n")
    (tmp_path / 'other.py').write_text("steps = 5\n")
    assert configure(own, ['--model_class=model.LoopedGPT']) == own
    assert configure(own, [str(tmp_path / 'same.py')]) == dict(own, steps=4)
    assert configure(own, [str(tmp_path / 'other.py')]) == dict(own, steps=5)


def test_help_lists_the_settings_of_a_script_whose_source_cannot_be_read(tmp_path):
    """settings_block: a source that cannot be read has no settings block ([]), so --help lists each setting with its
    default, after a blank line, instead of failing."""
    gone = str(tmp_path / 'gone.py')
    assert configurator.settings_block(gone) == []
    assert configurator.help_text({'steps': 3}, [gone]).splitlines() == [
        'usage: python gone.py [config.py ...] [--key=value ...]', '',
        'Settings, with their defaults; config files and --key=value override them, in order:', '', '  --steps=3']
