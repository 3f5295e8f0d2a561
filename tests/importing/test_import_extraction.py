"""`grpo import` copying what a script defines: rewards bound to the recipe model's tokenizer, only provably pure
constants, a notebook's own calls, rows built from constants; nothing of the source is ever executed."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, assert_paragraph, run_cli
from tests.importing.test_import_wild import _finishing_command

FIXTURES = ROOT / "tests" / "fixtures" / "imports"
WILD = FIXTURES / "wild"
FRESH = FIXTURES / "fresh"


TOKENIZER_SCRIPT = '''from datasets import load_dataset
from transformers import AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

MODEL = {model!r}
tokenizer = AutoTokenizer.from_pretrained(MODEL)
{change}STOP = tokenizer.eos_token
FOUND = None
for piece in tokenizer.get_vocab().keys():
    if piece == STOP:
        FOUND = piece


def shorter(completions, **kwargs):
    return [-float(len(tokenizer(c)["input_ids"])) for c in completions]


def stops(completions, **kwargs):
    return [float(c.endswith(STOP)) for c in completions]


def found(completions, **kwargs):
    return [float(FOUND is not None and FOUND in c) for c in completions]


dataset = load_dataset("json", data_files="rows.jsonl", split="train")
trainer = GRPOTrainer(model=MODEL, reward_funcs=[shorter, stops, found],
                      args=GRPOConfig(output_dir="out", max_completion_length=32),  # the model has 128 positions
                      train_dataset=dataset)
trainer.train()
'''


def test_a_reward_reading_the_scripts_tokenizer_gets_the_recipe_models(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 51: rewards that read a tokenizer the script loads at run time are extracted, the tokenizer bound to
    the one grpo trains with (the recipe's model, loaded on first use); a change the script makes to it that a
    reward reads keeps that reward refused, naming the line. A name set in a module-level loop over it is copied
    with the whole loop, never as its one assignment out of context."""
    from transformers import AutoTokenizer

    model = ROOT / "grpo_cli" / "assets" / "tiny-arith"
    monkeypatch.chdir(tmp_path)
    Path("rows.jsonl").write_text('{"prompt": "2+3"}\n{"prompt": "4+4"}\n', encoding="utf-8")
    Path("train.py").write_text(TOKENIZER_SCRIPT.format(model=str(model), change=""), encoding="utf-8")
    result = run_cli("import", "trl", "train.py", "-o", "out/recipe.yaml")
    assert result.exit_code == 0, result.output
    assert "`tokenizer` (line 6: `tokenizer = AutoTokenizer.from_pretrained(MODEL)`) is bound" in \
        " ".join(result.output.split())
    namespace: dict = {"__file__": str(tmp_path / "out" / "recipe_rewards.py")}
    exec((tmp_path / "out" / "recipe_rewards.py").read_text(encoding="utf-8"), namespace)  # as grpo imports it
    direct = AutoTokenizer.from_pretrained(model)
    completions = ["12+3=15", "no" + direct.eos_token]
    assert namespace["shorter"](completions) == [-float(len(direct(c)["input_ids"])) for c in completions]
    assert namespace["stops"](completions) == [0.0, 1.0]
    assert namespace["found"](completions) == [0.0, 1.0]  # its loop over the vocabulary, copied whole
    Path("train.py").write_text(TOKENIZER_SCRIPT.format(model=str(model), change='tokenizer.eos_token = "<e>"\n'),
                                encoding="utf-8")
    result = run_cli("import", "trl", "train.py", "-o", "changed/recipe.yaml")
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and "'stops': not extracted: it reads `tokenizer.eos_token`, and the script " \
        "changes tokenizer.eos_token (line 7)" in text
    assert run_cli("validate", "changed/recipe.yaml").exit_code == 2


def test_the_model_an_unsloth_loader_returns_beside_its_tokenizer_is_not_bound(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`model, tokenizer = FastLanguageModel.from_pretrained(...)`: only the second is the tokenizer grpo binds; a
    reward reading the model stays refused, naming it, instead of getting a tokenizer where it reads the model."""
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text(
        "from unsloth import FastLanguageModel\nfrom trl import GRPOConfig, GRPOTrainer\n"
        "model, tokenizer = FastLanguageModel.from_pretrained(model_name='Qwen/Qwen2.5-0.5B-Instruct')\n"
        "def big(completions, **kwargs):\n    return [float(model.config.vocab_size > 10) for _ in completions]\n"
        "def short(completions, **kwargs):\n    return [-float(len(tokenizer(c)['input_ids'])) for c in completions]\n"
        "trainer = GRPOTrainer(model=model, reward_funcs=[big, short], train_dataset=load_dataset('openai/gsm8k'), "
        "args=GRPOConfig(output_dir='o'))\ntrainer.train()\n", encoding="utf-8")
    result = run_cli("import", "trl", "train.py", "-o", "recipe.yaml")
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and "'big': not extracted: it uses `model`, the model the script loads (line 3: " \
        "FastLanguageModel.from_pretrained), which grpo does not bind" in text
    assert "`tokenizer` (line 3: " in text and "'short'" not in text  # the second name is bound


UNSAFE_SCRIPT = '''import os
import re

import requests
from trl import GRPOTrainer

MOVED = os.replace("data.txt", "data.bak")
REMOTE = requests.get("http://localhost:9/words").text
PATTERN = re.compile(r"<answer>(.*?)</answer>")
WORDS = ",".join(["a", "b"]).upper()
for entry in os.listdir("."):
    FIRST = entry


def first(completions, **kwargs):
    return [float(FIRST in c) for c in completions]


def moved(completions, **kwargs):
    return [float(bool(MOVED)) for _ in completions]


def remote(completions, **kwargs):
    return [float(REMOTE in c) for c in completions]


def pattern(completions, **kwargs):
    return [float(bool(PATTERN.search(c))) + len(WORDS) for c in completions]


trainer = GRPOTrainer(model="Qwen/Qwen2-0.5B-Instruct", reward_funcs=[moved, remote, pattern, first],
                      train_dataset="trl-lib/tldr")
trainer.train()
'''


def test_only_provably_pure_constants_are_copied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 46: `os.replace(...)` and `requests.get(...)` constants were copied because their attribute names are
    str/dict methods; importing the module then renamed the user's file or called the network."""
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text(UNSAFE_SCRIPT, encoding="utf-8")
    Path("data.txt").write_text("mine\n", encoding="utf-8")
    result = run_cli("import", "trl", "train.py", "-o", "recipe.yaml")
    text = " ".join(result.output.split())
    assert result.exit_code == 2
    assert "'moved': not extracted: it uses `MOVED`, set by running code (line 7: `os.replace(" in text
    assert "'remote': not extracted: it uses `REMOTE`, set by running code (line 8: `requests.get(" in text
    assert "'first': not extracted: it uses `FIRST`, set inside a statement at line 11 that calls running code" \
        in text  # a loop's assignment is never copied out of its loop
    module = (tmp_path / "recipe_rewards.py").read_text(encoding="utf-8")
    assert "os.replace" not in module and "requests" not in module and "WORDS = " in module
    namespace: dict = {}
    exec(module, namespace)  # nothing is renamed or fetched
    assert Path("data.txt").read_text() == "mine\n" and not Path("data.bak").exists()
    assert namespace["pattern"](["<answer>1</answer>", "x"]) == [4.0, 3.0]  # len("A,B") == 3


def test_a_notebooks_own_calls_are_copied_with_its_rewards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unsloth's molab Gemma 4 app: its rewards read `_STDLIB_SET = _stdlib_names()` (a scan of the interpreter's
    stdlib) and `benchmarker = Benchmarker(...)` (a class of another cell): the definitions and the assignments are
    copied in line order, with what they use (`@contextmanager` kept on a helper, the cell's own TimeoutError), and
    the module computes what the cells did. A call that would read the user's files stays a refusal naming it."""
    fixture = "unsloth-molab/Gemma4_(E2B)_GRPO.py"
    monkeypatch.chdir((FRESH / fixture).parent)
    out = tmp_path / "recipe.yaml"
    result = run_cli("import", "trl", Path(fixture).name, "-o", out)
    text = " ".join(result.output.split())
    assert result.exit_code == 0, result.output
    assert "`_STDLIB_SET = _stdlib_names()` (line 302); `benchmarker = Benchmarker(trials=3, timeout=10)` (line 804)" \
        in text
    module = (tmp_path / "recipe_rewards.py").read_text(encoding="utf-8")
    assert "@contextmanager\ndef time_limit(seconds):" in module and "class TimeoutError(Exception):" in module
    assert module.index("def _stdlib_names") < module.index("_STDLIB_SET = _stdlib_names()") \
        < module.index("def check_only_stdlib_imports")
    namespace: dict = {}
    exec(module, namespace)
    assert {"os", "ast", "json"} <= namespace["_STDLIB_SET"] and "numpy" not in namespace["_STDLIB_SET"]
    native = "```python\ndef matmul(A, B):\n" \
        "    return [[sum(a * b for a, b in zip(r, c)) for c in zip(*B)] for r in A]\n```"
    numpy = "```python\ndef matmul(A, B):\n    import numpy\n    return numpy.matmul(A, B)\n```"
    assert namespace["no_cheating"]([[{"content": native}], [{"content": numpy}]]) == [1.0, -20.0]
    zeros = "```python\ndef matmul(A, B):\n    return [[0.0] * len(B[0]) for _ in A]\n```"
    right, wrong = namespace["correctness_check"]([[{"content": native}], [{"content": zeros}]])  # random matrices
    assert right >= 2.0 and wrong < 0
    with pytest.raises(namespace["TimeoutError"]), namespace["time_limit"](0.05):
        while True:
            pass

    app = tmp_path / "app.py"
    app.write_text(_APP.replace("ROWS", '[{"prompt": [{"role": "user", "content": f"Say word {i}."}]} for i in '
                                        "range(3)]"), encoding="utf-8")
    result = run_cli("import", "trl", app, "-o", tmp_path / "app.yaml")
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and "Traceback" not in text
    assert "it uses `WORDS`, set by `read_words()` (line 12), whose code is not exact in a copy: " \
           "`open('words.txt')` (line 11) reads or changes files" in text
    pure = app.read_text(encoding="utf-8").replace('set(open("words.txt").read().split())', '{"a", "b"}')
    app.write_text(pure, encoding="utf-8")
    assert "rewards known copied exactly" in " ".join(run_cli("import", "trl", app, "-o", tmp_path / "pure.yaml")
                                                      .output.split())
    app.write_text(pure.replace("    WORDS = read_words()\n", "    WORDS = read_words()\n    WORDS.add('c')\n"),
                   encoding="utf-8")
    text = " ".join(run_cli("import", "trl", app, "-o", tmp_path / "changed.yaml").output.split())
    assert "it uses `WORDS`, set by `read_words()` (line 12), whose code is not exact in a copy: line 13 changes " \
           "it: `WORDS.add('c')`" in text


_APP = '''import marimo

app = marimo.App()


@app.cell
def _():
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    def read_words():
        return set(open("words.txt").read().split())
    WORDS = read_words()
    def known(completions, **kwargs):
        return [1.0 if c[0]["content"] in WORDS else 0.0 for c in completions]
    rows = Dataset.from_list(ROWS)
    trainer = GRPOTrainer(model="Qwen/Qwen2.5-0.5B-Instruct", reward_funcs=[known], train_dataset=rows,
                          args=GRPOConfig(output_dir="out"))
    return
'''


def test_rows_built_from_constants_are_written_beside_the_recipe(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The molab apps' `Dataset.from_list([{"prompt": [...], "answer": 0}] * 1000)`, its prompt a string of another
    cell, is evaluated without running anything and written as a JSONL beside the recipe (data.files.train); rows
    that read anything else stay refused; without -o nothing is written and the refusal says -o writes them."""
    fixture = "unsloth-molab/gpt-oss-(20B)-GRPO.py"
    monkeypatch.chdir((FRESH / fixture).parent)
    out = tmp_path / "recipe.yaml"
    result = run_cli("import", "trl", Path(fixture).name, "-o", out)
    text = " ".join(result.output.split())
    assert result.exit_code == 0 and run_cli("validate", out).exit_code == 0, result.output
    assert yaml.safe_load(out.read_text(encoding="utf-8"))["data"]["files"] == {"train": "recipe_rows.jsonl"}
    rows = [json.loads(line) for line in (tmp_path / "recipe_rows.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 1000 and all(row == rows[0] for row in rows)
    assert rows[0]["answer"] == 0 and rows[0]["reasoning_effort"] == "low"
    content = rows[0]["prompt"][0]["content"]
    assert content.startswith("Create a new fast matrix multiplication") and content.endswith("```")  # .strip()
    assert "1000 rows from constants" in text and "recipe_rows.jsonl" in text
    assert "training.chat_template_kwargs: {reasoning_effort: low}" in text  # the column TRL does not template

    alone = tmp_path / "alone"  # no recipe file: nothing written, and the printed command asks for one
    alone.mkdir()
    shutil.copy(FRESH / fixture, alone)
    monkeypatch.chdir(alone)
    printed = run_cli("import", "trl", Path(fixture).name)
    assert printed.exit_code == 2 and "with -o RECIPE.yaml the import writes them" in " ".join(printed.output.split())
    assert sorted(p.name for p in alone.iterdir()) == [Path(fixture).name]
    finished = run_cli(*shlex.split(str(_finishing_command(printed.output)))[1:])  # as printed
    assert finished.exit_code == 0 and (alone / "recipe_rows.jsonl").exists(), finished.output
    monkeypatch.chdir((FRESH / fixture).parent)
    given = run_cli("import", "trl", Path(fixture).name, "data.dataset=openai/gsm8k", "-o", tmp_path / "other.yaml")
    assert not (tmp_path / "other_rows.jsonl").exists() and "not written" in given.output

    app = tmp_path / "app.py"
    app.write_text(_APP.replace("ROWS", '[{"prompt": [{"role": "user", "content": f"Say word {i}."}]} for i in '
                                        "range(3)]"), encoding="utf-8")
    run_cli("import", "trl", app, "-o", tmp_path / "app.yaml")
    written = (tmp_path / "app_rows.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["prompt"][0]["content"] for line in written] == ["Say word 0.", "Say word 1.",
                                                                                "Say word 2."]
    app.write_text(_APP.replace("ROWS", '[{"prompt": open("p.txt").read()}] * 3'), encoding="utf-8")
    result = run_cli("import", "trl", app, "-o", tmp_path / "read.yaml")
    assert "builds its training rows in code" in " ".join(result.output.split())
    assert not (tmp_path / "read_rows.jsonl").exists()


HOSTILE_ROWS = {  # rows a script builds that must be refused, fast and within memory: name -> (before, ROWS)
    "10**9 copies": ("", '[{"prompt": "hi"}] * 10**9'),
    "a 10 MB prompt 100,000 times": ("", '[{"prompt": "x" * 10000000}] * 100000'),
    "a new 10 MB prompt per row": ("", '[{"prompt": "x" * 10000000} for i in range(100000)]'),
    "a long list per row": ("", '[{"prompt": ["a"] * 100000} for i in range(100000)]'),
    "range(10**8)": ("", '[{"prompt": "x"} for i in range(10**8)]'),
    "a name doubled 13 times": ("A0 = 'x' * 10000000\n" + "".join(f"A{i} = A{i - 1} + A{i - 1}\n"
                                                                 for i in range(1, 14)), '[{"prompt": A13}]'),
    "a format width of 2e9": ("", '[{"prompt": "{:>2000000000}".format("a")}]'),
    "a width given as a field": ("", '[{"prompt": "{0:{1}}".format("a", 2000000000)}]'),
    "a precision of 1e8": ("", '[{"prompt": "{:.100000000f}".format(1.5)}]'),
    "replace into every gap": ("", '[{"prompt": ("x" * 10000000).replace("x", "x" * 10000000)}]'),
    "an f-string with a spec": ("", '[{"prompt": f"{1:>2000000000}"}]'),
    "rebound by def": ("P = 'a'\ndef P(): pass\n", '[{"prompt": P}] * 3'),
    "rebound by class": ("P = 'a'\nclass P: pass\n", '[{"prompt": P}] * 3'),
    "rebound by import": ("P = 'a'\nfrom os import sep as P\n", '[{"prompt": P}] * 3'),
    "rebound by except": ("P = 'a'\ntry:\n    pass\nexcept Exception as P:\n    pass\n", '[{"prompt": P}] * 3'),
    "rebound by match": ("P = 'a'\nmatch 1:\n    case P: pass\n", '[{"prompt": P}] * 3'),
    "deleted": ("P = 'a'\ndel P\n", '[{"prompt": P}] * 3'),
    "range rebound": ("range = lambda n: [1]\n", '[{"prompt": "x"} for i in range(3)]'),
    **{f"rebound by {how}": (f"P = 'a'\n{code}", '[{"prompt": P}] * 3') for how, code in (
        ("=", "P = 'b'\n"), ("+=", "P += 'b'\n"), ("for", "for P in 'bc':\n    pass\n"),
        ("global", "def f():\n    global P\n    P = 'c'\n"), ("walrus", "if (P := 'z'):\n    pass\n"),
        ("with", "with open('x') as P:\n    pass\n"))},
}


def _limited() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))  # a regression fails here, not on the machine


@pytest.mark.parametrize("case", list(HOSTILE_ROWS))
def test_rows_from_constants_are_refused_quickly_within_memory(case: str, tmp_path: Path) -> None:
    """Review of issue 51: rows a script builds that would take gigabytes (a 10 MB prompt per row, a name
    doubled, a format width of 2e9) ran `grpo import` out of memory with a traceback, and a name rebound by
    def, class, import, except, match or del was read at its first value. Each is now left refused as rows the
    importer cannot read: exit 2 within seconds under a 3 GB limit, no rows file, no traceback."""
    before, rows = HOSTILE_ROWS[case]
    app = tmp_path / "app.py"
    script = f"from datasets import Dataset\nfrom trl import GRPOConfig, GRPOTrainer\n{before}" + \
        "def known(completions, **kwargs):\n    return [1.0 for c in completions]\n" + \
        f"rows = Dataset.from_list({rows})\n" + \
        'trainer = GRPOTrainer(model="Qwen/Qwen2.5-0.5B-Instruct", reward_funcs=[known], train_dataset=rows,\n' + \
        '                      args=GRPOConfig(output_dir="out"))\n'
    app.write_text(script, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "grpo_cli", "import", "trl", str(app), "-o", str(tmp_path / "r.yaml")],
                          capture_output=True, text=True, timeout=120, preexec_fn=_limited, cwd=ROOT)
    text = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 2 and "Traceback" not in text, text
    assert "builds its training rows in code the importer cannot read" in text
    assert not (tmp_path / "r_rows.jsonl").exists()


def test_an_expression_too_deep_to_read_is_one_paragraph(tmp_path: Path) -> None:
    """Review of issue 51: `'a' + 'a' + ...` 500 times (Python runs it) or 20,000 times (Python cannot parse it)
    stopped `grpo import` with a RecursionError traceback; now one paragraph names the file."""
    for terms in (500, 20000):
        app = tmp_path / f"deep{terms}.py"
        prompt = " + ".join(["'a'"] * terms)
        app.write_text(f"from datasets import Dataset\nfrom trl import GRPOConfig, GRPOTrainer\n"
                       f"rows = Dataset.from_list([{{'prompt': {prompt}}}])\n"
                       "trainer = GRPOTrainer(model='m', reward_funcs=['r'], train_dataset=rows)\n", encoding="utf-8")
        result = run_cli("import", "trl", app, "-o", tmp_path / f"deep{terms}.yaml")
        assert_paragraph(result, app.name, "nests deeper than the importer can follow")
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"deep{n}.py" for n in (500, 20000)
                                                                     if n <= terms)


@pytest.mark.parametrize(("words", "named"), [
    ("set(getattr(__import__('os'), 'pop' + 'en')('ls').read().split())",
     "`getattr(__import__('os'), 'pop' + 'en')`"),
    ("set(getattr(os, 'pop' + 'en')('ls').read().split())", "`getattr(os, 'pop' + 'en')`"),
    ("set(getattr(os, 'popen')('ls').read().split())", "`getattr(os, 'popen')`"),
    ("set(os.environ['WORDS'].split())", "`os.environ`"),
    ("set(os.execvp('ls', ['ls']) or ())", "`os.execvp('ls', ['ls'])`"),
])
def test_a_notebook_call_that_reaches_outside_by_name_is_not_copied(words: str, named: str, tmp_path: Path) -> None:
    """Review of issue 51: a global the notebook's own call makes was copied (and so made again when the rewards
    module is imported) though the call ran a process or read the environment through a computed attribute name,
    `os.environ[...]` or os's exec family; each now stays refused naming the line. A literal `getattr(sys,
    'stdlib_module_names', set())`, as the molab app's stdlib scan reads, is still copied."""
    app = tmp_path / "app.py"
    source = _APP.replace("ROWS", '[{"prompt": "x"}] * 3').replace("    def read_words():", "    import os\n"
                                                                     "    import sys\n    def read_words():")
    app.write_text(source.replace('set(open("words.txt").read().split())', words), encoding="utf-8")
    text = " ".join(run_cli("import", "trl", app, "-o", tmp_path / "app.yaml").output.split())
    assert f"whose code is not exact in a copy: {named} (line" in text, text
    assert not (tmp_path / "app_rewards.py").exists()
    app.write_text(source.replace('set(open("words.txt").read().split())',
                                  "set(getattr(sys, 'stdlib_module_names', set())) & {'os'}"), encoding="utf-8")
    assert "rewards known copied exactly" in " ".join(run_cli("import", "trl", app, "-o", tmp_path / "ok.yaml")
                                                      .output.split())


def test_a_rows_file_of_the_users_is_never_replaced(tmp_path: Path) -> None:
    """Review of issue 51: RECIPE_rows.jsonl beside -o holding other rows is the user's: the import is refused in
    one paragraph, with --force too, and nothing is written (recipe, rewards module, rows)."""
    app = tmp_path / "app.py"
    app.write_text(_APP.replace("ROWS", '[{"prompt": "x"}] * 3').replace('set(open("words.txt").read().split())',
                                                                         '{"a"}'), encoding="utf-8")
    mine = tmp_path / "app_rows.jsonl"
    mine.write_text('{"prompt": "mine"}\n', encoding="utf-8")
    for force in ((), ("--force",)):
        assert_paragraph(run_cli("import", "trl", app, "-o", tmp_path / "app.yaml", *force), "app_rows.jsonl",
                         "exists with other content")
        assert mine.read_text(encoding="utf-8") == '{"prompt": "mine"}\n'
        assert sorted(p.name for p in tmp_path.iterdir()) == ["app.py", "app_rows.jsonl"]
