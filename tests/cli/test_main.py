"""The ``attnkit`` command line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_demo_writes_the_pngs_it_prints(tmp_path, capsys):
    out_dir = tmp_path / "demo"
    assert main(["demo", "--out", str(out_dir), "--time-budget", "3", "--n-train", "500"]) == 0
    out = capsys.readouterr().out

    written = [Path(p) for p in re.findall(r"^\s*wrote (.+?)\s*$", out, flags=re.MULTILINE)]
    assert sorted(p.name for p in written) == ["self_attention_window.png", "translation_0.png",
                                                "translation_1.png"]
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
