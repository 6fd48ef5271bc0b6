"""Benchmark of arxiv_mcp on real arXiv PDFs, offline.

    uv run bench_arxiv_mcp.py [PDF_DIR] [--runs 3] [--interval 0] [--latency 0] [--papers ID ...]
    uv run bench_arxiv_mcp.py --agent      # an agent's session, against a plain conversion
    uv run bench_arxiv_mcp.py --check      # every corpus page: no converter debris
    uv run bench_arxiv_mcp.py --integrity  # each section holds its own text, all of it
    uv run bench_arxiv_mcp.py --twice      # every first page converts the same twice
    uv run bench_arxiv_mcp.py --html       # ../shared/html against the PDFs; memory
    uv run bench_arxiv_mcp.py --session    # search, read 3 papers at arXiv's pace, restart
    uv run bench_arxiv_mcp.py --session --throttled  # the same, the API throttled
    uv run bench_arxiv_mcp.py --pace       # that session through a real stdio server
    uv run bench_arxiv_mcp.py --hidden     # what finding hidden text costs
    uv run bench_arxiv_mcp.py --overviews  # the overviews an agent routes by
    uv run bench_arxiv_mcp.py --machine    # three stdio servers on one cache folder
    uv run bench_arxiv_mcp.py --find       # `find` over the 50 papers read, warm, restarted
    uv run bench_arxiv_mcp.py --ask        # `find` as an agent asks: evidence, cost, speed
    uv run bench_arxiv_mcp.py --stalls     # answers beside background PDF work; memory
    uv run bench_arxiv_mcp.py --listing    # a day's announcement of 2,000 papers
    uv run bench_arxiv_mcp.py --faults     # five full reads while converters are killed

Serves the PDFs of PDF_DIR (default ../shared/corpus/pdf) and an Atom entry for
each from a loopback HTTP server that stands in for arXiv, drives the real
code path (the tool function, a fresh cache for every cold read) and prints a
Markdown table of medians.  Timings are wall-clock on this machine; run it on
an otherwise idle machine.
"""

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import email.utils
import functools
import html.parser
import http.server
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import unicodedata
import unittest.mock
import urllib.parse
import zoneinfo
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from xml.sax.saxutils import escape

import arxiv_mcp as am

HERE = Path(__file__).parent
print = functools.partial(print, flush=True)  # each row as it is measured


# ---------------------------------------------------------------------------
# A loopback stand-in for arXiv and the definition of a clean text, for the benchmark and the tests
# ---------------------------------------------------------------------------

ATOM_ENTRY = """<?xml version='1.0' encoding='UTF-8'?>
<feed xmlns:opensearch="http://a9.com/-/spec/opensearch/1.1/" xmlns:arxiv="http://arxiv.org/schemas/atom"
      xmlns="http://www.w3.org/2005/Atom">
  <opensearch:totalResults>1</opensearch:totalResults>
  <opensearch:startIndex>0</opensearch:startIndex>
  <entry>
    <id>http://arxiv.org/abs/{id}</id>
    <title>Benchmark paper {id}</title>
    <updated>2020-01-01T00:00:00Z</updated>
    <published>2020-01-01T00:00:00Z</published>
    <summary>Abstract of {id}.</summary>
    <author><name>A. Author</name></author>
    <category term="cs.CL" scheme="http://arxiv.org/schemas/atom"/>
    <arxiv:primary_category term="cs.CL"/>
  </entry>
</feed>
"""


Answer = Callable[[str, dict[str, list[str]]], "tuple[bytes, str] | tuple[bytes, str, int] | None"]


def serve(
    answer: Answer, latency: float = 0.0, host: str = "127.0.0.1"
) -> http.server.ThreadingHTTPServer:
    """A loopback HTTP server standing in for arXiv: ``answer(path, query)`` gives (body, content
    type) or (body, content type, status), or None for a 404.  The tests use it too.  Another
    loopback ``host`` (127.0.0.2) stands in for another of arXiv's hosts, with a limiter slot of its
    own."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            time.sleep(latency)
            parts = urllib.parse.urlsplit(self.path)
            found = answer(parts.path, urllib.parse.parse_qs(parts.query))
            if found is None:
                self.send_error(404)
                return
            body, kind, *status = found
            self.send_response(status[0] if status else 200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer((host, 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def stand_in_settings(
    server: http.server.ThreadingHTTPServer,
    html: http.server.ThreadingHTTPServer | None = None,
    min_interval: float = 0.0,
) -> am.Settings:
    """Settings that send every request to the stand-in ``server`` (arXiv's HTML to ``html`` when
    given, as arXiv serves it from a host of its own), with a deadline no measured read meets."""
    base, html_base = (
        f"http://{s.server_address[0]}:{s.server_address[1]}" for s in (server, html or server)
    )
    return am.Settings(
        api_url=f"{base}/api/query",
        pdf_url=f"{base}/pdf/{{id}}",
        html_url=f"{html_base}/html/{{id}}",
        rss_url=f"{base}/rss/{{categories}}",
        min_interval=min_interval,
        call_seconds=600,
    )


# What a clean text never holds: the rules that `--check` applies to the whole corpus and the tests
# to the small PDFs of testdata/.
DEBRIS = {
    "U+FFFD": re.compile("\ufffd"),
    "ligature code point": re.compile("[\ufb00-\ufb06]"),
    "picture-text markup": re.compile(r"<!-- (?:Start|End) of picture text|^(?!\|).*<br>", re.M),
    "struck-through glyph": re.compile(r"~~"),
    # over 12 characters besides emphasis marks, 5 of them letters: no exponent or citation mark is
    # that long
    "superscript of glued words": re.compile(
        r"<sup>(?=(?:[^<]*?[^\W\d_]){5})(?:[*_]*[^<*_]){13,}[*_]*</sup>"
    ),
}


def debris(text: str) -> dict[str, list[str]]:
    """The DEBRIS in a text, by rule: the places (with a little context) where each rule matches.
    Superscripts side by side count as one (the converter splits a raised run of words)."""
    text = text.replace("</sup><sup>", "")
    return {
        rule: [text[max(0, m.start() - 30) : m.end() + 30] for m in pattern.finditer(text)]
        for rule, pattern in DEBRIS.items()
        if pattern.search(text)
    }


# ---------------------------------------------------------------------------
# Integrity: each section holds its own text, all of it and only it, checked against the paper
# ---------------------------------------------------------------------------

# A sentence to look for: this many words at least (a shorter piece is a label or a formula's).
MIN_SENTENCE_WORDS = 6
# The share of a sentence's runs of three words that a text must have to hold it.
MIN_SHARED = 0.75
# Letters among a sentence's other characters below this: a formula or a table row, not prose.
MIN_PROSE = 0.7
# Points: a block whose characters are mostly set this close to the paper's body size is body text;
# captions, footnotes, running heads, headings and most tables are set in other sizes.
BODY_SIZE_SLACK = 0.6
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\[])")
MARKUP = re.compile(r"<[^>\n]*>")
LATIN_END = 0x250  # the Latin letters end where Unicode's IPA extensions begin
FORMULA = re.compile(r"\$+[^$]+\$+")  # TeX math as the text of arXiv's HTML writes it


def words(text: str) -> list[str]:
    """What two readings of one text share however they mark it up, hyphenate or space it: its
    words of four letters or more, lower case, accents dropped (a formula's short symbols left
    out)."""
    # Latin letters with their accents; a math letter (𝑡, α) parts words, which the text layer
    # often runs into the word beside it ("𝑡¯𝑡production")
    latin = "".join(ch if ord(ch) < LATIN_END else " " for ch in MARKUP.sub(" ", text))
    plain = unicodedata.normalize("NFKD", latin).lower()
    return re.findall(r"[a-z]{4,}", re.sub(r"[^a-z]+", " ", plain))


def trigrams(text: str) -> dict[tuple[str, str, str], list[int]]:
    """Each run of three words in ``text`` (``words``), with where it stands (by word)."""
    found: dict[tuple[str, str, str], list[int]] = {}
    listed = words(text)
    for at in range(len(listed) - 2):
        found.setdefault((listed[at], listed[at + 1], listed[at + 2]), []).append(at)
    return found


@dataclasses.dataclass
class Integrity:
    """What the check found in one paper (or several, added up): the body sentences it looked for,
    those in their own section's text, and each one elsewhere: in another section's text
    (``displaced``: the sentence, its section, where it is), in none (``missing``), or in its own
    but before a sentence that comes ahead of it there (``disordered``); and the sections that the
    overview lists and a read cannot find (``unreadable``)."""

    sentences: int = 0
    present: int = 0
    displaced: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)
    missing: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    disordered: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    unreadable: list[str] = dataclasses.field(default_factory=list)

    def __add__(self, other: "Integrity") -> "Integrity":
        return Integrity(
            **{
                field.name: getattr(self, field.name) + getattr(other, field.name)
                for field in dataclasses.fields(self)
            }
        )

    @property
    def share_present(self) -> float:
        return self.present / self.sentences if self.sentences else 1.0


def own_texts(text: str, sections: list[am.Section]) -> dict[am.Section, str]:
    """Each section's own text in ``text``: from its heading to the next heading of any level (its
    subsections hold theirs)."""
    starts = sorted(sections, key=lambda section: section.start)
    ends = [later.start for later in starts[1:]] + [len(text)]
    return {section: text[section.start : end] for section, end in zip(starts, ends)}


def located(sentences: list[tuple[am.Section, str]], texts: dict[am.Section, str]) -> Integrity:
    """Where each (section, sentence) is found in ``text_sources``, the sections' own texts by their
    records: in its own section, in order; in another; or in none.  A sentence is in a text when
    ``MIN_SHARED`` of its runs of three words are: formulas, which two readings write differently,
    break the others."""
    runs = {section: trigrams(text) for section, text in texts.items()}

    def place(sentence: list[str], where: dict[tuple[str, str, str], list[int]]) -> list[int]:
        wanted = [tuple(sentence[at : at + 3]) for at in range(len(sentence) - 2)]
        shared = [where[run] for run in wanted if run in where]
        return shared[0] if len(shared) >= MIN_SHARED * len(wanted) else []

    found = Integrity()
    last: dict[am.Section, int] = {}
    for section, sentence in sentences:
        found.sentences += 1
        if at := place(words(sentence), runs.get(section, {})):
            found.present += 1
            # text repeats (a reference list's venues): the first place at or after the last
            later = [position for position in at if position >= last.get(section, 0)]
            if not later:
                found.disordered.append((sentence, section.label))
            last[section] = (later or at)[0]
        elif other := next((s for s, where in runs.items() if place(words(sentence), where)), None):
            found.displaced.append((sentence, section.label, other.label))
        else:
            found.missing.append((sentence, section.label))
    return found


def body_blocks(data: bytes) -> list[list[tuple[str, bool]]]:
    """The PDF's text layer read on its own (PyMuPDF's blocks, in content-stream order): each page's
    blocks, each with whether it is body text, set mostly in the paper's most common size (not a
    caption, footnote, heading or running head, nor most tables)."""
    import pymupdf

    flags = pymupdf.TEXT_PRESERVE_WHITESPACE | pymupdf.TEXT_MEDIABOX_CLIP
    pages: list[list[tuple[str, Counter]]] = []
    with am._opened(data) as doc, am._PDF_LOCK:
        for page in doc:
            blocks = []
            for block in page.get_text("dict", flags=flags)["blocks"]:
                lines = block.get("lines", ())
                text = "".join("".join(s["text"] for s in line["spans"]) + "\n" for line in lines)
                sizes: Counter = Counter()
                for line in lines:
                    for span in line["spans"]:
                        sizes[round(span["size"] * 2) / 2] += len(span["text"].strip())
                if text.strip():
                    blocks.append((am._spelt(text).replace("\ufffd", ""), sizes))
            pages.append(blocks)
    body = sum((sizes for blocks in pages for _, sizes in blocks), Counter())
    size = body.most_common(1)[0][0] if body else 0.0
    return [
        [
            (
                text,
                2 * sum(n for s, n in sizes.items() if abs(s - size) <= BODY_SIZE_SLACK)
                > sum(sizes.values()),
            )
            for text, sizes in blocks
        ]
        for blocks in pages
    ]


def sentences_of(block: str, at: int) -> list[tuple[int, str]]:
    """The sentences of a body block that starts at offset ``at`` of its text, with their offsets:
    pieces of prose with ``MIN_SENTENCE_WORDS`` words or more (a block's first and last may be
    parts of sentences that go on in the blocks beside it)."""
    found, start = [], 0
    for end in [m.start() for m in SENTENCE_END.finditer(block)] + [len(block)]:
        piece = block[start:end]
        visible = [ch for ch in piece if not ch.isspace()]
        if len(words(piece)) >= MIN_SENTENCE_WORDS and sum(
            ch.isalpha() for ch in visible
        ) >= MIN_PROSE * len(visible):
            found.append((at + start, " ".join(piece.replace("-\n", "").split())))
        start = end
    return found


def pdf_integrity(data: bytes, pdf: am.PdfText) -> Integrity:
    """Whether each section of a converted PDF (``pdf``) holds its own text, all of it and only it:
    each body sentence of the raw text layer of its converted pages (``body_blocks``) belongs to
    the section that the converted text's sections, placed in that layer, say holds it, and is
    looked for in that section's converted text (``located``).  Text before the first section (the
    front matter) is not looked for.  And each section the overview lists is one a read finds."""
    with am._opened(data) as doc:
        structure = am.read_structure(doc)
    text = am.PaperText.from_pdf(pdf, structure.front.title)  # as the server reads it
    raw, page_starts, lines, body = "", [], [], []
    for blocks in body_blocks(data)[: len(pdf.pages)]:
        page_starts.append(len(raw))
        for block, is_body in blocks:
            offset = len(raw)
            for line in block.splitlines(keepends=True):
                if line.strip():
                    lines.append(am._Line(offset, " ".join(line.split()), True))
                offset += len(line)
            if is_body:
                body.append((len(raw), block))
            raw += block
    # the text's own sections alone (placing adds the back matter it finds in a text)
    placed = [
        section
        for section in am._place_outline(tuple(text.sections), am._Scanned(raw, lines, page_starts))
        if section in text.sections
    ]
    sentences = [
        (section, sentence)
        for at, block in body
        for offset, sentence in sentences_of(block, at)
        if (section := am._section_at(placed, offset)) is not None
    ]
    found = located(sentences, own_texts(text.markdown, list(text.sections)))
    found.unreadable = [
        row.section.label
        for row in (structure.overview.sections if structure.overview else ())
        if row.section.page <= len(pdf.pages) and row.section not in text.sections
    ]
    return found


# Inside these LaTeXML elements text is no paragraph's own: math (the text writes its LaTeX),
# footnotes (written where the text puts them), floats and their captions, display equations.
HTML_SET_APART = re.compile(
    r"\bltx_(?:note|figure|table|float|caption|equation|equationgroup|tag)\b"
)


RUN_IN = re.compile(r"\bltx_(?:sub)?paragraph\b")  # a run-in heading, in its section's text


class LatexmlParagraphs(html.parser.HTMLParser):
    """The paragraphs (``<p class="ltx_p">``) of a LaTeXML article, read on their own: each with the
    heading of the innermost ``<section>`` around it, text set apart (``HTML_SET_APART``, math)
    left out."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[tuple[str, bool]] = []  # each open element, and whether it sets text apart
        self.sections: list[list[str]] = []  # the open sections' headings, as they are read
        self.heading: list[str] | None = None  # the heading being read
        self.paragraph: list[str] | None = None
        self.paragraphs: list[tuple[str, str]] = []  # (heading, paragraph)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("br", "img", "hr", "input", "meta", "link"):
            return
        classes = dict(attrs).get("class") or ""
        apart = tag == "math" or bool(HTML_SET_APART.search(classes))
        parent = self.open[-1][0] if self.open else ""
        self.open.append((tag, apart))
        if tag == "section" and RUN_IN.search(classes):  # its text is its parent section's
            self.sections.append(self.sections[-1] if self.sections else [])
            self.open[-1] = ("run-in", apart)
        elif tag == "section":
            self.sections.append([])
        elif parent == "section" and "ltx_title" in classes and tag[0] == "h":
            self.heading = self.sections[-1]
        elif tag == "p" and "ltx_p" in classes and self.paragraph is None:
            self.paragraph = []

    def handle_endtag(self, tag: str) -> None:
        while self.open:
            name, _ = self.open.pop()
            if name in ("section", "run-in") and self.sections:
                self.sections.pop()
            elif name[0] == "h" and self.heading is not None and name != "html":
                self.heading = None
            elif (
                name == "p"
                and self.paragraph is not None
                and not any(n == "p" for n, _ in self.open)
            ):
                if self.sections:
                    self.paragraphs.append(("".join(self.sections[-1]), "".join(self.paragraph)))
                self.paragraph = None
            if name == tag or (name == "run-in" and tag == "section"):
                return

    def handle_data(self, data: str) -> None:
        if self.heading is not None and not any(name == "math" for name, _ in self.open):
            self.heading.append(data)  # with its number (an ltx_tag)
        elif self.paragraph is not None and not any(apart for _, apart in self.open):
            self.paragraph.append(data)


def html_integrity(page: bytes) -> Integrity:
    """Whether each section of arXiv's HTML, as ``parse_html`` writes it, holds its own text: every
    paragraph of the LaTeXML article (``LatexmlParagraphs``; math left out of both) in the text of
    the section whose heading is the one around it."""
    text = am.parse_html(page).text
    reader = LatexmlParagraphs()
    reader.feed(page.decode("utf-8", "replace"))
    by_heading = {am._match_key(section.label): section for section in text.sections}
    texts = {
        section: FORMULA.sub(" ", own)
        for section, own in own_texts(text.markdown, list(text.sections)).items()
    }
    return located(
        [
            (
                by_heading.get(key)
                or am.Section(number="", title=" ".join(heading.split()), level=1),
                paragraph,
            )
            for heading, paragraph in reader.paragraphs
            # a section's heading, "Appendix C" as the text numbers it "C"; none: the front matter
            if (key := am._match_key(re.sub(r"^\s*appendix\s+", "", heading, flags=re.I)))
            and len(words(paragraph)) >= MIN_SENTENCE_WORDS
        ],
        texts,
    )


def preview_formulas(text: am.PaperText) -> tuple[int, list[tuple[str, str]]]:
    """The formulas (``$…$``) in the overview's previews of ``text`` (each row's first sentence),
    and those not in their section's text as written: (formula, section)."""
    rows = am.overview_of(text).sections
    shown = [(m[0], row.section) for row in rows for m in FORMULA.finditer(row.sentence)]
    return len(shown), [
        (formula, section.label) for formula, section in shown if formula not in text.body(section)
    ]


def corpus_answer(pdfs: dict[str, bytes], htmls: dict[str, bytes] | None = None) -> Answer:
    """Each PDF at /pdf/ID, each page of ``htmls`` at /html/ID (others: a 404, as arXiv answers a
    paper without HTML) and a minimal Atom entry for it at /api/query?id_list=ID; any search finds
    the first paper."""
    htmls = htmls or {}

    def answer(path: str, query: dict[str, list[str]]) -> tuple[bytes, str] | None:
        if path.startswith("/pdf/") and path[5:] in pdfs:
            return pdfs[path[5:]], "application/pdf"
        if path.startswith("/html/") and path[6:] in htmls:
            return htmls[path[6:]], "text/html; charset=utf-8"
        if path == "/api/query" and query.get("id_list", [""])[0] in {**pdfs, **htmls}:
            return ATOM_ENTRY.format(id=query["id_list"][0]).encode(), "application/atom+xml"
        if path == "/api/query" and "search_query" in query:
            return ATOM_ENTRY.format(id=next(iter(pdfs))).encode(), "application/atom+xml"
        return None

    return answer


def corpus_id(path: Path) -> str | None:
    """The arXiv id of a corpus file: 'cond-mat_0406362v1.pdf' -> 'cond-mat/0406362v1',
    '2206.01062v1-pg1-4.pdf' (an excerpt) -> '2206.01062v1'."""
    return am.parse_arxiv_id(path.stem.split("-pg")[0].replace("_", "/", 1))


def timed(function, *args, **kwargs) -> tuple[float, object]:
    start = time.perf_counter()
    result = function(*args, **kwargs)
    return time.perf_counter() - start, result


def baseline(data: bytes, max_pages: int) -> float:
    """What peer servers do: one plain pymupdf4llm.to_markdown call (here on the same pages we
    convert)."""
    import pymupdf
    import pymupdf4llm

    with am._PDF_LOCK, pymupdf.open(stream=data, filetype="pdf") as doc:
        pages = list(range(min(max_pages, doc.page_count)))
        return timed(pymupdf4llm.to_markdown, doc, pages=pages, use_ocr=False)[0]


def structure(data: bytes, max_pages: int) -> str:
    """Where a paper's section list comes from before its conversion: 'bookmarks' (the PDF outline),
    'fonts' (headings found by font in the text layer), or 'none' (the overview waits for the
    conversion)."""
    import pymupdf

    with pymupdf.open(stream=data, filetype="pdf") as doc:
        if len(am._bookmark_outline(doc)) >= am._MIN_OUTLINE_ENTRIES:
            return "bookmarks"
    return "fonts" if am.pdf_overview(data, max_pages) is not None else "none"


def compare_modes(pdfs: dict[str, bytes], max_pages: int) -> None:
    """On the papers without PDF bookmarks: pymupdf4llm's layout mode (the server's page-by-page
    ``pdf_to_markdown``) against its legacy mode (``use_layout(False)``, one call), seconds per page
    and the sections their Markdown headings give; and the font outline (``pdf_outline``): its time,
    the sections it places in the layout Markdown, and the layout headings it does not have
    (spelling aside)."""
    import pymupdf
    import pymupdf4llm

    print(
        "| paper | pages | layout: s/page | layout: sections | legacy: s/page | legacy: sections "
        "| font outline: ms | font outline: sections | layout sections it lacks "
        "|\n|---|---|---|---|---|---|---|---|---|"
    )
    # pages; layout s, sections; legacy s, sections; font s, sections, lost
    totals = [0, 0.0, 0, 0.0, 0, 0.0, 0, 0]
    for arxiv_id, data in pdfs.items():
        if structure(data, max_pages) == "bookmarks":
            continue
        layout_seconds, pdf = timed(am.pdf_to_markdown, data, max_pages=max_pages)
        by_layout = {
            s.label for s in am.PaperText.from_pdf(dataclasses.replace(pdf, outline=())).sections
        }
        pymupdf4llm.use_layout(False)
        try:
            with pymupdf.open(stream=data, filetype="pdf") as doc:
                legacy_seconds, legacy = timed(
                    pymupdf4llm.to_markdown, doc, pages=list(range(len(pdf.pages)))
                )
        finally:
            pymupdf4llm.use_layout(True)
        font_seconds, outline = timed(am.pdf_outline, data, max_pages)
        by_font = {
            s.label
            for s in am.PaperText.from_pdf(dataclasses.replace(pdf, outline=outline)).sections
        }
        lost = sorted(
            label
            for label in by_layout
            if am._match_key(label) not in {am._match_key(f) for f in by_font}
        )
        row = [
            len(pdf.pages),
            layout_seconds,
            len(by_layout),
            legacy_seconds,
            len(am.find_sections(legacy)),
            font_seconds,
            len(by_font),
            len(lost),
        ]
        totals = [total + value for total, value in zip(totals, row)]
        print(
            f"| {arxiv_id} | {len(pdf.pages)} | {layout_seconds / len(pdf.pages):.2f} | "
            f"{len(by_layout)} | {legacy_seconds / len(pdf.pages):.2f} | {row[4]} | "
            f"{font_seconds * 1000:.0f} | {len(by_font)} | {', '.join(lost) or 'none'} |"
        )
    pages = totals[0]
    print(
        f"| all | {pages} | {totals[1] / pages:.2f} | {totals[2]} | {totals[3] / pages:.2f} | "
        f"{totals[4]} | {totals[5] * 1000:.0f} | {totals[6]} | {totals[7]} |"
    )


def measure_paper(arxiv_id: str, settings: am.Settings, runs: int) -> dict[str, float]:
    """Medians of each measurement for one paper, each cold read with a fresh library (the agent
    session,
    ``agent_session``, keeps one)."""
    samples: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        samples.setdefault(name, []).append(value)

    for _ in range(runs):
        library = am.PaperLibrary(settings, am.RateLimiter(settings.min_interval))
        seconds, overview = timed(am.arxiv_tool, paper=arxiv_id, library=library)
        add("cold overview", seconds)
        add("overview chars", len(overview))
        first = re.search(r"^- \*\*(.+?)\*\* \(", overview, re.M)  # the first section listed
        selector = first[1] if first else "full"
        add(
            "cold overview + first section",
            seconds + timed(am.arxiv_tool, paper=arxiv_id, section=selector, library=library)[0],
        )
        # let the background conversion finish: it would slow the next cold read
        library.read(arxiv_id)
        add(
            "warm section",
            timed(am.arxiv_tool, paper=arxiv_id, section=selector, library=library)[0],
        )
        add("warm overview", timed(am.arxiv_tool, paper=arxiv_id, library=library)[0])
        add(
            "warm find",
            timed(am.arxiv_tool, paper=arxiv_id, find="the results", library=library)[0],
        )
        library = am.PaperLibrary(settings, am.RateLimiter(settings.min_interval))
        add(
            "cold find",
            timed(am.arxiv_tool, paper=arxiv_id, find="the results", library=library)[0],
        )
        wait_idle(library)  # one server: its background work would slow the next server's cold read
        library = am.PaperLibrary(settings, am.RateLimiter(settings.min_interval))
        add(
            "cold full text",
            timed(am.arxiv_tool, paper=arxiv_id, section="full", library=library)[0],
        )
    return {name: statistics.median(values) for name, values in samples.items()}


def listed_sections(overview: str) -> list[str]:
    """The labels of the sections an overview lists, in its order."""
    return re.findall(r"^ *- \*\*(.+?)\*\* \(", overview, re.M)


def wait_idle(library: am.PaperLibrary) -> None:
    """Between runs (never between papers): let the background work of the last run end."""
    while library.scheduler.has_work() or any(
        t.name == "arxiv-load" for t in threading.enumerate()
    ):
        time.sleep(0.2)


def agent_session(
    pdfs: dict[str, bytes], settings: am.Settings, library: am.PaperLibrary
) -> dict[str, dict[str, float]]:
    """What an agent does with its search results: the overview, the first and the second section of
    one paper, then the next paper, with no pause and one server (library) for the whole session, so
    that earlier papers' background conversions go on beneath the later calls.  Seconds per paper:
    the overview, and the overview and first section."""
    seconds: dict[str, dict[str, float]] = {}
    for arxiv_id in pdfs:
        overview_seconds, overview = timed(am.arxiv_tool, paper=arxiv_id, library=library)
        listed = listed_sections(overview)
        first = (
            timed(am.arxiv_tool, paper=arxiv_id, section=listed[0], library=library)[0]
            if listed
            else 0.0
        )
        if len(listed) > 1:
            am.arxiv_tool(paper=arxiv_id, section=listed[1], library=library)
        seconds[arxiv_id] = {
            "cold overview": overview_seconds,
            "cold overview + first section": overview_seconds + first,
        }
    return seconds


def overview_beside_a_long_read(
    pdfs: dict[str, bytes], settings: am.Settings, long_id: str, short_id: str
) -> float:
    """Seconds for a cold overview of ``short_id`` asked while ``long_id`` converts for a ``full``
    read."""
    library = am.PaperLibrary(settings, am.RateLimiter(settings.min_interval))
    reader = threading.Thread(
        target=am.arxiv_tool, kwargs={"paper": long_id, "section": "full", "library": library}
    )
    reader.start()
    time.sleep(1.0)  # the long paper is converting by now
    seconds = timed(am.arxiv_tool, paper=short_id, library=library)[0]
    reader.join()
    wait_idle(library)  # this server's background work must not run beneath the next run's
    return seconds


def flood(
    pdfs: dict[str, bytes], settings: am.Settings, count: int = 30
) -> tuple[float, float, int]:
    """``count`` cold reads of unknown papers at once, with a 1 s limiter gap and a 5 s deadline,
    and a search asked 1 s later: the search's seconds, the seconds until no arXiv request is queued
    or under way any more, and how many reads were told at once that the server is busy."""
    flooded = dataclasses.replace(settings, min_interval=1.0, call_seconds=5.0)
    library = am.PaperLibrary(flooded, am.RateLimiter(1.0))
    smallest = min(pdfs.values(), key=len)
    ids = [f"2101.{n:05d}" for n in range(count)]
    pdfs.update({arxiv_id: smallest for arxiv_id in ids})  # the stand-in serves them from now on
    answers: list[str] = []
    start = time.perf_counter()
    readers = [
        threading.Thread(target=lambda i=i: answers.append(am.arxiv_tool(paper=i, library=library)))
        for i in ids
    ]
    for reader in readers:
        reader.start()
    time.sleep(1.0)
    search, found = timed(am.arxiv_tool, library=library, query="flood")
    assert found.startswith("# arXiv search"), found
    for reader in readers:
        reader.join()
    while library.limiter.pending() or any(t.name == "arxiv-load" for t in threading.enumerate()):
        time.sleep(0.05)
    for arxiv_id in ids:
        del pdfs[arxiv_id]
    busy = sum("The server is busy" in answer for answer in answers)
    return search, time.perf_counter() - start, busy


def server_env(urls: am.Settings, cache_dir: str, interval: str, **more: str) -> dict[str, str]:
    """The environment of a server process that asks the stand-in at ``urls``
    (``stand_in_settings``), with its cache folder (or "off"), its limiter's gap and ``more``
    ARXIV_* settings."""
    return {
        **os.environ,
        "ARXIV_API_URL": urls.api_url,
        "ARXIV_PDF_URL": urls.pdf_url,
        "ARXIV_HTML_URL": urls.html_url,
        "ARXIV_CACHE_DIR": cache_dir,
        "ARXIV_MIN_INTERVAL": interval,
        "ARXIV_S2_URL": "off",  # offline, as the stand-in is arXiv alone
        **more,
    }


def server_ready_seconds(env: dict[str, str], command: list[str]) -> float:
    """Seconds from starting the server process to its tools/list answer, through the SDK's stdio
    client."""
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    async def main() -> float:
        start = time.perf_counter()
        params = StdioServerParameters(command=command[0], args=command[1:], env=env)
        with open(os.devnull, "w") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                await session.list_tools()
                return time.perf_counter() - start

    return asyncio.run(main())


def with_server(env: dict[str, str], server: str, work: Callable) -> object:
    """``await work(session, process)`` against a fresh stdio server (``process``: its
    psutil.Process)."""
    import psutil
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    async def main() -> object:
        params = StdioServerParameters(command=sys.executable, args=[server], env=env)
        with open(os.devnull, "w") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                process = next(
                    p
                    for p in psutil.Process().children(recursive=True)
                    if server in " ".join(p.cmdline())
                )
                return await work(session, process)

    return asyncio.run(main())


async def timed_call(session, **arguments: str) -> tuple[float, str]:
    start = time.perf_counter()
    text = (await session.call_tool("arxiv", arguments)).content[0].text
    return time.perf_counter() - start, text


def server_calls(
    env: dict[str, str], calls: list[dict[str, str]], linger: float = 0.0
) -> tuple[float, list[float]]:
    """Make ``calls`` to a fresh stdio server at once: the peak RSS (MB) of the server's process
    (and any children) until they are answered and for ``linger`` seconds of its background work
    after, and the seconds each call took."""
    import psutil

    async def work(session, server) -> tuple[float, list[float]]:
        peak, every, done_at = (
            0.0,
            asyncio.gather(*(timed_call(session, **arguments) for arguments in calls)),
            None,
        )
        while done_at is None or time.perf_counter() - done_at < linger:
            total = 0
            for process in (server, *server.children(recursive=True)):
                with contextlib.suppress(psutil.Error):
                    total += process.memory_info().rss
            peak = max(peak, total / 1e6)
            if done_at is None and every.done():
                done_at = time.perf_counter()
            await asyncio.sleep(0.05)
        return peak, [seconds for seconds, _ in await every]

    return with_server(env, str(HERE / "arxiv_mcp.py"), work)


def report_agent_session(pdfs: dict[str, bytes], settings: am.Settings, runs: int) -> None:
    """The agent-session rows of docs/performance.md's table: ratios to the baseline with the
    limiter's gap as set and at arXiv's 3 s, the overview beside a long conversion and eight papers
    at once."""
    baseline(next(iter(pdfs.values())), 1)  # load the layout model before anything is timed
    bases = {
        i: statistics.median(baseline(data, settings.max_pages) for _ in range(runs))
        for i, data in pdfs.items()
    }
    print(
        "| agent session (no pause between papers) | limiter gap | median | ratio to baseline "
        "|\n|---|---|---|---|"
    )
    for gap in sorted({settings.min_interval, 3.0}):
        gapped = dataclasses.replace(settings, min_interval=gap)
        samples: dict[str, dict[str, list[float]]] = {}
        for _ in range(runs):
            converters = (am.ConverterProcess(), am.ConverterProcess(layout=False))  # the server's
            library = am.PaperLibrary(gapped, am.RateLimiter(gap), converters=converters)
            for arxiv_id, measured in agent_session(pdfs, gapped, library).items():
                for name, value in measured.items():
                    samples.setdefault(name, {}).setdefault(arxiv_id, []).append(value)
            wait_idle(library)
            for converter in converters:
                converter.stop()
        for name, per_paper in samples.items():
            medians = {i: statistics.median(v) for i, v in per_paper.items()}
            ratio = statistics.median(medians[i] / bases[i] for i in medians)
            print(
                f"| {name} | {gap:g} s | {statistics.median(medians.values()):.2f} s | "
                f"{ratio:.2f} |",
                flush=True,
            )
    long_id = max(pdfs, key=lambda i: len(pdfs[i]) if i == "2502.21088v1" else 0)
    short_id = "2203.00274v2" if "2203.00274v2" in pdfs else min(pdfs, key=lambda i: len(pdfs[i]))
    beside = statistics.median(
        overview_beside_a_long_read(pdfs, settings, long_id, short_id) for _ in range(runs)
    )
    print(
        f"| cold overview of {short_id} while {long_id} converts for a `full` read | "
        f"{settings.min_interval:g} s | {beside:.2f} s | |"
    )
    search, drained, busy = flood(pdfs, settings)
    print(
        "| a flood of 30 cold reads (5 s deadline): a search asked meanwhile / every queued "
        f"request done | 1 s | {search:.2f} s / {drained:.1f} s | {busy} of 30 told at once that "
        "the server is busy |"
    )
    if len(pdfs) >= 8:  # through the MCP stdio server, in a fresh process
        ids = sorted(pdfs, key=lambda i: len(pdfs[i]))[-8:]  # the largest PDFs
        env = server_env(settings, "off", str(settings.min_interval))  # every read cold
        peak, seconds = server_calls(env, [{"paper": i} for i in ids], linger=10.0)
        print(
            "| eight overviews of the eight largest papers at once, stdio server: the slowest "
            f"(converting all eight: {sum(bases[i] for i in ids):.0f} s) | "
            f"{settings.min_interval:g} s | {max(seconds):.2f} s | server's peak RSS {peak:.0f} "
            "MB, with 10 s of background work after |"
        )


def check(pdfs: dict[str, bytes]) -> int:
    """Convert every page of every paper and check the texts an agent reads (the full text, which
    holds every section, and what the overview shows: first sentences and captions) against the
    DEBRIS rules. Prints a table of what the layout found and what the rules found; returns the
    number of findings."""
    print(
        "| paper | pages | captions (overview) | figures / tables with a region | equations "
        "(numbered) | debris | seconds |"
    )
    print("|---|---|---|---|---|---|---|")
    findings, costs = 0, {"figure or table": [], "equation": []}
    for arxiv_id, data in pdfs.items():
        seconds, pdf = timed(am.pdf_to_markdown, data, max_pages=am._MAX_STRUCTURE_PAGES)
        estimated = am.pdf_overview(data)
        with am._PDF_LOCK, am._open_pdf(data) as doc:
            captions = am._captions([am._page_blocks(page)[0] for page in doc])
        shown = "\n".join(
            [
                pdf.markdown,
                *(row.sentence for row in (estimated.sections if estimated else ())),
                *(caption.text for caption in captions),
            ]
        )
        found = debris(shown)
        findings += sum(map(len, found.values()))
        for rule, places in found.items():
            print(f"  {arxiv_id}: {rule}: {places[:3]}", file=sys.stderr)
        for region in pdf.regions:  # what an image of it costs a vision model
            costs["equation" if region.kind == "Equation" else "figure or table"].append(
                am.render_image(data, region.page, region.bbox)
            )
        visuals = [r for r in pdf.regions if r.kind != "Equation"]
        equations = [r for r in pdf.regions if r.kind == "Equation"]
        print(
            f"| {arxiv_id} | {pdf.page_count} | {len(captions)} | {len(visuals)} | "
            f"{len(equations)} ({sum(bool(r.number) for r in equations)}) | "
            f"{', '.join(f'{len(v)} {k}' for k, v in found.items()) or 'none'} | {seconds:.1f} |"
        )
    print(f"\n{findings} findings in {len(pdfs)} papers")
    for kind, images in costs.items():
        tokens = sorted(image.tokens for image in images)
        print(
            f"{kind} images: {len(images)}, median {statistics.median(tokens):.0f} tokens (max "
            f"{tokens[-1]}), "
            f"median {statistics.median(len(image.data) for image in images) / 1000:.1f} KB, "
            f"{sum(image.mime_type == 'image/jpeg' for image in images)} JPEG"
        )
    return findings


def report_integrity(pdfs: dict[str, bytes]) -> int:
    """Issue 49: whether each section holds its own text, all of it and only it, on every page of
    every paper (``pdf_integrity``), every shared HTML page (``html_integrity``) and the formulas
    of their previews (``preview_formulas``).  Prints a row a paper and the totals; returns the
    number of sentences in another section and of formulas lost."""
    print(
        "| paper | sentences | in their section | in another | in none | out of order | "
        "listed, not read | seconds |"
    )
    print("|---|---|---|---|---|---|---|---|")
    totals, lost, shown = Integrity(), 0, 0
    readings = [
        (arxiv_id, *timed(am.pdf_to_markdown, data, max_pages=am._MAX_STRUCTURE_PAGES), data)
        for arxiv_id, data in pdfs.items()
    ]
    papers = [
        (arxiv_id, seconds, pdf_integrity(data, pdf), am.PaperText.from_pdf(pdf))
        for arxiv_id, seconds, pdf, data in readings
    ]
    papers += [
        (
            f"{path.stem} (HTML)",
            0.0,
            html_integrity(path.read_bytes()),
            am.parse_html(path.read_bytes()).text,
        )
        for path in sorted(HTML_DIR.glob("*.html"))
    ]
    for name, seconds, found, text in papers:
        totals += found
        count, missing = preview_formulas(text)
        shown, lost = shown + count, lost + len(missing)
        for sentence, section, where in found.displaced:
            print(f"  {name}: {section} → {where}: {sentence[:80]}", file=sys.stderr)
        print(
            f"| {name} | {found.sentences} | {found.present} | {len(found.displaced)} | "
            f"{len(found.missing)} | {len(found.disordered)} | {len(found.unreadable)} | "
            f"{seconds:.1f} |"
        )
    print(
        f"\n{totals.sentences} sentences and paragraphs, {totals.share_present:.1%} in their "
        f"section, {len(totals.displaced)} in another; {shown} formulas in previews, {lost} not "
        "in their section as written"
    )
    return len(totals.displaced) + len(totals.unreadable) + lost


def report_twice(pdfs: dict[str, bytes]) -> int:
    """Whether each paper's first page converts to the same Markdown twice, each time from the PDF
    opened afresh: the test (``test_every_corpus_paper_reads_the_same_twice``) checks it on a
    sample of the corpus's layouts, this on every paper.  Prints a row a paper; returns how many
    differ."""
    print("| paper | the first page, converted twice | seconds |")
    print("|---|---|---|")
    differ = 0
    for arxiv_id, data in pdfs.items():
        started, made = time.perf_counter(), []
        for _ in range(2):
            with am._opened(data) as doc, am._PDF_LOCK:
                made.append(am._page_markdown(doc, 1).markdown)
        differ += made[0] != made[1]
        said = "the same" if made[0] == made[1] else "DIFFERENT"
        print(f"| {arxiv_id} | {said} | {time.perf_counter() - started:.1f} |")
    return differ


HTML_DIR = HERE.parent / "shared" / "html"
# the version each shared page is of (ar5iv's name none)
HTML_VERSIONS = {
    "2203.00274": "2203.00274v2",
    "2305.03393": "2305.03393v1",
    "2407.16314": "2407.16314v1",
    "2508.08468": "2508.08468v6",
}


def report_html(pdfs: dict[str, bytes], runs: int, excerpts: set[str]) -> None:
    """Issue 22's targets on the shared HTML pages, through the loopback stand-in with no limiter
    gap: the parse alone, a cold overview plus one section (a fresh library each run) against a
    plain conversion of the same paper's PDF, and the peak RSS of a stdio server that reads only
    HTML papers, beside an idle server's and one that reads a PDF."""
    htmls = {
        version: (HTML_DIR / f"{stem}.html").read_bytes() for stem, version in HTML_VERSIONS.items()
    }
    server = serve(corpus_answer(pdfs, htmls))
    settings = stand_in_settings(server)

    def cold(version: str) -> float:
        first = am.parse_html(htmls[version]).text.sections[0]
        library = am.PaperLibrary(settings, am.RateLimiter(0))
        start = time.perf_counter()
        overview = am.arxiv_tool(paper=version, library=library)
        section = am.arxiv_tool(paper=version, section=first.number or first.title, library=library)
        assert "from arXiv's HTML" in overview and not section.startswith(am.ERROR), (
            overview,
            section,
        )
        return time.perf_counter() - start

    print(
        "| paper (page size) | parse_html | cold overview + first section | plain PDF conversion "
        "| ratio |"
    )
    print("|---|---|---|---|---|")
    for version, page in htmls.items():
        parse = statistics.median(timed(am.parse_html, page, version)[0] for _ in range(runs))
        reading = statistics.median(cold(version) for _ in range(runs))
        # a ratio to a few pages of the PDF says nothing
        whole = version in pdfs and version not in excerpts
        plain = (
            statistics.median(baseline(pdfs[version], am.SETTINGS.max_pages) for _ in range(runs))
            if whole
            else 0
        )
        print(
            f"| {version} ({len(page) / 1e3:.0f} KB) | {parse * 1e3:.0f} ms | {reading * 1e3:.0f} "
            "ms | "
            + (f"{plain:.2f} s | {reading / plain:.3f} |" if whole else "no whole PDF here | |")
        )
    env = server_env(settings, "off", "0")
    idle = statistics.median(server_calls(env, [])[0] for _ in range(runs))
    reads = [
        {"paper": version, **section} for version in htmls for section in ({}, {"section": "full"})
    ]
    html_only = statistics.median(server_calls(env, reads)[0] for _ in range(runs))
    pdf_env = {**env, "ARXIV_SOURCE": "pdf"}
    one_pdf = (
        statistics.median(
            server_calls(pdf_env, [{"paper": "2203.00274v2"}])[0] for _ in range(runs)
        )
        if "2203.00274v2" in pdfs
        else float("nan")
    )
    server.shutdown()
    print(
        f"\n| stdio server, peak RSS | MB |\n|---|---|\n| idle (initialize only) | {idle:.0f} |\n"
        f"| overview and full text of the {len(htmls)} HTML papers | {html_only:.0f} |\n"
        f"| overview of 2203.00274v2 from its PDF (ARXIV_SOURCE=pdf) | {one_pdf:.0f} |"
    )


def report_hidden(pdfs: dict[str, bytes], runs: int) -> None:
    """What finding hidden text costs (issue 29), each against the same work with the check taken
    out, the two timed in turn (medians of ``runs``, then over the papers): the structure pass of
    every paper (without the check it reads the text blocks alone, as before), ``parse_html`` of the
    shared pages (without reading styles), and ``convert_page`` of the first three pages of five
    papers as a plain function, which finds the page's hidden text itself (without it: the
    conversion alone; the server passes the structure pass's)."""
    import pymupdf

    flags = pymupdf.TEXT_PRESERVE_WHITESPACE | pymupdf.TEXT_MEDIABOX_CLIP

    def blocks_alone(page):
        return [
            am._spelt(b[4]).replace(am._UNKNOWN_GLYPH, "")
            for b in page.get_text("blocks", flags=flags)
            if b[6] == 0
        ], []

    def compared(work: Callable[[], object], name: str, stand_in: Callable) -> tuple[float, float]:
        checked, unchecked = [], []
        for _ in range(runs):
            checked.append(timed(work)[0])
            with unittest.mock.patch.object(am, name, stand_in):
                unchecked.append(timed(work)[0])
        return statistics.median(checked), statistics.median(unchecked)

    def structure_pass(data: bytes) -> Callable[[], object]:
        def work():
            with am._opened(data) as doc:
                return am.read_structure(doc)

        return work

    def conversion(data: bytes) -> Callable[[], object]:
        def work():
            with am._opened(data) as doc, am._PDF_LOCK:
                return [am.convert_page(doc, page) for page in range(1, min(3, doc.page_count) + 1)]

        return work

    baseline(next(iter(pdfs.values())), 1)  # load the layout model before anything is timed
    pages = sorted(pdfs, key=lambda i: len(pdfs[i]))[:5]
    htmls = [path.read_bytes() for path in sorted(HTML_DIR.glob("*.html"))]
    rows = {
        "structure pass, every paper": [
            compared(structure_pass(data), "_page_blocks", blocks_alone) for data in pdfs.values()
        ],
        "`parse_html`, the shared pages": [
            compared(
                lambda page=page: am.parse_html(page),
                "_style_hiding",
                lambda style, backdrop: ("", backdrop),
            )
            for page in htmls
        ],
        f"conversion of pages 1-3 of {', '.join(pages)}": [
            compared(conversion(pdfs[i]), "_page_blocks", lambda page: ([], [])) for i in pages
        ],
    }
    print(
        "| with the check against without it | with | without | ratio (median over papers) "
        "|\n|---|---|---|---|"
    )
    for name, pairs in rows.items():
        checked, unchecked = (statistics.median(times) * 1000 for times in zip(*pairs))
        print(
            f"| {name} | {checked:.1f} ms | {unchecked:.1f} ms | "
            f"{statistics.median(a / b for a, b in pairs):.3f} |"
        )


Routing = tuple[am.Paper, am.Overview, tuple[am.Caption, ...], tuple[am.Passage, ...]]


def structure_of(data: bytes) -> am.Structure:
    """The structure pass of the PDF ``data``."""
    with am._opened(data) as doc:
        return am.read_structure(doc)


def routing_overviews(
    pdfs: dict[str, bytes], structure_pass: Callable[[bytes], am.Structure] = structure_of
) -> dict[str, Routing]:
    """The first overview of every corpus PDF (from its structure pass, ``structure_pass``; without
    an outline, from the converted text of its first ``ARXIV_MAX_PAGES``, as the server reads it)
    and every page of ../shared/html, with the paper's own title, authors (from HTML) and abstract,
    its captions and the passages ``find`` searches."""
    found = {}
    for arxiv_id, data in pdfs.items():
        structure = structure_pass(data)
        overview = structure.overview or am.overview_of(
            am.PaperText.from_pdf(  # as the server reads it: its first pages
                am.pdf_to_markdown(data, max_pages=am.SETTINGS.max_pages)
            )
        )
        paper = dataclasses.replace(am.own_paper(arxiv_id, structure.front, ""), provenance="")
        found[arxiv_id] = (paper, overview, structure.captions, structure.passages)
    for path in sorted(HTML_DIR.glob("*.html")):
        html = am.parse_html(path.read_bytes())
        overview = am.overview_of(html.text)
        found[f"{path.stem} (HTML)"] = (
            dataclasses.replace(am.own_paper(path.stem, html.front, ""), provenance=""),
            overview,
            html.captions,
            html.passages,
        )
    return found


def routing_rows(overview: am.Overview) -> list[am.SectionSummary]:
    """The rows an agent routes by: top-level sections of 200 characters or more, reference lists
    aside."""
    return [
        row
        for row in overview.sections
        if row.section.level == 1
        and row.chars >= 200
        and am._name_role(row.section.title) != am.REFERENCES
    ]


def report_overviews(pdfs: dict[str, bytes]) -> None:
    """The overviews an agent routes by (issue 30): their sizes, how many routing rows
    (``routing_rows``) show a sentence, on the PDF path and the HTML path, how many shown sentences
    only announce their section, how many overviews list every heading (issue 40), and what
    an agent reads before the evidence: the overview, `find` "results", then the section of its
    first passage (its size as the overview gives it, within ARXIV_MAX_CHARS)."""
    sizes, shown, rows, announcing, sentences, before_evidence, mapped = (
        [],
        Counter(),
        Counter(),
        0,
        0,
        [],
        0,
    )
    for name, (paper, overview, captions, passages) in routing_overviews(pdfs).items():
        text = am.format_overview(paper, overview, None, captions)
        sizes.append(len(text))
        # a row, or a title in its parent's
        mapped += all(row.section.label in text for row in overview.sections)
        found = am.format_find(paper, passages, "results", overview)
        first = re.search(r"^1\. \*\*(.+?)\*\*", found, re.M)
        section = next(
            (row.chars for row in overview.sections if first and row.section.label == first[1]),
            0,
        )
        before_evidence.append(len(text) + len(found) + min(section, am.SETTINGS.max_chars))
        path = "HTML" if name.endswith("(HTML)") else "PDF"
        for row in routing_rows(overview):
            rows[path] += 1
            if line := next(
                (
                    line
                    for line in text.splitlines()
                    if line.startswith(f"- **{row.section.label}** (")
                ),
                "",
            ):
                shown[path] += "): " in line
                sentences += "): " in line
                announcing += "): " in line and am._announces(row.sentence)
        print(f"{name}: {len(text):,} chars, {len(overview.sections)} sections", file=sys.stderr)
    print("| overviews | PDF | HTML |\n|---|---|---|")
    print(
        f"| routing rows that show a sentence | {shown['PDF']} of {rows['PDF']} "
        f"| {shown['HTML']} of {rows['HTML']} |"
    )
    print(
        "| sizes: median, largest (budget: ≤ 4,000, never > 4,500) | "
        f"{statistics.median(sizes):,.0f}, {max(sizes):,} chars over all {len(sizes)} | |"
    )
    print(f"| shown sentences that only announce their section | {announcing} of {sentences} | |")
    print(
        f"| overviews that list every heading (as a row or a title; issue 40) | {mapped} of "
        f"{len(sizes)} | |"
    )
    print(
        f"| characters read before the evidence (overview, `find`, one section), median | "
        f"{statistics.median(before_evidence):,.0f} | |"
    )


def three_servers(
    env: dict[str, str], server: str, calls: list[list[tuple[float, dict[str, str]]]]
) -> list[str]:
    """Start one stdio server per list of ``calls`` at once, all with ``env``, and make each
    server's calls, each at its time (seconds after the servers are up); their answers, in order."""
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    async def one(own: list[tuple[float, dict[str, str]]], ready: asyncio.Barrier) -> list[str]:
        params = StdioServerParameters(command=sys.executable, args=[server], env=env)
        with open(os.devnull, "w") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                await ready.wait()
                start, answers = time.monotonic(), []
                for at, arguments in own:
                    await asyncio.sleep(max(0.0, start + at - time.monotonic()))
                    answers.append((await session.call_tool("arxiv", arguments)).content[0].text)
                return answers

    async def main() -> list[str]:
        ready = asyncio.Barrier(len(calls))
        return [
            answer
            for answers in await asyncio.gather(*(one(own, ready) for own in calls))
            for answer in answers
        ]

    return asyncio.run(main())


def report_machine(pdfs: dict[str, bytes], runs: int, server: str) -> None:
    """Issue 31: three stdio servers (``server``, this checkout's by default) started together on
    one cache folder, at arXiv's 3 s pace, against a loopback stand-in (the API and PDFs at
    127.0.0.1, the HTML at
    127.0.0.2): each reads the overviews of one paper with HTML and one without; the request starts
    per host (their smallest gap), overlapping requests, downloads of each page and metadata of each
    paper.  Then, on a fresh folder with the API answering every request 429 "Rate exceeded.", one
    search per server 1 s apart. Then what taking a turn costs, and an overview kept on disk read
    while another process holds the turn."""
    ids = ["2203.00274v2", "1111.2011v2"]
    answer = corpus_answer(pdfs, {"2203.00274v2": (HTML_DIR / "2203.00274.html").read_bytes()})
    seen: list[tuple[str, str, float, float]] = []  # (host, path, start, end)
    throttled = threading.Event()

    def recorded(host: str) -> Answer:
        def answer_at(
            path: str, query: dict[str, list[str]]
        ) -> tuple[bytes, str] | tuple[bytes, str, int] | None:
            start = time.monotonic()
            time.sleep(0.05)  # a request takes a little time: two at once would overlap
            found = (
                (b"Rate exceeded.", "text/plain", 429)
                if throttled.is_set() and path == "/api/query"
                else answer(path, query)
            )
            seen.append(
                (
                    host,
                    path if "search_query" not in query else "/api/query (search)",
                    start,
                    time.monotonic(),
                )
            )
            return found

        return answer_at

    api, html = serve(recorded("export")), serve(recorded("html"), host="127.0.0.2")
    urls = stand_in_settings(api, html)
    print(
        f"| three stdio servers on one folder, 3 s pace (`{Path(server).name}`) | request starts "
        "per host: "
        "smallest gap | overlapping requests | downloads per page | metadata asks per paper | API "
        "requests for three searches 1 s apart under a 429 throttle |\n|---|---|---|---|---|---|"
    )
    for run in range(runs):
        with tempfile.TemporaryDirectory() as folder:
            env = server_env(urls, os.path.join(folder, "a"), "3")
            seen.clear()
            throttled.clear()
            three_servers(env, server, [[(0.0, {"paper": i}) for i in ids]] * 3)
            turns = [
                pair
                for host in ("export", "html")
                for pair in itertools.pairwise(
                    sorted((s for s in seen if s[0] == host), key=lambda s: s[2])
                )
            ]
            gaps = [later[2] - earlier[2] for earlier, later in turns]
            overlaps = sum(later[2] < earlier[3] for earlier, later in turns)
            pages = Counter(path for _, path, _, _ in seen if path != "/api/query")
            metadata = Counter(path for _, path, _, _ in seen)["/api/query"]
            seen.clear()
            throttled.set()
            env["ARXIV_CACHE_DIR"] = os.path.join(folder, "b")
            three_servers(
                env, server, [[(float(n), {"query": "quantum criticality"})] for n in range(3)]
            )
            searches = sum(path == "/api/query (search)" for _, path, _, _ in seen)
            print(
                f"| run {run + 1} | {min(gaps, default=0):.2f} s | {overlaps} | "
                f"{', '.join(f'{p} {n}' for p, n in sorted(pages.items()))} | "
                f"{metadata / len(ids):g} | {searches} |"
            )
    api.shutdown()
    html.shutdown()
    report_turn_cost(pdfs)


def report_turn_cost(pdfs: dict[str, bytes]) -> None:
    """What taking a turn costs (a slot entered and left with no wait), per process and shared; and
    the overview of a paper kept on disk, read by a restarted server while another process holds its
    host's turn for 5 s."""
    import subprocess

    with tempfile.TemporaryDirectory() as folder:
        costs = {}
        for name, limiter in (
            ("per process (`RateLimiter`)", am.RateLimiter(0)),
            ("shared (`SharedLimiter`)", am.SharedLimiter(0, folder)),
        ):

            def turn(limiter: am.RateLimiter = limiter) -> None:
                with limiter.slot("127.0.0.1", service="127.0.0.1/api"):
                    limiter.cleared("127.0.0.1/api")  # as a request that succeeded does

            costs[name] = statistics.median(timed(turn)[0] for _ in range(2000))
        print(
            "\n| one turn (a slot taken and left, and the service cleared), median of 2,000 | ms "
            "|\n|---|---|"
        )
        for name, seconds in costs.items():
            print(f"| {name} | {seconds * 1e3:.3f} |")
        server = serve(corpus_answer(pdfs))
        settings = stand_in_settings(server, min_interval=3.0)
        first = am.PaperLibrary(
            settings, am.SharedLimiter(3.0, folder), am.DiskCache(folder, 10**9)
        )
        am.arxiv_tool(paper="1111.2011v2", library=first)
        wait_idle(first)
        holder = subprocess.Popen(
            [
                sys.executable,
                "-c",
                (
                    "import sys, time, arxiv_mcp as am\nlimiter = am.SharedLimiter(3.0, "
                    "sys.argv[1])\nwith limiter.slot('127.0.0.1'):\n    print('holding', "
                    "flush=True)\n    time.sleep(5)\n"
                ),
                folder,
            ],
            cwd=HERE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert holder.stdout.readline() == "holding\n"
        again = am.PaperLibrary(
            settings, am.SharedLimiter(3.0, folder), am.DiskCache(folder, 10**9)
        )
        seconds, overview = timed(am.arxiv_tool, paper="1111.2011v2", library=again)
        assert "kept on disk" in overview, overview[:500]
        print(
            "| an overview kept on disk, after a restart, while another process holds the host's "
            f"turn for 5 s | {seconds * 1e3:.1f} |"
        )
        holder.wait()
        server.shutdown()


def report_find_across(pdfs: dict[str, bytes], runs: int) -> None:
    """Issue 32: `find` with no paper over 50 papers read (the corpus PDFs and the shared HTML
    pages, under
    50 ids in turn), warm (the same server again; it keeps 16 papers in memory, the rest on disk)
    and after a restart (every text from the disk cache), with the requests it sends (none) and the
    peak of Python's allocations while it runs."""
    import tracemalloc

    htmls = [(HTML_DIR / f"{stem}.html").read_bytes() for stem in HTML_VERSIONS]
    sources = [("pdf", data) for data in pdfs.values()] + [("html", page) for page in htmls]
    ids = [f"2601.{n:05d}v1" for n in range(50)]
    chosen = {arxiv_id: sources[n % len(sources)] for n, arxiv_id in enumerate(ids)}
    answer = corpus_answer(
        {i: d for i, (kind, d) in chosen.items() if kind == "pdf"},
        {i: d for i, (kind, d) in chosen.items() if kind == "html"},
    )
    asked: list[str] = []
    server = serve(lambda path, query: asked.append(path) or answer(path, query))
    settings = stand_in_settings(server)
    queries = ["attention", "phase transition", '"the model"']
    rows: dict[str, list[float]] = {"warm": [], "after a restart": []}
    with tempfile.TemporaryDirectory() as folder:

        def library() -> am.PaperLibrary:
            return am.PaperLibrary(settings, am.RateLimiter(0.0), am.DiskCache(folder, 10**10))

        first = library()
        for arxiv_id in ids:
            am.arxiv_tool(paper=arxiv_id, library=first)
        wait_idle(first)
        read = len(asked)
        for _run in range(runs):
            for query in queries:
                rows["warm"].append(timed(am.arxiv_tool, find=query, library=first)[0])
                seconds, found = timed(am.arxiv_tool, find=query, library=library())
                rows["after a restart"].append(seconds)
                assert found.startswith(f"# {am._quote_input(query)} in the 50 papers read"), found[
                    :300
                ]
        tracemalloc.start()  # apart from the timing: it slows every allocation
        am.arxiv_tool(find=queries[0], library=library())
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    server.shutdown()
    assert len(asked) == read, "no request"
    print(
        f"| `find` alone over the 50 papers read ({', '.join(queries)}; {runs} runs) | median | "
        "slowest |"
    )
    print("|---|---|---|")
    for name, seconds in rows.items():
        print(
            f"| {name} | {statistics.median(seconds) * 1e3:.0f} ms | {max(seconds) * 1e3:.0f} ms |"
        )
    print(f"| requests sent by the searches | {len(asked) - read} | |")
    print(
        f"| peak of Python's allocations during one search after a restart | {peak / 1e6:.1f} MB "
        "| |"
    )


QUESTIONS = HERE / "testdata" / "questions.json"


def plain_words(text: str) -> str:
    """``text``'s words alone, folded as `find` folds them: how the truth set's evidence is
    compared with what an agent read."""
    return " ".join(re.findall(r"\w+", am._quick_fold(text)))


def evidence_reached(
    library: am.PaperLibrary, arxiv_id: str, words: str, evidence: str | list[str]
) -> tuple[bool, int, int]:
    """What an agent reads to reach ``evidence`` with ``find``, in turn until it holds it: the
    overview, `find`'s whole answer, then the section of its first passage.  Whether it reached
    the evidence, the characters it read (all three, then ``section="full"``, when it did not), and
    those of ``section="full"`` (capped at 50,000).  ``evidence``: its words, or a list where the
    paper answers in several places."""
    answers = evidence if isinstance(evidence, list) else [evidence]
    full = am.arxiv_tool(paper=arxiv_id, section="full", library=library)[:50_000]
    read = am.arxiv_tool(paper=arxiv_id, library=library)
    found = am.arxiv_tool(paper=arxiv_id, find=words, library=library)
    first = re.search(r"^1\. \*\*(.+?)\*\*", found, re.M)
    section = ""
    if first and first[1] != "front matter":
        label = first[1]
        number = label.split()[0] if re.match(r"[0-9A-Z]+(?:[.-][0-9A-Z]+)*\s", label) else label
        section = am.arxiv_tool(paper=arxiv_id, section=number, library=library)
    for step in (found, section):
        read += step
        if any(plain_words(words) in plain_words(read) for words in answers):
            return True, len(read), len(full)
    return False, len(read) + len(full), len(full)


def report_evidence() -> None:
    """Issue 72: the truth set's questions (testdata/questions.json), and their keywords, as an
    agent reads (``evidence_reached``): how often the evidence is reached before the full text, and
    the median share of the full text's tokens it costs."""
    truth = json.loads(QUESTIONS.read_text())["questions"]
    versions = {**HTML_VERSIONS, "2403.03507": "2403.03507v1"}
    htmls = {versions[stem]: (HTML_DIR / f"{stem}.html").read_bytes() for stem in versions}
    pdfs = {
        corpus_id(path): path.read_bytes()
        for path in (HERE / "testdata").glob("*.pdf")
        if corpus_id(path)
    }
    server = serve(corpus_answer(pdfs, htmls))
    library = am.PaperLibrary(stand_in_settings(server), am.RateLimiter(0.0))
    print(
        "| the truth set's 45 questions | evidence reached before the full text | median share "
        "of the full text's tokens | missed |\n|---|---|---|---|"
    )
    for kind in ("question", "keywords"):
        reached = []
        shares = []
        missed = []
        for item in truth:
            arxiv_id = versions.get(item["paper"]) or corpus_id(Path(item["paper"] + ".pdf"))
            got, read, full = evidence_reached(library, arxiv_id, item[kind], item["evidence"])
            reached.append(got)
            shares.append(read / full)
            if not got:
                missed.append(item[kind])
        print(
            f"| {kind} | {sum(reached)} of {len(reached)} ({sum(reached) / len(reached):.0%}) | "
            f"{statistics.median(shares):.0%} | {'; '.join(missed)} |"
        )
    server.shutdown()


BIBLIOGRAPHY = HERE / "testdata" / "bibliography.json"


def shared_reference_list(name: str) -> list[str]:
    """The entries of a shared HTML page's reference list (``../shared/html``), as
    ``section="references"`` reads them, each on one line."""
    parsed = am.parse_html((HTML_DIR / f"{name}.html").read_bytes())
    [listed] = [s for s in parsed.text.sections if am._name_role(s.title) == am.REFERENCES]
    return [" ".join(entry.text.split()) for entry in am.references(parsed.text, listed)]


def _record(fields: dict) -> am.Linked:
    return am.Linked(**{**fields, "authors": tuple(fields["authors"])})


def bibliography_cases() -> list[tuple[str, str, am.Citation, am.Linked | None, am.Linked]]:
    """Issue 74's truth set (``testdata/bibliography.json``) as cases to judge: (what it is, the
    verdict it must get, the reference, the record of the id it names, the record closest to its
    title).  Each real reference, as printed; its fabricated variants (another item's authors,
    another item's arXiv id, a title half its own and half another's with no id: the closest
    record is still its own, as a title match answers); and its minor differences (a year off by
    one, its last cited author dropped, its title cut at its colon, a word of its title split by a
    line break)."""
    truth = json.loads(BIBLIOGRAPHY.read_text())["references"]
    lists = {item["paper"]: shared_reference_list(item["paper"]) for item in truth}
    items = []
    for item in truth:
        [text] = [entry for entry in lists[item["paper"]] if item["cites"] in entry]
        items.append((am.parse_citations(text)[0], _record(item["record"])))
    cases = []
    for n, (citation, record) in enumerate(items):
        other_citation, other = items[(n + len(items) // 2) % len(items)]  # another field's
        by_id = record if (citation.arxiv_id or citation.doi) else None
        cases.append(("real", am.VERIFIED, citation, by_id, record))
        authored = dataclasses.replace(citation, authors=other_citation.authors)
        cases.append(("other authors", am.WRONG_AUTHORS, authored, by_id, record))
        swapped = dataclasses.replace(citation, arxiv_id=other.arxiv_id)
        cases.append(("another paper's id", am.WRONG_ID, swapped, other, record))
        words, others = record.title.split(), other.title.split()
        invented = " ".join(words[: len(words) // 2] + others[len(others) // 2 :])
        made_up = dataclasses.replace(  # and no id: no record has it
            citation,
            title=invented,
            text=citation.text.replace(citation.title, invented),
            arxiv_id="",
            doi="",
        )
        cases.append(("an invented title", am.NOT_FOUND, made_up, None, record))
        for name, minor in _minor_differences(citation):
            cases.append((name, am.VERIFIED, minor, by_id, record))
    return cases


def _minor_differences(citation: am.Citation) -> list[tuple[str, am.Citation]]:
    """``citation`` with each minor difference a real bibliography has that applies to it, read
    again from its changed text where it changes the text."""
    minor = []
    texts = []
    if citation.year:
        later = citation.text.replace(str(citation.year), str(citation.year + 1))
        texts.append(("a year off by one", later))
    if ":" in citation.title:
        head = citation.title.split(":")[0]
        texts.append(("a title cut at its colon", citation.text.replace(citation.title, head)))
    longest = max(citation.title.split(), key=len)
    if len(longest) >= 8:
        split = f"{longest[:4]}- {longest[4:]}"
        texts.append(("a word split by a line break", citation.text.replace(longest, split, 1)))
    minor = [(name, am.parse_citations(text)[0]) for name, text in texts]
    if len(citation.authors) >= 3:
        dropped = dataclasses.replace(citation, authors=citation.authors[:-1])
        minor.append(("an author dropped", dropped))
    return minor


def report_bibliography() -> None:
    """Issue 74: the truth set's agreement (``bibliography_cases``): for each kind of case, how many
    get the verdict they must, and which do not."""
    tally: dict[str, list[int]] = {}
    missed = []
    for name, expected, citation, by_id, by_title in bibliography_cases():
        got = am.judge_citation(citation, by_id, by_title).verdict
        tally.setdefault(name, [0, 0])
        tally[name][0] += got == expected
        tally[name][1] += 1
        if got != expected:
            missed.append(f"{name}: {citation.title[:50]} ({got})")
    print("| case | as it must be | of |\n|---|---|---|")
    for name, (right, total) in tally.items():
        print(f"| {name} | {right} ({right / total:.0%}) | {total} |")
    print("\n".join(missed) or "none missed")


def report_ask(pdfs: dict[str, bytes], runs: int) -> None:
    """Issue 72: what ranking costs. `find` warm on the largest paper of the corpus (keywords, then
    a question), and `find` alone over twenty papers read (the corpus PDFs and the shared HTML
    pages, under twenty ids in turn), warm: medians of ``runs``."""
    largest = max(pdfs, key=lambda i: len(pdfs[i]) if i == "2502.21088v1" else 0)
    htmls = [(HTML_DIR / f"{stem}.html").read_bytes() for stem in HTML_VERSIONS]
    sources = [("pdf", data) for data in pdfs.values()] + [("html", page) for page in htmls]
    ids = [f"2601.{n:05d}v1" for n in range(20)]
    chosen = {arxiv_id: sources[n % len(sources)] for n, arxiv_id in enumerate(ids)}
    chosen[largest] = ("pdf", pdfs[largest])
    answer = corpus_answer(
        {i: d for i, (kind, d) in chosen.items() if kind == "pdf"},
        {i: d for i, (kind, d) in chosen.items() if kind == "html"},
    )
    server = serve(answer)
    settings = stand_in_settings(server)
    library = am.PaperLibrary(settings, am.RateLimiter(0.0))
    am.arxiv_tool(paper=largest, section="full", library=library)
    wait_idle(library)
    asked = {
        "keywords": "cross section uncertainty",
        "a question": "how large is the systematic uncertainty of the cross section?",
    }
    rows = []
    for name, words in asked.items():
        am.arxiv_tool(paper=largest, find=words, library=library)
        seconds = [
            timed(am.arxiv_tool, paper=largest, find=words, library=library)[0] for _ in range(runs)
        ]
        rows.append((f"warm `find` of {name} on {largest}, the largest paper", seconds))
    for arxiv_id in ids:
        am.arxiv_tool(paper=arxiv_id, library=library)
    wait_idle(library)
    for name, words in asked.items():
        am.arxiv_tool(find=words, library=library)
        seconds = [timed(am.arxiv_tool, find=words, library=library)[0] for _ in range(runs)]
        rows.append((f"warm `find` of {name} alone, over the {len(ids) + 1} papers read", seconds))
    server.shutdown()
    print(f"| `find` ({runs} runs) | median | slowest |\n|---|---|---|")
    for name, seconds in rows:
        print(
            f"| {name} | {statistics.median(seconds) * 1e3:.0f} ms | {max(seconds) * 1e3:.0f} ms |"
        )


S2_DIR = HERE.parent / "shared" / "s2"
# Real snippet search answers whose papers are on arXiv (``../shared/s2``): ten passages, what a
# default `find` asks for.
ACROSS_CAPTURES = (
    "snippet_search_transmission-forest_paper_ids-ARXIV_3items_arxiv-2205.02150.json",
    "snippet_search_adam-moment-estimation_paper_ids-ARXIV_3items_arxiv-1412.6980.json",
    "snippet_search_wild-poliovirus-nigeria_paper_ids-PMID_3items_arxiv-1504.02751.json",
    "snippet_search_query-not-recorded_1item_arxiv-2506.12770.json",
)


def report_across(runs: int) -> None:
    """Issue 69: `find` without `paper` at the default length against a stand-in Semantic Scholar
    answering ten real passages (``ACROSS_CAPTURES``): the answer's characters and tokens, and its
    time, with nothing read (Semantic Scholar's part alone) and beside a paper read (2203.00274's
    HTML, whose passages of "table" answer first: the longest answer, both parts full)."""
    items = [
        item
        for name in ACROSS_CAPTURES
        for item in json.loads((S2_DIR / name).read_bytes())["data"]
    ]
    body = json.dumps({"data": items, "retrievalVersion": "pa1-v1"}).encode()
    page = (HTML_DIR / "2203.00274.html").read_bytes()
    arxiv = corpus_answer({}, {"2203.00274v2": page})

    def answer(path: str, query: dict[str, list[str]]) -> tuple | None:
        if path.endswith("/snippet/search"):
            return body, "application/json"
        return None if path.startswith("/graph/") else arxiv(path, query)

    server = serve(answer)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    settings = dataclasses.replace(stand_in_settings(server), s2_url=f"{base}/graph/v1")
    rows: dict[str, list[tuple[float, int]]] = {"nothing read": [], "beside a paper read": []}
    for _run in range(runs):
        for name, words in (("nothing read", "learning rate"), ("beside a paper read", "table")):
            library = am.PaperLibrary(settings, am.RateLimiter(0.0), ask_s2=True)
            if words == "table":
                am.arxiv_tool(paper="2203.00274v2", library=library)
            seconds, found = timed(am.arxiv_tool, find=words, library=library)
            assert "## Across arXiv, by meaning (Semantic Scholar)" in str(found), found
            rows[name].append((seconds, len(str(found))))
            library.close()
    server.shutdown()
    print(f"| `find` without `paper`, default length ({runs} runs) | chars | tokens | time |")
    print("|---|---|---|---|")
    for name, measured in rows.items():
        chars = statistics.median(size for _, size in measured)
        seconds = statistics.median(took for took, _ in measured)
        tokens = round(chars * am._TOKENS_PER_CHAR)
        print(f"| {name} | {chars:,.0f} | ~{tokens:,} | {seconds * 1e3:.0f} ms |")


def report_stalls(pdfs: dict[str, bytes], runs: int, server: str) -> None:
    """Issue 34: a stdio server (``server``, this checkout's by default) reads an HTML paper, then
    the overview of the 64-page PDF, and while that PDF downloads, has its structure pass, loads the
    layout model and converts in the background, the HTML paper's section is read 30 times, 0.1 s
    apart; the server process's RSS with HTML only, its peak meanwhile, and once the converter has
    exited (ARXIV_CONVERTER_IDLE=5).  Then a server reads four overviews and stops at once, and a
    restarted one on its cache folder reads them again."""
    import psutil

    htmls = {
        version: (HTML_DIR / f"{stem}.html").read_bytes() for stem, version in HTML_VERSIONS.items()
    }
    stand_in = serve(corpus_answer(pdfs, htmls))
    urls = stand_in_settings(stand_in)
    long_id, html_id = "2502.21088v1", "2203.00274v2"
    again_ids = [html_id, "2508.08468v6", "1111.2011v2", long_id]

    async def beside(session, process) -> tuple[list[float], float, float, float]:
        def rss() -> float:  # of the server, and of each of its converters
            for child in process.children():
                with contextlib.suppress(psutil.Error):  # (one that exits meanwhile)
                    if "spawn_main" in " ".join(child.cmdline()):
                        peaks[1][child.pid] = max(
                            peaks[1].get(child.pid, 0.0), child.memory_info().rss / 1e6
                        )
            return process.memory_info().rss / 1e6

        await session.call_tool("arxiv", {"paper": html_id, "section": "3"})
        peaks, reads = [0.0, {}], []  # the server's, its converters' by process id
        html_only = peaks[0] = rss()
        overview = asyncio.create_task(timed_call(session, paper=long_id))
        for _ in range(30):
            await asyncio.sleep(0.1)
            reads.append((await timed_call(session, paper=html_id, section="3"))[0])
            peaks[0] = max(peaks[0], rss())
        await overview
        # the converter's work, idle exit
        while converting(process):
            peaks[0] = max(peaks[0], rss())
            await asyncio.sleep(0.2)
        return reads, html_only, peaks, rss()

    def converting(process) -> bool:
        """Whether a converter process of the server's is alive (one exited, a zombie, is not)."""
        for child in process.children():
            with contextlib.suppress(psutil.ZombieProcess, psutil.NoSuchProcess):
                if "spawn_main" in " ".join(child.cmdline()):
                    return True
        return False

    async def overviews(session, process) -> list[float]:
        return [(await timed_call(session, paper=i))[0] for i in again_ids]

    print(
        f"| `{Path(server).name}`, run | warm HTML section beside the 64-page PDF: median / p95 / "
        "worst | server RSS: HTML only / peak while the PDF converts / after the converters exit "
        f"(their peaks) | overviews after a restart ({', '.join(again_ids)}) |\n|---|---|---|---|"
    )
    for run in range(runs):
        with tempfile.TemporaryDirectory() as folder:
            env = server_env(urls, folder, "0", ARXIV_CONVERTER_IDLE="5")
            reads, html_only, (peak, converters), after = with_server(env, server, beside)
            env["ARXIV_CACHE_DIR"] = os.path.join(folder, "again")
            # read, then stopped at once: most pages unconverted
            with_server(env, server, overviews)
            again = with_server(env, server, overviews)
        p95 = statistics.quantiles(reads, n=20)[-1]
        print(
            f"| {run + 1} | {statistics.median(reads) * 1e3:.0f} / {p95 * 1e3:.0f} / "
            f"{max(reads) * 1e3:.0f} ms | "
            f"{html_only:.0f} / {peak:.0f} / {after:.0f} MB (converters "
            f"{' and '.join(f'{m:.0f}' for m in sorted(converters.values(), reverse=True))} MB) | "
            f"{' / '.join(f'{s * 1e3:.0f}' for s in again)} ms |"
        )
    stand_in.shutdown()
    converter, key = am.ConverterProcess(), ("1111.2011v2", "pdf")
    first = timed(converter.structure, key, pdfs["1111.2011v2"])[0]
    warm = timed(converter.structure, ("again", "pdf"), pdfs["1111.2011v2"])[0]
    started = timed(converter.page, key, pdfs["1111.2011v2"], 1, None)[0]
    converter.stop()
    structures = am.ConverterProcess(layout=False)  # as the server's for structure passes
    light = timed(structures.structure, key, pdfs["1111.2011v2"])[0]
    structures_rss = psutil.Process(structures.generation.process.pid).memory_info().rss / 1e6
    structures.stop()
    print(
        f"| a new converter: its first structure pass (1111.2011v2) {first:.2f} s, a second "
        f"{warm:.2f} s; its first page (the layout model loads) {started:.2f} s; a new one without "
        f"the layout model: its first structure pass {light:.2f} s, its RSS then "
        f"{structures_rss:.0f} MB | | | |"
    )


def report_faults(pdfs: dict[str, bytes], runs: int) -> None:
    """Issue 56: the five smallest papers read whole (``section="full"``, the PDF, the server's two
    converter processes and a disk cache) at once, with no kill, then while every converter process
    is killed (SIGKILL, as the OOM killer sends it) every 2.5 s for 15 s; a read that says the
    converter keeps being killed is asked again.  Reported: whether each read whole with the text
    of the clean read, and the time until all had, against the clean read's."""
    stand_in = serve(corpus_answer(pdfs))
    settings = dataclasses.replace(stand_in_settings(stand_in), policy="pdf")
    papers = sorted(pdfs, key=lambda i: len(pdfs[i]))[:5]

    def kill_converters(until: float) -> int:
        killed = 0
        while time.monotonic() < until:
            time.sleep(2.5)
            for child in am.multiprocessing.active_children():
                if child.name == "arxiv-converter":
                    child.kill()
                    killed += 1
        return killed

    def read_all(killing: float) -> tuple[float, dict[str, str], int, int]:
        """Seconds until every paper read whole, the texts, the kills, the answers asked again."""
        with tempfile.TemporaryDirectory() as folder:
            library = am.PaperLibrary(
                settings,
                am.RateLimiter(0.0),
                am.DiskCache(folder, 10**9),
                (am.ConverterProcess(), am.ConverterProcess(layout=False)),
            )
            kills: list[int] = []
            killer = threading.Thread(
                target=lambda: kills.append(kill_converters(time.monotonic() + killing))
            )
            texts, again, started = {}, 0, time.perf_counter()
            killer.start()

            def read(arxiv_id: str) -> None:
                nonlocal again
                while "keeps being killed" in (
                    text := am.arxiv_tool(paper=arxiv_id, section="full", library=library)
                ):
                    again += 1
                    time.sleep(1)
                texts[arxiv_id] = text.split("## Full Text")[-1]

            readers = [threading.Thread(target=read, args=(i,)) for i in papers]
            for reader in readers:
                reader.start()
            for reader in readers:
                reader.join()
            took = time.perf_counter() - started
            killer.join()
            library.close()
        return took, texts, kills[0], again

    print(
        f"| run | clean: all five whole ({', '.join(papers)}) | killed every 2.5 s for 15 s: all "
        "whole | kills | asked again | each text as the clean read's |\n|---|---|---|---|---|---|"
    )
    for run in range(runs):
        clean, clean_texts, _, _ = read_all(0)
        faulted, texts, kills, again = read_all(15)
        same = sum(texts[i] == clean_texts[i] for i in papers)
        whole = sum("unavailable" not in texts[i] for i in papers)
        print(
            f"| {run + 1} | {clean:.1f} s | {faulted:.1f} s ({whole} of 5 whole) | {kills} | "
            f"{again} | {same} of 5 |"
        )
    stand_in.shutdown()


def search_feed(ids: list[str]) -> str:
    """A search's Atom feed that lists ``ids``, each with ATOM_ENTRY's minimal metadata."""
    feed = ATOM_ENTRY.replace("<opensearch:totalResults>1", f"<opensearch:totalResults>{len(ids)}")
    entry = feed[feed.index("  <entry>") : feed.index("</feed>")]
    return (
        feed.replace(entry, "".join(entry.format(id=i) for i in ids))
        .replace("{{", "{")
        .replace("}}", "}")
    )


def announcement(papers, types, day=None) -> bytes:
    """A day's feed as arXiv's feed service writes it (arXiv/arxiv-feed's serializer, as in the
    real capture): ``papers`` announced as ``types``, dated ``day`` (default: today's, US
    Eastern)."""
    eastern = zoneinfo.ZoneInfo("America/New_York")
    day = day or datetime.datetime.now(eastern).replace(hour=0, minute=0, second=0, microsecond=0)
    stamp = email.utils.format_datetime(day)
    items = []
    for paper, kind in zip(papers, types, strict=True):
        base = am._split_version(paper.arxiv_id)[0]
        categories = dict.fromkeys([paper.primary_category, *paper.categories])
        extras = "".join(f"<category>{c}</category>" for c in categories)
        extras += f"<pubDate>{stamp}</pubDate><arxiv:announce_type>{kind}</arxiv:announce_type>"
        extras += "".join(f"<arxiv:DOI>{escape(d)}</arxiv:DOI>" for d in paper.dois[:1])
        if paper.journal_ref:
            extras += (
                f"<arxiv:journal_reference>{escape(paper.journal_ref)}</arxiv:journal_reference>"
            )
        creators = escape(", ".join(author.name for author in paper.authors))
        items.append(
            f"<item><title>{escape(paper.title)}</title><link>https://arxiv.org/abs/{base}</link>"
            f"<description>arXiv:{paper.arxiv_id} Announce Type: {kind} \nAbstract: "
            f'{escape(paper.abstract)}</description><guid isPermaLink="false">'
            f"oai:arXiv.org:{paper.arxiv_id}</guid>{extras}<dc:creator>{creators}</dc:creator></item>"
        )
    return (
        "<?xml version='1.0' encoding='UTF-8'?>\n"
        '<rss xmlns:arxiv="http://arxiv.org/schemas/atom" xmlns:dc="http://purl.org/dc/elements/1.1/"'
        ' version="2.0"><channel><title>cs.LG updates on arXiv.org</title>'
        f"<pubDate>{stamp}</pubDate>{''.join(items)}</channel></rss>"
    ).encode()


def first_section(overview: str) -> str:
    """The number (or first word) of the first section an overview lists."""
    return re.search(r"^- \*\*(\S+)", overview.split("## Sections")[1], re.M)[1]


def report_pace(pdfs: dict[str, bytes], runs: int, server: str) -> None:
    """Issue 40: the agent session at arXiv's pace as a client runs it: a stdio server (``server``)
    with a fresh disk cache and ARXIV_MIN_INTERVAL=3 searches, and the search lists 2304.02623v1,
    1111.2011v2 and 2203.00274v2 (only the last has HTML); then the agent reads each one's overview
    and first section, one call after the other.  Every request goes to one stand-in host, so the
    limiter's floor is 3 s between requests.  Reported: the wall time from the search to the last
    answer, the floor, and when each request reached the stand-in."""
    ids = ["2304.02623v1", "1111.2011v2", "2203.00274v2"]
    feed, answer = (
        search_feed(ids),
        corpus_answer(pdfs, {"2203.00274v2": (HTML_DIR / "2203.00274.html").read_bytes()}),
    )
    arrived: list[tuple[float, str]] = []

    def logged(
        path: str, query: dict[str, list[str]]
    ) -> tuple[bytes, str] | tuple[bytes, str, int] | None:
        arrived.append((time.perf_counter(), "search" if "search_query" in query else path))
        return (
            (feed.encode(), "application/atom+xml")
            if "search_query" in query
            else answer(path, query)
        )

    async def session(session, process) -> tuple[float, float, list[tuple[str, float]]]:
        arrived.clear()
        start, calls = time.perf_counter(), []
        calls.append(("search", (await timed_call(session, query="session"))[0]))
        for arxiv_id in ids:
            seconds, overview = await timed_call(session, paper=arxiv_id)
            calls.append((f"{arxiv_id} overview", seconds))
            calls.append(
                (
                    f"{arxiv_id} first section",
                    (await timed_call(session, paper=arxiv_id, section=first_section(overview)))[0],
                )
            )
        return start, time.perf_counter(), calls

    stand_in = serve(logged)
    urls = stand_in_settings(stand_in)
    print(
        "| run | wall time (search to last answer) | the limiter's floor | calls (s) | requests "
        "(s after the search) |\n|---|---|---|---|---|"
    )
    for run in range(runs):
        with tempfile.TemporaryDirectory() as folder:
            env = server_env(urls, folder, "3")
            start, end, calls = with_server(env, server, session)
        wall = end - start
        requests = ", ".join(f"{path} {when - start:.1f}" for when, path in arrived)
        print(
            f"| {run + 1} | {wall:.2f} s | {3.0 * (len(arrived) - 1):.0f} s | "
            f"{', '.join(f'{name} {seconds:.2f}' for name, seconds in calls)} | {requests} |"
        )
    stand_in.shutdown()


def report_listing(runs: int) -> None:
    """The day's announcement at the feed's cap, 2,000 papers (the 100 real entries of a captured
    search, renumbered), from a loopback feed: the first call (the request, parsing, keeping it on
    disk, a page), the next page, ``find`` within it, the first call after a restart (from the
    disk), and the memory a parsed day holds."""
    import tracemalloc

    real = am.parse_feed((HERE / "testdata" / "2026_search_testing_100results.xml").read_bytes())
    papers = [
        dataclasses.replace(paper, arxiv_id=f"2609.{n:05d}v1")
        for n, paper in enumerate(real.papers * 20)
    ]
    kinds = ["new"] * 800 + ["cross"] * 400 + ["replace"] * 700 + ["replace-cross"] * 100
    feed = announcement(papers, kinds)
    server = serve(lambda path, query: (feed, "application/rss+xml"))
    settings = stand_in_settings(server)
    rows: dict[str, list[float]] = {}
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as folder:
            cache = am.DiskCache(folder, 10**9)
            library = am.PaperLibrary(settings, am.RateLimiter(0), cache)
            for name, arguments, asked in (
                ("first call: the feed asked, parsed, kept, a page", {}, library),
                ("the next page", {"start": 10}, library),
                ('`find="neural network"` within it', {"find": "neural network"}, library),
                ("the first call after a restart (from the disk)", {}, None),
            ):
                asked = asked or am.PaperLibrary(settings, am.RateLimiter(0), cache)
                seconds, answer = timed(
                    am.arxiv_tool, categories="cs.AI", library=asked, **arguments
                )
                assert not str(answer).startswith(am.ERROR), answer
                rows.setdefault(name, []).append(seconds)
    server.shutdown()
    tracemalloc.start()
    listing = am.parse_listing(feed)
    held = tracemalloc.get_traced_memory()[0] / 1e6
    tracemalloc.stop()
    print(
        f"\n| {len(listing.items):,} papers, a {len(feed) / 1e6:.1f} MB feed | median of {runs} |"
    )
    print("|---|---|")
    for name, seconds in rows.items():
        print(f"| {name} | {statistics.median(seconds) * 1000:.0f} ms |")
    print(f"| memory a parsed day holds | {held:.1f} MB |")


def report_session(pdfs: dict[str, bytes], runs: int, throttled: bool = False) -> None:
    """Issue 23's targets: an agent searches, then reads the overview and first section of 3
    results, at arXiv's pace (a 3 s limiter gap), with a disk cache; then a restarted server does
    the same.  The API and PDFs are served from 127.0.0.1, the HTML from 127.0.0.2, as arXiv serves
    them from two hosts.  ``throttled`` (issue 24): every API request is answered 429 "Rate
    exceeded.", as in arXiv's long throttles; the search must fail at once, and each overview carry
    the paper's own title and the note."""
    htmls = {
        version: (HTML_DIR / f"{stem}.html").read_bytes() for stem, version in HTML_VERSIONS.items()
    }
    ids = [i for i in ("2203.00274v2", "2508.08468v6", "1111.2011v2") if i in pdfs or i in htmls]
    feed, answer, asked = search_feed(ids), corpus_answer(pdfs, htmls), []

    def counted(
        path: str, query: dict[str, list[str]]
    ) -> tuple[bytes, str] | tuple[bytes, str, int] | None:
        asked.append(path)
        if throttled and path == "/api/query":
            return b"Rate exceeded.", "text/plain", 429
        return (
            (feed.encode(), "application/atom+xml")
            if "search_query" in query
            else answer(path, query)
        )

    api, html = serve(counted), serve(counted, host="127.0.0.2")
    settings = stand_in_settings(api, html, min_interval=3.0)

    def session(library: am.PaperLibrary) -> tuple[float, list[str], list[float]]:
        asked.clear()
        start, overviews = time.perf_counter(), []
        searched = am.arxiv_tool(library=library, query="session")
        assert searched.startswith(am.ERROR if throttled else "# arXiv search"), searched
        for arxiv_id in ids:
            seconds, overview = timed(am.arxiv_tool, paper=arxiv_id, library=library)
            overviews.append(seconds)
            assert ("> Metadata from the paper itself" in overview) == throttled, overview[:300]
            assert not am.arxiv_tool(
                paper=arxiv_id, section=first_section(overview), library=library
            ).startswith(am.ERROR)
        return time.perf_counter() - start, list(asked), overviews

    print("| session | requests | wall time | the limiter's floor | overviews (median / slowest) |")
    print("|---|---|---|---|---|")
    for run in range(runs):
        with tempfile.TemporaryDirectory() as folder:
            for name in ("first", "after a restart"):
                library = am.PaperLibrary(
                    settings, am.SharedLimiter(3.0, folder), am.DiskCache(folder, 10**9)
                )
                seconds, requests, overviews = session(library)
                if throttled:
                    requests = [
                        f"{path} (429)" if path == "/api/query" else path for path in requests
                    ]
                hosts = Counter(
                    "html" if path.startswith("/html/") else "export" for path in requests
                )
                floor = 3.0 * max(0, max(hosts.values(), default=1) - 1)
                print(
                    f"| {name} (run {run + 1}) | {len(requests)}: {', '.join(requests)} | "
                    f"{seconds:.2f} s | {floor:.0f} s | {statistics.median(overviews) * 1e3:.0f} "
                    f"ms / {max(overviews) * 1e3:.0f} ms |"
                )
                wait_idle(library)
    api.shutdown()
    html.shutdown()


def report_start(runs: int, server: str) -> None:
    """What a start costs where ``PYTHONDONTWRITEBYTECODE`` is set (issue 65): seconds from starting
    ``uv run <server>`` to its ``tools/list`` answer, and for a process of the script's environment
    (a converter's) to import pymupdf4llm; medians of ``runs``, after one start that makes the
    environment."""
    uv = shutil.which("uv")
    if uv is None:
        print("uv is not installed: nothing to measure")
        return
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "ARXIV_S2_URL": "off"}
    command = [uv, "run", server]
    made = server_ready_seconds(env, command)
    ready = [server_ready_seconds(env, command) for _ in range(runs)]
    found = subprocess.run(
        [uv, "python", "find", "--script", server], capture_output=True, text=True, check=True
    )
    imports = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([found.stdout.strip(), "-c", "import pymupdf4llm"], env=env, check=True)
        imports.append(time.perf_counter() - start)
    print("\n| with PYTHONDONTWRITEBYTECODE=1 | median | runs |\n|---|---|---|")
    print(f"| the first start (its environment made or found) | {made:.2f} s | 1 |")
    print(f"| `uv run` to `tools/list` | {statistics.median(ready):.2f} s | {runs} |")
    print(f"| a converter's `import pymupdf4llm` | {statistics.median(imports):.2f} s | {runs} |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "pdf_dir", nargs="?", default=str(HERE.parent / "shared" / "corpus" / "pdf")
    )
    parser.add_argument(
        "--runs", type=int, default=3, help="runs per measurement (medians are reported)"
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=0.0,
        help="the rate limiter's gap in seconds (arXiv's is 3; 0 measures the pipeline alone)",
    )
    parser.add_argument(
        "--latency", type=float, default=0.0, help="seconds the stand-in waits before answering"
    )
    parser.add_argument("--papers", nargs="*", help="only these ids")
    parser.add_argument(
        "--agent",
        action="store_true",
        help="only the agent-session scenario (no pause between papers), with the limiter's gap "
        "at --interval and at arXiv's 3 s",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="only convert every page and check the text for converter debris (issue 12)",
    )
    parser.add_argument(
        "--twice",
        action="store_true",
        help="only convert each paper's first page twice and check that both are the same (what "
        "the tests check on a sample of the corpus's layouts)",
    )
    parser.add_argument(
        "--integrity",
        action="store_true",
        help="only convert every page and check that each section holds its own text, against the "
        "PDF's text layer and the HTML's paragraphs (issue 49)",
    )
    parser.add_argument(
        "--compare-modes",
        action="store_true",
        help="only compare, on papers without PDF bookmarks, pymupdf4llm's layout and legacy modes "
        "and the font outline",
    )
    parser.add_argument(
        "--html",
        action="store_true",
        help="only arXiv's HTML (issue 22): the shared pages against their PDFs, and the memory "
        "of a "
        "server that reads only HTML",
    )
    parser.add_argument(
        "--session",
        action="store_true",
        help="only the agent session at arXiv's pace with a disk cache, then after a restart "
        "(issue 23)",
    )
    parser.add_argument(
        "--hidden",
        action="store_true",
        help="only what finding hidden text costs: the structure pass, parse_html and conversion, "
        "each with the check and without it (issue 29)",
    )
    parser.add_argument(
        "--overviews",
        action="store_true",
        help="only the overviews an agent routes by: sizes, rows with a sentence (issue 30)",
    )
    parser.add_argument(
        "--machine",
        action="store_true",
        help="only three stdio servers on one cache folder, and what a shared turn costs "
        "(issue 31)",
    )
    parser.add_argument(
        "--find",
        action="store_true",
        help="only `find` over the 50 papers read, warm and after a restart (issue 32)",
    )
    parser.add_argument(
        "--ask",
        action="store_true",
        help="only `find` as an agent asks: what ranking costs (issue 72)",
    )
    parser.add_argument(
        "--bibliography",
        action="store_true",
        help="only `check`'s verdicts on its truth set: real, fabricated, minor (issue 74)",
    )
    parser.add_argument(
        "--pace",
        action="store_true",
        help="only the agent session at arXiv's pace through a real stdio server (issue 40)",
    )
    parser.add_argument(
        "--listing",
        action="store_true",
        help="only the day's announcement at the feed's cap: asked, paged, found, restarted "
        "(issue 44)",
    )
    parser.add_argument(
        "--stalls",
        action="store_true",
        help="only answers beside background PDF work, after a restart, and memory (issue 34)",
    )
    parser.add_argument(
        "--faults",
        action="store_true",
        help="only five full reads while the converters are killed every 2.5 s (issue 56)",
    )
    parser.add_argument(
        "--across",
        action="store_true",
        help="only `find` without `paper` across arXiv at the default length: its tokens, against "
        "a stand-in Semantic Scholar answering real passages (issue 69)",
    )
    parser.add_argument(
        "--start",
        action="store_true",
        help="only what a start costs where PYTHONDONTWRITEBYTECODE is set: the server's ready "
        "time through uv run, a converter's import (issue 65)",
    )
    parser.add_argument(
        "--server",
        default=str(HERE / "arxiv_mcp.py"),
        help="with --machine, --stalls, --pace or --start: the server script to start (another "
        "checkout's, to compare)",
    )
    parser.add_argument(
        "--throttled",
        action="store_true",
        help="with --session: every API request answered 429 'Rate exceeded.' (issue 24)",
    )
    args = parser.parse_args()

    paths = sorted(Path(args.pdf_dir).glob("*.pdf"))
    pdfs = {corpus_id(p): p.read_bytes() for p in paths if corpus_id(p)}
    if args.papers:
        pdfs = {k: v for k, v in pdfs.items() if k in args.papers}
    if args.compare_modes:
        compare_modes(pdfs, am.SETTINGS.max_pages)
        return
    if args.check:
        sys.exit(1 if check(pdfs) else 0)
    if args.integrity:
        sys.exit(1 if report_integrity(pdfs) else 0)
    if args.twice:
        sys.exit(1 if report_twice(pdfs) else 0)
    reports = {  # each mode, by its flag: a report of its own, on the stand-in it makes
        "html": lambda: report_html(
            pdfs, args.runs, {corpus_id(p) for p in paths if "-pg" in p.stem}
        ),
        "session": lambda: report_session(pdfs, args.runs, args.throttled),
        "hidden": lambda: report_hidden(pdfs, args.runs),
        "overviews": lambda: report_overviews(pdfs),
        "machine": lambda: report_machine(pdfs, args.runs, args.server),
        "find": lambda: report_find_across(pdfs, args.runs),
        "ask": lambda: (report_evidence(), report_ask(pdfs, args.runs)),
        "stalls": lambda: report_stalls(pdfs, args.runs, args.server),
        "pace": lambda: report_pace(pdfs, args.runs, args.server),
        "listing": lambda: report_listing(args.runs),
        "faults": lambda: report_faults(pdfs, args.runs),
        "start": lambda: report_start(args.runs, args.server),
        "across": lambda: report_across(args.runs),
        "bibliography": report_bibliography,
    }
    if report := next((report for flag, report in reports.items() if getattr(args, flag)), None):
        report()
        return
    server = serve(corpus_answer(pdfs), args.latency)
    settings = stand_in_settings(server, min_interval=args.interval)
    if args.agent:
        report_agent_session(pdfs, settings, args.runs)
        return
    env = server_env(settings, "off", str(args.interval))

    print(
        f"{len(pdfs)} papers, {args.runs} runs each, limiter gap {args.interval:g} s, latency "
        f"{args.latency:g} s, "
        f"{os.cpu_count()} cores",
        file=sys.stderr,
    )
    baseline(next(iter(pdfs.values())), 1)  # load the layout model before anything is timed
    import pymupdf

    page_counts = {}
    for arxiv_id, data in pdfs.items():
        with pymupdf.open(stream=data, filetype="pdf") as doc:
            page_counts[arxiv_id] = doc.page_count
    rows = []
    for arxiv_id, data in pdfs.items():
        pages = min(page_counts[arxiv_id], settings.max_pages)
        base_time = statistics.median(baseline(data, settings.max_pages) for _ in range(args.runs))
        measured = measure_paper(arxiv_id, settings, args.runs)
        rows.append((arxiv_id, pages, base_time, measured))
        print(
            f"{arxiv_id}: {pages} pages, baseline {base_time:.2f} s, "
            + ", ".join(f"{k} {v:.3f}" for k, v in measured.items()),
            file=sys.stderr,
        )

    # The limiter's 3 s gap between the PDF and the metadata request overlaps the conversion.
    polite = dataclasses.replace(settings, min_interval=3.0)
    gap_id = min(pdfs, key=lambda k: len(pdfs[k]))
    gap = statistics.median(
        timed(
            am.arxiv_tool,
            paper=gap_id,
            section="full",
            library=am.PaperLibrary(polite, am.RateLimiter(3.0)),
        )[0]
        for _ in range(args.runs)
    )
    gap_conversion = next(m["cold full text"] for i, _, _, m in rows if i == gap_id)

    commands = {"python arxiv_mcp.py": [sys.executable, str(HERE / "arxiv_mcp.py")]}
    if shutil.which("uv"):
        commands["uv run arxiv_mcp.py"] = [shutil.which("uv"), "run", str(HERE / "arxiv_mcp.py")]
        server_ready_seconds(env, commands["uv run arxiv_mcp.py"])  # warm uv's cache for the script
    ready = {
        name: statistics.median(server_ready_seconds(env, command) for _ in range(args.runs))
        for name, command in commands.items()
    }
    largest = max(page_counts, key=page_counts.get)  # the longest paper
    peak = server_calls(env, [{"paper": largest, "section": "full"}])[0]
    server.shutdown()

    def median_of(name: str) -> float:
        return statistics.median(m[name] for _, _, _, m in rows)

    def ratio_of(name: str, among: Callable[[str], bool] = lambda _: True) -> float:
        return statistics.median(m[name] / b for i, _, b, m in rows if among(i))

    kinds = {i: structure(pdfs[i], settings.max_pages) for i in pdfs}
    groups = {"PDF bookmarks": "bookmarks", "headings by font": "fonts", "neither": "none"}

    total_pages = sum(p for _, p, _, _ in rows)
    sizes = [m["overview chars"] for _, _, _, m in rows]
    print("\n| measurement | median | ratio to baseline |\n|---|---|---|")
    print(
        f"| baseline: one `pymupdf4llm.to_markdown` of the paper (≤ {settings.max_pages} pages) | "
        f"{statistics.median(b for _, _, b, _ in rows):.2f} s "
        f"({statistics.median(b / p for _, p, b, _ in rows):.2f} s/page) | 1.00 |"
    )
    for name in ("cold overview", "cold overview + first section", "cold find", "cold full text"):
        split = "; ".join(
            f"{label}, {sum(k == kind for k in kinds.values())} papers: "
            f"{ratio_of(name, lambda i, kind=kind: kinds[i] == kind):.2f}"
            for label, kind in groups.items()
            if kind in kinds.values()
        )
        print(f"| {name} | {median_of(name):.2f} s | {ratio_of(name):.2f} ({split}) |")
    for name in ("warm section", "warm overview", "warm find"):
        print(f"| {name} | {median_of(name) * 1000:.2f} ms | |")
    print(
        f"| cold full text of {gap_id} with arXiv's 3 s limiter gap ({gap_conversion:.2f} s "
        f"without it) | {gap:.2f} s | target ≤ max(conversion, 3 s) + 0.5 s = "
        f"{max(gap_conversion, 3.0) + 0.5:.2f} s |"
    )
    print(
        "| overview size (budget: ≤ 4,000 typical, never > 4,500) | "
        f"{statistics.median(sizes):,.0f} chars; largest {max(sizes):,.0f}; "
        f"{sum(s <= 4000 for s in sizes)} of {len(sizes)} papers ≤ 4,000 | |"
    )
    for name, seconds in ready.items():
        print(f"| server start to `tools/list` (`{name}`, SDK stdio client) | {seconds:.2f} s | |")
    print(
        f"| peak RSS of the server's process, {largest} ({page_counts[largest]} pages) in full | "
        f"{peak:.0f} MB | |"
    )
    print(
        f"\n{len(rows)} papers, {total_pages} pages; medians over papers of the per-paper medians "
        f"of {args.runs} runs."
    )


if __name__ == "__main__":
    main()
