"""The ``attnkit`` command line."""

from __future__ import annotations

import importlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tomllib

import attnkit
from attnkit import SCORES
from attnkit.cli.main import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.strip() == f"attnkit {attnkit.__version__}"
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", attnkit.__version__)


def test_help(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: attnkit")
    for word in ("demo", "--version", "--verbose"):
        assert word in out


def test_demo_help(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: attnkit demo")
    for option in ("--out", "--seed", "--time-budget", "--n-train"):
        assert option in out


def test_no_command_prints_help_and_returns_2(capsys):
    assert main([]) == 2
    out = capsys.readouterr().out
    assert out.startswith("usage: attnkit")
    assert "demo" in out


def test_unknown_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["fly"])
    assert exc.value.code == 2
    assert "invalid choice: 'fly'" in capsys.readouterr().err


def test_bad_option_value_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--time-budget", "many"])
    assert exc.value.code == 2
    assert "--time-budget" in capsys.readouterr().err


def test_module_entry_point_exits_with_main_status():
    """``python -m attnkit.cli.main`` passes main's return value to the shell."""
    proc = subprocess.run(
        [sys.executable, "-m", "attnkit.cli.main"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert proc.stdout.startswith("usage: attnkit")


# Installed by the subprocesses below (sitecustomize runs at start-up): holds the first import of
# torch until the test, told by the file $READY, sends its SIGINT, which arrives in the sleep.
HOLD_TORCH = """
import os, sys, time

class HoldTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            sys.meta_path.remove(self)
            open(os.environ["READY"], "w").close()
            time.sleep(120)
        return None

sys.meta_path.insert(0, HoldTorch())
"""
ROOT = Path(__file__).resolve().parents[2]


def _console_script() -> str:
    """What pip's ``attnkit`` script runs: the entry point pyproject.toml declares."""
    target = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["attnkit"]
    module, function = target.split(":")
    return f"import sys\nfrom {module} import {function}\nsys.exit({function}())"


def _sigint_at_its_default() -> None:
    """A terminal's Ctrl-C reaches a program with SIGINT at its default, also when the tests
    were started with SIGINT ignored (``pytest &`` in a script), which Python would inherit."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupted_while_torch_loads(tmp_path, *command) -> subprocess.CompletedProcess:
    """Run ``python *command`` and send it SIGINT while it imports torch."""
    (tmp_path / "sitecustomize.py").write_text(HOLD_TORCH)
    ready = tmp_path / "ready"
    path = [str(tmp_path), str(Path(attnkit.__file__).parents[1]), os.environ.get("PYTHONPATH")]
    env = {**os.environ, "READY": str(ready), "PYTHONPATH": os.pathsep.join(filter(None, path))}
    proc = subprocess.Popen(
        [sys.executable, *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=_sigint_at_its_default,
    )
    deadline = time.monotonic() + 120
    while not ready.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "torch was never imported"
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize("entry", ["console script", "python -m attnkit"])
def test_ctrl_c_while_pytorch_loads_is_one_line_and_status_130(tmp_path, entry):
    command = ["-c", _console_script()] if entry == "console script" else ["-m", "attnkit"]
    proc = _interrupted_while_torch_loads(tmp_path, *command, "translate", "--help")
    assert (proc.returncode, proc.stdout, proc.stderr) == (130, "", "attnkit: interrupted\n")


def test_ctrl_c_while_the_library_loads_pytorch_stays_a_keyboard_interrupt(tmp_path):
    """A library user's Ctrl-C is theirs to handle (an interactive session must not exit)."""
    code = (
        "import attnkit\ntry:\n    attnkit.Attention\nexcept KeyboardInterrupt:\n"
        "    print('caught')"
    )
    proc = _interrupted_while_torch_loads(tmp_path, "-c", code)
    assert (proc.returncode, proc.stdout) == (0, "caught\n")


def test_importing_attnkit_and_its_entry_point_loads_no_torch():
    code = (
        "import sys, attnkit, attnkit.cli.main\n"
        "assert 'torch' not in sys.modules, 'torch'\n"
        "print(attnkit.__version__, attnkit.Attention.__name__, 'torch' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout == f"{attnkit.__version__} Attention True\n", proc.stderr


def test_no_exported_name_is_also_a_module_of_the_package():
    """Every name ``attnkit`` exports is the documented object whatever was imported first:
    no submodule is named like a function or class the package exports."""
    package = Path(attnkit.__file__).parent
    modules = {p.stem for p in package.rglob("*.py")} | {
        p.name for p in package.rglob("*") if p.is_dir()
    }
    for name in ("attention", "diagnose", "ops", "tasks"):
        importlib.import_module(f"attnkit.{name}")
    assert set(attnkit.__all__) & modules == set()
    from attnkit import attend, doctor, plot_attention

    assert attend is attnkit.attention.attend and callable(attend)
    assert doctor is attnkit.diagnose.doctor and callable(doctor)
    assert plot_attention is attnkit.diagnose.plot_attention
    assert set(attnkit.__all__) <= set(dir(attnkit))
    with pytest.raises(AttributeError, match=r"^module 'attnkit' has no attribute 'nope'$"):
        attnkit.nope  # noqa: B018


def test_demo_writes_the_pngs_it_prints(tmp_path, capsys):
    out_dir = tmp_path / "demo"
    assert main(["demo", "--out", str(out_dir), "--time-budget", "3", "--n-train", "500"]) == 0
    out = capsys.readouterr().out

    written = [Path(p) for p in re.findall(r"^\s*wrote (.+?)\s*$", out, flags=re.MULTILINE)]
    assert sorted(p.name for p in written) == [
        "self_attention_window.png",
        "translation_0.png",
        "translation_1.png",
    ]
    for path in written:
        assert path.parent == out_dir
        data = path.read_bytes()
        assert data[:8] == PNG_MAGIC
        assert len(data) > 1000
    assert sorted(p for p in out_dir.iterdir() if p.suffix == ".png") == sorted(written)
    assert (out_dir / "translate" / "checkpoint" / "model.safetensors").exists()
    assert re.search(r"held-out \(300 unseen pairs\): exact match \d+\.\d%", out)

    # The score tour: one line per score, rows summing to 1 and no weight on padding.
    for score in SCORES:
        line = re.search(rf"^\s*{score}\s+context .*$", out, flags=re.MULTILINE)
        assert line is not None, f"no demo line for score {score!r}"
        assert "row sums 1.0000..1.0000" in line.group(0)
        assert "weight on padding 0.0" in line.group(0)


def test_a_signal_during_the_demo_s_training_ends_the_demo(tmp_path, capsys, monkeypatch):
    import signal

    from attnkit.cli import demo
    from attnkit.train import TrainResult

    monkeypatch.setattr(
        demo.Trainer, "fit", lambda self: TrainResult(3, "signal", None, [], signal.SIGINT)
    )
    assert (
        main(["demo", "--out", str(tmp_path / "demo"), "--time-budget", "3", "--n-train", "200"])
        == 130
    )
    captured = capsys.readouterr()
    assert "stopped by SIGINT after 3 steps of the demo's training" in captured.err
    assert "held-out" not in captured.out and "800" not in captured.out.split("2. ")[-1]


@pytest.mark.parametrize(
    "argv, seed", [([], 0), (["--seed", "4"], 4), (["--seed", "4", "--data-seed", "9"], 9)]
)
def test_data_seed_draws_the_built_in_data_and_defaults_to_the_seed(
    argv, seed, monkeypatch, tmp_path
):
    """--data-seed draws the built-in examples of every task, so that runs of several seeds
    share one set (and its cache); the run's own randomness keeps --seed."""
    from attnkit.cli import asr, images, ocr, translate
    from attnkit.cli.main import build_parser

    seen, folders = {}, []

    def record(name):
        def draw(n, *, split, seed, **kw):
            seen[name, split] = seed
            return []

        return draw

    monkeypatch.setattr(asr, "speech_dataset", record("asr"))
    monkeypatch.setattr(translate, "generate_pairs", record("translate"))
    monkeypatch.setattr(images, "generate_scenes", record("scenes"))
    monkeypatch.setattr(ocr, "iter_lines", record("lines"))
    monkeypatch.setattr(ocr, "write_line_folder", lambda lines, folder: folders.append(folder))
    monkeypatch.setattr(ocr, "read_line_folder", lambda folder, labels: [])
    parse = build_parser().parse_args
    asr._speech(parse(["train", "asr", "--out", str(tmp_path), *argv]), True)
    translate._pairs(parse(["train", "translate", "--out", str(tmp_path), *argv]))
    images.built_in_scenes(parse(["train", "caption", "--out", str(tmp_path), *argv]), 32)
    lines = parse(["train", "ocr", "--out", str(tmp_path), *argv])
    for split in ("train", "valid"):
        ocr._built_in(lines, split, 5, 1, 20)
    assert seen == {
        (task, split): seed
        for task in ("asr", "translate", "scenes", "lines")
        for split in ("train", "valid")
    }
    assert len(folders) == 2 and all(f"-seed{seed}-" in f.name for f in folders)  # cache names


def test_eval_with_standard_output_closed_fails_naming_it(tmp_path):
    # it exited 0 with its scores lost (Python makes sys.stdout None when fd 1 is closed)
    data = tmp_path / "pairs.tsv"
    data.write_text("<en> 3 March 2001\t2001-03-03\n", encoding="utf-8")
    done = subprocess.run(
        f'"{sys.executable}" -m attnkit eval --checkpoint '
        f'builtin:translate-dates --data "{data}" >&-',
        shell=True,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr == (
        "attnkit: standard output is closed; eval prints its results there: "
        "redirect it to a file (or to /dev/null to discard them)\n"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["translate", "--checkpoint", "builtin:translate-dates", "<en> 3 March 2001"],
        ["transcribe", "--checkpoint", "builtin:asr-digits", "a.wav"],
        ["plan", "--tq", "8", "--dim", "4"],
    ],
)
def test_the_verbs_that_print_results_refuse_a_closed_standard_output(capsys, monkeypatch, argv):
    # translate and transcribe ended in an AttributeError
    monkeypatch.setattr(sys, "stdout", None)
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"attnkit: standard output is closed; {argv[0]} prints "
        "its results there: redirect it to a file (or to "
        "/dev/null to discard them)\n"
    )
