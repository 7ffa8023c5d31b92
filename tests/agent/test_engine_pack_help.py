"""`llmgw engine pack --help` says what it makes in whole sentences."""

from __future__ import annotations

import pytest

from llmgw.cli.engine_pack import main


def test_help_says_the_whole_sentence(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert (
        "Make a release-shaped engine archive from a local build, for a site whose nodes "
        "cannot reach the internet (and for the demo)." in text
    )
    assert "--out OUT folder to write into" in text
