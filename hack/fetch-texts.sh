#!/usr/bin/env bash
# Provides the word-count input texts outside the project's own machines (GitHub Actions), where
# ../shared/data/text is not present: downloads the two public-domain texts the project uses
# (Moby Dick from Project Gutenberg, tinyshakespeare from char-rnn) into DIR.
# The e2e output check recomputes the expected counts from whatever texts it is given, so a
# different edition of a text changes nothing in the verdict.
#   hack/fetch-texts.sh [DIR]      (default ../shared/data/text; existing files are kept)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${1:-$ROOT/../shared/data/text}"
mkdir -p "$DIR"

fetch() { # URL FILE
  if [[ -s "$DIR/$2" ]]; then
    echo "fetch-texts: $DIR/$2 present"
    return 0
  fi
  curl -fsSL --retry 3 -o "$DIR/$2.tmp" "$1"
  mv "$DIR/$2.tmp" "$DIR/$2"
  echo "fetch-texts: $DIR/$2 ($(wc -l <"$DIR/$2") lines)"
}

fetch https://www.gutenberg.org/cache/epub/2701/pg2701.txt moby_dick.txt
fetch https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt tinyshakespeare.txt
