"""Option values that would train on nonsense or end in a traceback: refused up front."""

import pytest

from attnkit.cli.main import main


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("--label-smoothing", "-0.5", "invalid number in [0, 1) value: '-0.5'"),
        ("--label-smoothing", "2", "invalid number in [0, 1) value: '2'"),
        ("--lr", "inf", "invalid learning rate in (0, 10] value: 'inf'"),
        ("--lr", "nan", "invalid learning rate in (0, 10] value: 'nan'"),
        ("--lr", "0", "invalid learning rate in (0, 10] value: '0'"),
        ("--lr", "1e30", "invalid learning rate in (0, 10] value: '1e30'"),
        ("--lr", "1e300", "invalid learning rate in (0, 10] value: '1e300'"),
        ("--plot", "-1", "invalid non-negative int value: '-1'"),
        ("--warmup", "-5", "invalid non-negative int value: '-5'"),
        ("--time-budget", "-1", "invalid positive number value: '-1'"),
        ("--dropout", "1.5", "invalid number in [0, 1) value: '1.5'"),
        # issue 57: accepted, then a step of 10^12 batches (and SIGTERM unheard for 14 minutes)
        ("--accumulate", "1000000000000", "invalid int in [1, 4096] value: '1000000000000'"),
        ("--accumulate", "0", "invalid int in [1, 4096] value: '0'"),
    ],
)
def test_out_of_range_training_options_are_usage_errors(tmp_path, capsys, option, value, message):
    with pytest.raises(SystemExit) as exc:
        main(["train", "translate", "--out", str(tmp_path / "r"), option, value])
    assert exc.value.code == 2
    assert f"argument {option}: {message}" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


LOUDNESS = "invalid loudness range (LOW,HIGH, ints with 1 <= LOW <= HIGH <= 200) value"


@pytest.mark.parametrize(
    "option, value, message",
    [
        *(("--espeak-consonants", v, LOUDNESS) for v in ("20,10", "0,50", "20,201", "20", "a,b")),
        *(("--say-oh", v, "invalid probability in [0, 1] value") for v in ("1.5", "-0.1", "nan")),
    ],
)
def test_out_of_range_speech_options_are_usage_errors(tmp_path, capsys, option, value, message):
    with pytest.raises(SystemExit) as exc:
        main(["train", "asr", "--out", str(tmp_path / "r"), option, value])
    assert exc.value.code == 2
    assert f"argument {option}: {message}: '{value}'" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "given, named",
    [
        (["--engines", "festival"], "--engines festival"),
        (["--train", "corpus.tsv"], "--train corpus.tsv"),
    ],
)
def test_espeak_consonants_without_espeak_speech_are_refused(tmp_path, capsys, given, named):
    assert (
        main(["train", "asr", "--out", str(tmp_path / "r"), "--espeak-consonants", "10,50", *given])
        == 2
    )
    assert capsys.readouterr().err == (
        "attnkit: --espeak-consonants: only espeak-ng's "
        f"built-in training speech takes it (got {named})\n"
    )
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("task", ["translate", "ocr", "asr"])
def test_valid_without_train_is_refused(tmp_path, capsys, task):
    assert main(["train", task, "--valid", str(tmp_path / "v"), "--out", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err == (
        "attnkit: --valid: only with --train (the built-in data has its own validation split)\n"
    )
    assert not (tmp_path / "r").exists()


def test_schedule_option_reaches_the_trainer():
    from attnkit.cli.common import training_config
    from attnkit.cli.main import build_parser
    from attnkit.train import lr_factor

    args = build_parser().parse_args(
        [
            "train",
            "translate",
            "--out",
            "r",
            "--steps",
            "50",
            "--warmup",
            "5",
            "--schedule",
            "cosine",
        ]
    )
    config = training_config(args, data_workers=0)  # the command resolves the default
    assert config.schedule == "cosine"
    assert lr_factor(4, config) == 1.0 and lr_factor(49, config) < 1e-2
    default = training_config(
        build_parser().parse_args(["train", "ocr", "--out", "r"]), data_workers=0
    )
    assert default.schedule == "inverse_sqrt"


def test_unknown_schedule_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", "asr", "--out", str(tmp_path / "r"), "--schedule", "linear"])
    assert exc.value.code == 2
    assert "argument --schedule: invalid choice: 'linear'" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_a_model_too_big_for_the_memory_is_one_line(tmp_path, capsys):
    assert (
        main(
            [
                "train",
                "translate",
                "--out",
                str(tmp_path / "r"),
                "--hidden",
                "100000000",
                "--n-train",
                "20",
                "--steps",
                "1",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("attnkit: model config: seq2seq has ") and err.count("\n") == 1
    assert "hidden=100000000" in err


@pytest.mark.parametrize(
    "options, expected",
    [
        (["--sample", "2", "--temperature", "inf"], "a number in [0.001, 1000]"),
        (["--sample", "2", "--temperature", "nan"], "a number in [0.001, 1000]"),
        # a traceback from torch.multinomial; an error that named no option
        (["--sample", "2", "--temperature", "1e-300"], "a number in [0.001, 1000]"),
        (["--sample", "2", "--temperature", "1e300"], "a number in [0.001, 1000]"),
        (["--sample", "2", "--seed", str(2**64)], "None or an int in [0, 2**63 - 1]"),
        (["--sample", "2", "--top-p", "nan"], r"a probability in (0, 1]"),
        # finite, but past float32 once applied: "2001-03-33" for "2001-03-03", exit 0
        (["--length-penalty", "100"], "a number in [0, 10]"),
        (["--coverage-penalty", "1e38"], "a number in [0, 100]"),
    ],
)
def test_decoding_options_out_of_range_are_refused_by_name_by_every_verb(
    tmp_path, capsys, options, expected
):
    for args in (
        ["translate", "--checkpoint", "builtin:translate-dates", "3 March 2001"],
        ["export", "--checkpoint", "builtin:translate-dates", "--out", str(tmp_path / "e")],
    ):
        assert main([*args, *options]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"attnkit: {options[-2]}: expected {expected}, got ")
        assert err.count("\n") == 1
    assert not (tmp_path / "e").exists()


def test_max_len_past_the_one_cap_is_refused_by_every_task(tmp_path, capsys):
    wav = tmp_path / "a.wav"
    wav.write_bytes(b"")  # never read: the option is refused first
    for args in (
        ["translate", "--checkpoint", "builtin:translate-dates", "3 March 2001"],
        ["transcribe", "--checkpoint", "builtin:asr-digits", str(wav)],
        ["read", "--checkpoint", "builtin:ocr-lines", str(tmp_path / "a.png")],
    ):
        assert main([*args, "--max-len", "10000000", "--no-loop-stop"]) == 2
        assert capsys.readouterr().err == (
            "attnkit: --max-len: expected None or an int in [1, 10000], got 10000000\n"
        )


def test_model_options_of_another_model_are_refused_by_name(tmp_path, capsys):
    assert (
        main(
            [
                "train",
                "translate",
                "--model",
                "bahdanau",
                "--heads",
                "4",
                "--layers",
                "9",
                "--ff",
                "7",
                "--out",
                str(tmp_path / "r"),
            ]
        )
        == 2
    )
    assert capsys.readouterr().err == (
        "attnkit: --model bahdanau: does not take --heads "
        "(transformer), --layers (transformer), --ff "
        "(transformer)\n"
    )
    assert (
        main(
            [
                "train",
                "translate",
                "--model",
                "transformer",
                "--emb",
                "32",
                "--enc-hidden",
                "16",
                "--input-feeding",
                "--out",
                str(tmp_path / "r"),
            ]
        )
        == 2
    )
    assert capsys.readouterr().err == (
        "attnkit: --model transformer: does not take --emb "
        "(bahdanau or luong or none), --enc-hidden (bahdanau or luong or none), "
        "--input-feeding (luong)\n"
    )
    assert not (tmp_path / "r").exists()
