"""Custom tools (SPEC §8): command templates render each value as one shell word and run
through Bash and its rules; scripts get JSON on stdin; http requests go through the WebFetch
client and its SSRF guard; shell hints join Bash's description. Limits on time and output."""

from __future__ import annotations

import json
import shlex
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import RunNorma, results

ARGV = f"{shlex.quote(sys.executable)} -c 'import json, sys; print(json.dumps(sys.argv[1:]))'"


def config(tmp_path: Path, text: str) -> tuple[str, str]:
    cfg = tmp_path / "norma.toml"
    cfg.write_text(text)
    return "--config", str(cfg)


def toml_str(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid TOML basic string


# ----------------------------------------------------------------------------- command
@pytest.mark.parametrize(
    "value", ["x; rm -rf ~", "$(touch pwned)", "a 'b' \"c\"", "`id` && echo no", "new\nline"]
)
def test_command_value_is_exactly_one_literal_argument(
    norma: RunNorma, tmp_path: Path, value: str
) -> None:
    cfg = config(
        tmp_path,
        f'[[custom_tools]]\nname = "argv"\nkind = "command"\nexec = {toml_str(ARGV + " {{who}}")}\n',
    )
    proc = norma(*cfg, "--allow", "argv", "run", "argv", "-i", json.dumps({"who": value}), "--text")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout) == [value]
    assert not (tmp_path / "pwned").exists()


def test_non_string_values_are_json_encoded_words(norma: RunNorma, tmp_path: Path) -> None:
    cfg = config(
        tmp_path,
        f"""
[[custom_tools]]
name = "argv"
kind = "command"
exec = {toml_str(ARGV + " {{n}} {{flags}}")}
input_schema = {{ type = "object", properties = {{ n = {{ type = "integer" }}, flags = {{ type = "array" }} }} }}
""",
    )
    proc = norma(
        *cfg, "--allow", "argv", "run", "argv", "-i", '{"n": 3, "flags": ["a b", "c"]}', "--text"
    )
    assert json.loads(proc.stdout) == ["3", '["a b", "c"]']


def test_bash_rules_apply_to_the_rendered_command(norma: RunNorma, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    cfg = config(
        tmp_path,
        '[permissions]\ndeny = ["Bash(rm:*)"]\n[[custom_tools]]\nname = "remove"\nkind = "command"\nexec = "rm -f {{path}}"\n',
    )
    proc = norma(*cfg, "--allow", "remove", "run", "remove", "-i", '{"path": "victim.txt"}')
    assert proc.returncode == 3
    result = results(proc.stdout)[0]
    assert "Bash(rm:*)" in result["content"][0]["text"] and victim.exists()

    # a Bash ask rule asks (and nobody can answer here)
    cfg = config(
        tmp_path,
        '[permissions]\nask = ["Bash(rm:*)"]\n[[custom_tools]]\nname = "remove"\nkind = "command"\nexec = "rm -f {{path}}"\n',
    )
    assert (
        norma(*cfg, "--allow", "remove", "run", "remove", "-i", '{"path": "victim.txt"}').returncode
        == 3
    )
    assert victim.exists()


def test_the_custom_tools_own_name_rules_apply(norma: RunNorma, tmp_path: Path) -> None:
    cfg = config(
        tmp_path, '[[custom_tools]]\nname = "hello"\nkind = "command"\nexec = "echo hi {{who}}"\n'
    )
    call = ("run", "hello", "-i", '{"who": "bob"}')
    assert norma(*cfg, *call).returncode == 3  # no rule: it asks, and nobody can answer
    assert norma(*cfg, "--allow", "hello", "--deny", "hello", *call).returncode == 3
    assert norma(*cfg, "--allow", "hello(who:bob)", *call).returncode == 0
    assert (
        norma(*cfg, "--allow", "hello(who:bob)", "run", "hello", "-i", '{"who": "eve"}').returncode
        == 3
    )
    # an allow rule on the Bash command line allows it too
    ok = norma(*cfg, "--allow", "Bash(echo hi:*)", *call, "--text")
    assert ok.returncode == 0 and ok.stdout.strip() == "hi bob"


def test_placeholder_inside_quotes_is_a_config_error(norma: RunNorma, tmp_path: Path) -> None:
    for template in ['echo "hi {{who}}"', "echo 'hi {{who}}'", "cat <<EOF\n{{who}}\nEOF"]:
        cfg = config(
            tmp_path,
            f'[[custom_tools]]\nname = "q"\nkind = "command"\nexec = {toml_str(template)}\n',
        )
        proc = norma(*cfg, "tools", "list")
        assert proc.returncode == 2 and "one shell word" in proc.stderr, template


def test_command_timeout_and_output_limit(norma: RunNorma, tmp_path: Path) -> None:
    cfg = config(
        tmp_path,
        """
[[custom_tools]]
name = "slow"
kind = "command"
exec = "sleep 5; echo {{x}}"
timeout = 0.5

[[custom_tools]]
name = "chatty"
kind = "command"
exec = "yes {{x}} | head -n 1000"
max_output = 50
""",
    )
    proc = norma(*cfg, "--allow", "slow", "run", "slow", "-i", '{"x": "1"}', "--text")
    assert proc.returncode == 1 and "timed out" in proc.stdout
    proc = norma(*cfg, "--allow", "chatty", "run", "chatty", "-i", '{"x": "y"}', "--text")
    assert (
        proc.returncode == 0
        and proc.stdout.startswith("y\ny\n")
        and "limited to 50 of 1,999" in proc.stdout
    )


# ----------------------------------------------------------------------------- script
SCRIPT = """
import json, sys
data = json.load(sys.stdin)
print(json.dumps({"sum": data["a"] + data["b"], "argv": sys.argv[1:]}))
"""


def test_script_gets_json_on_stdin_and_returns_json(norma: RunNorma, tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "add.py").write_text(SCRIPT)
    cfg = config(
        tmp_path,
        f"""
[[custom_tools]]
name = "add"
kind = "script"
exec = "@scripts/add.py"
input_schema = {{ type = "object", properties = {{ a = {{ type = "integer" }}, b = {{ type = "integer", default = 40 }} }}, required = ["a"] }}

[[custom_tools]]
name = "inline"
kind = "script"
exec = {toml_str("import sys; print('read', len(sys.stdin.read()), 'chars')")}
""",
    )
    proc = norma(*cfg, "--allow", "add", "run", "add", "-i", '{"a": 2}')
    assert proc.returncode == 0, proc.stdout
    assert results(proc.stdout)[0]["content"] == [{"type": "json", "json": {"sum": 42, "argv": []}}]
    text = norma(*cfg, "--allow", "inline", "run", "inline", "-i", "{}", "--text")
    assert text.returncode == 0 and text.stdout.strip() == "read 2 chars"
    bad = norma(*cfg, "--allow", "add", "run", "add", "-i", '{"a": "x"}')
    assert bad.returncode == 1 and "integer" in bad.stdout  # the schema refused it first


def test_script_failure_timeout_and_limit(norma: RunNorma, tmp_path: Path) -> None:
    cfg = config(
        tmp_path,
        f"""
[[custom_tools]]
name = "boom"
kind = "script"
exec = {toml_str("import sys; print('bad input', file=sys.stderr); sys.exit(3)")}

[[custom_tools]]
name = "hang"
kind = "script"
exec = "import time; time.sleep(30)"
timeout = 0.5

[[custom_tools]]
name = "flood"
kind = "script"
exec = "print('z' * 100000)"
max_output = 10
""",
    )
    proc = norma(*cfg, "--allow", "boom", "run", "boom", "-i", "{}", "--text")
    assert (
        proc.returncode == 1 and "exited with code 3" in proc.stdout and "bad input" in proc.stdout
    )
    proc = norma(*cfg, "--allow", "hang", "run", "hang", "-i", "{}", "--text", timeout=20)
    assert proc.returncode == 1 and "timed out after 0.5s" in proc.stdout
    proc = norma(*cfg, "--allow", "flood", "run", "flood", "-i", "{}", "--text")
    assert proc.stdout.startswith("z" * 10 + "\n") and "limited to 10 characters" in proc.stdout


# ----------------------------------------------------------------------------- shell
def test_shell_kind_is_a_bash_hint_not_a_tool(norma: RunNorma, tmp_path: Path) -> None:
    cfg = config(
        tmp_path,
        '[[custom_tools]]\nname = "jq"\nkind = "shell"\nexec = "jq -r FILTER FILE"\ndescription = "JSON processor"\n',
    )
    bash = json.loads(norma(*cfg, "tools", "show", "Bash", "--json").stdout)
    assert "jq: JSON processor" in bash["description"] and "jq -r FILTER FILE" in bash["prompt"]
    listed = [t["name"] for t in json.loads(norma(*cfg, "tools", "list", "--json").stdout)]
    assert "jq" not in listed and "Bash" in listed
    proc = norma(*cfg, "--allow", "jq", "run", "jq", "-i", "{}")
    assert proc.returncode == 1 and "unknown tool: jq" in proc.stdout
    explain = json.loads(norma(*cfg, "tools", "list", "--explain", "--json").stdout)
    jq = next(t for t in explain["tools"] if t["name"] == "jq")
    assert not jq["callable"] and "not a callable tool" in jq["reasons"][0]

    assert norma(*cfg, "catalog", "set", "jq", "--disable").returncode == 0
    bash = json.loads(norma(*cfg, "tools", "show", "Bash", "--json").stdout)
    assert "jq" not in bash["description"]  # a disabled hint is not shown


# ----------------------------------------------------------------------------- http
class Echo(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


HTTP_TOOL = """
[[custom_tools]]
name = "item"
kind = "http"
url = "http://{host}/items/{{{{id}}}}"
input_schema = {{ type = "object", properties = {{ id = {{ type = "string" }} }}, required = ["id"] }}
"""


@pytest.mark.parametrize("host", ["169.254.169.254", "loopback"])
def test_http_to_a_blocked_address_is_refused_by_the_guard(
    norma: RunNorma, tmp_path: Path, server: str, host: str
) -> None:
    target = server if host == "loopback" else host  # a live server on 127.0.0.1, not allowlisted
    cfg = config(tmp_path, HTTP_TOOL.format(host=target))
    proc = norma(*cfg, "--allow", "item", "run", "item", "-i", '{"id": "1"}', timeout=30)
    assert proc.returncode == 1, proc.stdout
    result = results(proc.stdout)[0]
    text = result["content"][0]["text"]
    assert "link-local" in text or "loopback" in text, text


def test_http_renders_percent_encoded_and_reaches_an_allowed_host(
    norma: RunNorma, tmp_path: Path, server: str
) -> None:
    cfg = config(tmp_path, f'[web]\nallow_hosts = ["{server}"]\n' + HTTP_TOOL.format(host=server))
    proc = norma(*cfg, "--allow", "item", "run", "item", "-i", '{"id": "a/b c?d"}', "--text")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert '"/items/a%2Fb%20c%3Fd"' in proc.stdout


def test_webfetch_domain_rules_apply_to_the_rendered_url(norma: RunNorma, tmp_path: Path) -> None:
    cfg = config(tmp_path, HTTP_TOOL.format(host="api.example.com"))
    proc = norma(
        *cfg,
        "--allow",
        "item",
        "--deny",
        "WebFetch(domain:api.example.com)",
        "run",
        "item",
        "-i",
        '{"id": "1"}',
    )
    assert proc.returncode == 3 and "WebFetch(domain:api.example.com)" in proc.stdout


def test_http_needs_a_non_empty_schema(norma: RunNorma, tmp_path: Path) -> None:
    cfg = config(
        tmp_path,
        '[[custom_tools]]\nname = "ping"\nkind = "http"\nurl = "https://example.com/ping"\n',
    )
    proc = norma(*cfg, "tools", "list")
    assert proc.returncode == 2 and "needs an input_schema with properties" in proc.stderr
    assert "norma.toml:2" in proc.stderr


def test_a_lone_surrogate_in_a_result_is_printed_replaced(norma: RunNorma, tmp_path: Path) -> None:
    script = 'print(\'{"t": "a\\\\ud800b"}\')'  # JSON text holding an escaped lone surrogate
    cfg = config(
        tmp_path,
        f"""
[[custom_tools]]
name = "odd"
kind = "script"
exec = {toml_str(script)}
""",
    )
    proc = norma(*cfg, "--allow", "odd", "run", "odd", "-i", "{}")
    assert proc.returncode == 0, proc.stderr
    assert results(proc.stdout)[0]["content"] == [{"type": "json", "json": {"t": "a\ufffdb"}}]
