"""Bad input: every case of tests/bad_inputs.py is run through ``minionsrl train`` and the exact error it gets is
tabled in docs/RELIABILITY.md (section ``bad-input``), so the table stays true. tests/test_bad_input.py runs the
same cases and checks each is one line on stderr, exit code 2, naming its field.

    .venv/bin/python bench/bad_input.py
"""

from __future__ import annotations

import shlex
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    here = Path(__file__).resolve().parent
    sys.path[:0] = [str(here), str(here.parent / "tests")]
    from bad_inputs import CASES, FAST, prepare, run_case  # the cases tests/test_bad_input.py checks
    from common import ROOT, markdown_table, provenance, write_section

    started = time.time()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        prepare(workdir)
        for case in CASES:
            rc, err = run_case(case, workdir)
            shown = " ".join(shlex.quote(a) for a in case.flags)
            files = "; ".join(f"`{n}`: `{t.strip()}`" for n, t in case.files.items())
            what = f"`{shown}`" + (f" ({files})" if files else "") + (f" — {case.note}" if case.note else "")
            rows.append([case.field, what, rc, "`` " + err.strip().replace("|", "\\|") + " ``"])  # may hold a `
            print(f"{rc} {err.strip()}")
    text = "\n".join([
        "## Bad input: what each gets",
        "",
        f"Each input was given to `minionsrl train` (after fast defaults `{' '.join(FAST)} --run-dir run` for a "
        "fresh run) in a scratch directory; the error column is the exact stderr. Every case stops before any "
        "work starts, with exit code 2 and one line naming the field and the fix. `tests/test_bad_input.py` runs "
        "the same cases.",
        "",
        markdown_table(["field", "input", "exit", "error"], rows),
        "",
        provenance(started),
    ])
    write_section("bad-input", text, doc=ROOT / "docs" / "RELIABILITY.md")


if __name__ == "__main__":
    main()
