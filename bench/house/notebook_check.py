#!/usr/bin/env python3
"""Lists code comments that read like a lab notebook: measured figures, issue numbers, "the VM",
git-ignored datasets or ../shared/FINDINGS.md cited as evidence.

Usage: python3 bench/house/notebook_check.py [--count]   (run from the repository root)
Prints `path:line: comment` per hit and exits 1 when there is any; figures belong in
docs/accuracy.md, and comments say why in one sentence.
"""
import re
import subprocess
import sys

# A figure: a percentage, a duration with its unit, a speed-up, a rate.
FIGURE = re.compile(
    r"\d(\.\d+)?\s?%"
    r"|\b\d+(\.\d+)?\s?(ms|µs|us|ns|s|min|h)\b(?!\w)"
    r"|\b\d+(\.\d+)?\s?x\s+(faster|slower|fewer|more|less)"
    r"|\b\d+(\.\d+)?\s?(GFLOP/s|GB/s|TFLOP/s)\b"
)
# Words that make a figure a measurement rather than a constant, a spec or a test's made-up data.
MEASURED = re.compile(
    r"MAPE|held[- ]out|measured \d|\btook\b|\bscored?\b|\bscores\b|\bwent\b"
    r"|\breached\b|on this project's|slow phases|\bgives\b|\bran at\b"
    r"|\bagree[sd]? within\b|\brepeats within\b|\bcame out\b|\bcome out\b",
    re.IGNORECASE,
)
# Figures measured to a decimal place, or as a range of runs, are measurements whatever the words.
MEASURED_FIGURE = re.compile(
    r"\d+\.\d+\s?%"
    r"|\d+(\.\d+)?\s?-\s?\d+(\.\d+)?\s?(%|ms|s|us|µs|min|GFLOP/s|GB/s)(?!\w)"
    r"|\b\d+ min \d+ s\b"
)
NOTEBOOK = re.compile(
    r"(?i:\bissues?\s+#?\d+)"
    r"|\bthe VM\b|\bVM'?s?\b"
    r"|FINDINGS\.md"
    r"|\b(19|20)\d\d-\d\d-\d\d\b"
)
# A git-ignored dataset cited as evidence for a figure (examples and run instructions name them
# as inputs, which is what they are for).
EVIDENCE = re.compile(r"`?datasets/(?!samples\b|README|<)[\w.-]+")
SOURCES = (".rs", ".py", ".sh", ".toml", "justfile")


def comment_of(path, line):
    """The comment part of one line, or None."""
    if path.endswith(".rs"):
        m = re.search(r"//[/!]?(.*)$", line)
        if not m:
            return None
        before = line[: m.start()]
        # `//` inside a string literal (a URL) is not a comment.
        if before.count('"') % 2 == 1:
            return None
        return m.group(1)
    m = re.search(r"(^|\s)#(?!!)(.*)$", line)
    if not m:
        return None
    before = line[: m.start()]
    if before.count('"') % 2 == 1 or before.count("'") % 2 == 1:
        return None
    return m.group(2)


def docstring_lines(path, lines):
    """Line numbers inside Python docstrings, which are comments too."""
    inside, out = False, set()
    for i, line in enumerate(lines):
        quotes = line.count('"""') + line.count("'''")
        if inside or quotes:
            out.add(i)
        if quotes % 2 == 1:
            inside = not inside
    return out


def main():
    files = subprocess.run(
        ["git", "ls-files", "crates", "tests", "python", "bench", "justfile", ".ci"],
        capture_output=True, text=True, check=True,
    ).stdout.split()
    files = [f for f in files if f.endswith(SOURCES) and "/fixtures/" not in f]
    files = [f for f in files if f != "bench/house/notebook_check.py"]
    hits = []
    for path in files:
        try:
            lines = open(path, encoding="utf-8").read().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        doc = docstring_lines(path, lines) if path.endswith(".py") else set()
        for i, line in enumerate(lines):
            text = comment_of(path, line)
            if text is None and i in doc:
                text = line
            if text is None:
                continue
            figure = FIGURE.search(text) and (MEASURED.search(text) or MEASURED_FIGURE.search(text))
            evidence = (
                EVIDENCE.search(text)
                and (FIGURE.search(text) or MEASURED.search(text))
                and not path.startswith(("bench/", "justfile"))
            )
            if figure or evidence or NOTEBOOK.search(text):
                hits.append(f"{path}:{i + 1}: {line.strip()}")
    if "--count" in sys.argv:
        print(len(hits))
    else:
        print("\n".join(hits))
    sys.exit(1 if hits else 0)


if __name__ == "__main__":
    main()
