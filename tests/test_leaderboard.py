"""The CPU leaderboard (a5core/report/leaderboard.py) from hand-made curve tables: one clock from the base model,
the horizon, the cells at its fractions, and the runs left out."""

from a5core.report.leaderboard import draw_leaderboard, entries, horizon, leaderboard_markdown

HEADER = "run,{x},accuracy,accuracy_lo,accuracy_hi,questions,wall_s\n"


def _tables(curves):
    curves.mkdir()
    (curves / "sft_validation.csv").write_text(
        HEADER.format(x="step") + "warm,0,0.0,0.0,0.1,8,0\nwarm,2,0.2,0.1,0.3,8,50\n"
        "filtered,0,0.0,0.0,0.1,8,0\nfiltered,4,0.3,0.1,0.5,4,60\nfiltered,8,0.4,0.2,0.6,8,120\n"
    )
    (curves / "ei_validation.csv").write_text(
        HEADER.format(x="round") + "G4,0,0.2,0.1,0.3,8,0\nG4,1,0.3,0.2,0.4,8,30\nG4,2,0.5,0.3,0.7,8,70\n"
    )
    (curves / "grpo_validation.csv").write_text(
        HEADER.format(x="step") + "r,0,0.2,0.1,0.3,8,0\nr,2,0.25,0.1,0.4,8,40\nr,4,0.35,0.2,0.5,8,100\n"
        "r (seed 1),0,0.2,0.1,0.3,8,0\nlate,0,0.2,0.1,0.3,8,0\n"
    )


STARTS = {"ei/G4": "sft_warm", "grpo/r": "sft_warm", "grpo/late": "ei_G4/round_9"}


def test_runs_share_one_clock_from_the_base_model(tmp_path):
    _tables(tmp_path / "curves")
    board, left_out = entries(tmp_path / "curves", STARTS)
    walls = {(e.method, e.run): [p.wall_s for p in e.points] for e in board}
    assert walls == {
        ("SFT", "warm"): [0, 50],
        ("SFT", "filtered"): [0, 60, 120],
        ("EI", "G4"): [50, 80, 120],  # from warm's end
        ("GRPO", "r"): [50, 90, 150],
    }
    assert left_out == ["GRPO late: it starts from models/ei_G4/round_9, which no run on the board made"]
    assert horizon(board) == 120  # SFT's and EI's longest: 120 s; GRPO's 150 s


def test_the_table_takes_each_runs_last_whole_set_validation_by_each_budget(tmp_path):
    _tables(tmp_path / "curves")
    board, left_out = entries(tmp_path / "curves", STARTS)
    text = leaderboard_markdown(board, left_out, "figures")
    rows = {line.split(" | ")[1]: line.split(" | ")[3:8] for line in text.splitlines() if line.startswith("| ")}
    assert "| method | run | starts from | 30 s | 60 s | 90 s | 120 s | its end |" in text
    # filtered at 60 s: its 60-s point scored the mid-run subset (4 of 8 questions), so its step 0 stands
    assert rows["filtered"][:4] == [  # 30 s: SFT's only, all at 0: a tie, each in bold
        "**0.000 (0.000–0.100)**",
        "0.000 (0.000–0.100)",
        "0.000 (0.000–0.100)",
        "0.400 (0.200–0.600)",
    ]
    assert rows["G4"][:4] == ["—", "**0.200 (0.100–0.300)**", "**0.300 (0.200–0.400)**", "**0.500 (0.300–0.700)**"]
    assert rows["r"][3] == "0.250 (0.100–0.400)" and rows["r"][4] == "0.350 at 150 s |"
    assert (
        "At 120 s, EI G4 leads with 0.500; its 95% interval overlaps those of SFT warm, SFT filtered, GRPO r:" in text
    )
    assert "Left out: GRPO late: it starts from models/ei_G4/round_9, which no run on the board made." in text


def test_the_figure_draws_every_run(tmp_path):
    _tables(tmp_path / "curves")
    board, _ = entries(tmp_path / "curves", STARTS)
    assert draw_leaderboard(board, tmp_path / "figures" / "leaderboard.png").stat().st_size > 0
    assert draw_leaderboard([], tmp_path / "none.png") is None and leaderboard_markdown([], [], "f") == ""
