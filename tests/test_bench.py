"""The benchmark report: which machine measured which rows, and hand-written notes kept."""

from attnkit.bench import NOTES_MARK, Case, Result, write_report


def _result(group, impl, machine, train_s):
    case = Case(group, impl, b=8, t=800, steps=100 if group == "decoder" else 0)
    return Result(case.__dict__, case.name, impl, train_s=train_s, forward_s=train_s / 3,
                  train_mb=10.0, forward_mb=1.0, command=f"attnkit bench --group {group}",
                  date="2026-11-22", commit="abc1234", machine=machine)


def test_report_names_the_machine_of_each_run_and_keeps_the_notes(tmp_path):
    md, js = tmp_path / "b.md", tmp_path / "b.json"
    md.write_text(f"old report\n{NOTES_MARK}\nHand-written analysis.\n")
    results = [_result("self", "auto", "CPU one; 2 cores", 0.3),
               _result("decoder", "loop", "CPU two; 2 cores", 0.9),
               _result("decoder", "auto", "CPU two; 2 cores", 0.6)]
    write_report(results, js, md)
    text = md.read_text()
    assert "- `attnkit bench --group self` (2026-11-22, commit abc1234, CPU one; 2 cores): " \
           "groups self" in text
    assert "- `attnkit bench --group decoder` (2026-11-22, commit abc1234, CPU two; 2 cores): " \
           "groups decoder" in text
    assert "Additive decoder, 100 steps over Tk=800: memory 10 vs 10 MiB, time 0.60 vs 0.90 s" \
           in text
    assert text.endswith(f"{NOTES_MARK}\nHand-written analysis.\n")
    assert "old report" not in text
