"""
Config files and --key=value overrides for train.py, as in nanoGPT, with two fixes: an
unknown key or a value of the wrong type is one clear error that names the key, and an
int is accepted where a float is expected (--learning_rate=1).

    python train.py config/raw_perloop.py config/cpu.py --learning_rate=1e-3

A config file is plain Python assignments, applied in order; it can read the settings
before it (out_dir = out_dir + '-129m'). A value on the command line is a Python literal,
or else taken as a string (--dataset=wikitext-2).
"""

import ast
import types


class ConfigError(Exception):
    pass


def check(settings, key, value, where):
    if key not in settings:
        raise ConfigError(f"unknown setting '{key}' ({where}); the settings are the globals at the top of train.py")
    default = settings[key]
    if default is None:  # a setting that is unset by default takes any value; its script checks it
        return value
    if type(default) is float and type(value) is int:
        return float(value)
    if type(value) is not type(default):
        raise ConfigError(f"setting '{key}' takes a {type(default).__name__} (like {default!r}), "
                          f"got {value!r} ({where})")
    return value


def configure(settings, argv):
    """settings: name -> default. argv: config files and --key=value, in order.
    Returns a new dict; raises ConfigError with a one-line message."""
    settings = dict(settings)
    for arg in argv:
        if arg.startswith('--'):
            key, eq, text = arg[2:].partition('=')
            if not eq:
                raise ConfigError(f"expected --key=value, got '{arg}'")
            try:
                value = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                value = text  # a bare word is a string
            settings[key] = check(settings, key, value, f"--{key}")
        else:
            try:
                with open(arg) as f:
                    source = f.read()
            except OSError as e:
                raise ConfigError(f"cannot read config file {arg}: {e.strerror}")
            assigned = {}
            try:
                exec(compile(source, arg, 'exec'), dict(settings), assigned)
            except Exception as e:
                raise ConfigError(f"config file {arg} failed: {type(e).__name__}: {e}")
            for key, value in assigned.items():
                if not key.startswith('_') and not isinstance(value, (types.ModuleType, types.FunctionType)):
                    settings[key] = check(settings, key, value, f"in {arg}")
    return settings
