import json

from lengthgen_lite.runs.claims import Margin
from margins_report import main


def write(folder, run, rows):
    (folder / run).mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps(Margin(key, "s", "every seed", slack, spread, 5, 0).__dict__)
        for key, slack, spread in rows
    ]
    (folder / run / "01_x.jsonl").write_text("\n".join(lines) + "\n")


def test_claims_with_a_spread_of_slack_on_both_runs_pass(tmp_path, capsys):
    write(tmp_path, "stored-outputs", [("a", 0.3, 0.1), ("b", 1.0, 0.0)])
    write(tmp_path, "new-seeds", [("a", 0.2, 0.1), ("b", 1.0, 0.0)])
    assert main(str(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "2 claims; smallest slack 2.00 seed spreads" in out


def test_a_knife_edge_on_new_seeds_fails_the_report(tmp_path, capsys):
    write(tmp_path, "stored-outputs", [("a", 0.3, 0.1)])
    write(tmp_path, "new-seeds", [("a", 0.05, 0.1)])
    assert main(str(tmp_path)) == 1
    assert "below 1 spread" in capsys.readouterr().out


def test_a_claim_missing_from_a_run_fails_the_report(tmp_path, capsys):
    write(tmp_path, "stored-outputs", [("a", 0.3, 0.1)])
    write(tmp_path, "new-seeds", [("b", 0.3, 0.1)])
    assert main(str(tmp_path)) == 1
    assert "missing a run: a, b" in capsys.readouterr().out


def test_no_margins_says_how_to_make_them(tmp_path, capsys):
    assert main(str(tmp_path)) == 1
    assert "make nbval" in capsys.readouterr().out
