#!/usr/bin/env bash
# The repository stands on its own: no tracked file points outside it (a clone has
# nothing beside it), and documents state what holds now rather than the history of the
# work (that lives in git log). Exit 1 with the offending lines, 0 when clean.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
report() {  # $1: what is wrong; $2: the matching lines
  if [ -n "$2" ]; then
    printf 'check_standalone: %s:\n%s\n' "$1" "$2" >&2
    status=1
  fi
}
report "tracked files point outside the repository" \
  "$(git grep -n -I -e '\.\./shared' -- . ':!scripts/check_standalone.sh')"
report "tracked files narrate the history of the work" \
  "$(git grep -n -I -i -E '(first|second|third|fourth|fifth|sixth|seventh|eighth|this|earlier|previous|last|next) session' -- . ':!scripts/check_standalone.sh')"
# Every spec file the code cites exists.
for f in $(git grep -h -o -I -E 'docs/spec/[a-z_]+\.md' -- . | sort -u); do
  [ -f "$f" ] || report "a cited spec file is missing" "$f"
done
exit $status
