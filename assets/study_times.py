"""How long each study took, from its stored records alone (issue 66): a markdown table, one row a study.

    python assets/study_times.py                              # the table, on stdout
    python assets/study_times.py --out assets/study_times.md  # the copy assets/README.md embeds

The rule, for each study: a folder with a run.sh or a README.md (a folder of studies, one whose subfolders have a
run.sh, as assets/parity/, is its subfolders: a row each, named parity/<step>); the first of these that finds a record:
1. its logs' `[N s wall]` lines (logs/*.log: the quick start's commands, each timed whole, one after the other):
   their sum, the time itself.
2. the runs its run.sh trains: each run's training time from its logs/<run>.jsonl (<design>/logs/<run>.jsonl in a design
   study; every train record's ms_per_iter, the mean over the iterations since the record before, times those
   iterations), summed over the runs and divided by the runs run.sh trains at once; plus logs/*.seconds, the wall
   seconds of runs timed on their own (a file of several lines holds runs timed side by side: the longest counts). A
   lower bound (≥): evaluations, start-up and the data's preparation are in no record.
3. otherwise: not recorded.
From run.sh, not typed here: which runs it trains (the names it gives study.sh's train and train_grid, their variables
as wildcards, task_study's TASK-s* and design_study's TASK-DESIGN-s*) and how many at once (its own LANES where it sets
one; study.sh's lane width where it trains in lanes; else one). A run.sh that runs another study's (bash
assets/<study>/run.sh) trains what that one trains too; one that says its study ran at another commit (AT=<commit>, and
WAS=<its folder there> where it has moved since) is read as it was there, from git. Times are in minutes to one decimal
(and hours past two), a lower bound rounded down (so that ≥ stays true as shown).
"""
import argparse
import glob
import json
import math
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))  # assets/
# what a study's README says about its time, in words: read there, not parsed here
README_SAYS = {
    'quickstart': "a busy machine; its sample's log is a later run on another machine (its README)",
    'heldout': "its README gives the wall time of the training and of the evaluation",
    'gpu': "its README estimates the job on one H100",
}
WALL = re.compile(r'^\[([\d.]+) s wall\]$', re.M)  # the last lines of the quick start's logs


class UserError(Exception):
    """Bad input: printed as one line, no traceback."""


def read(folder, rel, at=None):
    """The text of folder/rel; at a commit, assets/rel as git holds it there."""
    if at is None:
        with open(os.path.join(folder, rel)) as f:
            return f.read()
    git = subprocess.run(['git', 'show', f'{at}:assets/{rel}'], cwd=HERE, capture_output=True, text=True)
    if git.returncode:
        raise UserError(f'assets/{rel} at commit {at}: not in git here ({git.stderr.strip()})')
    return git.stdout


def run_sh(folder, study, at=None):
    """(study's run.sh without its comments, with the code of the run.sh files it runs; the commit it was read at)."""
    code = re.sub(r'(?m)(^|[ \t])#.*$', r'\1', read(folder, f'{study}/run.sh', at))
    commit = re.search(r'(?m)^AT=(\w+)\b', code)
    if commit and at is None:  # the study ran at another commit: its run.sh as it was there, in its folder there
        was = re.search(r'\bWAS=assets/([\w/-]+)', code)
        return run_sh(folder, was[1] if was else study, commit[1])
    for other in sorted(set(re.findall(r'bash assets/([\w/-]+)/run\.sh', code)) - {study}):
        code += run_sh(folder, other, at)[0]
    return code, at


def trained(code):
    """The logs of the runs a run.sh trains, as glob patterns from the study's folder: `train_grid '{c}-cpu-s{s}'` gives
    logs/*-cpu-s*; study.sh's task_study logs/TASK-s*, its design_study each design's */logs/TASK-*-s*."""
    names = re.findall(r'''\btrain(?:_grid)? +['"]([^'"]+)['"]''', code)  # (timed_train keeps no log.jsonl)
    names += [f'{task}-s$s' for task in re.findall(r'\btask_study \S+ (\w+) ', code)]  # (study.sh's: TASK-sSEED)
    names = ['logs/' + re.sub(r'\{\w\}|\$\{[^}]*\}|\$\w+', '*', name) for name in names]
    names += [f'*/logs/{task}-*-s*' for task in re.findall(r'\bdesign_study \S+ (\w+) ', code)]  # (OUT/DESIGN/logs)
    return sorted(set(names))


def at_once(code, folder, at):
    """How many runs a run.sh trains at once."""
    own = re.search(r'\bLANES=\$\{LANES:-(\d+)\}', code)  # lanes of its own (assets/depth)
    if own:
        return int(own[1])
    # study.sh's lanes, `if [ ${#lanes[@]} = 2 ]` (task_study and design_study: a run a lane)
    if re.search(r'RUN_WITH=lane\b|\blane train |\b(task|design)_study ', code):
        return int(re.search(r'\$\{#lanes\[@\]\} = (\d+)', read(folder, 'study.sh', at))[1])
    return 1


def train_seconds(path):
    """A run's training time from its log.jsonl: each train record's ms_per_iter times the iterations since the one
    before (train.py logs the mean over them)."""
    try:
        with open(path) as f:
            records = [r for r in map(json.loads, f) if r['kind'] == 'train']
        before = [0] + [r['iter'] for r in records]
        return sum(r['ms_per_iter'] * (r['iter'] - b) for r, b in zip(records, before)) / 1000
    except (ValueError, KeyError) as e:
        raise UserError(f"{path}: not a train.py log.jsonl ({e!r})")


def timed_seconds(path):
    """The wall seconds in a .seconds file (`S`, or `NAME S` a line): the longest, for runs timed side by side."""
    with open(path) as f:
        return max(float(line.split()[-1]) for line in f if line.strip())


def shown(x, down):
    """x to one decimal; rounded down where it is a lower bound."""
    return f'{math.floor(x * 10) / 10 if down else x:.1f}'


def duration(seconds, bound):
    m = seconds / 60
    hours = f' ({shown(m / 60, bound)} h)' if m >= 120 else ''
    return ('≥ ' if bound else '') + f'{shown(m, bound)} min{hours}'


def row(folder, study):
    """(time, how it was read) of one study."""
    logs = os.path.join(folder, study, 'logs')
    walls = []
    for path in sorted(glob.glob(os.path.join(logs, '*.log'))):
        with open(path) as f:
            walls += [float(s) for s in WALL.findall(f.read())]
    if walls:  # rule 1
        return duration(sum(walls), False), f"its logs' `[s wall]` lines: {len(walls)} commands, one after the other"
    if os.path.isfile(os.path.join(folder, study, 'run.sh')):  # rule 2
        code, at = run_sh(folder, study)
        patterns = trained(code)
        runs = sorted({p for pattern in patterns for p in glob.glob(os.path.join(folder, study, f'{pattern}.jsonl'))})
        timed = sorted(glob.glob(os.path.join(logs, '*.seconds')))
        if runs or timed:
            n = at_once(code, folder, at)
            total = sum(map(train_seconds, runs)) / n + sum(map(timed_seconds, timed))
            how = [f"the training of the {len(runs)} runs run.sh trains (`{' '.join(patterns)}`), {n} at a time"]
            how += [f"plus {', '.join('`logs/' + os.path.basename(p) + '`' for p in timed)}"] if timed else []
            was = re.search(r'\bWAS=(assets/[\w/-]+)', read(folder, f'{study}/run.sh'))
            how += [f"run.sh as it was at commit {at}{f' ({was[1]} there)' if was else ''}"] if at else []
            return duration(total, True), '; '.join(how)
    return 'not recorded', 'no training log (`logs/*.jsonl`) or wall time is stored'


def study_folders(folder):
    """The studies of folder, as paths relative to it: each folder with a run.sh or a README.md, a folder of studies
    (one whose subfolders have a run.sh) as its subfolders, and as itself too where it has a run.sh of its own
    (assets/addition and assets/addition/retries)."""
    def has(d, *names):
        return any(os.path.isfile(os.path.join(folder, d, f)) for f in names)
    out = []
    for d in filter(lambda d: os.path.isdir(os.path.join(folder, d)), os.listdir(folder)):
        steps = [f'{d}/{s}' for s in os.listdir(os.path.join(folder, d)) if has(f'{d}/{s}', 'run.sh')]
        out += steps + ([d] if has(d, 'run.sh') or not steps and has(d, 'README.md') else [])
    return out


def table(folder):
    """The markdown table of every study in folder, by name."""
    if not os.path.isdir(folder):
        raise UserError(f'{folder}: no such folder (the studies, assets/)')
    studies = sorted(study_folders(folder))
    lines = ['| study | time | how it was read |', '|---|---|---|']
    for study in studies:
        time, how = row(folder, study)
        if study in README_SAYS:
            how += f'; {README_SAYS[study]}'
        lines.append(f'| {study} | {time} | {how} |')
    return '\n'.join(lines) + '\n'


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--assets', default=HERE, help='the folder of the studies (this script\'s folder, assets/)')
    p.add_argument('--out', help='write the table into this file (default: stdout)')
    a = p.parse_args(argv)
    try:
        text = table(a.assets)
    except (UserError, OSError) as e:
        sys.exit(f'assets/study_times.py: error: {e}')
    if a.out:
        with open(a.out, 'w') as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == '__main__':
    main()
