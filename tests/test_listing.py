"""`labctl list` reads the labs from `labctl/data/labs.json`, not by importing them: the file
must say what the labs declare (regenerate it with `python -m labctl.listing >
labctl/data/labs.json` after adding or changing a lab)."""

from __future__ import annotations

import json
import subprocess
import sys

from labctl import listing, registry


def test_the_index_says_what_the_labs_declare():
    assert listing.index() == listing.from_labs(), (
        "labctl/data/labs.json is stale: `python -m labctl.listing > labctl/data/labs.json`"
    )
    assert [lab["id"] for lab in listing.index()["labs"]] == [lab.id for lab in registry.discover()]


def test_the_index_is_a_copy_each_time():
    first = listing.index()
    first["labs"][0]["title"] = "changed"
    assert listing.index()["labs"][0]["title"] != "changed"


def test_list_imports_no_lab():
    code = (
        "import sys; sys.argv = ['labctl', 'list', '--json']; from labctl.cli.main import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print([m for m in sys.modules if m.startswith('labctl.labs.')], file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout)["labs"]
    assert done.stderr.strip().splitlines()[-1] == "[]"
