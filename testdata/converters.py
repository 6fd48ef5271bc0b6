"""The converter process's stand-ins for the tests (``ConverterProcess(make)``), in a module of
their own: spawn imports a stand-in's module in each child it starts, and this one imports
arxiv_mcp alone (the test module brings pytest and hypothesis: 0.6 s more a start)."""

import os
import re
import sys
import time
from pathlib import Path

import arxiv_mcp as am


def quick_page(doc, page, hidden=None):
    """A page at once, with no layout model: its text layer."""
    return am.PageMarkdown(am._pdf_page(doc, page).get_text())


def hold_the_interpreter():
    """Busy for a second or two in C code that keeps the GIL throughout (a regular expression's
    backtracking), as MuPDF and the layout model keep it for long stretches."""
    re.fullmatch(r"(a|aa)*c", "a" * 36)


class QuickConverter(am.Converter):
    """The converter process's stand-in: each page its text layer at once."""

    def __init__(self):
        super().__init__()
        self.convert_page = quick_page


class BusyConverter(am.Converter):
    """The converter process's stand-in: each page holds its interpreter for a second or two, then
    is its text layer."""

    def __init__(self):
        super().__init__()
        self.convert_page = lambda doc, page, hidden: (
            hold_the_interpreter() or quick_page(doc, page)
        )


class HangingConverter(QuickConverter):
    """Its second page never ends, as MuPDF stuck on a PDF."""

    def page(self, key, pdf, page, hidden):
        if page == 2:
            time.sleep(60)
        return super().page(key, pdf, page, hidden)


class StuckConverter(QuickConverter):
    """Each page takes a minute, as the layout model on a page it struggles with; the file
    ``STUCK_PAGE`` names says that one has begun."""

    def page(self, key, pdf, page, hidden):
        Path(os.environ["STUCK_PAGE"]).touch()
        time.sleep(60)


class KilledConverter(QuickConverter):
    """Each page writes its process's id in the file ``CONVERTING`` names, then takes a moment:
    long enough for a test to kill the process mid-job."""

    def page(self, key, pdf, page, hidden):
        Path(os.environ["CONVERTING"]).write_text(str(os.getpid()))
        time.sleep(0.1)
        return super().page(key, pdf, page, hidden)


class AbortingConverter(QuickConverter):
    """1111.2011v2's pages abort the process, as a PDF that makes MuPDF crash would; each attempt
    is a line in the file ``ATTEMPTS`` names."""

    def page(self, key, pdf, page, hidden):
        if key[0] == "1111.2011v2":
            with open(os.environ["ATTEMPTS"], "a") as attempts:
                attempts.write(f"page {page}\n")
            os.abort()
        return super().page(key, pdf, page, hidden)


def _converter_without_pymupdf():
    """Called where a converter process unpickles its ``make`` (``WithoutPymupdf``), before the
    process imports pymupdf: from then on pymupdf cannot be imported there, as on a machine
    without it."""
    sys.modules["pymupdf"] = None
    return am.Converter


class WithoutPymupdf:
    """A ``make`` for a converter process on a machine without pymupdf: the plain Converter, in a
    process where ``import pymupdf`` fails (the test process keeps its own)."""

    def __reduce__(self):
        return _converter_without_pymupdf, ()
