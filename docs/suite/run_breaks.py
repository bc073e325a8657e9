"""
A reviewer's breaks against the suite as it stands: each break (one line of one file replaced) applied to a
fresh clone of the repository's HEAD, the whole suite run against it (stopping at the first failure), and
whether it was caught and by which tests. Run from the repository root:

    python docs/suite/run_breaks.py docs/suite/round-1/breaks.json --out /tmp/round-1.json

    python docs/suite/run_breaks.py docs/suite/round-1/breaks.json --out /tmp/own.json --own --at 5881e63

--own runs each break against its module's own test file alone (test_model.py for model.py, tests/test_<name>.py
for the others, tests/test_beyond_sample.py for beyond/sample.py), one process: is it caught by the tests that hold
that module's promises? --at clones that commit instead of HEAD. A break whose line is not in its file exactly
once is an error, not a miss.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def apply(clone, brk):
    path = os.path.join(clone, brk['file'])
    text = open(path).read()
    lines = text.split('\n')
    hits = [i for i, line in enumerate(lines) if line == brk['old']]
    if len(hits) != 1:
        sys.exit(f'run_breaks.py: error: {brk["id"]}: its line is in {brk["file"]} {len(hits)} times, not once')
    lines[hits[0]] = brk['new']
    open(path, 'w').write('\n'.join(lines))
    return path, text


def own_file(path):
    """The test file that holds the promises of the module at path (a break's 'file')."""
    if path == 'model.py':
        return 'test_model.py'
    name = os.path.basename(path)[:-3]
    return 'tests/test_beyond_sample.py' if path == 'beyond/sample.py' else f'tests/test_{name}.py'


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('breaks', help='the breaks (a JSON list of {id, file, old, new, ...})')
    parser.add_argument('--out', required=True, help='where the results are written (JSON)')
    parser.add_argument('--only', nargs='*', default=[], help='only these breaks (ids)')
    parser.add_argument('--repo', default=ROOT, help='the repository whose HEAD is cloned (default: this one)')
    parser.add_argument('--at', default='HEAD', help='the commit to clone (default: HEAD)')
    parser.add_argument('--own', action='store_true', help="only the module's own test file, in one process")
    args = parser.parse_args(argv)
    if args.breaks.endswith('.tar.gz'):  # a sealed set (a tar.gz of its breaks.json): read without unpacking it
        with tarfile.open(args.breaks) as tar:
            every = json.load(tar.extractfile('./breaks.json'))
    else:
        every = json.load(open(args.breaks))
    breaks = [b for b in every if not args.only or b['id'] in args.only]
    head = subprocess.run(['git', 'rev-parse', args.at], cwd=args.repo, capture_output=True, text=True, check=True).stdout.strip()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        clone = os.path.join(tmp, 'repo')
        subprocess.run(['git', 'clone', '-q', args.repo, clone], check=True)
        subprocess.run(['git', 'checkout', '-q', head], cwd=clone, check=True)
        for brk in breaks:
            path, text = apply(clone, brk)
            t0 = time.time()
            own = own_file(brk['file'])
            if args.own and not os.path.exists(os.path.join(clone, own)):  # (a config's promises: no test file of its own)
                open(path, 'w').write(text)
                results.append(dict(id=brk['id'], module=brk['module'], caught=False, failed=[], errors=[], seconds=0,
                                    tail=[f'no {own}']))
                print(f'{brk["id"]} {brk["module"]}: MISSED (no {own})', flush=True)
                continue
            cmd = [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider']
            cmd += ['-n0', own] if args.own else ['-x']
            r = subprocess.run(cmd, cwd=clone, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS='1')
                               if args.own else None)
            open(path, 'w').write(text)
            failed = sorted(set(re.findall(r'^FAILED (\S+)', r.stdout, re.M)))
            errors = sorted(set(re.findall(r'^ERROR (\S+)', r.stdout, re.M)))
            caught = r.returncode not in (0, 5)  # (5: no test ran, which catches nothing)
            results.append(dict(id=brk['id'], module=brk['module'], caught=caught, failed=failed, errors=errors,
                                seconds=round(time.time() - t0), tail=r.stdout.strip().splitlines()[-1:]))
            print(f'{brk["id"]} {brk["module"]}: {"caught by " + ", ".join(failed + errors) if caught else "MISSED"} '
                  f'({results[-1]["seconds"]} s)', flush=True)
    per_module = {}
    for r in results:
        row = per_module.setdefault(r['module'], [0, 0])
        row[0] += r['caught']
        row[1] += 1
    caught = sum(r['caught'] for r in results)
    print(f'\n{caught} of {len(results)} caught at {head[:12]}')
    for module, (c, n) in sorted(per_module.items()):
        print(f'  {module}: {c}/{n}')
    json.dump(dict(head=head, caught=caught, total=len(results), per_module=per_module, results=results),
              open(args.out, 'w'), indent=1)


if __name__ == '__main__':
    main()
