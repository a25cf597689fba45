#!/usr/bin/env python3
"""Checks the documentation's links (ctest: doc_links).

    python3 tests/tools/doc_links_test.py [--self-test] [REPO_ROOT]

Every relative link and anchor in README.md and docs/*.md must resolve:
  [text](path), [text](path#anchor), [text](#anchor), ![alt](path), reference-style
  links ([text][label], [label][] and their [label]: path definitions), and HTML
  <a href="..."> / <img src="...">. Anchors follow GitHub's heading slugs (lowercase,
  punctuation other than '-' and '_' removed, spaces to '-', a repeated heading gets -1,
  -2, ...). http(s) and mailto links are skipped; a link that leaves the repository
  (../elsewhere/...) is an error: the project must stand alone. Links inside code (fenced
  blocks, `code spans`) and HTML comments are not links and are not checked.
Also: README.md may hold at most README_LIMIT bytes (`wc -c README.md`), so that the
README stays a short user's guide and the rest lives in docs/.

Prints every broken link as FILE:LINE: message, then "N passed, M failed"; exits 1 when
anything failed. --self-test first runs the checker on a scratch tree with known broken
links and anchors and fails unless it finds exactly those (the checker can fail).
Python 3 standard library only.
"""
import os
import re
import sys
import tempfile
import urllib.parse

README_LIMIT = 12000
SKIP_SCHEMES = ("http", "https", "mailto")

FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
COMMENT_RE = re.compile(r"<!--.*?-->", re.S)
ATX_RE = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT_RE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
REFDEF_RE = re.compile(r"^ {0,3}\[([^\]]+)\]:[ \t]*(<[^>]*>|\S+)", re.M)
# Inline link or image: ](dest) or ](dest "title"); dest may hold balanced parentheses.
INLINE_RE = re.compile(
    r"\]\(\s*(<[^>\n]*>|(?:[^()\s]|\((?:[^()\s])*\))*)(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)")
# Full and collapsed references: [text][label], [label][].
REFUSE_RE = re.compile(r"\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\[([^\[\]]*)\]")
HTML_RE = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*(\"[^\"]*\"|'[^']*')", re.I)
HTML_ID_RE = re.compile(r"<[a-z][^>]*?\b(?:id|name)\s*=\s*(\"[^\"]*\"|'[^']*')", re.I)
SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
LINE_ANCHOR_RE = re.compile(r"^L\d+(-L\d+)?$")


def blank_out(text, start, end):
    """text with [start, end) replaced by spaces, newlines kept (line numbers stay)."""
    return text[:start] + re.sub(r"[^\n]", " ", text[start:end]) + text[end:]


def strip_code(text, spans=True):
    """Blanks fenced code blocks and HTML comments, and code spans unless spans is False;
    keeps line numbers."""
    lines = text.split("\n")
    out, fence = [], None
    for line in lines:
        m = FENCE_RE.match(line)
        if fence is None and m:
            fence = m.group(1)
            out.append("")
            continue
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                    and line.strip() == m.group(1):
                fence = None
            out.append("")
            continue
        out.append(line)
    text = "\n".join(out)
    for m in reversed(list(COMMENT_RE.finditer(text))):
        text = blank_out(text, m.start(), m.end())
    if not spans:
        return text
    # Code spans: a run of n backticks up to the next run of exactly n, within a paragraph.
    i = 0
    while True:
        m = re.compile(r"`+").search(text, i)
        if not m:
            break
        ticks = m.group(0)
        close = re.compile(r"(?<!`)" + ticks + r"(?!`)").search(text, m.end())
        if close and "\n\n" not in text[m.end():close.start()]:
            text = blank_out(text, m.start(), close.end())
            i = close.end()
        else:
            i = m.end()
    return text


def slugify(heading):
    """GitHub's anchor for a heading's text (before the -1, -2 of repeats)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)                           # HTML tags
    text = re.sub(r"(?<![\w])_(\S(?:.*?\S)?)_(?![\w])", r"\1", text)  # _emphasis_
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)   # \w keeps letters, digits and '_' (Unicode too)
    return text.replace(" ", "-")


def anchors_of(text):
    """Every anchor a Markdown file defines: heading slugs (with repeats numbered) and ids."""
    code_free = strip_code(text, spans=False)   # a heading's `code` is part of its slug
    lines = code_free.split("\n")
    slugs, seen = set(), {}

    def add(heading):
        base = slugify(heading)
        slug, n = base, seen.get(base, 0)
        while slug in seen:
            n += 1
            slug = "%s-%d" % (base, n)
        seen[base] = n
        seen.setdefault(slug, 0)
        slugs.add(slug)

    for i, line in enumerate(lines):
        m = ATX_RE.match(line)
        if m:
            add(m.group(2) or "")
            continue
        if i + 1 < len(lines) and line.strip() and SETEXT_RE.match(lines[i + 1]) \
                and not line.lstrip().startswith(("|", "-", "*", "+", ">")) \
                and not (i > 0 and lines[i - 1].strip() and not ATX_RE.match(lines[i - 1])):
            add(line.strip())
    for m in HTML_ID_RE.finditer(code_free):
        slugs.add(m.group(1)[1:-1])
    return slugs


class Checker:
    def __init__(self, root):
        self.root = os.path.realpath(root)
        self.passed = 0
        self.failures = []
        self._anchors = {}

    def anchors(self, path):
        if path not in self._anchors:
            with open(path, encoding="utf-8") as f:
                self._anchors[path] = anchors_of(f.read())
        return self._anchors[path]

    def fail(self, rel, line, message):
        self.failures.append("%s:%d: %s" % (rel, line, message))

    def check_link(self, path, rel, line, dest):
        dest = dest.strip()
        if dest.startswith("<") and dest.endswith(">"):
            dest = dest[1:-1]
        if SCHEME_RE.match(dest):
            if dest.split(":", 1)[0].lower() in SKIP_SCHEMES:
                return
            self.fail(rel, line, "link '%s': a scheme other than http(s)/mailto" % dest)
            return
        if not dest:
            self.fail(rel, line, "empty link")
            return
        target, _, anchor = dest.partition("#")
        target = urllib.parse.unquote(target)
        anchor = urllib.parse.unquote(anchor)
        if target:
            base = self.root if target.startswith("/") else os.path.dirname(path)
            full = os.path.realpath(os.path.join(base, target.lstrip("/")))
            if full != self.root and not full.startswith(self.root + os.sep):
                self.fail(rel, line, "link '%s' leaves the repository" % dest)
                return
            if not os.path.exists(full):
                self.fail(rel, line, "link '%s': no such file or folder" % dest)
                return
        else:
            full = path
        if "#" in dest:
            if full.endswith(".md") and os.path.isfile(full):
                if anchor not in self.anchors(full):
                    self.fail(rel, line, "link '%s': no heading or id '%s' in %s"
                              % (dest, anchor, os.path.relpath(full, self.root)))
                    return
            elif not (os.path.isfile(full) and LINE_ANCHOR_RE.match(anchor)):
                self.fail(rel, line, "link '%s': anchor '%s' cannot be checked in %s"
                          % (dest, anchor, os.path.relpath(full, self.root)))
                return
        self.passed += 1

    def check_file(self, path):
        rel = os.path.relpath(path, self.root)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        body = strip_code(text)

        def line_of(offset):
            return body.count("\n", 0, offset) + 1

        definitions = {}
        for m in REFDEF_RE.finditer(body):
            definitions[" ".join(m.group(1).lower().split())] = m.group(2)
            self.check_link(path, rel, line_of(m.start()), m.group(2))
        for m in INLINE_RE.finditer(body):
            self.check_link(path, rel, line_of(m.start()), m.group(1))
        for m in HTML_RE.finditer(body):
            self.check_link(path, rel, line_of(m.start()), m.group(1)[1:-1])
        for m in REFUSE_RE.finditer(body):
            label = " ".join((m.group(2) or m.group(1)).lower().split())
            if label in definitions:
                self.passed += 1
            else:
                self.fail(rel, line_of(m.start()), "reference [%s] is not defined" % label)

    def check_readme_size(self):
        readme = os.path.join(self.root, "README.md")
        size = os.path.getsize(readme)
        if size > README_LIMIT:
            self.fail("README.md", 1, "%d bytes, more than the %d a short user's guide may "
                      "hold: move detail into docs/" % (size, README_LIMIT))
        else:
            self.passed += 1
        return size

    def run(self):
        files = [os.path.join(self.root, "README.md")]
        docs = os.path.join(self.root, "docs")
        if os.path.isdir(docs):
            files += sorted(os.path.join(docs, n) for n in os.listdir(docs) if n.endswith(".md"))
        for path in files:
            if os.path.isfile(path):
                self.check_file(path)
            else:
                self.fail(os.path.relpath(path, self.root), 0, "missing")
        size = self.check_readme_size() if os.path.isfile(files[0]) else 0
        return files, size


def self_test():
    """The checker on a scratch tree: it must find exactly the broken links planted there."""
    pages = {
        "README.md": """# Title

[ok file](docs/a.md) [ok anchor](docs/a.md#second-heading) [ok local](#title)
![ok image](docs/pic.png) [ok dir](docs) [ok ref][r1] [r1][]
[broken file](docs/missing.md)
[broken anchor](docs/a.md#no-such-heading)
[outside](../outside.md)
[broken local](#nope)
![broken image](docs/missing.png)
[broken ref][nodef]
<a href="docs/a.md#gyre_nsocks-and-more">ok html</a>
[skipped](https://example.com/x#y) [skipped](mailto:a@b.c)
`[in code](docs/missing.md)`
<!-- [in a comment](docs/missing.md) -->
```
[in a fence](docs/missing.md)
```

[r1]: docs/a.md#repeated-1
""",
        "docs/a.md": """# A page

## Second heading
## Repeated
## Repeated
## GYRE_NSOCKS and more
## What's `new`: C++ (v2)

[ok](../README.md#title) [ok](#whats-new-c-v2) [ok](#repeated) [broken](#repeated-2)
""",
        "docs/pic.png": "",
    }
    expected = {
        ("README.md", 5, "docs/missing.md"), ("README.md", 6, "no-such-heading"),
        ("README.md", 7, "leaves the repository"), ("README.md", 8, "nope"),
        ("README.md", 9, "docs/missing.png"), ("README.md", 10, "nodef"),
        ("docs/a.md", 9, "repeated-2"),
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "repo")
        for name, text in pages.items():
            os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
            with open(os.path.join(root, name), "w", encoding="utf-8") as f:
                f.write(text)
        with open(os.path.join(tmp, "outside.md"), "w") as f:
            f.write("# outside\n")
        checker = Checker(root)
        checker.run()
        found = list(checker.failures)
        problems = []
        for rel, line, needle in sorted(expected):
            hits = [f for f in found if f.startswith("%s:%d:" % (rel, line)) and needle in f]
            if len(hits) != 1:
                problems.append("expected one failure at %s:%d naming '%s'" % (rel, line, needle))
            for h in hits:
                found.remove(h)
        problems += ["unexpected failure: " + f for f in found]
        if checker.passed != 13:   # 12 links and the README size
            problems.append("expected 13 passed, got %d" % checker.passed)
        # The size limit fails too.
        with open(os.path.join(root, "README.md"), "a") as f:
            f.write("x" * README_LIMIT)
        big = Checker(root)
        big.check_readme_size()
        if not any("more than the" in f for f in big.failures):
            problems.append("a README over the limit passed")
    if problems:
        for p in problems:
            print("self-test: " + p)
        return False
    print("self-test: the checker finds the %d planted broken links, passes the rest, and "
          "fails a README over %d bytes" % (len(expected), README_LIMIT))
    return True


def main(argv):
    args = [a for a in argv if a != "--self-test"]
    if len(args) > 1 or any(a.startswith("-") for a in args):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    ok = self_test() if "--self-test" in argv else True
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    checker = Checker(root)
    files, size = checker.run()
    for f in checker.failures:
        print(f)
    print("%d files, README.md %d bytes (at most %d): %d passed, %d failed"
          % (len(files), size, README_LIMIT, checker.passed, len(checker.failures)))
    return 0 if ok and not checker.failures else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
