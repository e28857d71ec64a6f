#!/usr/bin/env bash
# FlashMLA's own decode tests through dualops.compat.flash_mla (docs/compat.md).
#
#   bash scripts/flashmla_tests.sh prepare SOURCE   # SOURCE: a FlashMLA git repository (its .git
#                                                   # folder or a bare mirror) or a checkout
#   bash scripts/flashmla_tests.sh run [ARGS]       # python scripts/flashmla_tests.py ARGS
#
# `prepare` copies FlashMLA's tests/ folder, LICENSE and README.md at commit $FLASHMLA_COMMIT
# (default 9241ae3) into the git-ignored folder .flashmla_src/ (FLASHMLA_SRC to change it), small
# enough to travel with the worktree to a GPU machine. Nothing of FlashMLA is committed here.
set -euo pipefail
cmd=${1:-}
shift || true
DEST=${FLASHMLA_SRC:-.flashmla_src}
COMMIT=${FLASHMLA_COMMIT:-9241ae3}
case "$cmd" in
  prepare)
    src=${1:?usage: flashmla_tests.sh prepare SOURCE (a FlashMLA git repository or checkout)}
    rm -rf "$DEST" && mkdir -p "$DEST"
    if git --git-dir="$src" rev-parse --verify -q "$COMMIT^{commit}" > /dev/null 2>&1; then
      gitdir=$src
    elif git -C "$src" rev-parse --verify -q "$COMMIT^{commit}" > /dev/null 2>&1; then
      gitdir=$(git -C "$src" rev-parse --absolute-git-dir)
    else
      gitdir=
    fi
    if [ -n "$gitdir" ]; then
      git --git-dir="$gitdir" archive "$COMMIT" tests LICENSE README.md | tar -x -C "$DEST"
      git --git-dir="$gitdir" rev-parse "$COMMIT" > "$DEST/COMMIT"
    else
      [ -d "$src/tests" ] || { echo "prepare: $src has neither commit $COMMIT nor a tests/ folder" >&2; exit 1; }
      cp -r "$src/tests" "$DEST/" && cp "$src/LICENSE" "$src/README.md" "$DEST/" 2>/dev/null || true
      echo "unknown (copied from $src)" > "$DEST/COMMIT"
    fi
    echo "$DEST: FlashMLA tests at $(cat "$DEST/COMMIT"), $(du -sh "$DEST" | cut -f1)"
    ;;
  run)
    exec "${PYTHON:-python3}" "$(dirname "$0")/flashmla_tests.py" --src "$DEST" "$@"
    ;;
  *)
    sed -n 2,10p "$0"
    exit 2
    ;;
esac
