"""The tree-sitter walk reproduces a recorded reading of 649 command lines, field for field.

``tests/fixtures/shelltree_golden.json`` holds, for every line of the policy corpus, the
fast-path parity lines and the tricky lines below, the complete ``parse_tree`` result: each
sub-command (text, canonical words, every reading, literal flag, reason, open-ended and
deny-only flags; glob words marked as such), each redirection (text, operator, target,
guesses, the directories it may be opened in as ``cd`` steps — one as a list of steps, several
as ``{"any_of": [...]}`` —, write flag) and the script-wide problems, literal flag and reasons.
It was written from the walker as it stood before the walk was optimised (session 2), so any
refactoring of ``shelltree`` that changes a single field of a single line fails here. Since
then, on purpose: the directory of a redirection whose own command runs ``cd`` (``cd build >
out``) and of redirections in function bodies; a cd that may not have happened (``cd x; a >
f``: here or in x), subshells giving the directory back, ``eval 'cd x'``; reserved words
tree-sitter-bash reads as command words (``! { git log; }``, ``time { ...; }``). Lines added
later were recorded as they came.

Lines are added with ``.venv/bin/python tests/test_shelltree_golden.py --add`` (records only
lines missing from the file). A deliberate change of behaviour is recorded line by line with
``--update LINE_INDEX ...`` after review; the commit shows which entries changed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from test_policy_corpus import CORPUS, FAST_PATH_EXTRA

from norma_cli.policy.shell import ShellScript
from norma_cli.policy.shelltree import parse_tree
from norma_cli.policy.shellwords import GlobWord

GOLDEN = Path(__file__).parent / "fixtures" / "shelltree_golden.json"

TRICKY = [
    # heredocs
    "cat <<EOF\n$(rm a)\n`rm b`\n$((1 + $(rm c)))\nEOF",
    "cat <<EOF\n\\$(rm a) \\`rm b\\` $HOME\nEOF",
    "cat <<'E O'\n$(rm a)\nE O",
    "cat <<E\\OF\n$(rm a)\nEOF",
    "cat <<-\tEOF\n\t$(git log)\n\tEOF",
    "cat <<A <<B\n$(rm a)\nA\n`rm b`\nB",
    "cat <<EOF | grep x > build/o.txt\n$(echo $(rm -rf n))\nEOF",
    "cat <<EOF\n$(cat <<IN\nrm x\nIN\n)\nEOF",
    "cat <<EOF\n`unclosed\nEOF",
    "cat <<EOF\n$(echo ')' ; rm q)\nEOF",
    'cat <<EOF\n$(echo "(" ; rm q)\nEOF',
    "bash <<EOF\nrm -rf x\nEOF",
    "f=x; cat <<EOF > $f\nhi\nEOF",
    # nested substitutions and backticks
    "echo $(echo `echo $(rm a)`)",
    'echo "$(echo "$(echo "$(rm b)")")"',
    "echo `echo \\`echo \\\\\\`rm c\\\\\\`\\``",
    "echo `echo \\$HOME`",
    "echo `echo \\\\`",
    "`rm x`",
    "$(rm x)",
    "echo $(cd /etc; echo > passwd)",
    "x=$(cd build && pwd) && echo $x",
    "echo ${x:=$(rm q)} ${#y} ${z/a/b} ${w%%.*}",
    "echo ${!ref} ${arr[@]} ${arr[*]:1:2}",
    "echo $((x=1, y=2)) $[3+4]",
    "(( i++ )) && rm x",
    "(( $(rm x) ))",
    "let 'x = 1 + 2'",
    # process substitution
    "diff <(git log) <(git status)",
    "diff <(rm a) >(rm b)",
    "tee >(grep x > build/a) < docs/a.md",
    "<(ls) x",
    "cat <(cd /etc) > x",
    "paste <(cut -f1 a) <(cut -f2 b) | sort",
    # functions
    "f() { cd build; }; echo x > out.txt",
    "function h() { echo > /etc/x; }",
    "f() { local a=$(rm z); }",
    "f() { echo x; } > build/out.txt",
    "f() { git log; }; f; g() { f; }; g",
    "rm() { echo; }; rm -rf /",
    # compound commands
    "case $x in a|b) git log;; *) rm y;; esac",
    "case x in (a) echo ;& b) rm ;;& c) ls ;; esac",
    "if [ -f a ]; then git log; elif rm x; then :; else true; fi",
    "for ((i=0; i<3; i++)); do echo $i; done",
    "for x; do rm $x; done",
    "while read -r l; do echo $l; done < docs/a.md",
    "while read -r l; do echo $l; done < secrets/k > build/o",
    "until git log; do sleep 1; done",
    "select s in a b; do break; done",
    "[[ $x == y && -n $(rm z) ]]",
    "[ -n x ] && test -f y",
    "{ git log; } 2>&1 | { grep x; }",
    "( cd build && ls ) > out.txt",
    "! { git log; }",
    "coproc NAME { git log; }",
    "time { git log; }",
    "git log |& grep x",
    "git log &\ngit status &",
    "echo a; echo b\necho c",
    # redirections of every kind
    "cat < docs/a.md > build/b.md 2>> logs/e.log",
    "git log &> build/x",
    "git log &>> build/x",
    "git log >| build/x",
    "git log > build/x 2>&1",
    "git log 2>&1 > build/x",
    "git log 3> build/x 4>&3 3>&-",
    "git log 1>&2 2>&-",
    "git log >&-",
    "git log <&-",
    "git log <&3",
    "git log >& 2",
    "git log >&build/x",
    "git log <> build/x",
    "git log 0< docs/a.md",
    "git log {fd}> build/x",
    "exec 3> build/x",
    "exec 3>&-",
    "cat <<< 'literal' > build/x",
    "cat <<< $HOME",
    'cat <<< "$(rm q)"',
    "echo x > /dev/null > /dev/stderr > /dev/fd/2",
    "echo x > ~/x",
    "echo x > ~root/x",
    "echo x > 'build/a b'",
    'echo x > "build/$n"',
    "echo x > build/{a,b}",
    "echo x > build/x\\ y",
    "echo x > $'build/\\x41'",
    "echo x > build/\\*",
    "echo x > ''",
    "echo x > $(echo build/x)",
    "echo x >> `echo /etc/x`",
    "> build/a >> build/b",
    "f=/etc/passwd; echo x > $f",
    "f=build; echo x > $f/a",
    "a=/etc; b=passwd; echo > $a/$b",
    "echo x > ${HOME}/x",
    "echo x > /etc/${x}",
    "cd build && { cd sub; echo > a; }",
    "cd build > out.txt",
    "> out.txt cd build",
    "{ cd build; } > out.txt",
    "true && cd build > out.txt",
    "while cd build; do echo; done > out.txt",
    "cd build && echo | cat > out.txt",
    "cd build | cat > out.txt",
    "cd build; cat > out.txt",
    "cd build 2> /etc/x",
    "cd build && cd sub > out.txt",
    "cd build && echo x > out.txt # c",
    "true && true && cd build > out.txt",
    "cd build || cd sub > out.txt",
    "cd build && { cd sub; } > out.txt",
    "{ cd build && echo > a; } > b",
    "cd build > a > b 2>&1",
    "cd build && ls | cd x > o",
    "cd build &&\necho x > out.txt",
    "f() { echo > o; }; cd build; f",
    "f() ( cd build ); echo > o",
    "function g { pushd x; }; echo > o",
    "f() { g() { cd x; }; }; echo > o",
    "f() { :; } > o; echo > p",
    "cd build <<EOF > out.txt\nhi\nEOF",
    "{ cd build; } <<EOF > out.txt\nx\nEOF",
    "cd build > out.txt <<EOF\nhi\nEOF",
    "cd build <<< hi > out.txt",
    "<<EOF > out.txt cd build\nhi\nEOF",
    "cd build && cat <<EOF > out.txt\nhi\nEOF",
    "pushd build && echo > x",
    "cd && echo > x",
    "cd - && echo > x",
    "cd -P build && echo > x",
    "cd a b && echo > x",
    "cd /tmp & echo > x",
    # assignments
    "a=1 b=$2 c='x y' d=\"$a\" git log",
    "a=(1 2 3); echo ${a[1]}",
    "a+=x; a+=(y); echo $a",
    "x+=1 git log",
    "export A=1 B; readonly C=2; local D=3; declare -x E=4",
    "typeset -r F=5 && unset G",
    "A= git log",
    "A=$'\\n' git log",
    "IFS=: read a b",
    "PATH+=:/tmp git log",
    "a=rm; a+=dir; $a x",
    "a=r; $a$a x",
    "a='rm -rf'; $a /",
    'a="rm -rf"; "$a" /',
    "a=rm; b=$a; $b x",
    "a=$b; $a x",
    "a=git; $a log",
    # bash -c, eval, xargs, find -exec
    "bash -c 'a=rm; $a x'",
    "bash -c 'echo > /etc/x' && bash -c 'cd /etc && echo > y'",
    'bash -c "$(curl x)"',
    'bash -c \'bash -c "bash -c \\"bash -c \\\\\\"bash -c rm\\\\\\"\\""\'',
    "sh -c 'cd build; echo > x' && echo > y",
    "cd build && sh -c 'echo > x'",
    "eval 'cd /etc'; echo > passwd",
    'eval "$(ssh-agent)"',
    "eval $'rm\\tx'",
    "xargs -a docs/a.md rm",
    "xargs -I % sh -c 'echo % > /etc/x'",
    "find . -name '*.py' -exec grep -l x {} + -exec rm {} \\;",
    "find . -delete",
    "find / -exec bash -c 'git log' \\;",
    # wrappers
    "env A=1 B=2 -- timeout 3 nice -n 2 sudo -u x -- git log",
    "env -C build git log",
    "timeout -k 1s 5s bash -c 'rm q'",
    "sudo -s",
    "sudo -i rm x",
    "sudo sh -c 'echo > /etc/x'",
    "nohup env bash -c 'rm x' &",
    "command -- rm x",
    "exec -a name rm x",
    "nice -n -5 git log",
    # quoting
    "$'git' $'log'",
    "$'\\u0072m' x",
    "$'\\cA' x",
    "$'rm\\0trailing' x",
    "\"$'rm'\" x",
    "'r'\"m\" x",
    'r""m x',
    'echo "a\\"b" \'c\'"d"',
    'echo "\\$HOME \\` \\\\ \\x"',
    "echo \\'a\\' \\\"b\\\"",
    'echo $"localised"',
    "echo \"${x}\"y'z'",
    "echo ~ ~/a ~user a~b",
    "echo a\\ b c",
    "git lo\\\ng",
    "git \\\n  log \\\n  --oneline",
    "echo x \\\r\n y",
    "ec\\\nho \\\n> build/x",
    "echo * ?.py [ab].txt '*'",
    "echo {a,b}{c,d} {1..3..2} {a..e} {,x}",
    "{echo,hi}",
    "echo {",
    "echo }",
    # comments
    "git log # trailing $(rm x)",
    "# c1\ngit log\n# c2",
    "git log #comment\nrm x",
    "echo a#b",
    "echo '#' \"#\" \\#x",
    ": 'comment-like' && git log",
    # unicode
    "echo héllo > build/ü.txt",
    "cat 'naïve' && echo \"日本語 $(rm x)\"",
    "grep ñ docs/a.md | wc -l > build/ñ",
    'echo \udcff "\udcff" a\udcffb',
    "echo 💥 && rm x",
    # unparseable garbage
    "}{",
    "((((",
    "echo $(",
    "echo `",
    'echo "',
    "if; then; fi",
    "case x in",
    "for in do done",
    "rm -rf x |",
    "| rm x",
    "&& rm x",
    ";;",
    "git log)",
    "echo ${",
    "echo $((1 +",
    "cat <<",
    "cat <<EOF",
    "<<<",
    ">",
    "2>",
    "rm\x00x",
    "\t \n",
    "\\",
    "'",
    "rm -rf / ; ) (",
    "echo 'a' 'b' && ) rm -rf /",
    "{rm,-rf,/}; ((",
    "sudo rm -rf / &&& ls",
]


def _word(w: str) -> Any:
    if type(w) is str:
        return w
    assert isinstance(w, GlobWord), type(w)
    return {"glob": str(w)}


def _words(ws: Any) -> Any:
    return None if ws is None else [_word(w) for w in ws]


def _dirs(dirs: Any) -> Any:
    """One directory as its ``cd`` steps (the format of the first recordings); several as
    ``{"any_of": [...]}``; None when unknown."""
    if dirs is None:
        return None
    if len(dirs) == 1:
        return _words(dirs[0])
    return {"any_of": [_words(d) for d in dirs]}


def snapshot(script: ShellScript) -> dict[str, Any]:
    """Everything a ``ShellScript`` holds, as plain JSON values."""
    out = {
        "commands": [
            {
                "text": c.text,
                "words": _words(c.words),
                "readings": [_words(r) for r in c.readings],
                "literal": c.literal,
                "reason": c.reason,
                "open_ended": c.open_ended,
                "deny_only": c.deny_only,
            }
            for c in script.commands
        ],
        "redirects": [
            {
                "text": r.text,
                "op": r.op,
                "target": None if r.target is None else _word(r.target),
                "guesses": _words(r.guesses),
                "cd": _dirs(r.cd),
                "write": r.write,
                "harmless": r.harmless,
            }
            for r in script.redirects
        ],
        "problems": list(script.problems),
        "literal": script.literal,
        "reasons": script.reasons(),
    }
    # Through JSON and back: the comparison sees exactly what the file holds.
    result: dict[str, Any] = json.loads(json.dumps(out))
    return result


def all_lines() -> list[str]:
    return list(dict.fromkeys([c for c, _ in CORPUS] + FAST_PATH_EXTRA + TRICKY))


def _load() -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = json.loads(GOLDEN.read_text(encoding="utf-8"))
    return entries


LINES = all_lines()


def test_golden_covers_every_line() -> None:
    recorded = [e["line"] for e in _load()]
    assert len(recorded) == len(set(recorded))
    assert set(recorded) == set(LINES), "run: python tests/test_shelltree_golden.py --add"
    assert len(recorded) >= 300
    assert len(TRICKY) == len(set(TRICKY))


@pytest.mark.parametrize(
    "entry", _load() if GOLDEN.exists() else [], ids=lambda e: repr(e["line"])[:60]
)
def test_walk_reproduces_the_golden_reading(entry: dict[str, Any]) -> None:
    assert snapshot(parse_tree(entry["line"], 0)) == entry["result"]


def _write(entries: list[dict[str, Any]]) -> None:
    # One entry per line, so a diff of the file names exactly the lines whose reading changed.
    text = ",\n".join(json.dumps(e, ensure_ascii=True) for e in entries)
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(f"[\n{text}\n]\n", encoding="utf-8")


def main(argv: list[str]) -> None:
    entries = _load() if GOLDEN.exists() else []
    if argv[:1] == ["--add"]:
        known = {e["line"] for e in entries}
        added = [line for line in LINES if line not in known]
        entries += [{"line": line, "result": snapshot(parse_tree(line, 0))} for line in added]
        print(f"added {len(added)} lines; {len(entries)} in {GOLDEN}")
    elif argv[:1] == ["--update"]:
        for index in map(int, argv[1:]):
            entries[index]["result"] = snapshot(parse_tree(entries[index]["line"], 0))
            print(f"updated [{index}] {entries[index]['line']!r}")
    else:
        raise SystemExit("usage: test_shelltree_golden.py --add | --update INDEX ...")
    _write(entries)


if __name__ == "__main__":
    main(sys.argv[1:])
