"""The documentation site: it builds with warnings as errors, every Python block of its pages
runs, every `frost` command in its pages and the README parses, and the built pages render in a
real browser (headless Chromium) with their navigation, search and code highlighting."""

import contextlib
import functools
import http.server
import os
import pathlib
import re
import shlex
import subprocess
import sys
import threading

import pytest

ROOT = pathlib.Path(__file__).parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if not p.parts[-2].startswith("audit-"))
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(path: pathlib.Path, language: str) -> list[str]:
    """The fenced code blocks of one language in a markdown file, in order."""
    return [code for lang, code in FENCE.findall(path.read_text()) if lang == language]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site built with `mkdocs build --strict` (warnings fail it), served on localhost."""
    out = tmp_path_factory.mktemp("site")
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)]
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_every_page_is_in_the_navigation(site):
    """A page left out of mkdocs.yml's nav would be built but found by no reader."""
    nav = (ROOT / "mkdocs.yml").read_text()
    missing = [str(p.relative_to(DOCS)) for p in PAGES if str(p.relative_to(DOCS)) not in nav]
    assert not missing, missing


RUN_PAGES = """if True:
    import sys, traceback
    failed = []
    for path in sys.argv[1:]:
        with open(path) as f:
            code = f.read()
        try:
            exec(compile(code, path, "exec"), {"__name__": "__main__"})
        except BaseException:
            failed.append(traceback.format_exc())
    sys.exit("\\n".join(failed) or None)
"""


def test_the_python_blocks_of_every_page_run(tmp_path):
    """Each page's Python blocks run one after another in one namespace, as a reader who pastes
    them in order would run them; the pages run in one interpreter (jax imported once), each in a
    fresh namespace, and a failure names its page and line."""
    scripts = []
    for page in PAGES:
        if code := "\n\n".join(blocks(page, "python")):
            script = tmp_path / str(page.relative_to(DOCS)).replace("/", "-")
            script.with_suffix(".py").write_text(code)
            scripts.append(str(script.with_suffix(".py")))
    assert len(scripts) >= 6, scripts
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg"}
    cmd = [sys.executable, "-c", RUN_PAGES, *scripts]
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]


def frost_commands() -> list[tuple[str, str]]:
    """(where, command) for every `frost ...` command in a bash block of the docs or the README:
    each part of a line that `&&` or `;` separates, comments dropped, lines continued by a
    backslash joined."""
    found = []
    for path in [ROOT / "README.md", *PAGES]:
        for code in blocks(path, "bash"):
            for line in code.replace("\\\n", " ").splitlines():
                for part in re.split(r"&&|;", line.split(" #")[0]):
                    if part.strip().startswith("frost "):
                        found.append((path.name, part.strip()))
    return found


def test_every_frost_command_in_the_docs_parses(capsys):
    """Each documented command names a real subcommand and real options with valid values (the
    parser's checks: choices, types); the runs themselves are the guides' and the tests' job."""
    from frost.cli import _build_parser

    parser = _build_parser()
    commands = frost_commands()
    assert len(commands) >= 20, commands
    wrong = []
    for where, command in commands:
        try:
            with contextlib.redirect_stderr(sys.stdout):
                parser.parse_args(shlex.split(command)[1:])
        except SystemExit:
            wrong.append(f"{where}: {command}: {capsys.readouterr().out.strip()[-300:]}")
    assert not wrong, "\n".join(wrong)


@pytest.fixture(scope="module")
def browser():
    """Debian's headless Chromium through its chromedriver (no download at run time)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    yield driver
    driver.quit()


@pytest.mark.parametrize(
    "page, query, highlighted",
    [("", "audit", False), ("guides/gpt/", "tokenizer", True), ("api/optim/", "adamw", True)],
)
def test_pages_render_in_a_browser(site, browser, page, query, highlighted):
    """The home page, a guide and an API page: the navigation lists every section, the search
    (Material's, run in the page's web worker) finds matches for a query given in the address,
    and code blocks carry Pygments' token classes."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{site}/{page}?q={query}")
    assert browser.title.endswith("Frost")
    nav = [
        a.get_attribute("textContent").strip()
        for a in browser.find_elements(By.CSS_SELECTOR, "nav.md-nav a")
    ]
    assert {"Getting started", "Training on images", "frost.optim", "Benchmarks"} <= set(nav)
    results = WebDriverWait(browser, 30).until(
        lambda b: b.find_elements(By.CSS_SELECTOR, ".md-search-result__item")
    )
    assert results and query in results[0].get_attribute("textContent").lower()
    if highlighted:  # the home page has no code
        tokens = browser.find_elements(By.CSS_SELECTOR, ".highlight .kn, .highlight .nf")
        assert tokens, "no code block carries Pygments' token classes"


def test_the_readmes_test_command_is_what_ci_runs():
    """.ci/run ends with the README's test command, character for character."""
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    readme = [line for code in blocks(ROOT / "README.md", "bash") for line in code.splitlines()]
    assert ci in readme and "pytest" in ci, ci
