"""Text that comes from boards, qdl or other stations is shown as text: never markup, never terminal controls."""

from __future__ import annotations

from provisioner.cli import main
from provisioner.station.records import Records


def test_history_shows_markup_and_escape_sequences_from_a_record_as_plain_text(tmp_path, capsys):
    db = tmp_path / "station.db"
    with Records(db) as rec:
        aid = rec.start_attempt("0AA94E00", slot="slot 0", board="iq-8275-evk", release_id="r1", artifacts={},
                                qdl_version="qdl 2.5", log_path=None)
        rec.finish_attempt(aid, "failed", error="closing [/x] tag [bold]b[/bold] \x1b]0;owned\x07\x1b[31mred\x9b")
    assert main(["station", "history", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "closing [/x] tag [bold]b[/bold]" in out
    assert "]0;owned" in out and "[31mred" in out     # the text stays, its control characters do not
    assert not any(ch in out for ch in "\x1b\x07\x9b")
